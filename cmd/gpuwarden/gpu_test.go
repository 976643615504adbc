package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/gpusim"
)

// These tests hold runBounded to its promise: after ctx ends it returns
// within the grace, however the child behaves. What they simulate:
//   - a child that hangs but dies on SIGKILL (a driver call that spins);
//   - a child whose descendant, outside its process group, keeps the
//     output pipes open: exec's Wait then blocks on the copy goroutines
//     until WaitDelay closes the pipes (the classic real-world hang);
//   - a child that is killed but never reaped: a ptrace tracer outside the
//     group (testdata/unreaped.c) keeps its zombie from the parent, so
//     wait4 blocks just as it does for a child in uninterruptible sleep in
//     the NVIDIA module;
//   - as root, where /dev/fuse can be mounted, a real uninterruptible
//     sleep: a child blocked on a FUSE request that its daemon read and
//     never answers (testdata/dstate.c) stays in D state after SIGKILL,
//     as a child stuck inside the NVIDIA module does.

// cancelAfter is a context that ends after d.
func cancelAfter(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestRunBoundedFinishes(t *testing.T) {
	r := runBounded(context.Background(), exec.Command("sh", "-c", "echo '{\"index\":3}'; echo warn >&2"), time.Second, time.Second)
	if r.err != nil || r.timedOut || r.stuck != nil {
		t.Fatalf("got %+v", r)
	}
	var out gpuwarden.ProbeResult
	if err := childResult(3, "CUDA work", r, &out); err != nil || out.Index != 3 {
		t.Errorf("childResult = %v, %+v", err, out)
	}
	if got := string(r.stderr); got != "warn\n" {
		t.Errorf("stderr %q", got)
	}
}

func TestRunBoundedExitEnvironment(t *testing.T) {
	r := runBounded(context.Background(), exec.Command("sh", "-c", "echo 'error: no NVIDIA driver' >&2; exit 3"), time.Second, time.Second)
	err := childResult(0, "CUDA work", r, &gpuwarden.ProbeResult{})
	if gpuwarden.ErrorCodeOf(err) != gpuwarden.EEnvironment || err.Error() != "no NVIDIA driver" {
		t.Errorf("err = %v (%s)", err, gpuwarden.ErrorCodeOf(err))
	}
}

func TestRunBoundedKillsHungChild(t *testing.T) {
	start := time.Now()
	// The sleep is the shell's child, in the same process group: the
	// group kill must take it too, or it would hold the pipes for 60 s.
	r := runBounded(cancelAfter(t, 200*time.Millisecond), exec.Command("sh", "-c", "echo started >&2; sleep 60; echo never"), 5*time.Second, 5*time.Second)
	elapsed := time.Since(start)
	if !r.timedOut || r.stuck != nil {
		t.Fatalf("got %+v, want killed and reaped", r)
	}
	if elapsed > 2*time.Second {
		t.Errorf("returned after %s; the group kill should have ended it at once", elapsed)
	}
	err := childResult(1, "CUDA work", r, &gpuwarden.ProbeResult{})
	if err == nil || !strings.Contains(err.Error(), "GPU 1: CUDA work did not finish within") || !strings.Contains(err.Error(), "was killed (started)") {
		t.Errorf("err = %v", err)
	}
}

func TestRunBoundedPipeHeldByDescendant(t *testing.T) {
	// The grandchild leaves the group (setsid), prints its PID and keeps
	// stdout and stderr open for 60 s after the child is killed.
	script := `setsid sh -c 'echo grandchild=$$ >&2; exec sleep 60' & sleep 0.2; exec sleep 60`
	start := time.Now()
	const pipeDelay = 300 * time.Millisecond
	r := runBounded(cancelAfter(t, 500*time.Millisecond), exec.Command("sh", "-c", script), pipeDelay, 10*time.Second)
	elapsed := time.Since(start)
	if m := regexp.MustCompile(`grandchild=(\d+)`).FindSubmatch(r.stderr); m != nil {
		pid, _ := strconv.Atoi(string(m[1]))
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	} else {
		t.Fatalf("no grandchild PID in %q", r.stderr)
	}
	if !r.timedOut || r.stuck != nil {
		t.Fatalf("got %+v, want killed and reaped", r)
	}
	// WaitDelay, not the grace, ended it: 500 ms + 300 ms and some slack.
	if elapsed > 3*time.Second {
		t.Errorf("returned after %s; WaitDelay should close the held pipes after %s", elapsed, pipeDelay)
	}
}

func TestRunBoundedUnreapedChild(t *testing.T) {
	helper := buildUnreaped(t)
	const grace = 700 * time.Millisecond
	cmd := exec.Command(helper)
	start := time.Now()
	r := runBounded(cancelAfter(t, 500*time.Millisecond), cmd, 200*time.Millisecond, grace)
	elapsed := time.Since(start)
	m := regexp.MustCompile(`tracer=(\d+)`).FindSubmatch(r.stderr)
	if m == nil {
		if r.err != nil && strings.Contains(string(r.stderr), "ptrace") {
			t.Skipf("ptrace not permitted here: %s", r.stderr)
		}
		t.Fatalf("the helper did not get traced: %+v, stderr %q", r, r.stderr)
	}
	tracer, _ := strconv.Atoi(string(m[1]))
	t.Cleanup(func() {
		// Ending the tracer hands the zombie back, so the Wait that
		// runBounded left behind returns too.
		_ = syscall.Kill(tracer, syscall.SIGKILL)
	})
	if r.stuck == nil {
		t.Fatalf("got %+v, want the parent to give up on an unreaped child", r)
	}
	if r.stuck.PID != cmd.Process.Pid {
		t.Errorf("stuck pid %d, want the child's %d", r.stuck.PID, cmd.Process.Pid)
	}
	if !strings.HasPrefix(r.stuck.State, "Z") {
		t.Errorf("state %q, want the zombie's Z (zombie)", r.stuck.State)
	}
	if elapsed < 500*time.Millisecond+grace || elapsed > 500*time.Millisecond+grace+2*time.Second {
		t.Errorf("returned after %s, want the deadline plus the %s grace", elapsed, grace)
	}
	err := childResult(0, "the burn-in", r, &gpuwarden.BurnResult{})
	want := "killed, but pid " + strconv.Itoa(cmd.Process.Pid) + " is still in state Z (zombie)"
	if err == nil || !strings.Contains(err.Error(), want) || gpuwarden.ErrorCodeOf(err) != gpuwarden.EEnvironment {
		t.Errorf("err = %v, want it to contain %q", err, want)
	}
	if !strings.Contains(gpuwarden.ErrorHint(err), "reset") {
		t.Errorf("hint %q", gpuwarden.ErrorHint(err))
	}
}

// buildUnreaped compiles testdata/unreaped.c; without a C compiler the
// test skips.
func buildUnreaped(t *testing.T) string {
	t.Helper()
	return buildHelper(t, "unreaped")
}

// buildHelper compiles testdata/NAME.c; without a C compiler the test skips.
func buildHelper(t *testing.T, name string) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skipf("no C compiler for testdata/%s.c", name)
	}
	out := filepath.Join(t.TempDir(), name)
	if b, err := exec.Command(cc, "-O2", "-o", out, "testdata/"+name+".c").CombinedOutput(); err != nil {
		t.Fatalf("build %s.c: %v\n%s", name, err, b)
	}
	return out
}

