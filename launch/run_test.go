package launch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

const awsID = `"InstanceId": "(i-[0-9a-f]+)"`

// TestRunPlanAThenPlanB is the scenario launch exists for: plan A has no
// capacity, plan B no quota, plan C launches.
func TestRunPlanAThenPlanB(t *testing.T) {
	e := newEnv(t, time.Second)
	opt := e.options(
		gpuwarden.Target{Name: "plan-a", Provider: "aws", Region: "us-east-1", Zone: "us-east-1a", Offer: "p5.48xlarge", Launch: script(t, "aws-capacity.sh")},
		gpuwarden.Target{Name: "plan-b", Provider: "aws", Region: "eu-west-1", Zone: "eu-west-1b", Offer: "p5.48xlarge", Launch: script(t, "aws-quota.sh")},
		gpuwarden.Target{Name: "plan-c", Provider: "runpod", Offer: "H100", Launch: script(t, "ok.sh"), InstanceID: awsID,
			Stop: "runpodctl remove pod {{.InstanceID}}"},
	)
	res, err := Run(context.Background(), opt, e.rec)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, e.out)
	}
	t.Logf("Out:\n%s", e.out)
	if res.Launched == nil || res.Launched.Target != "plan-c" {
		t.Fatalf("Launched = %+v, want plan-c", res.Launched)
	}
	if got, want := outcomes(res.Attempts), []string{"plan-a:failed", "plan-b:failed", "plan-c:launched"}; !equal(got, want) {
		t.Errorf("outcomes = %v, want %v", got, want)
	}
	var classes []string
	for _, a := range res.Attempts {
		classes = append(classes, a.Class)
	}
	if want := []string{"capacity", "quota", ""}; !equal(classes, want) {
		t.Errorf("classes = %q, want %q", classes, want)
	}
	if got := strings.Count(e.out.String(), "→ next target"); got != 2 {
		t.Errorf("Out has %d lines moving on, want 2:\n%s", got, e.out)
	}
	for _, want := range []string{
		"plan-a  aws us-east-1a p5.48xlarge  capacity: InsufficientInstanceCapacity — AWS has no p5.48xlarge free in us-east-1a now → next target",
		"plan-b  aws eu-west-1b p5.48xlarge  quota: VcpuLimitExceeded — the account's vCPU quota",
		"launched plan-c as " + res.Launched.Name,
	} {
		if !strings.Contains(e.out.String(), want) {
			t.Errorf("Out lacks %q:\n%s", want, e.out)
		}
	}
	if res.Launched.ProvisionSeconds <= 0 {
		t.Errorf("ProvisionSeconds = %v, want > 0", res.Launched.ProvisionSeconds)
	}
	if got, want := res.Launched.StopCommand, "runpodctl remove pod i-0abc123def4567890"; got != want {
		t.Errorf("StopCommand = %q, want %q", got, want)
	}
	// Every attempt was recorded pending, then final; the launch once more
	// when it was ready.
	var seen []string
	for _, r := range e.rec.Records() {
		seen = append(seen, r.Target+":"+r.Outcome)
	}
	if want := []string{"plan-a:", "plan-a:failed", "plan-b:", "plan-b:failed", "plan-c:", "plan-c:launched", "plan-c:launched"}; !equal(seen, want) {
		t.Errorf("records = %v, want %v", seen, want)
	}
	if got := Fold(e.rec.Records()); !equal(outcomes(got), outcomes(res.Attempts)) {
		t.Errorf("Fold(records) = %v, want %v", outcomes(got), outcomes(res.Attempts))
	}
	// The backoff doubled after each failure; Rand 0.5 means no jitter.
	if got, want := e.clock.Slept(), []time.Duration{2 * time.Second, 4 * time.Second}; !equal(got, want) {
		t.Errorf("slept %v, want %v", got, want)
	}
	// IDs and names.
	for i, a := range res.Attempts {
		if want := res.LaunchID + "-" + strconv.Itoa(i+1); a.ID != want {
			t.Errorf("attempt %d ID = %q, want %q", i, a.ID, want)
		}
		if !regexp.MustCompile(`^gw-[0-9a-f]{8}-[0-9]+$`).MatchString(a.Name) || len(a.Name) > 40 {
			t.Errorf("attempt %d Name = %q, not a valid instance name", i, a.Name)
		}
	}
	if !strings.Contains(res.Launched.Output, "name="+res.Launched.Name+" ") || !strings.Contains(res.Launched.Output, "launch="+res.LaunchID) {
		t.Errorf("the launch command did not see its GPUWARDEN_ variables:\n%s", res.Launched.Output)
	}
}

