package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/gpuwarden/gpuwarden/ledgertest"
	"github.com/gpuwarden/gpuwarden/sqlite"
)

// openBenchFleet opens a fleet ledger in a fresh file, closed when the
// benchmark ends.
func openBenchFleet(b *testing.B) *sqlite.Fleet {
	b.Helper()
	f, err := sqlite.OpenFleet(context.Background(), filepath.Join(b.TempDir(), "fleet.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = f.Close() })
	return f
}

// BenchmarkRecordHeartbeats is the server's heartbeat path: batches of 100
// (budget: 1,000 heartbeats/s, p99 ≤ 50 ms on 2 cores).
func BenchmarkRecordHeartbeats(b *testing.B) {
	ledgertest.BenchRecordHeartbeats(b, openBenchFleet(b))
}

// BenchmarkIngest is the server's batch path: ten new minutes of an 8-GPU
// node and two events per call.
func BenchmarkIngest(b *testing.B) {
	ledgertest.BenchIngest(b, openBenchFleet(b))
}
