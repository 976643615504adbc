package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/ledgertest"
)

// The round trip, same-second replacement, averaging, late ticks and pruning
// are ledgertest's, run against this ledger by TestConformance; these tests
// hold what the suite does not check.

func TestSamplesSinceBetweenTicks(t *testing.T) {
	ctx := context.Background()
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.db"))
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	a, b, c := ledgertest.Tick(t0, 2), ledgertest.Tick(t0.Add(time.Second), 2), ledgertest.Tick(t0.Add(2*time.Second), 0)
	for _, s := range []gpuwarden.NodeSample{a, b, c} {
		if err := l.RecordSample(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	got, err := l.Samples(ctx, t0.Add(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if want := []gpuwarden.NodeSample{c}; !reflect.DeepEqual(got, want) {
		t.Errorf("Samples(between ticks) =\n%+v\nwant\n%+v", got, want)
	}
}

func TestRecordSampleNoTimeIsInvalid(t *testing.T) {
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.db"))
	if err := l.RecordSample(context.Background(), gpuwarden.NodeSample{}); gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
		t.Errorf("RecordSample(no time) = %v, want an invalid error", err)
	}
}

// TestCompactRowCounts checks the tables behind Samples: two compacts of
// three ticks in one old minute and one in the next leave one rollup row per
// minute (and GPU) and only the last hour's ticks.
func TestCompactRowCounts(t *testing.T) {
	ctx := context.Background()
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.db"))
	now := time.Date(2026, 11, 29, 12, 0, 30, 0, time.UTC)
	minuteA := time.Date(2026, 11, 29, 10, 58, 0, 0, time.UTC)
	for _, at := range []time.Time{minuteA, minuteA.Add(time.Second), minuteA.Add(2 * time.Second),
		minuteA.Add(time.Minute + 59*time.Second), time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC), now} {
		if err := l.RecordSample(ctx, ledgertest.Tick(at, 2)); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if err := l.Compact(ctx, now); err != nil {
			t.Fatal(err)
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
		s := ledgertest.Tick(start.Add(time.Duration(i)*time.Second), 8)
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
	s := ledgertest.Tick(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC), 8)
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