// TestRunScope checks what a failure rules out for the targets after it.
func TestRunScope(t *testing.T) {
	type tg = gpuwarden.Target
	tests := []struct {
		name    string
		targets func(t *testing.T) []tg
		want    []string // outcomes
		ran     []string
		reason  string // of the skipped attempt
	}{
		{
			name: "capacity in a zone skips that zone only",
			targets: func(t *testing.T) []tg {
				return []tg{
					{Name: "a", Provider: "aws", Region: "us-east-1", Zone: "us-east-1a", Offer: "p5.48xlarge", Launch: script(t, "aws-capacity.sh")},
					{Name: "b", Provider: "aws", Region: "us-east-1", Zone: "us-east-1a", Offer: "p5.48xlarge", Launch: script(t, "ok.sh")},
					{Name: "c", Provider: "aws", Region: "us-east-1", Zone: "us-east-1b", Offer: "p5.48xlarge", Launch: script(t, "ok.sh")},
				}
			},
			want:   []string{"a:failed", "b:skipped", "c:launched"},
			ran:    []string{"a", "c"},
			reason: "capacity for p5.48xlarge in aws us-east-1a ruled it out (a)",
		},
		{
			name: "capacity for one offer leaves other offers in the zone",
			targets: func(t *testing.T) []tg {
				return []tg{
					{Name: "a", Provider: "aws", Region: "us-east-1", Zone: "us-east-1a", Offer: "p5.48xlarge", Launch: script(t, "aws-capacity.sh")},
					{Name: "b", Provider: "aws", Region: "us-east-1", Zone: "us-east-1a", Offer: "g6e.xlarge", Launch: script(t, "ok.sh")},
				}
			},
			want: []string{"a:failed", "b:launched"},
			ran:  []string{"a", "b"},
		},
		{
			name: "capacity without a zone rules out the region",
			targets: func(t *testing.T) []tg {
				return []tg{
					{Name: "a", Provider: "aws", Region: "us-east-1", Offer: "p5.48xlarge", Launch: script(t, "aws-capacity.sh")},
					{Name: "b", Provider: "aws", Region: "us-east-1", Zone: "us-east-1c", Offer: "p5.48xlarge", Launch: script(t, "ok.sh")},
					{Name: "c", Provider: "aws", Region: "us-west-2", Offer: "p5.48xlarge", Launch: script(t, "ok.sh")},
				}
			},
			want:   []string{"a:failed", "b:skipped", "c:launched"},
			ran:    []string{"a", "c"},
			reason: "capacity for p5.48xlarge in aws us-east-1 ruled it out (a)",
		},
		{
			name: "quota skips the region, whatever the offer",
			targets: func(t *testing.T) []tg {
				return []tg{
					{Name: "a", Provider: "aws", Region: "us-east-1", Zone: "us-east-1a", Offer: "p5.48xlarge", Launch: script(t, "aws-quota.sh")},
					{Name: "b", Provider: "aws", Region: "us-east-1", Zone: "us-east-1b", Offer: "p4d.24xlarge", Launch: script(t, "ok.sh")},
					{Name: "c", Provider: "AWS", Region: "eu-west-1", Offer: "p5.48xlarge", Launch: script(t, "ok.sh")},
				}
			},
			want:   []string{"a:failed", "b:skipped", "c:launched"},
			ran:    []string{"a", "c"},
			reason: "quota in aws us-east-1 ruled it out (a)",
		},
		{
			name: "provider-scoped quota skips the provider",
			targets: func(t *testing.T) []tg {
				return []tg{
					{Name: "a", Provider: "gcp", Region: "us-central1", Zone: "us-central1-a", Offer: "a3-highgpu-8g", Launch: script(t, "gcp-global-quota.sh")},
					{Name: "b", Provider: "gcp", Region: "europe-west4", Zone: "europe-west4-b", Offer: "a2-highgpu-1g", Launch: script(t, "ok.sh")},
					{Name: "c", Provider: "aws", Region: "us-central1", Offer: "p5.48xlarge", Launch: script(t, "ok.sh")},
				}
			},
			want:   []string{"a:failed", "b:skipped", "c:launched"},
			ran:    []string{"a", "c"},
			reason: "quota in gcp ruled it out (a)",
		},
		{
			name: "regional quota on gcp leaves other regions",
			targets: func(t *testing.T) []tg {
				return []tg{
					{Name: "a", Provider: "gcp", Region: "us-central1", Zone: "us-central1-a", Launch: script(t, "gcp-quota.sh")},
					{Name: "b", Provider: "gcp", Region: "us-central1", Zone: "us-central1-b", Launch: script(t, "ok.sh")},
					{Name: "c", Provider: "gcp", Region: "europe-west4", Launch: script(t, "ok.sh")},
				}
			},
			want: []string{"a:failed", "b:skipped", "c:launched"},
			ran:  []string{"a", "c"},
		},
		{
			name: "gcp and azure capacity move on",
			targets: func(t *testing.T) []tg {
				return []tg{
					{Name: "a", Provider: "gcp", Region: "us-central1", Zone: "us-central1-a", Launch: script(t, "gcp-capacity.sh")},
					{Name: "b", Provider: "azure", Region: "eastus", Offer: "Standard_ND96isr_H100_v5", Launch: script(t, "azure-capacity.sh")},
					{Name: "c", Provider: "azure", Region: "westus3", Launch: script(t, "ok.sh")},
				}
			},
			want: []string{"a:failed", "b:failed", "c:launched"},
			ran:  []string{"a", "b", "c"},
		},
		{
			name: "a failure at one provider rules out nothing at another",
			targets: func(t *testing.T) []tg {
				return []tg{
					{Name: "a", Provider: "aws", Region: "us-east-1", Launch: script(t, "aws-quota.sh")},
					{Name: "b", Provider: "lambda", Region: "us-east-1", Launch: script(t, "ok.sh")},
				}
			},
			want: []string{"a:failed", "b:launched"},
			ran:  []string{"a", "b"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 0)
			res, err := Run(context.Background(), e.options(tc.targets(t)...), e.rec)
			if err != nil {
				t.Fatalf("Run: %v\n%s", err, e.out)
			}
			if got := outcomes(res.Attempts); !equal(got, tc.want) {
				t.Errorf("outcomes = %v, want %v\n%s", got, tc.want, e.out)
			}
			if got := e.ran(t); !equal(got, tc.ran) {
				t.Errorf("ran %v, want %v", got, tc.ran)
			}
			if tc.reason != "" {
				if got := res.Attempts[1].Reason; got != tc.reason {
					t.Errorf("skip reason = %q, want %q", got, tc.reason)
				}
				if !strings.Contains(e.out.String(), tc.reason) {
					t.Errorf("Out lacks the skip reason:\n%s", e.out)
				}
			}
			for _, a := range res.Attempts {
				if a.Outcome == gpuwarden.AttemptFailed && a.MayExist {
					t.Errorf("%s: a classified refusal must not be MayExist", a.Target)
				}
			}
		})
	}
}

