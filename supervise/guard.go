package supervise

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
)

// The guard is what keeps "kill -9 the supervisor" from leaving a job's
// workers behind. Pdeathsig reaches only the job's leader, and being a child
// subreaper does not help once the subreaper itself is dead: its orphans
// simply move up to init. No code runs in a process after SIGKILL, so
// another process must act: the guard, a copy of this binary that reads the
// job groups from a pipe and kills them all when the pipe reaches end of
// file, which the kernel guarantees the moment this process dies, however it
// dies.

// guardEnv selects the guard's code path at init, before main, so every
// binary that links this package (the CLI, its test binaries) can be its own guard.
const guardEnv = "GPUWARDEN_SUPERVISE_GUARD"

func init() {
	if os.Getenv(guardEnv) == "1" {
		runGuard(os.Stdin)
		os.Exit(0)
	}
}

// runGuard reads "+PGID" and "-PGID" lines and, at end of file, kills every
// group still registered.
func runGuard(r *os.File) {
	// Ctrl-C in the terminal and a service manager's SIGTERM are meant for
	// the supervisor; the guard's job starts only when the supervisor is gone.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	groups := map[int]bool{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if len(line) < 2 {
			continue
		}
		pgid, err := strconv.Atoi(line[1:])
		if err != nil || pgid <= 1 {
			continue
		}
		switch line[0] {
		case '+':
			groups[pgid] = true
		case '-':
			delete(groups, pgid)
		}
	}
	for pgid := range groups {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

type guard struct {
	mu     sync.Mutex
	w      *os.File
	cmd    *exec.Cmd
	groups map[int]bool
}

var theGuard = guard{groups: map[int]bool{}}

func guardEnsure() error {
	theGuard.mu.Lock()
	defer theGuard.mu.Unlock()
	if theGuard.w != nil {
		return nil
	}
	return theGuard.spawnLocked()
}

func guardAdd(pgid int) error {
	g := &theGuard
	g.mu.Lock()
	defer g.mu.Unlock()
	g.groups[pgid] = true
	if g.w != nil {
		if _, err := fmt.Fprintf(g.w, "+%d\n", pgid); err == nil {
			return nil
		}
		g.w.Close()
		g.w = nil
	}
	// The guard died (someone killed it): start another, which learns every group.
	return g.spawnLocked()
}

func guardRemove(pgid int) {
	g := &theGuard
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.groups, pgid)
	if g.w != nil {
		_, _ = fmt.Fprintf(g.w, "-%d\n", pgid)
	}
}

func (g *guard) spawnLocked() error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("start group guard: %w", err)
	}
	// /proc/self/exe still runs this binary when its file was replaced or deleted.
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"gpuwarden-guard"}
	cmd.Env = []string{guardEnv + "=1"}
	cmd.Stdin = r
	// Its own group, so terminal signals to the supervisor's group miss it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return fmt.Errorf("start group guard: %w", err)
	}
	r.Close()
	for pgid := range g.groups {
		if _, err := fmt.Fprintf(w, "+%d\n", pgid); err != nil {
			w.Close()
			return fmt.Errorf("start group guard: %w", err)
		}
	}
	g.w, g.cmd = w, cmd
	go func() {
		_ = cmd.Wait()
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.cmd == cmd && g.w != nil {
			g.w.Close()
			g.w = nil
		}
	}()
	return nil
}
