package supervise

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A job runs in a cgroup v2 of its own where the machine allows it, because
// a cgroup is the one thing a process cannot leave on its own: setsid
// leaves the process group, a scrubbed environment loses the job ID, but
// only a write to cgroup.procs, which a job does not do, moves it out.
// Machines differ (cgroup v2 at /sys/fs/cgroup, a hybrid with it at
// /sys/fs/cgroup/unified, v1 only, a container's read-only cgroupfs, a
// user without delegation), so every step may fail, and the job then runs
// with its process group and job ID only.

// cgroupPrefix starts the name of every job cgroup, so that nothing but a
// cgroup this package made is ever killed or removed by path.
const cgroupPrefix = "gpuwarden-job-"

// cgroupRemoveWait bounds the retries of removing an emptied cgroup, which
// the kernel refuses while the last exiting task is being released.
const cgroupRemoveWait = time.Second

// cgroup2Dir returns the directory of this process's cgroup v2: the cgroup2
// mount from /proc/self/mountinfo joined with the "0::" line of
// /proc/self/cgroup.
func cgroup2Dir() (string, error) {
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("read own cgroup: %w", err)
	}
	own, err := parseOwnCgroup(cg)
	if err != nil {
		return "", err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	return cgroup2Path(f, own)
}

// parseOwnCgroup returns the path of the "0::" line of /proc/PID/cgroup.
func parseOwnCgroup(b []byte) (string, error) {
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, " (deleted)") {
				return "", fmt.Errorf("own cgroup v2 is %q", p)
			}
			return p, nil
		}
	}
	return "", errors.New("no cgroup v2 (no 0:: line in /proc/self/cgroup)")
}

// cgroup2Path finds the cgroup2 mount that shows cgroup own and returns
// the directory own has there. A mount of a subtree (its root field not
// "/") shows only the cgroups under that root.
func cgroup2Path(mountinfo io.Reader, own string) (string, error) {
	sc := bufio.NewScanner(mountinfo)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	mounted := false
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		if fs := strings.Fields(post); len(fs) == 0 || fs[0] != "cgroup2" {
			continue
		}
		f := strings.Fields(pre)
		if len(f) < 6 {
			continue
		}
		mounted = true
		root, point := unescapeMount(f[3]), unescapeMount(f[4])
		rel := own
		if root != "/" {
			if own != root && !strings.HasPrefix(own, root+"/") {
				continue
			}
			rel = strings.TrimPrefix(own, root)
		}
		return filepath.Join(point, rel), nil
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read mounts: %w", err)
	}
	if !mounted {
		return "", errors.New("no cgroup2 mount")
	}
	return "", fmt.Errorf("own cgroup %s is under no cgroup2 mount", own)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// createJobCgroup makes the cgroup gpuwarden-job-ID under this process's
// own and returns its directory.
func createJobCgroup(id string) (string, error) {
	parent, err := cgroup2Dir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(parent, cgroupPrefix+id)
	if strings.ContainsRune(dir, '\n') {
		// The guard's protocol is one path a line.
		return "", fmt.Errorf("cgroup path %q has a newline", dir)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("create cgroup: %w", err)
	}
	return dir, nil
}

// isJobCgroup reports whether dir is a path this package would have made,
// so that a path read from a record or a pipe cannot point a kill elsewhere.
func isJobCgroup(dir string) bool {
	return filepath.IsAbs(dir) && filepath.Clean(dir) == dir &&
		strings.HasPrefix(filepath.Base(dir), cgroupPrefix) && !strings.ContainsRune(dir, '\n')
}

// cgroupMove moves pid into the cgroup, for a start that could not be
// made directly inside it.
func cgroupMove(dir string, pid int) error {
	return writeCgroupFile(dir, "cgroup.procs", strconv.Itoa(pid))
}

func writeCgroupFile(dir, name, value string) error {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// cgroupProcs lists the processes in the cgroup itself (not its children).
func cgroupProcs(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// cgroupTreeProcs lists the processes in the cgroup and the cgroups below
// it, where a supervisor run as the job put its own jobs.
func cgroupTreeProcs(dir string) []int {
	out, _ := cgroupProcs(dir)
	des, err := os.ReadDir(dir)
	if err != nil {
		return out
	}
	for _, d := range des {
		if d.IsDir() {
			out = append(out, cgroupTreeProcs(filepath.Join(dir, d.Name()))...)
		}
	}
	return out
}

// cgroupKill SIGKILLs every process in the cgroup and its children with
// one write to cgroup.kill (Linux 5.14), which also catches a process
// forking at that moment. Without cgroup.kill it fails, and the caller
// kills the members one by one.
func cgroupKill(dir string) error {
	if err := writeCgroupFile(dir, "cgroup.kill", "1"); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			if _, serr := os.Stat(dir); serr != nil {
				return nil // the cgroup itself is gone: nothing to kill
			}
		}
		return fmt.Errorf("kill cgroup %s: %w", dir, err)
	}
	return nil
}

// cgroupPopulated reports whether a process is left in the cgroup or below.
// cgroup.events says so for the whole subtree; without it, cgroup.procs of
// the cgroup itself has to do. A cgroup that is gone holds nothing.
func cgroupPopulated(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err == nil {
		for _, line := range bytes.Split(b, []byte("\n")) {
			if v, ok := bytes.CutPrefix(line, []byte("populated ")); ok {
				return string(bytes.TrimSpace(v)) != "0"
			}
		}
	}
	pids, err := cgroupProcs(dir)
	return err == nil && len(pids) > 0
}

// removeCgroup removes the emptied cgroup and any cgroups a job made below
// it (a nested supervisor's), deepest first; a cgroup that is already gone
// is not an error. The kernel briefly refuses (EBUSY) while the last task
// is released, so it retries for a bounded time.
func removeCgroup(dir string) error {
	deadline := time.Now().Add(cgroupRemoveWait)
	for {
		err := removeCgroupTree(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func removeCgroupTree(dir string) error {
	des, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, d := range des {
		if d.IsDir() {
			if err := removeCgroupTree(filepath.Join(dir, d.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return unix.Rmdir(dir)
}
