package sqlite

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// tick is a plausible sample with n GPUs, its values derived from the time
// so that ticks differ.
func tick(at time.Time, n int) gpuwarden.NodeSample {
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

func TestSamplesRoundTrip(t *testing.T) {
	ctx := context.Background()
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.db"))
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.FixedZone("CET", 3600))
	a := tick(t0.Add(250*time.Millisecond), 2)
	b := tick(t0.Add(time.Second), 2)
	b.Host.Processes, b.Host.CPUPerCore = nil, nil // empty lists stay empty
	b.GPUs[1].ThrottleReasons, b.GPUs[1].Processes = nil, nil
	c := tick(t0.Add(2*time.Second), 0) // a CPU-only tick
	d := tick(t0.Add(3*time.Second), 2)
	d.Host.CPUPercent, d.GPUs[0].PowerWatts = math.NaN(), math.Inf(1)
	for _, s := range []gpuwarden.NodeSample{a, b, c, d} {
		if err := l.RecordSample(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	dWant := at1s(d)
	dWant.Host.CPUPercent, dWant.GPUs[0].PowerWatts = 0, 0

	tests := []struct {
		name  string
		since time.Time
		want  []gpuwarden.NodeSample
	}{
		{"all", time.Time{}, []gpuwarden.NodeSample{at1s(a), at1s(b), at1s(c), dWant}},
		{"since a tick", t0.Add(time.Second), []gpuwarden.NodeSample{at1s(b), at1s(c), dWant}},
		{"between ticks", t0.Add(1500 * time.Millisecond), []gpuwarden.NodeSample{at1s(c), dWant}},
		{"after the last", t0.Add(time.Hour), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := l.Samples(ctx, tt.since)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Samples =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestRecordSampleSameSecondReplaces(t *testing.T) {
	ctx := context.Background()
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.db"))
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	first, second := tick(t0, 2), tick(t0.Add(900*time.Millisecond), 2)
	second.Host.CPUPercent, second.GPUs[1].UtilPercent = 99, 98
	for _, s := range []gpuwarden.NodeSample{first, second} {
		if err := l.RecordSample(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	got, err := l.Samples(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	if want := []gpuwarden.NodeSample{at1s(second)}; !reflect.DeepEqual(got, want) {
		t.Errorf("Samples = %+v, want %+v", got, want)
	}
	if err := l.RecordSample(ctx, gpuwarden.NodeSample{}); gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
		t.Errorf("RecordSample(no time) = %v, want an invalid error", err)
	}
}

// compactFixture records ticks in two old minutes and in the last hour, for
// a Compact at now.
var (
	now     = time.Date(2026, 11, 29, 12, 0, 30, 0, time.UTC)
	minuteA = time.Date(2026, 11, 29, 10, 58, 0, 0, time.UTC)
	minuteB = time.Date(2026, 11, 29, 10, 59, 0, 0, time.UTC)
)

// oldTicks are three ticks of minute A whose averages are exact, and one of
// minute B.
func oldTicks() []gpuwarden.NodeSample {
	mk := func(off time.Duration, cpu, util, temp float64, mem uint64, sm int, sessions int,
		cores []float64, procs, throttle []string, gp []gpuwarden.GPUProcess) gpuwarden.NodeSample {
		s := tick(minuteA.Add(off), 2)
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
		tick(minuteB.Add(59*time.Second), 2),
	}
}

// rollupA is minute A as Compact averages it.
func rollupA() gpuwarden.NodeSample {
	s := at1s(tick(minuteA, 2))
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
	s := at1s(tick(minuteB.Add(59*time.Second), 2))
	s.Time, s.Host.Time, s.GPUs[0].Time, s.GPUs[1].Time = minuteB, minuteB, minuteB, minuteB
	return s
}

func TestCompact(t *testing.T) {
	ctx := context.Background()
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.db"))
	// The cutoff is 11:00:00, the minute an hour before now starts.
	recent := []gpuwarden.NodeSample{tick(time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC), 2), tick(now, 2)}
	for _, s := range append(oldTicks(), recent...) {
		if err := l.RecordSample(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	want := []gpuwarden.NodeSample{rollupA(), rollupB(), at1s(recent[0]), at1s(recent[1])}
	for run := 1; run <= 2; run++ { // the second run must change nothing
		if err := l.Compact(ctx, now); err != nil {
			t.Fatal(err)
		}
		got, err := l.Samples(ctx, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("run %d: Samples =\n%+v\nwant\n%+v", run, got, want)
		}
	}
	counts := map[string]int{}
	for _, table := range []string{"host_samples", "gpu_samples", "host_rollups", "gpu_rollups"} {
		var n int
		if err := l.db.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		counts[table] = n
	}
	if want := map[string]int{"host_samples": 2, "gpu_samples": 4, "host_rollups": 2, "gpu_rollups": 4}; !reflect.DeepEqual(counts, want) {
		t.Errorf("rows = %v, want %v", counts, want)
	}

	// Samples since a time between the rollups starts at the next minute.
	got, err := l.Samples(ctx, minuteA.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if want := want[1:]; !reflect.DeepEqual(got, want) {
		t.Errorf("Samples(since minute A + 1s) =\n%+v\nwant\n%+v", got, want)
	}
}

func TestCompactMergesLateTick(t *testing.T) {
	ctx := context.Background()
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.db"))
	for _, s := range oldTicks()[:3] {
		if err := l.RecordSample(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Compact(ctx, now); err != nil {
		t.Fatal(err)
	}
	// A tick of minute A after A was rolled up: its average must weigh it as
	// one tick of four, not replace the three.
	late := tick(minuteA.Add(30*time.Second), 2)
	late.GPUs[0].UtilPercent, late.Host.CPUPercent, late.Host.Sessions = 70, 6, 0
	late.Host.Processes = []string{"d"}
	if err := l.RecordSample(ctx, late); err != nil {
		t.Fatal(err)
	}
	if err := l.Compact(ctx, now); err != nil {
		t.Fatal(err)
	}
	got, err := l.Samples(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
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

func TestCompactPrunesAfter30Days(t *testing.T) {
	ctx := context.Background()
	day := 24 * time.Hour
	tests := []struct {
		name string
		// ticks are offsets before the first Compact's now; compacts are
		// offsets after it.
		ticks    []time.Duration
		compacts []time.Duration
		want     []time.Duration // minutes kept, as offsets before now
	}{
		{"older than 30 days goes at once", []time.Duration{31 * day, 29 * day, 2 * time.Hour}, []time.Duration{0},
			[]time.Duration{29 * day, 2 * time.Hour}},
		{"a rollup ages out later", []time.Duration{29 * day, 2 * time.Hour}, []time.Duration{0, 2 * day},
			[]time.Duration{2 * time.Hour}},
		{"exactly 30 days is kept", []time.Duration{30 * day}, []time.Duration{0}, []time.Duration{30 * day}},
		{"everything ages out", []time.Duration{2 * time.Hour}, []time.Duration{0, 31 * day}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := openTest(t, filepath.Join(t.TempDir(), "ledger.db"))
			now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
			for _, off := range tt.ticks {
				if err := l.RecordSample(ctx, tick(now.Add(-off), 1)); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range tt.compacts {
				if err := l.Compact(ctx, now.Add(c)); err != nil {
					t.Fatal(err)
				}
			}
			samples, err := l.Samples(ctx, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			var got []time.Duration
			for _, s := range samples {
				got = append(got, now.Sub(s.Time))
				if len(s.GPUs) != 1 {
					t.Errorf("tick %v has %d GPUs, want 1", s.Time, len(s.GPUs))
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("kept %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCompactShrinksFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l := openTest(t, path)
	start := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	// Long process lists make big rows, so that few ticks fill many pages.
	var procs []string
	for i := range 1000 {
		procs = append(procs, fmt.Sprintf("worker-%04d", i))
	}
	for i := range 200 {
		s := tick(start.Add(time.Duration(i)*time.Second), 8)
		s.Host.Processes = procs
		if err := l.RecordSample(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	pages := func() (free, total int64) {
		t.Helper()
		if err := l.db.QueryRow("PRAGMA freelist_count").Scan(&free); err != nil {
			t.Fatal(err)
		}
		if err := l.db.QueryRow("PRAGMA page_count").Scan(&total); err != nil {
			t.Fatal(err)
		}
		return free, total
	}
	_, before := pages()
	if before < 2*vacuumMinFreePages {
		t.Fatalf("the fixture fills %d pages, too few to test the vacuum", before)
	}
	// Everything ages out: the whole file becomes free pages, which the
	// vacuum must hand back.
	if err := l.Compact(ctx, start.Add(RollupRetention+2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	free, after := pages()
	if free != 0 || after*4 > before {
		t.Errorf("after Compact: %d free of %d pages, was %d pages; want no free pages and a quarter of the size", free, after, before)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d pages before Compact, %d after; file %d bytes", before, after, fi.Size())
	if fi.Size() > after*4096 {
		t.Errorf("file is %d bytes, want at most %d pages", fi.Size(), after)
	}
}

func BenchmarkRecordSample8GPUs(b *testing.B) {
	ctx := context.Background()
	l := openTest(b, filepath.Join(b.TempDir(), "ledger.db"))
	s := tick(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC), 8)
	s.Host.CPUPerCore = make([]float64, 64)
	for i := range s.Host.CPUPerCore {
		s.Host.CPUPerCore[i] = float64(i) + 0.5
	}
	for range 150 {
		s.Host.Processes = append(s.Host.Processes, "kworker/u64:1")
	}
	b.ReportAllocs()
	for b.Loop() {
		s.Time = s.Time.Add(time.Second)
		if err := l.RecordSample(ctx, s); err != nil {
			b.Fatal(err)
		}
	}
}
