package supervise

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/syncbuf"
)

// harness is a Supervisor over the trainer helper with its callbacks recorded.
type harness struct {
	s      *Supervisor
	tag    string
	result string
	out    *syncbuf.Buffer
	events chan string // "state:running", "commit:NAME"

	mu     sync.Mutex
	states []string
	sleeps []time.Duration
}

func newHarness(t *testing.T, kv ...string) *harness {
	t.Helper()
	dir := t.TempDir()
	h := &harness{result: filepath.Join(dir, "result.json"), out: &syncbuf.Buffer{}, events: make(chan string, 1024)}
	env, tag := helperEnvFor(t, "trainer", append([]string{"H_RESULT=" + h.result}, kv...)...)
	h.tag = tag
	h.s = &Supervisor{
		Argv:          []string{os.Args[0], "--resume=" + ResumePlaceholder},
		CheckpointDir: filepath.Join(dir, "ckpt"),
		Env:           env,
		Out:           h.out,
		Policy:        Policy{Rand: func() float64 { return 0.5 }},
		Grace:         5 * time.Second,
		StopWait:      5 * time.Second,
		OnCommit: func(cp gpuwarden.Checkpoint) {
			h.events <- "commit:" + cp.Name
		},
		OnState: func(s string) {
			h.mu.Lock()
			h.states = append(h.states, s)
			h.mu.Unlock()
			h.events <- "state:" + s
		},
		Sleep: func(ctx context.Context, d time.Duration) error {
			h.mu.Lock()
			h.sleeps = append(h.sleeps, d)
			h.mu.Unlock()
			return ctx.Err()
		},
		OOMCheck: func([]int, time.Time) bool { return false },
	}
	t.Cleanup(func() { assertNoLeftovers(t, tag) })
	return h
}

// finalState is what the trainer wrote when it finished.
func (h *harness) finalState(t *testing.T) trainerState {
	t.Helper()
	b, err := os.ReadFile(h.result)
	if err != nil {
		t.Fatalf("the job never finished: %v\n%s", err, h.out.String())
	}
	var st trainerState
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func classes(r gpuwarden.RunReport) []string {
	var out []string
	for _, a := range r.Attempts {
		out = append(out, a.Class)
	}
	return out
}

// waitEvent reads events until one with the prefix arrives.
func waitEvent(t *testing.T, events <-chan string, prefix string) string {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case e := <-events:
			if strings.HasPrefix(e, prefix) {
				return e
			}
		case <-timeout:
			t.Errorf("no %q event", prefix)
			return ""
		}
	}
}

func TestRunUninterrupted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "H_STEPS=40")
	report, err := h.s.Run(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := classes(report); !reflect.DeepEqual(got, []string{gpuwarden.ExitOK}) {
		t.Errorf("attempts = %v, want one ok", got)
	}
	if report.JobClass != gpuwarden.ExitOK || report.JobExitCode != 0 || report.ExitCode != 0 || report.LostSeconds != 0 {
		t.Errorf("report job class %s job exit %d exit %d lost %v", report.JobClass, report.JobExitCode, report.ExitCode, report.LostSeconds)
	}
	if st := h.finalState(t); st.Step != 40 || st.Digest != wantDigest(40) {
		t.Errorf("final state = %+v, want step 40 and the uninterrupted digest", st)
	}
	if len(report.Checkpoints) != 8 || report.Checkpoints[7].Step != 40 {
		t.Errorf("checkpoints = %d, want 8 up to step 40", len(report.Checkpoints))
	}
	es, _ := openRoot(t, h.s.CheckpointDir).entries()
	if len(es) != DefaultKeep {
		t.Errorf("%d checkpoints kept, want %d", len(es), DefaultKeep)
	}
	a := report.Attempts[0]
	if a.ResumedFrom != "" || a.Number != 1 || !a.End.After(a.Start) || len(a.Tail) == 0 {
		t.Errorf("attempt = %+v", a)
	}
	if !strings.Contains(h.out.String(), `args ["--resume="]`) {
		t.Errorf("a fresh start should get an empty {resume}:\n%s", h.out.String())
	}
	if !reflect.DeepEqual(h.states, []string{StateRunning, StateDone}) {
		t.Errorf("states = %v", h.states)
	}
}

