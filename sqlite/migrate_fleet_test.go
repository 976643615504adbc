package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/ledgertest"
)

// TestMinuteSetsMigration is ledgertest's version 4 → 5 migration on a file.
func TestMinuteSetsMigration(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite", dsn(path))
	if err != nil {
		t.Fatal(err)
	}
	exec := func(q string, args ...any) { t.Helper(); mustExec(t, db, q, args...) }
	ledgertest.MinuteSetsMigration(t, exec, func() (gpuwarden.Fleet, func(string, ...any) ledgertest.RowScanner) {
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		f, err := OpenFleet(ctx, path)
		if err != nil {
			t.Fatalf("open the version 4 file: %v", err)
		}
		t.Cleanup(func() { f.Close() })
		return f, func(q string, args ...any) ledgertest.RowScanner { return f.db.QueryRowContext(ctx, q, args...) }
	})
}

func mustExec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}
