package stopper_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/stopper"
	"github.com/gpuwarden/gpuwarden/stopper/stoppertest"
)

func TestRunPodProve(t *testing.T) {
	tests := []struct {
		name   string
		env    map[string]string
		proven bool
		code   gpuwarden.ErrorCode
		fix    string
	}{
		{"pod key", map[string]string{"RUNPOD_POD_ID": "xedezhzb9la3ye", "RUNPOD_API_KEY": "rpa_good"}, true, "", ""},
		{"bad key", map[string]string{"RUNPOD_POD_ID": "xedezhzb9la3ye", "RUNPOD_API_KEY": "rpa_bad"},
			false, gpuwarden.EUnauthorized, "RUNPOD_API_KEY"},
		{"other pod", map[string]string{"RUNPOD_POD_ID": "someoneelse", "RUNPOD_API_KEY": "rpa_good"},
			false, gpuwarden.ENotFound, "RUNPOD_POD_ID"},
		{"not in a pod", map[string]string{"RUNPOD_API_KEY": "rpa_good"}, false, gpuwarden.EEnvironment, "RUNPOD_POD_ID"},
		{"no key", map[string]string{"RUNPOD_POD_ID": "xedezhzb9la3ye"}, false, gpuwarden.EUnauthorized, "RUNPOD_API_KEY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := stoppertest.NewRunPod("xedezhzb9la3ye", "rpa_good")
			defer f.Close()
			r := stopper.NewRunPod(options(newClock(), tt.env))
			r.API = f.API()
			p, err := r.Prove(context.Background())
			wantProof(t, p, err, gpuwarden.StopRunPod, tt.proven, tt.code, tt.fix)
			if f.Stops() != 0 {
				t.Errorf("Prove stopped the pod")
			}
			if tt.proven && !strings.Contains(strings.Join(p.Checked, "\n"), "no dry run") {
				t.Errorf("checked %q does not say what a read cannot prove", p.Checked)
			}
		})
	}
}

func TestRunPodStop(t *testing.T) {
	env := map[string]string{"RUNPOD_POD_ID": "xedezhzb9la3ye", "RUNPOD_API_KEY": "rpa_good"}
	tests := []struct {
		name    string
		setup   func(*stoppertest.RunPod)
		billing string
		state   string
	}{
		{"exited", func(f *stoppertest.RunPod) { f.SettleAfter(2) }, gpuwarden.NodeStopped, "EXITED"},
		{"still running", func(f *stoppertest.RunPod) { f.Stuck() }, gpuwarden.NodeStopRequested, "RUNNING"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := stoppertest.NewRunPod("xedezhzb9la3ye", "rpa_good")
			defer f.Close()
			tt.setup(f)
			r := stopper.NewRunPod(options(newClock(), env))
			r.API = f.API()
			out, err := r.Stop(context.Background())
			wantOutcome(t, out, err, gpuwarden.StopRunPod, tt.billing, tt.state)
			if f.Stops() != 1 || f.Count(http.MethodPost, "/v1/pods/xedezhzb9la3ye/stop") != 1 {
				t.Errorf("stop requests: %v", f.Calls())
			}
		})
	}
	t.Run("read-only key", func(t *testing.T) {
		f := stoppertest.NewRunPod("xedezhzb9la3ye", "rpa_good")
		defer f.Close()
		f.ReadOnly()
		r := stopper.NewRunPod(options(newClock(), env))
		r.API = f.API()
		out, err := r.Stop(context.Background())
		if errCode(err) != gpuwarden.EForbidden || out.Billing != gpuwarden.NodeRunning || f.DesiredStatus() != "RUNNING" {
			t.Errorf("Stop = %+v, %v; want forbidden and still running", out, err)
		}
	})
}

