package launch

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// outputCap bounds what is kept of a command's output: providers print
// the error last, so the tail is what classification needs, and a chatty
// launcher must not grow memory without end.
const outputCap = 64 << 10

// outputLines is how many of the last lines an attempt keeps for the record.
const outputLines = 20

// tail keeps the last outputCap bytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*outputCap {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-outputCap:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	if len(b) > outputCap {
		b = b[len(b)-outputCap:]
	}
	return strings.ToValidUTF8(string(b), "")
}

// result is how one shell command ended.
type result struct {
	exit   int
	output string
	// timedOut: the command's own limit passed and its group was killed.
	timedOut bool
	// stopped is the parent context's error when it ended the command
	// (the launch deadline, or the caller cancelling).
	stopped error
	// err: the command could not be started at all.
	err error
}

func (r result) ok() bool { return r.err == nil && r.stopped == nil && !r.timedOut && r.exit == 0 }

// runShell runs line with sh -c in its own process group, stdout and
// stderr together, and kills the whole group when limit passes or ctx ends:
// a cloud CLI often leaves helpers behind that would outlive a plain kill.
func runShell(ctx context.Context, line string, env []string, limit time.Duration) result {
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	out := &tail{}
	cmd := exec.CommandContext(cctx, "sh", "-c", line)
	cmd.Env = env
	cmd.Stdout = out
	cmd.Stderr = out
	// A background process that keeps the pipes open must not hold the
	// launch: Wait gives up on the pipes this long after sh exits.
	cmd.WaitDelay = 2 * time.Second
	killGroupOnCancel(cmd)
	err := cmd.Run()
	r := result{output: out.String(), exit: -1}
	if cmd.ProcessState != nil {
		r.exit = cmd.ProcessState.ExitCode()
	}
	switch {
	case ctx.Err() != nil:
		r.stopped = context.Cause(ctx)
	case cctx.Err() != nil:
		r.timedOut = true
	case err == nil, errors.Is(err, exec.ErrWaitDelay):
	default:
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			r.err = err
		}
	}
	return r
}

// lastLines is the last n non-blank lines of s, trimmed, at most 8 KiB:
// enough for a person to see why, small enough for a ledger row.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, " \t\r\n"), "\n")
	var keep []string
	for i := len(lines) - 1; i >= 0 && len(keep) < n; i-- {
		if l := strings.TrimRight(lines[i], " \t\r"); strings.TrimSpace(l) != "" {
			keep = append(keep, l)
		}
	}
	var b bytes.Buffer
	for i := len(keep) - 1; i >= 0; i-- {
		b.WriteString(keep[i])
		if i > 0 {
			b.WriteByte('\n')
		}
	}
	s = b.String()
	if len(s) > 8<<10 {
		s = strings.ToValidUTF8(s[len(s)-8<<10:], "")
	}
	return s
}

// lastLine is the last non-blank line of s, clipped for a line of output.
func lastLine(s string) string {
	return clip(lastLines(s, 1), 160)
}

// commandEnv is this process's environment, then extra, then vars: later
// entries win in os/exec, so GPUWARDEN_* cannot be overridden by accident.
func commandEnv(extra []string, v Vars, target string) []string {
	env := append(os.Environ(), extra...)
	return append(env,
		"GPUWARDEN_LAUNCH_ID="+v.LaunchID,
		"GPUWARDEN_TARGET="+target,
		"GPUWARDEN_NAME="+v.Name,
		"GPUWARDEN_PROVIDER="+v.Provider,
		"GPUWARDEN_REGION="+v.Region,
		"GPUWARDEN_ZONE="+v.Zone,
		"GPUWARDEN_OFFER="+v.Offer,
		"GPUWARDEN_INSTANCE_ID="+v.InstanceID,
	)
}
