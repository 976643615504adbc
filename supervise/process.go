package supervise

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// TailLines is how many of the job's last output lines a Proc keeps for
// classification and for the report.
const TailLines = 50

const (
	// maxLine caps one kept line, so a progress bar without newlines
	// cannot grow the tail without bound.
	maxLine = 4096
	// groupGone bounds the wait for a killed group to empty; a process in
	// uninterruptible sleep (a hung driver call) may outlive it.
	groupGone = 5 * time.Second
	// outputDrain bounds the wait for the output pipe to close after the
	// group is gone: a process that left the group may still hold it.
	outputDrain = 2 * time.Second
	// sampleEvery is how often a Proc notes the members of its group, so
	// that a kernel OOM kill of any of them can be recognised afterwards.
	sampleEvery = 2 * time.Second
)

// BecomeSubreaper makes this process the reaper of the job's orphans
// (PR_SET_CHILD_SUBREAPER), so that a worker whose parent died is reparented
// here, where the group kill and reaping still reach it, instead of to init.
func BecomeSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become child subreaper: %w", err)
	}
	return nil
}

// Exit is how a job's process ended and what it used.
type Exit struct {
	// Code is the exit status, -1 when a signal ended the process.
	Code int
	// Signal is the signal that ended it, 0 when it exited.
	Signal syscall.Signal
	// UserCPU and SysCPU are seconds of CPU, the process and its reaped children together.
	UserCPU float64
	SysCPU  float64
	// MaxRSS is the largest resident set, in bytes, of the process or one of its children.
	MaxRSS int64
}

// OK reports a zero exit status.
func (e Exit) OK() bool { return e.Code == 0 && e.Signal == 0 }

// String says how the process ended, for logs and evidence.
func (e Exit) String() string {
	if e.Signal != 0 {
		return "killed by " + signalName(e.Signal)
	}
	return "exit " + strconv.Itoa(e.Code)
}

func signalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return "signal " + strconv.Itoa(int(s))
}

// Proc is a job: its leader, the leader's process group, its cgroup where
// the machine allows one, and every process carrying its job ID.
type Proc struct {
	pid  int
	cmd  *exec.Cmd
	tail *tailBuffer

	jobID     string
	cgroup    string // "" when the job has none
	isolation string
	// since is the leader's start in clock ticks: no process of the job
	// started before it.
	since uint64
	// started is when Start launched it, for SignalCatchersStarted.
	started time.Time

	exited chan struct{} // the leader was reaped
	done   chan struct{} // and the job is gone and the output drained

	mu   sync.Mutex
	exit Exit
	// members is every process seen in the job, pid to start time.
	members map[int]uint64
}

// Start runs argv as a job with its combined output copied to out: in a new
// process group, with a fresh job ID in EnvJobID, inside a cgroup of its
// own where the machine allows one (see Isolation). The leader gets SIGKILL
// when this process dies (Pdeathsig), and a guard process kills the rest of
// the job then, because Pdeathsig reaches only the leader. Cancelling ctx
// kills the job at once, so pass a context that outlives any graceful
// stop. A nil env means this process's environment.
func Start(ctx context.Context, argv, env []string, dir string, out io.Writer) (*Proc, error) {
	return startJob(ctx, argv, env, dir, out, startOptions{})
}

// startOptions turn off steps of Start, so that tests on a machine that
// allows them all can take the paths of machines that do not.
type startOptions struct {
	// noCgroup: run without a cgroup, as where none can be made.
	noCgroup bool
	// noCloneInto: start the leader outside the cgroup and move it in, as
	// where clone3 is missing or filtered.
	noCloneInto bool
}

