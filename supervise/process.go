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
	"strings"
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

// Proc is a job running in its own process group.
type Proc struct {
	pid  int
	cmd  *exec.Cmd
	tail *tailBuffer

	exited chan struct{} // the leader was reaped
	done   chan struct{} // and the group is gone and the output drained

	mu      sync.Mutex
	exit    Exit
	members map[int]struct{}
}

// Start runs argv in a new process group with its combined output copied to
// out. The leader gets SIGKILL when this process dies (Pdeathsig), and a
// guard process kills the whole group then, because Pdeathsig reaches only
// the leader. Cancelling ctx kills the group at once, so pass a context that
// outlives any graceful stop. A nil env means this process's environment.
func Start(ctx context.Context, argv, env []string, dir string, out io.Writer) (*Proc, error) {
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
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start job: %w", err)
	}
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
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("start job: %w", err)
	}
	w.Close()
	p := &Proc{
		pid:     cmd.Process.Pid,
		cmd:     cmd,
		tail:    &tailBuffer{},
		exited:  make(chan struct{}),
		done:    make(chan struct{}),
		members: map[int]struct{}{cmd.Process.Pid: {}},
	}
	guardErr := guardAdd(p.pid)
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

// finish kills what is left of the group once the leader is gone, because a
// job's end is the end of all its processes, then waits for them and the output.
func (p *Proc) finish(reaped, drained <-chan struct{}, r *os.File) {
	<-p.exited
	_ = p.KillGroup(syscall.SIGKILL)
	deadline := time.Now().Add(groupGone)
	tick := time.NewTicker(10 * time.Millisecond)
	for time.Now().Before(deadline) {
		select {
		case <-reaped:
			reaped = nil
		case <-tick.C:
		}
		if reaped == nil && groupEmpty(p.pid) {
			break
		}
	}
	tick.Stop()
	empty := groupEmpty(p.pid)
	select {
	case <-drained:
	case <-time.After(outputDrain):
		r.Close()
		<-drained
	}
	r.Close()
	if empty {
		guardRemove(p.pid)
	}
	_ = p.cmd.Process.Release()
	close(p.done)
}

func groupEmpty(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

// sample notes the group's members every few seconds until the leader exits.
func (p *Proc) sample() {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		select {
		case <-p.exited:
			return
		case <-t.C:
		}
		pids := groupMembers(p.pid)
		p.mu.Lock()
		for _, pid := range pids {
			if len(p.members) < 4096 {
				p.members[pid] = struct{}{}
			}
		}
		p.mu.Unlock()
	}
}

// groupMembers lists the processes whose process group is pgid, from /proc.
func groupMembers(pgid int) []int {
	des, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, d := range des {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if pg, ok := procPgrp(pid); ok && pg == pgid {
			out = append(out, pid)
		}
	}
	return out
}

// procPgrp reads a process's group from /proc/PID/stat, after the command
// name, which may itself hold spaces and parentheses.
func procPgrp(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 3 {
		return 0, false
	}
	pg, err := strconv.Atoi(f[2])
	return pg, err == nil
}

// Pid returns the leader's process ID, which is also the group's ID.
func (p *Proc) Pid() int { return p.pid }

// Pids returns every process seen in the group, the leader first, for
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

// Signal sends sig to the whole group, because a job's workers must hear a
// checkpoint or stop request too; it returns os.ErrProcessDone once the leader exited.
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
	return nil
}

// KillGroup sends sig to whatever is left of the group, also after the
// leader exited; an empty group is not an error.
func (p *Proc) KillGroup(sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil // the group is gone; its number may belong to someone else now
	default:
	}
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill job group %d: %w", p.pid, err)
	}
	return nil
}

// Done is closed when the job and its whole group are gone.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait blocks until the job and its group are gone and returns how the leader ended.
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
