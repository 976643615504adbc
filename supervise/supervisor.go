package supervise

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// The job states OnState reports, the words the agent's socket takes.
const (
	StateRunning       = "running"
	StateCheckpointing = "checkpointing"
	StateDone          = "done"
)

// The environment a job sees.
const (
	// EnvCheckpointDir is where the job writes each checkpoint, one directory
	// per checkpoint, and marks it complete with a .complete file.
	EnvCheckpointDir = "GPUWARDEN_CHECKPOINT_DIR"
	// EnvResumeFrom is the absolute path of the checkpoint to resume from,
	// empty on a fresh start.
	EnvResumeFrom = "GPUWARDEN_RESUME_FROM"
	// EnvAttempt counts attempts from 1.
	EnvAttempt = "GPUWARDEN_ATTEMPT"
	// ResumePlaceholder in an argument becomes the resume path, or the
	// empty string on a fresh start, so "--resume={resume}" becomes "--resume=".
	// In the script of sh -c (bash -c, …) the path is shell-quoted where it
	// needs to be: see substituteResume.
	ResumePlaceholder = "{resume}"
)

// Supervisor defaults.
const (
	// DefaultGrace is how long a job has to commit a checkpoint after the
	// checkpoint signal: AWS warns 2 minutes ahead, and the stop needs the rest.
	DefaultGrace = 90 * time.Second
	// DefaultStopWait is how long SIGTERM has before SIGKILL.
	DefaultStopWait = 10 * time.Second
	// DefaultKeep is how many valid checkpoints stay on the box.
	DefaultKeep = 3
	// DefaultMaintenanceLead is how long before a scheduled event the job
	// is checkpointed and stopped: enough for a large checkpoint and its
	// upload, short enough to lose little time.
	DefaultMaintenanceLead = 10 * time.Minute
	// DefaultSyncTimeout bounds one upload of a checkpoint.
	DefaultSyncTimeout = 30 * time.Minute
	// minGrace is the least a job gets to checkpoint for a notice heard
	// late: never zero, or the signal and SIGTERM land together.
	minGrace = 10 * time.Second
	// startupWindow and resendAfter: a job signalled within its first
	// seconds may not have its handler in place yet (a Go runtime swallows
	// SIGUSR1 until signal.Notify), so it is signalled once more after a
	// pause when no checkpoint came. Later signals are never repeated: a
	// second one could start a second multi-gigabyte save.
	startupWindow = 5 * time.Second
	resendAfter   = 2 * time.Second
)

// jobRecordName is the file in the checkpoint root that names the running
// job's processes, so the next run can end what a killed supervisor left.
const jobRecordName = ".gpuwarden-job.json"

// runLockName is held by the supervisor for its whole run: one job per root.
const runLockName = ".gpuwarden-run.lock"

