package agent

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/gpusim"
	"github.com/gpuwarden/gpuwarden/internal/syncbuf"
	"github.com/gpuwarden/gpuwarden/report"
	"github.com/gpuwarden/gpuwarden/sqlite"
)

// fakeHost is a host with a fixed reading.
type fakeHost struct{ s gpuwarden.HostSample }

func (h *fakeHost) Sample() (gpuwarden.HostSample, error) { return h.s, nil }

// clock is a test clock the agent reads through Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type harness struct {
	t      *testing.T
	ledger *sqlite.Ledger
	clock  *clock
	stops  int
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	l, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return &harness{t: t, ledger: l, clock: &clock{t: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}}
}

// agent builds an agent on the harness's ledger and clock, as a restart would.
func (h *harness) agent(spec string, cfg Config, host gpuwarden.HostSample) *Agent {
	h.t.Helper()
	var gpus gpuwarden.GPUs
	if spec != "" {
		s, err := gpusim.ParseSpec(spec)
		if err != nil {
			h.t.Fatal(err)
		}
		gpus = gpusim.New(s)
	}
	return h.agentWith(gpus, cfg, host)
}

// agentOn is agent on any GPUs, with an empty host.
func (h *harness) agentOn(gpus gpuwarden.GPUs, cfg Config) *Agent {
	h.t.Helper()
	return h.agentWith(gpus, cfg, gpuwarden.HostSample{})
}

func (h *harness) agentWith(gpus gpuwarden.GPUs, cfg Config, host gpuwarden.HostSample) *Agent {
	h.t.Helper()
	if cfg.Node == "" {
		cfg.Node = "box-1"
	}
	if cfg.Stop.Stopper == nil && cfg.Stop.Report.Method == "" {
		cfg.Stop = StopConfig{Stopper: &countingStopper{h: h},
			Report: gpuwarden.StopReport{Method: "test-stop", StopsBilling: true, Why: "the test's stop"}}
	}
	a := New(cfg, gpus, &fakeHost{host}, h.ledger, nil, nil)
	a.startTimeout = 100 * time.Millisecond
	a.Now = h.clock.now
	if err := a.start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	return a
}

// countingStopper counts stops and answers like a provider that confirmed
// each one; proofs pass unless refuse is set.
type countingStopper struct {
	h      *harness
	refuse error
	proofs int
}

func (c *countingStopper) Method() string { return "test-stop" }

func (c *countingStopper) Prove(context.Context) (gpuwarden.StopProof, error) {
	c.proofs++
	if c.refuse != nil {
		return gpuwarden.StopProof{Method: "test-stop", Reason: c.refuse.Error(), Fix: "grant the role"}, c.refuse
	}
	return gpuwarden.StopProof{Method: "test-stop", Proven: true, Checked: []string{"the test"}}, nil
}

func (c *countingStopper) Stop(context.Context) (gpuwarden.StopOutcome, error) {
	c.h.stops++
	return gpuwarden.StopOutcome{Method: "test-stop", HTTPStatus: 202, State: "stopped", Billing: gpuwarden.NodeStopped}, nil
}

func (h *harness) events() []string {
	h.t.Helper()
	evs, err := h.ledger.Events(context.Background(), 100)
	if err != nil {
		h.t.Fatal(err)
	}
	var kinds []string
	for i := len(evs) - 1; i >= 0; i-- {
		kinds = append(kinds, evs[i].Kind)
	}
	return kinds
}

func idleConfig() Config {
	return Config{Idle: IdleConfig{Window: 3 * time.Second, WarnBefore: time.Second}}
}

func TestIdleWarnsThenStops(t *testing.T) {
	h := newHarness(t)
	a := h.agent("2xH100", idleConfig(), gpuwarden.HostSample{})
	ctx := context.Background()
	var kindsAt []string
	for i := 0; i <= 4; i++ {
		a.Tick(ctx)
		kindsAt = append(kindsAt, strings.Join(h.events(), ","))
		h.clock.add(time.Second)
	}
	want := []string{"", "", "idle-warning", "idle-warning,idle-stop,box-stopped", "idle-warning,idle-stop,box-stopped"}
	for i := range want {
		if kindsAt[i] != want[i] {
			t.Errorf("after tick %d: events %q, want %q", i, kindsAt[i], want[i])
		}
	}
	if h.stops != 1 {
		t.Errorf("stop action ran %d times, want once", h.stops)
	}
	st := a.Status()
	if !st.Idle.Idle || st.IdleSecondsTotal != 4 {
		t.Errorf("status idle %+v, idle seconds %v", st.Idle, st.IdleSecondsTotal)
	}
}

