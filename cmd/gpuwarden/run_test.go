package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden/preempt/preempttest"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// gwEnv runs the real binary with extra environment variables.
func gwEnv(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{out.String(), errb.String(), code}
}

// reference is the trainer's final state without interruptions.
func reference(t *testing.T, steps int) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "final.json")
	cmd := exec.Command(trainer, "--steps", strconv.Itoa(steps), "--step-time", "1ms", "--out", out)
	cmd.Env = append(os.Environ(), "GPUWARDEN_CHECKPOINT_DIR="+t.TempDir())
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("trainer: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type runReport struct {
	Result   string         `json:"result"`
	Why      string         `json:"why"`
	Restarts map[string]int `json:"restarts"`
	Attempts []struct {
		Class       string `json:"class"`
		ResumedFrom string `json:"resumed_from"`
	} `json:"attempts"`
	Checkpoints []struct {
		Name string `json:"name"`
		Step int64  `json:"step"`
	} `json:"checkpoints"`
	Notices []struct {
		Action       string  `json:"action"`
		Signal       string  `json:"signal"`
		GraceSeconds float64 `json:"grace_s"`
		Checkpoint   string  `json:"checkpoint"`
		Detail       string  `json:"detail"`
	} `json:"notices"`
	Sync *struct {
		Uploaded      int  `json:"uploaded"`
		Failed        int  `json:"failed"`
		Durable       bool `json:"durable"`
		NewestDurable *struct {
			Name string `json:"name"`
			Step int64  `json:"step"`
			URL  string `json:"url"`
		} `json:"newest_durable"`
		Restored string `json:"restored"`
	} `json:"sync"`
	ExitCode int `json:"exit_code"`
}

func decodeReport(t *testing.T, stdout string) runReport {
	t.Helper()
	var r runReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("report: %v\n%s", err, stdout)
	}
	return r
}

// TestRunSurvivesTwoPreemptions: the example job is preempted on two boxes
// through a loopback AWS metadata service; each preempted run checkpoints,
// does not restart on its doomed box, exits 75 once the deadline passed, and
// the next box resumes from the store. The third box ends exactly where an
// uninterrupted run ends.
func TestRunSurvivesTwoPreemptions(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	final := filepath.Join(t.TempDir(), "final.json")
	for box := 1; box <= 3; box++ {
		dir := t.TempDir()
		aws := preempttest.NewAWS()
		defer aws.Close()
		wait, _, _ := startRunWatched(t, dir, nil, "run", "--data-dir", filepath.Join(dir, "data"), "--checkpoint-dir", filepath.Join(dir, "ckpt"),
			"--sync", store, "--cloud", "aws", "--aws-metadata", aws.URL, "--grace", "5s", "-o", "json", "--",
			trainer, "--steps", "150", "--every", "20", "--step-time", "20ms", "--out", final)
		if box < 3 {
			time.Sleep(900 * time.Millisecond)
			aws.Interrupt("terminate", time.Now().Add(3*time.Second).Truncate(time.Second))
		}
		r := wait(30 * time.Second)
		rep := decodeReport(t, r.stdout)
		switch {
		// One stop, not a loop; the checkpoint answering it may be the
		// periodic one that was being written as the signal came.
		case box < 3 && (r.code != 75 || rep.Result != "preempted" || len(rep.Attempts) != 1 || strings.Count(r.stderr, "checkpointing and stopping the job") != 1 || rep.Notices[0].Checkpoint == ""):
			t.Fatalf("box %d: exit %d result %s attempts %d, want 75, preempted, one attempt and one checkpoint signal\n%s", box, r.code, rep.Result, len(rep.Attempts), r.stderr)
		case box == 3 && (r.code != 0 || rep.Result != "ok"):
			t.Fatalf("box 3: exit %d result %s, want ok\n%s", r.code, rep.Result, r.stderr)
		case box > 1 && (rep.Sync == nil || rep.Sync.Restored == "" || rep.Attempts[0].ResumedFrom == ""):
			t.Fatalf("box %d did not resume from the store: %+v\n%s", box, rep.Sync, r.stderr)
		}
	}
	got, err := os.ReadFile(final)
	if err != nil {
		t.Fatal(err)
	}
	if want := reference(t, 150); string(got) != want {
		t.Errorf("final state %s, want %s (the uninterrupted run's)", got, want)
	}
}

