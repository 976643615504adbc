package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden/internal/syncbuf"
)

// termProc is the binary run on a terminal of its own: script(1) gives it
// a pty, as a user's terminal would.
type termProc struct {
	cmd     *exec.Cmd
	out     *syncbuf.Buffer
	pidFile string
	done    chan struct{}
}

// startOnTerminal runs the binary with args on a pty in dir; the test's
// cleanup ends it (see stop).
func startOnTerminal(t *testing.T, dir string, args ...string) *termProc {
	t.Helper()
	script, err := exec.LookPath("script")
	if err != nil {
		t.Skip("no script(1) to give the command a terminal")
	}
	p := &termProc{out: &syncbuf.Buffer{}, pidFile: filepath.Join(dir, "terminal.pid"), done: make(chan struct{})}
	words := []string{readmeQuote(binary)}
	for _, a := range args {
		words = append(words, readmeQuote(a))
	}
	// The shell writes its PID, which exec hands on to gpuwarden: the
	// process to end is known whatever script does.
	line := "echo $$ > " + readmeQuote(p.pidFile) + "; exec " + strings.Join(words, " ")
	p.cmd = exec.Command(script, "-qfec", line, "/dev/null")
	p.cmd.Dir = dir
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.stop(t) })
	return p
}

// waitFor waits until the terminal shows s.
func (p *termProc) waitFor(t *testing.T, s string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(p.out.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("the terminal did not show %q within %s:\n%s", s, within, p.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends gpuwarden itself, then script. gpuwarden leads a session of
// its own on the pty, outside script's process group, so that killing
// script's group does not reach it; the hangup of the closed pty would,
// but a SIGHUP the test's parent ignores (nohup, a CI runner) is ignored
// by every child too, and the server lived on, reparented to PID 1.
func (p *termProc) stop(t *testing.T) {
	t.Helper()
	pid := 0
	if b, err := os.ReadFile(p.pidFile); err == nil {
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	// script exits once gpuwarden has, and reaps it.
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		if pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	if pid > 0 {
		deadline := time.Now().Add(10 * time.Second)
		for !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			if time.Now().After(deadline) {
				t.Errorf("gpuwarden (pid %d) is still running after its terminal closed", pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
