// Package agent is the loop that `gpuwarden up` runs on each box: it samples
// the GPUs and the host every second, keeps them in the ledger, and applies
// the policies — idle shutdown, off-hours, budget alerts, diagnosis — and
// relays cloud notices to supervised jobs. It decides from what the GPUs
// actually do and needs no server.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// HostSampler reads the host's CPU, memory, disk and network (procfs.Sampler).
type HostSampler interface {
	Sample() (gpuwarden.HostSample, error)
}

// Config is the agent's policy settings; zero values take the defaults
// documented on each field.
type Config struct {
	Node string
	// Interval between samples (default 1 s).
	Interval time.Duration
	Idle     IdleConfig
	Budget   BudgetConfig
	// OffHours, when set, stops the box outside its on-hours windows.
	OffHours *Schedule
	// DiagnosisWindow is the span diagnosis looks at (default 10 min).
	DiagnosisWindow time.Duration
	// Stop is how the box stops and what that does to its bill.
	Stop StopConfig
	// DryRun logs the stop action instead of running it.
	DryRun bool
}

// Agent runs the sampling loop and the policies.
type Agent struct {
	cfg    Config
	gpus   gpuwarden.GPUs
	host   HostSampler
	ledger gpuwarden.Ledger
	notify gpuwarden.Notifier
	log    *slog.Logger
	// Now is a seam for tests: the clock.
	Now func() time.Time
	// Ticks, when set, replaces the interval's ticker: the agent ticks once
	// per time it receives (a stepped clock, package simclock). Ticked, when
	// set, hears each tick's time once the tick's work is done.
	Ticks  <-chan time.Time
	Ticked func(time.Time)
	// Jobs are the jobs `gpuwarden run` supervises, as they report over the socket.
	Jobs *Jobs
	// Socket relays notices to supervised jobs; nil when there is none.
	Socket *Socket

	mu       sync.Mutex
	status   gpuwarden.AgentStatus
	window   []gpuwarden.NodeSample
	idle     idleClock
	budget   budgetMeter
	vetoes   vetoCache
	lastTick time.Time
	started  time.Time
	// telemetry counts failed samples; inventoryErr is why the GPU list
	// could not be read at start (a hung driver), retried every tick.
	telemetry    telemetryWatch
	inventoryErr error
	// startTimeout bounds the inventory read at start (5 s: a first read
	// of eight GPUs without persistence mode takes seconds).
	startTimeout time.Duration
	xidSources   []gpuwarden.XIDSource
	// simulated survives start, which builds the status afresh.
	simulated bool
	// stopReport is the stop's proof and, once it ran, its outcome.
	stopReport gpuwarden.StopReport
	// busySig is the kind of reason the box was last logged busy for.
	busySig string
	// stopRetryAt is when a stop that failed is tried again; zero when
	// none failed.
	stopRetryAt time.Time
	// ledgerWarnings say the ledger started afresh (LedgerReplaced).
	ledgerWarnings []string
	// savings is what the agent prices its savings with (SetSavings);
	// savingsMu serialises their pricing (recordSavings).
	savings   SavingsConfig
	savingsMu sync.Mutex
	// oversizedSince is when the current oversized episode's event was
	// recorded; zero while the verdict is anything else.
	oversizedSince time.Time
}

// New builds an agent; gpus may be nil (the CPU path) and notify may be nil.
func New(cfg Config, gpus gpuwarden.GPUs, host HostSampler, ledger gpuwarden.Ledger, notify gpuwarden.Notifier, log *slog.Logger) *Agent {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.DiagnosisWindow <= 0 {
		cfg.DiagnosisWindow = 10 * time.Minute
	}
	cfg.Stop.defaults()
	cfg.Idle.defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{cfg: cfg, gpus: gpus, host: host, ledger: ledger, notify: notify, log: log,
		Now: time.Now, Jobs: NewJobs(), startTimeout: 5 * time.Second, stopReport: cfg.Stop.Report}
	if a.stopReport.Method == "" {
		a.stopReport.Method = cfg.Stop.method()
	}
	return a
}

