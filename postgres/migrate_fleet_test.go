package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/ledgertest"
	"github.com/gpuwarden/gpuwarden/postgres"
)

// TestMinuteSetsMigration is ledgertest's version 4 → 5 migration on
// PostgreSQL.
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
	ledgertest.MinuteSetsMigration(t, exec, func() (gpuwarden.Fleet, func(string, ...any) ledgertest.RowScanner) {
		f, err := postgres.OpenFleet(ctx, dsn)
		if err != nil {
			t.Fatalf("open the version 4 database: %v", err)
		}
		t.Cleanup(func() { f.Close() })
		return f, func(q string, args ...any) ledgertest.RowScanner { return conn.QueryRow(ctx, q, args...) }
	})
}
