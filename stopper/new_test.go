package stopper_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/stopper"
	"github.com/gpuwarden/gpuwarden/stopper/stoppertest"
)

// recorder is an Exec that records and never runs anything: no test ever
// runs a real shutdown.
type recorder struct {
	ran [][]string
	err error
}

func (r *recorder) exec(_ context.Context, argv []string) error {
	r.ran = append(r.ran, append([]string(nil), argv...))
	return r.err
}

// found pretends every command exists.
func found(name string) (string, error) { return "/usr/sbin/" + name, nil }

func TestOSShutdown(t *testing.T) {
	tests := []struct {
		provider string
		proven   bool
		billing  string
		fix      string
	}{
		{"aws", true, gpuwarden.NodeStopped, ""},
		{"gcp", true, gpuwarden.NodeStopped, ""},
		{"azure", false, gpuwarden.NodePoweredOffStillBilling, "--stop api (azure-deallocate)"},
		{"lambda", false, gpuwarden.NodePoweredOffStillBilling, "--stop terminate"},
		{"runpod", false, gpuwarden.NodePoweredOffStillBilling, "--stop api (runpod-stop)"},
		{"hetzner", false, gpuwarden.NodePoweredOffStillBilling, "DELETE https://api.hetzner.cloud/v1/servers/{id}"},
		{"nebius", false, gpuwarden.NodePoweredOffStillBilling, "stop"},
		{"tensordock", false, gpuwarden.NodePoweredOffStillBilling, "assumes the box bills on"},
		{"", false, gpuwarden.NodePoweredOffStillBilling, "assumes the box bills on"},
	}
	for _, tt := range tests {
		t.Run("provider="+tt.provider, func(t *testing.T) {
			rec := &recorder{}
			s := stopper.NewOSShutdown(tt.provider, nil, rec.exec)
			s.LookPath = found
			p, err := s.Prove(context.Background())
			wantProof(t, p, err, gpuwarden.StopOSShutdown, tt.proven, gpuwarden.EFinding, tt.fix)
			if len(rec.ran) != 0 {
				t.Fatalf("Prove ran %q", rec.ran)
			}
			out, err := s.Stop(context.Background())
			wantOutcome(t, out, err, gpuwarden.StopOSShutdown, tt.billing, "shutting-down")
			if len(rec.ran) != 1 || strings.Join(rec.ran[0], " ") != "shutdown -h now" {
				t.Errorf("ran %q, want shutdown -h now once", rec.ran)
			}
		})
	}
}

func TestOSShutdownCannotRun(t *testing.T) {
	s := stopper.NewOSShutdown("aws", []string{"no-such-shutdown-binary"}, (&recorder{}).exec)
	s.LookPath = exec.LookPath
	p, err := s.Prove(context.Background())
	wantProof(t, p, err, gpuwarden.StopOSShutdown, false, gpuwarden.EEnvironment, "install no-such-shutdown-binary")

	failing := &recorder{err: errors.New("exit status 1: must be root")}
	s = stopper.NewOSShutdown("aws", nil, failing.exec)
	out, err := s.Stop(context.Background())
	if errCode(err) != gpuwarden.EEnvironment || out.Billing != gpuwarden.NodeRunning {
		t.Errorf("failed shutdown = %+v, %v; want environment error, still running", out, err)
	}
}