// Run samples and applies the policies every interval until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.start(ctx); err != nil {
		if ctx.Err() != nil {
			// Stopped while it started (SIGTERM right after "agent up"):
			// a clean stop, not a failure to start.
			return nil
		}
		return err
	}
	ticks := a.Ticks
	if ticks == nil {
		t := time.NewTicker(a.cfg.Interval)
		defer t.Stop()
		ticks = t.C
		a.Tick(ctx)
	}
	compact := time.NewTicker(10 * time.Minute)
	defer compact.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case at, ok := <-ticks:
			if !ok {
				return nil
			}
			a.Tick(ctx)
			if a.Ticked != nil {
				a.Ticked(at)
			}
		case <-compact.C:
			if err := a.ledger.Compact(ctx, a.Now()); err != nil {
				a.warn(ctx, "compact ledger", "err", err)
			}
		}
	}
}

// warn logs a failure, unless the agent is stopping: a ledger write cut
// short by the stop (context canceled) is the stop itself, not news.
func (a *Agent) warn(ctx context.Context, msg string, args ...any) {
	if ctx.Err() != nil {
		return
	}
	a.log.Warn(msg, args...)
}

// start restores the clocks the ledger kept and reads the inventory.
func (a *Agent) start(ctx context.Context) error {
	now := a.Now()
	a.started = now
	a.mu.Lock()
	simulated := a.simulated
	a.mu.Unlock()
	st := gpuwarden.AgentStatus{Node: a.cfg.Node, Started: now, Simulated: simulated, CPUOnly: a.gpus == nil, GPUs: []gpuwarden.GPU{},
		Events: []gpuwarden.Event{}, Notices: []gpuwarden.Notice{}}
	if a.gpus != nil {
		sctx, cancel := context.WithTimeout(ctx, a.startTimeout)
		defer cancel()
		d, gpus, err := a.inventory(sctx)
		switch {
		case errors.Is(err, gpuwarden.ErrNoAnswer) || errors.Is(err, context.DeadlineExceeded):
			// A driver that does not answer is not a box without GPUs: the
			// agent starts blind, says so, and retries every tick, so that
			// telemetry-lost is raised and no idle stop runs meanwhile.
			a.log.Warn("the GPUs do not answer at start; retrying every tick", "err", err)
			a.inventoryErr = err
		case err != nil:
			return err
		default:
			st.Driver, st.GPUs = &d, gpus
		}
	}
	if err := a.idle.restore(ctx, a.ledger); err != nil {
		return err
	}
	if err := a.budget.restore(ctx, a.ledger, a.cfg.Budget, now); err != nil {
		return err
	}
	a.mu.Lock()
	a.status = st
	a.mu.Unlock()
	// This start ends the counterfactual of the last stop: its saving is
	// priced up to now.
	if err := a.noteStart(ctx, now); err != nil {
		a.warn(ctx, "keep the start for the savings", "err", err)
	}
	a.recordSavings(ctx)
	return nil
}

// inventory reads the driver and the GPU list.
func (a *Agent) inventory(ctx context.Context) (gpuwarden.Driver, []gpuwarden.GPU, error) {
	d, err := a.gpus.Driver(ctx)
	if err != nil {
		return d, nil, fmt.Errorf("read the driver: %w", err)
	}
	gpus, err := a.gpus.List(ctx)
	if err != nil {
		return d, nil, fmt.Errorf("list the GPUs: %w", err)
	}
	return d, gpus, nil
}

// retryInventory reads the GPU list the start could not; it reports the
// error while the driver still does not answer.
func (a *Agent) retryInventory(ctx context.Context) error {
	a.mu.Lock()
	pending := a.inventoryErr != nil
	a.mu.Unlock()
	if !pending {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, a.cfg.Interval)
	defer cancel()
	d, gpus, err := a.inventory(sctx)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.inventoryErr = err
		return err
	}
	a.inventoryErr = nil
	a.status.Driver, a.status.GPUs = &d, gpus
	a.log.Info("the GPUs answer again: inventory read", "gpus", len(gpus))
	return nil
}