// Supervisor runs a job until it succeeds, fails beyond its retry budget,
// the box goes away or the supervisor is stopped, resuming every restart
// from the newest valid checkpoint.
type Supervisor struct {
	// Argv is the job's command; each ResumePlaceholder in it is replaced.
	Argv []string
	// CheckpointDir is the checkpoint root D (D/incoming, D/committed).
	CheckpointDir string
	// Env is added to this process's environment for the job; the
	// GPUWARDEN_* variables are set after it and win.
	Env []string
	// Dir is the job's working directory, "" for this process's.
	Dir string
	// Out receives the job's combined stdout and stderr; nil discards it.
	Out io.Writer
	// Policy decides restarts; its zero value is the default budgets and backoff.
	Policy Policy
	// CheckpointSignal asks the job to checkpoint now; zero means SIGUSR1.
	// It goes only to the job's processes that catch it: to the others its
	// default action would be death.
	CheckpointSignal syscall.Signal
	// Grace is how long to wait for a new checkpoint after the signal; zero
	// means DefaultGrace. A notice's deadline shortens it so the stop ends in time.
	Grace time.Duration
	// StopWait is how long SIGTERM has before SIGKILL; zero means DefaultStopWait.
	StopWait time.Duration
	// MaintenanceLead is how long before a scheduled event the job is
	// checkpointed and stopped; zero means DefaultMaintenanceLead.
	MaintenanceLead time.Duration
	// Store keeps committed checkpoints durable off the box; nil keeps them
	// only here. With a store, a box without a valid checkpoint resumes the
	// newest one the store verifies, and the report says what is durable.
	Store gpuwarden.CheckpointStore
	// SyncTimeout bounds one upload; zero means DefaultSyncTimeout.
	SyncTimeout time.Duration
	// KeepRemote removes old checkpoints from the store after each verified
	// upload, never protect (the newest durable one); nil keeps them all.
	KeepRemote func(ctx context.Context, protect string) ([]string, error)
	// Approve acknowledges a notice to its provider once the checkpoint
	// answering it committed (Azure's StartRequests); nil never does.
	Approve func(ctx context.Context, n gpuwarden.Notice) error
	// OnCommit hears each committed checkpoint.
	OnCommit func(gpuwarden.Checkpoint)
	// OnSync hears the sync state after every upload, for the agent.
	OnSync func(gpuwarden.SyncReport)
	// OnNotice hears each notice record when it is made or changes: the
	// place to alert.
	OnNotice func(gpuwarden.NoticeRecord)
	// OnState reports "running", "checkpointing" and "done" to the agent.
	OnState func(state string)
	// Log is the injected logger; nil discards.
	Log *slog.Logger
	// Now and Sleep are the clock and the backoff wait, fields so tests control them.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	// OOMCheck says whether the kernel OOM killer killed one of pids since
	// the attempt began; nil means OOMKilled.
	OOMCheck func(pids []int, since time.Time) bool
	// Keep is how many valid checkpoints to keep, here and in the store;
	// zero means DefaultKeep.
	Keep int
}

