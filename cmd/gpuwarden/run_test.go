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
	Restarts map[string]int `json:"restarts"`
	Attempts []struct {
		Class       string `json:"class"`
		ResumedFrom string `json:"resumed_from"`
	} `json:"attempts"`
	ExitCode int `json:"exit_code"`
}

// TestRunSurvivesTwoPreemptions: the example job is preempted twice through
// a loopback AWS metadata service and ends exactly where an uninterrupted
// run ends.
func TestRunSurvivesTwoPreemptions(t *testing.T) {
	dir := t.TempDir()
	aws := preempttest.NewAWS()
	defer aws.Close()
	final := filepath.Join(dir, "final.json")
	cmd := exec.Command(binary, "run", "--data-dir", filepath.Join(dir, "data"), "--checkpoint-dir", filepath.Join(dir, "ckpt"),
		"--cloud", "aws", "--aws-metadata", aws.URL, "--grace", "5s", "-o", "json", "--",
		trainer, "--steps", "150", "--every", "20", "--step-time", "20ms", "--out", final)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for i, at := range []time.Duration{900 * time.Millisecond, 1500 * time.Millisecond} {
		time.Sleep(at)
		aws.Interrupt("terminate", time.Now().Add(time.Duration(i+2)*time.Minute).Truncate(time.Second))
		time.Sleep(1500 * time.Millisecond)
		aws.Clear()
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v\n%s", err, errb.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("run did not finish:\n%s", errb.String())
	}
	var r runReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("report: %v\n%s", err, out.String())
	}
	if r.Restarts["preempted"] != 2 || r.ExitCode != 0 {
		t.Errorf("restarts %v exit %d, want 2 preemptions and success\n%s", r.Restarts, r.ExitCode, errb.String())
	}
	got, err := os.ReadFile(final)
	if err != nil {
		t.Fatal(err)
	}
	if want := reference(t, 150); string(got) != want {
		t.Errorf("final state %s, want %s (the uninterrupted run's)", got, want)
	}
	if !strings.Contains(errb.String(), "resumed from") {
		t.Errorf("the job never resumed:\n%s", errb.String())
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
	if r.code != 0 || !strings.Contains(r.stdout, "Resume drill: PASS") {
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
	if r.code != 0 || !strings.Contains(r.stderr, "checkpoint synced") {
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

// TestRunLeavesNoOrphans kills the supervisor with SIGKILL: its job and the
// job's own child must go with it.
func TestRunLeavesNoOrphans(t *testing.T) {
	dir := t.TempDir()
	marker := fmt.Sprintf("%d.%d", 300+os.Getpid()%97, time.Now().UnixNano()%1000)
	cmd := exec.Command(binary, "run", "--data-dir", filepath.Join(dir, "data"), "--checkpoint-dir", filepath.Join(dir, "ckpt"),
		"--cloud", "none", "--", "sh", "-c", "sleep "+marker+" & sleep "+marker+"; wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(processesWith(marker)) < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := len(processesWith(marker)); n < 2 {
		t.Fatalf("the job's processes did not start (%d)", n)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	deadline = time.Now().Add(2 * time.Second)
	for len(processesWith(marker)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if left := processesWith(marker); len(left) > 0 {
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		t.Errorf("processes %v outlived the supervisor's kill -9", left)
	}
}

// processesWith lists the PIDs whose command line contains s.
func processesWith(s string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(b, []byte(s)) {
			continue
		}
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil && bytes.Contains(st, []byte(") Z ")) {
			continue // a zombie is already dead
		}
		pids = append(pids, pid)
	}
	return pids
}
