package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/ledgertest"
	"github.com/gpuwarden/gpuwarden/postgres"
)

// BenchmarkStorageGrowth measures what a day of a 1-GPU node adds to the
// database (budget: ≤ 100 KB per node-day), as sqlite's benchmark of the
// same name does: storageNodes nodes each ship storageDays days of minutes,
// 10 a batch, with a heartbeat per batch. The metric is the fleet tables'
// size with their indexes and TOAST after a plain VACUUM (what autovacuum
// does: it makes dead row versions of the upserted hours reusable, it does
// not shrink files), less their size after registration, per node-day.
func BenchmarkStorageGrowth(b *testing.B) {
	for range b.N {
		ctx := context.Background()
		dsn := ledgertest.StartPostgres(b)
		f, err := postgres.OpenFleet(ctx, dsn)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now().UTC().Truncate(time.Hour).Add(-storageDays * 24 * time.Hour)
		ids := registerStorageNodes(b, f, start)
		before := fleetBytes(b, dsn)
		shipStorageDays(b, f, ids, start)
		after := fleetBytes(b, dsn)
		_ = f.Close()
		b.ReportMetric(float64(after-before)/float64(storageNodes*storageDays)/1000, "KB/node-day")
	}
}

const (
	storageNodes = 20
	storageDays  = 3
)

func registerStorageNodes(b *testing.B, f gpuwarden.Fleet, at time.Time) []string {
	b.Helper()
	ids := make([]string, storageNodes)
	for i := range ids {
		// A node ID as burn-in makes one: host plus a GPU UUID.
		ids[i] = fmt.Sprintf("gpu-box-%03d-GPU-6f2c1e8a-%04x-4e1b-9c3d-1f2e3d4c5b6a", i, i)
		n := gpuwarden.Node{ID: ids[i], Project: "p", Hostname: fmt.Sprintf("gpu-box-%03d", i), TokenID: "t",
			Registered: at, Labels: gpuwarden.NodeLabels{HourlyPrice: 3_500_000, Currency: "USD"},
			GPUs: []gpuwarden.GPU{{Index: 0, Model: "H100"}}}
		if _, err := f.RegisterNode(context.Background(), n); err != nil {
			b.Fatal(err)
		}
	}
	return ids
}

func shipStorageDays(b *testing.B, f gpuwarden.Fleet, ids []string, start time.Time) {
	b.Helper()
	ctx := context.Background()
	for m := 0; m < storageDays*24*60; m += 10 {
		for i, id := range ids {
			var batch gpuwarden.FleetBatch
			for k := range 10 {
				batch.Minutes = append(batch.Minutes, gpuwarden.NodeMinute{Minute: start.Add(time.Duration(m+k) * time.Minute),
					Samples: 60, CPUPercent: 12.5 + float64(k), GPUUtil: []float64{float64((m + k + i) % 101)},
					GPUMemPercent: []float64{41.25}})
			}
			if _, err := f.Ingest(ctx, id, batch); err != nil {
				b.Fatal(err)
			}
		}
		at := start.Add(time.Duration(m+10) * time.Minute)
		hbs := make([]gpuwarden.Heartbeat, len(ids))
		for i, id := range ids {
			hbs[i] = gpuwarden.Heartbeat{Node: id, Time: at, State: gpuwarden.NodeRunning, GPUUtil: 50}
		}
		if err := f.RecordHeartbeats(ctx, at, hbs); err != nil {
			b.Fatal(err)
		}
	}
}

// fleetBytes is the size of the tables the fleet writes as it runs, with
// their indexes and TOAST, after a VACUUM.
func fleetBytes(b *testing.B, dsn string) int64 {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	tables := []string{"nodes", "minute_sets", "node_hours", "gpu_hours", "fleet_events"}
	var total int64
	for _, t := range tables {
		if _, err := conn.Exec(ctx, "VACUUM "+t); err != nil {
			b.Fatal(err)
		}
		var n int64
		if err := conn.QueryRow(ctx, "SELECT pg_total_relation_size($1::regclass)", t).Scan(&n); err != nil {
			b.Fatal(err)
		}
		total += n
	}
	return total
}
