package supervise

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// kill -9 of the supervisor and its guard together (an OOM kill of their
// cgroup): the job's leader dies by Pdeathsig, its setsid grandchild
// lives on, and the next run's EndLeftovers ends it from the record.
func TestEndLeftoversAfterSupervisorAndGuardKilled(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		kv   []string
	}{
		{"cgroup", nil},
		{"group and job id only", []string{"H_NOCGROUP=1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			f := func(name string) string { return filepath.Join(dir, name) }
			record := f(".gpuwarden-job.json")
			env, tag := helperEnvFor(t, "setsid-supervisor", append([]string{"H_JOBPID=" + f("job.pid"),
				"H_SETSID_PIDFILE=" + f("gc.pid"), "H_GUARDPID=" + f("guard.pid"), "H_RECORD=" + record}, tt.kv...)...)
			sup := exec.Command(os.Args[0])
			sup.Env = append(os.Environ(), env...)
			if err := sup.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { killAndWait(sup) })
			job := readPid(t, f("job.pid"), 10*time.Second)
			gc := readPid(t, f("gc.pid"), 10*time.Second)
			guard := readPid(t, f("guard.pid"), time.Second)
			var rec jobRecord
			if b, err := os.ReadFile(record); err != nil {
				t.Fatal(err)
			} else if err := json.Unmarshal(b, &rec); err != nil {
				t.Fatal(err)
			}
			if rec.SupervisorPid != sup.Process.Pid || rec.Pgid != job || !validJobID(rec.JobID) {
				t.Errorf("record = %+v; want supervisor %d, pgid %d and a job id", rec, sup.Process.Pid, job)
			}
			// While the supervisor runs, the next run must not touch its job.
			if _, err := EndLeftovers(record); gpuwarden.ErrorCodeOf(err) != gpuwarden.EConflict {
				t.Errorf("EndLeftovers with the supervisor alive: %v, want a conflict", err)
			}
			_ = syscall.Kill(guard, syscall.SIGKILL)
			if !waitDead(guard, 5*time.Second) {
				t.Fatalf("guard %d survived SIGKILL", guard)
			}
			killAndWait(sup)
			if !waitDead(job, 5*time.Second) {
				t.Errorf("job leader %d outlived its supervisor (Pdeathsig)", job)
			}
			if !alive(gc) {
				t.Fatalf("grandchild %d died with the supervisor and guard: nothing left to test", gc)
			}
			killed, err := EndLeftovers(record)
			if err != nil {
				t.Fatalf("EndLeftovers: %v", err)
			}
			if !slices.Contains(killed, gc) {
				t.Errorf("killed = %v, want the grandchild %d among them", killed, gc)
			}
			if !waitDead(gc, time.Second) {
				t.Errorf("grandchild %d alive after EndLeftovers", gc)
				_ = syscall.Kill(gc, syscall.SIGKILL)
			}
			if _, err := os.Stat(record); !os.IsNotExist(err) {
				t.Errorf("record left behind (stat: %v)", err)
			}
			if rec.Cgroup != "" {
				if _, err := os.Stat(rec.Cgroup); !os.IsNotExist(err) {
					t.Errorf("cgroup %s left behind (stat: %v)", rec.Cgroup, err)
				}
			}
			assertNoLeftovers(t, tag)
			if killed, err := EndLeftovers(record); err != nil || len(killed) != 0 {
				t.Errorf("EndLeftovers without a record = %v, %v; want nothing", killed, err)
			}
		})
	}
}