// startJob is Start with opts.
func startJob(ctx context.Context, argv, env []string, dir string, out io.Writer, opts startOptions) (*Proc, error) {
	if len(argv) == 0 {
		return nil, errors.New("start job: no command")
	}
	if out == nil {
		out = io.Discard
	}
	// The guard first: a job must never run without its kill -9 protection.
	if err := guardEnsure(); err != nil {
		return nil, fmt.Errorf("start job: %w", err)
	}
	id, err := newJobID()
	if err != nil {
		return nil, fmt.Errorf("start job: job id: %w", err)
	}
	env = withJobID(env, id)
	jobEntry := guardEntry{kind: guardJob, val: id}
	// The ID and the cgroup are known to the guard before anything runs,
	// so that a kill -9 of this process at any later moment finds them.
	if err := guardAdd(jobEntry); err != nil {
		return nil, fmt.Errorf("start job: %w", err)
	}
	cg, why := "", errors.New("disabled")
	if !opts.noCgroup {
		cg, why = createJobCgroup(id)
	}
	if cg != "" {
		if err := guardAdd(guardEntry{kind: guardCgroup, val: cg}); err != nil {
			_ = removeCgroup(cg)
			guardRemove(jobEntry)
			return nil, fmt.Errorf("start job: %w", err)
		}
	}
	dropCgroup := func() {
		if cg != "" && removeCgroup(cg) == nil {
			guardRemove(guardEntry{kind: guardCgroup, val: cg})
		}
		cg = ""
	}
	r, w, err := os.Pipe()
	if err != nil {
		dropCgroup()
		guardRemove(jobEntry)
		return nil, fmt.Errorf("start job: %w", err)
	}
	var cmd *exec.Cmd
	moved := "" // why the leader was moved into the cgroup after its start
	if cg == "" {
		cmd, err = startLeader(argv, env, dir, w, "")
	} else {
		inside := errors.New("turned off")
		if !opts.noCloneInto {
			cmd, inside = startLeader(argv, env, dir, w, cg)
		}
		if cmd == nil {
			// Starting inside the cgroup failed: clone3 may be missing or
			// filtered (ENOSYS in many containers), or the cgroup refuses
			// processes. Start as before and move the leader in; a
			// failure that is the command's own repeats here and is reported.
			cmd, err = startLeader(argv, env, dir, w, "")
			if err == nil {
				moved = inside.Error()
				if merr := cgroupMove(cg, cmd.Process.Pid); merr != nil {
					why = fmt.Errorf("start inside it: %v; move into it: %w", inside, merr)
					dropCgroup()
				}
			}
		}
	}
	if err != nil {
		r.Close()
		w.Close()
		dropCgroup()
		guardRemove(jobEntry)
		return nil, fmt.Errorf("start job: %w", err)
	}
	w.Close()
	p := &Proc{
		started: time.Now(),
		pid:     cmd.Process.Pid,
		cmd:     cmd,
		tail:    &tailBuffer{},
		jobID:   id,
		cgroup:  cg,
		exited:  make(chan struct{}),
		done:    make(chan struct{}),
	}
	switch {
	case cg != "" && moved != "":
		p.isolation = "cgroup " + cg + " (leader moved in after its start: " + moved + ")"
	case cg != "":
		p.isolation = "cgroup " + cg
	default:
		p.isolation = "process group (cgroup: " + why.Error() + ")"
	}
	// Not reaped yet, the leader is at least a zombie whose stat can be read.
	if st, ok := readProcStat(p.pid); ok {
		p.since = st.start
	}
	p.members = map[int]uint64{p.pid: p.since}
	guardErr := guardAdd(guardEntry{kind: guardGroup, val: strconv.Itoa(p.pid)})
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		_, _ = io.Copy(io.MultiWriter(p.tail, ignoreErrors{out}), r)
	}()
	reaped := make(chan struct{})
	go p.reap(reaped)
	go p.sample()
	go func() {
		select {
		case <-ctx.Done():
			_ = p.KillGroup(syscall.SIGKILL)
		case <-p.done:
		}
	}()
	go p.finish(reaped, drained, r)
	if guardErr != nil {
		_ = p.KillGroup(syscall.SIGKILL)
		p.Wait()
		return nil, fmt.Errorf("start job: %w", guardErr)
	}
	return p, nil
}

// startLeader starts the job's leader, inside the cgroup cg unless cg is "".
func startLeader(argv, env []string, dir string, w *os.File, cg string) (*exec.Cmd, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Dir = dir
	// Files, not writers: exec.Cmd would otherwise wait in Wait for a copy
	// that a surviving grandchild holding the pipe keeps open forever.
	cmd.Stdout = w
	cmd.Stderr = w
	// Pdeathsig fires when the forking thread exits; the Go runtime keeps
	// its threads unless a goroutine locked to one exits, which this package never does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if cg != "" {
		// clone3 with CLONE_INTO_CGROUP: the leader is in the cgroup from
		// its first instruction, so no child it forks can start outside.
		fd, err := unix.Open(cg, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open cgroup: %w", err)
		}
		defer unix.Close(fd)
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = fd
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return cmd, nil
}

