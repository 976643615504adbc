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
	"path/filepath"
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
)

// Supervisor runs a job until it succeeds, fails beyond its retry budget or
// the supervisor is stopped, resuming every restart from the newest valid
// checkpoint.
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
	// Use SIGTERM for jobs that save when terminated.
	CheckpointSignal syscall.Signal
	// Grace is how long to wait for a new checkpoint after the signal; zero
	// means DefaultGrace. A notice's At shortens it so the stop ends in time.
	Grace time.Duration
	// StopWait is how long SIGTERM has before SIGKILL; zero means DefaultStopWait.
	StopWait time.Duration
	// OnCommit syncs each committed checkpoint off the box; an error is logged.
	OnCommit func(gpuwarden.Checkpoint) error
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
	// Keep is how many valid checkpoints to keep locally; zero means DefaultKeep.
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
	dir, err := filepath.Abs(c.CheckpointDir)
	if err != nil {
		return c, fmt.Errorf("supervise: %w", err)
	}
	c.CheckpointDir = dir
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
	watcher *Watcher
	cache   *hashCache
	notices <-chan gpuwarden.Notice
	seen    map[string]bool

	commitCh chan struct{}
	mu       sync.Mutex
	commits  int
	last     time.Time // the last commit
	cps      []gpuwarden.Checkpoint
}

// Run supervises the job until it exits 0, ends in a way its policy does not
// retry, or ctx is cancelled (the supervisor itself is being stopped), which
// stops the running attempt gracefully, as a notice does, and does not
// restart. Each notice received stops the attempt with a checkpoint and
// restarts it, because a box that outlived its notice can keep working.
// The error is for the supervisor's own failures (no command, a command that
// cannot start); how the job ended is in the report.
func (s *Supervisor) Run(ctx context.Context, notices <-chan gpuwarden.Notice) (gpuwarden.RunReport, error) {
	c, err := s.resolved()
	if err != nil {
		return gpuwarden.RunReport{Command: s.Argv}, err
	}
	defer c.OnState(StateDone)
	report := gpuwarden.RunReport{Command: c.Argv, Start: c.Now(), Restarts: map[string]int{}}
	r := &runner{c: &c, cache: newHashCache(), notices: notices, seen: map[string]bool{}, commitCh: make(chan struct{}, 1)}
	w, err := NewWatcher(c.CheckpointDir, r.onCommit, c.Log)
	if err != nil {
		return report, fmt.Errorf("supervise: %w", err)
	}
	w.now, w.cache = c.Now, r.cache
	r.watcher = w
	finish := func() {
		r.mu.Lock()
		report.Checkpoints = append([]gpuwarden.Checkpoint(nil), r.cps...)
		r.mu.Unlock()
		report.End = c.Now()
	}
	total := 0
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			finish()
			if n == 1 {
				return report, fmt.Errorf("supervise: %w", err)
			}
			return report, nil
		}
		a, cancelled, err := r.attempt(ctx, n)
		if err != nil {
			finish()
			return report, err
		}
		report.Attempts = append(report.Attempts, a)
		report.LostSeconds += a.LostSeconds
		report.ExitCode, report.Class = a.ExitCode, a.Class
		if cancelled {
			c.Log.Info("supervisor stopped; not restarting", "attempt", n)
			break
		}
		if a.Class == gpuwarden.ExitOK {
			break
		}
		retry, wait, why := c.Policy.Next(a.Class, report.Restarts, total)
		if !retry {
			c.Log.Warn("not restarting", "attempt", n, "class", a.Class, "why", why)
			break
		}
		c.Log.Info("restarting", "attempt", n, "class", a.Class, "why", why, "wait", wait)
		report.Restarts[a.Class]++
		total++
		if err := c.Sleep(ctx, wait); err != nil {
			c.Log.Info("supervisor stopped during backoff; not restarting", "attempt", n)
			break
		}
	}
	finish()
	return report, nil
}

// attempt runs the job once: resume from the newest valid checkpoint, run
// while the watcher commits checkpoints, stop on a notice or cancellation.
// cancelled reports that ctx ended the attempt.
func (r *runner) attempt(ctx context.Context, n int) (a gpuwarden.Attempt, cancelled bool, err error) {
	c := r.c
	log := c.Log.With("attempt", n)
	// A checkpoint marked complete just before the last supervisor died is
	// committed now; what is left unmarked is a partial write of a dead job.
	r.watcher.Scan()
	if removed, err := cleanIncoming(c.CheckpointDir); err != nil {
		log.Warn("clean incoming checkpoints", "err", err)
	} else if len(removed) > 0 {
		log.Info("removed partial checkpoints", "names", removed)
	}
	cp, ok, torn, err := newest(c.CheckpointDir)
	if err != nil {
		return a, false, fmt.Errorf("supervise: %w", err)
	}
	for _, t := range torn {
		log.Warn("skipping torn checkpoint", "name", t.Name, "reason", t.Reason)
	}
	resume := ""
	if ok {
		resume = cp.Path
		a.ResumedFrom = cp.Name
	}
	argv := substituteResume(c.Argv, resume)
	env := jobEnv(c.Env, map[string]string{
		EnvCheckpointDir: filepath.Join(c.CheckpointDir, IncomingDir),
		EnvResumeFrom:    resume,
		EnvAttempt:       strconv.Itoa(n),
	})

	start := c.Now()
	a.Number, a.Start = n, start
	r.mu.Lock()
	r.last = time.Time{}
	r.mu.Unlock()
	p, err := Start(context.WithoutCancel(ctx), argv, env, c.Dir, c.Out)
	if err != nil {
		return a, false, startError(n, err)
	}
	log.Info("job started", "pid", p.Pid(), "resume_from", a.ResumedFrom)
	c.OnState(StateRunning)
	wctx, wcancel := context.WithCancel(context.Background())
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		r.watcher.Run(wctx)
	}()

	stopped := false
	ctxDone := ctx.Done()