// EndLeftovers kills only what is provably the job's.
func TestEndLeftoversRecords(t *testing.T) {
	t.Parallel()
	sleep := sleepPath(t)
	startOf := func(t *testing.T, pid int) uint64 {
		st, ok := readProcStat(pid)
		if !ok {
			t.Fatalf("no stat for %d", pid)
		}
		return st.start
	}
	// goneProcess is a pid that no longer runs.
	goneProcess := func(t *testing.T) int {
		c := exec.Command(sleep, "0")
		if err := c.Run(); err != nil {
			t.Fatal(err)
		}
		return c.Process.Pid
	}
	tests := []struct {
		name string
		// setup starts what the case needs and returns the record (nil: none
		// is written, or raw bytes in bad) and the pids that must survive
		// and that must die.
		setup      func(t *testing.T, id string) (rec *jobRecord, survive, die []int)
		bad        string
		wantCode   gpuwarden.ErrorCode
		wantRecord bool
	}{
		{"no record", func(t *testing.T, id string) (*jobRecord, []int, []int) {
			return nil, nil, nil
		}, "", "", false},
		{"supervisor alive", func(t *testing.T, id string) (*jobRecord, []int, []int) {
			// The "supervisor" and its job: a process carrying the ID.
			c := startDirect(t, []string{sleep, "3600"}, []string{EnvJobID + "=" + id}, nil)
			pid := c.Process.Pid
			return &jobRecord{SupervisorPid: pid, SupervisorStart: startOf(t, pid), JobID: id, Pgid: pid}, []int{pid}, nil
		}, "", gpuwarden.EConflict, true},
		{"supervisor dead, job process left", func(t *testing.T, id string) (*jobRecord, []int, []int) {
			c := startDirect(t, []string{sleep, "3600"}, []string{EnvJobID + "=" + id}, nil)
			return &jobRecord{SupervisorPid: goneProcess(t), SupervisorStart: 1, JobID: id, Pgid: c.Process.Pid}, nil, []int{c.Process.Pid}
		}, "", "", false},
		{"supervisor pid and pgid reused by unrelated processes", func(t *testing.T, id string) (*jobRecord, []int, []int) {
			// An unrelated group leader now has both numbers; it carries
			// no job ID and started at another time than the supervisor.
			c := startDirect(t, []string{sleep, "3600"}, nil, &syscall.SysProcAttr{Setpgid: true})
			pid := c.Process.Pid
			return &jobRecord{SupervisorPid: pid, SupervisorStart: startOf(t, pid) + 1, JobID: id, Pgid: pid}, []int{pid}, nil
		}, "", "", false},
		{"record from before a reboot", func(t *testing.T, id string) (*jobRecord, []int, []int) {
			c := startDirect(t, []string{sleep, "3600"}, []string{EnvJobID + "=" + id}, nil)
			return &jobRecord{SupervisorPid: goneProcess(t), BootID: "another-boot", JobID: id, Pgid: c.Process.Pid}, []int{c.Process.Pid}, nil
		}, "", "", false},
		{"record with an empty job id", func(t *testing.T, id string) (*jobRecord, []int, []int) {
			return nil, nil, nil
		}, `{"supervisor_pid":1,"job_id":"","pgid":5}`, gpuwarden.EInvalid, true},
		{"record with a foreign cgroup", func(t *testing.T, id string) (*jobRecord, []int, []int) {
			return nil, nil, nil
		}, `{"supervisor_pid":1,"job_id":"0123456789abcdef0123456789abcdef","cgroup":"/sys/fs/cgroup/system.slice"}`, gpuwarden.EInvalid, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id, err := newJobID()
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), ".gpuwarden-job.json")
			rec, survive, die := tt.setup(t, id)
			switch {
			case rec != nil:
				b, _ := json.Marshal(rec)
				if err := os.WriteFile(path, b, 0o644); err != nil {
					t.Fatal(err)
				}
			case tt.bad != "":
				if err := os.WriteFile(path, []byte(tt.bad), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			killed, err := EndLeftovers(path)
			if got := gpuwarden.ErrorCodeOf(err); got != tt.wantCode {
				t.Errorf("EndLeftovers error = %v (code %q), want code %q", err, got, tt.wantCode)
			}
			slices.Sort(die)
			if !slices.Equal(killed, die) {
				t.Errorf("killed = %v, want %v", killed, die)
			}
			for _, pid := range survive {
				if !alive(pid) {
					t.Errorf("process %d was killed; it is not the job's", pid)
				}
			}
			for _, pid := range die {
				if !waitDead(pid, time.Second) {
					t.Errorf("process %d of the job survived", pid)
				}
			}
			_, serr := os.Stat(path)
			if got := serr == nil; got != tt.wantRecord {
				t.Errorf("record exists = %v, want %v", got, tt.wantRecord)
			}
		})
	}
}

func TestWriteJobRecord(t *testing.T) {
	t.Parallel()
	p, _, _ := startHelper(t, t.Context(), "sleeper")
	defer func() { _ = p.KillGroup(syscall.SIGKILL); p.Wait() }()
	path := filepath.Join(t.TempDir(), ".gpuwarden-job.json")
	if err := WriteJobRecord(path, p); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got jobRecord
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	self, _ := readProcStat(os.Getpid())
	want := jobRecord{SupervisorPid: os.Getpid(), SupervisorStart: self.start, BootID: bootID(),
		JobID: p.JobID(), JobStart: p.since, Pgid: p.Pid(), Cgroup: p.Cgroup()}
	if got != want {
		t.Errorf("record = %+v, want %+v", got, want)
	}
	// This very process wrote it: that is no conflict, and what is left
	// of the job (here, all of it) is ended.
	killed, err := EndLeftovers(path)
	if err != nil || !slices.Contains(killed, p.Pid()) {
		t.Errorf("EndLeftovers of own record = %v, %v; want the job %d killed", killed, err, p.Pid())
	}
	if ex := p.Wait(); ex.Signal != syscall.SIGKILL {
		t.Errorf("exit = %v, want killed by SIGKILL", ex)
	}
	if err := RemoveJobRecord(path); err != nil {
		t.Errorf("RemoveJobRecord of a removed record: %v", err)
	}
}