// ignoreErrors keeps the tail filling when the caller's writer fails.
type ignoreErrors struct{ w io.Writer }

// Write always succeeds, whatever the wrapped writer says.
func (i ignoreErrors) Write(b []byte) (int, error) {
	_, _ = i.w.Write(b)
	return len(b), nil
}

// reap waits for every child of this process in the job's group: the leader
// and, as a subreaper, the orphans reparented here. exec.Cmd.Wait is not
// used because it would race this loop for the leader's status.
func (p *Proc) reap(reaped chan<- struct{}) {
	defer close(reaped)
	for {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		pid, err := syscall.Wait4(-p.pid, &ws, 0, &ru)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return // ECHILD: no child of ours is left in the group
		}
		if pid != p.pid {
			continue
		}
		ex := Exit{
			Code:    ws.ExitStatus(),
			UserCPU: tvSeconds(ru.Utime),
			SysCPU:  tvSeconds(ru.Stime),
			MaxRSS:  ru.Maxrss * 1024, // kilobytes on Linux
		}
		if ws.Signaled() {
			ex.Code = -1
			ex.Signal = ws.Signal()
		}
		p.mu.Lock()
		p.exit = ex
		p.mu.Unlock()
		close(p.exited)
	}
}

func tvSeconds(tv syscall.Timeval) float64 {
	return float64(tv.Sec) + float64(tv.Usec)/1e6
}

// finish ends what is left of the job once the leader is gone, because a
// job's end is the end of all its processes: the group, the cgroup and
// whatever carries the job ID. Then it waits for them and the output and
// removes the cgroup.
func (p *Proc) finish(reaped, drained <-chan struct{}, r *os.File) {
	<-p.exited
	j := p.job()
	p.mu.Lock()
	j.seen = make(map[int]uint64, len(p.members))
	for pid, start := range p.members {
		j.seen[pid] = start
	}
	p.mu.Unlock()
	deadline := time.Now().Add(groupGone)
	tick := time.NewTicker(10 * time.Millisecond)
	gone := false
	for {
		pids, _ := j.signal(syscall.SIGKILL)
		gone = len(pids) == 0 && !j.populated()
		if reaped == nil && j.groups != nil && groupEmpty(p.pid) {
			// Its number is free now and may name another group soon;
			// what is left of the job is found by cgroup and ID.
			j.groups = nil
		}
		if gone && j.groups == nil {
			break
		}
		if !time.Now().Before(deadline) {
			break
		}
		select {
		case <-reaped:
			reaped = nil
		case <-tick.C:
		}
	}
	tick.Stop()
	j.members() // reaps the last orphans that died as this process's children
	empty := j.groups == nil || groupEmpty(p.pid)
	select {
	case <-drained:
	case <-time.After(outputDrain):
		r.Close()
		<-drained
	}
	r.Close()
	if empty {
		guardRemove(guardEntry{kind: guardGroup, val: strconv.Itoa(p.pid)})
	}
	if p.cgroup != "" && gone && removeCgroup(p.cgroup) == nil {
		guardRemove(guardEntry{kind: guardCgroup, val: p.cgroup})
	}
	// A survivor (uninterruptible sleep in a hung driver call) keeps the
	// job's ID with the guard, which kills it should this process die: an
	// ID is never reused, so keeping it cannot hit another job.
	if gone {
		guardRemove(guardEntry{kind: guardJob, val: p.jobID})
	}
	_ = p.cmd.Process.Release()
	close(p.done)
}

// job returns what belongs to this job, for a scan of its processes.
func (p *Proc) job() *job {
	j := &job{groups: []int{p.pid}, ids: map[string]bool{p.jobID: true}, since: p.since}
	if p.cgroup != "" {
		j.cgroups = []string{p.cgroup}
	}
	return j
}

func groupEmpty(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

// sample notes the job's processes every few seconds until the leader exits.
func (p *Proc) sample() {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		select {
		case <-p.exited:
			return
		case <-t.C:
		}
		ms := p.job().members()
		p.mu.Lock()
		for _, m := range ms {
			if len(p.members) < 4096 {
				p.members[m.pid] = m.start
			}
		}
		p.mu.Unlock()
	}
}