func TestCommand(t *testing.T) {
	rec := &recorder{}
	c := stopper.NewCommand("azure", []string{"az", "vm", "deallocate", "--ids", "/subscriptions/x"}, rec.exec)
	c.LookPath = found
	p, err := c.Prove(context.Background())
	wantProof(t, p, err, gpuwarden.StopCommand, false, gpuwarden.EFinding, "--stop api (azure-deallocate)")
	if len(p.Checked) != 1 || !strings.Contains(p.Checked[0], "az vm deallocate") {
		t.Errorf("checked %q, want the command found", p.Checked)
	}
	out, err := c.Stop(context.Background())
	wantOutcome(t, out, err, gpuwarden.StopCommand, gpuwarden.NodeStopRequested, "")
	if len(rec.ran) != 1 || rec.ran[0][0] != "az" {
		t.Errorf("ran %q", rec.ran)
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		provider string
		mode     stopper.Mode
		guard    bool
		method   string
		code     gpuwarden.ErrorCode
		msg      string
	}{
		{"aws", stopper.ModeAuto, false, gpuwarden.StopOSShutdown, "", ""},
		{"aws", stopper.ModeAPI, false, gpuwarden.StopAWS, "", ""},
		{"gcp", "", false, gpuwarden.StopOSShutdown, "", ""},
		{"gcp", stopper.ModeAPI, false, gpuwarden.StopGCP, "", ""},
		{"azure", stopper.ModeAuto, false, gpuwarden.StopAzureDeallocate, "", ""},
		{"Azure", stopper.ModeOS, false, gpuwarden.StopOSShutdown, "", ""},
		{"runpod", stopper.ModeAuto, false, gpuwarden.StopRunPod, "", ""},
		{"vast", stopper.ModeAuto, false, gpuwarden.StopVast, "", ""},
		{"vastai", stopper.ModeAPI, false, gpuwarden.StopVast, "", ""},
		{"lambda", stopper.ModeAuto, true, "", gpuwarden.EFinding, "idle stop would NOT stop billing here: an OS shutdown keeps lambda billing"},
		{"lambda", stopper.ModeAPI, true, "", gpuwarden.EInvalid, "lambda has no stop"},
		{"lambda", stopper.ModeTerminate, true, gpuwarden.StopLambdaTerminate, "", ""},
		{"lambda", stopper.ModeTerminate, false, "", gpuwarden.EInvalid, "needs a guard"},
		{"azure", stopper.ModeTerminate, true, "", gpuwarden.EInvalid, "not azure"},
		{"hetzner", stopper.ModeAuto, false, "", gpuwarden.EFinding, "idle stop would NOT stop billing here: an OS shutdown keeps hetzner billing"},
		{"hetzner", stopper.ModeAPI, false, "", gpuwarden.EInvalid, "no API client for hetzner"},
		{"crusoe", stopper.ModeAuto, false, "", gpuwarden.EFinding, "is unknown; gpuwarden has no API client for crusoe's stop"},
		{"tensordock", stopper.ModeAuto, false, "", gpuwarden.EFinding, "not documented"},
		{"", stopper.ModeAuto, false, gpuwarden.StopOSShutdown, "", ""},
		{"hetzner", stopper.ModeCommand, false, gpuwarden.StopCommand, "", ""},
		{"aws", "sometimes", false, "", gpuwarden.EInvalid, "unknown stop mode"},
	}
	for _, tt := range tests {
		t.Run(tt.provider+"/"+string(tt.mode), func(t *testing.T) {
			cfg := stopper.Config{Provider: tt.provider, Mode: tt.mode, Exec: (&recorder{}).exec}
			if tt.mode == stopper.ModeCommand {
				cfg.Command = []string{"hcloud", "server", "delete", "gpu-1"}
			}
			if tt.guard {
				cfg.MayTerminate = allow
			}
			s, err := stopper.New(cfg)
			if tt.code != "" {
				if errCode(err) != tt.code || !strings.Contains(err.Error(), tt.msg) || gpuwarden.ErrorHint(err) == "" {
					t.Fatalf("New = %v (hint %q), want %s containing %q with a hint", err, gpuwarden.ErrorHint(err), tt.code, tt.msg)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if s.Method() != tt.method {
				t.Errorf("method = %s, want %s", s.Method(), tt.method)
			}
		})
	}
}

// TestNewUsesEndpoints: the endpoints given reach the stopper New builds.
func TestNewUsesEndpoints(t *testing.T) {
	f := stoppertest.NewAzure()
	defer f.Close()
	s, err := stopper.New(stopper.Config{Provider: "azure",
		Endpoints: stopper.Endpoints{AzureMetadata: f.IMDS.URL, AzureManagement: f.ARM.URL},
		Options:   options(newClock(), nil)})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := s.Prove(context.Background()); err != nil || !p.Proven {
		t.Errorf("Prove through New = %+v, %v", p, err)
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]stopper.Mode{"": stopper.ModeAuto, " API ": stopper.ModeAPI, "terminate": stopper.ModeTerminate} {
		if got, err := stopper.ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := stopper.ParseMode("halt"); errCode(err) != gpuwarden.EInvalid {
		t.Errorf("ParseMode(halt) err = %v, want invalid", err)
	}
}

// TestLookupEnv reads this process's environment first.
func TestLookupEnv(t *testing.T) {
	t.Setenv("GPUWARDEN_STOPPER_TEST_VAR", "here")
	if got := stopper.LookupEnv("GPUWARDEN_STOPPER_TEST_VAR"); got != "here" {
		t.Errorf("LookupEnv = %q, want here", got)
	}
	if got := stopper.LookupEnv("GPUWARDEN_STOPPER_TEST_NO_SUCH_VAR"); got != "" {
		t.Errorf("LookupEnv of an unset var = %q", got)
	}
}

// BenchmarkProve measures what proving the stop adds to `gpuwarden up`'s
// start against the loopback fakes: the budget is 1 s; each run starts
// from an empty cache (a new stopper), as a start does.
func BenchmarkProve(b *testing.B) {
	az := stoppertest.NewAzure()
	defer az.Close()
	g := stoppertest.NewGCP()
	defer g.Close()
	rp := stoppertest.NewRunPod("pod", "key")
	defer rp.Close()
	va := stoppertest.NewVast(7, "key")
	defer va.Close()
	la := stoppertest.NewLambda("inst", "key")
	defer la.Close()
	env := map[string]string{"RUNPOD_POD_ID": "pod", "RUNPOD_API_KEY": "key", "CONTAINER_ID": "7", "VAST_API_KEY": "key",
		"LAMBDA_INSTANCE_ID": "inst", "LAMBDA_API_KEY": "key"}
	o := stopper.Options{Client: stopper.MetadataClient(), Getenv: func(k string) string { return env[k] }}
	cases := []struct {
		name string
		new  func() gpuwarden.BillStopper
	}{
		{"azure", func() gpuwarden.BillStopper {
			s := stopper.NewAzure(o)
			s.Metadata, s.Management = az.IMDS.URL, az.ARM.URL
			return s
		}},
		{"gcp", func() gpuwarden.BillStopper {
			s := stopper.NewGCP(o)
			s.Metadata, s.Compute = g.Metadata.URL, g.Compute.URL
			return s
		}},
		{"runpod", func() gpuwarden.BillStopper { s := stopper.NewRunPod(o); s.API = rp.API(); return s }},
		{"vast", func() gpuwarden.BillStopper { s := stopper.NewVast(o); s.API = va.API(); return s }},
		{"lambda", func() gpuwarden.BillStopper { s := stopper.NewLambda(o, allow); s.API = la.API(); return s }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var worst time.Duration
			for b.Loop() {
				start := time.Now()
				if p, err := c.new().Prove(context.Background()); err != nil || !p.Proven {
					b.Fatalf("prove: %v", err)
				}
				worst = max(worst, time.Since(start))
			}
			b.ReportMetric(float64(worst.Microseconds()), "worst-µs")
			b.ReportMetric(float64(time.Second.Microseconds()), "budget-µs")
		})
	}
}

// TestParseModeReadsEveryPlanMode: the plan file's on_hours.stop words
// (gpuwarden.StopModes) are the modes ParseMode reads.
func TestParseModeReadsEveryPlanMode(t *testing.T) {
	for _, m := range gpuwarden.StopModes {
		if got, err := stopper.ParseMode(m); err != nil || string(got) != m {
			t.Errorf("ParseMode(%q) = %q, %v", m, got, err)
		}
	}
}