func TestVastProve(t *testing.T) {
	tests := []struct {
		name   string
		env    map[string]string
		proven bool
		code   gpuwarden.ErrorCode
		fix    string
		from   string
	}{
		{"user key", map[string]string{"CONTAINER_ID": "329838", "VAST_API_KEY": "vk"}, true, "", "", "VAST_API_KEY"},
		{"container key", map[string]string{"CONTAINER_ID": "329838", "CONTAINER_API_KEY": "vk"}, true, "", "", "CONTAINER_API_KEY"},
		{"label", map[string]string{"VAST_CONTAINERLABEL": "C.329838", "VAST_API_KEY": "vk"}, true, "", "", "VAST_API_KEY"},
		{"bad key", map[string]string{"CONTAINER_ID": "329838", "VAST_API_KEY": "nope"}, false, gpuwarden.EUnauthorized, "VAST_API_KEY", ""},
		{"other instance", map[string]string{"CONTAINER_ID": "1", "VAST_API_KEY": "vk"}, false, gpuwarden.ENotFound, "CONTAINER_ID", ""},
		{"not in vast", map[string]string{"VAST_API_KEY": "vk"}, false, gpuwarden.EEnvironment, "CONTAINER_ID", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := stoppertest.NewVast(329838, "vk")
			defer f.Close()
			v := stopper.NewVast(options(newClock(), tt.env))
			v.API = f.API()
			p, err := v.Prove(context.Background())
			wantProof(t, p, err, gpuwarden.StopVast, tt.proven, tt.code, tt.fix)
			if tt.proven && !strings.Contains(p.Checked[0], "API key from "+tt.from) {
				t.Errorf("checked %q, want the key from %s", p.Checked, tt.from)
			}
			if f.Stops() != 0 {
				t.Error("Prove stopped the instance")
			}
		})
	}
}

func TestVastStop(t *testing.T) {
	env := map[string]string{"CONTAINER_ID": "329838", "CONTAINER_API_KEY": "vk"}
	tests := []struct {
		name    string
		setup   func(*stoppertest.Vast)
		billing string
		state   string
	}{
		{"stopped", func(f *stoppertest.Vast) { f.SettleAfter(1) }, gpuwarden.NodeStopped, "stopped"},
		{"still running", func(f *stoppertest.Vast) { f.Stuck() }, gpuwarden.NodeStopRequested, "running"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := stoppertest.NewVast(329838, "vk")
			defer f.Close()
			tt.setup(f)
			v := stopper.NewVast(options(newClock(), env))
			v.API = f.API()
			out, err := v.Stop(context.Background())
			wantOutcome(t, out, err, gpuwarden.StopVast, tt.billing, tt.state)
			var put *stoppertest.Call
			for _, c := range f.Calls() {
				if c.Method == http.MethodPut {
					put = &c
				}
			}
			if put == nil || put.Path != "/api/v0/instances/329838/" || put.Body != `{"state":"stopped"}` ||
				put.Header.Get("Content-Type") != "application/json" {
				t.Errorf("PUT = %+v, want the documented stop", put)
			}
		})
	}
	t.Run("scoped key", func(t *testing.T) {
		f := stoppertest.NewVast(329838, "vk")
		defer f.Close()
		f.ReadOnly()
		v := stopper.NewVast(options(newClock(), env))
		v.API = f.API()
		out, err := v.Stop(context.Background())
		if errCode(err) != gpuwarden.EForbidden || out.Billing != gpuwarden.NodeRunning || f.ActualStatus() != "running" {
			t.Errorf("Stop = %+v, %v; want forbidden and still running", out, err)
		}
	})
}

// lambdaEnv is a Lambda instance's environment as the launcher sets it.
var lambdaEnv = map[string]string{"LAMBDA_INSTANCE_ID": "0920582c7ff041399e34823a0be62549", "LAMBDA_API_KEY": "secret_key"}

func allow(context.Context) error { return nil }

