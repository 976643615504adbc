package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/ledgertest"
	"github.com/gpuwarden/gpuwarden/sqlite"
)

// BenchmarkStorageGrowth is ledgertest's storage benchmark on a file: the
// size is the pages in use after the WAL is checkpointed into it.
func BenchmarkStorageGrowth(b *testing.B) {
	ledgertest.BenchStorageGrowth(b, func(b *testing.B) (gpuwarden.Fleet, func() int64) {
		path := filepath.Join(b.TempDir(), "fleet.db")
		f, err := sqlite.OpenFleet(context.Background(), path)
		if err != nil {
			b.Fatal(err)
		}
		return f, func() int64 { return fileBytesInUse(b, path) }
	})
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