// TestRunStops checks the failures that end a launch at once, before any
// later target runs.
func TestRunStops(t *testing.T) {
	tests := []struct {
		name   string
		script string
		rules  []gpuwarden.LaunchRule
		code   gpuwarden.ErrorCode
		msg    []string
	}{
		{"auth", "auth-fail.sh", nil, gpuwarden.EEnvironment, []string{"target plan-a:", "UnauthorizedOperation", "may not launch instances"}},
		{"config", "config-fail.sh", nil, gpuwarden.EInvalid, []string{"target plan-a:", "InvalidAMIID.NotFound", "image ID"}},
		{"config by the plan's own rule", "unknown-fail.sh",
			[]gpuwarden.LaunchRule{{Pattern: "connection reset by peer", Class: "config", Why: "the VPN is down"}},
			gpuwarden.EInvalid, []string{"connection reset by peer — the VPN is down"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 0)
			opt := e.options(
				gpuwarden.Target{Name: "plan-a", Provider: "aws", Region: "us-east-1", Launch: script(t, tc.script)},
				gpuwarden.Target{Name: "plan-b", Provider: "gcp", Region: "us-central1", Launch: script(t, "ok.sh")},
			)
			opt.Rules = tc.rules
			res, err := Run(context.Background(), opt, e.rec)
			if code(err) != tc.code {
				t.Fatalf("error %v (code %q), want code %q", err, code(err), tc.code)
			}
			for _, m := range tc.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q lacks %q", err, m)
				}
			}
			if gpuwarden.ErrorHint(err) == "" {
				t.Error("no hint")
			}
			if got := e.ran(t); !equal(got, []string{"plan-a"}) {
				t.Errorf("ran %v, want plan-a only", got)
			}
			if len(res.Attempts) != 1 || res.Launched != nil {
				t.Errorf("attempts %v, launched %v", outcomes(res.Attempts), res.Launched)
			}
			if !strings.Contains(e.out.String(), "→ stop") {
				t.Errorf("Out does not say it stopped:\n%s", e.out)
			}
			if n := len(e.rec.Records()); n != 2 {
				t.Errorf("%d records, want pending + final", n)
			}
		})
	}
}

