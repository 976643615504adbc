package supervise

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// DefaultDrillTimeout bounds each wait of a drill for a checkpoint.
const DefaultDrillTimeout = 10 * time.Minute

// StateDigestName is the file a job may write into each checkpoint with a
// digest of its training state (weights, optimizer, RNG, data position),
// for formats that are not byte for byte reproducible; when both
// checkpoints a state drill compares hold one, only it is compared.
const StateDigestName = "state.digest"

// The proofs a drill's PASS can make.
const (
	// ProofProgress: the restarted job went on past its checkpoint.
	ProofProgress = "progress"
	// ProofState: and its checkpoint at step N equals an uninterrupted run's.
	ProofState = "state"
)

// DrillOptions are a drill's settings.
type DrillOptions struct {
	// Timeout bounds each wait for a checkpoint; zero means DefaultDrillTimeout.
	Timeout time.Duration
	// VerifyState also runs the job uninterrupted to the step the resumed
	// run reached and compares the two checkpoints.
	VerifyState bool
}

// DrillResult is what a resume drill found, with the evidence for it.
type DrillResult struct {
	// Pass is true when the restarted job went on past the checkpoint it
	// resumed from and, with VerifyState, reached the same state as an
	// uninterrupted run.
	Pass bool `json:"pass"`
	// Proof is what a PASS proves: ProofProgress or ProofState.
	Proof string `json:"proof"`
	// Reason is the verdict in one sentence.
	Reason   string   `json:"reason"`
	Evidence []string `json:"evidence"`
	// Dir is the drill's own folder under the checkpoint root: removed after
	// a PASS, kept after a FAIL so the checkpoints can be inspected.
	Dir string `json:"dir"`
	// Resumed is the checkpoint the restarted job was given; Next is the
	// first one it committed afterwards.
	Resumed gpuwarden.Checkpoint `json:"resumed"`
	Next    gpuwarden.Checkpoint `json:"next"`
	// Straight is the uninterrupted run's checkpoint at Next's step, with VerifyState.
	Straight *gpuwarden.Checkpoint `json:"straight,omitempty"`
}