// resolved returns a copy with the defaults filled in.
func (s *Supervisor) resolved() (Supervisor, error) {
	c := *s
	if len(c.Argv) == 0 {
		return c, gpuwarden.Errorf(gpuwarden.EInvalid, "supervise: no command").WithHint("give the job after --: gpuwarden run -- python train.py")
	}
	if c.CheckpointDir == "" {
		return c, gpuwarden.Errorf(gpuwarden.EInvalid, "supervise: no checkpoint directory")
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.CheckpointSignal == 0 {
		c.CheckpointSignal = syscall.SIGUSR1
	}
	if c.Grace <= 0 {
		c.Grace = DefaultGrace
	}
	if c.StopWait <= 0 {
		c.StopWait = DefaultStopWait
	}
	if c.MaintenanceLead <= 0 {
		c.MaintenanceLead = DefaultMaintenanceLead
	}
	if c.SyncTimeout <= 0 {
		c.SyncTimeout = DefaultSyncTimeout
	}
	if c.Keep <= 0 {
		c.Keep = DefaultKeep
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	c.Log = c.Log.With("component", "supervise")
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Sleep == nil {
		c.Sleep = sleepCtx
	}
	if c.OOMCheck == nil {
		c.OOMCheck = OOMKilled
	}
	if c.OnState == nil {
		c.OnState = func(string) {}
	}
	return c, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// runner is one Run's state shared with the watcher's callback.
type runner struct {
	c       *Supervisor
	root    *Root
	watcher *Watcher
	cache   *hashCache
	notices <-chan gpuwarden.Notice
	events  *noticeBook
	sync    *syncTracker

	// started is when the running attempt's job started.
	started  time.Time
	commitCh chan struct{}
	mu       sync.Mutex
	commits  int
	last     time.Time // the last commit
	cps      []gpuwarden.Checkpoint
}

// ending is why an attempt ended.
type ending int

const (
	// endedByItself: the job exited on its own.
	endedByItself ending = iota
	// endedForNotice: the supervisor stopped it for a notice.
	endedForNotice
	// endedCancelled: the supervisor itself is being stopped.
	endedCancelled
)

// Run supervises the job until it exits 0, ends in a way its policy does not
// retry, the box goes away, or ctx is cancelled (the supervisor itself is
// being stopped), which stops the running attempt gracefully, as a notice
// does, and does not restart. Notices are acted on by kind and time left,
// as gpuwarden.NoticeEffects says. The error is for the supervisor's own
// failures (no command, a command that cannot start, a root it cannot use);
// how the job ended is in the report.
func (s *Supervisor) Run(ctx context.Context, notices <-chan gpuwarden.Notice) (gpuwarden.RunReport, error) {
	report := gpuwarden.RunReport{Command: s.Argv, Restarts: map[string]int{}, Notices: []gpuwarden.NoticeRecord{}}
	c, err := s.resolved()
	if err != nil {
		return report, err
	}
	defer c.OnState(StateDone)
	report.Start = c.Now()
	root, err := OpenRoot(c.CheckpointDir)
	if err != nil {
		return report, fmt.Errorf("supervise: %w", err)
	}
	defer root.Close()
	unlock, err := root.claim()
	if err != nil {
		return report, err
	}
	defer unlock()
	if killed, err := EndLeftovers(root.abs(jobRecordName)); err != nil {
		return report, fmt.Errorf("supervise: %w", err)
	} else if len(killed) > 0 {
		c.Log.Warn("ended processes a killed supervisor left behind", "pids", killed)
	}
	for _, name := range root.foreign() {
		c.Log.Warn("not a checkpoint gpuwarden wrote; never resumed", "name", fmt.Sprintf("%q", name), "in", root.abs(CommittedDir))
	}
	r := &runner{c: &c, root: root, cache: newHashCache(), notices: notices, commitCh: make(chan struct{}, 1)}
	r.events = newNoticeBook(&c)
	if c.Store != nil {
		r.sync = newSyncTracker(&c, root)
		if err := r.sync.begin(ctx); err != nil {
			return report, err
		}
	}
	w, err := NewWatcher(root, r.onCommit, c.Log)
	if err != nil {
		return report, fmt.Errorf("supervise: %w", err)
	}
	w.now, w.cache = c.Now, r.cache
	r.watcher = w

	total := 0
	var why string
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			if n == 1 {
				return r.finish(report), fmt.Errorf("supervise: %w", err)
			}
			report.Result, why = gpuwarden.ResultStopped, "the supervisor was stopped"
			break
		}
		a, end, err := r.attempt(ctx, n)
		if err != nil {
			return r.finish(report), err
		}
		report.Attempts = append(report.Attempts, a)
		report.LostSeconds += a.LostSeconds
		report.JobExitCode, report.JobClass = a.ExitCode, a.Class
		if end == endedCancelled {
			c.Log.Info("supervisor stopped; not restarting", "attempt", n)
			report.Result, why = gpuwarden.ResultStopped, "the supervisor was stopped; the job was checkpointed and stopped"
			break
		}
		if end == endedForNotice {
			if doom, ok := r.events.doomed(); ok {
				report.Result, why = gpuwarden.ResultPreempted, r.waitForTheEnd(ctx, doom)
				break
			}
			if cancelled := r.waitForEvents(ctx); cancelled {
				report.Result, why = gpuwarden.ResultStopped, "the supervisor was stopped while the job waited out a scheduled event"
				break
			}
			if doom, ok := r.events.doomed(); ok {
				report.Result, why = gpuwarden.ResultPreempted, r.waitForTheEnd(ctx, doom)
				break
			}
		}
		if a.Class == gpuwarden.ExitOK {
			report.Result, why = gpuwarden.ResultOK, "the job finished"
			break
		}
		retry, wait, reason := c.Policy.Next(a.Class, report.Restarts, total)
		if !retry {
			c.Log.Warn("not restarting", "attempt", n, "class", a.Class, "why", reason)
			report.Result, why = a.Class, fmt.Sprintf("the job ended %s (exit %d); not restarted: %s", a.Class, a.ExitCode, reason)
			break
		}
		c.Log.Info("restarting", "attempt", n, "class", a.Class, "why", reason, "wait", wait)
		report.Restarts[a.Class]++
		total++
		if err := c.Sleep(ctx, wait); err != nil {
			c.Log.Info("supervisor stopped during backoff; not restarting", "attempt", n)
			report.Result, why = gpuwarden.ResultStopped, "the supervisor was stopped before a restart"
			break
		}
	}
	report.Why = why
	return r.finish(report), nil
}

// finish fills in what the run leaves behind: its checkpoints, its notices
// and, with a store, whether the newest checkpoint is durable, which can
// turn an ok into not-durable.
func (r *runner) finish(report gpuwarden.RunReport) gpuwarden.RunReport {
	c := r.c
	r.mu.Lock()
	report.Checkpoints = append([]gpuwarden.Checkpoint{}, r.cps...)
	r.mu.Unlock()
	report.Notices = r.events.records()
	if r.sync != nil {
		st := r.sync.settle()
		report.Sync = &st
		if !st.Durable && st.NewestCommitted != "" {
			newest := "no checkpoint at all"
			if d := st.NewestDurable; d != nil {
				newest = fmt.Sprintf("step %d (%s)", d.Step, d.Name)
			}
			msg := fmt.Sprintf("newest committed checkpoint %s never reached %s; the newest durable one is %s", st.NewestCommitted, st.Target, newest)
			c.Log.Error("checkpoint not durable", "newest_committed", st.NewestCommitted, "newest_durable", newest, "to", st.Target)
			if report.Result == gpuwarden.ResultOK {
				report.Result = gpuwarden.ResultNotDurable
				report.Why = "the job finished, but " + msg
			} else if report.Why != "" {
				report.Why += "; " + msg
			}
		}
	}
	report.End = c.Now()
	report.ExitCode = report.RunExitCode()
	return report
}

// waitForTheEnd keeps the job stopped on a box that goes away, until the
// provider's deadline or ctx, and says so: restarting it here would only
// be interrupted again.
func (r *runner) waitForTheEnd(ctx context.Context, doom *event) string {
	c := r.c
	left := doom.deadline().Sub(c.Now())
	c.Log.Warn("the box goes away; not restarting the job here", "kind", doom.n.Kind, "at", doom.deadline().UTC().Format(time.RFC3339), "wait", left.Round(time.Second))
	if left > 0 {
		_ = c.Sleep(ctx, left)
	}
	return fmt.Sprintf("%s %s notice (%s): the job was checkpointed and stopped, and is not restarted on this box; requeue it elsewhere", doom.n.Provider, doom.n.Kind, doom.n.Detail)
}

// waitForEvents keeps the job stopped while an interrupting event it was
// stopped for is pending: until the provider reports it completed or
// canceled, or, with no source left to say so, until its time passed by a
// lead. It reports whether ctx ended the wait.
func (r *runner) waitForEvents(ctx context.Context) bool {
	c := r.c
	for {
		pend, until := r.events.holding(r.notices == nil)
		if pend == nil {
			return false
		}
		c.Log.Info("job stopped until the event is over", "kind", pend.n.Kind, "id", pend.n.ID, "at", pend.n.At.UTC().Format(time.RFC3339))
		var timeout <-chan time.Time
		var t *time.Timer
		if !until.IsZero() {
			t = time.NewTimer(max(until.Sub(c.Now()), 0))
			timeout = t.C
		}
		select {
		case <-ctx.Done():
			return true
		case nt, open := <-r.notices:
			if !open {
				r.notices = nil
			} else {
				r.events.absorb(nt)
			}
		case <-timeout:
			r.events.expire(pend)
		}
		if t != nil {
			t.Stop()
		}
	}
}

// claim takes the root's run lock, so that two supervisors never run jobs
// over the same checkpoints.
func (r *Root) claim() (func(), error) {
	f, err := r.fs.OpenFile(runLockName, os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("supervise: lock %s: %w", r.path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, gpuwarden.Errorf(gpuwarden.EConflict, "another gpuwarden run is supervising a job over %s", r.path).
				WithHint("give each job its own --checkpoint-dir, or wait for the other run to end")
		}
		return nil, fmt.Errorf("supervise: lock %s: %w", r.path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// attempt runs the job once: resume from the newest valid checkpoint, run
// while the watcher commits checkpoints, act on notices, stop for one that
// interrupts the box or on cancellation.
func (r *runner) attempt(ctx context.Context, n int) (a gpuwarden.Attempt, end ending, err error) {
	c := r.c
	log := c.Log.With("attempt", n)
	// A checkpoint marked complete just before the last supervisor died is
	// committed now; what is left unmarked is a partial write of a dead job.
	r.watcher.Scan()
	if removed, err := r.root.cleanIncoming(); err != nil {
		log.Warn("clean incoming checkpoints", "err", err)
	} else if len(removed) > 0 {
		log.Info("removed partial checkpoints", "names", removed)
	}
	cp, ok, torn, err := r.root.newest()
	if err != nil {
		return a, endedByItself, fmt.Errorf("supervise: %w", err)
	}
	for _, t := range torn {
		log.Warn("skipping torn checkpoint", "name", t.Name, "reason", t.Reason)
	}
	resume := ""
	if ok {
		resume = cp.Path
		a.ResumedFrom = cp.Name
	}
	if n == 1 && r.sync != nil {
		r.sync.resumed(a.ResumedFrom)
	}
	argv := substituteResume(c.Argv, resume)
	env := jobEnv(c.Env, map[string]string{
		EnvCheckpointDir: r.root.abs(IncomingDir),
		EnvResumeFrom:    resume,
		EnvAttempt:       strconv.Itoa(n),
	})

	start := c.Now()
	a.Number, a.Start = n, start
	r.started = start
	r.mu.Lock()
	r.last = time.Time{}
	r.mu.Unlock()
	p, err := Start(context.WithoutCancel(ctx), argv, env, c.Dir, c.Out)
	if err != nil {
		return a, endedByItself, startError(n, err)
	}
	record := r.root.abs(jobRecordName)
	if err := WriteJobRecord(record, p); err != nil {
		log.Warn("record the job's processes", "err", err)
	}
	log.Info("job started", "pid", p.Pid(), "resume_from", a.ResumedFrom, "isolation", p.Isolation())
	c.OnState(StateRunning)
	wctx, wcancel := context.WithCancel(context.Background())
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		r.watcher.Run(wctx)
	}()

	end = r.supervise(ctx, p, log)
	ex := p.Wait()
	wcancel()
	<-wdone
	r.watcher.Scan()
	if err := RemoveJobRecord(record); err != nil {
		log.Warn("remove the job record", "err", err)
	}
	finished := c.Now()

	tail := p.Tail()
	hostOOM := false
	stopped := end != endedByItself
	if !stopped && !ex.OK() {
		hostOOM = c.OOMCheck(p.Pids(), start)
	}
	class, reason := Explain(ex, tail, stopped, hostOOM)
	a.End = finished
	a.ExitCode = ex.Code
	if ex.Signal != 0 {
		a.Signal = signalName(ex.Signal)
	}
	a.Class = class
	a.Tail = tail
	a.UserCPU, a.SysCPU, a.MaxRSS = ex.UserCPU, ex.SysCPU, ex.MaxRSS
	if class != gpuwarden.ExitOK {
		r.mu.Lock()
		since := r.last
		r.mu.Unlock()
		if since.Before(start) {
			since = start
		}
		a.LostSeconds = max(finished.Sub(since).Seconds(), 0)
	}
	log.Info("job ended", "exit", ex.String(), "class", class, "reason", reason, "lost_s", a.LostSeconds)
	return a, end, nil
}

// supervise waits for the job while acting on notices: an insurance
// checkpoint for advice, a stop now for a box that goes away or an event
// that is here, a stop set for later for one in the future.
func (r *runner) supervise(ctx context.Context, p *Proc, log *slog.Logger) ending {
	c := r.c
	var insurance *insuranceWait
	defer func() {
		if insurance != nil {
			insurance.stop()
		}
	}()
	// One timer for the next scheduled stop, re-armed on every turn (since
	// Go 1.23 a Reset timer never delivers a stale tick).
	dueTimer := time.NewTimer(time.Hour)
	defer dueTimer.Stop()
	for {
		due := r.events.nextStop()
		dueTimer.Stop()
		var dueC <-chan time.Time
		if due != nil {
			dueTimer.Reset(max(due.stopAt.Sub(c.Now()), 0))
			dueC = dueTimer.C
		}
		var insC, insResend <-chan time.Time
		if insurance != nil {
			insC, insResend = insurance.timer.C, insurance.resend
		}
		select {
		case <-p.Done():
			if insurance != nil {
				// A job that checkpoints and then ends may be seen to end
				// before its commit is: the checkpoint still answers.
				r.answered(insurance.ev, insurance.base)
			}
			return endedByItself
		case <-ctx.Done():
			log.Info("supervisor stopping; checkpointing the job")
			if _, signalled := r.stop(ctx, p, c.Grace, nil, log); !signalled {
				return endedByItself
			}
			return endedCancelled
		case nt, open := <-r.notices:
			if !open {
				r.notices = nil
				continue
			}
			ev, act := r.events.take(nt)
			switch act {
			case actStop:
				log.Info("notice: checkpointing and stopping the job", "provider", nt.Provider, "kind", nt.Kind, "at", nt.At, "id", nt.ID)
				return stopEnding(r.stop(ctx, p, r.graceFor(ev), ev, log))
			case actInsurance:
				if insurance == nil {
					insurance = r.insure(p, ev, log)
				} else {
					r.events.note(ev, "answered by the insurance checkpoint already asked for")
				}
			}
		case <-dueC:
			log.Info("scheduled event close: checkpointing and stopping the job", "kind", due.n.Kind, "at", due.n.At, "id", due.n.ID)
			r.events.stopping(due)
			return stopEnding(r.stop(ctx, p, r.graceFor(due), due, log))
		case <-r.commitCh:
			if insurance != nil && r.commitsSince(insurance.base) {
				r.events.answered(insurance.ev, r.newestName())
				r.approve(insurance.ev, log)
				insurance.stop()
				insurance = nil
				c.OnState(StateRunning)
			}
		case <-insResend:
			insurance.resend = nil
			r.resend(p, insurance.base, insurance.ev, log)
		case <-insC:
			log.Warn("no insurance checkpoint within the grace period; the job keeps running", "grace", c.Grace)
			r.events.note(insurance.ev, "no checkpoint came within the grace")
			insurance = nil
			c.OnState(StateRunning)
		}
	}
}

// stopEnding says how an attempt stopped for a notice ended: by itself
// when the job was gone before any signal landed, so that its own exit
// decides (a finished job is not "preempted").
func stopEnding(cancelled, signalled bool) ending {
	switch {
	case !signalled:
		return endedByItself
	case cancelled:
		return endedCancelled
	}
	return endedForNotice
}

// insuranceWait is a checkpoint asked for while the job keeps running.
type insuranceWait struct {
	ev     *event
	base   int
	timer  *time.Timer
	resend <-chan time.Time
}

func (w *insuranceWait) stop() { w.timer.Stop() }

// insure asks the job for a checkpoint and keeps it running; nil when the
// job does not catch the signal, which is then only logged: an insurance
// checkpoint is not worth killing the job over.
func (r *runner) insure(p *Proc, ev *event, log *slog.Logger) *insuranceWait {
	c := r.c
	base := r.commitCount()
	sent, _, err := p.SignalCatchersStarted(c.CheckpointSignal, handlerWait)
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		log.Warn("checkpoint signal", "err", err)
	}
	if len(sent) == 0 {
		log.Warn("the job does not catch the checkpoint signal; no insurance checkpoint", "signal", signalName(c.CheckpointSignal), "kind", ev.n.Kind)
		r.events.signalled(ev, fmt.Sprintf("none: no process of the job catches %s", signalName(c.CheckpointSignal)), 0)
		return nil
	}
	log.Warn("notice: insurance checkpoint, the job keeps running", "provider", ev.n.Provider, "kind", ev.n.Kind, "detail", ev.n.Detail)
	r.events.signalled(ev, fmt.Sprintf("%s to %s", signalName(c.CheckpointSignal), processes(len(sent))), c.Grace)
	c.OnState(StateCheckpointing)
	return &insuranceWait{ev: ev, base: base, timer: time.NewTimer(c.Grace), resend: r.resendTimer(c.Grace)}
}

// graceFor is the checkpoint wait for an event: Grace, shortened when a box
// that goes away has a deadline, so that SIGTERM and SIGKILL still fit
// before it, but never under minGrace. A scheduled event's time is the start
// of the provider's window, not an instant, so one that is already here
// gets the whole Grace.
func (r *runner) graceFor(ev *event) time.Duration {
	c := r.c
	g := c.Grace
	if ev == nil || !ev.effect.Ends || ev.n.At.IsZero() {
		return g
	}
	left := ev.n.At.Sub(c.Now()) - c.StopWait
	if left < g {
		g = max(left, min(minGrace, c.Grace))
	}
	return g
}

// stop asks the job for a checkpoint, waits for a new commit or the grace,
// then SIGTERM, then SIGKILL; it returns once the job is gone and reports
// whether ctx was cancelled meanwhile. A job none of whose processes
// catches the checkpoint signal is sent SIGTERM at once and given the
// grace, since many jobs save on SIGTERM; the signal's default action
// would kill it with nothing saved. Notices arriving during the stop are
// taken as answered by it.
func (r *runner) stop(ctx context.Context, p *Proc, grace time.Duration, ev *event, log *slog.Logger) (cancelled, signalled bool) {
	c := r.c
	ctxDone := ctx.Done()
	if ctx.Err() != nil {
		cancelled, ctxDone = true, nil
	}
	if p.ended() {
		// It finished as the notice came: nothing was sent, nothing to stop.
		r.events.note(ev, "the job had already ended; nothing was sent")
		return cancelled, false
	}
	c.OnState(StateCheckpointing)
	base := r.commitCount()
	termWait := c.StopWait
	// A job that has just started may not catch the signal yet: it is given
	// up to half the grace to, and what it took comes off the grace.
	sent, waited, err := p.SignalCatchersStarted(c.CheckpointSignal, grace/2)
	grace -= waited
	switch {
	case errors.Is(err, os.ErrProcessDone):
		r.events.note(ev, "the job had already ended; nothing was sent")
		return cancelled, false
	case err != nil:
		log.Warn("checkpoint signal", "err", err)
	}
	signalled = true
	if len(sent) == 0 {
		why := fmt.Sprintf("no process of the job catches %s: sent SIGTERM with the whole %s grace instead", signalName(c.CheckpointSignal), grace)
		log.Warn("the job does not catch the checkpoint signal; stopping it with SIGTERM and the full grace", "signal", signalName(c.CheckpointSignal), "grace", grace)
		r.events.signalled(ev, why, grace)
		termWait, grace = grace, 0
	} else {
		r.events.signalled(ev, fmt.Sprintf("%s to %s, SIGTERM after a commit or %s", signalName(c.CheckpointSignal), processes(len(sent)), grace), grace)
	}
	if grace > 0 {
		timer := time.NewTimer(grace)
		defer timer.Stop()
		resend := r.resendTimer(grace)
	checkpoint:
		for {
			select {
			case <-p.Done():
				r.answered(ev, base)
				return cancelled, signalled
			case <-resend:
				resend = nil
				r.resend(p, base, ev, log)
			case <-r.commitCh:
				if r.commitsSince(base) {
					log.Info("checkpoint committed after the signal; stopping the job")
					break checkpoint
				}
			case <-timer.C:
				log.Warn("no checkpoint within the grace period; stopping the job", "grace", grace)
				break checkpoint
			case <-ctxDone:
				cancelled, ctxDone = true, nil
			case nt, open := <-r.notices:
				if !open {
					r.notices = nil
					continue
				}
				r.events.absorb(nt)
			}
		}
	}
	if err := p.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		log.Warn("terminate job", "err", err)
	}
	term := time.NewTimer(termWait)
	defer term.Stop()
	for {
		select {
		case <-p.Done():
			r.answered(ev, base)
			return cancelled, signalled
		case <-term.C:
			log.Warn("job ignored SIGTERM; killing it", "wait", termWait)
			_ = p.KillGroup(syscall.SIGKILL)
			<-p.Done()
			r.answered(ev, base)
			return cancelled, signalled
		case <-ctxDone:
			cancelled, ctxDone = true, nil
		case nt, open := <-r.notices:
			if !open {
				r.notices = nil
				continue
			}
			r.events.absorb(nt)
		}
	}
}

// resendTimer fires once after resendAfter when the job is young enough
// that the first signal may have come before its handler; nil otherwise.
func (r *runner) resendTimer(grace time.Duration) <-chan time.Time {
	if r.c.Now().Sub(r.started) >= startupWindow || grace <= resendAfter {
		return nil
	}
	return time.After(resendAfter)
}

// resend signals the catchers again when no checkpoint came yet.
func (r *runner) resend(p *Proc, base int, ev *event, log *slog.Logger) {
	if r.commitsSince(base) {
		return
	}
	sent, err := p.SignalCatchers(r.c.CheckpointSignal)
	if err != nil || len(sent) == 0 {
		return
	}
	log.Info("the job was signalled in its first seconds, maybe before its handler was in place; signalled once more", "signal", signalName(r.c.CheckpointSignal))
	r.events.note(ev, "signalled once more: the first signal came in the job's first seconds")
}

// answered notes the checkpoint the job committed for an event, once the
// job is gone and the watcher has had its last look, and acknowledges the
// event to the provider when asked to.
func (r *runner) answered(ev *event, base int) {
	if ev == nil {
		return
	}
	r.watcher.Scan()
	if r.commitsSince(base) {
		r.events.answered(ev, r.newestName())
		r.approve(ev, r.c.Log)
	} else {
		r.events.note(ev, "no checkpoint was committed in answer")
	}
}

// approve acknowledges an answered event to its provider, when configured.
func (r *runner) approve(ev *event, log *slog.Logger) {
	if r.c.Approve == nil || ev == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.c.Approve(ctx, ev.n); err != nil {
		log.Warn("approve the event", "provider", ev.n.Provider, "id", ev.n.ID, "err", err)
		r.events.note(ev, "approving it failed: "+err.Error())
		return
	}
	log.Info("approved the event: the provider may start it now", "provider", ev.n.Provider, "id", ev.n.ID)
	r.events.note(ev, "approved to the provider after the checkpoint committed")
}

func (r *runner) commitCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.commits
}