// TestRunUnknownMovesOn checks that an unexplained failure moves on but
// keeps the attempt as one that may have left a box, with its ID and stop.
func TestRunUnknownMovesOn(t *testing.T) {
	e := newEnv(t, 0)
	opt := e.options(
		gpuwarden.Target{Name: "a", Provider: "aws", Region: "us-east-1", Launch: script(t, "unknown-fail.sh"), InstanceID: awsID,
			Stop: "aws ec2 terminate-instances --instance-ids {{.InstanceID}}"},
		gpuwarden.Target{Name: "b", Provider: "aws", Region: "us-east-1", Launch: script(t, "ok.sh")},
	)
	res, err := Run(context.Background(), opt, e.rec)
	if err != nil {
		t.Fatal(err)
	}
	a := res.Attempts[0]
	if !a.MayExist || a.Class != gpuwarden.FailUnknown || a.Outcome != gpuwarden.AttemptFailed {
		t.Errorf("attempt = %+v, want a failed unknown that may exist", a)
	}
	if a.InstanceID != "i-0fedcba9876543210" || a.StopCommand != "aws ec2 terminate-instances --instance-ids i-0fedcba9876543210" {
		t.Errorf("InstanceID %q StopCommand %q", a.InstanceID, a.StopCommand)
	}
	if !strings.Contains(a.Reason, "connection reset by peer") || a.ExitCode != 1 {
		t.Errorf("Reason %q exit %d", a.Reason, a.ExitCode)
	}
	if !strings.Contains(a.Output, "connection reset by peer") {
		t.Errorf("Output %q lacks the last line", a.Output)
	}
	if res.Launched == nil || res.Launched.Target != "b" {
		t.Errorf("Launched = %+v, want b", res.Launched)
	}
}

