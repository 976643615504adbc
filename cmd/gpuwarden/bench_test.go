package main

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden/internal/hdr"
)

// TestScheduleChargesTheWait is the coordinated-omission check: one answer
// stalls 200 ms while requests are due every 10 ms. Timed from the actual
// send, only the stalled request would look slow; timed from the intended
// send, the ones due during the stall carry the wait too.
func TestScheduleChargesTheWait(t *testing.T) {
	start := time.Now().Add(5 * time.Millisecond)
	s := schedule{start: start, measureFrom: start, stopAt: start.Add(400 * time.Millisecond), period: 10 * time.Millisecond}
	calls := 0
	send := func() error {
		calls++
		switch calls {
		case 5:
			time.Sleep(200 * time.Millisecond)
		case 7:
			return errors.New("refused")
		}
		return nil
	}
	var h hdr.Histogram
	var logged []error
	ok, errs, _ := s.drive(send, nil, &h, func(err error) { logged = append(logged, err) })
	if got, want := ok+errs, 40; got != want {
		t.Fatalf("requests: got %d, want %d (one per due time, none skipped)", got, want)
	}
	if errs != 1 || len(logged) != 1 {
		t.Errorf("errors: got %d (%d logged), want 1", errs, len(logged))
	}
	// The 20 requests due during the stall wait 10–200 ms each: 16 of the
	// 40 over 50 ms, so p75 is over it; from the actual send, only one is.
	if h.Quantile(0.75) < 50*time.Millisecond || h.Max() < 190*time.Millisecond {
		t.Errorf("p75 %v, max %v: the wait behind the stall is not charged (want p75 ≥ 50 ms, max ≥ 190 ms)",
			h.Quantile(0.75), h.Max())
	}
}

// TestBenchFleetJSON runs the real binary's load generator briefly on
// SQLite with the ceiling and no warm-up, and checks that what it reports adds up.
func TestBenchFleetJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	r := gw(t, t.TempDir(), "bench", "fleet", "--agents", "50", "--rate", "8", "--warm-up", "0s",
		"--minutes", "2", "--duration", "2s", "--ceiling", "--ceiling-for", "300ms", "--min-rate", "1", "--max-p99", "10s", "-o", "json")
	if r.code != 0 && r.code != 1 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var got benchResult
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("decode %q: %v", r.stdout, err)
	}
	if got.DB != "sqlite" || got.Agents != 50 || got.Offered != 400 {
		t.Errorf("db %q agents %d offered %v, want sqlite, 50, 400", got.DB, got.Agents, got.Offered)
	}
	// 50 agents × 8/s × 2 s, give or take the start spread of one period.
	if got.Heartbeats < 760 || got.Heartbeats > 820 {
		t.Errorf("heartbeats %d, want about 800", got.Heartbeats)
	}
	if got.Achieved <= 0 || got.Achieved > got.Offered*1.05 {
		t.Errorf("achieved %v/s, want in (0, %v]", got.Achieved, got.Offered*1.05)
	}
	l := got.Latency
	if !(l.P50 > 0 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
		t.Errorf("latency percentiles out of order: %+v", l)
	}
	// Batches are spread over 10 s: in 2 s about a fifth of the agents
	// ship one (none of 50 doing so has odds of 0.8^50, 1 in 70,000).
	if got.Batches == 0 || got.Batches > 25 {
		t.Errorf("%d batches measured, want about 10", got.Batches)
	}
	c := got.Ceiling
	if c == nil || c.PerSecond <= 0 || c.Batch != ceilingBatch {
		t.Fatalf("ceiling %+v, want measured in batches of %d", c, ceilingBatch)
	}
	if want := got.Achieved / c.PerSecond; got.CeilingRatio < want*0.999 || got.CeilingRatio > want*1.001 {
		t.Errorf("ceiling ratio %v, want achieved/ceiling = %v", got.CeilingRatio, want)
	}
	if got.WithinBudget != (r.code == 0) {
		t.Errorf("within_budget %v but exit %d", got.WithinBudget, r.code)
	}
}

func TestBenchFleetBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--agents", "0"}, {"--rate", "-1"}, {"--ceiling-for", "0s"}, {"-o", "xml"}} {
		r := gw(t, t.TempDir(), append([]string{"bench", "fleet"}, args...)...)
		if r.code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, r.code, r.stderr)
		}
	}
}
