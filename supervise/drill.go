package supervise

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// DefaultDrillTimeout bounds each wait of a drill for a checkpoint.
const DefaultDrillTimeout = 10 * time.Minute

// DrillResult is what a resume drill found, with the evidence for it.
type DrillResult struct {
	// Pass is true when the restarted job went on past the checkpoint it resumed from.
	Pass bool `json:"pass"`
	// Reason is the verdict in one sentence.
	Reason   string   `json:"reason"`
	Evidence []string `json:"evidence"`
	// Dir is the drill's own checkpoint root: removed after a PASS, kept
	// after a FAIL so the checkpoints can be inspected.
	Dir string `json:"dir"`
	// Resumed is the checkpoint the restarted job was given; Next is the
	// first one it committed afterwards.
	Resumed gpuwarden.Checkpoint `json:"resumed"`
	Next    gpuwarden.Checkpoint `json:"next"`
}

// Drill proves that the job really resumes: it starts the job fresh in its
// own checkpoint root (s.CheckpointDir/drill-TIME, ignoring existing
// checkpoints), waits for its first committed checkpoint, kills the group
// with SIGKILL as a preemption would, restarts it from that checkpoint and
// waits for the next one. PASS needs the next step to be higher: a job that
// silently starts over writes the same step again. timeout bounds each of
// the two waits. The error is for the drill's own failures; a FAIL is a result.
func Drill(ctx context.Context, s *Supervisor, timeout time.Duration) (DrillResult, error) {
	c, err := s.resolved()
	if err != nil {
		return DrillResult{}, err
	}
	if timeout <= 0 {
		timeout = DefaultDrillTimeout
	}
	root, err := makeDrillDir(c.CheckpointDir, c.Now())
	if err != nil {
		return DrillResult{}, fmt.Errorf("drill: %w", err)
	}
	d := &drill{c: &c, res: DrillResult{Dir: root}, commits: make(chan gpuwarden.Checkpoint, 256)}
	d.w, err = NewWatcher(root, func(cp gpuwarden.Checkpoint) {
		select {
		case d.commits <- cp:
		default:
		}
	}, c.Log)
	if err != nil {
		return DrillResult{}, fmt.Errorf("drill: %w", err)
	}
	d.w.now = c.Now
	d.note("drill checkpoint root %s", root)

	// 1. A fresh start, up to its first checkpoint.
	began := c.Now()
	ph, err := d.start(ctx, 1, "")
	if err != nil {
		return d.res, err
	}
	first, outcome, ex := d.waitCommit(ctx, ph, timeout)
	switch outcome {
	case waitCancelled:
		d.kill(ph)
		return d.res, fmt.Errorf("drill: %w", ctx.Err())
	case waitExited:
		return d.fail(ph, "the job ended (%s) before committing a checkpoint", ex)
	case waitTimedOut:
		return d.fail(ph, "no checkpoint committed within %s: write each checkpoint to $%s/NAME/ and create %s in it when done", timeout, EnvCheckpointDir, MarkerName)
	}
	d.note("fresh start committed %s (step %d) after %s", first.Name, first.Step, c.Now().Sub(began).Round(time.Millisecond))
	d.kill(ph)
	d.note("killed the job's process group with SIGKILL, as a preemption would")

	// The newest valid checkpoint is what a real restart would get; it may
	// be newer than the first if the job committed again before the kill.
	if _, err := cleanIncoming(root); err != nil {
		return d.res, fmt.Errorf("drill: %w", err)
	}
	resumed, ok, err := Newest(root)
	if err != nil {
		return d.res, fmt.Errorf("drill: %w", err)
	}
	if !ok {
		return d.fail(nil, "checkpoint %s did not validate after the kill", first.Name)
	}
	d.res.Resumed = resumed
	if resumed.Step < 0 {
		return d.fail(nil, "checkpoint %s has no step number, so progress cannot be compared: name checkpoints with a step number (step-000120)", resumed.Name)
	}

	// 2. The restart, up to its next checkpoint.
	began = c.Now()
	d.note("restarting with %s=%s (step %d)", EnvResumeFrom, resumed.Path, resumed.Step)
	ph, err = d.start(ctx, 2, resumed.Path)
	if err != nil {
		return d.res, err
	}
	next, outcome, ex := d.waitCommit(ctx, ph, timeout)
	switch outcome {
	case waitCancelled:
		d.kill(ph)
		return d.res, fmt.Errorf("drill: %w", ctx.Err())
	case waitExited:
		if ex.OK() {
			return d.fail(ph, "the restarted job finished without committing another checkpoint: drill a run long enough to checkpoint twice")
		}
		return d.fail(ph, "the restarted job died (%s) after resuming from step %d", ex, resumed.Step)
	case waitTimedOut:
		return d.fail(ph, "the restarted job committed no checkpoint within %s", timeout)
	}
	d.res.Next = next
	d.note("restarted job committed %s (step %d) after %s", next.Name, next.Step, c.Now().Sub(began).Round(time.Millisecond))
	d.terminate(ph)
	switch {
	case next.Step < 0:
		return d.fail(nil, "checkpoint %s has no step number, so progress cannot be compared: name checkpoints with a step number (step-000120)", next.Name)
	case next.Step <= resumed.Step:
		return d.fail(nil, "started over: wrote step %d again after resuming from step %d", next.Step, resumed.Step)
	}
	d.res.Pass = true
	d.res.Reason = fmt.Sprintf("resumed from step %d and went on to step %d", resumed.Step, next.Step)
	d.note("PASS: %s", d.res.Reason)
	if err := os.RemoveAll(root); err != nil {
		c.Log.Warn("remove drill checkpoints", "dir", root, "err", err)
	}
	return d.res, nil
}

