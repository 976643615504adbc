package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// sink is a notifier that keeps what it got and fails on demand.
type sink struct {
	mu   sync.Mutex
	got  []gpuwarden.Event
	fail error
	wait chan struct{} // when set, Notify blocks until it is closed
}

func (s *sink) Notify(ctx context.Context, e gpuwarden.Event) error {
	if s.wait != nil {
		<-s.wait
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, e)
	return s.fail
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

// clock is a settable time for Dedup.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestDedup(t *testing.T) {
	keyed := gpuwarden.Event{Kind: "budget", Message: "80% spent", Key: "budget-80-2026-11"}
	sameKeyOtherText := gpuwarden.Event{Kind: "budget", Message: "81% spent", Key: "budget-80-2026-11"}
	unkeyed := gpuwarden.Event{Kind: "idle", Message: "stopping in 10 min"}
	otherText := gpuwarden.Event{Kind: "idle", Message: "stopping in 5 min"}
	otherKind := gpuwarden.Event{Kind: "diagnosis", Message: "stopping in 10 min"}

	type step struct {
		after    time.Duration // clock advance before the send
		event    gpuwarden.Event
		wantSent bool
	}
	tests := []struct {
		name   string
		window time.Duration
		steps  []step
	}{
		{"same key within the window", 0, []step{
			{0, keyed, true},
			{59 * time.Minute, sameKeyOtherText, false},
		}},
		{"same key after the window", 0, []step{
			{0, keyed, true},
			{time.Hour, keyed, true},
			{time.Minute, keyed, false},
		}},
		{"no key: kind and message", 0, []step{
			{0, unkeyed, true},
			{time.Second, unkeyed, false},
			{0, otherText, true},
			{0, otherKind, true},
		}},
		{"custom window", 10 * time.Second, []step{
			{0, unkeyed, true},
			{9 * time.Second, unkeyed, false},
			{time.Second, unkeyed, true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := &sink{}
			clk := &clock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
			d := &Dedup{Next: next, Window: tt.window, Now: clk.now}
			for i, s := range tt.steps {
				clk.add(s.after)
				before := next.count()
				if err := d.Notify(context.Background(), s.event); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if sent := next.count() > before; sent != s.wantSent {
					t.Errorf("step %d (%q at +%s): sent = %v, want %v", i, s.event.Message, s.after, sent, s.wantSent)
				}
			}
		})
	}
}

func TestDedupFailureIsNotRemembered(t *testing.T) {
	next := &sink{fail: errors.New("endpoint down")}
	clk := &clock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	d := &Dedup{Next: next, Now: clk.now}
	e := gpuwarden.Event{Kind: "idle", Message: "stopping"}
	if err := d.Notify(context.Background(), e); err == nil {
		t.Fatal("want the failure passed up")
	}
	next.mu.Lock()
	next.fail = nil
	next.mu.Unlock()
	clk.add(time.Second)
	if err := d.Notify(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	if got := next.count(); got != 2 {
		t.Errorf("sends = %d, want 2: a failed send must not block the retry", got)
	}
}

func TestDedupBurstSendsOnce(t *testing.T) {
	next := &sink{wait: make(chan struct{})}
	d := &Dedup{Next: next}
	e := gpuwarden.Event{Kind: "preemption", Key: "aws-spot-i-123"}
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if err := d.Notify(context.Background(), e); err != nil {
				t.Error(err)
			}
		})
	}
	time.Sleep(20 * time.Millisecond) // let the burst pile up behind the first send
	close(next.wait)
	wg.Wait()
	if got := next.count(); got != 1 {
		t.Errorf("sends = %d, want 1", got)
	}
}

func TestDedupForgetsExpiredKeys(t *testing.T) {
	clk := &clock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	d := &Dedup{Next: &sink{}, Window: time.Minute, Now: clk.now}
	for i := range 100 {
		_ = d.Notify(context.Background(), gpuwarden.Event{Key: fmt.Sprint(i)})
	}
	clk.add(2 * time.Minute)
	_ = d.Notify(context.Background(), gpuwarden.Event{Key: "new"})
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.sent) != 1 {
		t.Errorf("remembered keys = %d, want 1 after the window passed", len(d.sent))
	}
}

