package agent

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// scriptedStopper answers a stop with a fixed outcome.
type scriptedStopper struct {
	out   gpuwarden.StopOutcome
	err   error
	stops int
}

func (s *scriptedStopper) Method() string { return s.out.Method }
func (s *scriptedStopper) Prove(context.Context) (gpuwarden.StopProof, error) {
	return gpuwarden.StopProof{Method: s.out.Method, Proven: true}, nil
}
func (s *scriptedStopper) Stop(context.Context) (gpuwarden.StopOutcome, error) {
	s.stops++
	return s.out, s.err
}

// TestStopRecordsWhatTheProviderSaid: the idle stop's outcome is the
// provider's answer, not an assumption: the status carries it, and the
// event's severity follows what still bills.
func TestStopRecordsWhatTheProviderSaid(t *testing.T) {
	tests := []struct {
		name     string
		report   gpuwarden.StopReport
		out      gpuwarden.StopOutcome
		err      error
		severity string
		billing  string
		inMsg    string
	}{
		{"deallocated", gpuwarden.StopReport{Method: gpuwarden.StopAzureDeallocate, StopsBilling: true},
			gpuwarden.StopOutcome{Method: gpuwarden.StopAzureDeallocate, HTTPStatus: 202, OperationID: "op-1", State: "PowerState/deallocated", Billing: gpuwarden.NodeStopped},
			nil, gpuwarden.SeverityInfo, gpuwarden.NodeStopped, "HTTP 202, operation op-1, state read back PowerState/deallocated"},
		{"accepted, not confirmed", gpuwarden.StopReport{Method: gpuwarden.StopRunPod, StopsBilling: true},
			gpuwarden.StopOutcome{Method: gpuwarden.StopRunPod, HTTPStatus: 200, State: "RUNNING", Billing: gpuwarden.NodeStopRequested},
			nil, gpuwarden.SeverityWarning, gpuwarden.NodeStopRequested, "not yet confirmed"},
		{"powered off on azure", gpuwarden.StopReport{Method: gpuwarden.StopOSShutdown, Why: "an Azure VM stays allocated", Fix: "use --stop auto"},
			gpuwarden.StopOutcome{Method: gpuwarden.StopOSShutdown, Billing: gpuwarden.NodePoweredOffStillBilling},
			nil, gpuwarden.SeverityCritical, gpuwarden.NodePoweredOffStillBilling, "STILL BILLING: an Azure VM stays allocated; fix: use --stop auto"},
		{"refused", gpuwarden.StopReport{Method: gpuwarden.StopAzureDeallocate, StopsBilling: true},
			gpuwarden.StopOutcome{Method: gpuwarden.StopAzureDeallocate, HTTPStatus: 403, Billing: gpuwarden.NodeRunning},
			gpuwarden.Errorf(gpuwarden.EEnvironment, "deallocate: 403 AuthorizationFailed").WithHint("grant the identity deallocate"),
			gpuwarden.SeverityCritical, "", "the box still bills: deallocate: 403 AuthorizationFailed; fix: grant the identity deallocate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			s := &scriptedStopper{out: tt.out, err: tt.err}
			cfg := idleConfig()
			cfg.Stop = StopConfig{Stopper: s, Report: tt.report}
			a := h.agent("1xH100", cfg, gpuwarden.HostSample{})
			for range 5 {
				a.Tick(context.Background())
				h.clock.add(time.Second)
			}
			if s.stops != 1 {
				t.Fatalf("%d stops, want 1", s.stops)
			}
			st := a.Status()
			got := ""
			if st.Stop.Outcome != nil {
				got = st.Stop.Outcome.Billing
			}
			if got != tt.billing {
				t.Errorf("status stop outcome billing %q, want %q", got, tt.billing)
			}
			evs, _ := h.ledger.Events(context.Background(), 1)
			if len(evs) != 1 || evs[0].Severity != tt.severity || !strings.Contains(evs[0].Message, tt.inMsg) {
				t.Errorf("last event %+v, want severity %s with %q", evs, tt.severity, tt.inMsg)
			}
		})
	}
}

// TestNoStopperNeverClaimsAStop: where nothing can stop the bill, an idle
// box is reported idle and still billing, and no stop is claimed.
func TestNoStopperNeverClaimsAStop(t *testing.T) {
	h := newHarness(t)
	cfg := idleConfig()
	cfg.Stop = StopConfig{Report: gpuwarden.StopReport{Method: "none", Why: "hetzner bills a powered-off server", Fix: "delete it with hcloud server delete"}}
	a := h.agent("1xH100", cfg, gpuwarden.HostSample{})
	for range 5 {
		a.Tick(context.Background())
		h.clock.add(time.Second)
	}
	got := strings.Join(h.events(), ",")
	if got != "idle-warning,idle-stop,idle-still-billing" {
		t.Errorf("events %q, want the warning, the stop decision and idle-still-billing", got)
	}
	if st := a.Status(); st.Stop.Outcome != nil {
		t.Errorf("status claims a stop: %+v", st.Stop.Outcome)
	}
}

