package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// IdleConfig says when the box counts as idle and what happens then.
type IdleConfig struct {
	// Window is how long every idle condition must hold (default 30 min).
	Window time.Duration
	// ThresholdPercent is the GPU utilisation under which a GPU is idle (default 5).
	ThresholdPercent float64
	// WarnBefore is how long before the stop the warning goes out (default 5
	// min, at most a third of the window).
	WarnBefore time.Duration
	// Off disables the idle policy altogether.
	Off bool
	// IgnoreSessions lets an open SSH or terminal session not keep the box busy.
	IgnoreSessions bool
	// StopWhenJobsEnd skips the window once every supervised job has
	// ended: the box stops at the first idle tick after the last one, since
	// nobody is coming back to a finished run (a person who is keeps it
	// busy with a session).
	StopWhenJobsEnd bool
	// BusyProcesses are process names that keep the box busy (jupyter, code-server).
	BusyProcesses []string
	// Script is a user command that votes: exit 0 means busy, exit 1 idle,
	// anything else no opinion. URL is an HTTP check answering {"idle": bool}.
	Script []string
	URL    string
	// CheckEvery bounds how often the script and URL run (default 15 s).
	CheckEvery time.Duration
	// OffWhy says why the idle stop is off, for the status.
	OffWhy string
	// Host thresholds, for a box whose GPUs cannot be read (no driver):
	// idle then also needs the host under all of them, since a box that
	// trains on its CPUs, or whose GPUs nobody can see, is not idle for
	// that (defaults 10 % of all cores, 1 MiB/s of disk, 256 KiB/s of
	// network).
	HostCPUPercent float64
	HostDiskBps    float64
	HostNetBps     float64
}

func (c *IdleConfig) defaults() {
	if c.Window <= 0 {
		c.Window = 30 * time.Minute
	}
	if c.ThresholdPercent <= 0 {
		c.ThresholdPercent = 5
	}
	if c.WarnBefore <= 0 {
		c.WarnBefore = 5 * time.Minute
	}
	c.WarnBefore = min(c.WarnBefore, c.Window/3)
	if c.CheckEvery <= 0 {
		c.CheckEvery = 15 * time.Second
	}
	if c.HostCPUPercent <= 0 {
		c.HostCPUPercent = 10
	}
	if c.HostDiskBps <= 0 {
		c.HostDiskBps = 1 << 20
	}
	if c.HostNetBps <= 0 {
		c.HostNetBps = 256 << 10
	}
}

// hostBusy is why the host is not quiet, for the rule of a box whose GPUs
// cannot be read.
func hostBusy(h gpuwarden.HostSample, cfg IdleConfig) []string {
	var busy []string
	if h.CPUPercent >= cfg.HostCPUPercent {
		busy = append(busy, fmt.Sprintf("CPU at %.0f%% (no GPU reading: idle needs a quiet host)", h.CPUPercent))
	}
	if d := h.DiskReadBps + h.DiskWriteBps; d >= cfg.HostDiskBps {
		busy = append(busy, fmt.Sprintf("disk at %.1f MiB/s (no GPU reading: idle needs a quiet host)", d/(1<<20)))
	}
	if n := h.NetRxBps + h.NetTxBps; n >= cfg.HostNetBps {
		busy = append(busy, fmt.Sprintf("network at %.0f KiB/s (no GPU reading: idle needs a quiet host)", n/(1<<10)))
	}
	return busy
}

// idleRule is the rule idleness follows on this box now.
func (a *Agent) idleRule() string {
	switch {
	case a.cfg.Idle.Off:
		return gpuwarden.IdleRuleOff
	case a.gpus == nil:
		return gpuwarden.IdleRuleHost
	}
	return gpuwarden.IdleRuleGPUs
}

// idleClock is when the box became idle; the ledger keeps it so that a
// restarted agent does not start the window again.
type idleClock struct {
	since time.Time
	// warnFrom is when this episode's warning is due, by the window it
	// ran under (shorter once the jobs ended); zero after a restart.
	warnFrom time.Time
}

