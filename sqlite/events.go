package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/ledgerrow"
)

// insertEventSQL skips an event whose key is taken. The UNIQUE index never
// matches NULL, so an event without a key always goes in; DO NOTHING leaves
// the first event as it was, and the statement's row count tells the caller.
const insertEventSQL = `INSERT INTO events (time_ms, kind, severity, message, dedup_key, data)
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (dedup_key) DO NOTHING`

// RecordEvent stores e unless an event with the same non-empty Key is
// stored, and reports whether it was new; the time is kept to the
// millisecond.
func (l *Ledger) RecordEvent(ctx context.Context, e gpuwarden.Event) (bool, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var key any
	if e.Key != "" {
		key = e.Key
	}
	data, err := ledgerrow.JSONText(e.Data, len(e.Data) == 0)
	if err != nil {
		return false, l.wrap("record event", err)
	}
	res, err := l.insertEvent.ExecContext(ctx, e.Time.UnixMilli(), e.Kind, e.Severity, e.Message, key, data)
	if err != nil {
		return false, l.wrap("record event", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, l.wrap("record event", err)
	}
	return n > 0, nil
}

// Events returns at most limit events, newest first (the later recorded
// first within one millisecond); a limit of zero or less returns none.
func (l *Ledger) Events(ctx context.Context, limit int) ([]gpuwarden.Event, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if limit <= 0 {
		return nil, nil
	}
	return l.queryEvents(ctx, `SELECT id, time_ms, kind, severity, message, dedup_key, data
FROM events ORDER BY time_ms DESC, id DESC LIMIT $1`, limit)
}

// EventsOfKind returns at most limit events of one kind, newest first, so
// that a reader of one kind (plan's measured throughput reads "progress")
// does not decode every alert the agent ever wrote.
func (l *Ledger) EventsOfKind(ctx context.Context, kind string, limit int) ([]gpuwarden.Event, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if limit <= 0 {
		return nil, nil
	}
	return l.queryEvents(ctx, `SELECT id, time_ms, kind, severity, message, dedup_key, data
FROM events WHERE kind = $1 ORDER BY time_ms DESC, id DESC LIMIT $2`, kind, limit)
}

// EventsAfter returns at most limit events recorded after sequence number
// seq, oldest first: ids grow with every insert, so they order recording.
func (l *Ledger) EventsAfter(ctx context.Context, seq int64, limit int) ([]gpuwarden.Event, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if limit <= 0 {
		return nil, nil
	}
	return l.queryEvents(ctx, `SELECT id, time_ms, kind, severity, message, dedup_key, data
FROM events WHERE id > $1 ORDER BY id LIMIT $2`, seq, limit)
}

func (l *Ledger) queryEvents(ctx context.Context, query string, args ...any) ([]gpuwarden.Event, error) {
	rows, err := l.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, l.wrap("read events", err)
	}
	defer rows.Close()
	var out []gpuwarden.Event
	for rows.Next() {
		var (
			ms        int64
			e         gpuwarden.Event
			key, data sql.NullString
		)
		if err := rows.Scan(&e.Seq, &ms, &e.Kind, &e.Severity, &e.Message, &key, &data); err != nil {
			return nil, l.wrap("read events", err)
		}
		e.Time = time.UnixMilli(ms).UTC()
		e.Key = key.String
		if data.Valid {
			if err := json.Unmarshal([]byte(data.String), &e.Data); err != nil {
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
	l.mu.RLock()
	defer l.mu.RUnlock()
	var v string
	err := l.db.QueryRowContext(ctx, "SELECT value FROM state WHERE name = $1", key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, l.wrap("read state "+key, err)
	}
	return v, true, nil
}

// SetState stores value under key, replacing what was there.
func (l *Ledger) SetState(ctx context.Context, key, value string) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if _, err := l.db.ExecContext(ctx, `INSERT INTO state (name, value) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET value = excluded.value`, key, value); err != nil {
		return l.wrap("write state "+key, err)
	}
	return nil
}