// Drill proves that the job really resumes: it starts the job fresh in its
// own checkpoint root (s.CheckpointDir/drill-TIME/resumed, ignoring existing
// checkpoints), waits for its first committed checkpoint, kills the group
// with SIGKILL as a preemption would, restarts it from that checkpoint and
// waits for the next one, at step N. PASS needs N to be higher: a job that
// silently starts over writes the same step again. With VerifyState it then
// runs the job uninterrupted (drill-TIME/straight) to step N and compares
// the two checkpoints at N, every file byte for byte or their
// StateDigestName files, so that a job that restores its step but not its
// model or optimizer FAILs. The error is for the drill's own failures; a
// FAIL is a result.
func Drill(ctx context.Context, s *Supervisor, opts DrillOptions) (DrillResult, error) {
	c, err := s.resolved()
	if err != nil {
		return DrillResult{}, err
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultDrillTimeout
	}
	base, err := OpenRoot(c.CheckpointDir)
	if err != nil {
		return DrillResult{}, fmt.Errorf("drill: %w", err)
	}
	defer base.Close()
	dir, err := makeDrillDir(base, c.Now())
	if err != nil {
		return DrillResult{}, fmt.Errorf("drill: %w", err)
	}
	d := &drill{c: &c, res: DrillResult{Dir: dir}, timeout: timeout}
	d.note("drill folder %s", dir)
	resumed, err := d.open(filepath.Join(dir, "resumed"))
	if err != nil {
		return d.res, err
	}
	defer resumed.close()

	// 1. A fresh start, up to its first checkpoint.
	began := c.Now()
	ph, err := d.start(ctx, resumed, 1, "")
	if err != nil {
		return d.res, err
	}
	first, outcome, ex := d.waitCommit(ctx, resumed, ph, nil)
	switch outcome {
	case waitCancelled:
		d.kill(resumed, ph)
		return d.res, fmt.Errorf("drill: %w", ctx.Err())
	case waitExited:
		return d.fail(resumed, ph, "the job ended (%s) before committing a checkpoint", ex)
	case waitTimedOut:
		return d.fail(resumed, ph, "no checkpoint committed within %s: write each checkpoint to $%s/NAME/ and create %s in it when done", timeout, EnvCheckpointDir, MarkerName)
	}
	d.note("fresh start committed %s (step %d) after %s", first.Name, first.Step, c.Now().Sub(began).Round(time.Millisecond))
	if first.Step < 0 {
		return d.fail(resumed, ph, "checkpoint %s has no step number, so progress cannot be compared: name checkpoints with a step number (step-000120)", first.Name)
	}
	d.kill(resumed, ph)
	d.note("killed the job's process group with SIGKILL, as a preemption would")

	// The newest valid checkpoint is what a real restart would get; it may
	// be newer than the first if the job committed again before the kill.
	if _, err := resumed.root.cleanIncoming(); err != nil {
		return d.res, fmt.Errorf("drill: %w", err)
	}
	from, ok, _, err := resumed.root.newest()
	if err != nil {
		return d.res, fmt.Errorf("drill: %w", err)
	}
	if !ok {
		return d.fail(resumed, nil, "checkpoint %s did not validate after the kill", first.Name)
	}
	d.res.Resumed = from
	if from.Step < 0 {
		return d.fail(resumed, nil, "checkpoint %s has no step number, so progress cannot be compared: name checkpoints with a step number (step-000120)", from.Name)
	}

	// 2. The restart, up to its next checkpoint.
	began = c.Now()
	d.note("restarting with %s=%s (step %d)", EnvResumeFrom, from.Path, from.Step)
	ph, err = d.start(ctx, resumed, 2, from.Path)
	if err != nil {
		return d.res, err
	}
	next, outcome, ex := d.waitCommit(ctx, resumed, ph, nil)
	switch outcome {
	case waitCancelled:
		d.kill(resumed, ph)
		return d.res, fmt.Errorf("drill: %w", ctx.Err())
	case waitExited:
		if ex.OK() {
			return d.fail(resumed, ph, "the restarted job finished without committing another checkpoint: drill a run long enough to checkpoint twice")
		}
		return d.fail(resumed, ph, "the restarted job died (%s) after resuming from step %d", ex, from.Step)
	case waitTimedOut:
		return d.fail(resumed, ph, "the restarted job committed no checkpoint within %s", timeout)
	}
	d.res.Next = next
	d.note("restarted job committed %s (step %d) after %s", next.Name, next.Step, c.Now().Sub(began).Round(time.Millisecond))
	d.terminate(resumed, ph)
	switch {
	case next.Step < 0:
		return d.fail(resumed, nil, "checkpoint %s has no step number, so progress cannot be compared: name checkpoints with a step number (step-000120)", next.Name)
	case next.Step <= from.Step:
		return d.fail(resumed, nil, "started over: wrote step %d again after resuming from step %d", next.Step, from.Step)
	}
	progress := fmt.Sprintf("resumed from step %d and went on to step %d", from.Step, next.Step)
	if !opts.VerifyState {
		return d.pass(base, ProofProgress, progress+"; the training state was not compared (--verify-state compares it with an uninterrupted run)")
	}

	// 3. The same job uninterrupted, up to the step the restart reached.
	straight, err := d.open(filepath.Join(dir, "straight"))
	if err != nil {
		return d.res, err
	}
	defer straight.close()
	began = c.Now()
	d.note("running the job uninterrupted from a fresh start to step %d", next.Step)
	ph, err = d.start(ctx, straight, 3, "")
	if err != nil {
		return d.res, err
	}
	var passed []int64
	same, outcome, ex := d.waitCommit(ctx, straight, ph, func(cp gpuwarden.Checkpoint) bool {
		passed = append(passed, cp.Step)
		return cp.Step >= next.Step
	})
	switch outcome {
	case waitCancelled:
		d.kill(straight, ph)
		return d.res, fmt.Errorf("drill: %w", ctx.Err())
	case waitExited:
		return d.fail(straight, ph, "the uninterrupted run ended (%s) before step %d (it checkpointed steps %v)", ex, next.Step, passed)
	case waitTimedOut:
		return d.fail(straight, ph, "the uninterrupted run reached no checkpoint at step %d within %s (it checkpointed steps %v)", next.Step, timeout, passed)
	}
	d.terminate(straight, ph)
	if same.Step != next.Step {
		return d.fail(straight, nil, "the uninterrupted run checkpointed step %d, never step %d: checkpoint at fixed steps (every N) so the two runs can be compared", same.Step, next.Step)
	}
	d.res.Straight = &same
	d.note("uninterrupted run committed %s (step %d) after %s", same.Name, same.Step, c.Now().Sub(began).Round(time.Millisecond))
	how, diff := compareState(next, same)
	if diff != "" {
		return d.fail(straight, nil, "the resumed run's state at step %d differs from the uninterrupted run's: %s; the job restores its step but not all of its state (model, optimizer, RNG, data position)", next.Step, diff)
	}
	return d.pass(base, ProofState, fmt.Sprintf("%s, and its checkpoint at step %d matches the uninterrupted run's %s", progress, next.Step, how))
}

