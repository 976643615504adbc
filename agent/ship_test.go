package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpuwarden/gpuwarden"
)

// serverMaxBody is the fleet server's default body limit (http/fleet.go);
// the fake server below refuses what the server refuses.
const serverMaxBody = 1 << 20

// fakeUplink is the fleet server as the shipper sees it: it refuses a body
// or an event over the server's limits as the server does (EInvalid), then
// asks refuse, and keeps every event it took once, as the server does.
type fakeUplink struct {
	mu        sync.Mutex
	refuse    func(b gpuwarden.FleetBatch) error
	register  error
	registers int
	calls     int
	refused   int
	events    []gpuwarden.Event
	seen      map[int64]bool
}

func (u *fakeUplink) Register(_ context.Context, n gpuwarden.Node) (gpuwarden.Node, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.registers++
	return n, u.register
}

func (u *fakeUplink) Heartbeat(context.Context, gpuwarden.Heartbeat) error { return nil }

func (u *fakeUplink) Ship(_ context.Context, _ string, b gpuwarden.FleetBatch) (gpuwarden.BatchResult, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.calls++
	if err := u.check(b); err != nil {
		u.refused++
		return gpuwarden.BatchResult{}, err
	}
	var res gpuwarden.BatchResult
	for _, e := range b.Events {
		if u.seen[e.Seq] {
			res.Duplicates++
			continue
		}
		if u.seen == nil {
			u.seen = map[int64]bool{}
		}
		u.seen[e.Seq] = true
		u.events = append(u.events, e)
		res.Events++
	}
	return res, nil
}

func (u *fakeUplink) check(b gpuwarden.FleetBatch) error {
	body, err := json.Marshal(b)
	if err != nil {
		return err
	}
	if len(body) > serverMaxBody {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "request body over %d bytes", serverMaxBody)
	}
	for i, e := range b.Events {
		if len(e.Message) > gpuwarden.MaxEventMessage || e.DataSize() > gpuwarden.MaxEventData {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "events[%d]: message or data too long", i)
		}
	}
	if u.refuse != nil {
		return u.refuse(b)
	}
	return nil
}

func (u *fakeUplink) kinds() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for _, e := range u.events {
		out = append(out, e.Kind)
	}
	return out
}

func (h *harness) shipper(u gpuwarden.Uplink) *Shipper {
	return &Shipper{Uplink: u, Ledger: h.ledger, Node: gpuwarden.Node{ID: "box-1"}, Now: h.clock.now,
		Status: func() gpuwarden.AgentStatus { return gpuwarden.AgentStatus{} }, Log: slog.New(slog.DiscardHandler)}
}

func (h *harness) record(events ...gpuwarden.Event) {
	h.t.Helper()
	for _, e := range events {
		if e.Time.IsZero() {
			e.Time = h.clock.now()
		}
		if _, err := h.ledger.RecordEvent(context.Background(), e); err != nil {
			h.t.Fatal(err)
		}
	}
}

