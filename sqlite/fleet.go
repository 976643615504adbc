package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/fleetrow"
)

// retainChunk is how many rows one retention DELETE removes: each chunk is
// its own short transaction, so that a day's worth of expired minutes never
// holds the one writer long enough to stall heartbeats.
const retainChunk = 10_000

// Fleet is the server's fleet ledger in one SQLite file, beside (or
// without) an agent's tables; it is safe for concurrent use. Its writes go
// through one connection, one at a time, which is what SQLite allows; its
// reads go through a pool of read-only connections, so that a dashboard's
// long query never holds up heartbeats (WAL lets readers and the writer run
// at once).
type Fleet struct {
	db   *sql.DB // the writer
	rdb  *sql.DB // the readers
	path string

	heartbeat     *sql.Stmt
	nodePrice     *sql.Stmt
	minuteSet     *sql.Stmt
	upsertSet     *sql.Stmt
	upsertHour    *sql.Stmt
	upsertGPUHour *sql.Stmt
	insertEvent   *sql.Stmt
}

var _ gpuwarden.Fleet = (*Fleet)(nil)

// OpenFleet opens the fleet ledger at path, creating the file and its
// directory (0700) when missing, and brings its schema up to date.
func OpenFleet(ctx context.Context, path string) (*Fleet, error) {
	db, abs, err := openDB(ctx, "open fleet ledger", path)
	if err != nil {
		return nil, err
	}
	f := &Fleet{db: db, path: abs}
	if f.rdb, err = openReaders(abs); err != nil {
		_ = db.Close()
		return nil, f.wrap("open fleet ledger", err)
	}
	// The statements every heartbeat and ingest runs, prepared once.
	p := preparer{ctx: ctx, db: db}
	f.heartbeat = p.prepare(fleetrow.HeartbeatSQL)
	f.nodePrice = p.prepare(fleetrow.NodePriceSQL)
	f.minuteSet = p.prepare(fleetrow.MinuteSetSQL)
	f.upsertSet = p.prepare(fleetrow.UpsertMinuteSetSQL)
	f.upsertHour = p.prepare(fleetrow.UpsertHourSQL)
	f.upsertGPUHour = p.prepare(fleetrow.UpsertGPUHourSQL)
	f.insertEvent = p.prepare(fleetrow.InsertEventSQL)
	if p.err != nil {
		_ = f.Close()
		return nil, f.wrap("open fleet ledger", p.err)
	}
	return f, nil
}

// Close releases the file; the ledger cannot be used afterwards.
func (f *Fleet) Close() error {
	err := closeDB(f.db, f.heartbeat, f.nodePrice, f.minuteSet, f.upsertSet, f.upsertHour, f.upsertGPUHour, f.insertEvent)
	if f.rdb != nil {
		err = errors.Join(err, f.rdb.Close())
	}
	if err != nil {
		return f.wrap("close fleet ledger", err)
	}
	return nil
}

// wrap names the operation and the file; application errors pass as they
// are, since they already say what is wrong.
func (f *Fleet) wrap(op string, err error) error {
	var app *gpuwarden.Error
	if errors.As(err, &app) {
		return err
	}
	if unavailable(err) {
		return &gpuwarden.Error{Code: gpuwarden.EUnavailable, Message: op + " " + f.path, Err: err, Hint: unavailableHint}
	}
	return fmt.Errorf("%s %s: %w", op, f.path, err)
}

// Ready rewrites the newest migration row and commits: the smallest write
// that still needs the disk and the write lock.
func (f *Fleet) Ready(ctx context.Context) error {
	err := f.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE schema_migrations SET version = version WHERE version = (SELECT MAX(version) FROM schema_migrations)")
		return err
	})
	if err != nil {
		return f.wrap("write a readiness probe", err)
	}
	return nil
}

// inTx runs fn in one transaction, committed when fn returns nil; with
// _txlock=immediate it holds the write lock from the start, so a read
// followed by a write never fails to upgrade.
func (f *Fleet) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// PutProject creates a project or updates its budget and currency, keeping
// the time it was created.
func (f *Fleet) PutProject(ctx context.Context, p gpuwarden.Project) error {
	args, err := fleetrow.ProjectArgs(p)
	if err != nil {
		return err
	}
	if _, err := f.db.ExecContext(ctx, fleetrow.UpsertProjectSQL, args...); err != nil {
		return f.wrap("put project "+p.Name, err)
	}
	return nil
}

