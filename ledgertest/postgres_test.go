package ledgertest_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/gpuwarden/gpuwarden/ledgertest"
)

// TestMain stops the PostgreSQL server the tests share once they are done.
func TestMain(m *testing.M) {
	code := m.Run()
	ledgertest.StopPostgres()
	os.Exit(code)
}

func TestStartPostgresGivesFreshDatabases(t *testing.T) {
	ctx := context.Background()
	seen := map[string]bool{}
	for range 2 {
		dsn := ledgertest.StartPostgres(t)
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		var name string
		var tables int
		err = conn.QueryRow(ctx, "SELECT current_database(), (SELECT COUNT(*) FROM pg_tables WHERE schemaname = 'public')").Scan(&name, &tables)
		_ = conn.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if seen[name] || tables != 0 {
			t.Errorf("database %s: seen before %v, %d tables; want a new, empty one", name, seen[name], tables)
		}
		seen[name] = true
	}
}
