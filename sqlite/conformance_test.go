package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/ledgertest"
	"github.com/gpuwarden/gpuwarden/sqlite"
)

// TestConformance holds the SQLite ledger to what every ledger must do; a
// reopen opens the same file.
func TestConformance(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) (gpuwarden.Ledger, func() gpuwarden.Ledger) {
		path := filepath.Join(t.TempDir(), "ledger.db")
		open := func() gpuwarden.Ledger {
			l, err := sqlite.Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		return open(), open
	})
}

// TestFleetConformance holds the SQLite fleet ledger to what every fleet
// ledger must do; a reopen opens the same file.
func TestFleetConformance(t *testing.T) {
	ledgertest.RunFleet(t, func(t *testing.T) (gpuwarden.Fleet, func() gpuwarden.Fleet) {
		path := filepath.Join(t.TempDir(), "fleet.db")
		open := func() gpuwarden.Fleet {
			f, err := sqlite.OpenFleet(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
		return open(), open
	})
}

// TestSavingsConformance holds the agent's and the fleet server's SQLite
// savings ledgers to what every savings ledger must do.
func TestSavingsConformance(t *testing.T) {
	t.Run("agent", func(t *testing.T) {
		ledgertest.RunSavings(t, func(t *testing.T) (ledgertest.SavingsStore, func() ledgertest.SavingsStore) {
			path := filepath.Join(t.TempDir(), "ledger.db")
			open := func() ledgertest.SavingsStore {
				l, err := sqlite.Open(context.Background(), path)
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			return open(), open
		})
	})
	t.Run("fleet", func(t *testing.T) {
		ledgertest.RunSavings(t, func(t *testing.T) (ledgertest.SavingsStore, func() ledgertest.SavingsStore) {
			path := filepath.Join(t.TempDir(), "fleet.db")
			open := func() ledgertest.SavingsStore {
				f, err := sqlite.OpenFleet(context.Background(), path)
				if err != nil {
					t.Fatal(err)
				}
				return f
			}
			return open(), open
		})
	})
}

// TestClaimsConformance: the SQLite fleet ledger keeps the monthly
// summary's claims once across handles (ledgertest.RunClaims).
func TestClaimsConformance(t *testing.T) {
	ledgertest.RunClaims(t, func(t *testing.T) (ledgertest.ClaimStore, func() ledgertest.ClaimStore) {
		path := filepath.Join(t.TempDir(), "fleet.db")
		open := func() ledgertest.ClaimStore {
			f, err := sqlite.OpenFleet(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
		return open(), open
	})
}