// Projects lists the projects by name.
func (f *Fleet) Projects(ctx context.Context) ([]gpuwarden.Project, error) {
	rows, err := f.rdb.QueryContext(ctx, "SELECT "+fleetrow.ProjectCols+" FROM projects ORDER BY name")
	if err != nil {
		return nil, f.wrap("list projects", err)
	}
	defer rows.Close()
	var out []gpuwarden.Project
	for rows.Next() {
		var r fleetrow.ProjectRow
		if err := rows.Scan(r.Dest()...); err != nil {
			return nil, f.wrap("list projects", err)
		}
		out = append(out, r.Project())
	}
	if err := rows.Err(); err != nil {
		return nil, f.wrap("list projects", err)
	}
	return out, nil
}

// CreateToken stores a new token record; a taken ID is a conflict.
func (f *Fleet) CreateToken(ctx context.Context, t gpuwarden.Token) error {
	args, err := fleetrow.TokenArgs(t)
	if err != nil {
		return err
	}
	res, err := f.db.ExecContext(ctx, fleetrow.InsertTokenSQL, args...)
	if err != nil {
		return f.wrap("create token "+t.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return f.wrap("create token "+t.ID, err)
	} else if n == 0 {
		return gpuwarden.Errorf(gpuwarden.EConflict, "create token %s: the id is taken", t.ID)
	}
	return nil
}

// Token returns a token by ID, revoked or not.
func (f *Fleet) Token(ctx context.Context, id string) (gpuwarden.Token, error) {
	if !fleetrow.Text(id) {
		return gpuwarden.Token{}, gpuwarden.Errorf(gpuwarden.ENotFound, "token %q not found", id)
	}
	var r fleetrow.TokenRow
	err := f.rdb.QueryRowContext(ctx, "SELECT "+fleetrow.TokenCols+" FROM tokens WHERE id = $1", id).Scan(r.Dest()...)
	if errors.Is(err, sql.ErrNoRows) {
		return gpuwarden.Token{}, gpuwarden.Errorf(gpuwarden.ENotFound, "token %s not found", id)
	}
	if err != nil {
		return gpuwarden.Token{}, f.wrap("read token "+id, err)
	}
	return r.Token(), nil
}

// Tokens lists a project's tokens by ID, or every token for AllProjects.
func (f *Fleet) Tokens(ctx context.Context, project string) ([]gpuwarden.Token, error) {
	query, args := fleetrow.ListSQL(fleetrow.TokenCols, "tokens", "id", project)
	rows, err := f.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, f.wrap("list tokens", err)
	}
	defer rows.Close()
	var out []gpuwarden.Token
	for rows.Next() {
		var r fleetrow.TokenRow
		if err := rows.Scan(r.Dest()...); err != nil {
			return nil, f.wrap("list tokens", err)
		}
		out = append(out, r.Token())
	}
	if err := rows.Err(); err != nil {
		return nil, f.wrap("list tokens", err)
	}
	return out, nil
}

// RevokeToken marks a token revoked at at, keeping an earlier revocation.
func (f *Fleet) RevokeToken(ctx context.Context, id string, at time.Time) error {
	if at.IsZero() {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "revoke token %s: no time", id)
	}
	if !fleetrow.Text(id) {
		return gpuwarden.Errorf(gpuwarden.ENotFound, "revoke token %q: not found", id)
	}
	res, err := f.db.ExecContext(ctx, fleetrow.RevokeTokenSQL, id, at.UnixMilli())
	if err != nil {
		return f.wrap("revoke token "+id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return f.wrap("revoke token "+id, err)
	} else if n == 0 {
		return gpuwarden.Errorf(gpuwarden.ENotFound, "revoke token %s: not found", id)
	}
	return nil
}

