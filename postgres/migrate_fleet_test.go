package postgres_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/ledgertest"
	"github.com/gpuwarden/gpuwarden/postgres"
)

// TestMinuteSetsMigration builds a fleet database as version 4 left it,
// with the old DDL (migrations 0001–0004 as they are on disk) and minute
// rows holding JSON arrays, and opens it: version 5 must turn the minutes
// into sets and hour sums in place, so that an old minute replayed is
// still a duplicate and the hours are unchanged.
func TestMinuteSetsMigration(t *testing.T) {
	ctx := context.Background()
	dsn := ledgertest.StartPostgres(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	exec := func(q string, args ...any) {
		t.Helper()
		mode := []any{pgx.QueryExecModeSimpleProtocol}
		if _, err := conn.Exec(ctx, q, append(mode, args...)...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
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
	exec(`INSERT INTO node_minutes VALUES
		('n1', $1, 60, 10, '[50,70]', '[40,60]'),
		('n1', $2, 30, 20, '[30,10]', '[20,25]'),
		('n1', $3, 60, 5, '[20]', '[10,99]'),
		('n1', -60000, 60, 1, NULL, NULL)`, hour, hour+60_000, hour+59*60_000)
	exec(`INSERT INTO node_hours VALUES ('n1', $1, 3, 1800, 'USD'), ('n1', $2, 1, 600, 'USD'), ('n1', 0, 60, 36000, 'USD')`, hour, -h)
	exec(`INSERT INTO gpu_hours VALUES ('n1', $1, 0, 3, 100), ('n1', $1, 1, 2, 80)`, hour)

	f, err := postgres.OpenFleet(ctx, dsn)
	if err != nil {
		t.Fatalf("open the version 4 database: %v", err)
	}
	defer f.Close()
	var version int
	if err := conn.QueryRow(ctx, "SELECT MAX(version) FROM schema_migrations").Scan(&version); err != nil || version != 5 {
		t.Fatalf("schema version %d, %v; want 5", version, err)
	}
	var minutesTable *string
	if err := conn.QueryRow(ctx, "SELECT to_regclass('node_minutes')::text").Scan(&minutesTable); err != nil || minutesTable != nil {
		t.Errorf("node_minutes: %v, %v; want it dropped", minutesTable, err)
	}
	gotSets := map[int64]int64{}
	rows, _ := conn.Query(ctx, "SELECT hour_ms, bits FROM minute_sets WHERE node_id = 'n1'")
	var hr, bits int64
	if _, err := pgx.ForEachRow(rows, []any{&hr, &bits}, func() error { gotSets[hr] = bits; return nil }); err != nil {
		t.Fatal(err)
	}
	if want := map[int64]int64{hour: 1 | 1<<1 | 1<<59, -h: 1 << 59}; !reflect.DeepEqual(gotSets, want) {
		t.Errorf("minute sets = %v, want %v", gotSets, want)
	}
	type sums struct {
		samples int64
		cpu     float64
	}
	for hr, want := range map[int64]sums{hour: {150, 35}, -h: {60, 1}, 0: {0, 0}} {
		var got sums
		if err := conn.QueryRow(ctx, "SELECT samples, cpu_sum FROM node_hours WHERE node_id = 'n1' AND hour_ms = $1", hr).
			Scan(&got.samples, &got.cpu); err != nil || got != want {
			t.Errorf("hour %d sums = %+v, %v; want %+v", hr, got, err, want)
		}
	}
	for gpu, want := range map[int]float64{0: 70, 1: 85} {
		var got float64
		if err := conn.QueryRow(ctx, "SELECT mem_sum FROM gpu_hours WHERE node_id = 'n1' AND hour_ms = $1 AND gpu = $2", hour, gpu).
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