// pidAlive reports whether pid is a live process (a zombie is not: PID 1
// in a container may never reap it).
func pidAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// checkKilled fails unless the slow script's background helper is gone.
func checkKilled(t *testing.T, e *env) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dir, "pid"))
	if err != nil {
		t.Fatalf("slow.sh left no pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// SIGKILL to the group was sent before Run returned; give the kernel a
	// moment to finish the job rather than assert on timing.
	for i := 0; i < 200 && pidAlive(pid); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if pidAlive(pid) {
		t.Errorf("the launch command's background helper %d survived", pid)
	}
}

func TestRunTimeoutKillsGroup(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc")
	}
	e := newEnv(t, 0)
	opt := e.options(
		gpuwarden.Target{Name: "slow", Provider: "aws", Region: "us-east-1", Launch: script(t, "slow.sh"), TimeoutSeconds: 0.3},
		gpuwarden.Target{Name: "ok", Provider: "aws", Region: "us-east-1", Launch: script(t, "ok.sh")},
	)
	res, err := Run(context.Background(), opt, e.rec)
	if err != nil {
		t.Fatal(err)
	}
	a := res.Attempts[0]
	if !a.MayExist || a.Class != gpuwarden.FailUnknown || !strings.Contains(a.Reason, "timed out after 300ms") {
		t.Errorf("attempt = %+v", a)
	}
	if res.Launched == nil || res.Launched.Target != "ok" {
		t.Errorf("Launched = %+v, want ok", res.Launched)
	}
	checkKilled(t, e)
}

func TestRunDeadline(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc")
	}
	e := newEnv(t, 0)
	opt := e.options(
		gpuwarden.Target{Name: "slow", Provider: "aws", Region: "us-east-1", Launch: script(t, "slow.sh")},
		gpuwarden.Target{Name: "ok", Provider: "aws", Region: "us-east-1", Launch: script(t, "ok.sh")},
	)
	opt.Deadline = 300 * time.Millisecond
	res, err := Run(context.Background(), opt, e.rec)
	if code(err) != gpuwarden.EFinding || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("error %v (code %q), want a deadline finding", err, code(err))
	}
	if got := e.ran(t); !equal(got, []string{"slow"}) {
		t.Errorf("ran %v, want slow only", got)
	}
	if len(res.Attempts) != 1 || !res.Attempts[0].MayExist || res.Attempts[0].Outcome != gpuwarden.AttemptFailed {
		t.Errorf("attempts = %+v", res.Attempts)
	}
	// The final record made it to the ledger although the deadline passed.
	recs := e.rec.Records()
	if len(recs) != 2 || recs[1].Outcome != gpuwarden.AttemptFailed {
		t.Errorf("records = %v", outcomes(recs))
	}
	checkKilled(t, e)
}

func TestRunCancelled(t *testing.T) {
	e := newEnv(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, e.options(gpuwarden.Target{Name: "ok", Provider: "aws", Launch: script(t, "ok.sh")}), e.rec)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if got := e.ran(t); got != nil {
		t.Errorf("ran %v after cancel", got)
	}
}

