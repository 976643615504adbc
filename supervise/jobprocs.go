package supervise

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// EnvJobID carries a job's random ID in the environment of each of its
// processes, so that one which left the job's process group (setsid, a
// daemonizing worker) and its cgroup can still be found in /proc and ended
// with the job. A process that scrubs its environment loses it; the cgroup
// still holds such a process where the machine allows one.
const EnvJobID = "GPUWARDEN_JOB_ID"

// jobIDLen is the length of a job ID: 16 random bytes in hex, so that no
// other job, past or present, carries the same one.
const jobIDLen = 32

// newJobID returns a fresh random job ID.
func newJobID() (string, error) {
	var b [jobIDLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// validJobID reports whether id looks like one newJobID made; anything else
// (empty above all, which would match every process with an empty value)
// must never select processes to kill.
func validJobID(id string) bool {
	if len(id) != jobIDLen {
		return false
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// withJobID returns env, or this process's environment when env is nil, with
// EnvJobID set to id; an inherited one (a supervisor run inside another
// job) is replaced, so the job is told apart from its parent's.
func withJobID(env []string, id string) []string {
	if env == nil {
		env = os.Environ()
	}
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, EnvJobID+"=") {
			out = append(out, kv)
		}
	}
	return append(out, EnvJobID+"="+id)
}

// procInfo is what /proc/PID/stat says about a process.
type procInfo struct {
	state byte
	ppid  int
	pgrp  int
	// start is the start time in clock ticks since boot (field 22): with
	// the pid, it names one process even across pid reuse.
	start uint64
}

// readProcStat reads /proc/PID/stat, after the command name, which may
// itself hold spaces and parentheses.
func readProcStat(pid int) (procInfo, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	return parseProcStat(string(b))
}

func parseProcStat(s string) (procInfo, bool) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procInfo{}, false
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state), so field 22 (starttime) is f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return procInfo{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	start, err3 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return procInfo{}, false
	}
	return procInfo{state: f[0][0], ppid: ppid, pgrp: pgrp, start: start}, true
}

// environTimeout bounds one read of /proc/PID/environ, which waits for the
// process's memory-map lock: a process stuck in a driver call may hold it
// for good, and a job's end must not hang on it, as ps does.
const environTimeout = time.Second

// readEnviron reads the environment pid started with; ok is false when it
// cannot be read in time. A read that timed out finishes in the background.
func readEnviron(pid int) (b []byte, ok bool) {
	type result struct {
		b   []byte
		err error
	}
	ch := make(chan result, 1)
	go func() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		ch <- result{b, err}
	}()
	t := time.NewTimer(environTimeout)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.b, r.err == nil
	case <-t.C:
		return nil, false
	}
}

// procCarries reports whether pid's environment holds EnvJobID with one of
// ids. It reads the environment the process started with, which is what its
// children inherited too unless they were given another.
func procCarries(pid int, ids map[string]bool) bool {
	b, ok := readEnviron(pid)
	if !ok {
		return false
	}
	prefix := []byte(EnvJobID + "=")
	for len(b) > 0 {
		kv := b
		if i := bytes.IndexByte(b, 0); i >= 0 {
			kv, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if bytes.HasPrefix(kv, prefix) && ids[string(kv[len(prefix):])] {
			return true
		}
	}
	return false
}

// listPids returns the numeric entries of /proc.
func listPids() []int {
	des, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]int, 0, len(des))
	for _, d := range des {
		if pid, err := strconv.Atoi(d.Name()); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out
}

