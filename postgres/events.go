package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/ledgerrow"
)

// insertEventSQL skips an event whose key is taken. The UNIQUE constraint
// never matches NULL, so an event without a key always goes in; DO NOTHING
// leaves the first event as it was (and waits for a concurrent insert of
// the same key to settle), and the row count tells the caller.
const insertEventSQL = `INSERT INTO events (time_ms, kind, severity, message, dedup_key, data)
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (dedup_key) DO NOTHING`

// RecordEvent stores e unless an event with the same non-empty Key is
// stored, and reports whether it was new; the time is kept to the
// millisecond.
func (l *Ledger) RecordEvent(ctx context.Context, e gpuwarden.Event) (bool, error) {
	var key *string
	if e.Key != "" {
		key = &e.Key
	}
	data, err := ledgerrow.JSONText(e.Data, len(e.Data) == 0)
	if err != nil {
		return false, l.wrap("record event", err)
	}
	// An identity value is drawn at insert and becomes visible at commit,
	// so two concurrent inserts can commit out of id order, and a reader of
	// EventsAfter that saw the later id would pass over the earlier one for
	// good. The lock makes inserts take turns until commit, as SQLite's one
	// writer does, so ids become visible in order; it conflicts with itself
	// and with writes, not with reads.
	var added int64
	err = pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, lockEventsSQL); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, insertEventSQL, e.Time.UnixMilli(), e.Kind, e.Severity, e.Message, key, data)
		added = tag.RowsAffected()
		return err
	})
	if err != nil {
		return false, l.wrap("record event", err)
	}
	return added > 0, nil
}

// lockEventsSQL serializes event inserts for RecordEvent.
const lockEventsSQL = "LOCK TABLE events IN SHARE ROW EXCLUSIVE MODE"

// Events returns at most limit events, newest first (the later recorded
// first within one millisecond); a limit of zero or less returns none.
func (l *Ledger) Events(ctx context.Context, limit int) ([]gpuwarden.Event, error) {
	if limit <= 0 {
		return nil, nil
	}
	return l.queryEvents(ctx, `SELECT id, time_ms, kind, severity, message, dedup_key, data
FROM events ORDER BY time_ms DESC, id DESC LIMIT $1`, int64(limit))
}

// EventsAfter returns at most limit events recorded after sequence number
// seq, oldest first: the identity column grows with every insert, so it
// orders recording.
func (l *Ledger) EventsAfter(ctx context.Context, seq int64, limit int) ([]gpuwarden.Event, error) {
	if limit <= 0 {
		return nil, nil
	}
	return l.queryEvents(ctx, `SELECT id, time_ms, kind, severity, message, dedup_key, data
FROM events WHERE id > $1 ORDER BY id LIMIT $2`, seq, int64(limit))
}

func (l *Ledger) queryEvents(ctx context.Context, query string, args ...any) ([]gpuwarden.Event, error) {
	rows, err := l.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, l.wrap("read events", err)
	}
	defer rows.Close()
	var out []gpuwarden.Event
	for rows.Next() {
		var (
			ms        int64
			e         gpuwarden.Event
			key, data *string
		)
		if err := rows.Scan(&e.Seq, &ms, &e.Kind, &e.Severity, &e.Message, &key, &data); err != nil {
			return nil, l.wrap("read events", err)
		}
		e.Time = time.UnixMilli(ms).UTC()
		if key != nil {
			e.Key = *key
		}
		if data != nil {
			if err := json.Unmarshal([]byte(*data), &e.Data); err != nil {
				return nil, l.wrap("read events", err)
			}
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, l.wrap("read events", err)
	}
	return out, nil
}

// State returns the value stored under key, and whether there is one.
func (l *Ledger) State(ctx context.Context, key string) (string, bool, error) {
	var v string
	err := l.pool.QueryRow(ctx, "SELECT value FROM state WHERE name = $1", key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, l.wrap("read state "+key, err)
	}
	return v, true, nil
}

// SetState stores value under key, replacing what was there.
func (l *Ledger) SetState(ctx context.Context, key, value string) error {
	if _, err := l.pool.Exec(ctx, `INSERT INTO state (name, value) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET value = excluded.value`, key, value); err != nil {
		return l.wrap("write state "+key, err)
	}
	return nil
}