func TestRunRounds(t *testing.T) {
	t.Run("capacity comes back in round 2", func(t *testing.T) {
		e := newEnv(t, 0)
		opt := e.options(
			gpuwarden.Target{Name: "flaky", Provider: "aws", Region: "us-east-1", Zone: "us-east-1a", Offer: "p5.48xlarge", Launch: script(t, "flaky-capacity.sh"), InstanceID: awsID},
			gpuwarden.Target{Name: "quota", Provider: "aws", Region: "eu-west-1", Launch: script(t, "aws-quota.sh")},
		)
		opt.Rounds = 3
		res, err := Run(context.Background(), opt, e.rec)
		if err != nil {
			t.Fatalf("Run: %v\n%s", err, e.out)
		}
		if got, want := outcomes(res.Attempts), []string{"flaky:failed", "quota:failed", "flaky:launched"}; !equal(got, want) {
			t.Errorf("outcomes = %v, want %v", got, want)
		}
		// The quota failure is not tried again: quota does not come back.
		if got, want := e.ran(t), []string{"flaky", "quota", "flaky"}; !equal(got, want) {
			t.Errorf("ran %v, want %v", got, want)
		}
		if !strings.Contains(e.out.String(), "round 2 of 3: trying flaky again") {
			t.Errorf("Out lacks the round line:\n%s", e.out)
		}
		if res.Launched.InstanceID != "i-0aaaabbbbccccdddd" {
			t.Errorf("InstanceID = %q", res.Launched.InstanceID)
		}
	})
	t.Run("no capacity in any round", func(t *testing.T) {
		e := newEnv(t, 0)
		opt := e.options(
			gpuwarden.Target{Name: "a", Provider: "aws", Region: "us-east-1", Zone: "us-east-1a", Offer: "p5.48xlarge", Launch: script(t, "aws-capacity.sh")},
			gpuwarden.Target{Name: "b", Provider: "aws", Region: "us-east-1", Zone: "us-east-1a", Offer: "p5.48xlarge", Launch: script(t, "ok.sh")},
		)
		opt.Rounds = 2
		res, err := Run(context.Background(), opt, e.rec)
		if code(err) != gpuwarden.EFinding || !strings.HasPrefix(err.Error(), "no target launched: a: capacity: InsufficientInstanceCapacity; b: skipped: capacity") {
			t.Fatalf("error %v (code %q)", err, code(err))
		}
		if got, want := outcomes(res.Attempts), []string{"a:failed", "b:skipped", "a:failed", "b:skipped"}; !equal(got, want) {
			t.Errorf("outcomes = %v, want %v", got, want)
		}
		if got := e.clock.Slept(); !equal(got, []time.Duration{2 * time.Second}) {
			t.Errorf("slept %v, want one backoff between the two failures", got)
		}
		if !strings.Contains(e.out.String(), "→ round 2") || !strings.Contains(e.out.String(), "→ no targets left") {
			t.Errorf("Out:\n%s", e.out)
		}
	})
}