// makeDrillDir creates a fresh drill-TIME root, never reusing one.
func makeDrillDir(base string, now time.Time) (string, error) {
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", err
	}
	name := "drill-" + now.UTC().Format("20060102T150405Z")
	for i := 1; ; i++ {
		dir := filepath.Join(base, name)
		if i > 1 {
			dir += "-" + strconv.Itoa(i)
		}
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			return dir, nil
		}
		if !errors.Is(err, os.ErrExist) || i > 100 {
			return "", err
		}
	}
}

type drill struct {
	c       *Supervisor
	res     DrillResult
	w       *Watcher
	commits chan gpuwarden.Checkpoint
}

// phase is one run of the job with the watcher polling beside it.
type phase struct {
	p       *Proc
	wcancel context.CancelFunc
	wdone   chan struct{}
	ended   bool
}

type waitOutcome int

const (
	waitCommitted waitOutcome = iota
	waitExited
	waitTimedOut
	waitCancelled
)

func (d *drill) note(format string, args ...any) {
	d.res.Evidence = append(d.res.Evidence, fmt.Sprintf(format, args...))
}

func (d *drill) start(ctx context.Context, n int, resume string) (*phase, error) {
	c := d.c
	env := jobEnv(c.Env, map[string]string{
		EnvCheckpointDir: filepath.Join(d.res.Dir, IncomingDir),
		EnvResumeFrom:    resume,
		EnvAttempt:       strconv.Itoa(n),
	})
	p, err := Start(context.WithoutCancel(ctx), substituteResume(c.Argv, resume), env, c.Dir, c.Out)
	if err != nil {
		return nil, startError(n, err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	ph := &phase{p: p, wcancel: cancel, wdone: make(chan struct{})}
	go func() {
		defer close(ph.wdone)
		d.w.Run(wctx)
	}()
	return ph, nil
}

// end stops the watcher once the job is gone and commits what it marked last.
func (d *drill) end(ph *phase) {
	if ph.ended {
		return
	}
	ph.ended = true
	ph.wcancel()
	<-ph.wdone
	d.w.Scan()
}

// waitCommit waits for the phase's first committed checkpoint, the job's
// end, the timeout or ctx.
func (d *drill) waitCommit(ctx context.Context, ph *phase, timeout time.Duration) (gpuwarden.Checkpoint, waitOutcome, Exit) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case cp := <-d.commits:
		return cp, waitCommitted, Exit{}
	case <-ph.p.Done():
		d.end(ph)
		select {
		case cp := <-d.commits: // marked just before it exited
			return cp, waitCommitted, Exit{}
		default:
			return gpuwarden.Checkpoint{}, waitExited, ph.p.Wait()
		}
	case <-t.C:
		return gpuwarden.Checkpoint{}, waitTimedOut, Exit{}
	case <-ctx.Done():
		return gpuwarden.Checkpoint{}, waitCancelled, Exit{}
	}
}

// kill ends the phase at once, as a preemption does, and drains the commits
// it made meanwhile so the next phase's first one is its own.
func (d *drill) kill(ph *phase) {
	_ = ph.p.KillGroup(syscall.SIGKILL)
	ph.p.Wait()
	d.end(ph)
	d.drain()
}

// terminate ends the phase politely: SIGTERM, then SIGKILL after StopWait.
func (d *drill) terminate(ph *phase) {
	_ = ph.p.Signal(syscall.SIGTERM)
	t := time.NewTimer(d.c.StopWait)
	defer t.Stop()
	select {
	case <-ph.p.Done():
	case <-t.C:
		_ = ph.p.KillGroup(syscall.SIGKILL)
	}
	ph.p.Wait()
	d.end(ph)
	d.drain()
}

func (d *drill) drain() {
	for {
		select {
		case <-d.commits:
		default:
			return
		}
	}
}

// fail records a FAIL with the job's last lines when there is a phase.
func (d *drill) fail(ph *phase, format string, args ...any) (DrillResult, error) {
	d.res.Pass = false
	d.res.Reason = fmt.Sprintf(format, args...)
	if ph != nil {
		d.kill(ph)
		if tail := ph.p.Tail(); len(tail) > 0 {
			d.note("last output: %s", strings.Join(tail[max(0, len(tail)-5):], " | "))
		}
	}
	d.note("FAIL: %s", d.res.Reason)
	return d.res, nil
}