func (r *runner) commitsSince(base int) bool { return r.commitCount() > base }

func (r *runner) newestName() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.cps) == 0 {
		return ""
	}
	return r.cps[len(r.cps)-1].Name
}

// onCommit runs on the watcher's goroutine for every new checkpoint: it
// wakes a waiting stop, syncs the checkpoint and prunes old ones.
func (r *runner) onCommit(cp gpuwarden.Checkpoint) {
	c := r.c
	r.mu.Lock()
	r.commits++
	r.last = c.Now()
	r.cps = append(r.cps, cp)
	r.mu.Unlock()
	// Log the commit before waking a waiting stop, which logs that it saw
	// it: the other way round the log could say "committed after the
	// signal" before it says which checkpoint was committed.
	c.Log.Info("checkpoint committed", "name", cp.Name, "step", cp.Step, "files", len(cp.Files), "bytes", cp.Bytes)
	select {
	case r.commitCh <- struct{}{}:
	default:
	}
	if c.OnCommit != nil {
		c.OnCommit(cp)
	}
	if r.sync != nil {
		r.sync.push(cp)
	}
	removed, err := r.root.prune(c.Keep, r.cache, seqOf(cp.Name))
	if err != nil {
		c.Log.Warn("prune checkpoints", "err", err)
	}
	if len(removed) > 0 {
		c.Log.Info("pruned checkpoints", "names", removed, "keep", c.Keep)
	}
}

// processes says "1 process" or "N processes".
func processes(n int) string {
	if n == 1 {
		return "1 process"
	}
	return strconv.Itoa(n) + " processes"
}

// startError makes a command that cannot run bad input, and anything else internal.
func startError(n int, err error) error {
	msg := "supervise: attempt " + strconv.Itoa(n)
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		return (&gpuwarden.Error{Code: gpuwarden.EInvalid, Message: msg, Err: err}).WithHint("check the command after --: it must be an executable on PATH or a path")
	}
	return fmt.Errorf("%s: %w", msg, err)
}

// jobEnv is this process's environment, then extra, then set, a later
// value of a name replacing an earlier one, so a stale inherited
// GPUWARDEN_RESUME_FROM can never leak into a fresh start.
func jobEnv(extra []string, set map[string]string) []string {
	all := append(os.Environ(), extra...)
	for _, k := range []string{EnvCheckpointDir, EnvResumeFrom, EnvAttempt} {
		if v, ok := set[k]; ok {
			all = append(all, k+"="+v)
		}
	}
	index := map[string]int{}
	var out []string
	for _, kv := range all {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := index[k]; ok {
			out[i] = kv
			continue
		}
		index[k] = len(out)
		out = append(out, kv)
	}
	return out
}
