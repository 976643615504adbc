// Package ledgertest holds what every gpuwarden.Ledger must do: a
// conformance suite that the SQLite and PostgreSQL ledgers both run, and a
// throwaway PostgreSQL server for tests.
package ledgertest

import (
	"context"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// Opener opens a new, empty ledger for one test, and a reopen func that
// opens the same store again (after the suite closed the first), so that the
// suite can check what survives a restart; the suite closes every ledger it
// is given.
type Opener func(t *testing.T) (l gpuwarden.Ledger, reopen func() gpuwarden.Ledger)

// Run runs the conformance suite against the ledgers open makes.
func Run(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(*testing.T, *store)
	}{
		{"SamplesRoundTrip", testSamplesRoundTrip},
		{"SameSecondReplaces", testSameSecondReplaces},
		{"CompactAveragesIdempotent", testCompact},
		{"CompactMergesLateTick", testCompactLateTick},
		{"CompactPrunesAfter30Days", testPrune},
		{"EventDedupAcrossReopen", testEventDedup},
		{"EventsLimitAndOrder", testEventsOrder},
		{"EventsAfterFollowRecording", testEventsAfter},
		{"EventsAfterMissesNoneUnderConcurrentWriters", testEventsAfterConcurrent},
		{"StateSurvivesReopen", testState},
		{"ConcurrentWriters", testConcurrent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, newStore(t, open))
		})
	}
}

// store is one test's ledger and the way to reopen it.
type store struct {
	t      *testing.T
	l      gpuwarden.Ledger
	reopen func() gpuwarden.Ledger
}

func newStore(t *testing.T, open Opener) *store {
	l, reopen := open(t)
	s := &store{t: t, l: l, reopen: reopen}
	t.Cleanup(func() {
		if s.l != nil {
			_ = s.l.Close()
		}
	})
	return s
}

// restart closes the ledger and opens the same store again.
func (s *store) restart() {
	s.t.Helper()
	err := s.l.Close()
	s.l = nil
	if err != nil {
		s.t.Fatalf("Close: %v", err)
	}
	s.l = s.reopen()
}

func record(t *testing.T, l gpuwarden.Ledger, samples ...gpuwarden.NodeSample) {
	t.Helper()
	for _, s := range samples {
		if err := l.RecordSample(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
}

func samples(t *testing.T, l gpuwarden.Ledger, since time.Time) []gpuwarden.NodeSample {
	t.Helper()
	got, err := l.Samples(context.Background(), since)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// Tick is a plausible sample with n GPUs, its values derived from the time
// so that ticks differ.
func Tick(at time.Time, n int) gpuwarden.NodeSample {
	sec := float64(at.Unix() % 60)
	s := gpuwarden.NodeSample{Time: at, Host: gpuwarden.HostSample{
		Time: at, CPUPercent: sec, CPUPerCore: []float64{sec, 100 - sec},
		IOWaitPercent: 1.5, Load1: 0.25, MemUsedBytes: 64 << 30, MemTotalBytes: 2 << 40,
		DiskReadBps: 1e6, DiskWriteBps: 2e6, NetRxBps: 3e6, NetTxBps: 4e6,
		Sessions: 1, Processes: []string{"python", "sshd"},
	}}
	for i := range n {
		s.GPUs = append(s.GPUs, gpuwarden.Telemetry{
			Index: i, Time: at, UtilPercent: sec, MemUtilPercent: 40, MemUsedBytes: 80 << 30,
			MemTotalBytes: 141 << 30, PowerWatts: 500.5, TempC: 61, SMClockMHz: 1980, MemClockMHz: 3201,
			ThrottleReasons: []string{"sw_power_cap"},
			Processes:       []gpuwarden.GPUProcess{{PID: 4242, Name: "python", UsedBytes: 79 << 30}},
		})
	}
	return s
}

// at1s is s as Samples returns it: every time truncated to the second, UTC.
func at1s(s gpuwarden.NodeSample) gpuwarden.NodeSample {
	t := s.Time.Truncate(time.Second).UTC()
	s.Time, s.Host.Time = t, t
	s.GPUs = append([]gpuwarden.Telemetry(nil), s.GPUs...)
	for i := range s.GPUs {
		s.GPUs[i].Time = t
	}
	return s
}

func testSamplesRoundTrip(t *testing.T, s *store) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.FixedZone("CET", 3600))
	a := Tick(t0.Add(250*time.Millisecond), 2)
	b := Tick(t0.Add(time.Second), 2)
	b.Host.Processes, b.Host.CPUPerCore = nil, nil // empty lists stay empty
	b.GPUs[1].ThrottleReasons, b.GPUs[1].Processes = nil, nil
	c := Tick(t0.Add(2*time.Second), 0) // a CPU-only tick
	d := Tick(t0.Add(3*time.Second), 2)
	d.Host.CPUPercent, d.GPUs[0].PowerWatts = math.NaN(), math.Inf(1)
	record(t, s.l, a, b, c, d)
	wantD := at1s(d)
	wantD.Host.CPUPercent, wantD.GPUs[0].PowerWatts = 0, 0 // NaN and Inf are stored as 0
	tests := []struct {
		name  string
		since time.Time
		want  []gpuwarden.NodeSample
	}{
		{"all", time.Time{}, []gpuwarden.NodeSample{at1s(a), at1s(b), at1s(c), wantD}},
		{"since a second", t0.Add(2 * time.Second), []gpuwarden.NodeSample{at1s(c), wantD}},
		{"since after the last", t0.Add(time.Minute), nil},
	}
	for _, tt := range tests {
		if got := samples(t, s.l, tt.since); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Samples =\n%+v\nwant\n%+v", tt.name, got, tt.want)
		}
	}
	if err := s.l.RecordSample(context.Background(), gpuwarden.NodeSample{}); err == nil {
		t.Error("RecordSample(no time) = nil, want an error")
	}
}

