package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// TestMinuteSetsMigration builds a fleet ledger as version 4 left it, with
// the old DDL (migrations 0001–0004 as they are on disk) and minute rows
// holding JSON arrays, and opens it: version 5 must turn the minutes into
// sets and hour sums in place, so that an old minute replayed is still a
// duplicate and the hours are unchanged.
func TestMinuteSetsMigration(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite", dsn(path))
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, db, `CREATE TABLE schema_migrations (version BIGINT NOT NULL PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)`)
	for v, name := range []string{"0001_init.sql", "0002_fleet.sql", "0003_sessions.sql", "0004_identity.sql"} {
		ddl, err := os.ReadFile(filepath.Join("migrations", name))
		if err != nil {
			t.Fatal(err)
		}
		mustExec(t, db, string(ddl))
		mustExec(t, db, `INSERT INTO schema_migrations VALUES ($1, $2, 0)`, v+1, name)
	}
	const h = int64(3_600_000)
	hour := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC).UnixMilli()
	mustExec(t, db, `INSERT INTO nodes (id, project, hostname, owner, provider, region, hourly_price_micros, currency, labels,
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
		mustExec(t, db, `INSERT INTO node_minutes VALUES ('n1', $1, $2, $3, $4, $5)`, m.ms, m.samples, m.cpu, m.util, m.mem)
	}
	mustExec(t, db, `INSERT INTO node_hours VALUES ('n1', $1, 3, 1800, 'USD'), ('n1', $2, 1, 600, 'USD'), ('n1', 0, 60, 36000, 'USD')`, hour, -h)
	mustExec(t, db, `INSERT INTO gpu_hours VALUES ('n1', $1, 0, 3, 100), ('n1', $1, 1, 2, 80)`, hour)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	f, err := OpenFleet(ctx, path)
	if err != nil {
		t.Fatalf("open the version 4 file: %v", err)
	}
	defer f.Close()
	var version int
	if err := f.db.QueryRowContext(ctx, "SELECT MAX(version) FROM schema_migrations").Scan(&version); err != nil || version != 5 {
		t.Fatalf("schema version %d, %v; want 5", version, err)
	}
	if err := f.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM node_minutes").Scan(new(int)); err == nil {
		t.Error("node_minutes is still there")
	}
	gotSets := map[int64]int64{}
	rows, err := f.db.QueryContext(ctx, "SELECT hour_ms, bits FROM minute_sets WHERE node_id = 'n1'")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var hr, bits int64
		if err := rows.Scan(&hr, &bits); err != nil {
			t.Fatal(err)
		}
		gotSets[hr] = bits
	}
	rows.Close()
	if want := map[int64]int64{hour: 1 | 1<<1 | 1<<59, -h: 1 << 59}; !reflect.DeepEqual(gotSets, want) {
		t.Errorf("minute sets = %v, want %v", gotSets, want)
	}
	type sums struct {
		samples int64
		cpu     float64
	}
	for hr, want := range map[int64]sums{hour: {150, 35}, -h: {60, 1}, 0: {0, 0}} {
		var got sums
		if err := f.db.QueryRowContext(ctx, "SELECT samples, cpu_sum FROM node_hours WHERE node_id = 'n1' AND hour_ms = $1", hr).
			Scan(&got.samples, &got.cpu); err != nil || got != want {
			t.Errorf("hour %d sums = %+v, %v; want %+v", hr, got, err, want)
		}
	}
	for gpu, want := range map[int]float64{0: 70, 1: 85} {
		var got float64
		if err := f.db.QueryRowContext(ctx, "SELECT mem_sum FROM gpu_hours WHERE node_id = 'n1' AND hour_ms = $1 AND gpu = $2", hour, gpu).
			Scan(&got); err != nil || got != want {
			t.Errorf("GPU %d mem_sum = %v, %v; want %v", gpu, got, err, want)
		}
	}

	// A replay of the old minute 0 is a duplicate; minute 2 is new.
	at := time.UnixMilli(hour).UTC()
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

func mustExec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}
