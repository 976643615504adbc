package postgres_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/ledgertest"
	"github.com/gpuwarden/gpuwarden/postgres"
)

// TestFleetConformance holds the PostgreSQL fleet ledger to what every
// fleet ledger must do; a reopen connects to the same database.
func TestFleetConformance(t *testing.T) {
	ledgertest.RunFleet(t, func(t *testing.T) (gpuwarden.Fleet, func() gpuwarden.Fleet) {
		dsn := ledgertest.StartPostgres(t)
		open := func() gpuwarden.Fleet {
			f, err := postgres.OpenFleet(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
		return open(), open
	})
}

// TestFleetMigrationOnAgentLedger opens, as a fleet ledger, a database that
// an earlier gpuwarden left at version 1 with an agent's data in it: the
// fleet tables must be added and the agent's rows kept.
func TestFleetMigrationOnAgentLedger(t *testing.T) {
	ctx := context.Background()
	dsn := ledgertest.StartPostgres(t)
	init, err := os.ReadFile(filepath.Join("migrations", migrationFiles(t)[0]))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE schema_migrations (version BIGINT NOT NULL PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)`,
		string(init),
		`INSERT INTO schema_migrations VALUES (1, '0001_init.sql', 0)`,
		`INSERT INTO state (name, value) VALUES ('idle.since', 'then')`,
	} {
		if _, err := conn.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatal(err)
		}
	}
	_ = conn.Close(ctx)

	f, err := postgres.OpenFleet(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.PutProject(ctx, gpuwarden.Project{Name: "p", Currency: "USD"}); err != nil {
		t.Errorf("PutProject after the migration: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	l := openTest(t, dsn)
	defer l.Close()
	if v, ok, err := l.State(ctx, "idle.since"); err != nil || !ok || v != "then" {
		t.Errorf("State(idle.since) = %q, %v, %v; want the agent's value kept", v, ok, err)
	}
}

// TestSavingsConformance holds the PostgreSQL savings ledgers, agent and
// fleet, to what every savings ledger must do.
func TestSavingsConformance(t *testing.T) {
	t.Run("agent", func(t *testing.T) {
		ledgertest.RunSavings(t, func(t *testing.T) (ledgertest.SavingsStore, func() ledgertest.SavingsStore) {
			dsn := ledgertest.StartPostgres(t)
			open := func() ledgertest.SavingsStore { return openTest(t, dsn) }
			return open(), open
		})
	})
	t.Run("fleet", func(t *testing.T) {
		ledgertest.RunSavings(t, func(t *testing.T) (ledgertest.SavingsStore, func() ledgertest.SavingsStore) {
			dsn := ledgertest.StartPostgres(t)
			open := func() ledgertest.SavingsStore {
				f, err := postgres.OpenFleet(context.Background(), dsn)
				if err != nil {
					t.Fatal(err)
				}
				return f
			}
			return open(), open
		})
	})
}

// TestClaimsConformance: the PostgreSQL fleet ledger keeps the monthly
// summary's claims once across replicas (ledgertest.RunClaims).
func TestClaimsConformance(t *testing.T) {
	ledgertest.RunClaims(t, func(t *testing.T) (ledgertest.ClaimStore, func() ledgertest.ClaimStore) {
		dsn := ledgertest.StartPostgres(t)
		open := func() ledgertest.ClaimStore {
			f, err := postgres.OpenFleet(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
		return open(), open
	})
}