// Tick takes one sample and applies every policy to it. Run calls it every
// interval; tests call it with their own clock.
func (a *Agent) Tick(ctx context.Context) {
	now := a.Now()
	s, failed := a.sample(ctx, now)
	telemetry := a.observeTelemetry(ctx, failed, now)
	// The ledger keeps readings; a GPU that gave none is left out of it
	// rather than stored as a sample of zeros.
	if err := a.ledger.RecordSample(ctx, readOnly(s)); err != nil {
		a.warn(ctx, "record sample", "err", err)
	}
	a.mu.Lock()
	a.window = append(a.window, s)
	cut := 0
	for cut < len(a.window) && now.Sub(a.window[cut].Time) > a.cfg.DiagnosisWindow {
		cut++
	}
	a.window = a.window[cut:]
	window := a.window
	a.mu.Unlock()

	a.healthPolicy(ctx, now)
	idle := a.idlePolicy(ctx, s, now)
	budget := a.budgetPolicy(ctx, now)
	a.offHoursPolicy(ctx, now)
	diag := Diagnose(window, a.gpus != nil)
	a.oversizedPolicy(ctx, diag, now)

	events, err := a.ledger.Events(ctx, 10)
	if err != nil && ctx.Err() == nil {
		// A read cut short by the agent's own stop is no fault to report.
		a.log.Warn("read events", "err", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.lastTick.IsZero() && idle.Idle {
		a.status.IdleSecondsTotal += now.Sub(a.lastTick).Seconds()
	}
	a.lastTick = now
	a.status.Now, a.status.Last, a.status.Idle, a.status.Budget, a.status.Diagnosis = now, s, idle, budget, diag
	a.status.Telemetry, a.status.XIDSources = telemetry, a.xidSources
	a.status.Warnings = a.warnings(telemetry)
	if events != nil {
		a.status.Events = events
	}
}

// warnings are what the agent cannot see, in words for the status and
// the dashboard.
func (a *Agent) warnings(t gpuwarden.TelemetryState) []string {
	w := append([]string(nil), a.ledgerWarnings...)
	if t.Lost {
		w = append(w, fmt.Sprintf("telemetry lost since %s (%d failed samples: %s): idle and budget stops are suspended",
			t.Since.UTC().Format(time.RFC3339), t.Failures, t.LastError))
	}
	if a.gpus == nil || len(a.xidSources) == 0 {
		return w
	}
	switch {
	case gpuwarden.XIDBlind(a.xidSources):
		w = append(w, "Xid source unavailable: no Xid would be seen ("+gpuwarden.DescribeXIDSources(a.xidSources)+")")
	default:
		for _, src := range a.xidSources {
			if !src.Live {
				w = append(w, "Xid source unavailable: "+gpuwarden.DescribeXIDSources([]gpuwarden.XIDSource{src}))
			}
		}
	}
	return w
}

// readOnly is the sample without the GPUs that gave no reading.
func readOnly(s gpuwarden.NodeSample) gpuwarden.NodeSample {
	out := s
	out.GPUs = make([]gpuwarden.Telemetry, 0, len(s.GPUs))
	for _, g := range s.GPUs {
		if !g.Unread() {
			out.GPUs = append(out.GPUs, g)
		}
	}
	return out
}

// sample reads every GPU and the host; a failing GPU read is logged and its
// entry is a sample with every field unknown, so one sick card neither
// blinds the agent to the rest nor reads as an idle one. The error says
// why the tick failed, nil when every GPU answered.
func (a *Agent) sample(ctx context.Context, now time.Time) (gpuwarden.NodeSample, error) {
	s := gpuwarden.NodeSample{Time: now, GPUs: []gpuwarden.Telemetry{}}
	if a.host != nil {
		h, err := a.host.Sample()
		if err != nil {
			a.warn(ctx, "sample host", "err", err)
		}
		s.Host = h
	}
	s.Host.Time = now
	if a.gpus == nil {
		return s, nil
	}
	if err := a.retryInventory(ctx); err != nil {
		return s, err
	}
	a.mu.Lock()
	gpus := a.status.GPUs
	a.mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, a.cfg.Interval)
	defer cancel()
	var failed error
	for _, g := range gpus {
		t, err := a.gpus.Sample(sctx, g.Index)
		if err != nil {
			a.warn(ctx, "sample gpu", "gpu", g.Index, "err", err)
			t = gpuwarden.UnreadTelemetry(g.Index, now, gpuwarden.UnknownReasonOf(err))
			if failed == nil {
				failed = fmt.Errorf("GPU %d: %w", g.Index, err)
			}
		}
		t.Time = now
		s.GPUs = append(s.GPUs, t)
	}
	return s, failed
}

// healthPolicy reads each GPU's error counters and alerts on what is new
// since the last look: uncorrected ECC errors, row remaps, Xids. Keys make
// each one alert once, across restarts.
func (a *Agent) healthPolicy(ctx context.Context, now time.Time) {
	if a.gpus == nil {
		return
	}
	a.mu.Lock()
	gpus := a.status.GPUs
	a.mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, a.cfg.Interval)
	defer cancel()
	readings := make([]gpuwarden.Health, 0, len(gpus))
	defer func() {
		a.mu.Lock()
		a.status.Health = readings
		a.mu.Unlock()
	}()
	for _, g := range gpus {
		h, err := a.gpus.Health(sctx, g.Index)
		if err != nil {
			a.warn(ctx, "read gpu health", "gpu", g.Index, "err", err)
			continue
		}
		readings = append(readings, h)
		if g.Index == gpus[0].Index {
			// The sources are the host's (the kernel log, one NVML event
			// set): the first GPU's read speaks for all.
			a.mu.Lock()
			a.xidSources = h.XIDSources
			a.mu.Unlock()
		}
		if h.ECCVolatileUncorrected > 0 {
			a.alert(ctx, gpuwarden.Event{Kind: "ecc", Severity: gpuwarden.SeverityCritical,
				Key:     fmt.Sprintf("ecc-%s-%d", g.UUID, h.ECCVolatileUncorrected),
				Message: fmt.Sprintf("GPU %d (%s): %d uncorrected ECC errors since the driver loaded", g.Index, g.Model, h.ECCVolatileUncorrected)})
		}
		if h.RemapPending || h.RemapFailed {
			what := "a row remap is pending: reset the GPU"
			if h.RemapFailed {
				what = "a row remap failed: the card needs replacing"
			}
			a.alert(ctx, gpuwarden.Event{Kind: "remap", Severity: gpuwarden.SeverityCritical, Key: fmt.Sprintf("remap-%s-%t", g.UUID, h.RemapFailed),
				Message: fmt.Sprintf("GPU %d (%s): %s", g.Index, g.Model, what)})
		}
		for _, x := range h.XIDs {
			meaning, app := gpuwarden.XIDMeaning(x.XID)
			sev := gpuwarden.SeverityCritical
			if app {
				sev = gpuwarden.SeverityWarning
			}
			a.alert(ctx, gpuwarden.Event{Kind: "xid", Severity: sev, Time: now,
				Key:     fmt.Sprintf("xid-%s-%d-%d", g.UUID, x.XID, x.Time.UnixMilli()),
				Message: fmt.Sprintf("GPU %d (%s): Xid %d, %s", g.Index, g.Model, x.XID, meaning)})
		}
	}
}

