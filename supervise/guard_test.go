package supervise

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestParseGuardLine(t *testing.T) {
	id := "0123456789abcdef0123456789abcdef"
	cg := "/sys/fs/cgroup/unified/gpuwarden-job-" + id
	tests := []struct {
		line    string
		want    guardEntry
		wantAdd bool
		wantOK  bool
	}{
		{"+123", guardEntry{guardGroup, "123"}, true, true},
		{"-123", guardEntry{guardGroup, "123"}, false, true},
		{"+1", guardEntry{}, false, false}, // init's group, never
		{"+-5", guardEntry{}, false, false},
		{"+12x", guardEntry{}, false, false},
		{"c+" + cg, guardEntry{guardCgroup, cg}, true, true},
		{"c-" + cg, guardEntry{guardCgroup, cg}, false, true},
		{"c+/sys/fs/cgroup/system.slice", guardEntry{}, false, false},
		{"j+" + id, guardEntry{guardJob, id}, true, true},
		{"j-" + id, guardEntry{guardJob, id}, false, true},
		{"j+", guardEntry{}, false, false},
		{"j+short", guardEntry{}, false, false},
		{"x+1", guardEntry{}, false, false},
		{"", guardEntry{}, false, false},
	}
	for _, tt := range tests {
		got, add, ok := parseGuardLine(tt.line)
		if ok != tt.wantOK || (ok && (got != tt.want || add != tt.wantAdd)) {
			t.Errorf("parseGuardLine(%q) = %+v, %v, %v; want %+v, %v, %v", tt.line, got, add, ok, tt.want, tt.wantAdd, tt.wantOK)
		}
		if ok {
			op := byte('-')
			if add {
				op = '+'
			}
			if l := got.line(op); l != tt.line+"\n" {
				t.Errorf("%+v writes %q, want %q", got, l, tt.line+"\n")
			}
		}
	}
}

// kill -9 of the supervisor: no code of it runs, yet its guard ends the
// job's grandchild that left the job's group and session (setsid), with
// and without a cgroup, and also when the guard is a fresh one that
// learned the job by replay after the first was killed.
func TestSupervisorKilledTakesSetsidGrandchild(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		kv      []string
		respawn bool
	}{
		{"cgroup", nil, false},
		{"group and job id only", []string{"H_NOCGROUP=1"}, false},
		{"respawned guard", nil, true},
		{"respawned guard, no cgroup", []string{"H_NOCGROUP=1"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			f := func(name string) string { return filepath.Join(dir, name) }
			kv := append([]string{"H_JOBPID=" + f("job.pid"), "H_SETSID_PIDFILE=" + f("gc.pid"), "H_GUARDPID=" + f("guard.pid"),
				"H_CGROUPFILE=" + f("cgroup")}, tt.kv...)
			if tt.respawn {
				kv = append(kv, "H_RESPAWN_GUARD=1", "H_JOB2PID="+f("job2.pid"))
			}
			env, tag := helperEnvFor(t, "setsid-supervisor", kv...)
			sup := exec.Command(os.Args[0])
			sup.Env = append(os.Environ(), env...)
			if err := sup.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { killAndWait(sup) })
			job := readPid(t, f("job.pid"), 10*time.Second)
			gc := readPid(t, f("gc.pid"), 10*time.Second)
			guard := readPid(t, f("guard.pid"), time.Second)
			job2 := 0
			if tt.respawn {
				job2 = readPid(t, f("job2.pid"), 10*time.Second)
			}
			cg, _ := os.ReadFile(f("cgroup"))
			if !alive(job) || !alive(gc) {
				t.Fatalf("job %d or grandchild %d not running", job, gc)
			}
			killAndWait(sup)
			for _, pid := range []int{job, gc, job2} {
				if pid != 0 && !waitDead(pid, 5*time.Second) {
					t.Errorf("process %d alive 5 s after its supervisor was killed", pid)
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			if !waitDead(guard, 5*time.Second) {
				t.Errorf("guard %d still running after its supervisor died", guard)
			}
			if len(cg) > 0 && !cgroupGone(string(cg), 5*time.Second) {
				t.Errorf("cgroup %s left behind", cg)
			}
			assertNoLeftovers(t, tag)
		})
	}
}