// compareState compares two checkpoints of one step: their state digests
// when both hold one, else every file; diff is "" when they match.
func compareState(resumed, straight gpuwarden.Checkpoint) (how, diff string) {
	ra, rok := fileOf(resumed, StateDigestName)
	sa, sok := fileOf(straight, StateDigestName)
	if rok && sok {
		if ra.SHA256 != sa.SHA256 {
			return "", fmt.Sprintf("%s has sha256 %.12s… after the resume and %.12s… uninterrupted", StateDigestName, ra.SHA256, sa.SHA256)
		}
		return "state digest (" + StateDigestName + ")", ""
	}
	want := map[string]gpuwarden.ManifestFile{}
	for _, f := range straight.Files {
		want[f.Path] = f
	}
	var diffs []string
	for _, f := range resumed.Files {
		w, ok := want[f.Path]
		switch {
		case !ok:
			diffs = append(diffs, f.Path+" exists only after the resume")
		case w.SHA256 != f.SHA256:
			diffs = append(diffs, fmt.Sprintf("%s has sha256 %.12s… after the resume and %.12s… uninterrupted", f.Path, f.SHA256, w.SHA256))
		}
		delete(want, f.Path)
	}
	for p := range want {
		diffs = append(diffs, p+" exists only in the uninterrupted run")
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		if len(diffs) > 3 {
			diffs = append(diffs[:3], fmt.Sprintf("%d more", len(diffs)-3))
		}
		return "", strings.Join(diffs, "; ")
	}
	return fmt.Sprintf("byte for byte (%d files, %s bytes)", len(resumed.Files), gpuwarden.GroupDigits(resumed.Bytes)), ""
}

func fileOf(cp gpuwarden.Checkpoint, name string) (gpuwarden.ManifestFile, bool) {
	for _, f := range cp.Files {
		if f.Path == name {
			return f, true
		}
	}
	return gpuwarden.ManifestFile{}, false
}

// pass records a PASS and removes the drill's folder, which only gpuwarden wrote.
func (d *drill) pass(base *Root, proof, reason string) (DrillResult, error) {
	d.res.Pass, d.res.Proof, d.res.Reason = true, proof, reason
	d.note("PASS (%s): %s", proof, reason)
	if rel, err := base.rel(d.res.Dir); err == nil {
		if err := base.removeAll(rel); err != nil {
			d.c.Log.Warn("remove the drill folder", "dir", d.res.Dir, "err", err)
		}
	}
	return d.res, nil
}

// makeDrillDir creates a fresh drill-TIME folder in the root, never reusing one.
func makeDrillDir(base *Root, now time.Time) (string, error) {
	name := "drill-" + now.UTC().Format("20060102T150405Z")
	for i := 1; ; i++ {
		rel := name
		if i > 1 {
			rel += "-" + strconv.Itoa(i)
		}
		err := base.fs.Mkdir(rel, 0o755)
		if err == nil {
			return base.abs(rel), nil
		}
		if !errors.Is(err, os.ErrExist) || i > 100 {
			return "", err
		}
	}
}

type drill struct {
	c       *Supervisor
	res     DrillResult
	timeout time.Duration
}

