package supervise

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// noticeRun runs the trainer under a harness and feeds it notices from
// script, which gets the harness's events and a send function.
func noticeRun(t *testing.T, h *harness, script func(send func(gpuwarden.Notice))) (gpuwarden.RunReport, []gpuwarden.NoticeRecord) {
	t.Helper()
	notices := make(chan gpuwarden.Notice, 16)
	var mu sync.Mutex
	var heard []gpuwarden.NoticeRecord
	h.s.OnNotice = func(r gpuwarden.NoticeRecord) {
		mu.Lock()
		heard = append(heard, r)
		mu.Unlock()
	}
	go script(func(n gpuwarden.Notice) { notices <- n })
	report, err := h.s.Run(context.Background(), notices)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return report, heard
}

// waitOutput waits until the job printed text.
func waitOutput(t *testing.T, h *harness, text string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(h.out.String(), text) {
		if time.Now().After(deadline) {
			t.Errorf("the job never printed %q", text)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// shellTrainer checkpoints every 5 steps and stops on SIGTERM, and leaves
// SIGUSR1 at its default action, which is death; so do its sleeps.
const shellTrainer = `i=0
trap 'echo "terminated at step $i"; exit 0' TERM
while [ "$i" -lt "$H_STEPS" ]; do
  i=$((i+1))
  if [ $((i % 5)) -eq 0 ]; then
    d="$GPUWARDEN_CHECKPOINT_DIR/step-$(printf %06d "$i")"
    mkdir -p "$d" && echo "$i" > "$d/state" && : > "$d/.complete"
  fi
  sleep 0.02
done
echo "done step $i"`

func signalled(h *harness) int { return strings.Count(h.out.String(), "checkpoint on signal") }

func actions(r gpuwarden.RunReport) []string {
	var out []string
	for _, n := range r.Notices {
		out = append(out, n.Action)
	}
	return out
}

// TestNoticePolicy drives one run per row of gpuwarden.NoticeEffects and the
// timing cases: each notice is acted on by its kind and the time left.
func TestNoticePolicy(t *testing.T) {
	t.Parallel()
	in := func(d time.Duration) time.Time { return time.Now().Add(d).Truncate(time.Second) }
	tests := []struct {
		name    string
		env     []string
		lead    time.Duration
		script  func(h *harness, send func(gpuwarden.Notice))
		result  string
		classes []string
		actions []string
		signals int
		check   func(t *testing.T, h *harness, r gpuwarden.RunReport)
	}{
		{
			name: "rebalance: one insurance checkpoint, the job keeps running",
			env:  []string{"H_STEPS=40"},
			script: func(h *harness, send func(gpuwarden.Notice)) {
				waitEvent(t, h.events, "commit:")
				n := gpuwarden.Notice{Provider: "aws", Kind: gpuwarden.NoticeRebalance, ID: "aws-rebalance", Detail: "rebalance recommended"}
				send(n)
				send(n) // a poller repeating itself
			},
			result: gpuwarden.ResultOK, classes: []string{"ok"}, actions: []string{"insurance"}, signals: 1,
			check: func(t *testing.T, h *harness, r gpuwarden.RunReport) {
				if r.Notices[0].Checkpoint == "" {
					t.Errorf("no checkpoint recorded for the insurance: %+v", r.Notices[0])
				}
				want := []string{StateRunning, StateCheckpointing, StateRunning, StateDone}
				if !reflect.DeepEqual(h.states, want) {
					t.Errorf("states = %v, want %v", h.states, want)
				}
				if st := h.finalState(t); st.Step != 40 || st.Digest != wantDigest(40) {
					t.Errorf("final state = %+v", st)
				}
			},
		},
		{
			// The job's exit and its commit arrive together: the commit
			// must not be lost to whichever the supervisor sees first.
			name: "rebalance: a checkpoint written just before the job ends answers it",
			env:  []string{"H_STEPS=100000", "H_EXIT_AFTER_SIGNAL=1"},
			script: func(h *harness, send func(gpuwarden.Notice)) {
				waitEvent(t, h.events, "commit:")
				send(gpuwarden.Notice{Provider: "aws", Kind: gpuwarden.NoticeRebalance, ID: "aws-rebalance", Detail: "rebalance recommended"})
			},
			result: gpuwarden.ResultOK, classes: []string{"ok"}, actions: []string{"insurance"}, signals: 1,
			check: func(t *testing.T, h *harness, r gpuwarden.RunReport) {
				if r.Notices[0].Checkpoint == "" {
					t.Errorf("no checkpoint recorded for the insurance: %+v", r.Notices[0])
				}
			},
		},
		{
			name: "migration: insurance, no stop",
			env:  []string{"H_STEPS=40"},
			script: func(h *harness, send func(gpuwarden.Notice)) {
				waitEvent(t, h.events, "commit:")
				send(gpuwarden.Notice{Provider: "gcp", Kind: gpuwarden.NoticeMigration, ID: "gcp-maintenance-1", Detail: "MIGRATE_ON_HOST_MAINTENANCE"})
			},
			result: gpuwarden.ResultOK, classes: []string{"ok"}, actions: []string{"insurance"}, signals: 1,
		},
		{
			name: "spot: one signal, a moving time is the same notice, no restart on the box",
			env:  []string{"H_STEPS=100000"},
			script: func(h *harness, send func(gpuwarden.Notice)) {
				waitEvent(t, h.events, "commit:")
				at := in(2 * time.Minute)
				for i := range 3 { // AWS's simulator moves the time with every request
					send(gpuwarden.Notice{Provider: "aws", Kind: gpuwarden.NoticePreemption, At: at.Add(time.Duration(i) * time.Second), ID: "aws-spot-instance-action"})
				}
			},
			result: gpuwarden.ResultPreempted, classes: []string{"preempted"}, actions: []string{"stop"}, signals: 1,
			check: func(t *testing.T, h *harness, r gpuwarden.RunReport) {
				if len(h.sleeps) != 1 || h.sleeps[0] < time.Minute || h.sleeps[0] > 2*time.Minute {
					t.Errorf("sleeps = %v, want one wait for the end of about 2 min", h.sleeps)
				}
				if r.Notices[0].Checkpoint == "" || r.Notices[0].GraceSeconds != 5 {
					t.Errorf("record = %+v, want a checkpoint and the whole 5 s grace", r.Notices[0])
				}
			},
		},
		{
			name: "reboot two days out: scheduled, the job is not stopped",
			env:  []string{"H_STEPS=40"},
			script: func(h *harness, send func(gpuwarden.Notice)) {
				waitEvent(t, h.events, "commit:")
				send(gpuwarden.Notice{Provider: "aws", Kind: gpuwarden.NoticeReboot, At: in(48 * time.Hour), ID: "instance-event-1", Detail: "system-reboot"})
			},
			result: gpuwarden.ResultOK, classes: []string{"ok"}, actions: []string{"scheduled"}, signals: 0,
			check: func(t *testing.T, h *harness, r gpuwarden.RunReport) {
				n := r.Notices[0]
				if want := n.Notice.At.Add(-DefaultMaintenanceLead); !n.StopAt.Equal(want) {
					t.Errorf("stop at %v, want %v (the event less the lead)", n.StopAt, want)
				}
			},
		},
		{
			name: "canceled before its stop: called off",
			env:  []string{"H_STEPS=40"},
			script: func(h *harness, send func(gpuwarden.Notice)) {
				waitEvent(t, h.events, "commit:")
				n := gpuwarden.Notice{Provider: "aws", Kind: gpuwarden.NoticeReboot, At: in(time.Hour), ID: "instance-event-2"}
				send(n)
				n.Canceled = true
				send(n)
			},
			result: gpuwarden.ResultOK, classes: []string{"ok"}, actions: []string{"called-off"}, signals: 0,
		},
		{
			name: "scheduled stop at the event less the lead, restart once it is over",
			env:  []string{"H_STEPS=60"},
			lead: time.Second,
			script: func(h *harness, send func(gpuwarden.Notice)) {
				waitEvent(t, h.events, "commit:")
				n := gpuwarden.Notice{Provider: "aws", Kind: gpuwarden.NoticeMaintenance, At: time.Now().Add(1500 * time.Millisecond), ID: "instance-event-3", Detail: "instance-stop"}
				send(n)
				waitEvent(t, h.events, "state:"+StateCheckpointing)
				waitOutput(t, h, "terminated at step")
				n.Canceled = true // completed: the box is still here
				send(n)
			},
			result: gpuwarden.ResultOK, classes: []string{"preempted", "ok"}, actions: []string{"stop"}, signals: 1,
			check: func(t *testing.T, h *harness, r gpuwarden.RunReport) {
				if r.Attempts[1].ResumedFrom == "" {
					t.Errorf("the restart did not resume")
				}
				if st := h.finalState(t); st.Step != 60 || st.Digest != wantDigest(60) {
					t.Errorf("final state = %+v, want the uninterrupted one", st)
				}
			},
		},
		{
			name: "event already here: checkpoint with the whole grace, never zero",
			env:  []string{"H_STEPS=100000"},
			script: func(h *harness, send func(gpuwarden.Notice)) {
				waitEvent(t, h.events, "commit:")
				send(gpuwarden.Notice{Provider: "aws", Kind: gpuwarden.NoticeMaintenance, At: time.Now().Add(-time.Second), ID: "instance-event-4", Detail: "instance-stop"})
				waitOutput(t, h, "terminated at step")
				send(gpuwarden.Notice{Provider: "aws", Kind: gpuwarden.NoticeMaintenance, ID: "instance-event-4", Canceled: true})
				waitEvent(t, h.events, "state:"+StateRunning)
				send(gpuwarden.Notice{Provider: "aws", Kind: gpuwarden.NoticePreemption, At: time.Now().Add(time.Second), ID: "aws-spot-instance-action"})
			},
			// The second stop may be answered by a periodic commit: any count.
			result: gpuwarden.ResultPreempted, classes: []string{"preempted", "preempted"}, actions: []string{"stop", "stop"}, signals: -1,
			check: func(t *testing.T, h *harness, r gpuwarden.RunReport) {
				if g := r.Notices[0].GraceSeconds; g != 5 || r.Notices[0].Checkpoint == "" {
					t.Errorf("maintenance record = %+v, want the whole 5 s grace and a checkpoint", r.Notices[0])
				}
				// A spot deadline 1 s away still leaves the job minGrace, capped
				// by Grace, counted from the notice: the restarted job may take
				// a few milliseconds of it to set up its signal handler.
				if g := r.Notices[1].GraceSeconds; g > 5 || g < 4.5 {
					t.Errorf("late spot notice grace = %v s, want 5 less a handler's start", g)
				}
			},
		},
		{
			name: "a job that does not catch the signal is not killed by it",
			env:  []string{"H_STEPS=40", "SHELL_JOB=1"},
			script: func(h *harness, send func(gpuwarden.Notice)) {
				waitEvent(t, h.events, "commit:")
				send(gpuwarden.Notice{Provider: "aws", Kind: gpuwarden.NoticeRebalance, ID: "aws-rebalance"})
			},
			result: gpuwarden.ResultOK, classes: []string{"ok"}, actions: []string{"insurance"}, signals: 0,
			check: func(t *testing.T, h *harness, r gpuwarden.RunReport) {
				if s := r.Notices[0].Signal; !strings.Contains(s, "no process of the job catches SIGUSR1") {
					t.Errorf("signal = %q, want why it was not sent", s)
				}
			},
		},
		{
			name: "a spot notice to a job that does not catch the signal: SIGTERM with the grace",
			env:  []string{"H_STEPS=100000", "SHELL_JOB=1"},
			script: func(h *harness, send func(gpuwarden.Notice)) {
				waitEvent(t, h.events, "commit:")
				send(gpuwarden.Notice{Provider: "aws", Kind: gpuwarden.NoticePreemption, At: in(2 * time.Minute), ID: "aws-spot-instance-action"})
			},
			result: gpuwarden.ResultPreempted, classes: []string{"preempted"}, actions: []string{"stop"}, signals: 0,
			check: func(t *testing.T, h *harness, r gpuwarden.RunReport) {
				if s := r.Notices[0].Signal; !strings.Contains(s, "sent SIGTERM with the whole") {
					t.Errorf("signal = %q", s)
				}
				if a := r.Attempts[0]; a.Signal == "SIGUSR1" || !strings.Contains(h.out.String(), "terminated at step") {
					t.Errorf("attempt %+v: the job died of the checkpoint signal instead of stopping on SIGTERM\n%s", a, h.out.String())
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, tt.env...)
			h.s.MaintenanceLead = tt.lead
			if slices.Contains(tt.env, "SHELL_JOB=1") {
				// A Go program catches SIGUSR1 at start (its runtime ignores
				// it), so a job that does not is a shell, as so many are.
				h.s.Argv = []string{"/bin/sh", "-c", shellTrainer}
			}
			report, heard := noticeRun(t, h, func(send func(gpuwarden.Notice)) { tt.script(h, send) })
			if report.Result != tt.result || !reflect.DeepEqual(classes(report), tt.classes) {
				t.Fatalf("result %s attempts %v, want %s %v (%s)\n%s", report.Result, classes(report), tt.result, tt.classes, report.Why, h.out.String())
			}
			if got := actions(report); !reflect.DeepEqual(got, tt.actions) {
				t.Errorf("actions = %v, want %v: %+v", got, tt.actions, report.Notices)
			}
			if got := signalled(h); tt.signals >= 0 && got != tt.signals {
				t.Errorf("%d checkpoints on signal, want %d\n%s", got, tt.signals, h.out.String())
			}
			if len(heard) < len(report.Notices) {
				t.Errorf("OnNotice heard %d records, the report has %d", len(heard), len(report.Notices))
			}
			if tt.check != nil {
				tt.check(t, h, report)
			}
		})
	}
}

// A job that ends as a notice comes is judged by its own exit: nothing is
// sent to a job already gone, and the attempt counts as ended by itself, so
// a finished job is not "preempted (exit 0)".
func TestStopOfAFinishedJobSendsNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c, err := h.s.resolved()
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{c: &c, events: newNoticeBook(&c), commitCh: make(chan struct{}, 1)}
	p, err := Start(context.Background(), []string{"/bin/sh", "-c", "echo done: step 200"}, nil, "", h.out)
	if err != nil {
		t.Fatal(err)
	}
	if ex := p.Wait(); !ex.OK() {
		t.Fatalf("the job failed: %s", ex)
	}
	ev, _ := r.events.take(gpuwarden.Notice{Provider: "aws", Kind: gpuwarden.NoticePreemption, At: time.Now().Add(time.Minute), ID: "aws-spot-instance-action"})
	cancelled, signalled := r.stop(context.Background(), p, time.Second, ev, c.Log)
	if cancelled || signalled || stopEnding(cancelled, signalled) != endedByItself {
		t.Errorf("stop of a finished job: cancelled %v signalled %v; want neither, and the job's own exit to decide", cancelled, signalled)
	}
	if rec := r.events.records()[0]; !strings.Contains(rec.Detail, "already ended") || rec.Signal != "" {
		t.Errorf("record %+v: want nothing sent and why", rec)
	}
}