func testSameSecondReplaces(t *testing.T, s *store) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	first, second := Tick(t0.Add(100*time.Millisecond), 2), Tick(t0.Add(900*time.Millisecond), 2)
	second.Host.CPUPercent, second.GPUs[1].UtilPercent = 77, 88
	record(t, s.l, first, second)
	if got, want := samples(t, s.l, time.Time{}), []gpuwarden.NodeSample{at1s(second)}; !reflect.DeepEqual(got, want) {
		t.Errorf("Samples =\n%+v\nwant\n%+v", got, want)
	}
}

// The Compact scenarios: now, and two minutes more than an hour before it.
var (
	now     = time.Date(2026, 11, 29, 12, 0, 30, 0, time.UTC)
	minuteA = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	minuteB = time.Date(2026, 11, 29, 10, 59, 0, 0, time.UTC)
)

// oldTicks are three ticks of minute A whose averages are exact, and one of
// minute B.
func oldTicks() []gpuwarden.NodeSample {
	mk := func(off time.Duration, cpu, util, temp float64, mem uint64, sm int, sessions int,
		cores []float64, procs, throttle []string, gp []gpuwarden.GPUProcess) gpuwarden.NodeSample {
		s := Tick(minuteA.Add(off), 2)
		s.Host.CPUPercent, s.Host.MemUsedBytes, s.Host.Sessions = cpu, mem, sessions
		s.Host.CPUPerCore, s.Host.Processes = cores, procs
		s.GPUs[0].UtilPercent, s.GPUs[0].TempC, s.GPUs[0].SMClockMHz = util, temp, sm
		s.GPUs[0].MemUsedBytes = mem
		s.GPUs[0].ThrottleReasons, s.GPUs[0].Processes = throttle, gp
		return s
	}
	return []gpuwarden.NodeSample{
		mk(0, 1, 10, 50, 100, 1000, 0, []float64{10, 20}, []string{"a"}, nil,
			[]gpuwarden.GPUProcess{{PID: 1, Name: "train", UsedBytes: 10}}),
		mk(time.Second, 2, 20, 60, 200, 1001, 2, []float64{20, 40}, []string{"b"}, []string{"hw_slowdown"},
			[]gpuwarden.GPUProcess{{PID: 1, Name: "train", UsedBytes: 30}}),
		mk(2*time.Second, 3, 60, 70, 301, 1001, 1, []float64{30, 60, 90}, []string{"c", "a"}, []string{"sw_power_cap"},
			[]gpuwarden.GPUProcess{{PID: 2, Name: "eval", UsedBytes: 5}, {PID: 1, Name: "train", UsedBytes: 20}}),
		Tick(minuteB.Add(59*time.Second), 2),
	}
}

// rollupA is minute A as Compact averages it: means, the maximum of
// Sessions, unions of lists, per-core means, each process at its peak.
func rollupA() gpuwarden.NodeSample {
	s := at1s(Tick(minuteA, 2))
	s.Host.CPUPercent, s.Host.MemUsedBytes, s.Host.Sessions = 2, 200, 2
	s.Host.CPUPerCore = []float64{20, 40, 90}
	s.Host.Processes = []string{"a", "b", "c"}
	s.GPUs[0].UtilPercent, s.GPUs[0].TempC, s.GPUs[0].SMClockMHz, s.GPUs[0].MemUsedBytes = 30, 60, 1001, 200
	s.GPUs[0].ThrottleReasons = []string{"hw_slowdown", "sw_power_cap"}
	s.GPUs[0].Processes = []gpuwarden.GPUProcess{{PID: 1, Name: "train", UsedBytes: 30}, {PID: 2, Name: "eval", UsedBytes: 5}}
	s.GPUs[1].UtilPercent = 1 // seconds 0, 1 and 2 of the minute
	return s
}