// signalSame sends sig to pid only while pid still names the process that
// started at start, through a pidfd so that a pid reused between the look
// and the signal is never hit. sent is false when that process is gone.
func signalSame(pid int, start uint64, sig syscall.Signal) (sent bool, err error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return false, nil
		}
		// No pidfds (a kernel before 5.3, a seccomp filter): check, then
		// kill, accepting the short window in which the pid could be reused.
		if st, ok := readProcStat(pid); !ok || st.start != start {
			return false, nil
		}
		if err := unix.Kill(pid, sig); err != nil {
			if errors.Is(err, unix.ESRCH) {
				return false, nil
			}
			return false, err
		}
		return true, nil
	}
	defer unix.Close(fd)
	// The pidfd pins the process it was opened for; /proc/PID now shows
	// that process unless it already died, and then the signal fails.
	if st, ok := readProcStat(pid); !ok || st.start != start || st.state == 'Z' {
		return false, nil
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// job names what belongs to a job (for the guard, to all its jobs): process
// groups, cgroups and the processes carrying a job ID. The end of a job,
// the guard and the next run's EndLeftovers all find processes through it,
// so that they agree on what is the job's.
type job struct {
	groups  []int
	cgroups []string
	ids     map[string]bool
	// since is the earliest start (clock ticks) a process carrying an ID
	// can have: environments of older processes are not read, which keeps
	// a scan cheap and away from unrelated processes.
	since uint64
	// seen, when not nil, is every process found alive, pid to start, so
	// that one that became this process's zombie (it is the subreaper) can
	// be reaped. Only the end of a job that this process started sets it:
	// anywhere else, a reap could take a running Proc's leader's status.
	seen map[int]uint64
}

// jobMember is a live process of a job.
type jobMember struct {
	pid   int
	start uint64
	// inGroup: the process is in one of the job's groups, which a kill of
	// the group reaches without a signal of its own.
	inGroup bool
	// inCgroup: the process is in one of the job's cgroups or below.
	inCgroup bool
}

func (j *job) hasGroup(pgrp int) bool {
	for _, g := range j.groups {
		if g == pgrp {
			return true
		}
	}
	return false
}

// members lists the job's live processes, skipping this one, and reaps
// those that died as this process's children.
func (j *job) members() []jobMember {
	self := os.Getpid()
	found := map[int]*jobMember{}
	add := func(pid int, st procInfo) *jobMember {
		m := found[pid]
		if m == nil {
			m = &jobMember{pid: pid, start: st.start, inGroup: j.hasGroup(st.pgrp)}
			found[pid] = m
		}
		if j.seen != nil {
			j.seen[pid] = st.start
		}
		return m
	}
	for _, cg := range j.cgroups {
		for _, pid := range cgroupTreeProcs(cg) {
			if st, ok := readProcStat(pid); ok && st.state != 'Z' && pid != self {
				add(pid, st).inCgroup = true
			}
		}
	}
	for _, pid := range listPids() {
		if pid == self || found[pid] != nil {
			continue
		}
		st, ok := readProcStat(pid)
		if !ok {
			continue
		}
		if st.state == 'Z' {
			j.reap(pid, st, self)
			continue
		}
		if j.hasGroup(st.pgrp) || (len(j.ids) > 0 && st.start >= j.since && procCarries(pid, j.ids)) || j.wasSeen(pid, st) {
			add(pid, st)
		}
	}
	out := make([]jobMember, 0, len(found))
	for _, m := range found {
		out = append(out, *m)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].pid < out[b].pid })
	return out
}

// wasSeen reports whether a process was found alive as the job's before.
// A process killed a moment ago gives up its memory, and with it the
// environment that named its job, before it is a zombie: it stays the
// job's until then, so that the job's end does not come while one of its
// processes is still exiting (files open, not yet reaped).
func (j *job) wasSeen(pid int, st procInfo) bool {
	start, ok := j.seen[pid]
	return ok && start == st.start
}

// reap collects a zombie that was seen alive as a job process and is this
// process's child: as the subreaper this process inherits the job's
// orphans, and one outside the leader's group is waited for nowhere else.
// The start time guards against taking another child's status.
func (j *job) reap(pid int, st procInfo, self int) {
	if st.ppid != self || j.seen == nil {
		return
	}
	if start, ok := j.seen[pid]; !ok || start != st.start {
		return
	}
	var ws syscall.WaitStatus
	if got, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); got == pid {
		delete(j.seen, pid)
	}
}

// signal sends sig to every live process of the job, once each: a group by
// one kill of the group, a cgroup by cgroup.kill for SIGKILL, the rest one
// by one. It returns the processes it found alive, which for SIGKILL are
// the ones it killed.
func (j *job) signal(sig syscall.Signal) ([]int, error) {
	var errs []error
	for _, g := range j.groups {
		if err := syscall.Kill(-g, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, err)
		}
	}
	members := j.members()
	cgroupDone := sig == syscall.SIGKILL && len(j.cgroups) > 0
	if cgroupDone {
		for _, cg := range j.cgroups {
			if err := cgroupKill(cg); err != nil {
				cgroupDone = false
			}
		}
	}
	out := make([]int, 0, len(members))
	for _, m := range members {
		out = append(out, m.pid)
		if m.inGroup || (m.inCgroup && cgroupDone) {
			continue
		}
		if _, err := signalSame(m.pid, m.start, sig); err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// populated reports whether any of the job's cgroups still holds a process.
func (j *job) populated() bool {
	for _, cg := range j.cgroups {
		if cgroupPopulated(cg) {
			return true
		}
	}
	return false
}

// end kills the job's processes in rounds, because one may fork between a
// look and a kill, until none is left or the bound passes; it returns every
// process it killed and whether the job is gone.
func (j *job) end(bound time.Duration) (killed []int, gone bool) {
	hit := map[int]bool{}
	deadline := time.Now().Add(bound)
	for {
		pids, _ := j.signal(syscall.SIGKILL)
		for _, pid := range pids {
			if !hit[pid] {
				hit[pid] = true
				killed = append(killed, pid)
			}
		}
		if len(pids) == 0 && !j.populated() {
			// One more look reaps what died since the last one.
			j.members()
			sort.Ints(killed)
			return killed, true
		}
		if time.Now().After(deadline) {
			sort.Ints(killed)
			return killed, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}
