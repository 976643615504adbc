package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/fleetrow"
)

// bootstrapLock is the advisory lock key that serializes CreateFirstToken
// across every connection to the database: under READ COMMITTED, two
// servers starting together would otherwise both find no token and both
// insert one. It differs from migrateLock, which a server may hold at the
// same time on another connection.
const bootstrapLock int64 = migrateLock + 1

// CreateFirstToken stores t only if the ledger holds no token, and reports
// whether it did. It takes bootstrapLock for the transaction before it
// looks, so a second caller waits and then sees the first one's token.
func (f *Fleet) CreateFirstToken(ctx context.Context, t gpuwarden.Token) (bool, error) {
	args, err := fleetrow.TokenArgs(t)
	if err != nil {
		return false, err
	}
	created := false
	err = pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", bootstrapLock); err != nil {
			return err
		}
		var has bool
		if err := tx.QueryRow(ctx, fleetrow.AnyTokenSQL).Scan(&has); err != nil {
			return err
		}
		if has {
			return nil
		}
		if _, err := tx.Exec(ctx, fleetrow.InsertTokenSQL, args...); err != nil {
			return err
		}
		created = true
		return nil
	})
	if err != nil {
		return false, f.wrap("create the first token", err)
	}
	return created, nil
}