// ended reports whether the leader has exited, reaped or still a zombie:
// a signal sent now would not land, and the job's own exit is its result.
func (p *Proc) ended() bool {
	select {
	case <-p.exited:
		return true
	default:
	}
	st, ok := readProcStat(p.pid)
	return !ok || st.state == 'Z' || st.state == 'X'
}

// Pid returns the leader's process ID, which is also the group's ID.
func (p *Proc) Pid() int { return p.pid }

// JobID returns the job's random ID, the value of EnvJobID in the
// environment of each of its processes.
func (p *Proc) JobID() string { return p.jobID }

// Cgroup returns the directory of the job's cgroup, "" when it runs without one.
func (p *Proc) Cgroup() string { return p.cgroup }

// Isolation says how the job is held together, for a debug log: "cgroup
// DIR", or "process group (cgroup: REASON)" when the machine did not allow
// a cgroup and the group and the job ID are all there is.
func (p *Proc) Isolation() string { return p.isolation }

// Pids returns every process seen in the job, the leader first, for
// matching kernel OOM-killer lines.
func (p *Proc) Pids() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]int, 0, len(p.members))
	for pid := range p.members {
		if pid != p.pid {
			out = append(out, pid)
		}
	}
	sort.Ints(out)
	return append([]int{p.pid}, out...)
}

// Signal sends sig to the whole job, the group and the processes that left
// it, because a job's workers must hear a checkpoint or stop request too;
// it returns os.ErrProcessDone once the leader exited. For a signal whose
// default action kills, like SIGUSR1, SignalCatchers spares the processes
// that do not handle it.
func (p *Proc) Signal(sig syscall.Signal) error {
	select {
	case <-p.exited:
		return os.ErrProcessDone
	default:
	}
	if err := syscall.Kill(-p.pid, sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return fmt.Errorf("signal job group %d: %w", p.pid, err)
	}
	for _, m := range p.job().members() {
		if m.inGroup {
			continue // signalled with the group; twice might count as two requests
		}
		if _, err := signalSame(m.pid, m.start, sig); err != nil {
			return fmt.Errorf("signal job process %d: %w", m.pid, err)
		}
	}
	return nil
}

// KillGroup sends sig to whatever is left of the job, its group, cgroup and
// the processes carrying its ID, also after the leader exited; an empty
// job is not an error.
func (p *Proc) KillGroup(sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil // the group is gone; its number may belong to someone else now
	default:
	}
	if _, err := p.job().signal(sig); err != nil {
		return fmt.Errorf("kill job %d: %w", p.pid, err)
	}
	return nil
}

// Done is closed when the job and all its processes are gone.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait blocks until the job and all its processes are gone and returns how the leader ended.
func (p *Proc) Wait() Exit {
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit
}

// Tail returns the last lines of the job's output, oldest first.
func (p *Proc) Tail() []string { return p.tail.Lines() }

// tailBuffer keeps the last TailLines lines written to it. A carriage return
// starts the line over, as a terminal shows it, so progress bars collapse.
type tailBuffer struct {
	mu      sync.Mutex
	lines   []string
	partial []byte
	cr      bool
}

// Write splits output into lines, keeping the last TailLines.
func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range b {
		if t.cr {
			t.cr = false
			if c != '\n' {
				t.partial = t.partial[:0]
			}
		}
		switch c {
		case '\n':
			t.push()
		case '\r':
			t.cr = true
		default:
			if len(t.partial) < maxLine {
				t.partial = append(t.partial, c)
			}
		}
	}
	return len(b), nil
}

func (t *tailBuffer) push() {
	t.lines = append(t.lines, string(t.partial))
	t.partial = t.partial[:0]
	if len(t.lines) > TailLines {
		t.lines = append(t.lines[:0], t.lines[len(t.lines)-TailLines:]...)
	}
}

// Lines returns the kept lines and the unfinished last one.
func (t *tailBuffer) Lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := append([]string(nil), t.lines...)
	if len(t.partial) > 0 {
		out = append(out, string(t.partial))
		if len(out) > TailLines {
			out = out[len(out)-TailLines:]
		}
	}
	return out
}
