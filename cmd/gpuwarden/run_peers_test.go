package main

// End-to-end tests of `gpuwarden run` against the real outside software:
// AWS's amazon-ec2-metadata-mock, a MinIO server and Debian's
// python3-torch, started by internal/peertest (scripts/install-peers.sh
// installs them; .ci/run makes them required).

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden/internal/peertest"
	"github.com/gpuwarden/gpuwarden/internal/syncbuf"
	"github.com/gpuwarden/gpuwarden/sqlite"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// rfc3339In is a time from now, whole seconds, as AEMM takes it.
func rfc3339In(d time.Duration) string {
	return time.Now().Add(d).UTC().Truncate(time.Second).Format(time.RFC3339)
}

// runArgs are the flags every run here shares: its own data and checkpoint
// folders, JSON out.
func runArgs(dir string, more ...string) []string {
	return append([]string{"run", "--data-dir", filepath.Join(dir, "data"), "--checkpoint-dir", filepath.Join(dir, "ckpt"), "-o", "json"}, more...)
}

// TestRunAgainstAEMM drives the real binary under the real AWS metadata
// simulator, one notice kind per case.
func TestRunAgainstAEMM(t *testing.T) {
	t.Parallel()
	long := []string{"--", trainer, "--steps", "100000", "--every", "100000", "--step-time", "20ms"}
	short := []string{"--", trainer, "--steps", "100", "--every", "100000", "--step-time", "20ms"}
	tests := []struct {
		name string
		aemm []string
		job  []string
		// sigterm, when set, stops run once stderr shows it.
		sigterm string
		code    int
		check   func(t *testing.T, r result, rep runReport)
	}{
		{
			name: "a rebalance recommendation leaves the job running with one checkpoint",
			aemm: []string{"spot", "-d", "3600", "--rebalance-delay-sec", "1"},
			job:  short,
			code: 0,
			check: func(t *testing.T, r result, rep runReport) {
				if rep.Result != "ok" || len(rep.Attempts) != 1 || len(rep.Checkpoints) != 1 ||
					len(rep.Notices) != 1 || rep.Notices[0].Action != "insurance" || rep.Notices[0].Checkpoint == "" {
					t.Errorf("result %s, %d attempts, %d checkpoints, notices %+v; want ok, 1, 1 and an insurance checkpoint", rep.Result, len(rep.Attempts), len(rep.Checkpoints), rep.Notices)
				}
			},
		},
		{
			name: "a reboot two days out alerts and does not stop the job",
			aemm: []string{"events", "-o", "system-reboot", "-b", rfc3339In(48 * time.Hour)},
			job:  short,
			code: 0,
			check: func(t *testing.T, r result, rep runReport) {
				if rep.Result != "ok" || len(rep.Attempts) != 1 || len(rep.Checkpoints) != 0 || len(rep.Notices) != 1 || rep.Notices[0].Action != "scheduled" {
					t.Errorf("result %s, %d attempts, %d checkpoints, notices %+v; want ok, untouched, one scheduled stop", rep.Result, len(rep.Attempts), len(rep.Checkpoints), rep.Notices)
				}
				if !strings.Contains(r.stderr, "will be checkpointed and stopped before the event") || strings.Contains(r.stderr, "checkpoint asked for") {
					t.Errorf("want an alert and no checkpoint signal:\n%s", r.stderr)
				}
			},
		},
		{
			name: "a spot notice: exactly one checkpoint signal and no restart on the box",
			aemm: []string{"spot", "--rebalance-delay-sec", "3600", "-d", "1", "-t", rfc3339In(8 * time.Second)},
			job:  long,
			code: 75,
			check: func(t *testing.T, r result, rep runReport) {
				if n := strings.Count(r.stderr, "checkpoint asked for"); n != 1 || rep.Result != "preempted" || len(rep.Attempts) != 1 {
					t.Errorf("%d checkpoint signals, result %s, %d attempts; want 1, preempted, 1\n%s", n, rep.Result, len(rep.Attempts), r.stderr)
				}
				if len(rep.Checkpoints) != 1 || rep.Notices[0].Checkpoint != rep.Checkpoints[0].Name {
					t.Errorf("checkpoints %+v notices %+v: want the one committed on the signal", rep.Checkpoints, rep.Notices)
				}
			},
		},
		{
			name: "an instance-stop whose time is here: the whole grace, never zero",
			aemm: []string{"events", "-o", "instance-stop"},
			job:  long,
			// The event stays active in the simulator, so the job waits for
			// its end until run itself is stopped, as a shutdown would.
			sigterm: "job stopped until the event is over",
			code:    75,
			check: func(t *testing.T, r result, rep runReport) {
				n := rep.Notices
				if len(n) != 1 || n[0].Action != "stop" || n[0].GraceSeconds != 5 || n[0].Checkpoint == "" || strings.Count(r.stderr, "checkpoint asked for") != 1 {
					t.Errorf("notices %+v: want one stop with the 5 s grace and a checkpoint on the signal\n%s", n, r.stderr)
				}
				if rep.Result != "stopped" {
					t.Errorf("result %s, want stopped", rep.Result)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := peertest.StartAEMM(t, tt.aemm...)
			dir := t.TempDir()
			wait, errb, stop := startRunWatched(t, dir, nil, append(runArgs(dir, "--cloud", "aws", "--aws-metadata", m.URL, "--grace", "5s"), tt.job...)...)
			if tt.sigterm != "" {
				waitFor(t, errb, tt.sigterm, 30*time.Second)
				stop(syscall.SIGTERM)
			}
			r := wait(60 * time.Second)
			if r.code != tt.code {
				t.Fatalf("exit %d, want %d\n%s", r.code, tt.code, r.stderr)
			}
			rep := decodeReport(t, r.stdout)
			tt.check(t, r, rep)
			assertReportInLedger(t, filepath.Join(dir, "data"), rep.Result)
		})
	}
}

// startRunWatched starts the real binary in the background with extra
// environment; wait returns its exit code, stdout and stderr, killing it
// after within; the buffer is its live stderr, and the func signals it.
func startRunWatched(t *testing.T, dir string, env []string, args ...string) (func(time.Duration) result, *syncbuf.Buffer, func(os.Signal)) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	wait := func(within time.Duration) result {
		t.Helper()
		select {
		case err := <-done:
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			return result{out.String(), errb.String(), code}
		case <-time.After(within):
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("run did not finish within %s:\n%s", within, errb.String())
			return result{}
		}
	}
	return wait, &errb, func(s os.Signal) { _ = cmd.Process.Signal(s) }
}

