package ledgertest

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

func testEventDedup(t *testing.T, s *store) {
	ctx := context.Background()
	at := time.Date(2026, 11, 29, 10, 0, 0, int(123*time.Millisecond), time.UTC)
	alert := gpuwarden.Event{Time: at, Kind: "budget", Severity: gpuwarden.SeverityWarning,
		Message: "80% of the month's budget spent", Key: "budget-actual-80-2026-11",
		Data: map[string]string{"spent": "800.00", "limit": "1000.00"}}
	info := gpuwarden.Event{Time: at.Add(time.Second), Kind: "idle", Severity: gpuwarden.SeverityInfo, Message: "idle"}
	steps := []struct {
		name   string
		reopen bool
		event  gpuwarden.Event
		want   bool
	}{
		{"first keyed event", false, alert, true},
		{"same key again", false, alert, false},
		{"same key, other text", false, gpuwarden.Event{Time: at.Add(time.Hour), Kind: "budget", Message: "again", Key: alert.Key}, false},
		{"same key after restart", true, alert, false},
		{"no key", false, info, true},
		{"no key again", false, info, true},
		{"new key after restart", true, gpuwarden.Event{Time: at.Add(2 * time.Second), Kind: "budget", Key: "budget-actual-100-2026-11"}, true},
	}
	for _, st := range steps {
		if st.reopen {
			s.restart()
		}
		got, err := s.l.RecordEvent(ctx, st.event)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got != st.want {
			t.Errorf("%s: RecordEvent = %v, want %v", st.name, got, st.want)
		}
	}
	got, err := s.l.Events(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	// Newest first, and here also the latest recorded first: each Seq below
	// the one before it.
	for i := range got {
		if got[i].Seq <= 0 || i > 0 && got[i].Seq >= got[i-1].Seq {
			t.Errorf("Events Seq = %v, want positive and decreasing", seqs(got))
			break
		}
	}
	if want := []gpuwarden.Event{steps[6].event, info, info, alert}; !reflect.DeepEqual(withoutSeq(got), want) {
		t.Errorf("Events =\n%+v\nwant\n%+v", got, want)
	}
}

// seqs are the sequence numbers of events.
func seqs(events []gpuwarden.Event) []int64 {
	var out []int64
	for _, e := range events {
		out = append(out, e.Seq)
	}
	return out
}

// withoutSeq is events with Seq cleared, for comparing with events as
// recorded: the numbers are the ledger's to choose, and PostgreSQL skips
// the ones a refused duplicate drew.
func withoutSeq(events []gpuwarden.Event) []gpuwarden.Event {
	out := append([]gpuwarden.Event(nil), events...)
	for i := range out {
		out[i].Seq = 0
	}
	return out
}

func testEventsAfter(t *testing.T, s *store) {
	ctx := context.Background()
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	// Recorded out of time order, with a refused duplicate in the middle,
	// and the last after a restart: EventsAfter follows recording.
	steps := []struct {
		reopen bool
		event  gpuwarden.Event
	}{
		{false, gpuwarden.Event{Time: at.Add(2 * time.Second), Kind: "k", Message: "a", Key: "once"}},
		{false, gpuwarden.Event{Time: at, Kind: "k", Message: "b"}},
		{false, gpuwarden.Event{Time: at, Kind: "k", Message: "refused", Key: "once"}},
		{false, gpuwarden.Event{Time: at.Add(time.Second), Kind: "k", Message: "c", Data: map[string]string{"x": "1"}}},
		{true, gpuwarden.Event{Time: at.Add(-time.Hour), Kind: "k", Message: "d"}},
	}
	for _, st := range steps {
		if st.reopen {
			s.restart()
		}
		if _, err := s.l.RecordEvent(ctx, st.event); err != nil {
			t.Fatal(err)
		}
	}
	all, err := s.l.EventsAfter(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	want := []gpuwarden.Event{steps[0].event, steps[1].event, steps[3].event, steps[4].event}
	if !reflect.DeepEqual(withoutSeq(all), want) {
		t.Fatalf("EventsAfter(0) =\n%+v\nwant\n%+v", all, want)
	}
	for i := range all {
		if all[i].Seq <= 0 || i > 0 && all[i].Seq <= all[i-1].Seq {
			t.Fatalf("EventsAfter(0) Seq = %v, want positive and increasing", seqs(all))
		}
	}
	// Events and EventsAfter number an event alike.
	newest, err := s.l.Events(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(newest) != 1 || newest[0].Seq != all[0].Seq {
		t.Errorf("Events(1) = %+v, want the event with Seq %d (the newest by time)", newest, all[0].Seq)
	}
	tests := []struct {
		name  string
		after int64
		limit int
		want  []gpuwarden.Event
	}{
		{"limit", 0, 2, all[:2]},
		{"after the first", all[0].Seq, 100, all[1:]},
		{"after the second, limited", all[1].Seq, 1, all[2:3]},
		{"after a gap", all[1].Seq + 1, 100, eventsAbove(all, all[1].Seq+1)},
		{"after the last", all[3].Seq, 100, nil},
		{"zero limit", 0, 0, nil},
		{"negative limit", 0, -1, nil},
	}
	for _, tt := range tests {
		got, err := s.l.EventsAfter(ctx, tt.after, tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: EventsAfter(%d, %d) =\n%+v\nwant\n%+v", tt.name, tt.after, tt.limit, got, tt.want)
		}
	}
}

// eventsAbove are the events whose Seq is above seq.
func eventsAbove(events []gpuwarden.Event, seq int64) []gpuwarden.Event {
	var out []gpuwarden.Event
	for _, e := range events {
		if e.Seq > seq {
			out = append(out, e)
		}
	}
	return out
}

func testEventsOrder(t *testing.T, s *store) {
	ctx := context.Background()
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	// Recorded out of time order, two in the same millisecond.
	for i, off := range []time.Duration{2, 0, 1, 1} {
		e := gpuwarden.Event{Time: at.Add(off * time.Second), Kind: "k", Message: fmt.Sprint(i)}
		if _, err := s.l.RecordEvent(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		limit int
		want  []string
	}{
		{0, nil},
		{-1, nil},
		{1, []string{"0"}},
		{3, []string{"0", "3", "2"}},
		{10, []string{"0", "3", "2", "1"}},
	}
	for _, tt := range tests {
		events, err := s.l.Events(ctx, tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range events {
			got = append(got, e.Message)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Events(%d) = %q, want %q", tt.limit, got, tt.want)
		}
	}
}

func testState(t *testing.T, s *store) {
	ctx := context.Background()
	for _, kv := range [][2]string{{"idle.since", "2026-11-29T10:00:00Z"}, {"budget.spent", "100"}, {"budget.spent", "250"}, {"empty", ""}} {
		if err := s.l.SetState(ctx, kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	s.restart()
	tests := []struct {
		key   string
		want  string
		found bool
	}{
		{"idle.since", "2026-11-29T10:00:00Z", true},
		{"budget.spent", "250", true},
		{"empty", "", true},
		{"missing", "", false},
	}
	for _, tt := range tests {
		got, found, err := s.l.State(ctx, tt.key)
		if err != nil {
			t.Fatal(err)
		}
		if got != tt.want || found != tt.found {
			t.Errorf("State(%q) = %q, %v; want %q, %v", tt.key, got, found, tt.want, tt.found)
		}
	}
}

func testConcurrent(t *testing.T, s *store) {
	ctx := context.Background()
	l := s.l
	start := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	const writers, ticks = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range writers {
		wg.Add(4)
		go func() {
			defer wg.Done()
			for i := range ticks {
				if err := l.RecordSample(ctx, Tick(start.Add(time.Duration(w*ticks+i)*time.Second), 2)); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := range ticks {
				if _, err := l.RecordEvent(ctx, gpuwarden.Event{Time: start, Kind: "k", Key: fmt.Sprint(i)}); err != nil {
					errs <- err
					return
				}
				if _, err := l.Events(ctx, 5); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := range ticks {
				if err := l.SetState(ctx, "writer", fmt.Sprint(w, i)); err != nil {
					errs <- err
					return
				}
				if _, _, err := l.State(ctx, "writer"); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range ticks / 5 {
				if _, err := l.Samples(ctx, start); err != nil {
					errs <- err
					return
				}
				// Far enough ahead that Compact rolls up whatever the
				// writers have written so far: it must lose no tick.
				if err := l.Compact(ctx, start.Add(2*time.Hour)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	events, err := l.Events(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(events), ticks; got != want {
		t.Errorf("len(Events) = %d, want %d (keys deduplicated across writers)", got, want)
	}
	// Every tick either still at full resolution or counted in a rollup:
	// after a last Compact all 100 seconds are two minutes' averages whose
	// mean CPU is the mean of the ticks'.
	if err := l.Compact(ctx, start.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	got := samples(t, l, start)
	var sum, wantSum float64
	for i := range writers * ticks {
		if i < 60 {
			wantSum += float64(i) / 60
		} else {
			wantSum += float64(i-60) / 40
		}
	}
	for _, x := range got {
		sum += x.Host.CPUPercent
		if len(x.GPUs) != 2 {
			t.Errorf("tick %v has %d GPUs, want 2", x.Time, len(x.GPUs))
		}
	}
	if len(got) != 2 || !near(sum, wantSum) {
		t.Errorf("after Compact: %d rollups, CPU means summing to %v; want 2 summing to %v", len(got), sum, wantSum)
	}
}

func near(a, b float64) bool {
	d := a - b
	return d < 1e-9 && d > -1e-9
}

// testEventsAfterConcurrent ships events as an agent does, following
// EventsAfter with a cursor, while several writers record them: every event
// must be shipped, so an event must never become visible below a Seq that
// the cursor has already passed.
func testEventsAfterConcurrent(t *testing.T, s *store) {
	ctx := context.Background()
	l := s.l
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	const writers, each = 8, 60
	var wg sync.WaitGroup
	errs := make(chan error, writers+1)
	done := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				e := gpuwarden.Event{Time: at, Kind: "k", Message: fmt.Sprintf("%d-%d", w, i)}
				if _, err := l.RecordEvent(ctx, e); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	shipped := map[string]int{}
	var after int64
	ship := func() error {
		for {
			evs, err := l.EventsAfter(ctx, after, 7)
			if err != nil {
				return err
			}
			if len(evs) == 0 {
				return nil
			}
			for _, e := range evs {
				if e.Seq <= after {
					return fmt.Errorf("EventsAfter(%d) returned Seq %d", after, e.Seq)
				}
				shipped[e.Message]++
				after = e.Seq
			}
		}
	}
	var shipErr error
	var shipper sync.WaitGroup
	shipper.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := ship(); err != nil {
				shipErr = err
				return
			}
		}
	})
	wg.Wait()
	close(done)
	shipper.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if shipErr != nil {
		t.Fatal(shipErr)
	}
	// What the writers left after the shipper's last look.
	if err := ship(); err != nil {
		t.Fatal(err)
	}
	var missing, twice []string
	for w := range writers {
		for i := range each {
			m := fmt.Sprintf("%d-%d", w, i)
			switch shipped[m] {
			case 0:
				missing = append(missing, m)
			case 1:
			default:
				twice = append(twice, m)
			}
		}
	}
	if len(missing) > 0 || len(twice) > 0 {
		t.Errorf("shipping by EventsAfter while %d writers record: %d of %d events never shipped (%v), %d shipped twice (%v)",
			writers, len(missing), writers*each, missing, len(twice), twice)
	}
}