func TestRunNeverResumesATornCheckpoint(t *testing.T) {
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "ckpt")
	torn := filepath.Join(ckpt, "committed", "000007-step-000999")
	if err := os.MkdirAll(torn, 0o755); err != nil {
		t.Fatal(err)
	}
	// Written, never committed: no manifest.
	if err := os.WriteFile(filepath.Join(torn, "state.json"), []byte(`{"step":999,"hash":"x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r := gw(t, dir, "run", "--data-dir", filepath.Join(dir, "data"), "--checkpoint-dir", ckpt, "--cloud", "none", "--",
		trainer, "--steps", "30", "--every", "10", "--step-time", "1ms")
	if r.code != 0 || strings.Contains(r.stderr, "resumed from") {
		t.Errorf("exit %d; the job must start fresh, not from the torn checkpoint:\n%s", r.code, r.stderr)
	}
}

func TestRunDrill(t *testing.T) {
	dir := t.TempDir()
	base := []string{"run", "--drill", "--data-dir", filepath.Join(dir, "data"), "--checkpoint-dir", filepath.Join(dir, "ckpt"),
		"--cloud", "none", "--drill-timeout", "20s", "--", trainer, "--steps", "100000", "--every", "10", "--step-time", "5ms"}
	r := gw(t, dir, base...)
	if r.code != 0 || !strings.Contains(r.stdout, "Resume drill: PASS (progress)") {
		t.Errorf("exit %d, want PASS:\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = gw(t, dir, append(base, "--ignore-resume")...)
	if r.code != 1 || !strings.Contains(r.stdout, "Resume drill: FAIL") {
		t.Errorf("exit %d, want FAIL for a job that ignores GPUWARDEN_RESUME_FROM:\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// s3Server is gofakes3 on loopback with one bucket.
func s3Server(t *testing.T) (endpoint string, backend *s3mem.Backend) {
	t.Helper()
	backend = s3mem.New()
	if err := backend.CreateBucket("ckpts"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return u.Host, backend
}

var s3Env = []string{"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test"}

func TestRunSyncsAndRestoresOnAFreshBox(t *testing.T) {
	endpoint, _ := s3Server(t)
	s3 := []string{"--sync", "s3://ckpts/job-1", "--s3-endpoint", endpoint, "--s3-insecure", "--s3-path-style", "--cloud", "none"}
	first := t.TempDir()
	r := gwEnv(t, first, s3Env, append(append([]string{"run", "--data-dir", filepath.Join(first, "data"),
		"--checkpoint-dir", filepath.Join(first, "ckpt")}, s3...), "--", trainer, "--steps", "60", "--every", "20", "--step-time", "1ms")...)
	if r.code != 0 || !strings.Contains(r.stderr, "checkpoint synced") || !strings.Contains(r.stdout, "newest durable") && !strings.Contains(r.stdout, "last durable checkpoint: step 60") {
		t.Fatalf("first box: exit %d\n%s", r.code, r.stderr)
	}
	fresh := t.TempDir() // another box: nothing local
	r = gwEnv(t, fresh, s3Env, append(append([]string{"run", "--data-dir", filepath.Join(fresh, "data"),
		"--checkpoint-dir", filepath.Join(fresh, "ckpt")}, s3...), "--", trainer, "--steps", "80", "--every", "20", "--step-time", "1ms")...)
	if r.code != 0 || !strings.Contains(r.stderr, "restored the newest checkpoint") || !strings.Contains(r.stderr, "at step 60") {
		t.Errorf("fresh box: exit %d, want a restore and a resume at step 60:\n%s", r.code, r.stderr)
	}
}

func TestRunRefusesAForbiddenCountry(t *testing.T) {
	endpoint, backend := s3Server(t)
	dir := t.TempDir()
	plan := "workload: {kind: notebook}\nwork_hours: 10\nbudget: {monthly_limit: 100}\nresidency: {countries: [DE]}\n"
	if err := os.WriteFile(filepath.Join(dir, "gpuwarden.yaml"), []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	r := gwEnv(t, dir, s3Env, "run", "--data-dir", filepath.Join(dir, "data"), "--checkpoint-dir", filepath.Join(dir, "ckpt"),
		"--sync", "s3://ckpts/job-1", "--s3-endpoint", endpoint, "--s3-insecure", "--s3-path-style", "--cloud", "none",
		"--", trainer, "--steps", "40", "--every", "10", "--step-time", "1ms")
	if r.code != 2 || !strings.Contains(r.stderr, "outside the plan's allowed countries") {
		t.Errorf("exit %d, want 2 and a residency refusal:\n%s", r.code, r.stderr)
	}
	objs, err := backend.ListBucket("ckpts", nil, gofakes3.ListBucketPage{})
	if err != nil {
		t.Fatal(err)
	}
	if len(objs.Contents) != 0 {
		t.Errorf("%d objects uploaded before the refusal", len(objs.Contents))
	}
}

// TestRunRefusesSymlinkedFolders: people symlink checkpoint folders to a
// bigger disk; a symlinked incoming/ or committed/ is refused before
// anything in its target is renamed or deleted, while a symlinked
// --checkpoint-dir itself is fine.
func TestRunRefusesSymlinkedFolders(t *testing.T) {
	for _, sub := range []string{"incoming", "committed"} {
		t.Run(sub, func(t *testing.T) {
			dir := t.TempDir()
			target := filepath.Join(dir, "bigdisk")
			precious := filepath.Join(target, "precious-data", "weights.bin")
			if err := os.MkdirAll(filepath.Dir(precious), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(precious, []byte("not gpuwarden's"), 0o644); err != nil {
				t.Fatal(err)
			}
			ckpt := filepath.Join(dir, "ckpt")
			if err := os.MkdirAll(ckpt, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, filepath.Join(ckpt, sub)); err != nil {
				t.Fatal(err)
			}
			r := gw(t, dir, "run", "--data-dir", filepath.Join(dir, "data"), "--checkpoint-dir", ckpt, "--cloud", "none", "--",
				trainer, "--steps", "60", "--every", "10", "--step-time", "1ms")
			if r.code != 2 || !strings.Contains(r.stderr, "is a symlink") || !strings.Contains(r.stderr, "point --checkpoint-dir at the real folder") {
				t.Errorf("exit %d, want 2 and a refusal with the fix:\n%s", r.code, r.stderr)
			}
			if b, err := os.ReadFile(precious); err != nil || string(b) != "not gpuwarden's" {
				t.Errorf("the symlink's target was touched: %v", err)
			}
		})
	}
	t.Run("the checkpoint dir itself", func(t *testing.T) {
		dir := t.TempDir()
		real := filepath.Join(dir, "bigdisk")
		if err := os.MkdirAll(real, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(real, filepath.Join(dir, "ckpt")); err != nil {
			t.Fatal(err)
		}
		r := gw(t, dir, "run", "--data-dir", filepath.Join(dir, "data"), "--checkpoint-dir", filepath.Join(dir, "ckpt"), "--cloud", "none", "--",
			trainer, "--steps", "30", "--every", "10", "--step-time", "1ms")
		if r.code != 0 {
			t.Errorf("exit %d:\n%s", r.code, r.stderr)
		}
		if es, _ := os.ReadDir(filepath.Join(real, "committed")); len(es) != 3 {
			t.Errorf("%d checkpoints in the real folder, want 3", len(es))
		}
	})
}

// TestRunLeavesNoOrphans kills the supervisor with SIGKILL: its job, the
// job's own child and a grandchild that left the process group with setsid
// must go with it.
func TestRunLeavesNoOrphans(t *testing.T) {
	dir := t.TempDir()
	marker := fmt.Sprintf("%d.%d", 300+os.Getpid()%97, time.Now().UnixNano()%1000)
	cmd := exec.Command(binary, "run", "--data-dir", filepath.Join(dir, "data"), "--checkpoint-dir", filepath.Join(dir, "ckpt"),
		"--cloud", "none", "--", "sh", "-c", "setsid sleep "+marker+" & sleep "+marker+" & sleep "+marker+"; wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitProcesses(t, marker, 3)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	assertGone(t, marker, "outlived the supervisor's kill -9")
}

// TestRunEndsLeftoversOfAKilledSupervisor: when the supervisor and its
// guard both die at once (an OOM kill of the whole unit), the job's
// processes are left; the next run over the same checkpoints ends them
// before it starts its own job.
func TestRunEndsLeftoversOfAKilledSupervisor(t *testing.T) {
	dir := t.TempDir()
	marker := fmt.Sprintf("%d.%d", 400+os.Getpid()%97, time.Now().UnixNano()%1000)
	args := []string{"run", "--data-dir", filepath.Join(dir, "data"), "--checkpoint-dir", filepath.Join(dir, "ckpt"), "--cloud", "none", "--"}
	cmd := exec.Command(binary, append(args, "sh", "-c", "setsid sleep "+marker+" & sleep "+marker+"; wait")...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitProcesses(t, marker, 2)
	// The guard starts once the job is registered, which can be after the
	// job's sleeps are up: wait for it, or it would end the job itself.
	var guards []int
	for deadline := time.Now().Add(5 * time.Second); len(guards) == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, pid := range processesWith("gpuwarden-guard") {
			if ppid(pid) == cmd.Process.Pid {
				guards = append(guards, pid)
			}
		}
	}
	if len(guards) == 0 {
		t.Fatal("the supervisor started no guard")
	}
	for _, pid := range guards {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	time.Sleep(300 * time.Millisecond)
	if n := len(processesWith(marker)); n == 0 {
		t.Fatal("nothing was left behind to end: the test proves nothing")
	}
	r := gw(t, dir, append(args, "true")...)
	if r.code != 0 || !strings.Contains(r.stderr, "ended processes a killed supervisor left behind") {
		t.Errorf("exit %d, want the leftovers ended:\n%s", r.code, r.stderr)
	}
	assertGone(t, marker, "outlived the next run")
}

// waitProcesses waits for n processes running "sleep marker". It counts
// the sleeps alone: the supervisor's and the shell's command lines hold the
// marker too, and the shell's forks carry it until they exec.
func waitProcesses(t *testing.T, marker string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(sleepers(marker)) < n && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := len(sleepers(marker)); got < n {
		t.Fatalf("the job's processes did not start (%d of %d)", got, n)
	}
}

func assertGone(t *testing.T, marker, what string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for len(processesWith(marker)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if left := processesWith(marker); len(left) > 0 {
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		t.Errorf("processes %v %s", left, what)
	}
}

// ppid reads a process's parent from /proc.
func ppid(pid int) int {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// processesWith lists the PIDs whose command line contains s.
func processesWith(s string) []int {
	return processesWhere(func(cmdline []byte) bool { return bytes.Contains(cmdline, []byte(s)) })
}

// sleepers lists the PIDs running exactly "sleep marker".
func sleepers(marker string) []int {
	want := []byte("sleep\x00" + marker + "\x00")
	return processesWhere(func(cmdline []byte) bool { return bytes.Equal(cmdline, want) })
}

func processesWhere(match func(cmdline []byte) bool) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !match(b) {
			continue
		}
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil && bytes.Contains(st, []byte(") Z ")) {
			continue // a zombie is already dead
		}
		pids = append(pids, pid)
	}
	return pids
}

// TestRunNeverResumesAnUnverifiedCheckpoint: a manifest edited to list no
// file, or a folder of a checkpoint swapped for a symlink out of the root,
// vouches for nothing, so the older whole checkpoint is resumed instead.
func TestRunNeverResumesAnUnverifiedCheckpoint(t *testing.T) {
	tests := []struct {
		name string
		tear func(t *testing.T, newest string)
	}{
		{"a manifest that lists no file", func(t *testing.T, newest string) {
			p := filepath.Join(newest, "manifest.json")
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			m["files"] = []any{}
			b, _ = json.Marshal(m)
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"a folder swapped for a symlink out of the root", func(t *testing.T, newest string) {
			// The same bytes elsewhere, so only the symlink gives it away.
			outside := filepath.Join(t.TempDir(), "copy")
			if err := os.Rename(newest, outside); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(newest, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"manifest.json", "state.json"} {
				if err := os.Rename(filepath.Join(outside, f), filepath.Join(newest, f)); err != nil {
					t.Fatal(err)
				}
			}
			// weights.bin now lives outside; put a folder link in its place.
			if err := os.MkdirAll(filepath.Join(outside, "w"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(outside, "weights.bin"), filepath.Join(outside, "w", "weights.bin")); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(filepath.Join(newest, "manifest.json"))
			b = bytes.ReplaceAll(b, []byte(`"weights.bin"`), []byte(`"sub/weights.bin"`))
			if err := os.WriteFile(filepath.Join(newest, "manifest.json"), b, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(outside, "w"), filepath.Join(newest, "sub")); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			ckpt := filepath.Join(dir, "ckpt")
			args := []string{"run", "--data-dir", filepath.Join(dir, "data"), "--checkpoint-dir", ckpt, "--cloud", "none", "--"}
			if r := gw(t, dir, append(args, trainer, "--steps", "40", "--every", "20", "--step-time", "1ms")...); r.code != 0 {
				t.Fatalf("first run: exit %d\n%s", r.code, r.stderr)
			}
			tt.tear(t, filepath.Join(ckpt, "committed", "000002-step-000040"))
			r := gw(t, dir, append(args, trainer, "--steps", "60", "--every", "20", "--step-time", "1ms")...)
			if r.code != 0 || !strings.Contains(r.stderr, "000001-step-000020 at step 20") {
				t.Errorf("exit %d; want a resume from the whole step 20, not the unverified step 40:\n%s", r.code, r.stderr)
			}
		})
	}
}

// TestRunReportReachesTheLedgerOnSIGTERM: the report of a run stopped by
// SIGTERM, as on a preempted box, is written to the ledger, even when the
// ledger did not exist yet.
func TestRunReportReachesTheLedgerOnSIGTERM(t *testing.T) {
	dir := t.TempDir()
	wait, errb, stop := startRunWatched(t, dir, nil, "run", "--data-dir", filepath.Join(dir, "data"), "--checkpoint-dir", filepath.Join(dir, "ckpt"),
		"--cloud", "none", "--", trainer, "--steps", "100000", "--every", "20", "--step-time", "5ms")
	waitFor(t, errb, "checkpoint committed", 20*time.Second)
	stop(syscall.SIGTERM)
	if r := wait(30 * time.Second); r.code != 75 {
		t.Errorf("exit %d, want 75\n%s", r.code, r.stderr)
	}
	assertReportInLedger(t, filepath.Join(dir, "data"), "stopped")
}