// TestShipCutsEventsToTheServerLimits checks that an event too large for
// the server is shipped cut, as fitEvent promises, rather than
// refused by the server and then skipped, i.e. lost.
func TestShipCutsEventsToTheServerLimits(t *testing.T) {
	many := map[string]string{}
	for i := range 400 {
		many[fmt.Sprintf("k%03d", i)] = strings.Repeat("v", 200)
	}
	report, err := json.Marshal(gpuwarden.BurnReport{Node: "n1", Verdict: "PASS",
		Results:   []gpuwarden.BurnResult{{Index: 0, BandwidthGBs: 3000}},
		Telemetry: make([]gpuwarden.Telemetry, 2000)})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		event   gpuwarden.Event
		wantCut bool
		wantKey string // a key the shipped event keeps
	}{
		{"burn-in report with a long telemetry trace", gpuwarden.Event{Kind: "burnin", Message: "burn-in PASS",
			Data: map[string]string{"verdict": "PASS", "report": string(report)}}, true, "verdict"},
		{"small event as it is", gpuwarden.Event{Kind: "idle", Message: "idle for 10 minutes", Data: map[string]string{"gpu": "0"}}, false, "gpu"},
		{"burn-in report over the server's data limit", gpuwarden.Event{Kind: "burnin", Message: "burn-in PASS",
			Data: map[string]string{"verdict": "PASS", "report": strings.Repeat("x", 100<<10)}}, true, "verdict"},
		{"message over the server's limit", gpuwarden.Event{Kind: "run", Message: strings.Repeat("é", 3000)}, false, ""},
		{"many small values over the data limit", gpuwarden.Event{Kind: "many", Message: "m", Data: many}, true, "k000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.record(tc.event)
			u := &fakeUplink{}
			if err := h.shipper(u).Ship(context.Background(), h.clock.now()); err != nil {
				t.Fatalf("Ship: %v", err)
			}
			if got := u.kinds(); len(got) != 1 || got[0] != tc.event.Kind {
				t.Fatalf("server got %v, want [%s]", got, tc.event.Kind)
			}
			e := u.events[0]
			if len(e.Message) > gpuwarden.MaxEventMessage || !utf8.ValidString(e.Message) {
				t.Errorf("message of %d bytes (valid UTF-8 %v), want at most %d", len(e.Message), utf8.ValidString(e.Message), gpuwarden.MaxEventMessage)
			}
			if got := e.DataSize(); got > gpuwarden.MaxEventData {
				t.Errorf("data of %d bytes, want at most %d", got, gpuwarden.MaxEventData)
			}
			if _, got := e.Data["truncated"]; got != tc.wantCut {
				t.Errorf("truncated note %v, want %v (data keys %d)", got, tc.wantCut, len(e.Data))
			}
			if tc.wantKey != "" && e.Data[tc.wantKey] != tc.event.Data[tc.wantKey] {
				t.Errorf("data[%s] = %.20q, want it kept", tc.wantKey, e.Data[tc.wantKey])
			}
			if r, ok := tc.event.Data["report"]; ok && strings.Contains(r, `"telemetry"`) {
				// The server reads the checks and results, never the trace.
				var got gpuwarden.BurnReport
				if err := json.Unmarshal([]byte(e.Data["report"]), &got); err != nil {
					t.Fatalf("shipped report: %v", err)
				}
				if got.Node != "n1" || got.Verdict != "PASS" || len(got.Results) != 1 || len(got.Telemetry) != 0 {
					t.Errorf("shipped report = %+v, want it without its telemetry only", got)
				}
			}
		})
	}
}

// TestShipBatchesFitTheServerBody checks that a backlog of large events
// goes in batches the server's body limit takes, at the first try.
func TestShipBatchesFitTheServerBody(t *testing.T) {
	h := newHarness(t)
	for i := range 40 {
		h.record(gpuwarden.Event{Kind: "burnin", Message: fmt.Sprint(i), Data: map[string]string{"report": strings.Repeat("x", 60<<10)}})
	}
	u := &fakeUplink{}
	if err := h.shipper(u).Ship(context.Background(), h.clock.now()); err != nil {
		t.Fatalf("Ship: %v", err)
	}
	if got := len(u.kinds()); got != 40 {
		t.Errorf("server got %d events, want 40", got)
	}
	if u.refused != 0 {
		t.Errorf("server refused %d of %d batches, want none", u.refused, u.calls)
	}
}

// TestShipKeepsWhatTheServerDidNotTake checks that an event is skipped
// only when the server refuses that event, not when it refuses every
// request (a rate limit answers 429 with EInvalid, as a proxy's 4xx does):
// the cursor stays, and the events go once the server takes them.
func TestShipKeepsWhatTheServerDidNotTake(t *testing.T) {
	kinds := []string{"a", "b", "poison", "c", "d"}
	tests := []struct {
		name   string
		refuse func(b gpuwarden.FleetBatch) error
		lift   int    // the refusal ends after this round; 0: never
		errs   []bool // whether each round fails
		want   []string
	}{
		{"rate limited, then not",
			func(gpuwarden.FleetBatch) error {
				return gpuwarden.Errorf(gpuwarden.EInvalid, "too many requests for token t1").WithHint("retry after 20ms")
			},
			3, []bool{true, true, true, false, false}, []string{"a", "b", "poison", "c", "d"}},
		{"one event the server refuses",
			func(b gpuwarden.FleetBatch) error {
				for i, e := range b.Events {
					if e.Kind == "poison" {
						return gpuwarden.Errorf(gpuwarden.EInvalid, "events[%d]: needs a time and a kind", i)
					}
				}
				return nil
			},
			0, []bool{true, false, false, false, false}, []string{"a", "b", "c", "d"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			for _, k := range kinds {
				h.record(gpuwarden.Event{Kind: k, Message: k})
			}
			u := &fakeUplink{refuse: tc.refuse}
			s := h.shipper(u)
			for round, wantErr := range tc.errs {
				err := s.Ship(context.Background(), h.clock.now())
				if (err != nil) != wantErr {
					t.Errorf("round %d: error %v, want error %v", round+1, err, wantErr)
				}
				if round+1 == tc.lift {
					u.refuse = nil
				}
			}
			if got := u.kinds(); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("server got %v, want %v", got, tc.want)
			}
			v, _, err := h.ledger.State(context.Background(), shipEventsKey)
			if err != nil {
				t.Fatal(err)
			}
			if v != "5" {
				t.Errorf("events cursor %q, want 5", v)
			}
		})
	}
}

