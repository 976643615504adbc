package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/sqlite"
)

// BenchmarkStorageGrowth measures what a day of a 1-GPU node adds to the
// file (budget: ≤ 100 KB per node-day): storageNodes nodes each ship
// storageDays days of minutes as agents do, 10 minutes a batch, with a
// heartbeat per batch; the metric is the pages in use after a checkpoint,
// less those after registration, per node-day.
func BenchmarkStorageGrowth(b *testing.B) {
	for range b.N {
		ctx := context.Background()
		path := filepath.Join(b.TempDir(), "fleet.db")
		f, err := sqlite.OpenFleet(ctx, path)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now().UTC().Truncate(time.Hour).Add(-storageDays * 24 * time.Hour)
		ids := registerStorageNodes(b, f, start)
		before := fileBytesInUse(b, path)
		shipStorageDays(b, f, ids, start)
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
		after := fileBytesInUse(b, path)
		b.ReportMetric(float64(after-before)/float64(storageNodes*storageDays)/1000, "KB/node-day")
	}
}

const (
	storageNodes = 20
	storageDays  = 3
)

func registerStorageNodes(b *testing.B, f gpuwarden.Fleet, at time.Time) []string {
	b.Helper()
	ctx := context.Background()
	ids := make([]string, storageNodes)
	for i := range ids {
		// A node ID as burn-in makes one: host plus a GPU UUID.
		ids[i] = fmt.Sprintf("gpu-box-%03d-GPU-6f2c1e8a-%04x-4e1b-9c3d-1f2e3d4c5b6a", i, i)
		n := gpuwarden.Node{ID: ids[i], Project: "p", Hostname: fmt.Sprintf("gpu-box-%03d", i), TokenID: "t",
			Registered: at, Labels: gpuwarden.NodeLabels{HourlyPrice: 3_500_000, Currency: "USD"},
			GPUs: []gpuwarden.GPU{{Index: 0, Model: "H100"}}}
		if _, err := f.RegisterNode(ctx, n); err != nil {
			b.Fatal(err)
		}
	}
	return ids
}

// shipStorageDays ships every node's minutes from start, in batches of 10.
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

// fileBytesInUse is the file's pages in use (not free) after the WAL is
// checkpointed into it.
func fileBytesInUse(b *testing.B, path string) int64 {
	b.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		b.Fatal(err)
	}
	var pages, free, size int64
	for q, v := range map[string]*int64{"PRAGMA page_count": &pages, "PRAGMA freelist_count": &free, "PRAGMA page_size": &size} {
		if err := db.QueryRow(q).Scan(v); err != nil {
			b.Fatal(err)
		}
	}
	return (pages - free) * size
}