// Stopping the supervisor stops the job with a checkpoint and does not restart.
func TestRunCancelStopsWithoutRestart(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "H_STEPS=100000")
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		waitEvent(t, h.events, "commit:")
		cancel()
	}()
	report, err := h.s.Run(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := classes(report); !reflect.DeepEqual(got, []string{gpuwarden.ExitPreempted}) {
		t.Errorf("attempts = %v, want one preempted", got)
	}
	if len(h.sleeps) != 0 {
		t.Errorf("slept %v: a stopped supervisor must not restart", h.sleeps)
	}
	if !strings.Contains(h.out.String(), "checkpoint on signal") || !strings.Contains(h.out.String(), "terminated at step") {
		t.Errorf("job was not checkpointed and terminated:\n%s", h.out.String())
	}
	if len(report.Checkpoints) < 2 {
		t.Errorf("checkpoints = %d, want the periodic one and the one on the signal", len(report.Checkpoints))
	}
}

// A job deaf to both signals gets SIGKILL after the grace and StopWait.
func TestRunEscalatesToSIGKILL(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "H_STEPS=100000", "H_IGNORE_TERM=1")
	h.s.Grace, h.s.StopWait = 300*time.Millisecond, 300*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		waitEvent(t, h.events, "state:"+StateRunning)
		time.Sleep(200 * time.Millisecond)
		cancel()
	}()
	start := time.Now()
	report, err := h.s.Run(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := report.Attempts[0]
	if a.Class != gpuwarden.ExitPreempted || a.Signal != "SIGKILL" || a.ExitCode != -1 {
		t.Errorf("attempt = class %s signal %q exit %d, want preempted by SIGKILL", a.Class, a.Signal, a.ExitCode)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("stop took %s", d)
	}
}

func TestRunRetryBudgets(t *testing.T) {
	t.Parallel()
	ncclFail := "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1"
	userBudgets, err := ParseRetryOn("preempted,user-error")
	if err != nil {
		t.Fatal(err)
	}
	s := time.Second
	tests := []struct {
		name     string
		env      []string
		budgets  map[string]int
		hostOOM  bool
		want     []string
		restarts map[string]int
		sleeps   []time.Duration
	}{
		{"cuda oom retried once", []string{"H_OOM=1"}, nil, false,
			[]string{"cuda-oom", "cuda-oom"}, map[string]int{"cuda-oom": 1}, []time.Duration{s}},
		{"gpu fault backs off then succeeds", []string{"H_FAIL_UNTIL=3", "H_FAIL_TEXT=" + ncclFail, "H_STEPS=5"}, nil, false,
			[]string{"gpu-fault", "gpu-fault", "ok"}, map[string]int{"gpu-fault": 2}, []time.Duration{s, 2 * s}},
		{"user error not retried", []string{"H_FAIL_UNTIL=99", "H_FAIL_TEXT=ValueError: bad config"}, nil, false,
			[]string{"user-error"}, map[string]int{}, nil},
		{"user error retried with --retry-on", []string{"H_FAIL_UNTIL=99", "H_FAIL_TEXT=ValueError: bad config"}, userBudgets, false,
			[]string{"user-error", "user-error", "user-error", "user-error"}, map[string]int{"user-error": 3}, []time.Duration{s, 2 * s, 4 * s}},
		{"host oom", []string{"H_SELF_KILL=1"}, map[string]int{"host-oom": 1}, true,
			[]string{"host-oom", "host-oom"}, map[string]int{"host-oom": 1}, []time.Duration{s}},
		{"stray kill", []string{"H_SELF_KILL=1"}, map[string]int{"killed": 1}, false,
			[]string{"killed", "killed"}, map[string]int{"killed": 1}, []time.Duration{s}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, tt.env...)
			h.s.Policy.Budgets = tt.budgets
			var oomPids [][]int
			h.s.OOMCheck = func(pids []int, since time.Time) bool {
				oomPids = append(oomPids, pids)
				return tt.hostOOM
			}
			report, err := h.s.Run(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := classes(report); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("attempts = %v, want %v\n%s", got, tt.want, h.out.String())
			}
			if !reflect.DeepEqual(report.Restarts, tt.restarts) {
				t.Errorf("restarts = %v, want %v", report.Restarts, tt.restarts)
			}
			if !reflect.DeepEqual(h.sleeps, tt.sleeps) {
				t.Errorf("sleeps = %v, want %v", h.sleeps, tt.sleeps)
			}
			last := report.Attempts[len(report.Attempts)-1]
			if report.JobClass != last.Class || report.JobExitCode != last.ExitCode {
				t.Errorf("report job class %s job exit %d, last attempt %s %d", report.JobClass, report.JobExitCode, last.Class, last.ExitCode)
			}
			if report.ExitCode != report.RunExitCode() {
				t.Errorf("report exit_code %d, gpuwarden run exits %d", report.ExitCode, report.RunExitCode())
			}
			if tt.want[0] != gpuwarden.ExitOK && (len(oomPids) == 0 || len(oomPids[0]) == 0) {
				t.Errorf("failed attempts were not checked for a kernel OOM kill with the job's pids")
			}
			if tt.name == "cuda oom retried once" && !strings.Contains(strings.Join(last.Tail, "\n"), "CUDA out of memory") {
				t.Errorf("tail lacks the OOM line: %q", last.Tail)
			}
		})
	}
}