const idleSinceKey = "idle_since"

func (c *idleClock) restore(ctx context.Context, l gpuwarden.Ledger) error {
	v, ok, err := l.State(ctx, idleSinceKey)
	if err != nil {
		return fmt.Errorf("read the idle clock: %w", err)
	}
	if ok && v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err == nil {
			c.since = t
		}
	}
	return nil
}

func (c *idleClock) set(ctx context.Context, l gpuwarden.Ledger, t time.Time) error {
	if t.Equal(c.since) {
		return nil
	}
	c.since = t
	if t.IsZero() {
		c.warnFrom = time.Time{}
	}
	v := ""
	if !t.IsZero() {
		v = t.UTC().Format(time.RFC3339Nano)
	}
	return l.SetState(ctx, idleSinceKey, v)
}

// busyReasons lists what keeps the box busy in a sample; empty means idle.
func (a *Agent) busyReasons(ctx context.Context, s gpuwarden.NodeSample, now time.Time) []string {
	cfg := a.cfg.Idle
	var busy []string
	a.mu.Lock()
	inv := make(map[int]gpuwarden.GPU, len(a.status.GPUs))
	for _, g := range a.status.GPUs {
		inv[g.Index] = g
	}
	pending := a.inventoryErr
	a.mu.Unlock()
	if pending != nil {
		busy = append(busy, fmt.Sprintf("GPUs unknown: the driver does not answer (%v); idle needs a reading", pending))
	}
	for _, g := range s.GPUs {
		busy = append(busy, gpuBusy(g, inv[g.Index], cfg.ThresholdPercent)...)
	}
	blind := a.gpus == nil
	if blind {
		busy = append(busy, hostBusy(s.Host, cfg)...)
	}
	if a.telemetryLost() {
		// Whatever else the sample says, a box whose GPUs stopped answering
		// is not known to be idle.
		busy = append(busy, "telemetry lost since "+a.telemetry.state.Since.UTC().Format(time.RFC3339)+"; idle waits for it")
	}
	for _, j := range a.Jobs.Active() {
		busy = append(busy, "job "+j.ID+" "+j.State)
	}
	if !cfg.IgnoreSessions && s.Host.Sessions > 0 {
		busy = append(busy, plural(s.Host.Sessions, "interactive session", "interactive sessions")+" (--ignore-sessions to let them be)")
	}
	for _, p := range cfg.BusyProcesses {
		for _, name := range s.Host.Processes {
			if strings.Contains(name, p) {
				busy = append(busy, "process "+name)
				break
			}
		}
	}
	switch a.vetoes.vote(ctx, cfg, now) {
	case voteBusy:
		busy = append(busy, "the idle check says busy")
	case voteIdle:
		// A declared idle box is idle whatever the signals say, except
		// blind: the check cannot vouch for GPUs nobody can read.
		if !a.telemetryLost() && pending == nil && !blind {
			return nil
		}
	}
	return busy
}