// rollupB is minute B's single tick, at the minute's start.
func rollupB() gpuwarden.NodeSample {
	s := at1s(Tick(minuteB.Add(59*time.Second), 2))
	s.Time, s.Host.Time, s.GPUs[0].Time, s.GPUs[1].Time = minuteB, minuteB, minuteB, minuteB
	return s
}

func testCompact(t *testing.T, s *store) {
	// The cutoff is 11:00:00, the minute an hour before now starts.
	recent := []gpuwarden.NodeSample{Tick(time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC), 2), Tick(now, 2)}
	record(t, s.l, append(oldTicks(), recent...)...)
	all := []gpuwarden.NodeSample{rollupA(), rollupB(), at1s(recent[0]), at1s(recent[1])}
	for run := 1; run <= 2; run++ { // the second run must change nothing
		if err := s.l.Compact(context.Background(), now); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name  string
			since time.Time
			want  []gpuwarden.NodeSample
		}{
			{"all", time.Time{}, all},
			// Since a time inside a rolled-up minute starts at the next minute.
			{"since minute A + 1s", minuteA.Add(time.Second), all[1:]},
			{"since the full resolution", recent[0].Time, all[2:]},
		}
		for _, tt := range tests {
			if got := samples(t, s.l, tt.since); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("run %d, %s: Samples =\n%+v\nwant\n%+v", run, tt.name, got, tt.want)
			}
		}
	}
}

func testCompactLateTick(t *testing.T, s *store) {
	ctx := context.Background()
	record(t, s.l, oldTicks()[:3]...)
	if err := s.l.Compact(ctx, now); err != nil {
		t.Fatal(err)
	}
	// A tick of minute A after A was rolled up: its average must weigh it as
	// one tick of four, not replace the three.
	late := Tick(minuteA.Add(30*time.Second), 2)
	late.GPUs[0].UtilPercent, late.Host.CPUPercent, late.Host.Sessions = 70, 6, 0
	late.Host.Processes = []string{"d"}
	record(t, s.l, late)
	if err := s.l.Compact(ctx, now); err != nil {
		t.Fatal(err)
	}
	got := samples(t, s.l, time.Time{})
	if len(got) != 1 {
		t.Fatalf("Samples = %d ticks, want 1 rollup", len(got))
	}
	tests := []struct {
		name      string
		got, want any
	}{
		{"gpu 0 util", got[0].GPUs[0].UtilPercent, (30*3 + 70) / 4.0},
		{"cpu", got[0].Host.CPUPercent, (2*3 + 6) / 4.0},
		{"sessions", got[0].Host.Sessions, 2},
		{"processes", got[0].Host.Processes, []string{"a", "b", "c", "d"}},
	}
	for _, tt := range tests {
		if !reflect.DeepEqual(tt.got, tt.want) {
			t.Errorf("%s = %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}

func testPrune(t *testing.T, s *store) {
	ctx := context.Background()
	day := 24 * time.Hour
	// One store, several scenarios, each in its own era so that they do not
	// meet: ticks are offsets before the scenario's now, compacts offsets
	// after it, want the minutes kept as offsets before now.
	tests := []struct {
		name     string
		ticks    []time.Duration
		compacts []time.Duration
		want     []time.Duration
	}{
		{"older than 30 days goes at once", []time.Duration{31 * day, 29 * day, 2 * time.Hour}, []time.Duration{0},
			[]time.Duration{29 * day, 2 * time.Hour}},
		{"a rollup ages out later", []time.Duration{29 * day, 2 * time.Hour}, []time.Duration{0, 2 * day},
			[]time.Duration{2 * time.Hour}},
		{"exactly 30 days is kept", []time.Duration{30 * day}, []time.Duration{0}, []time.Duration{30 * day}},
		{"everything ages out", []time.Duration{2 * time.Hour}, []time.Duration{0, 31 * day}, nil},
	}
	for i, tt := range tests {
		// Scenarios run in order, years apart, so each one's Compact prunes
		// what the earlier ones left and never reaches a later one's ticks.
		now := time.Date(2030+i, 6, 1, 12, 0, 0, 0, time.UTC)
		for _, off := range tt.ticks {
			record(t, s.l, Tick(now.Add(-off), 1))
		}
		for _, c := range tt.compacts {
			if err := s.l.Compact(ctx, now.Add(c)); err != nil {
				t.Fatal(err)
			}
		}
		var got []time.Duration
		for _, x := range samples(t, s.l, now.Add(-60*day)) {
			got = append(got, now.Sub(x.Time))
			if len(x.GPUs) != 1 {
				t.Errorf("%s: tick %v has %d GPUs, want 1", tt.name, x.Time, len(x.GPUs))
			}
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: kept %v, want %v", tt.name, got, tt.want)
		}
	}
}