// drillRoot is one checkpoint root of a drill and the watcher over it.
type drillRoot struct {
	root    *Root
	w       *Watcher
	commits chan gpuwarden.Checkpoint
}

func (d *drill) open(dir string) (*drillRoot, error) {
	root, err := OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("drill: %w", err)
	}
	dr := &drillRoot{root: root, commits: make(chan gpuwarden.Checkpoint, 256)}
	dr.w, err = NewWatcher(root, func(cp gpuwarden.Checkpoint) {
		select {
		case dr.commits <- cp:
		default:
		}
	}, d.c.Log)
	if err != nil {
		root.Close()
		return nil, fmt.Errorf("drill: %w", err)
	}
	dr.w.now = d.c.Now
	return dr, nil
}

func (dr *drillRoot) close() { dr.root.Close() }

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

func (d *drill) start(ctx context.Context, dr *drillRoot, n int, resume string) (*phase, error) {
	c := d.c
	env := jobEnv(c.Env, map[string]string{
		EnvCheckpointDir: dr.root.abs(IncomingDir),
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
		dr.w.Run(wctx)
	}()
	return ph, nil
}

// end stops the watcher once the job is gone and commits what it marked last.
func (dr *drillRoot) end(ph *phase) {
	if ph.ended {
		return
	}
	ph.ended = true
	ph.wcancel()
	<-ph.wdone
	dr.w.Scan()
}

// waitCommit waits for the phase's first committed checkpoint that want
// accepts (any, when want is nil), the job's end, the timeout or ctx.
func (d *drill) waitCommit(ctx context.Context, dr *drillRoot, ph *phase, want func(gpuwarden.Checkpoint) bool) (gpuwarden.Checkpoint, waitOutcome, Exit) {
	t := time.NewTimer(d.timeout)
	defer t.Stop()
	accept := func(cp gpuwarden.Checkpoint) bool { return want == nil || want(cp) }
	for {
		select {
		case cp := <-dr.commits:
			if accept(cp) {
				return cp, waitCommitted, Exit{}
			}
		case <-ph.p.Done():
			dr.end(ph)
			for {
				select {
				case cp := <-dr.commits: // marked just before it exited
					if accept(cp) {
						return cp, waitCommitted, Exit{}
					}
				default:
					return gpuwarden.Checkpoint{}, waitExited, ph.p.Wait()
				}
			}
		case <-t.C:
			return gpuwarden.Checkpoint{}, waitTimedOut, Exit{}
		case <-ctx.Done():
			return gpuwarden.Checkpoint{}, waitCancelled, Exit{}
		}
	}
}

// kill ends the phase at once, as a preemption does, and drains the commits
// it made meanwhile so the next phase's first one is its own.
func (d *drill) kill(dr *drillRoot, ph *phase) {
	_ = ph.p.KillGroup(syscall.SIGKILL)
	ph.p.Wait()
	dr.end(ph)
	dr.drain()
}

// terminate ends the phase politely: SIGTERM, then SIGKILL after StopWait.
func (d *drill) terminate(dr *drillRoot, ph *phase) {
	_ = ph.p.Signal(syscall.SIGTERM)
	t := time.NewTimer(d.c.StopWait)
	defer t.Stop()
	select {
	case <-ph.p.Done():
	case <-t.C:
		_ = ph.p.KillGroup(syscall.SIGKILL)
	}
	ph.p.Wait()
	dr.end(ph)
	dr.drain()
}

func (dr *drillRoot) drain() {
	for {
		select {
		case <-dr.commits:
		default:
			return
		}
	}
}

// fail records a FAIL with the job's last lines when there is a phase.
func (d *drill) fail(dr *drillRoot, ph *phase, format string, args ...any) (DrillResult, error) {
	d.res.Pass = false
	d.res.Reason = fmt.Sprintf(format, args...)
	if ph != nil {
		d.kill(dr, ph)
		if tail := ph.p.Tail(); len(tail) > 0 {
			d.note("last output: %s", strings.Join(tail[max(0, len(tail)-5):], " | "))
		}
	}
	d.note("FAIL: %s", d.res.Reason)
	return d.res, nil
}