// TestStopWhenJobsEnd: with StopWhenJobsEnd the box stops at the first idle
// tick after its last job ended, not a window later; a job whose supervisor
// went away did not end, and without the option the window holds.
func TestStopWhenJobsEnd(t *testing.T) {
	tests := []struct {
		name      string
		option    bool
		end       func(*Jobs, time.Time)
		wantStops []int // stops after each tick
	}{
		{"job ended", true, func(j *Jobs, now time.Time) { j.Report("train", JobDone, now) }, []int{0, 1, 1, 1, 1}},
		{"option off", false, func(j *Jobs, now time.Time) { j.Report("train", JobDone, now) }, []int{0, 0, 0, 0, 1}},
		{"supervisor went away", true, func(j *Jobs, _ time.Time) { j.Forget("train") }, []int{0, 0, 0, 0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			cfg := idleConfig()
			cfg.Idle.StopWhenJobsEnd = tt.option
			a := h.agent("1xH100", cfg, gpuwarden.HostSample{})
			a.Jobs.Report("train", JobRunning, h.clock.now())
			var got []int
			for i := 0; i < 5; i++ {
				a.Tick(context.Background())
				got = append(got, h.stops)
				if i == 0 {
					tt.end(a.Jobs, h.clock.now())
				}
				h.clock.add(time.Second)
			}
			if !slices.Equal(got, tt.wantStops) {
				t.Errorf("stops after each tick %v, want %v (events %v)", got, tt.wantStops, h.events())
			}
		})
	}
}

func TestBusySignalsKeepTheBoxUp(t *testing.T) {
	tests := []struct {
		name string
		spec string
		host gpuwarden.HostSample
		cfg  func(*Config)
		job  string
		busy string
	}{
		{name: "gpu load", spec: "2xH100,load=80", busy: "GPU 0 at 80%"},
		{name: "ssh session", spec: "1xH100", host: gpuwarden.HostSample{Sessions: 1}, busy: "1 interactive session"},
		{name: "busy process", spec: "1xH100", host: gpuwarden.HostSample{Processes: []string{"jupyter-lab", "sshd"}},
			cfg: func(c *Config) { c.Idle.BusyProcesses = []string{"jupyter"} }, busy: "process jupyter-lab"},
		{name: "supervised job", spec: "1xH100", job: "train-1", busy: "job train-1 running"},
		{name: "busy script", spec: "1xH100", cfg: func(c *Config) { c.Idle.Script = []string{"true"} }, busy: "the idle check says busy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			cfg := idleConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			a := h.agent(tt.spec, cfg, tt.host)
			if tt.job != "" {
				a.Jobs.Report(tt.job, JobRunning, h.clock.now())
			}
			for i := 0; i < 6; i++ {
				a.Tick(context.Background())
				h.clock.add(time.Second)
			}
			if got := h.events(); len(got) != 0 || h.stops != 0 {
				t.Errorf("events %v and %d stops on a busy box", got, h.stops)
			}
			if st := a.Status(); st.Idle.Idle || !strings.Contains(strings.Join(st.Idle.Busy, "; "), tt.busy) {
				t.Errorf("busy reasons %q, want %q", st.Idle.Busy, tt.busy)
			}
		})
	}
}

func TestIdleScriptDeclaresIdle(t *testing.T) {
	h := newHarness(t)
	cfg := idleConfig()
	cfg.Idle.Script = []string{"false"} // exit 1: idle, whatever the signals say
	a := h.agent("1xH100,load=90", cfg, gpuwarden.HostSample{})
	a.Tick(context.Background())
	if st := a.Status(); !st.Idle.Idle {
		t.Errorf("a script exiting 1 should declare the box idle: %+v", st.Idle)
	}
}

// TestCheckpointHoldsTheStop: an off-hours stop happens busy or not, but
// never while a supervised job is writing a checkpoint.
func TestCheckpointHoldsTheStop(t *testing.T) {
	h := newHarness(t)
	s, _ := ParseSchedule([]string{"Mon-Fri 08:00-09:00"}, "UTC")
	a := h.agent("1xH100,load=90", Config{OffHours: s, Idle: IdleConfig{Off: true, WarnBefore: time.Second}}, gpuwarden.HostSample{})
	a.Jobs.Report("train-1", JobCheckpointing, h.clock.now())
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		a.Tick(ctx)
		h.clock.add(time.Second)
	}
	if h.stops != 0 {
		t.Fatal("stopped while a job was checkpointing")
	}
	a.Jobs.Report("train-1", JobRunning, h.clock.now())
	a.Tick(ctx)
	if h.stops != 1 {
		t.Errorf("stops = %d once the checkpoint was written, want 1", h.stops)
	}
}