wait:
	for {
		select {
		case <-p.Done():
			break wait
		case nt, open := <-r.notices:
			if !open {
				r.notices = nil
				continue
			}
			if !r.fresh(nt) {
				continue
			}
			log.Info("notice; checkpointing the job", "provider", nt.Provider, "kind", nt.Kind, "at", nt.At, "id", nt.ID)
			stopped = true
			cancelled = r.stop(ctx, p, r.grace(nt), log)
			break wait
		case <-ctxDone:
			log.Info("supervisor stopping; checkpointing the job")
			stopped, cancelled = true, true
			r.stop(ctx, p, c.Grace, log)
			break wait
		}
	}
	ex := p.Wait()
	wcancel()
	<-wdone
	r.watcher.Scan()
	end := c.Now()

	tail := p.Tail()
	hostOOM := false
	if !stopped && !ex.OK() {
		hostOOM = c.OOMCheck(p.Pids(), start)
	}
	class, reason := Explain(ex, tail, stopped, hostOOM)
	a.End = end
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
		a.LostSeconds = max(end.Sub(since).Seconds(), 0)
	}
	log.Info("job ended", "exit", ex.String(), "class", class, "reason", reason, "lost_s", a.LostSeconds)
	return a, cancelled, nil
}

// fresh reports whether a notice is new; the same ID is the same notice,
// which a poller may deliver more than once.
func (r *runner) fresh(nt gpuwarden.Notice) bool {
	if nt.ID == "" {
		return true
	}
	if r.seen[nt.ID] {
		return false
	}
	r.seen[nt.ID] = true
	return true
}

// grace is the checkpoint wait for a notice: Grace, shortened when the
// provider says when it acts so that SIGTERM and SIGKILL still fit before.
func (r *runner) grace(nt gpuwarden.Notice) time.Duration {
	g := r.c.Grace
	if !nt.At.IsZero() {
		if until := nt.At.Sub(r.c.Now()) - r.c.StopWait; until < g {
			g = max(until, 0)
		}
	}
	return g
}

// stop asks the job for a checkpoint, waits for a new commit or the grace,
// then SIGTERM, then SIGKILL; it returns once the group is gone and reports
// whether ctx was cancelled meanwhile. Notices arriving during the stop are
// taken as answered by it.
func (r *runner) stop(ctx context.Context, p *Proc, grace time.Duration, log *slog.Logger) (cancelled bool) {
	c := r.c
	c.OnState(StateCheckpointing)
	r.mu.Lock()
	base := r.commits
	r.mu.Unlock()
	ctxDone := ctx.Done()
	if ctx.Err() != nil {
		cancelled, ctxDone = true, nil
	}
	if err := p.Signal(c.CheckpointSignal); err != nil {
		if !errors.Is(err, os.ErrProcessDone) {
			log.Warn("checkpoint signal", "err", err)
		}
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
checkpoint:
	for {
		select {
		case <-p.Done():
			return cancelled
		case <-r.commitCh:
			r.mu.Lock()
			got := r.commits > base
			r.mu.Unlock()
			if got {
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
			r.fresh(nt)
		}
	}
	if err := p.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		log.Warn("terminate job", "err", err)
	}
	term := time.NewTimer(c.StopWait)
	defer term.Stop()
	for {
		select {
		case <-p.Done():
			return cancelled
		case <-term.C:
			log.Warn("job ignored SIGTERM; killing it", "wait", c.StopWait)
			_ = p.KillGroup(syscall.SIGKILL)
			<-p.Done()
			return cancelled
		case <-ctxDone:
			cancelled, ctxDone = true, nil
		}
	}
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
	select {
	case r.commitCh <- struct{}{}:
	default:
	}
	c.Log.Info("checkpoint committed", "name", cp.Name, "step", cp.Step, "files", len(cp.Files), "bytes", cp.Bytes)
	if c.OnCommit != nil {
		if err := c.OnCommit(cp); err != nil {
			c.Log.Warn("sync checkpoint", "name", cp.Name, "err", err)
		}
	}
	removed, err := prune(c.CheckpointDir, c.Keep, r.cache)
	if err != nil {
		c.Log.Warn("prune checkpoints", "err", err)
	}
	if len(removed) > 0 {
		c.Log.Info("pruned checkpoints", "names", removed, "keep", c.Keep)
	}
}

// startError makes a command that cannot run bad input, and anything else internal.
func startError(n int, err error) error {
	msg := "supervise: attempt " + strconv.Itoa(n)
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		return (&gpuwarden.Error{Code: gpuwarden.EInvalid, Message: msg, Err: err}).WithHint("check the command after --: it must be an executable on PATH or a path")
	}
	return fmt.Errorf("%s: %w", msg, err)
}

func substituteResume(argv []string, resume string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = strings.ReplaceAll(a, ResumePlaceholder, resume)
	}
	return out
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