// Status returns a copy of the agent's current state.
func (a *Agent) Status() gpuwarden.AgentStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.status
	st.Events = append([]gpuwarden.Event(nil), st.Events...)
	st.Notices = append([]gpuwarden.Notice(nil), st.Notices...)
	st.Jobs = a.Jobs.Active()
	st.Health = append([]gpuwarden.Health(nil), st.Health...)
	r := a.stopReportLocked()
	st.Stop = &r
	return st
}

// SetSimulated marks the status as coming from simulated GPUs; call it
// before Run, and it holds for the agent's life.
func (a *Agent) SetSimulated(sim bool) {
	a.mu.Lock()
	a.simulated, a.status.Simulated = sim, sim
	a.mu.Unlock()
}

// Config returns the configuration in force, defaults filled in, so that a
// log line says the idle window the agent applies, not the flag's zero.
func (a *Agent) Config() Config { return a.cfg }

// alert records an event and, when it is new, logs it and sends it. The
// ledger's key check is what makes an alert happen once, across restarts.
func (a *Agent) alert(ctx context.Context, e gpuwarden.Event) bool {
	if e.Time.IsZero() {
		e.Time = a.Now()
	}
	fresh, err := a.ledger.RecordEvent(ctx, e)
	if err != nil {
		a.log.Error("record event", "kind", e.Kind, "err", err)
		fresh = true // better a repeated alert than a lost one
	}
	if !fresh {
		return false
	}
	a.log.Warn(e.Message, "kind", e.Kind, "severity", e.Severity)
	if a.notify != nil {
		if err := a.notify.Notify(ctx, e); err != nil {
			a.log.Warn("notify", "kind", e.Kind, "err", err)
		}
	}
	return true
}