// TestShipRateLimitedLosesNothing checks the first round of a refusal of
// every request: nothing is skipped and the cursor does not move.
func TestShipRateLimitedLosesNothing(t *testing.T) {
	h := newHarness(t)
	for _, k := range []string{"a", "b", "c"} {
		h.record(gpuwarden.Event{Kind: k, Message: k})
	}
	u := &fakeUplink{refuse: func(gpuwarden.FleetBatch) error {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "server answered 429: Too Many Requests")
	}}
	s := h.shipper(u)
	for round := 1; round <= 3; round++ {
		if err := s.Ship(context.Background(), h.clock.now()); err == nil {
			t.Errorf("round %d: no error, want the refusal", round)
		}
	}
	if _, ok, _ := h.ledger.State(context.Background(), shipEventsKey); ok {
		t.Error("the events cursor moved past events the server never took")
	}
}

func TestBackoff(t *testing.T) {
	tests := []struct {
		failures int
		rand     float64
		want     time.Duration
	}{
		{1, 0, 500 * time.Millisecond},
		{1, 0.5, 750 * time.Millisecond},
		{2, 0, time.Second},
		{3, 1, 4 * time.Second},
		{7, 0, 30 * time.Second},
		{7, 0.999999, time.Minute},
		{100, 0.5, 45 * time.Second},
	}
	for _, tc := range tests {
		got := backoff(tc.failures, tc.rand)
		if got.Round(time.Millisecond) != tc.want {
			t.Errorf("backoff(%d, %v) = %v, want %v", tc.failures, tc.rand, got, tc.want)
		}
	}
}