// A job killed halfway through writing a checkpoint leaves no marker; the
// restart resumes from the checkpoint before it and still ends right.
func TestRunKilledMidWriteResumesFromTheLastWhole(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "H_STEPS=30", "H_DIE_AT=15")
	report, err := h.s.Run(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{gpuwarden.ExitSignal, gpuwarden.ExitOK}
	if got := classes(report); !reflect.DeepEqual(got, want) {
		t.Fatalf("attempts = %v, want %v\n%s", got, want, h.out.String())
	}
	if a := report.Attempts[1]; !strings.HasSuffix(a.ResumedFrom, "-step-000010") {
		t.Errorf("resumed from %q, want the whole step 10, not the torn step 15", a.ResumedFrom)
	}
	if report.Attempts[0].LostSeconds <= 0 {
		t.Errorf("the killed attempt lost no work?")
	}
	if st := h.finalState(t); st.Step != 30 || st.Digest != wantDigest(30) {
		t.Errorf("final state = %+v", st)
	}
}

func TestRunCommandThatCannotStart(t *testing.T) {
	s := &Supervisor{Argv: []string{"/nonexistent/train.py"}, CheckpointDir: t.TempDir()}
	report, err := s.Run(context.Background(), nil)
	if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid || len(report.Attempts) != 0 {
		t.Errorf("err = %v, attempts %d; want invalid and none", err, len(report.Attempts))
	}
	if _, err := (&Supervisor{CheckpointDir: t.TempDir()}).Run(context.Background(), nil); gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
		t.Errorf("no command: err = %v", err)
	}
}

func TestJobEnvReplacesInherited(t *testing.T) {
	t.Setenv(EnvResumeFrom, "/stale")
	env := jobEnv([]string{"A=1", "A=2"}, map[string]string{EnvResumeFrom: "", EnvAttempt: "3"})
	var resume, a []string
	for _, kv := range env {
		if strings.HasPrefix(kv, EnvResumeFrom+"=") {
			resume = append(resume, kv)
		}
		if strings.HasPrefix(kv, "A=") {
			a = append(a, kv)
		}
	}
	if !reflect.DeepEqual(resume, []string{EnvResumeFrom + "="}) || !reflect.DeepEqual(a, []string{"A=2"}) {
		t.Errorf("resume %v, A %v", resume, a)
	}
}
