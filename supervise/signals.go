package supervise

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"syscall"
	"time"
)

// CatchesSignal reports whether pid has a handler installed for sig, from
// the SigCgt mask in /proc/PID/status (bit sig-1). A signal whose default
// action terminates, like SIGUSR1, ends a process that has no handler, so
// a checkpoint request must not reach a shell wrapper or an interpreter
// that has not set its handler yet. A Go program counts as catching every
// signal: its runtime installs handlers at start, and one that did not ask
// for sig with signal.Notify still dies of it.
func CatchesSignal(pid int, sig syscall.Signal) (bool, error) {
	if sig < 1 || sig > 64 {
		return false, fmt.Errorf("catches signal: no signal %d", int(sig))
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return false, fmt.Errorf("catches signal: process %d: %w", pid, os.ErrProcessDone)
		}
		return false, fmt.Errorf("catches signal: %w", err)
	}
	mask, err := sigCgt(b)
	if err != nil {
		return false, fmt.Errorf("catches signal: process %d: %w", pid, err)
	}
	return mask&(1<<(uint(sig)-1)) != 0, nil
}

// sigCgt returns the caught-signals mask of a /proc/PID/status.
func sigCgt(status []byte) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), []byte("SigCgt:")); ok {
			mask, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("bad SigCgt %q", bytes.TrimSpace(v))
			}
			return mask, nil
		}
	}
	return 0, errors.New("no SigCgt in status")
}

// SignalCatchers sends sig only to the job's live processes (its group,
// its cgroup, the processes carrying its ID) that catch it, and skips the
// others, which its default action would kill. It returns the pids it
// signalled; none means nobody catches sig and nothing was sent, which the
// caller may treat as "this job cannot checkpoint now". It returns
// os.ErrProcessDone once the leader exited, like Signal.
func (p *Proc) SignalCatchers(sig syscall.Signal) ([]int, error) {
	select {
	case <-p.exited:
		return nil, os.ErrProcessDone
	default:
	}
	var sent []int
	var errs []error
	for _, m := range p.job().members() {
		catches, err := CatchesSignal(m.pid, sig)
		if err != nil {
			if !errors.Is(err, os.ErrProcessDone) {
				errs = append(errs, err)
			}
			continue
		}
		if !catches {
			continue
		}
		// A process that exits and whose pid is reused between the two
		// reads fails signalSame's start-time check and is not hit.
		ok, err := signalSame(m.pid, m.start, sig)
		if err != nil {
			errs = append(errs, fmt.Errorf("signal job process %d: %w", m.pid, err))
			continue
		}
		if ok {
			sent = append(sent, m.pid)
		}
	}
	sort.Ints(sent)
	if len(sent) == 0 {
		select {
		case <-p.exited:
			return nil, os.ErrProcessDone
		default:
		}
	}
	return sent, errors.Join(errs...)
}

// handlerWait is how long after its start a job is given to set up its
// handler of the checkpoint signal before a notice takes it for a job that
// does not catch it. A notice due as the job starts (a restart inside a
// maintenance window) came 1 ms after the exec, before even a Go job's
// runtime had installed its handlers, and the job was stopped with SIGTERM
// and nothing saved.
const handlerWait = 2 * time.Second

// SignalCatchersStarted is SignalCatchers for a job that may still be
// starting: while none of its processes catches sig and the job is younger
// than handlerWait, it looks again every 10 ms, for at most budget. It
// returns how long it waited, which the caller takes from its grace.
func (p *Proc) SignalCatchersStarted(sig syscall.Signal, budget time.Duration) ([]int, time.Duration, error) {
	var start time.Time // of the wait, from the first look that found no handler
	for {
		sent, err := p.SignalCatchers(sig)
		var waited time.Duration
		if !start.IsZero() {
			waited = time.Since(start)
		}
		if len(sent) > 0 || errors.Is(err, os.ErrProcessDone) || time.Since(p.started) >= handlerWait || waited >= budget {
			return sent, waited, err
		}
		if start.IsZero() {
			start = time.Now()
		}
		select {
		case <-p.exited:
		case <-time.After(10 * time.Millisecond):
		}
	}
}