// idlePolicy advances the idle clock, warns before the stop and stops the
// box when the window has passed — never while a job is checkpointing.
func (a *Agent) idlePolicy(ctx context.Context, s gpuwarden.NodeSample, now time.Time) gpuwarden.IdleState {
	cfg := a.cfg.Idle
	st := gpuwarden.IdleState{WindowSeconds: cfg.Window.Seconds(), DryRun: a.cfg.DryRun, Rule: a.idleRule()}
	if cfg.Off {
		st.OffWhy = cfg.OffWhy
		return st
	}
	st.Busy = a.busyReasons(ctx, s, now)
	st.Idle = len(st.Busy) == 0
	a.logBusyChange(st)
	since := a.idle.since
	switch {
	case !st.Idle:
		a.mu.Lock()
		prev := a.lastTick
		a.mu.Unlock()
		warnFrom := a.idle.warnFrom
		if warnFrom.IsZero() {
			warnFrom = since.Add(cfg.Window - cfg.WarnBefore)
		}
		if !since.IsZero() && !prev.Before(warnFrom) {
			// The episode a warning (or a dry run's stop) went out for at
			// the previous tick is over: resolve those alerts, so that a
			// pager closes its incident.
			p := since.UTC().Format(time.RFC3339)
			a.alert(ctx, gpuwarden.Event{Kind: "idle-over", Severity: gpuwarden.SeverityInfo, Key: "idle-over-" + p,
				Message: fmt.Sprintf("%s is busy again (%s): the idle stop is off", a.cfg.Node, strings.Join(st.Busy, ", ")),
				Data:    map[string]string{gpuwarden.DataResolves: "idle-warning-" + p + " idle-stop-" + p}})
		}
		since = time.Time{}
	case since.IsZero():
		since = now
	}
	if err := a.idle.set(ctx, a.ledger, since); err != nil {
		a.warn(ctx, "keep the idle clock", "err", err)
	}
	if !st.Idle {
		return st
	}
	window, why := cfg.Window, fmt.Sprintf("idle for %s (GPUs under %g%%, no jobs)", cfg.Window, cfg.ThresholdPercent)
	if ended := a.Jobs.AllEndedAt(); cfg.StopWhenJobsEnd && !ended.IsZero() && !since.Before(ended) {
		window, why = 0, fmt.Sprintf("idle since its jobs ended at %s (--stop-when-jobs-end)", ended.UTC().Format(time.RFC3339))
	}
	warnBefore := min(cfg.WarnBefore, window/3)
	st.Since, st.StopAt = since, since.Add(window)
	a.idle.warnFrom = st.StopAt.Add(-warnBefore)
	period := since.UTC().Format(time.RFC3339)
	// The warning goes out before the stop, even when a restarted agent
	// finds the window already past.
	if !now.Before(st.StopAt.Add(-warnBefore)) {
		a.alert(ctx, gpuwarden.Event{Kind: "idle-warning", Severity: gpuwarden.SeverityWarning, Key: "idle-warning-" + period,
			Message: fmt.Sprintf("%s has been idle since %s: it stops at %s unless work starts",
				a.cfg.Node, since.UTC().Format(time.RFC3339), st.StopAt.UTC().Format(time.RFC3339))})
	}
	if !now.Before(st.StopAt) {
		if a.Jobs.Checkpointing() {
			a.log.Info("idle window passed, waiting for a checkpoint to finish")
			return st
		}
		if a.alert(ctx, gpuwarden.Event{Kind: "idle-stop", Severity: gpuwarden.SeverityCritical, Key: "idle-stop-" + period,
			Message: fmt.Sprintf("%s %s: stopping with %s", a.cfg.Node, why, a.cfg.Stop.method())}) || a.stopRetryDue(now) {
			a.stop(ctx, "idle")
		}
	}
	return st
}

// logBusyChange logs why the box is busy when it first decides so and
// whenever the kind of reason changes (a figure changing is not news), and
// when it turns idle: a user whose own terminal keeps the box busy reads
// it in the log, not only in the status.
func (a *Agent) logBusyChange(st gpuwarden.IdleState) {
	sig := "idle"
	if !st.Idle {
		parts := make([]string, len(st.Busy))
		for i, b := range st.Busy {
			parts[i] = digitsOut.ReplaceAllString(b, "#")
		}
		sig = strings.Join(parts, "\x00")
	}
	if sig == a.busySig {
		return
	}
	a.busySig = sig
	if st.Idle {
		a.log.Info("the box is idle", "rule", st.Rule, "stops_after", a.cfg.Idle.Window)
		return
	}
	a.log.Info("the box is busy", "because", strings.Join(st.Busy, "; "), "rule", st.Rule)
}

var digitsOut = regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)

// The votes of the pluggable idle checks.
const (
	voteNone = iota
	voteBusy
	voteIdle
)

// vetoCache runs the user's idle checks at most every CheckEvery.
type vetoCache struct {
	mu   sync.Mutex
	at   time.Time
	last int
}