func TestRunBoundedDStateChild(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE without fusermount needs root")
	}
	helper := buildHelper(t, "dstate")
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	// Runs before TempDir's removal: the mount must go first.
	t.Cleanup(func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) })
	const grace = 700 * time.Millisecond
	cmd := exec.Command(helper, mnt)
	start := time.Now()
	r := runBounded(cancelAfter(t, 500*time.Millisecond), cmd, 200*time.Millisecond, grace)
	elapsed := time.Since(start)
	m := regexp.MustCompile(`daemon=(\d+)`).FindSubmatch(r.stderr)
	if m == nil {
		if r.err != nil {
			t.Skipf("no FUSE mount here: %v: %s", r.err, r.stderr)
		}
		t.Fatalf("the helper never got its daemon going: %+v, stderr %q", r, r.stderr)
	}
	daemon, _ := strconv.Atoi(string(m[1]))
	// Killing the daemon closes /dev/fuse: the stat ends with ENOTCONN and
	// the child dies of its pending SIGKILL.
	t.Cleanup(func() { _ = syscall.Kill(daemon, syscall.SIGKILL) })
	if r.stuck == nil {
		t.Fatalf("got %+v, want the parent to give up on a child in D state", r)
	}
	if r.stuck.PID != cmd.Process.Pid || r.stuck.State != "D (disk sleep)" {
		t.Errorf("stuck %+v, want pid %d in D (disk sleep)", r.stuck, cmd.Process.Pid)
	}
	t.Logf("%s after %s", r.stuck, elapsed.Round(time.Millisecond))
	if elapsed < 500*time.Millisecond+grace || elapsed > 500*time.Millisecond+grace+2*time.Second {
		t.Errorf("returned after %s, want the deadline plus the %s grace", elapsed, grace)
	}
	err := childResult(2, "CUDA work", r, &gpuwarden.ProbeResult{})
	if want := "is still in state D (disk sleep)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v, want it to contain %q", err, want)
	}
}