// RegisterNode inserts a node or, after the ownership and identity checks,
// updates what the box says about itself; it returns the node as stored.
// The transaction holds the write lock from its start, so the check and
// the update of two registrations of one node, even from two processes on
// one file, take turns.
func (f *Fleet) RegisterNode(ctx context.Context, n gpuwarden.Node) (gpuwarden.Node, error) {
	args, err := fleetrow.EncodeNode(n)
	if err != nil {
		return gpuwarden.Node{}, err
	}
	var out gpuwarden.Node
	err = f.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, fleetrow.InsertNodeSQL, args.Insert()...)
		if err != nil {
			return err
		}
		if inserted, err := res.RowsAffected(); err != nil {
			return err
		} else if inserted == 0 {
			var h fleetrow.NodeHolder
			if err := tx.QueryRowContext(ctx, fleetrow.NodeOwnerSQL, n.ID).Scan(h.Dest()...); err != nil {
				return err
			}
			valid := false
			if h.TokenID != n.TokenID {
				var revoked sql.NullInt64
				err := tx.QueryRowContext(ctx, fleetrow.TokenRevokedSQL, h.TokenID).Scan(&revoked)
				if err != nil && !errors.Is(err, sql.ErrNoRows) {
					return err
				}
				valid = err == nil && !revoked.Valid
			}
			if err := fleetrow.CheckRegister(n, h, valid); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, fleetrow.UpdateNodeSQL, args.Update()...); err != nil {
				return err
			}
		}
		out, err = readNode(ctx, tx, n.ID)
		return err
	})
	if err != nil {
		return gpuwarden.Node{}, f.wrap("register node "+n.ID, err)
	}
	return out, nil
}

// queryer is what reads need of a *sql.DB or a *sql.Tx.
type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func readNode(ctx context.Context, q queryer, id string) (gpuwarden.Node, error) {
	if !fleetrow.Text(id) {
		return gpuwarden.Node{}, gpuwarden.Errorf(gpuwarden.ENotFound, "node %q not found", id)
	}
	var r fleetrow.NodeRow
	err := q.QueryRowContext(ctx, "SELECT "+fleetrow.NodeCols+" FROM nodes WHERE id = $1", id).Scan(r.Dest()...)
	if errors.Is(err, sql.ErrNoRows) {
		return gpuwarden.Node{}, gpuwarden.Errorf(gpuwarden.ENotFound, "node %s not found", id)
	}
	if err != nil {
		return gpuwarden.Node{}, err
	}
	return r.Node()
}

