package preempt_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/preempt"
	"github.com/gpuwarden/gpuwarden/preempt/preempttest"
)

// countingSource signals after every poll, so a test can wait for polls
// instead of sleeping.
type countingSource struct {
	preempt.Source
	polls chan struct{}
}

func (c *countingSource) Poll(ctx context.Context) ([]gpuwarden.Notice, error) {
	n, err := c.Source.Poll(ctx)
	select {
	case c.polls <- struct{}{}:
	default:
	}
	return n, err
}

// TestWatchDeliversWithinTwoSeconds announces a notice while Watch runs at
// the agent's 1 s period and requires it within 2 s, once.
func TestWatchDeliversWithinTwoSeconds(t *testing.T) {
	tests := []struct {
		name     string
		start    func() (src preempt.Source, announce func(), closeFn func())
		wantKind string
	}{
		{"aws spot", func() (preempt.Source, func(), func()) {
			f := preempttest.NewAWS()
			return preempt.NewAWS(nil, f.URL), func() { f.Interrupt("terminate", time.Now().Add(2*time.Minute)) }, f.Close
		}, gpuwarden.NoticePreemption},
		{"aws rebalance", func() (preempt.Source, func(), func()) {
			f := preempttest.NewAWS()
			return preempt.NewAWS(nil, f.URL), func() { f.Rebalance(time.Now()) }, f.Close
		}, gpuwarden.NoticeRebalance},
		{"aws scheduled reboot", func() (preempt.Source, func(), func()) {
			f := preempttest.NewAWS()
			return preempt.NewAWS(nil, f.URL), func() {
				f.Schedule(preempttest.AWSEvent{Code: "system-reboot", NotBefore: time.Now().Add(time.Hour).UTC().Format(preempttest.AWSTimeLayout)})
			}, f.Close
		}, gpuwarden.NoticeReboot},
		{"gcp preempted", func() (preempt.Source, func(), func()) {
			f := preempttest.NewGCP()
			return preempt.NewGCP(nil, f.URL), f.Preempt, f.Close
		}, gpuwarden.NoticePreemption},
		{"gcp migration", func() (preempt.Source, func(), func()) {
			f := preempttest.NewGCP()
			return preempt.NewGCP(nil, f.URL), func() { f.Maintenance("MIGRATE_ON_HOST_MAINTENANCE") }, f.Close
		}, gpuwarden.NoticeMigration},
		{"azure preempt", func() (preempt.Source, func(), func()) {
			f := preempttest.NewAzure()
			return preempt.NewAzure(nil, f.URL), func() { f.Preempt(time.Now().Add(30 * time.Second)) }, f.Close
		}, gpuwarden.NoticePreemption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			inner, announce, closeFn := tt.start()
			defer closeFn()
			src := &countingSource{Source: inner, polls: make(chan struct{}, 1)}
			got := make(chan gpuwarden.Notice, 10)
			var errs atomic.Int32
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Go(func() {
				preempt.Watch(ctx, src, time.Second, func(n gpuwarden.Notice) { got <- n },
					func(err error) {
						if err != nil {
							errs.Add(1)
						}
					})
			})
			defer func() { cancel(); wg.Wait() }()

			// Announce mid-run: after the first poll, partway into the period.
			waitPolls(t, src.polls, 1, 3*time.Second)
			time.Sleep(300 * time.Millisecond)
			announced := time.Now()
			announce()

			select {
			case n := <-got:
				lag := time.Since(announced)
				t.Logf("%s delivered %v after the announcement", n.Kind, lag)
				if n.Kind != tt.wantKind {
					t.Errorf("kind = %s, want %s", n.Kind, tt.wantKind)
				}
				if lag > 2*time.Second {
					t.Errorf("delivered after %v, want within 2 s", lag)
				}
			case <-time.After(2 * time.Second):
				t.Fatalf("no notice within 2 s of the announcement")
			}
			// Two more polls still see the notice; neither may deliver it
			// again. The delivering poll signalled before notify ran: drop it.
			select {
			case <-src.polls:
			default:
			}
			waitPolls(t, src.polls, 2, 5*time.Second)
			select {
			case n := <-got:
				t.Errorf("delivered again: %+v", n)
			default:
			}
			if n := errs.Load(); n != 0 {
				t.Errorf("%d poll errors", n)
			}
		})
	}
}

// waitPolls waits for n polls or fails after limit.
func waitPolls(t *testing.T, polls <-chan struct{}, n int, limit time.Duration) {
	t.Helper()
	deadline := time.After(limit)
	for range n {
		select {
		case <-polls:
		case <-deadline:
			t.Fatalf("no poll within %v", limit)
		}
	}
}

// scriptSource answers each poll from a script, then repeats the last answer.
type scriptSource struct {
	mu      sync.Mutex
	answers []answer
	times   []time.Time
}

type answer struct {
	notices []gpuwarden.Notice
	err     error
}

func (s *scriptSource) Provider() string { return "script" }

func (s *scriptSource) Poll(ctx context.Context) ([]gpuwarden.Notice, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.times = append(s.times, time.Now())
	a := s.answers[0]
	if len(s.answers) > 1 {
		s.answers = s.answers[1:]
	}
	return a.notices, a.err
}

func (s *scriptSource) pollTimes() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.times...)
}

