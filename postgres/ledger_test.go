package postgres_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/ledgertest"
	"github.com/gpuwarden/gpuwarden/postgres"
)

// TestMain stops the PostgreSQL server the tests share once they are done.
func TestMain(m *testing.M) {
	code := m.Run()
	ledgertest.StopPostgres()
	os.Exit(code)
}

func openTest(t *testing.T, dsn string) *postgres.Ledger {
	t.Helper()
	l, err := postgres.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestConformance holds the PostgreSQL ledger to what every ledger must do;
// a reopen connects to the same database.
func TestConformance(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) (gpuwarden.Ledger, func() gpuwarden.Ledger) {
		dsn := ledgertest.StartPostgres(t)
		open := func() gpuwarden.Ledger { return openTest(t, dsn) }
		return open(), open
	})
}

func TestConcurrentOpenMigratesOnce(t *testing.T) {
	dsn := ledgertest.StartPostgres(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			l, err := postgres.Open(context.Background(), dsn)
			if err == nil {
				err = l.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open %d: %v", i, err)
		}
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	var n int
	if err := conn.QueryRow(ctx, "SELECT COUNT(*) FROM schema_migrations").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if want := len(migrationFiles(t)); n != want {
		t.Errorf("schema_migrations has %d rows, want %d", n, want)
	}
}

// migrationFiles are the names of the migration files, in order.
func migrationFiles(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name, dsn string
		code      gpuwarden.ErrorCode
	}{
		{"empty", "", gpuwarden.EInvalid},
		{"unparsable", "postgres://user:secret@host:notaport/db", gpuwarden.EInvalid},
	}
	for _, tt := range tests {
		_, err := postgres.Open(ctx, tt.dsn)
		if got := gpuwarden.ErrorCodeOf(err); got != tt.code {
			t.Errorf("%s: Open = %v, want code %s", tt.name, err, tt.code)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: error %q shows the password", tt.name, err)
		}
	}
}