// waitFor waits until the buffer holds text.
func waitFor(t *testing.T, b *syncbuf.Buffer, text string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(b.String(), text) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q within %s:\n%s", text, within, b.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// assertReportInLedger checks that the run's report reached the ledger.
func assertReportInLedger(t *testing.T, dataDir, result string) {
	t.Helper()
	ctx := context.Background()
	l, err := sqlite.Open(ctx, filepath.Join(dataDir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	events, err := l.Events(ctx, 50)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.Kind == "run-report" && strings.Contains(e.Message, " ended "+result+" ") {
			return
		}
	}
	t.Errorf("no run-report event ending %s in the ledger: %+v", result, events)
}

// A Python job signalled before it installs its handler: the default action
// of SIGUSR1 would kill it, so it gets no signal for an insurance
// checkpoint and keeps running, and a spot notice stops it with SIGTERM and
// the grace instead of a restart loop.
func TestRunSparesAJobWithoutItsHandlerYet(t *testing.T) {
	t.Parallel()
	script := filepath.Join(t.TempDir(), "late.py")
	err := os.WriteFile(script, []byte(`import os, signal, sys, time
time.sleep(4)  # an import torch that takes a while
signal.signal(signal.SIGUSR1, lambda *_: print("checkpoint asked for", flush=True))
d = os.path.join(os.environ["GPUWARDEN_CHECKPOINT_DIR"], "step-000001")
os.makedirs(d)
open(os.path.join(d, "state"), "w").write("1")
open(os.path.join(d, ".complete"), "w").close()
time.sleep(1)
print("done", flush=True)
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		aemm []string
		code int
		want string
	}{
		{"rebalance", []string{"spot", "-d", "3600", "--rebalance-delay-sec", "1"}, 0, "ok"},
		{"spot", []string{"spot", "--rebalance-delay-sec", "3600", "-d", "1", "-t", rfc3339In(4 * time.Second)}, 75, "preempted"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := peertest.StartAEMM(t, tt.aemm...)
			dir := t.TempDir()
			wait, _, _ := startRunWatched(t, dir, nil, runArgs(dir, "--cloud", "aws", "--aws-metadata", m.URL, "--grace", "20s", "--", "/usr/bin/python3", script)...)
			r := wait(60 * time.Second)
			rep := decodeReport(t, r.stdout)
			if r.code != tt.code || rep.Result != tt.want || len(rep.Attempts) != 1 || len(rep.Notices) != 1 ||
				!strings.Contains(rep.Notices[0].Signal, "no process of the job catches SIGUSR1") {
				t.Errorf("exit %d result %s, %d attempts, notices %+v; want %d, %s, one attempt, no SIGUSR1 sent\n%s", r.code, rep.Result, len(rep.Attempts), rep.Notices, tt.code, tt.want, r.stderr)
			}
			if strings.Contains(r.stderr, "SIGUSR1") && strings.Contains(r.stderr, "class=killed") {
				t.Errorf("the job died of SIGUSR1:\n%s", r.stderr)
			}
		})
	}
}

// minioBucket starts MinIO with one bucket and returns the flags and
// environment that point run at it, and a client for the test.
func minioBucket(t *testing.T) (*peertest.MinIO, []string, []string, *minio.Client) {
	t.Helper()
	m := peertest.StartMinIO(t)
	c, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, ""), Secure: false})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MakeBucket(context.Background(), "ckpts", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--sync", "s3://ckpts/job", "--s3-endpoint", m.Endpoint, "--s3-insecure", "--s3-path-style", "--cloud", "none"}
	return m, flags, m.Env(), c
}

// objects lists the keys under prefix.
func objects(t *testing.T, c *minio.Client, prefix string) []string {
	t.Helper()
	var keys []string
	for o := range c.ListObjects(context.Background(), "ckpts", minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// TestRunWithMinIO: every checkpoint reaches a real MinIO verified, --keep
// applies there and spares what gpuwarden did not write, and a fresh box
// resumes the newest checkpoint that still verifies.
func TestRunWithMinIO(t *testing.T) {
	t.Parallel()
	_, flags, env, c := minioBucket(t)
	ctx := context.Background()
	if _, err := c.PutObject(ctx, "ckpts", "job/NOTES.txt", strings.NewReader("not gpuwarden's"), -1, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	first := t.TempDir()
	r := gwEnv(t, first, env, append(append(runArgs(first, "--keep", "2"), flags...), "--", trainer, "--steps", "100", "--every", "20", "--step-time", "1ms")...)
	rep := decodeReport(t, r.stdout)
	if r.code != 0 || rep.Result != "ok" || rep.Sync == nil || rep.Sync.Uploaded != 5 || !rep.Sync.Durable || rep.Sync.NewestDurable.Step != 100 {
		t.Fatalf("first box: exit %d result %s sync %+v\n%s", r.code, rep.Result, rep.Sync, r.stderr)
	}
	var names []string
	for _, k := range objects(t, c, "job/") {
		if strings.HasSuffix(k, "/manifest.json") {
			names = append(names, strings.TrimSuffix(strings.TrimPrefix(k, "job/"), "/manifest.json"))
		}
	}
	if len(names) != 2 || !strings.HasSuffix(names[1], "step-000100") || !slicesContain(objects(t, c, "job/"), "job/NOTES.txt") {
		t.Fatalf("the store holds %v and %v; want the newest 2 checkpoints and the foreign object", names, objects(t, c, "job/"))
	}
	// The newest one goes bad in the store: the fresh box skips it.
	bad := "job/" + names[1] + "/state.json"
	if _, err := c.PutObject(ctx, "ckpts", bad, strings.NewReader(`{"step":100,"hash":"forged"}`), -1, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	fresh := t.TempDir()
	final := filepath.Join(fresh, "final.json")
	r = gwEnv(t, fresh, env, append(append(runArgs(fresh, "--keep", "2"), flags...), "--", trainer, "--steps", "140", "--every", "20", "--step-time", "1ms", "--out", final)...)
	rep = decodeReport(t, r.stdout)
	if r.code != 0 || rep.Sync.Restored != names[0] || rep.Attempts[0].ResumedFrom != names[0] || !strings.Contains(r.stderr, "skip a stored checkpoint that does not verify") {
		t.Fatalf("fresh box: exit %d, restored %q resumed %q; want %s after skipping the forged one\n%s", r.code, rep.Sync.Restored, rep.Attempts[0].ResumedFrom, names[0], r.stderr)
	}
	if got, _ := os.ReadFile(final); string(got) != reference(t, 140) {
		t.Errorf("final state %s, want the uninterrupted run's", got)
	}
}

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestRunMinIOBrokenMidRun: the server dies after two checkpoints; run does
// not report ok, exits 74 and names the newest durable step.
func TestRunMinIOBrokenMidRun(t *testing.T) {
	t.Parallel()
	m, flags, env, _ := minioBucket(t)
	dir := t.TempDir()
	args := append(append(runArgs(dir, "--sync-timeout", "3s"), flags...), "--", trainer, "--steps", "160", "--every", "20", "--step-time", "25ms")
	wait, errb, _ := startRunWatched(t, dir, env, args...)
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(errb.String(), "checkpoint synced") < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	m.Kill()
	r := wait(60 * time.Second)
	code := r.code
	rep := decodeReport(t, r.stdout)
	if code != 74 || rep.Result != "not-durable" || rep.Sync.Durable || rep.Sync.Failed == 0 {
		t.Fatalf("exit %d result %s sync %+v; want 74, not-durable\n%s", code, rep.Result, rep.Sync, r.stderr)
	}
	d := rep.Sync.NewestDurable
	if d == nil || d.Step < 40 || d.Step >= 160 || !strings.Contains(rep.Why, "newest durable one is step "+strconv.FormatInt(d.Step, 10)) {
		t.Errorf("newest durable %+v, why %q: want a step the server kept, named", d, rep.Why)
	}
}

// TestRunDrillVerifyStatePyTorch: the PyTorch example resumes bit for bit
// under Debian's python3-torch, and a copy that skips load_state_dict FAILs.
func TestRunDrillVerifyStatePyTorch(t *testing.T) {
	t.Parallel()
	py := peertest.Python(t)
	example := filepath.Join(repoRoot(t), "examples", "pytorch_resume.py")
	src, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	load := `    model.load_state_dict(state["model"])`
	if !bytes.Contains(src, []byte(load)) {
		t.Fatalf("the example no longer has %q", load)
	}
	broken := filepath.Join(t.TempDir(), "pytorch_resume_broken.py")
	if err := os.WriteFile(broken, bytes.Replace(src, []byte(load), []byte("    pass  # load_state_dict skipped"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		script string
		code   int
		want   string
	}{
		{example, 0, "Resume drill: PASS (state)"},
		{broken, 1, "Resume drill: FAIL"},
	} {
		dir := t.TempDir()
		r := gw(t, dir, "run", "--drill", "--verify-state", "--cloud", "none", "--data-dir", filepath.Join(dir, "data"),
			"--checkpoint-dir", filepath.Join(dir, "ckpt"), "--drill-timeout", "2m", "--", py, tt.script, "--steps", "1000000", "--every", "40")
		if r.code != tt.code || !strings.Contains(r.stdout, tt.want) {
			t.Errorf("%s: exit %d, want %d and %q:\n%s\n%s", filepath.Base(tt.script), r.code, tt.code, tt.want, r.stdout, r.stderr)
		}
	}
}

// TestRunPyTorchAcrossBoxes: the PyTorch example gets a real spot notice
// from AEMM on one box, checkpoints to a real MinIO and stops; a fresh box
// resumes from MinIO and ends with exactly the loss of an uninterrupted run.
func TestRunPyTorchAcrossBoxes(t *testing.T) {
	t.Parallel()
	py := peertest.Python(t)
	example := filepath.Join(repoRoot(t), "examples", "pytorch_resume.py")
	_, flags, env, _ := minioBucket(t)
	job := []string{"--", py, example, "--steps", "240", "--every", "1000"}
	lossOf := func(out string) string {
		m := regexp.MustCompile(`done: step \d+ loss [0-9.]+`).FindString(out)
		if m == "" {
			t.Fatalf("no final loss in:\n%s", out)
		}
		return m
	}
	plain := t.TempDir()
	r := gw(t, plain, append(runArgs(plain, "--cloud", "none"), job...)...)
	want := lossOf(r.stderr)

	aemm := peertest.StartAEMM(t, "spot", "--rebalance-delay-sec", "3600", "-d", "4", "-t", rfc3339In(12*time.Second))
	first := t.TempDir()
	flagsAWS := append(append([]string{}, flags[:len(flags)-2]...), "--cloud", "aws", "--aws-metadata", aemm.URL, "--grace", "20s")
	r = gwEnv(t, first, env, append(append(runArgs(first), flagsAWS...), job...)...)
	rep := decodeReport(t, r.stdout)
	if r.code != 75 || rep.Result != "preempted" || rep.Sync == nil || !rep.Sync.Durable || len(rep.Checkpoints) != 1 {
		t.Fatalf("first box: exit %d result %s sync %+v checkpoints %d; want 75, preempted, one durable checkpoint\n%s", r.code, rep.Result, rep.Sync, len(rep.Checkpoints), r.stderr)
	}
	fresh := t.TempDir()
	r = gwEnv(t, fresh, env, append(append(runArgs(fresh), flags...), job...)...)
	if got := lossOf(r.stderr); r.code != 0 || got != want {
		t.Errorf("fresh box: exit %d, %q; want %q, the uninterrupted run's, bit for bit\n%s", r.code, got, want, r.stderr)
	}
}