func TestRunReady(t *testing.T) {
	t.Run("polls until the third call succeeds", func(t *testing.T) {
		e := newEnv(t, 0)
		opt := e.options(gpuwarden.Target{Name: "a", Provider: "aws", Launch: script(t, "ok.sh"), InstanceID: awsID,
			Ready: script(t, "ready-third.sh", "{{.InstanceID}}")})
		res, err := Run(context.Background(), opt, e.rec)
		if err != nil {
			t.Fatalf("Run: %v\n%s", err, e.out)
		}
		b, _ := os.ReadFile(filepath.Join(e.dir, "state"))
		if strings.TrimSpace(string(b)) != "3" {
			t.Errorf("ready ran %q times, want 3", b)
		}
		a := res.Launched
		if a.ProvisionSeconds != 20 || !a.Ready.Equal(a.Start.Add(20*time.Second)) {
			t.Errorf("ProvisionSeconds %v Ready %v Start %v, want two 10s polls", a.ProvisionSeconds, a.Ready, a.Start)
		}
		recs := e.rec.Records()
		if len(recs) != 3 || !recs[1].Ready.IsZero() || recs[2].Ready.IsZero() {
			t.Errorf("records: want pending, launched, ready; got %+v", recs)
		}
		if !strings.Contains(e.out.String(), "→ waiting until ready") || !strings.Contains(e.out.String(), "ready 20s after") {
			t.Errorf("Out:\n%s", e.out)
		}
	})
	t.Run("times out and keeps the box on record", func(t *testing.T) {
		e := newEnv(t, 0)
		opt := e.options(gpuwarden.Target{Name: "a", Provider: "aws", Launch: script(t, "ok.sh"), Ready: "echo booting; exit 1",
			Stop: "stop {{.Name}}"})
		opt.ReadyTimeout = 30 * time.Second
		res, err := Run(context.Background(), opt, e.rec)
		if code(err) != gpuwarden.EFinding || !strings.Contains(err.Error(), "not ready after 30s; last output: booting") {
			t.Fatalf("error %v (code %q)", err, code(err))
		}
		if !strings.Contains(gpuwarden.ErrorHint(err), "stop gw-") {
			t.Errorf("hint %q does not say how to stop it", gpuwarden.ErrorHint(err))
		}
		if res.Launched == nil || !res.Launched.MayExist || res.Launched.Outcome != gpuwarden.AttemptLaunched || !res.Launched.Ready.IsZero() {
			t.Errorf("Launched = %+v", res.Launched)
		}
		if got := e.clock.Slept(); !equal(got, []time.Duration{10 * time.Second, 10 * time.Second, 10 * time.Second}) {
			t.Errorf("slept %v", got)
		}
	})
	t.Run("WaitAgent ends provisioning first", func(t *testing.T) {
		e := newEnv(t, 0)
		// A ready command that never succeeds, counting its calls.
		opt := e.options(gpuwarden.Target{Name: "a", Provider: "aws", Launch: script(t, "ok.sh"), Ready: `echo x >> "$GW_STATE"; exit 1`})
		var gotID, gotName string
		opt.WaitAgent = func(ctx context.Context, launchID, name string) (time.Time, error) {
			gotID, gotName = launchID, name
			return time.Date(2026, 11, 29, 10, 1, 30, 0, time.UTC), nil
		}
		res, err := Run(context.Background(), opt, e.rec)
		if err != nil {
			t.Fatalf("Run: %v\n%s", err, e.out)
		}
		if gotID != res.LaunchID || gotName != res.Launched.Name {
			t.Errorf("WaitAgent(%q, %q), want (%q, %q)", gotID, gotName, res.LaunchID, res.Launched.Name)
		}
		if res.Launched.ProvisionSeconds != 90 {
			t.Errorf("ProvisionSeconds = %v, want 90", res.Launched.ProvisionSeconds)
		}
		// Once the agent reported, the ready poller stopped: left alone it
		// would have run 90 times (15m of 10s polls on the test clock).
		b, _ := os.ReadFile(filepath.Join(e.dir, "state"))
		if n := strings.Count(string(b), "x"); n >= 45 {
			t.Errorf("the ready command ran %d times after the agent reported", n)
		}
	})
	t.Run("WaitAgent error", func(t *testing.T) {
		e := newEnv(t, 0)
		opt := e.options(gpuwarden.Target{Name: "a", Provider: "aws", Launch: script(t, "ok.sh")})
		opt.WaitAgent = func(ctx context.Context, launchID, name string) (time.Time, error) {
			return time.Time{}, errors.New("fleet server unreachable")
		}
		res, err := Run(context.Background(), opt, e.rec)
		if code(err) != gpuwarden.EFinding || !strings.Contains(err.Error(), "agent did not report: fleet server unreachable") {
			t.Fatalf("error %v", err)
		}
		if res.Launched == nil || !res.Launched.MayExist {
			t.Errorf("Launched = %+v", res.Launched)
		}
	})
}

