package supervise

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// setsidParent is a job leader whose child escapes its process group and
// session, as a daemonizing worker does: it starts a sleeper with setsid
// that writes its pid to H_SETSID_PIDFILE and holds the output pipe, waits
// for the pid, then exits (H_THEN=exit) or sleeps. With H_SCRUB the child
// gets an environment of its own, without the job ID.
func setsidParent() int {
	pidfile := os.Getenv("H_SETSID_PIDFILE")
	gc := exec.Command(os.Args[0])
	gc.Env = append(os.Environ(), helperEnv+"=sleeper", "H_PIDFILE="+pidfile)
	if os.Getenv("H_SCRUB") != "" {
		gc.Env = []string{helperEnv + "=sleeper", "H_PIDFILE=" + pidfile}
	}
	gc.Stdout = os.Stdout
	gc.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := gc.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(pidfile); err == nil {
			break
		}
	}
	if os.Getenv("H_THEN") == "exit" {
		return 0
	}
	time.Sleep(time.Hour)
	return 0
}

// setsidSupervisor is a tiny supervisor for the kill -9 tests: it starts a
// setsidParent job (H_NOCGROUP: without a cgroup), writes its record to
// H_RECORD and its cgroup to H_CGROUPFILE when asked, and with
// H_RESPAWN_GUARD kills its guard and starts a second job (a sleeper
// writing H_JOB2PID), so that a fresh guard has to learn the first job by
// replay. It reports the guard's and the job's pids, the job's last, and
// blocks until killed.
func setsidSupervisor() int {
	if err := BecomeSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env := append(os.Environ(), helperEnv+"=setsid-parent", "H_THEN=sleep")
	p, err := startJob(context.Background(), []string{os.Args[0]}, env, "", os.Stdout, startOptions{noCgroup: os.Getenv("H_NOCGROUP") != ""})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if f := os.Getenv("H_RECORD"); f != "" {
		if err := WriteJobRecord(f, p); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if f := os.Getenv("H_CGROUPFILE"); f != "" {
		_ = os.WriteFile(f+".tmp", []byte(p.Cgroup()), 0o644)
		_ = os.Rename(f+".tmp", f)
	}
	if os.Getenv("H_RESPAWN_GUARD") != "" {
		theGuard.mu.Lock()
		_ = theGuard.cmd.Process.Kill()
		theGuard.mu.Unlock()
		for {
			theGuard.mu.Lock()
			dead := theGuard.w == nil
			theGuard.mu.Unlock()
			if dead {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		env2 := append(os.Environ(), helperEnv+"=sleeper", "H_PIDFILE="+os.Getenv("H_JOB2PID"))
		if _, err := startJob(context.Background(), []string{os.Args[0]}, env2, "", os.Stdout, startOptions{noCgroup: os.Getenv("H_NOCGROUP") != ""}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	theGuard.mu.Lock()
	guardPid := theGuard.cmd.Process.Pid
	theGuard.mu.Unlock()
	writePid(os.Getenv("H_GUARDPID"), guardPid)
	writePid(os.Getenv("H_JOBPID"), p.Pid())
	select {}
}

// catcher handles SIGUSR1, as a job ready to checkpoint does: it writes
// H_GOTFILE on each. With H_CHILD_SLEEP it first starts a sleep, which
// does not, and writes its pid to H_CHILDPID. Its own pid goes to
// H_PIDFILE once the handler is in place.
func catcher() int {
	if os.Getenv("H_CHILD_SLEEP") != "" {
		c := exec.Command("sleep", "3600")
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		writePid(os.Getenv("H_CHILDPID"), c.Process.Pid)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR1)
	writePid(os.Getenv("H_PIDFILE"), os.Getpid())
	for range sigs {
		_ = os.WriteFile(os.Getenv("H_GOTFILE"), []byte("SIGUSR1"), 0o644)
	}
	return 0
}

// waitDead waits, bounded, for pid to be gone and reports whether it is.
func waitDead(pid int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for alive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// killAndWait ends a process a test started directly.
func killAndWait(cmd *exec.Cmd) {
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

// startDirect starts a helper process outside any job, with the tag env
// plus kv, and ends it when the test does.
func startDirect(t *testing.T, argv []string, env []string, attr *syscall.SysProcAttr) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killAndWait(cmd) })
	return cmd
}

// sleepPath returns the sleep command, which installs no signal handlers,
// unlike any Go program.
func sleepPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep command:", err)
	}
	return p
}

// cgroupGone reports whether a job cgroup directory was removed, waiting
// a bounded time for the guard, which removes it after its kills.
func cgroupGone(dir string, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}