func TestRestartKeepsTheIdleClock(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	a := h.agent("1xH100", idleConfig(), gpuwarden.HostSample{})
	a.Tick(ctx) // idle since 10:00:00
	h.clock.add(2 * time.Second)
	b := h.agent("1xH100", idleConfig(), gpuwarden.HostSample{}) // the restarted agent
	b.Tick(ctx)
	if st := b.Status(); !st.Idle.Since.Equal(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)) {
		t.Fatalf("idle since %v after a restart, want 10:00:00", st.Idle.Since)
	}
	h.clock.add(time.Second)
	b.Tick(ctx)
	if h.stops != 1 {
		t.Errorf("stops = %d: the restarted agent should stop at 10:00:03", h.stops)
	}
}

func TestBudgetAlertsOncePerMonthAcrossRestarts(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	cfg := Config{Idle: IdleConfig{Off: true}, Budget: BudgetConfig{Currency: "USD", Limit: 100_00,
		AlertsPercent: []int{50, 80, 100}, HourlyRate: 600 * gpuwarden.MicrosPerUnit}} // $10 a minute
	a := h.agent("1xH100,load=90", cfg, gpuwarden.HostSample{})
	for i := 0; i <= 6; i++ { // 6 minutes: $60
		a.Tick(ctx)
		h.clock.add(time.Minute)
	}
	if st := a.Status(); st.Budget.Spent != 60_00 {
		t.Fatalf("spent %s after 6 minutes at $10/min, want 60.00", st.Budget.Spent.Decimal())
	}
	b := h.agent("1xH100,load=90", cfg, gpuwarden.HostSample{}) // restart: spend and alerts kept
	for i := 0; i <= 5; i++ {
		b.Tick(ctx)
		h.clock.add(time.Minute)
	}
	var actual []string
	evs, _ := h.ledger.Events(ctx, 100)
	for _, e := range evs {
		if e.Kind == "budget-actual" {
			actual = append(actual, e.Data["percent"])
		}
	}
	if strings.Join(actual, ",") != "100,80,50" {
		t.Errorf("ACTUAL alerts %v, want each of 50, 80, 100 once", actual)
	}
	if st := b.Status(); st.Budget.Spent != 110_00 {
		t.Errorf("spent %s, want 110.00 (the restart neither lost nor repeated spend)", st.Budget.Spent.Decimal())
	}
}

func TestDiagnose(t *testing.T) {
	mk := func(util, memPct, cpu, iowait float64, cores []float64) []gpuwarden.NodeSample {
		var w []gpuwarden.NodeSample
		for i := 0; i < 20; i++ {
			w = append(w, gpuwarden.NodeSample{Time: time.Unix(int64(i), 0),
				Host: gpuwarden.HostSample{CPUPercent: cpu, IOWaitPercent: iowait, CPUPerCore: cores},
				GPUs: []gpuwarden.Telemetry{{UtilPercent: util, MemUsedBytes: uint64(memPct), MemTotalBytes: 100}}})
		}
		return w
	}
	tests := []struct {
		name   string
		window []gpuwarden.NodeSample
		want   string
	}{
		{"busy", mk(92, 80, 30, 1, nil), "healthy"},
		{"idle", mk(1, 2, 3, 0, nil), "idle"},
		{"data loader", mk(20, 60, 95, 2, nil), "input-bound"},
		{"few cores full", mk(25, 60, 40, 2, []float64{99, 98, 97, 96, 10, 5, 3, 2}), "input-bound"},
		{"disk", mk(20, 60, 30, 35, nil), "io-bound"},
		{"oversized", mk(10, 12, 20, 1, nil), "oversized"},
		{"moderate", mk(45, 50, 30, 2, nil), "healthy"},
		{"too few samples", mk(50, 50, 30, 2, nil)[:3], "unknown"},
	}
	for _, tt := range tests {
		if got := Diagnose(tt.window, true); got.Verdict != tt.want {
			t.Errorf("%s: verdict %q (%s), want %q", tt.name, got.Verdict, got.Detail, tt.want)
		}
	}
	if got := Diagnose(mk(0, 0, 0, 0, nil), false); got.Verdict != "unknown" {
		t.Errorf("CPU-only verdict %q, want unknown", got.Verdict)
	}
}