func TestLambdaProve(t *testing.T) {
	tests := []struct {
		name   string
		env    map[string]string
		guard  func(context.Context) error
		proven bool
		code   gpuwarden.ErrorCode
		fix    string
	}{
		{"guarded", lambdaEnv, allow, true, "", ""},
		{"no guard", lambdaEnv, nil, false, gpuwarden.EInvalid, "MayTerminate"},
		{"bad key", map[string]string{"LAMBDA_INSTANCE_ID": lambdaEnv["LAMBDA_INSTANCE_ID"], "LAMBDA_API_KEY": "wrong"},
			allow, false, gpuwarden.EUnauthorized, "create a new one"},
		{"no instance id", map[string]string{"LAMBDA_API_KEY": "secret_key"}, allow, false, gpuwarden.EEnvironment, "LAMBDA_INSTANCE_ID"},
		{"unknown instance", map[string]string{"LAMBDA_INSTANCE_ID": "nope", "LAMBDA_API_KEY": "secret_key"},
			allow, false, gpuwarden.ENotFound, "LAMBDA_INSTANCE_ID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := stoppertest.NewLambda(lambdaEnv["LAMBDA_INSTANCE_ID"], "secret_key")
			defer f.Close()
			l := stopper.NewLambda(options(newClock(), tt.env), tt.guard)
			l.API = f.API()
			p, err := l.Prove(context.Background())
			wantProof(t, p, err, gpuwarden.StopLambdaTerminate, tt.proven, tt.code, tt.fix)
			if f.Terminations() != 0 {
				t.Error("Prove terminated the instance")
			}
			if tt.proven && !strings.Contains(strings.Join(p.Checked, "\n"), "losing the instance's disk") {
				t.Errorf("checked %q does not warn that terminate loses the disk", p.Checked)
			}
		})
	}
}

func TestLambdaStop(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(*stoppertest.Lambda)
		billing string
		state   string
	}{
		{"terminated", func(f *stoppertest.Lambda) { f.SettleAfter(2) }, gpuwarden.NodeStopped, "terminated"},
		{"gone", func(f *stoppertest.Lambda) { f.Vanish() }, gpuwarden.NodeStopped, "terminated"},
		{"still terminating", func(f *stoppertest.Lambda) { f.Stuck() }, gpuwarden.NodeStopRequested, "terminating"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := stoppertest.NewLambda(lambdaEnv["LAMBDA_INSTANCE_ID"], "secret_key")
			defer f.Close()
			tt.setup(f)
			guarded := 0
			l := stopper.NewLambda(options(newClock(), lambdaEnv), func(context.Context) error { guarded++; return nil })
			l.API = f.API()
			out, err := l.Stop(context.Background())
			wantOutcome(t, out, err, gpuwarden.StopLambdaTerminate, tt.billing, tt.state)
			if guarded != 1 || f.Terminations() != 1 {
				t.Errorf("guard asked %d times, %d terminations; want 1 and 1", guarded, f.Terminations())
			}
			for _, c := range f.Calls() {
				if c.Method == http.MethodPost && c.Body != `{"instance_ids":["0920582c7ff041399e34823a0be62549"]}` {
					t.Errorf("terminate body %s", c.Body)
				}
			}
		})
	}
}

// TestLambdaGuardRefuses: a guard that refuses stops the terminate before
// any request; the box is reported still billing.
func TestLambdaGuardRefuses(t *testing.T) {
	f := stoppertest.NewLambda(lambdaEnv["LAMBDA_INSTANCE_ID"], "secret_key")
	defer f.Close()
	undurable := errors.New("job train.py: checkpoint 41 is not durable yet")
	l := stopper.NewLambda(options(newClock(), lambdaEnv), func(context.Context) error { return undurable })
	l.API = f.API()
	out, err := l.Stop(context.Background())
	if !errors.Is(err, undurable) || errCode(err) != gpuwarden.EConflict {
		t.Errorf("err = %v, want the guard's refusal as a conflict", err)
	}
	if out.Billing != gpuwarden.NodeRunning || !strings.Contains(out.Detail, "not durable") {
		t.Errorf("outcome = %+v, want running with the guard's reason", out)
	}
	if n := len(f.Calls()); n != 0 || f.Status() != "active" {
		t.Errorf("%d API calls, instance %s; want none and active", n, f.Status())
	}
}
