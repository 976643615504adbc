package supervise

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the jobs it supervises: with SUPERVISE_HELPER
// set, TestMain runs a helper instead of the tests (the TestHelperProcess
// pattern, in TestMain so no test flags are needed).
const helperEnv = "SUPERVISE_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helperMain(mode))
	}
	// As the CLI does: orphaned grandchildren come back here to be reaped,
	// instead of to a PID 1 that may not reap them.
	if err := BecomeSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if left := childrenLeft(); len(left) > 0 && code == 0 {
		fmt.Fprintln(os.Stderr, "processes left behind by the tests:", left)
		code = 1
	}
	os.Exit(code)
}

// childrenLeft lists this process's children other than its guard, after
// a second's grace, reaping zombies: every job and orphan must be gone.
func childrenLeft() []string {
	theGuard.mu.Lock()
	guard := 0
	if theGuard.cmd != nil {
		guard = theGuard.cmd.Process.Pid
	}
	theGuard.mu.Unlock()
	var left []string
	for range 100 {
		left = left[:0]
		des, _ := os.ReadDir("/proc")
		for _, d := range des {
			pid, err := strconv.Atoi(d.Name())
			if err != nil || pid == guard {
				continue
			}
			b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
			if err != nil {
				continue
			}
			s := string(b)
			i := strings.LastIndexByte(s, ')')
			f := strings.Fields(s[i+1:])
			if len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) && alive(pid) {
				left = append(left, s[:i+1])
			}
		}
		if len(left) == 0 {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return left
}

func helperMain(mode string) int {
	switch mode {
	case "trainer":
		return trainer()
	case "sleeper":
		if f := os.Getenv("H_PIDFILE"); f != "" {
			writePid(f, os.Getpid())
		}
		time.Sleep(time.Hour)
		return 0
	case "print":
		n, _ := strconv.Atoi(os.Getenv("H_LINES"))
		for i := 1; i <= n; i++ {
			fmt.Printf("line %d\n", i)
		}
		code, _ := strconv.Atoi(os.Getenv("H_EXIT"))
		return code
	case "burn":
		mem := make([]byte, 64<<20)
		for i := 0; i < len(mem); i += 4096 { // touch every page
			mem[i] = byte(i)
		}
		deadline := time.Now().Add(300 * time.Millisecond)
		x := 0
		for time.Now().Before(deadline) {
			x++
		}
		fmt.Println(x > 0, mem[len(mem)-1])
		return 0
	case "supervisor":
		// A tiny supervisor for the kill -9 test: start a job, report its
		// pid, block until killed.
		if err := BecomeSubreaper(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		env := append(os.Environ(), helperEnv+"=trainer", "H_STEPS=1000000", "H_STEP_MS=50")
		p, err := Start(context.Background(), []string{os.Args[0]}, env, "", os.Stdout)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		theGuard.mu.Lock()
		guardPid := theGuard.cmd.Process.Pid
		theGuard.mu.Unlock()
		writePid(os.Getenv("H_GUARDPID"), guardPid)
		writePid(os.Getenv("H_JOBPID"), p.Pid())
		select {}
	case "setsid-parent":
		return setsidParent()
	case "setsid-supervisor":
		return setsidSupervisor()
	case "catcher":
		return catcher()
	}
	fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
	return 2
}

func writePid(file string, pid int) {
	tmp := file + ".tmp"
	_ = os.WriteFile(tmp, []byte(strconv.Itoa(pid)), 0o644)
	_ = os.Rename(tmp, file)
}

// trainerState is what a helper checkpoint holds.
type trainerState struct {
	Step   int    `json:"step"`
	Digest string `json:"digest"`
}

// advance chains one step into the digest, so a skipped, repeated or
// misordered step shows in the final digest.
func advance(digest string, step int) string {
	sum := sha256.Sum256([]byte(digest + ":" + strconv.Itoa(step)))
	return hex.EncodeToString(sum[:])
}

// wantDigest is the digest of an uninterrupted run of steps.
func wantDigest(steps int) string {
	d := ""
	for i := 1; i <= steps; i++ {
		d = advance(d, i)
	}
	return d
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// trainer behaves like a training job: it counts steps, checkpoints every
// H_EVERY steps into $GPUWARDEN_CHECKPOINT_DIR/step-N/ with a marker, resumes
// from $GPUWARDEN_RESUME_FROM, checkpoints at once on SIGUSR1 and exits 0 on
// SIGTERM. Switches: H_IGNORE_RESUME, H_DIE_AT (attempt 1 dies mid-write at
// that step), H_OOM, H_FAIL_UNTIL or H_FAIL_ON with H_FAIL_TEXT, H_GRANDCHILD (pid file),
// H_IGNORE_TERM, H_NAME (a fixed checkpoint name), H_SELF_KILL, H_RESTORE_STEP_ONLY
// (resume the step but not the digest).
func trainer() int {
	steps := envInt("H_STEPS", 40)
	every := envInt("H_EVERY", 5)
	stepDur := time.Duration(envInt("H_STEP_MS", 20)) * time.Millisecond
	attempt := envInt(EnvAttempt, 1)
	ckptDir := os.Getenv(EnvCheckpointDir)

	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGTERM)
	if os.Getenv("H_IGNORE_TERM") != "" {
		signal.Ignore(syscall.SIGTERM, syscall.SIGUSR1)
	}
	if f := os.Getenv("H_GRANDCHILD"); f != "" {
		gc := exec.Command(os.Args[0])
		gc.Env = append(os.Environ(), helperEnv+"=sleeper", "H_PIDFILE="+f)
		gc.Stdout = os.Stdout // holds the output pipe open, as a stray worker would
		if err := gc.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if attempt < envInt("H_FAIL_UNTIL", 0) || attempt == envInt("H_FAIL_ON", 0) {
		fmt.Println("Traceback (most recent call last):")
		fmt.Println(os.Getenv("H_FAIL_TEXT"))
		return 1
	}
	if os.Getenv("H_OOM") != "" {
		fmt.Println("Traceback (most recent call last):")
		fmt.Println(`  File "train.py", line 88, in <module>`)
		fmt.Fprintln(os.Stderr, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.06 GiB is free.")
		return 1
	}
	if os.Getenv("H_SELF_KILL") != "" {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}

	st := trainerState{}
	if from := os.Getenv(EnvResumeFrom); from != "" && os.Getenv("H_IGNORE_RESUME") == "" {
		b, err := os.ReadFile(filepath.Join(from, "state.json"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "resume:", err)
			return 1
		}
		if err := json.Unmarshal(b, &st); err != nil {
			fmt.Fprintln(os.Stderr, "resume:", err)
			return 1
		}
		if os.Getenv("H_RESTORE_STEP_ONLY") != "" {
			st.Digest = "" // the step comes back, the state does not
		}
	}
	fmt.Printf("attempt %d starting at step %d, args %q\n", attempt, st.Step, os.Args[1:])
	save := func(partial bool) error {
		name := fmt.Sprintf("step-%06d", st.Step)
		if n := os.Getenv("H_NAME"); n != "" {
			name = n
		}
		dir := filepath.Join(ckptDir, name)
		if _, err := os.Stat(dir); err == nil && os.Getenv("H_NAME") != "" {
			// A marked folder is gpuwarden's until it is committed: a job
			// that reuses a name waits for the commit to move it away.
			return nil
		}
		if err := os.MkdirAll(filepath.Join(dir, "shards"), 0o755); err != nil {
			return err
		}
		b, _ := json.Marshal(st)
		if err := os.WriteFile(filepath.Join(dir, "state.json"), b, 0o644); err != nil {
			return err
		}
		weights := []byte(strings.Repeat(st.Digest, 64))
		if err := os.WriteFile(filepath.Join(dir, "shards", "0.bin"), weights, 0o644); err != nil {
			return err
		}
		if partial {
			return nil
		}
		return os.WriteFile(filepath.Join(dir, MarkerName), nil, 0o644)
	}
	tick := time.NewTicker(stepDur)
	defer tick.Stop()
	for st.Step < steps {
		select {
		case s := <-sigs:
			if s == syscall.SIGTERM {
				fmt.Printf("terminated at step %d\n", st.Step)
				return 0
			}
			if err := save(false); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			fmt.Printf("checkpoint on signal at step %d\n", st.Step)
			if os.Getenv("H_EXIT_AFTER_SIGNAL") != "" {
				return 0
			}
		case <-tick.C:
			st.Step++
			st.Digest = advance(st.Digest, st.Step)
			if st.Step%every != 0 {
				continue
			}
			if attempt == 1 && st.Step == envInt("H_DIE_AT", -1) {
				_ = save(true)
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
			if err := save(false); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
	}
	if f := os.Getenv("H_RESULT"); f != "" {
		b, _ := json.Marshal(st)
		_ = os.WriteFile(f, b, 0o644)
	}
	fmt.Printf("done step %d\n", st.Step)
	return 0
}

// helperEnvFor returns the environment for a helper job, tagged so that
// leftovers can be found in /proc afterwards.
func helperEnvFor(t *testing.T, mode string, kv ...string) (env []string, tag string) {
	tag = fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().UnixNano())
	return append([]string{helperEnv + "=" + mode, "SUPERVISE_TAG=" + tag}, kv...), tag
}

// alive reports whether pid runs; a zombie counts as gone, and one that is
// ours (reparented here, the subreaper) is reaped.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	if s[i+2] == 'Z' {
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		return false
	}
	return true
}

// tagged lists the live processes whose environment carries the tag.
func tagged(tag string) []int {
	des, _ := os.ReadDir("/proc")
	var out []int
	for _, d := range des {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/environ")
		if err != nil {
			continue
		}
		if strings.Contains(string(b), "SUPERVISE_TAG="+tag+"\x00") && alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// assertNoLeftovers fails when any process of the tag still runs.
func assertNoLeftovers(t *testing.T, tag string) {
	t.Helper()
	if pids := tagged(tag); len(pids) > 0 {
		t.Errorf("processes left behind: %v", pids)
	}
}

// readPid waits for a pid file.
func readPid(t *testing.T, file string, within time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(file); err == nil {
			if pid, err := strconv.Atoi(string(b)); err == nil {
				return pid
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no pid in %s within %s", file, within)
	return 0
}