// TestProveStopAlertsLoudly: a stop that cannot be proven, or that would
// not stop billing here, is a critical alert at start; a proof that passes
// is in the status.
func TestProveStopAlertsLoudly(t *testing.T) {
	h := newHarness(t)
	refusing := &countingStopper{h: h, refuse: errors.New("the role lacks ec2:StopInstances")}
	cfg := idleConfig()
	cfg.Stop = StopConfig{Stopper: refusing, Report: gpuwarden.StopReport{Method: "test-stop", StopsBilling: true}}
	a := h.agent("1xH100", cfg, gpuwarden.HostSample{})
	p := a.ProveStop(context.Background())
	if p.Proven || a.Status().Stop.Proof == nil || a.Status().Stop.Proof.Proven {
		t.Fatalf("a refused proof reads proven: %+v", p)
	}
	evs, _ := h.ledger.Events(context.Background(), 1)
	if len(evs) != 1 || evs[0].Kind != "stop-unproven" || !strings.Contains(evs[0].Message, "ec2:StopInstances; fix: grant the role") {
		t.Errorf("events %+v, want stop-unproven with the reason and the fix", evs)
	}
	a.ProveStop(context.Background()) // the same reason again: no second alert
	if got := strings.Join(h.events(), ","); got != "stop-unproven" {
		t.Errorf("events %q, want one stop-unproven", got)
	}
	refusing.refuse = nil
	if p := a.ProveStop(context.Background()); !p.Proven || !a.Status().Stop.Proof.Proven {
		t.Errorf("a passing proof reads %+v", p)
	}

	h2 := newHarness(t)
	cfg.Stop = StopConfig{Stopper: &countingStopper{h: h2}, Report: gpuwarden.StopReport{Method: gpuwarden.StopOSShutdown,
		Why: "an OS shutdown leaves an Azure VM allocated, billed in full", Fix: "gpuwarden up --stop auto"}}
	b := h2.agent("1xH100", cfg, gpuwarden.HostSample{})
	b.announceStop(context.Background())
	evs, _ = h2.ledger.Events(context.Background(), 1)
	if len(evs) != 1 || evs[0].Kind != "stop-keeps-billing" || !strings.Contains(evs[0].Message, "would NOT stop billing here: an OS shutdown leaves") {
		t.Errorf("events %+v, want stop-keeps-billing", evs)
	}
}

// TestBlindBoxNeedsAQuietHost is issue #27's "up with no NVIDIA driver and
// two busy cores never stops the box": without a GPU reading, idle needs
// the host quiet too, and the status says which rule applies.
func TestBlindBoxNeedsAQuietHost(t *testing.T) {
	tests := []struct {
		name  string
		host  gpuwarden.HostSample
		stops int
		busy  string
	}{
		{"two busy cores", gpuwarden.HostSample{CPUPercent: 100, CPUPerCore: []float64{100, 100}}, 0, "CPU at 100%"},
		{"copying a dataset", gpuwarden.HostSample{DiskWriteBps: 80 << 20}, 0, "disk at 80.0 MiB/s"},
		{"downloading", gpuwarden.HostSample{NetRxBps: 50 << 20}, 0, "network at"},
		{"quiet", gpuwarden.HostSample{CPUPercent: 1}, 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			a := h.agent("", idleConfig(), tt.host)
			var st gpuwarden.AgentStatus
			for range 6 {
				a.Tick(context.Background())
				st = a.Status()
				h.clock.add(time.Second)
			}
			if h.stops != tt.stops {
				t.Errorf("%d stops, want %d; busy %q", h.stops, tt.stops, st.Idle.Busy)
			}
			if st.Idle.Rule != gpuwarden.IdleRuleHost {
				t.Errorf("rule %q, want %q", st.Idle.Rule, gpuwarden.IdleRuleHost)
			}
			if tt.busy != "" && !strings.Contains(strings.Join(st.Idle.Busy, ";"), tt.busy) {
				t.Errorf("busy %q, want %q", st.Idle.Busy, tt.busy)
			}
		})
	}
}

// flakyStopper refuses its first stops, then stops.
type flakyStopper struct {
	refusals int
	stops    int
}

func (f *flakyStopper) Method() string { return "test-stop" }
func (f *flakyStopper) Prove(context.Context) (gpuwarden.StopProof, error) {
	return gpuwarden.StopProof{Method: "test-stop", Proven: true}, nil
}
func (f *flakyStopper) Stop(context.Context) (gpuwarden.StopOutcome, error) {
	f.stops++
	if f.stops <= f.refusals {
		return gpuwarden.StopOutcome{Method: "test-stop", Billing: gpuwarden.NodeRunning}, gpuwarden.Errorf(gpuwarden.EUnavailable, "provider busy")
	}
	return gpuwarden.StopOutcome{Method: "test-stop", Billing: gpuwarden.NodeStopped, State: "stopped"}, nil
}

// TestFailedStopIsRetried: a stop the provider refused leaves the box
// billing, so the agent tries again after the retry interval while the box
// stays idle, and alerts once for the refusals, not at every try.
func TestFailedStopIsRetried(t *testing.T) {
	h := newHarness(t)
	s := &flakyStopper{refusals: 2}
	cfg := idleConfig()
	cfg.Stop = StopConfig{Stopper: s, Report: gpuwarden.StopReport{Method: "test-stop", StopsBilling: true}}
	a := h.agent("1xH100", cfg, gpuwarden.HostSample{})
	for range 40 {
		a.Tick(context.Background())
		h.clock.add(time.Second)
	}
	if s.stops != 3 {
		t.Errorf("%d stop attempts, want 3 (two refused, retried every 10 s, then stopped)", s.stops)
	}
	if got := strings.Join(h.events(), ","); got != "idle-warning,idle-stop,stop-failed,box-stopped" {
		t.Errorf("events %q, want one stop-failed for both refusals", got)
	}
	if st := a.Status(); st.Stop.Outcome == nil || st.Stop.Outcome.Billing != gpuwarden.NodeStopped {
		t.Errorf("status stop outcome %+v, want stopped", st.Stop.Outcome)
	}
}