func TestSchedule(t *testing.T) {
	s, err := ParseSchedule([]string{"Mon-Fri 08:00-20:00", "Sat 22:00-02:00"}, "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	tests := []struct {
		at   time.Time
		want bool
	}{
		{time.Date(2026, 11, 30, 9, 0, 0, 0, berlin), true},    // Monday morning
		{time.Date(2026, 11, 30, 20, 0, 0, 0, berlin), false},  // Monday, end is exclusive
		{time.Date(2026, 12, 5, 23, 0, 0, 0, berlin), true},    // Saturday night
		{time.Date(2026, 12, 6, 1, 30, 0, 0, berlin), true},    // after Saturday's midnight
		{time.Date(2026, 12, 6, 12, 0, 0, 0, berlin), false},   // Sunday noon
		{time.Date(2026, 11, 30, 7, 30, 0, 0, time.UTC), true}, // 08:30 in Berlin
	}
	for _, tt := range tests {
		if got := s.On(tt.at); got != tt.want {
			t.Errorf("On(%v) = %v, want %v", tt.at, got, tt.want)
		}
	}
	for _, bad := range []string{"Mon 25:00-26:00", "Funday 08:00-09:00", "Mon 08:00", "Mon 08:00-08:00"} {
		if _, err := ParseSchedule([]string{bad}, "UTC"); gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
			t.Errorf("%q: err %v, want invalid", bad, err)
		}
	}
}

func TestOffHoursStopsABusyBox(t *testing.T) {
	h := newHarness(t)
	s, _ := ParseSchedule([]string{"Mon-Fri 08:00-09:00"}, "UTC")
	cfg := Config{OffHours: s, Idle: IdleConfig{Off: true, WarnBefore: 2 * time.Second}}
	a := h.agent("1xH100,load=90", cfg, gpuwarden.HostSample{}) // 10:00 UTC: off-hours
	for i := 0; i < 4; i++ {
		a.Tick(context.Background())
		h.clock.add(time.Second)
	}
	if got := strings.Join(h.events(), ","); got != "offhours-warning,offhours-stop,box-stopped" || h.stops != 1 {
		t.Errorf("events %q, %d stops; want a warning, then one stop", got, h.stops)
	}
}