func TestProcState(t *testing.T) {
	state, _ := procState(os.Getpid())
	if !strings.HasPrefix(state, "R") && !strings.HasPrefix(state, "S") {
		t.Errorf("own state %q, want running or sleeping", state)
	}
	if state, wchan := procState(1 << 30); state != "" || wchan != "" {
		t.Errorf("a PID that cannot exist: %q %q", state, wchan)
	}
	s := &stuckChild{PID: 42, State: "D (disk sleep)", WaitChannel: "os_wait_for_completion"}
	if got, want := s.String(), "pid 42 is still in state D (disk sleep) in os_wait_for_completion"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestCappedBuffer(t *testing.T) {
	b := &cappedBuffer{limit: 5}
	for _, s := range []string{"abc", "defg", "h"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := string(b.Bytes()); got != "abcde" || !b.Truncated() {
		t.Errorf("kept %q, truncated %v; want abcde, true", got, b.Truncated())
	}
}

func TestGPUChildEnv(t *testing.T) {
	a := &app{}
	for _, tc := range []struct {
		name string
		in   []string
		want []string
	}{
		{"nothing inherited", []string{"PATH=/bin"}, []string{"PATH=/bin", "CUDA_DEVICE_ORDER=PCI_BUS_ID"}},
		{"a mask and an order of the user's", []string{"CUDA_VISIBLE_DEVICES=1,0", "PATH=/bin", "CUDA_DEVICE_ORDER=FASTEST_FIRST"},
			[]string{"PATH=/bin", "CUDA_DEVICE_ORDER=PCI_BUS_ID"}},
		{"an empty mask hides every GPU", []string{"CUDA_VISIBLE_DEVICES="}, []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID"}},
		{"a look-alike stays", []string{"MY_CUDA_VISIBLE_DEVICES=1"}, []string{"MY_CUDA_VISIBLE_DEVICES=1", "CUDA_DEVICE_ORDER=PCI_BUS_ID"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := a.gpuChildEnv(tc.in)
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// migSim reports every simulated GPU with MIG mode on.
type migSim struct{ *gpusim.Sim }

func (m migSim) List(ctx context.Context) ([]gpuwarden.GPU, error) {
	list, err := m.Sim.List(ctx)
	for i := range list {
		list[i].MIG = true
	}
	return list, err
}

// TestCanaryMIGIsPartial: a GPU in MIG mode is not probed (CUDA sees only
// its instances, and the probe finds GPUs by their own UUID); its cuda
// check is a skip with the reason, and the verdict is partial, not OK.
func TestCanaryMIGIsPartial(t *testing.T) {
	spec, err := gpusim.ParseSpec("2xH100")
	if err != nil {
		t.Fatal(err)
	}
	a := &app{}
	var r canaryReport
	a.checkGPUs(context.Background(), &stackFlags{}, migSim{gpusim.New(spec)}, 1<<20, &r)
	n := 0
	for _, c := range r.Checks {
		if c.Name == "cuda" {
			n++
			if c.Status != statusSkip || !strings.HasPrefix(c.Detail, "skipped: MIG enabled") {
				t.Errorf("cuda check %+v, want a MIG skip", c)
			}
		}
		if c.Name == "context+alloc" {
			t.Errorf("a MIG GPU was probed: %+v", c)
		}
	}
	if n != 2 {
		t.Errorf("%d cuda checks, want one per GPU", n)
	}
	r.decide(false)
	if r.Complete || r.Verdict != verdictPartial || r.ExitCode != canaryOK {
		t.Errorf("complete %v, verdict %s, exit %d; want a partial pass", r.Complete, r.Verdict, r.ExitCode)
	}
}
