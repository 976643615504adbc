package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/ledgertest"
	"github.com/gpuwarden/gpuwarden/postgres"
)

// BenchmarkStorageGrowth is ledgertest's storage benchmark on PostgreSQL:
// the size is the fleet tables' with their indexes and TOAST after a plain
// VACUUM (what autovacuum does: it makes dead row versions of the upserted
// hours reusable, it does not shrink files).
func BenchmarkStorageGrowth(b *testing.B) {
	ledgertest.BenchStorageGrowth(b, func(b *testing.B) (gpuwarden.Fleet, func() int64) {
		dsn := ledgertest.StartPostgres(b)
		f, err := postgres.OpenFleet(context.Background(), dsn)
		if err != nil {
			b.Fatal(err)
		}
		return f, func() int64 { return fleetBytes(b, dsn) }
	})
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
