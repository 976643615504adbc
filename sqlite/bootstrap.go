package sqlite

import (
	"context"
	"database/sql"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/fleetrow"
)

// CreateFirstToken stores t only if the ledger holds no token, and reports
// whether it did. The transaction takes the write lock before it looks, so
// that two processes bootstrapping one file cannot both find it empty.
func (f *Fleet) CreateFirstToken(ctx context.Context, t gpuwarden.Token) (bool, error) {
	args, err := fleetrow.TokenArgs(t)
	if err != nil {
		return false, err
	}
	created := false
	err = f.inTx(ctx, func(tx *sql.Tx) error {
		var has bool
		if err := tx.QueryRowContext(ctx, fleetrow.AnyTokenSQL).Scan(&has); err != nil {
			return err
		}
		if has {
			return nil
		}
		if _, err := tx.ExecContext(ctx, fleetrow.InsertTokenSQL, args...); err != nil {
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