// RecordHeartbeats stores the last heartbeat of each registered node in the
// batch, in one transaction, with LastSeen set to at; unknown nodes update
// nothing and are skipped.
func (f *Fleet) RecordHeartbeats(ctx context.Context, at time.Time, hbs []gpuwarden.Heartbeat) error {
	ids, lives, err := fleetrow.Heartbeats(hbs)
	if err != nil || len(ids) == 0 {
		return err
	}
	ms := fleetrow.Ms(at)
	err = f.inTx(ctx, func(tx *sql.Tx) error {
		st := tx.StmtContext(ctx, f.heartbeat)
		for i, id := range ids {
			if _, err := st.ExecContext(ctx, id, ms, lives[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return f.wrap("record heartbeats", err)
	}
	return nil
}

// Ingest stores a batch for one node in one transaction: each minute not
// stored before is added to its hour at the node's price now, each event
// not stored before is kept, and the rest count as duplicates.
func (f *Fleet) Ingest(ctx context.Context, node string, b gpuwarden.FleetBatch) (gpuwarden.BatchResult, error) {
	batch, err := fleetrow.EncodeBatch(node, b)
	if err != nil {
		return gpuwarden.BatchResult{}, err
	}
	var res gpuwarden.BatchResult
	err = f.inTx(ctx, func(tx *sql.Tx) error {
		var price int64
		var currency string
		err := tx.StmtContext(ctx, f.nodePrice).QueryRowContext(ctx, node).Scan(&price, &currency)
		if errors.Is(err, sql.ErrNoRows) {
			return gpuwarden.Errorf(gpuwarden.ENotFound, "ingest: node %s not found", node).
				WithHint("the agent registers its node before it ships minutes")
		}
		if err != nil {
			return err
		}
		// The transaction holds the write lock, so the sets read here are
		// still the stored ones when the new bits are added.
		stored := map[int64]int64{}
		st := tx.StmtContext(ctx, f.minuteSet)
		for _, h := range fleetrow.SetHours(batch.Minutes) {
			var bits int64
			if err := st.QueryRowContext(ctx, node, h).Scan(&bits); err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			stored[h] = bits
		}
		fresh, sets := fleetrow.Fresh(batch.Minutes, stored)
		st = tx.StmtContext(ctx, f.upsertSet)
		for _, s := range sets {
			if _, err := st.ExecContext(ctx, node, s.HourMs, s.Bits); err != nil {
				return err
			}
		}
		hours, gpus := fleetrow.Hours(fresh, gpuwarden.Micros(price), gpuwarden.Currency(currency))
		st = tx.StmtContext(ctx, f.upsertHour)
		for _, h := range hours {
			if _, err := st.ExecContext(ctx, node, h.HourMs, h.Minutes, h.PriceMinutes, h.Currency, h.Samples, h.CPUSum); err != nil {
				return err
			}
		}
		st = tx.StmtContext(ctx, f.upsertGPUHour)
		for _, g := range gpus {
			if _, err := st.ExecContext(ctx, node, g.HourMs, g.GPU, g.Minutes, g.UtilSum, g.MemSum); err != nil {
				return err
			}
		}
		events := 0
		st = tx.StmtContext(ctx, f.insertEvent)
		for _, e := range batch.Events {
			r, err := st.ExecContext(ctx, node, e.Seq, e.TimeMs, e.Kind, e.Severity, e.Message, e.Key, e.Data)
			if err != nil {
				return err
			}
			if n, err := r.RowsAffected(); err != nil {
				return err
			} else if n > 0 {
				events++
			}
		}
		res = batch.Result(len(fresh), events)
		return nil
	})
	if err != nil {
		return gpuwarden.BatchResult{}, f.wrap("ingest node "+node, err)
	}
	return res, nil
}

// Node returns one node.
func (f *Fleet) Node(ctx context.Context, id string) (gpuwarden.Node, error) {
	n, err := readNode(ctx, f.rdb, id)
	if err != nil {
		return gpuwarden.Node{}, f.wrap("read node "+id, err)
	}
	return n, nil
}

// Nodes lists a project's nodes by ID, or every node for AllProjects.
func (f *Fleet) Nodes(ctx context.Context, project string) ([]gpuwarden.Node, error) {
	query, args := fleetrow.ListSQL(fleetrow.NodeCols, "nodes", "id", project)
	rows, err := f.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, f.wrap("list nodes", err)
	}
	defer rows.Close()
	var out []gpuwarden.Node
	for rows.Next() {
		var r fleetrow.NodeRow
		if err := rows.Scan(r.Dest()...); err != nil {
			return nil, f.wrap("list nodes", err)
		}
		n, err := r.Node()
		if err != nil {
			return nil, f.wrap("list nodes", err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, f.wrap("list nodes", err)
	}
	return out, nil
}

// Hours returns the node hours of a project (or AllProjects) in [from, to),
// ordered by node then hour, each GPU's utilisation averaged over its minutes.
func (f *Fleet) Hours(ctx context.Context, project string, from, to time.Time) ([]gpuwarden.NodeHour, error) {
	query, args := fleetrow.HoursSQL(project, from, to)
	rows, err := f.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, f.wrap("read hours", err)
	}
	defer rows.Close()
	var out []gpuwarden.NodeHour
	for rows.Next() {
		var r fleetrow.HourScan
		if err := rows.Scan(r.Dest()...); err != nil {
			return nil, f.wrap("read hours", err)
		}
		out = fleetrow.AddHour(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, f.wrap("read hours", err)
	}
	return out, nil
}

// Events returns the fleet events q selects, newest first.
func (f *Fleet) Events(ctx context.Context, q gpuwarden.EventQuery) ([]gpuwarden.NodeEvent, error) {
	query, args := fleetrow.EventsSQL(q)
	rows, err := f.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, f.wrap("read fleet events", err)
	}
	defer rows.Close()
	var out []gpuwarden.NodeEvent
	for rows.Next() {
		var r fleetrow.EventScan
		if err := rows.Scan(r.Dest()...); err != nil {
			return nil, f.wrap("read fleet events", err)
		}
		e, err := r.NodeEvent()
		if err != nil {
			return nil, f.wrap("read fleet events", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, f.wrap("read fleet events", err)
	}
	return out, nil
}

// Retain drops minutes older than FleetMinuteRetention and hours and events
// older than FleetHourRetention, in chunks of retainChunk rows so that the
// writer is never held for long.
func (f *Fleet) Retain(ctx context.Context, now time.Time) error {
	if err := f.sweepSessions(ctx, now); err != nil {
		return err
	}
	for _, c := range fleetrow.Cutoffs(now) {
		query := "DELETE FROM " + c.Table + " WHERE rowid IN (SELECT rowid FROM " + c.Table +
			" WHERE " + c.Column + " < $1 LIMIT $2)"
		for {
			res, err := f.db.ExecContext(ctx, query, c.Before, retainChunk)
			if err != nil {
				return f.wrap("retain "+c.Table, err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return f.wrap("retain "+c.Table, err)
			}
			if n < retainChunk {
				break
			}
		}
	}
	return nil
}