func TestRunInstanceIDAndStop(t *testing.T) {
	tests := []struct {
		name      string
		launch    string
		pattern   string
		wantID    string
		wantStop  string
		pendingOK bool
	}{
		{"id read, stop by id", "ok.sh", awsID, "i-0abc123def4567890",
			"{{if .InstanceID}}aws ec2 terminate-instances --instance-ids {{.InstanceID}}{{else}}by-name {{.Name}}{{end}}", true},
		{"no pattern, stop by name", "ok.sh", "", "", "by-name {{.Name}}", true},
		{"pattern misses", "ok.sh", `instance (\d+)`, "", "stop [{{.InstanceID}}]", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 0)
			opt := e.options(gpuwarden.Target{Name: "a", Provider: "aws", Launch: script(t, tc.launch), InstanceID: tc.pattern, Stop: tc.wantStop})
			res, err := Run(context.Background(), opt, e.rec)
			if err != nil {
				t.Fatal(err)
			}
			a := res.Launched
			if a.InstanceID != tc.wantID {
				t.Errorf("InstanceID = %q, want %q", a.InstanceID, tc.wantID)
			}
			want, _ := Render(tc.wantStop, Vars{Name: a.Name, InstanceID: tc.wantID})
			if a.StopCommand != want {
				t.Errorf("StopCommand = %q, want %q", a.StopCommand, want)
			}
			// The pending record already had a stop command, by name.
			p := e.rec.Records()[0]
			pwant, _ := Render(tc.wantStop, Vars{Name: a.Name})
			if p.Outcome != "" || !p.MayExist || p.StopCommand != pwant {
				t.Errorf("pending record = %+v, want stop %q", p, pwant)
			}
		})
	}
	t.Run("an id that could be shell syntax is refused", func(t *testing.T) {
		e := newEnv(t, 0)
		opt := e.options(gpuwarden.Target{Name: "a", Provider: "aws", Launch: `echo 'InstanceId: i-1;reboot'`, InstanceID: `InstanceId: (\S+)`,
			Stop: "stop {{.InstanceID}}"})
		res, err := Run(context.Background(), opt, e.rec)
		if err != nil {
			t.Fatal(err)
		}
		if res.Launched.InstanceID != "" || res.Launched.StopCommand != "stop " {
			t.Errorf("InstanceID %q StopCommand %q", res.Launched.InstanceID, res.Launched.StopCommand)
		}
	})
}

func TestRunRecorderFailure(t *testing.T) {
	e := newEnv(t, 0)
	e.rec.fail = func(a gpuwarden.LaunchAttempt) bool { return a.Outcome == "" }
	res, err := Run(context.Background(), e.options(gpuwarden.Target{Name: "a", Provider: "aws", Launch: script(t, "ok.sh")}), e.rec)
	if err == nil || !strings.Contains(err.Error(), "record attempt") || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("error %v", err)
	}
	// Without a record, the command must not run: a crash could leave a
	// box nobody knows of.
	if got := e.ran(t); got != nil {
		t.Errorf("ran %v", got)
	}
	if len(res.Attempts) != 0 {
		t.Errorf("attempts %v", outcomes(res.Attempts))
	}
}

func TestRunInvalidOptions(t *testing.T) {
	ok := gpuwarden.Target{Name: "a", Provider: "aws", Launch: "true"}
	tests := []struct {
		name string
		opt  Options
		want string
	}{
		{"no targets", Options{}, "no targets"},
		{"bad target", Options{Targets: []gpuwarden.Target{{Name: "a", Provider: "aws", Launch: "x {{.Regoin}}"}}}, `targets[0] a: launch: render:`},
		{"duplicate", Options{Targets: []gpuwarden.Target{ok, ok}}, `targets[1]: name: "a" is used twice`},
		{"bad rule", Options{Targets: []gpuwarden.Target{ok}, Rules: []gpuwarden.LaunchRule{{Pattern: "(", Class: "capacity"}}}, "launch_rules[0]: pattern:"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), tc.opt, nil)
			if code(err) != gpuwarden.EInvalid || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v (code %q), want EInvalid with %q", err, code(err), tc.want)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	tests := []struct {
		backoff time.Duration
		rand    float64
		want    []time.Duration
	}{
		{2 * time.Second, 0.5, []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute}},
		{2 * time.Second, 0, []time.Duration{1600 * time.Millisecond, 3200 * time.Millisecond}},
		{2 * time.Second, 1, []time.Duration{2400 * time.Millisecond, 4800 * time.Millisecond}},
		{5 * time.Minute, 0.5, []time.Duration{5 * time.Minute, 5 * time.Minute}},
	}
	for _, tc := range tests {
		r := &runner{opt: Options{Backoff: tc.backoff, Rand: func() float64 { return tc.rand }}}
		var got []time.Duration
		for range tc.want {
			r.failed()
			got = append(got, r.wait)
		}
		if !equal(got, tc.want) {
			t.Errorf("Backoff %v rand %v: waits %v, want %v", tc.backoff, tc.rand, got, tc.want)
		}
	}
}
