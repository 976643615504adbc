package supervise

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden/internal/syncbuf"
)

func startHelper(t *testing.T, ctx context.Context, mode string, kv ...string) (*Proc, string, *syncbuf.Buffer) {
	t.Helper()
	env, tag := helperEnvFor(t, mode, kv...)
	out := &syncbuf.Buffer{}
	p, err := Start(ctx, []string{os.Args[0]}, append(os.Environ(), env...), "", out)
	if err != nil {
		t.Fatal(err)
	}
	return p, tag, out
}

func TestStartCapturesOutputAndExit(t *testing.T) {
	t.Parallel()
	p, _, out := startHelper(t, context.Background(), "print", "H_LINES=80", "H_EXIT=3")
	ex := p.Wait()
	if ex.Code != 3 || ex.Signal != 0 || ex.OK() {
		t.Errorf("exit = %+v, want code 3", ex)
	}
	if !strings.Contains(out.String(), "line 1\n") || !strings.Contains(out.String(), "line 80\n") {
		t.Errorf("output lost lines: %q…", out.String()[:min(40, len(out.String()))])
	}
	tail := p.Tail()
	if len(tail) != TailLines || tail[0] != "line 31" || tail[len(tail)-1] != "line 80" {
		t.Errorf("tail = %d lines, %q … %q; want the last %d", len(tail), tail[0], tail[len(tail)-1], TailLines)
	}
}

func TestTailBuffer(t *testing.T) {
	var tb tailBuffer
	fmt.Fprint(&tb, "epoch 1\n 10%\r 50%\r100%\nwindows line\r\n")
	fmt.Fprint(&tb, strings.Repeat("x", 3*maxLine)+"\n")
	fmt.Fprint(&tb, "RuntimeError: CUDA out of mem")
	fmt.Fprint(&tb, "ory")
	got := tb.Lines()
	want := []string{"epoch 1", "100%", "windows line", strings.Repeat("x", maxLine), "RuntimeError: CUDA out of memory"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("lines = %q, want %q", got, want)
	}
}

func TestRusage(t *testing.T) {
	t.Parallel()
	p, _, _ := startHelper(t, context.Background(), "burn")
	ex := p.Wait()
	if !ex.OK() {
		t.Fatalf("exit = %v", ex)
	}
	if ex.UserCPU+ex.SysCPU < 0.1 {
		t.Errorf("cpu = %.3f user + %.3f sys, want at least 0.1 s", ex.UserCPU, ex.SysCPU)
	}
	if ex.MaxRSS < 64<<20 {
		t.Errorf("max rss = %d bytes, want at least the 64 MiB it touched", ex.MaxRSS)
	}
}

// A job that exits on its own still takes its whole group with it: the
// grandchild holding the output pipe neither survives nor blocks Wait.
func TestExitKillsTheGroup(t *testing.T) {
	t.Parallel()
	pidfile := filepath.Join(t.TempDir(), "gc.pid")
	p, tag, _ := startHelper(t, context.Background(), "trainer", "H_STEPS=15", "H_STEP_MS=20",
		"H_GRANDCHILD="+pidfile, EnvCheckpointDir+"="+t.TempDir())
	gc := readPid(t, pidfile, 10*time.Second)
	start := time.Now()
	ex := p.Wait()
	if !ex.OK() {
		t.Fatalf("exit = %v", ex)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("Wait took %s: the grandchild's pipe held it", d)
	}
	if alive(gc) {
		t.Errorf("grandchild %d survived the job", gc)
	}
	assertNoLeftovers(t, tag)
}

func TestKillGroupAndContext(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"KillGroup", "context"} {
		t.Run(how, func(t *testing.T) {
			pidfile := filepath.Join(t.TempDir(), "gc.pid")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			p, tag, _ := startHelper(t, ctx, "trainer", "H_STEPS=100000",
				"H_GRANDCHILD="+pidfile, EnvCheckpointDir+"="+t.TempDir())
			gc := readPid(t, pidfile, 10*time.Second)
			if how == "KillGroup" {
				if err := p.KillGroup(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			} else {
				cancel()
			}
			ex := p.Wait()
			if ex.Signal != syscall.SIGKILL || ex.Code != -1 {
				t.Errorf("exit = %+v, want killed by SIGKILL", ex)
			}
			if alive(gc) {
				t.Errorf("grandchild %d survived", gc)
			}
			assertNoLeftovers(t, tag)
			if err := p.Signal(syscall.SIGTERM); err != os.ErrProcessDone {
				t.Errorf("signal after exit: %v, want os.ErrProcessDone", err)
			}
			if err := p.KillGroup(syscall.SIGKILL); err != nil {
				t.Errorf("KillGroup after exit: %v", err)
			}
		})
	}
}

// kill -9 of the supervisor: no code of it runs, yet the job and its
// grandchild must go — the leader by Pdeathsig, the rest by the guard.
func TestSupervisorKilledTakesTheJob(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	jobPidFile, gcPidFile, guardPidFile := filepath.Join(dir, "job.pid"), filepath.Join(dir, "gc.pid"), filepath.Join(dir, "guard.pid")
	env, tag := helperEnvFor(t, "supervisor", "H_JOBPID="+jobPidFile, "H_GRANDCHILD="+gcPidFile, "H_GUARDPID="+guardPidFile,
		EnvCheckpointDir+"="+filepath.Join(dir, "ckpt"))
	sup := exec.Command(os.Args[0])
	sup.Env = append(os.Environ(), env...)
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	job := readPid(t, jobPidFile, 10*time.Second)
	gc := readPid(t, gcPidFile, 10*time.Second)
	guard := readPid(t, guardPidFile, time.Second)
	if !alive(job) || !alive(gc) {
		t.Fatalf("job %d or grandchild %d not running", job, gc)
	}
	if err := sup.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = sup.Wait()
	killed := time.Now()
	for time.Since(killed) < 2*time.Second && (alive(job) || alive(gc)) {
		time.Sleep(10 * time.Millisecond)
	}
	if alive(job) {
		t.Errorf("job %d alive 2 s after its supervisor was killed", job)
	}
	if alive(gc) {
		t.Errorf("grandchild %d alive 2 s after its supervisor was killed", gc)
	}
	// The guard's work done, it exits too (and, reparented to this
	// subreaper, is reaped here).
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && alive(guard) {
		time.Sleep(10 * time.Millisecond)
	}
	if alive(guard) {
		t.Errorf("guard %d still running after its supervisor died", guard)
	}
	assertNoLeftovers(t, tag)
}

func TestStartErrors(t *testing.T) {
	if _, err := Start(context.Background(), nil, nil, "", nil); err == nil {
		t.Error("no command: want an error")
	}
	_, err := Start(context.Background(), []string{"/nonexistent/train"}, nil, "", nil)
	if err == nil || !strings.Contains(err.Error(), "start job") {
		t.Errorf("missing binary: err = %v", err)
	}
}
