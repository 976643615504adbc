package supervise

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpuwarden/gpuwarden"
)

// The guard ends a job when its supervisor dies, but not when the guard
// dies with it: an OOM kill of the supervisor's whole cgroup, a service
// manager or init killing both. The job record is for that case. Written
// around each Start, it names the running job, so the next supervisor for
// the same checkpoint root can tell whether the last one is still running
// and, if it is not, end what it left behind before starting anew.

// jobRecord is the job record's JSON.
type jobRecord struct {
	// SupervisorPid and SupervisorStart (clock ticks since boot, field 22
	// of /proc/PID/stat) name the supervisor even after its pid is reused.
	SupervisorPid   int    `json:"supervisor_pid"`
	SupervisorStart uint64 `json:"supervisor_start"`
	// BootID tells a record from before a reboot, whose processes are all gone.
	BootID string `json:"boot_id,omitempty"`
	JobID  string `json:"job_id"`
	// JobStart is the leader's start: no process of the job is older.
	JobStart uint64 `json:"job_start,omitempty"`
	Pgid     int    `json:"pgid"`
	Cgroup   string `json:"cgroup,omitempty"`
}

// bootID returns this boot's random ID, "" where the kernel has none.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// WriteJobRecord writes, atomically, the record of p run by this process
// to path, so that a later run can end the job should this process and its
// guard both be killed.
func WriteJobRecord(path string, p *Proc) error {
	self, ok := readProcStat(os.Getpid())
	if !ok {
		return errors.New("write job record: cannot read own /proc/self/stat")
	}
	rec := jobRecord{
		SupervisorPid:   os.Getpid(),
		SupervisorStart: self.start,
		BootID:          bootID(),
		JobID:           p.jobID,
		JobStart:        p.since,
		Pgid:            p.pid,
		Cgroup:          p.cgroup,
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("write job record: %w", err)
	}
	if err := writeFileAtomic(path, append(b, '\n')); err != nil {
		return fmt.Errorf("write job record: %w", err)
	}
	return nil
}

// writeFileAtomic writes b to a temporary file beside path and renames it
// over path, so a reader sees the old record or the new one, never a part.
func writeFileAtomic(path string, b []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // the rename itself survives a crash
		_ = d.Close()
	}
	return nil
}

// RemoveJobRecord removes the record after a clean end of the job; a
// record that is not there is not an error.
func RemoveJobRecord(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove job record: %w", err)
	}
	return nil
}

// EndLeftovers ends the job a killed supervisor left behind, from its
// record at path, and returns the pids it killed; no record means nothing
// to do. A supervisor counts as dead when its pid is gone or now names a
// process with another start time (pid reuse). What is killed is the job
// cgroup if it still exists (then removed) and every process carrying the
// job ID, which covers the members of the recorded process group that
// carry it; other members of that group are spared, because the number may
// have been reused by an unrelated group. When the processes are gone, the
// record is removed; a process that outlives the bound (uninterruptible
// sleep) is reported in the error and the record stays for the next try.
// A record of this very process (an earlier attempt) is ended like a dead
// one's. When the recorded supervisor is alive and is not this process, nothing
// is killed and the error has code gpuwarden.EConflict.
func EndLeftovers(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("end leftovers: %w", err)
	}
	var rec jobRecord
	if err := json.Unmarshal(b, &rec); err != nil || !validJobID(rec.JobID) || (rec.Cgroup != "" && filepath.Base(rec.Cgroup) != cgroupPrefix+rec.JobID) {
		e := gpuwarden.Errorf(gpuwarden.EInvalid, "end leftovers: job record %s is not one gpuwarden wrote", path).
			WithHint("check that no process of the last job still runs, then remove %s", path)
		e.Err = err
		return nil, e
	}
	if boot := bootID(); rec.BootID != "" && boot != "" && boot != rec.BootID {
		// Written before a reboot: nothing of that job can still run.
		return nil, RemoveJobRecord(path)
	}
	if st, ok := readProcStat(rec.SupervisorPid); ok && st.state != 'Z' && st.start == rec.SupervisorStart && rec.SupervisorPid != os.Getpid() {
		return nil, gpuwarden.Errorf(gpuwarden.EConflict, "another supervisor (pid %d) runs this job", rec.SupervisorPid).
			WithHint("stop that supervisor first, or give this run another checkpoint directory")
	}
	j := &job{ids: map[string]bool{rec.JobID: true}, since: rec.JobStart}
	if rec.Cgroup != "" && isJobCgroup(rec.Cgroup) {
		if _, err := os.Stat(rec.Cgroup); err == nil {
			j.cgroups = []string{rec.Cgroup}
		}
	}
	killed, gone := j.end(groupGone)
	if !gone {
		return killed, fmt.Errorf("end leftovers of job %s: processes still running after %s", rec.JobID, groupGone)
	}
	for _, cg := range j.cgroups {
		if err := removeCgroup(cg); err != nil {
			return killed, fmt.Errorf("end leftovers: %w", err)
		}
	}
	return killed, RemoveJobRecord(path)
}
