package supervise

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden/internal/syncbuf"
)

func TestSigCgt(t *testing.T) {
	tests := []struct {
		name, status string
		want         uint64
		wantErr      bool
	}{
		{"catches USR1", "Name:\tpython3\nSigBlk:\t0000000000000000\nSigCgt:\t0000000000000200\n", 1 << 9, false},
		{"catches nothing", "SigCgt:\t0000000000000000\n", 0, false},
		{"go runtime", "SigCgt:\tfffffffd7fc1feff\n", 0xfffffffd7fc1feff, false},
		{"no line", "Name:\tx\n", 0, true},
		{"garbled", "SigCgt:\tzz\n", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := sigCgt([]byte(tt.status))
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("sigCgt = %#x, %v; want %#x, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestCatchesSignal(t *testing.T) {
	t.Parallel()
	sleep := sleepPath(t)
	dir := t.TempDir()
	pidfile := filepath.Join(dir, "catcher.pid")
	env, _ := helperEnvFor(t, "catcher", "H_PIDFILE="+pidfile, "H_GOTFILE="+filepath.Join(dir, "got"))
	startDirect(t, []string{os.Args[0]}, env, nil)
	catcher := readPid(t, pidfile, 10*time.Second)
	sleeper := startDirect(t, []string{sleep, "3600"}, nil, nil).Process.Pid
	tests := []struct {
		name string
		pid  int
		sig  syscall.Signal
		want bool
	}{
		{"handler for SIGUSR1", catcher, syscall.SIGUSR1, true},
		{"sleep has none", sleeper, syscall.SIGUSR1, false},
		{"nor for SIGUSR2", sleeper, syscall.SIGUSR2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CatchesSignal(tt.pid, tt.sig)
			if err != nil || got != tt.want {
				t.Errorf("CatchesSignal(%d, %v) = %v, %v; want %v", tt.pid, tt.sig, got, err, tt.want)
			}
		})
	}
	if _, err := CatchesSignal(sleeper, 0); err == nil {
		t.Error("signal 0: want an error")
	}
	c := startDirect(t, []string{sleep, "0"}, nil, nil)
	_ = c.Wait()
	if _, err := CatchesSignal(c.Process.Pid, syscall.SIGUSR1); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("gone process: err = %v, want os.ErrProcessDone", err)
	}
}

// The checkpoint signal reaches only the processes that handle it; the
// others, which its default action would kill, are spared.
func TestSignalCatchers(t *testing.T) {
	t.Parallel()
	sleep := sleepPath(t)
	tests := []struct {
		name string
		// catcher: the leader handles SIGUSR1 and has a sleep child;
		// otherwise the job is a lone sleep.
		catcher bool
	}{
		{"catcher and non-catcher in one group", true},
		{"nobody catches", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			f := func(name string) string { return filepath.Join(dir, name) }
			argv := []string{sleep, "3600"}
			if tt.catcher {
				argv = []string{os.Args[0]}
			}
			env, tag := helperEnvFor(t, "catcher", "H_CHILD_SLEEP=1", "H_CHILDPID="+f("child.pid"),
				"H_PIDFILE="+f("catcher.pid"), "H_GOTFILE="+f("got"))
			p, err := Start(context.Background(), argv, append(os.Environ(), env...), "", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = p.KillGroup(syscall.SIGKILL); p.Wait(); assertNoLeftovers(t, tag) }()
			var want, spared []int
			if tt.catcher {
				want = []int{readPid(t, f("catcher.pid"), 10*time.Second)}
				spared = []int{readPid(t, f("child.pid"), time.Second)}
			} else {
				spared = []int{p.Pid()}
			}
			got, err := p.SignalCatchers(syscall.SIGUSR1)
			if err != nil || !slices.Equal(got, want) {
				t.Errorf("SignalCatchers = %v, %v; want %v", got, err, want)
			}
			if tt.catcher {
				readFile(t, f("got"), 10*time.Second)
			}
			for _, pid := range spared {
				if !alive(pid) {
					t.Errorf("process %d, which does not catch SIGUSR1, was killed", pid)
				}
			}
			select {
			case <-p.Done():
				t.Errorf("job ended after SignalCatchers: %v", p.Wait())
			default:
			}
		})
	}
}

func TestSignalCatchersAfterExit(t *testing.T) {
	t.Parallel()
	p, _, _ := startHelper(t, context.Background(), "print", "H_LINES=1")
	p.Wait()
	if got, err := p.SignalCatchers(syscall.SIGUSR1); !errors.Is(err, os.ErrProcessDone) || len(got) != 0 {
		t.Errorf("SignalCatchers after exit = %v, %v; want os.ErrProcessDone", got, err)
	}
}

// readFile waits for a file to appear.
func readFile(t *testing.T, file string, within time.Duration) []byte {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(file); err == nil {
			return b
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %s within %s", file, within)
	return nil
}

// TestSignalCatchersStartedWaitsForAHandler: a job that sets up its
// handler a moment after it starts is given the signal, not taken for one
// that cannot checkpoint; one that never does is given up on within the
// budget.
func TestSignalCatchersStartedWaitsForAHandler(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		script   string
		budget   time.Duration
		wantSent bool
	}{
		{"handler after 300 ms", `sleep 0.3; trap 'echo caught; exit 0' USR1; while :; do sleep 0.05; done`, 5 * time.Second, true},
		{"no handler at all", `while :; do sleep 0.05; done`, 400 * time.Millisecond, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out := &syncbuf.Buffer{}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			p, err := Start(ctx, []string{"/bin/sh", "-c", tt.script}, os.Environ(), "", out)
			if err != nil {
				t.Fatal(err)
			}
			sent, waited, err := p.SignalCatchersStarted(syscall.SIGUSR1, tt.budget)
			if err != nil {
				t.Fatal(err)
			}
			if (len(sent) > 0) != tt.wantSent {
				t.Fatalf("sent to %v after %v, want sent: %v", sent, waited, tt.wantSent)
			}
			if tt.wantSent {
				if ex := p.Wait(); !ex.OK() || !strings.Contains(out.String(), "caught") {
					t.Errorf("exit %+v, output %q: the job did not catch the signal", ex, out.String())
				}
				return
			}
			if waited < tt.budget || waited > tt.budget+time.Second {
				t.Errorf("gave up after %v, want about %v", waited, tt.budget)
			}
		})
	}
}