func TestWatchKeepsGoingAfterErrors(t *testing.T) {
	boom := errors.New("metadata down")
	spot := gpuwarden.Notice{Provider: "script", Kind: gpuwarden.NoticePreemption, ID: "spot-1"}
	reboot := gpuwarden.Notice{Provider: "script", Kind: gpuwarden.NoticeReboot, ID: "reboot-1"}
	src := &scriptSource{answers: []answer{
		{err: boom},
		{notices: []gpuwarden.Notice{spot}, err: boom}, // partial: deliver anyway
		{err: boom},
		{notices: []gpuwarden.Notice{spot}},
		{notices: []gpuwarden.Notice{spot, reboot}},
	}}
	var mu sync.Mutex
	var got []string
	var gotErrs []error
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		defer close(done)
		preempt.Watch(ctx, src, 20*time.Millisecond, func(n gpuwarden.Notice) {
			mu.Lock()
			got = append(got, n.ID)
			if len(got) == 2 {
				cancel()
			}
			mu.Unlock()
		}, func(err error) {
			mu.Lock()
			gotErrs = append(gotErrs, err)
			mu.Unlock()
		})
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not deliver both notices and return")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0] != "spot-1" || got[1] != "reboot-1" {
		t.Errorf("delivered %v, want [spot-1 reboot-1], each once", got)
	}
	// onPoll hears every poll that ran to its end: the 3 failures, then the
	// success between them and the poll that delivered the reboot.
	if len(gotErrs) != 4 || !errors.Is(gotErrs[0], boom) || !errors.Is(gotErrs[2], boom) || gotErrs[3] != nil {
		t.Errorf("poll outcomes %v, want the 3 failures and one success", gotErrs)
	}
	// Failures back off: the gap after the third failure exceeds the first.
	ts := src.pollTimes()
	if len(ts) < 4 {
		t.Fatalf("only %d polls", len(ts))
	}
	first, third := ts[1].Sub(ts[0]), ts[3].Sub(ts[2])
	if third <= first {
		t.Errorf("gap after 3rd failure %v not longer than after 1st %v", third, first)
	}
}

// TestWatchRedelivery runs Watch over a scripted sequence of polls, one step
// each, and checks which notices reach notify: new IDs, an At that moves
// earlier or becomes known, and one cancellation of a delivered ID.
func TestWatchRedelivery(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	spot := func(at time.Time) gpuwarden.Notice {
		return gpuwarden.Notice{Provider: "script", Kind: gpuwarden.NoticePreemption, At: at, ID: "spot"}
	}
	reboot := func(at time.Time, canceled bool) gpuwarden.Notice {
		return gpuwarden.Notice{Provider: "script", Kind: gpuwarden.NoticeReboot, At: at, ID: "reboot", Canceled: canceled}
	}
	steps := []struct {
		name    string
		poll    []gpuwarden.Notice
		deliver []gpuwarden.Notice
	}{
		{"new id", []gpuwarden.Notice{spot(t0)}, []gpuwarden.Notice{spot(t0)}},
		{"same again", []gpuwarden.Notice{spot(t0)}, nil},
		{"At later, as AEMM moves it", []gpuwarden.Notice{spot(t0.Add(time.Second))}, nil},
		{"At earlier than delivered", []gpuwarden.Notice{spot(t0.Add(-10 * time.Second))}, []gpuwarden.Notice{spot(t0.Add(-10 * time.Second))}},
		{"back to the old At, later than delivered", []gpuwarden.Notice{spot(t0)}, nil},
		{"second id without a time", []gpuwarden.Notice{spot(t0), reboot(time.Time{}, false)}, []gpuwarden.Notice{reboot(time.Time{}, false)}},
		{"its time becomes known", []gpuwarden.Notice{reboot(t0.Add(time.Hour), false)}, []gpuwarden.Notice{reboot(t0.Add(time.Hour), false)}},
		{"its time unknown again", []gpuwarden.Notice{reboot(time.Time{}, false)}, nil},
		{"canceled", []gpuwarden.Notice{reboot(t0.Add(time.Hour), true)}, []gpuwarden.Notice{reboot(t0.Add(time.Hour), true)}},
		{"canceled again", []gpuwarden.Notice{reboot(t0.Add(time.Hour), true)}, nil},
		{"canceled, never delivered", []gpuwarden.Notice{{Provider: "script", Kind: gpuwarden.NoticeReboot, ID: "ghost", Canceled: true}}, nil},
		{"same id after its cancellation is new", []gpuwarden.Notice{reboot(t0.Add(2*time.Hour), false)}, []gpuwarden.Notice{reboot(t0.Add(2*time.Hour), false)}},
	}
	var answers []answer
	var want []gpuwarden.Notice
	for _, s := range steps {
		answers = append(answers, answer{notices: s.poll})
		want = append(want, s.deliver...)
	}
	answers = append(answers, answer{}) // then quiet, repeated
	src := &scriptSource{answers: answers}
	var mu sync.Mutex
	var got []gpuwarden.Notice
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		preempt.Watch(ctx, src, time.Millisecond, func(n gpuwarden.Notice) {
			mu.Lock()
			got = append(got, n)
			mu.Unlock()
		})
	}()
	// Wait until every step was polled and two quiet polls followed.
	deadline := time.Now().Add(10 * time.Second)
	for len(src.pollTimes()) < len(steps)+2 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d polls", len(src.pollTimes()))
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	equalNotices(t, got, want)
}

func TestWatchReturnsWhenContextEnds(t *testing.T) {
	src := &scriptSource{answers: []answer{{}}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		preempt.Watch(ctx, src, time.Hour, func(gpuwarden.Notice) {})
	}()
	// Wait for the immediate first poll, then cancel during the hour's wait.
	deadline := time.Now().Add(2 * time.Second)
	for len(src.pollTimes()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("Watch did not poll at once")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("Watch did not return after cancel")
	}
}