// TestShipperRunBacksOffWhenRefused checks that a revoked token (401 on
// every call) neither spins nor keeps Run from returning on cancel.
func TestShipperRunBacksOffWhenRefused(t *testing.T) {
	h := newHarness(t)
	u := &fakeUplink{register: gpuwarden.Errorf(gpuwarden.EUnauthorized, "missing, unknown or revoked token")}
	s := h.shipper(u)
	s.Now = time.Now
	ctx, cancel := context.WithTimeout(context.Background(), 1200*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.registers < 1 || u.registers > 3 {
		t.Errorf("%d register calls in 1.2s, want 1 to 3 (a backoff, not a loop)", u.registers)
	}
}

func TestNodeIdentity(t *testing.T) {
	files := func(m map[string]string) func(string) ([]byte, error) {
		return func(p string) ([]byte, error) {
			if v, ok := m[p]; ok {
				return []byte(v), nil
			}
			return nil, fmt.Errorf("open %s: no such file", p)
		}
	}
	box := map[string]string{bootIDPath: "b0d1\n", "/etc/machine-id": "m1\n"}
	rebooted := map[string]string{bootIDPath: "b0d2\n", "/etc/machine-id": "m1\n"}
	dbusOnly := map[string]string{"/etc/machine-id": "\n", "/var/lib/dbus/machine-id": "m1\n"}
	other := map[string]string{bootIDPath: "b0d1\n", "/etc/machine-id": "m2\n"}
	base, _ := nodeIdentity("a", "/data", "", files(box))
	tests := []struct {
		name, host, dataDir, cloud string
		files                      map[string]string
		same                       bool // the same instance as host a, machine m1, /data
		wantBoot                   string
	}{
		{"after a reboot", "a", "/data", "", rebooted, true, "b0d2"},
		{"machine-id from dbus when /etc's is empty", "a", "/data", "", dbusOnly, true, ""},
		{"a clone under another host name", "b", "/data", "", box, false, "b0d1"},
		{"another machine-id", "a", "/data", "", other, false, "b0d1"},
		{"a second agent on the host", "a", "/data2", "", box, false, "b0d1"},
		{"no machine-id", "a", "/data", "", nil, false, ""},
	}
	for _, tt := range tests {
		inst, boot := nodeIdentity(tt.host, tt.dataDir, tt.cloud, files(tt.files))
		if got := inst == base; got != tt.same {
			t.Errorf("%s: instance %q, same as the box's %q: %v, want %v", tt.name, inst, base, got, tt.same)
		}
		if boot != tt.wantBoot {
			t.Errorf("%s: boot %q, want %q", tt.name, boot, tt.wantBoot)
		}
		if !strings.HasPrefix(inst, "host-") || strings.Contains(inst, "m1") {
			t.Errorf("%s: instance %q, want host- and a hash, never the raw machine-id", tt.name, inst)
		}
	}
	// The cloud's instance ID, when known, is the identity itself.
	if inst, boot := nodeIdentity("a", "/data", " i-0abc ", files(box)); inst != "i-0abc" || boot != "b0d1" {
		t.Errorf("with a cloud instance ID: %q %q, want i-0abc b0d1", inst, boot)
	}
}

// TestShipperLogsAConflictAsAnError checks that an agent whose node ID
// another box holds says so at error level, with the server's hint, and
// keeps retrying at the backoff: the ID may be free once the other is lost.
func TestShipperLogsAConflictAsAnError(t *testing.T) {
	h := newHarness(t)
	u := &fakeUplink{register: gpuwarden.Errorf(gpuwarden.EConflict, "register node box-1: another box holds this node ID").
		WithHint("start this one with `gpuwarden up --node-id ID`")}
	s := h.shipper(u)
	s.Now = time.Now
	var buf shipLog
	s.Log = slog.New(slog.NewTextHandler(&buf, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	s.Run(ctx)
	got := buf.String()
	for _, want := range []string{"level=ERROR", "another box holds this node ID", "hint=", "--node-id"} {
		if !strings.Contains(got, want) {
			t.Errorf("log lacks %q:\n%s", want, got)
		}
	}
}

// shipLog is a log sink the shipper's goroutine and the test share.
type shipLog struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *shipLog) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *shipLog) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestHeartbeatSaysWhatTheStopDid: a heartbeat's state is the provider's
// answer once the agent stopped the box, and the goodbye of an agent that
// did not stop it says the box may run on, unless the OS is shutting down,
// where the provider's OS-shutdown semantics decide (issue #27).
func TestHeartbeatSaysWhatTheStopDid(t *testing.T) {
	outcome := func(billing string) *gpuwarden.StopReport {
		return &gpuwarden.StopReport{Method: gpuwarden.StopAzureDeallocate, StopsBilling: true,
			Outcome: &gpuwarden.StopOutcome{Method: gpuwarden.StopAzureDeallocate, Billing: billing}}
	}
	tests := []struct {
		name         string
		provider     string
		stop         *gpuwarden.StopReport
		shuttingDown bool
		beat, bye    string
	}{
		{"running, agent stopped", "aws", nil, false, gpuwarden.NodeRunning, gpuwarden.NodeAgentStopped},
		{"running, OS shutdown on aws", "aws", nil, true, gpuwarden.NodeRunning, gpuwarden.NodeStopped},
		{"running, OS shutdown on azure", "azure", nil, true, gpuwarden.NodeRunning, gpuwarden.NodePoweredOffStillBilling},
		{"running, OS shutdown somewhere unknown", "nimbus", nil, true, gpuwarden.NodeRunning, gpuwarden.NodePoweredOffStillBilling},
		{"deallocated", "azure", outcome(gpuwarden.NodeStopped), true, gpuwarden.NodeStopped, gpuwarden.NodeStopped},
		{"stop requested", "runpod", outcome(gpuwarden.NodeStopRequested), false, gpuwarden.NodeStopRequested, gpuwarden.NodeStopRequested},
		{"refused stop", "azure", outcome(gpuwarden.NodeRunning), false, gpuwarden.NodeRunning, gpuwarden.NodeAgentStopped},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			s := h.shipper(&fakeUplink{})
			s.Node.Labels.Provider = tt.provider
			s.Status = func() gpuwarden.AgentStatus { return gpuwarden.AgentStatus{Stop: tt.stop} }
			s.ShuttingDown = func() bool { return tt.shuttingDown }
			if got := s.heartbeat(gpuwarden.NodeRunning); got.State != tt.beat {
				t.Errorf("heartbeat state %q, want %q", got.State, tt.beat)
			}
			bye := s.goodbye()
			if bye.State != tt.bye {
				t.Errorf("goodbye state %q, want %q", bye.State, tt.bye)
			}
			if tt.shuttingDown && tt.stop == nil && (bye.Stop == nil || bye.Stop.Outcome == nil || bye.Stop.Outcome.Method != gpuwarden.StopOSShutdown) {
				t.Errorf("goodbye of an OS shutdown does not say so: %+v", bye.Stop)
			}
		})
	}
}
