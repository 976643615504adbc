package ledgertest

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// RowScanner is one row of a query, as *sql.Row and pgx.Row both are.
type RowScanner interface{ Scan(dest ...any) error }

// MinuteSetsMigration builds a fleet ledger as version 4 left it, with the
// old DDL (migrations 0001–0004 of the backend's migrations folder, as they
// are on disk) and minute rows holding JSON arrays, through exec; open then
// opens it with the current code and gives a way to query it. Version 5 must
// turn the minutes into sets and hour sums in place, so that an old minute
// replayed is still a duplicate and the hours are unchanged.
func MinuteSetsMigration(t *testing.T, exec func(q string, args ...any), open func() (gpuwarden.Fleet, func(q string, args ...any) RowScanner)) {
	t.Helper()
	exec(`CREATE TABLE schema_migrations (version BIGINT NOT NULL PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)`)
	for v, name := range []string{"0001_init.sql", "0002_fleet.sql", "0003_sessions.sql", "0004_identity.sql"} {
		ddl, err := os.ReadFile(filepath.Join("migrations", name))
		if err != nil {
			t.Fatal(err)
		}
		exec(string(ddl))
		exec(`INSERT INTO schema_migrations VALUES ($1, $2, 0)`, v+1, name)
	}
	const h = int64(3_600_000)
	hour := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC).UnixMilli()
	exec(`INSERT INTO nodes (id, project, hostname, owner, provider, region, hourly_price_micros, currency, labels,
		gpus, agent_version, token_id, registered_ms) VALUES ('n1', 'p', 'h', '', '', '', 600, 'USD', '{}', NULL, '', 't', 0)`)
	for _, m := range []struct {
		ms        int64
		samples   int
		cpu       float64
		util, mem any
	}{
		{hour, 60, 10, "[50,70]", "[40,60]"},
		{hour + 60_000, 30, 20, "[30,10]", "[20,25]"},
		{hour + 59*60_000, 60, 5, "[20]", "[10,99]"}, // no utilisation for GPU 1: its memory does not count
		{-60_000, 60, 1, nil, nil},                   // 1969: the last minute of hour -1
	} {
		exec(`INSERT INTO node_minutes VALUES ('n1', $1, $2, $3, $4, $5)`, m.ms, m.samples, m.cpu, m.util, m.mem)
	}
	exec(`INSERT INTO node_hours VALUES ('n1', $1, 3, 1800, 'USD'), ('n1', $2, 1, 600, 'USD'), ('n1', 0, 60, 36000, 'USD')`, hour, -h)
	exec(`INSERT INTO gpu_hours VALUES ('n1', $1, 0, 3, 100), ('n1', $1, 1, 2, 80)`, hour)

	f, queryRow := open()
	var version int
	// Later migrations (6: savings) run too; 5 is the one under test.
	if err := queryRow("SELECT MAX(version) FROM schema_migrations").Scan(&version); err != nil || version < 5 {
		t.Fatalf("schema version %d, %v; want 5 or later", version, err)
	}
	if err := queryRow("SELECT COUNT(*) FROM node_minutes").Scan(new(int)); err == nil {
		t.Error("node_minutes is still there")
	}
	var sets int
	if err := queryRow("SELECT COUNT(*) FROM minute_sets WHERE node_id = 'n1'").Scan(&sets); err != nil || sets != 2 {
		t.Errorf("%d minute sets (%v), want 2: hours %d and %d", sets, err, hour, -h)
	}
	for hr, want := range map[int64]int64{hour: 1 | 1<<1 | 1<<59, -h: 1 << 59} {
		var bits int64
		if err := queryRow("SELECT bits FROM minute_sets WHERE node_id = 'n1' AND hour_ms = $1", hr).Scan(&bits); err != nil || bits != want {
			t.Errorf("hour %d minute set = %b, %v; want %b", hr, bits, err, want)
		}
	}
	type sums struct {
		samples int64
		cpu     float64
	}
	for hr, want := range map[int64]sums{hour: {150, 35}, -h: {60, 1}, 0: {0, 0}} {
		var got sums
		if err := queryRow("SELECT samples, cpu_sum FROM node_hours WHERE node_id = 'n1' AND hour_ms = $1", hr).
			Scan(&got.samples, &got.cpu); err != nil || got != want {
			t.Errorf("hour %d sums = %+v, %v; want %+v", hr, got, err, want)
		}
	}
	for gpu, want := range map[int]float64{0: 70, 1: 85} {
		var got float64
		if err := queryRow("SELECT mem_sum FROM gpu_hours WHERE node_id = 'n1' AND hour_ms = $1 AND gpu = $2", hour, gpu).
			Scan(&got); err != nil || got != want {
			t.Errorf("GPU %d mem_sum = %v, %v; want %v", gpu, got, err, want)
		}
	}

	// A replay of the old minute 0 is a duplicate; minute 2 is new.
	at := time.UnixMilli(hour).UTC()
	ctx := t.Context()
	res, err := f.Ingest(ctx, "n1", gpuwarden.FleetBatch{Minutes: []gpuwarden.NodeMinute{
		{Minute: at, Samples: 60, GPUUtil: []float64{50, 70}},
		{Minute: at.Add(2 * time.Minute), Samples: 60, CPUPercent: 4, GPUUtil: []float64{10, 10}, GPUMemPercent: []float64{1, 2}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if want := (gpuwarden.BatchResult{Minutes: 1, Duplicates: 1}); res != want {
		t.Errorf("replay after the migration = %+v, want %+v", res, want)
	}
	hours, err := f.Hours(ctx, "p", at, at.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(hours) != 1 || hours[0].Minutes != 4 || !reflect.DeepEqual(hours[0].GPUUtil, []float64{27.5, 30}) {
		t.Errorf("hours after the replay = %+v, want 4 minutes, GPU util [27.5 30]", hours)
	}
}