// OnNotice handles a cloud notice: an alert worded by what the notice
// means (gpuwarden.NoticeEffects), the status, and a message to every
// supervised job on the socket. A notice re-sent for the same event (a
// moved time, a cancellation) replaces the earlier one in the status.
func (a *Agent) OnNotice(ctx context.Context, n gpuwarden.Notice) {
	if a.Socket != nil {
		a.Socket.Broadcast(Message{Type: "notice", Notice: &n})
	}
	a.mu.Lock()
	replaced := false
	for i, old := range a.status.Notices {
		if old.ID != "" && old.ID == n.ID && old.Provider == n.Provider {
			a.status.Notices[i], replaced = n, true
		}
	}
	if !replaced {
		a.status.Notices = append(a.status.Notices, n)
	}
	a.mu.Unlock()
	a.alert(ctx, noticeEvent(n))
}

// SetNoticeSource records whether the cloud's notice source answers, for
// the status and gpuwarden_notice_source_up; preempt.Health calls it on
// every change.
func (a *Agent) SetNoticeSource(cloud string, up bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.status.NoticeSource = &gpuwarden.NoticeSourceState{Cloud: cloud, Up: up, Since: a.Now().UTC()}
}

// noticeEvent words the alert for a notice: a box that goes away or is
// interrupted is critical, advice and a live migration are warnings, and a
// cancellation says the event is off.
func noticeEvent(n gpuwarden.Notice) gpuwarden.Event {
	eff := gpuwarden.EffectOf(n.Kind)
	when := "no time given"
	if !n.At.IsZero() {
		when = "at " + n.At.UTC().Format(time.RFC3339)
	}
	sev, key := gpuwarden.SeverityCritical, "notice-"+n.Provider+"-"+n.ID
	msg := fmt.Sprintf("%s %s notice, %s: %s (%s)", n.Provider, n.Kind, when, eff.Summary, n.Detail)
	if !eff.Ends && !eff.Interrupts {
		sev = gpuwarden.SeverityWarning
	}
	data := map[string]string{"provider": n.Provider, "id": n.ID}
	if n.Canceled {
		data[gpuwarden.DataResolves] = key
		sev, key = gpuwarden.SeverityInfo, key+"-over"
		msg = fmt.Sprintf("%s %s event %s is over or canceled (%s)", n.Provider, n.Kind, n.ID, n.Detail)
	}
	return gpuwarden.Event{Kind: n.Kind, Severity: sev, Key: key, Message: msg, Data: data}
}

// OnSync alerts, once per checkpoint, when a supervised job's newest
// checkpoint did not reach its store: the work since the newest durable
// one is lost if the box goes now.
func (a *Agent) OnSync(job string, st gpuwarden.SyncReport) {
	if st.Durable || st.NewestCommitted == "" {
		return
	}
	newest := "none"
	if d := st.NewestDurable; d != nil {
		newest = fmt.Sprintf("step %d (%s)", d.Step, d.URL)
	}
	why := ""
	if n := len(st.Failures); n > 0 {
		why = ": " + st.Failures[n-1].Error
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a.alert(ctx, gpuwarden.Event{Kind: "checkpoint-not-durable", Severity: gpuwarden.SeverityCritical,
		Key: "not-durable-" + job + "-" + st.NewestCommitted,
		Message: fmt.Sprintf("job %s: checkpoint %s did not reach %s%s; newest durable checkpoint: %s",
			job, st.NewestCommitted, st.Target, why, newest),
		Data: map[string]string{"job": job, "checkpoint": st.NewestCommitted, "target": st.Target}})
}