func TestMultiCollectsFailures(t *testing.T) {
	ok1, ok2 := &sink{}, &sink{}
	bad := &sink{fail: errors.New("webhook down")}
	m := Multi{ok1, bad, nil, ok2}
	err := m.Notify(context.Background(), gpuwarden.Event{Kind: "idle", Message: "x"})
	if err == nil || !strings.Contains(err.Error(), "notifier 2: webhook down") {
		t.Errorf("error = %v, want notifier 2's failure", err)
	}
	if !errors.Is(err, bad.fail) {
		t.Errorf("error %v does not wrap the failure", err)
	}
	for i, s := range []*sink{ok1, bad, ok2} {
		if s.count() != 1 {
			t.Errorf("notifier %d got %d events, want 1", i, s.count())
		}
	}
	if err := (Multi{ok1, ok2}).Notify(context.Background(), gpuwarden.Event{}); err != nil {
		t.Errorf("all ok: error = %v, want nil", err)
	}
}

func TestMultiRunsInParallel(t *testing.T) {
	gate := make(chan struct{})
	a, b := &sink{wait: gate}, &sink{}
	done := make(chan error)
	go func() { done <- (Multi{a, b}).Notify(context.Background(), gpuwarden.Event{}) }()
	// b finishes while a still blocks: they run side by side.
	deadline := time.Now().Add(5 * time.Second)
	for b.count() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if b.count() != 1 {
		t.Error("the second notifier waited for the first")
	}
	close(gate)
	if err := <-done; err != nil {
		t.Error(err)
	}
}

func TestWall(t *testing.T) {
	e := gpuwarden.Event{Kind: "idle-shutdown", Severity: gpuwarden.SeverityCritical,
		Message: "stopping in 5 min; busy: \x1b]0;pwn\x07vim"}
	var gotName string
	var gotArgs []string
	var gotStdin string
	w := &Wall{
		LookPath: func(string) (string, error) { return "/usr/bin/wall", nil },
		Run: func(_ context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
			gotName, gotArgs, gotStdin = name, args, string(stdin)
			return nil, nil
		},
	}
	if err := w.Notify(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	want := "gpuwarden [CRITICAL] idle-shutdown: stopping in 5 min; busy:  ]0;pwn vim\n"
	if gotName != "/usr/bin/wall" || len(gotArgs) != 0 || gotStdin != want {
		t.Errorf("ran %q %q with stdin %q, want /usr/bin/wall with stdin %q", gotName, gotArgs, gotStdin, want)
	}
}

func TestWallMissingIsSkipped(t *testing.T) {
	var logs strings.Builder
	ran := false
	w := &Wall{
		LookPath: func(string) (string, error) { return "", exec.ErrNotFound },
		Run: func(context.Context, []byte, string, ...string) ([]byte, error) {
			ran = true
			return nil, nil
		},
		Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if err := w.Notify(context.Background(), gpuwarden.Event{Message: "x"}); err != nil {
		t.Errorf("error = %v, want nil when wall is missing", err)
	}
	if ran || !strings.Contains(logs.String(), "wall not installed") {
		t.Errorf("ran = %v, log = %q; want no run and a debug note", ran, logs.String())
	}
}

func TestWallFailure(t *testing.T) {
	w := &Wall{
		LookPath: func(string) (string, error) { return "/usr/bin/wall", nil },
		Run: func(context.Context, []byte, string, ...string) ([]byte, error) {
			return []byte("wall: cannot get tty name\n"), errors.New("exit status 1")
		},
	}
	err := w.Notify(context.Background(), gpuwarden.Event{Message: "x"})
	if err == nil || err.Error() != "wall: exit status 1: wall: cannot get tty name" {
		t.Errorf("error = %v", err)
	}
}

func TestRunCommandFeedsStdin(t *testing.T) {
	if _, err := exec.LookPath("cat"); err != nil {
		t.Skip("no cat")
	}
	out, err := runCommand(context.Background(), []byte("hello\n"), "cat")
	if err != nil || string(out) != "hello\n" {
		t.Errorf("runCommand(cat) = %q, %v", out, err)
	}
}
