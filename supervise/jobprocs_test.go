package supervise

import (
	"slices"
	"syscall"
	"testing"
)

// A process killed a moment ago gives up the environment that carried its
// job ID before it is a zombie, so the end of a job once took it for gone
// while it still ran its exit (TestSetsidGrandchildEndsWithJob, under load
// in CI). One seen alive as the job's stays a member, by pid and start
// time, so that a new process on a reused pid is never taken for it.
func TestSeenProcessStaysAMember(t *testing.T) {
	// No job ID in its environment and its own session: only seen can
	// make it the job's, as for a dying process whose environment is gone.
	c := startDirect(t, []string{sleepPath(t), "3600"}, nil, &syscall.SysProcAttr{Setsid: true})
	pid := c.Process.Pid
	st, ok := readProcStat(pid)
	if !ok {
		t.Fatalf("no /proc/%d/stat", pid)
	}
	tests := []struct {
		name string
		seen map[int]uint64
		want bool
	}{
		{"never seen", nil, false},
		{"seen alive", map[int]uint64{pid: st.start}, true},
		{"the pid seen, started at another time", map[int]uint64{pid: st.start + 1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := &job{ids: map[string]bool{"job-that-nothing-carries": true}, seen: tt.seen}
			var pids []int
			for _, m := range j.members() {
				pids = append(pids, m.pid)
			}
			if got := slices.Contains(pids, pid); got != tt.want {
				t.Errorf("members() = %v; holds %d: %v, want %v", pids, pid, got, tt.want)
			}
		})
	}
	killAndWait(c)
	j := &job{ids: map[string]bool{"job-that-nothing-carries": true}, seen: map[int]uint64{pid: st.start}}
	for _, m := range j.members() {
		if m.pid == pid {
			t.Errorf("members() holds %d after it was reaped", pid)
		}
	}
}