func (v *vetoCache) vote(ctx context.Context, cfg IdleConfig, now time.Time) int {
	if len(cfg.Script) == 0 && cfg.URL == "" {
		return voteNone
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.at.IsZero() && now.Sub(v.at) < cfg.CheckEvery {
		return v.last
	}
	v.at = now
	v.last = voteNone
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if len(cfg.Script) > 0 {
		err := exec.CommandContext(cctx, cfg.Script[0], cfg.Script[1:]...).Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
			v.last = voteBusy
		case errors.As(err, &ee) && ee.ExitCode() == 1:
			v.last = voteIdle
		}
		if v.last != voteNone {
			return v.last
		}
	}
	if cfg.URL != "" {
		v.last = urlVote(cctx, cfg.URL)
	}
	return v.last
}

// urlVote asks an HTTP check; anything but a 200 with {"idle": bool} is no opinion.
func urlVote(ctx context.Context, url string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return voteNone
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return voteNone
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return voteNone
	}
	var body struct {
		Idle *bool `json:"idle"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&body); err != nil || body.Idle == nil {
		return voteNone
	}
	if *body.Idle {
		return voteIdle
	}
	return voteBusy
}

// Jobs are the jobs `gpuwarden run` reports over the socket.
type Jobs struct {
	mu   sync.Mutex
	jobs map[string]Job
	// undurable keeps, past a job's end, its last report whose newest
	// checkpoint never reached the store: a stop that destroys the box
	// (Lambda's terminate) would lose it.
	undurable map[string]Job
	// allEnded is when the last job ended with no other running: zero
	// while one runs or before any has run. A supervisor that went away
	// (Forget) did not end its job, so it does not set this.
	allEnded time.Time
}

// Job is one supervised job's last reported state.
type Job = gpuwarden.SupervisedJob

// The job states a supervisor reports.
const (
	JobRunning       = "running"
	JobCheckpointing = "checkpointing"
	JobDone          = "done"
)

// NewJobs returns an empty registry.
func NewJobs() *Jobs { return &Jobs{jobs: map[string]Job{}, undurable: map[string]Job{}} }

// Report records a job's state; done removes it.
func (j *Jobs) Report(id, state string, now time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if state == JobDone {
		if _, ok := j.jobs[id]; ok {
			delete(j.jobs, id)
			if len(j.jobs) == 0 {
				j.allEnded = now
			}
		}
		return
	}
	j.allEnded = time.Time{}
	job := j.jobs[id]
	job.ID, job.State, job.Seen = id, state, now
	j.jobs[id] = job
}

// Sync records a job's durability report.
func (j *Jobs) Sync(id string, st gpuwarden.SyncReport, now time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	job, ok := j.jobs[id]
	if !ok {
		job = Job{ID: id, State: JobRunning}
	}
	job.Seen, job.Sync = now, &st
	j.jobs[id] = job
	if st.Durable || st.NewestCommitted == "" {
		delete(j.undurable, id)
	} else {
		j.undurable[id] = job
	}
}

// Undurable lists the jobs, running or ended, whose newest checkpoint is
// not in their store, sorted by ID.
func (j *Jobs) Undurable() []Job {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]Job, 0, len(j.undurable))
	for _, v := range j.undurable {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b Job) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// AllEndedAt is when the last supervised job ended, with none running
// since; zero otherwise.
func (j *Jobs) AllEndedAt() time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.allEnded
}

// Forget removes a job whose supervisor went away.
func (j *Jobs) Forget(id string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.jobs, id)
}

// Active lists the jobs, sorted by ID.
func (j *Jobs) Active() []Job {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]Job, 0, len(j.jobs))
	for _, v := range j.jobs {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b Job) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Checkpointing reports whether any job is writing a checkpoint now.
func (j *Jobs) Checkpointing() bool {
	for _, v := range j.Active() {
		if v.State == JobCheckpointing {
			return true
		}
	}
	return false
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
