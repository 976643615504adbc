package supervise

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The guard is what keeps "kill -9 the supervisor" from leaving a job's
// processes behind. Pdeathsig reaches only the job's leader, and being a
// child subreaper does not help once the subreaper itself is dead: its
// orphans simply move up to init. No code runs in a process after SIGKILL,
// so another process must act: the guard, a copy of this binary that reads
// the jobs' process groups, cgroups and IDs from a pipe and kills them all
// when the pipe reaches end of file, which the kernel guarantees the moment
// this process dies, however it dies.

// guardEnv selects the guard's code path at init, before main, so every
// binary that links this package (the CLI, its test binaries) can be its own guard.
const guardEnv = "GPUWARDEN_SUPERVISE_GUARD"

func init() {
	if os.Getenv(guardEnv) == "1" {
		runGuard(os.Stdin)
		os.Exit(0)
	}
}

// The kinds of what the guard kills, each a prefix of its protocol lines.
const (
	guardGroup  = ""  // "+PGID", "-PGID": a process group
	guardCgroup = "c" // "c+DIR", "c-DIR": a job cgroup's directory
	guardJob    = "j" // "j+ID", "j-ID": the processes carrying a job ID
)

// guardEntry is one thing registered with the guard.
type guardEntry struct {
	kind string
	val  string
}

func (e guardEntry) line(op byte) string { return e.kind + string(op) + e.val + "\n" }

// parseGuardLine reads one protocol line; ok is false for a line that
// names nothing the guard may kill (a bad group, a path that is not a job
// cgroup, a malformed ID), so a garbled line cannot turn into a kill.
func parseGuardLine(line string) (e guardEntry, add, ok bool) {
	if line != "" && (line[0] == 'c' || line[0] == 'j') {
		e.kind, line = line[:1], line[1:]
	}
	if len(line) < 2 || (line[0] != '+' && line[0] != '-') {
		return guardEntry{}, false, false
	}
	add, e.val = line[0] == '+', line[1:]
	switch e.kind {
	case guardGroup:
		pgid, err := strconv.Atoi(e.val)
		ok = err == nil && pgid > 1 && strconv.Itoa(pgid) == e.val
	case guardCgroup:
		ok = isJobCgroup(e.val)
	case guardJob:
		ok = validJobID(e.val)
	}
	return e, add, ok
}

// runGuard reads protocol lines and, at end of file, ends every job still
// registered: its groups, its cgroups (then removes them) and every process
// carrying its ID.
func runGuard(r *os.File) {
	// Ctrl-C in the terminal and a service manager's SIGTERM are meant for
	// the supervisor; the guard's job starts only when the supervisor is gone.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	// Every job process started after the supervisor, which is alive now,
	// so older processes' environments are never read.
	var since uint64
	if st, ok := readProcStat(os.Getppid()); ok {
		since = st.start
	}
	entries := map[guardEntry]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		e, add, ok := parseGuardLine(sc.Text())
		switch {
		case !ok:
		case add:
			entries[e] = true
		default:
			delete(entries, e)
		}
	}
	j := &job{ids: map[string]bool{}, since: since}
	for e := range entries {
		switch e.kind {
		case guardGroup:
			pgid, _ := strconv.Atoi(e.val)
			j.groups = append(j.groups, pgid)
		case guardCgroup:
			j.cgroups = append(j.cgroups, e.val)
		case guardJob:
			j.ids[e.val] = true
		}
	}
	if len(entries) == 0 {
		return
	}
	_, gone := j.end(groupGone)
	if gone {
		for _, cg := range j.cgroups {
			_ = removeCgroup(cg)
		}
	}
}

type guard struct {
	mu      sync.Mutex
	w       *os.File
	cmd     *exec.Cmd
	entries map[guardEntry]bool
}

var theGuard = guard{entries: map[guardEntry]bool{}}

func guardEnsure() error {
	theGuard.mu.Lock()
	defer theGuard.mu.Unlock()
	if theGuard.w != nil {
		return nil
	}
	return theGuard.spawnLocked()
}

// guardAdd registers e with the guard, starting a new guard when the old
// one died (someone killed it), which learns every registered entry.
func guardAdd(e guardEntry) error {
	g := &theGuard
	g.mu.Lock()
	defer g.mu.Unlock()
	g.entries[e] = true
	if g.w != nil {
		if _, err := g.w.WriteString(e.line('+')); err == nil {
			return nil
		}
		g.w.Close()
		g.w = nil
	}
	return g.spawnLocked()
}

// guardRemove tells the guard e is gone, so that a reused group number is
// not killed when this process dies.
func guardRemove(e guardEntry) {
	g := &theGuard
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.entries, e)
	if g.w != nil {
		_, _ = g.w.WriteString(e.line('-'))
	}
}

func (g *guard) spawnLocked() error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("start job guard: %w", err)
	}
	// /proc/self/exe still runs this binary when its file was replaced or deleted.
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"gpuwarden-guard"}
	// Only its switch: the guard carries no job ID, so it never kills itself.
	cmd.Env = []string{guardEnv + "=1"}
	cmd.Stdin = r
	// Its own group, so terminal signals to the supervisor's group miss it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return fmt.Errorf("start job guard: %w", err)
	}
	r.Close()
	var replay strings.Builder
	for e := range g.entries {
		replay.WriteString(e.line('+'))
	}
	if _, err := w.WriteString(replay.String()); err != nil {
		w.Close()
		return fmt.Errorf("start job guard: %w", err)
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
