package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/fleetrow"
)

var (
	_ gpuwarden.SavingsLedger = (*Ledger)(nil)
	_ gpuwarden.SavingsLedger = (*Fleet)(nil)
)

// selectSavingsSQL follows gpuwarden.SavingsQuery.Match: an event whose
// period overlaps [$1, $2), an empty one when it lies inside; the filters
// are skipped when empty.
const selectSavingsSQL = `SELECT ` + fleetrow.SavingColumns + ` FROM savings
WHERE from_ms < $2 AND (to_ms > $1 OR (to_ms = from_ms AND from_ms >= $1))
 AND ($3 = '' OR project = $3) AND ($4 = '' OR owner = $4) AND ($5 = '' OR node_id = $5) AND ($6 = '' OR kind = $6) AND at_ms > $7
ORDER BY from_ms, id`

// scanSavings reads the rows of selectSavingsSQL.
func scanSavings(rows *sql.Rows) ([]gpuwarden.Saving, error) {
	defer rows.Close()
	var out []gpuwarden.Saving
	for rows.Next() {
		e, err := fleetrow.ScanSaving(rows.Scan)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// recordSavings validates every event, then upserts them in one transaction.
func recordSavings(ctx context.Context, db *sql.DB, events []gpuwarden.Saving) error {
	if err := fleetrow.ValidateSavings(events); err != nil {
		return err
	}
	if len(events) == 0 {
		return nil
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	st, err := tx.PrepareContext(ctx, fleetrow.UpsertSavingSQL)
	if err != nil {
		return err
	}
	defer st.Close()
	for _, e := range events {
		if _, err := st.ExecContext(ctx, fleetrow.SavingArgs(e)...); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func querySavings(ctx context.Context, db *sql.DB, q gpuwarden.SavingsQuery) ([]gpuwarden.Saving, error) {
	rows, err := db.QueryContext(ctx, selectSavingsSQL, fleetrow.SavingsQueryArgs(q)...)
	if err != nil {
		return nil, err
	}
	return scanSavings(rows)
}

// RecordSavings stores events, replacing those with the same ID, in one
// transaction; an invalid event stores nothing (EInvalid).
func (l *Ledger) RecordSavings(ctx context.Context, events []gpuwarden.Saving) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if err := recordSavings(ctx, l.db, events); err != nil {
		return l.wrap("record savings", err)
	}
	return nil
}

// Savings returns the events q selects, ordered by From, then ID.
func (l *Ledger) Savings(ctx context.Context, q gpuwarden.SavingsQuery) ([]gpuwarden.Saving, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out, err := querySavings(ctx, l.db, q)
	if err != nil {
		return nil, l.wrap("read savings", err)
	}
	return out, nil
}

// RecordSavings stores events, replacing those with the same ID, in one
// transaction; an invalid event stores nothing (EInvalid).
func (f *Fleet) RecordSavings(ctx context.Context, events []gpuwarden.Saving) error {
	if err := recordSavings(ctx, f.db, events); err != nil {
		return f.wrap("record savings", err)
	}
	return nil
}

// Savings returns the events q selects, ordered by From, then ID; it reads
// through the read pool, so that a dashboard never holds up ingest.
func (f *Fleet) Savings(ctx context.Context, q gpuwarden.SavingsQuery) ([]gpuwarden.Saving, error) {
	out, err := querySavings(ctx, f.rdb, q)
	if err != nil {
		return nil, f.wrap("read savings", err)
	}
	return out, nil
}

// Claim records key once in the fleet ledger and reports whether this call
// did: the monthly summary's record of what was sent (http.SentMarks),
// shared by every server on the ledger.
func (f *Fleet) Claim(ctx context.Context, key string) (bool, error) {
	res, err := f.db.ExecContext(ctx, fleetrow.ClaimSQL, fleetrow.ClaimName(key), time.Now().UTC().Format(time.RFC3339))
	if err != nil {
		return false, f.wrap("claim "+key, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, f.wrap("claim "+key, err)
	}
	return n == 1, nil
}

// Release forgets a claim whose send failed, so that the next check retries.
func (f *Fleet) Release(ctx context.Context, key string) error {
	if _, err := f.db.ExecContext(ctx, fleetrow.ReleaseSQL, fleetrow.ClaimName(key)); err != nil {
		return f.wrap("release "+key, err)
	}
	return nil
}