func TestSocketRelaysNoticesAndJobs(t *testing.T) {
	h := newHarness(t)
	a := h.agent("1xH100", idleConfig(), gpuwarden.HostSample{})
	path := filepath.Join(t.TempDir(), "agent.sock")
	sock, err := ListenSocket(path, a.Jobs, a.log)
	if err != nil {
		t.Fatal(err)
	}
	a.Socket = sock
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go sock.Serve(ctx)
	got := make(chan Message, 1)
	go func() { _ = Listen(ctx, path, func(m Message) { got <- m }) }()
	deadline := time.Now().Add(2 * time.Second)
	for sock.Connected() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	a.OnNotice(ctx, gpuwarden.Notice{Provider: "aws", Kind: gpuwarden.NoticePreemption, ID: "x1"})
	select {
	case m := <-got:
		if m.Type != "notice" || m.Notice.ID != "x1" {
			t.Errorf("message %+v", m)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no notice on the socket within 2 s")
	}
	if kinds := h.events(); len(kinds) != 1 || kinds[0] != gpuwarden.NoticePreemption {
		t.Errorf("events %v, want the preemption", kinds)
	}
}

func TestHealthAlertsOnce(t *testing.T) {
	h := newHarness(t)
	a := h.agent("2xH100,load=90,fault=xid@1,fault=ecc@0", Config{Idle: IdleConfig{Off: true}}, gpuwarden.HostSample{})
	for i := 0; i < 3; i++ {
		a.Tick(context.Background())
		h.clock.add(time.Second)
	}
	if got := strings.Join(h.events(), ","); got != "ecc,xid" {
		t.Errorf("events %q, want one ECC and one Xid alert", got)
	}
}

func TestClientReportsJobs(t *testing.T) {
	h := newHarness(t)
	a := h.agent("1xH100", idleConfig(), gpuwarden.HostSample{})
	path := filepath.Join(t.TempDir(), "agent.sock")
	sock, err := ListenSocket(path, a.Jobs, a.log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go sock.Serve(ctx)
	c, err := Dial(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Report("train-1", JobCheckpointing); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for !a.Jobs.Checkpointing() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !a.Jobs.Checkpointing() {
		t.Fatal("the agent did not hear the job checkpointing")
	}
	c.Close()
	for len(a.Jobs.Active()) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := len(a.Jobs.Active()); n != 0 {
		t.Errorf("%d jobs left after the supervisor hung up", n)
	}
}

// A supervisor's durability report reaches the status, and a checkpoint
// that did not reach the store raises one alert naming the newest durable one.
func TestClientReportsDurability(t *testing.T) {
	h := newHarness(t)
	a := h.agent("1xH100", idleConfig(), gpuwarden.HostSample{})
	path := filepath.Join(t.TempDir(), "agent.sock")
	sock, err := ListenSocket(path, a.Jobs, a.log)
	if err != nil {
		t.Fatal(err)
	}
	sock.OnSync = a.OnSync
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go sock.Serve(ctx)
	c, err := Dial(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st := gpuwarden.SyncReport{Target: "s3://ckpts/job", Uploaded: 2, Failed: 1, NewestCommitted: "000003-step-000060",
		NewestDurable: &gpuwarden.DurableCheckpoint{Name: "000002-step-000040", Step: 40, URL: "s3://ckpts/job/000002-step-000040"},
		Failures:      []gpuwarden.SyncFailure{{Checkpoint: "000003-step-000060", Error: "503 Service Unavailable"}}}
	for range 2 { // the same report twice: one alert
		if err := c.ReportSync("run-1", st); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for len(h.events()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if got := h.events(); len(got) != 1 || got[0] != "checkpoint-not-durable" {
		t.Errorf("events %v, want one checkpoint-not-durable alert", got)
	}
	jobs := a.Status().Jobs
	if len(jobs) != 1 || jobs[0].Sync == nil || jobs[0].Sync.NewestDurable.Step != 40 {
		t.Errorf("status jobs %+v, want run-1 with its last durable checkpoint", jobs)
	}
}

// A re-sent notice replaces the earlier one in the status; a cancellation
// is its own, milder alert.
func TestNoticeUpdatesAndCancellation(t *testing.T) {
	h := newHarness(t)
	a := h.agent("1xH100", idleConfig(), gpuwarden.HostSample{})
	ctx := context.Background()
	at := time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)
	n := gpuwarden.Notice{Provider: "aws", Kind: gpuwarden.NoticeReboot, At: at, ID: "instance-event-1", Detail: "system-reboot"}
	a.OnNotice(ctx, n)
	n.At = at.Add(-time.Hour)
	a.OnNotice(ctx, n)
	n.Canceled = true
	a.OnNotice(ctx, n)
	if st := a.Status(); len(st.Notices) != 1 || !st.Notices[0].Canceled {
		t.Errorf("status notices %+v, want the one event, canceled", st.Notices)
	}
	if got := h.events(); len(got) != 2 {
		t.Errorf("events %v, want the reboot alert and its cancellation", got)
	}
}

// TestOneForecastForOneBox feeds one box to the agent and to the fleet's
// spend report: a box at $100/h that ran 90 minutes must forecast the same
// month on both, to the cent (the hostile test found 32.69 and 71,808.01).
func TestOneForecastForOneBox(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	rate := gpuwarden.Micros(100 * gpuwarden.MicrosPerUnit)
	cfg := Config{Idle: IdleConfig{Off: true}, Budget: BudgetConfig{Currency: "USD", HourlyRate: rate}}
	a := h.agent("1xH100,load=90", cfg, gpuwarden.HostSample{})
	start := h.clock.now()
	for range 91 { // 90 minutes
		a.Tick(ctx)
		h.clock.add(time.Minute)
	}
	now := h.clock.now().Add(-time.Minute) // the last tick
	agentSide := a.Status().Budget
	if agentSide.Spent != 150_00 {
		t.Fatalf("agent spent %s in 90 minutes at $100/h, want 150.00", agentSide.Spent.Decimal())
	}
	node := gpuwarden.Node{ID: "box", Project: "ml", Labels: gpuwarden.NodeLabels{HourlyPrice: rate, Currency: "USD"},
		LastSeen: now, Live: gpuwarden.Heartbeat{Node: "box", Time: now, State: gpuwarden.NodeRunning}}
	var hours []gpuwarden.NodeHour
	for m := start; m.Before(now); m = m.Add(time.Hour) {
		mins := min(60, int(now.Sub(m).Minutes()))
		hours = append(hours, gpuwarden.NodeHour{Node: "box", Hour: m, Minutes: mins, Currency: "USD",
			Cost: rate.Mul(gpuwarden.MicrosFromFloat(float64(mins) / 60))})
	}
	serverSide, err := report.Spend(report.Input{Now: now, Nodes: []gpuwarden.Node{node}, Hours: hours,
		Projects: []gpuwarden.Project{{Name: "ml", Currency: "USD"}}}, report.ByProject, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(serverSide.Rows) != 1 || serverSide.Rows[0].Spent != agentSide.Spent || serverSide.Rows[0].Forecast != agentSide.Forecast {
		t.Errorf("agent: spent %s forecast %s; server: %+v; want one forecast", agentSide.Spent.Decimal(), agentSide.Forecast.Decimal(), serverSide.Rows)
	}
	if want := gpuwarden.MonthForecast(150_00, rate, now); agentSide.Forecast != want {
		t.Errorf("forecast %s, want %s", agentSide.Forecast.Decimal(), want.Decimal())
	}
}

// TestRunStoppedWhileStarting: a stop that lands while the agent starts
// (SIGTERM right after "agent up") is a clean exit, not a start failure.
func TestRunStoppedWhileStarting(t *testing.T) {
	h := newHarness(t)
	a := New(Config{Node: "box-1", Interval: time.Second}, nil, &fakeHost{}, h.ledger, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Run(ctx); err != nil {
		t.Errorf("Run on a stopped context: %v, want nil", err)
	}
}

// TestTickCutShortByTheStopIsQuiet: a tick whose ledger writes the stop
// cuts short (context canceled) warns about nothing: the README's `up`
// output ends "agent stopped", not with "keep the month's spend: context
// canceled".
func TestTickCutShortByTheStopIsQuiet(t *testing.T) {
	h := newHarness(t)
	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	s, err := gpusim.ParseSpec("1xH100")
	if err != nil {
		t.Fatal(err)
	}
	cfg := idleConfig()
	cfg.Budget = BudgetConfig{Currency: "USD", HourlyRate: 2_000_000}
	a := New(cfg, gpusim.New(s), &fakeHost{}, h.ledger, nil, log)
	a.Now = h.clock.now
	if err := a.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h.clock.add(time.Second)
	a.Tick(ctx)
	if strings.Contains(logs.String(), "context canceled") {
		t.Errorf("a tick cut short by the stop logged:\n%s", logs.String())
	}
}

// TestSteppedClockTicksOncePerStep: with Ticks (a stepped clock, as `up
// --clock-file` gives) the agent ticks once per time received, on that
// time, and calls Ticked only once the tick's work is done: the stop the
// tick decided has run by then, on the step it was due.
func TestSteppedClockTicksOncePerStep(t *testing.T) {
	h := newHarness(t)
	s, err := gpusim.ParseSpec("1xH100,load=0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Node: "box-1", Interval: 5 * time.Minute, Idle: IdleConfig{Window: 10 * time.Minute, WarnBefore: 5 * time.Minute}}
	cfg.Stop = StopConfig{Stopper: &countingStopper{h: h}, Report: gpuwarden.StopReport{Method: "test-stop", StopsBilling: true}}
	a := New(cfg, gpusim.New(s), &fakeHost{}, h.ledger, nil, nil)
	a.Now = h.clock.now
	ticks := make(chan time.Time)
	type acked struct {
		at    time.Time
		stops int
	}
	acks := make(chan acked, 1)
	a.Ticks = ticks
	a.Ticked = func(at time.Time) { acks <- acked{at, h.stops} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t0 := h.clock.now()
	tests := []struct {
		step      time.Duration
		wantStops int
	}{
		{0, 0}, {5 * time.Minute, 0}, {10 * time.Minute, 1}, {15 * time.Minute, 1},
	}
	for _, tt := range tests {
		at := t0.Add(tt.step)
		h.clock.add(at.Sub(h.clock.now()))
		ticks <- at
		select {
		case got := <-acks:
			if !got.at.Equal(at) || got.stops != tt.wantStops {
				t.Errorf("step +%s: acknowledged %s with %d stops, want %s with %d", tt.step, got.at, got.stops, at, tt.wantStops)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("step +%s: no acknowledgement", tt.step)
		}
		if st := a.Status(); !st.Now.Equal(at) {
			t.Errorf("step +%s: the status says %s, want %s", tt.step, st.Now, at)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
