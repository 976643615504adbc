package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/fleetrow"
)

// The statements that carry a whole batch in one statement, through arrays
// that unnest turns back into rows: one round trip however large the batch.
const (
	// lockNodesSQL locks a heartbeat batch's rows in ID order before the
	// update, so that two batches with nodes in common cannot deadlock
	// whatever plan the update gets.
	lockNodesSQL = `SELECT id FROM nodes WHERE id = ANY($1) ORDER BY id FOR UPDATE`
	// heartbeatsSQL stores a batch of heartbeats; unknown nodes match no row.
	heartbeatsSQL = `UPDATE nodes SET last_seen_ms = $1, live = v.live
FROM unnest($2::text[], $3::text[]) AS v(id, live) WHERE nodes.id = v.id`
	// ensureSetsSQL makes sure each hour of a batch has a minute set, so
	// that lockSetsSQL has a row to lock: two replicas ingesting one node
	// at once then take turns on its sets instead of both reading "none".
	ensureSetsSQL = fleetrow.MinuteSetInsert + `
SELECT $1, h, 0 FROM unnest($2::bigint[]) AS v(h) ON CONFLICT (node_id, hour_ms) DO NOTHING`
	// lockSetsSQL reads and locks the sets of a batch's hours, in hour
	// order, until the transaction ends.
	lockSetsSQL = `SELECT hour_ms, bits FROM minute_sets WHERE node_id = $1 AND hour_ms = ANY($2) ORDER BY hour_ms FOR UPDATE`
	// addSetsSQL adds the new minutes' bits to their locked sets.
	addSetsSQL = `UPDATE minute_sets SET bits = minute_sets.bits | v.b
FROM unnest($2::bigint[], $3::bigint[]) AS v(h, b) WHERE minute_sets.node_id = $1 AND minute_sets.hour_ms = v.h`
	// insertEventsSQL stores the events whose sequence number is new.
	insertEventsSQL = `INSERT INTO fleet_events (node_id, seq, time_ms, kind, severity, message, dedup_key, data)
SELECT $1, s, t, k, sv, m, dk, d
FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[]) AS v(s, t, k, sv, m, dk, d)
ON CONFLICT (node_id, seq) DO NOTHING`
	upsertHoursSQL = fleetrow.HourInsert + `
SELECT $1, h, m, p, c, s, u FROM unnest($2::bigint[], $3::bigint[], $4::bigint[], $5::text[], $6::bigint[], $7::float8[])
AS v(h, m, p, c, s, u)` + fleetrow.HourConflict
	upsertGPUHoursSQL = fleetrow.GPUHourInsert + `
SELECT $1, h, g, m, u, mm FROM unnest($2::bigint[], $3::bigint[], $4::bigint[], $5::float8[], $6::float8[])
AS v(h, g, m, u, mm)` + fleetrow.GPUHourConflict
)

// Fleet is the server's fleet ledger in one PostgreSQL database, beside (or
// without) an agent's tables; it is safe for concurrent use and pools its
// connections.
type Fleet struct {
	pool *pgxpool.Pool
	name string // the database, for errors; never the DSN, which may hold a password
}

var _ gpuwarden.Fleet = (*Fleet)(nil)

// OpenFleet connects to the database at dsn (a PostgreSQL URL or key=value
// string) and brings its schema up to date.
func OpenFleet(ctx context.Context, dsn string) (*Fleet, error) {
	pool, name, err := connect(ctx, "open fleet ledger", dsn)
	if err != nil {
		return nil, err
	}
	return &Fleet{pool: pool, name: name}, nil
}

// Close waits for the connections in use and closes them all; the ledger
// cannot be used afterwards.
func (f *Fleet) Close() error {
	f.pool.Close()
	return nil
}

// wrap names the operation and the database; application errors pass as
// they are, since they already say what is wrong.
func (f *Fleet) wrap(op string, err error) error {
	var app *gpuwarden.Error
	if errors.As(err, &app) {
		return err
	}
	if unavailable(err) {
		return &gpuwarden.Error{Code: gpuwarden.EUnavailable, Message: op + " " + f.name, Err: err, Hint: unavailableHint}
	}
	return fmt.Errorf("%s %s: %w", op, f.name, err)
}

// Ready rewrites the newest migration row and commits: a write that needs
// the primary, its disk and a connection, which is what agents need.
func (f *Fleet) Ready(ctx context.Context) error {
	_, err := f.pool.Exec(ctx, "UPDATE schema_migrations SET version = version WHERE version = (SELECT MAX(version) FROM schema_migrations)")
	if err != nil {
		return f.wrap("write a readiness probe", err)
	}
	return nil
}

// PutProject creates a project or updates its budget and currency, keeping
// the time it was created.
func (f *Fleet) PutProject(ctx context.Context, p gpuwarden.Project) error {
	args, err := fleetrow.ProjectArgs(p)
	if err != nil {
		return err
	}
	if _, err := f.pool.Exec(ctx, fleetrow.UpsertProjectSQL, args...); err != nil {
		return f.wrap("put project "+p.Name, err)
	}
	return nil
}

// Projects lists the projects by name.
func (f *Fleet) Projects(ctx context.Context) ([]gpuwarden.Project, error) {
	rows, err := f.pool.Query(ctx, "SELECT "+fleetrow.ProjectCols+" FROM projects ORDER BY name")
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
	tag, err := f.pool.Exec(ctx, fleetrow.InsertTokenSQL, args...)
	if err != nil {
		return f.wrap("create token "+t.ID, err)
	}
	if tag.RowsAffected() == 0 {
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
	err := f.pool.QueryRow(ctx, "SELECT "+fleetrow.TokenCols+" FROM tokens WHERE id = $1", id).Scan(r.Dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
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
	rows, err := f.pool.Query(ctx, query, args...)
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
	tag, err := f.pool.Exec(ctx, fleetrow.RevokeTokenSQL, id, at.UnixMilli())
	if err != nil {
		return f.wrap("revoke token "+id, err)
	}
	if tag.RowsAffected() == 0 {
		return gpuwarden.Errorf(gpuwarden.ENotFound, "revoke token %s: not found", id)
	}
	return nil
}

// RegisterNode inserts a node or, after the ownership and identity checks,
// updates what the box says about itself; it returns the node as stored.
// The stored row is locked before the checks, so that two registrations of
// one node take turns, also through two servers on one database: the
// second waits on the first's insert or lock and then sees its identity.
func (f *Fleet) RegisterNode(ctx context.Context, n gpuwarden.Node) (gpuwarden.Node, error) {
	args, err := fleetrow.EncodeNode(n)
	if err != nil {
		return gpuwarden.Node{}, err
	}
	var out gpuwarden.Node
	err = pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, fleetrow.InsertNodeSQL, args.Insert()...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			var h fleetrow.NodeHolder
			if err := tx.QueryRow(ctx, fleetrow.NodeOwnerSQL+" FOR UPDATE", n.ID).Scan(h.Dest()...); err != nil {
				return err
			}
			valid := false
			if h.TokenID != n.TokenID {
				var revoked *int64
				err := tx.QueryRow(ctx, fleetrow.TokenRevokedSQL, h.TokenID).Scan(&revoked)
				if err != nil && !errors.Is(err, pgx.ErrNoRows) {
					return err
				}
				valid = err == nil && revoked == nil
			}
			if err := fleetrow.CheckRegister(n, h, valid); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, fleetrow.UpdateNodeSQL, args.Update()...); err != nil {
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

// queryer is what reads need of a pool or a transaction.
type queryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func readNode(ctx context.Context, q queryer, id string) (gpuwarden.Node, error) {
	if !fleetrow.Text(id) {
		return gpuwarden.Node{}, gpuwarden.Errorf(gpuwarden.ENotFound, "node %q not found", id)
	}
	var r fleetrow.NodeRow
	err := q.QueryRow(ctx, "SELECT "+fleetrow.NodeCols+" FROM nodes WHERE id = $1", id).Scan(r.Dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return gpuwarden.Node{}, gpuwarden.Errorf(gpuwarden.ENotFound, "node %s not found", id)
	}
	if err != nil {
		return gpuwarden.Node{}, err
	}
	return r.Node()
}

// RecordHeartbeats stores the last heartbeat of each registered node in the
// batch with LastSeen set to at; unknown nodes update nothing and are
// skipped. The lock and the update go as one pgx batch, which PostgreSQL
// runs as one implicit transaction: one round trip per call.
func (f *Fleet) RecordHeartbeats(ctx context.Context, at time.Time, hbs []gpuwarden.Heartbeat) error {
	ids, lives, err := fleetrow.Heartbeats(hbs)
	if err != nil || len(ids) == 0 {
		return err
	}
	var b pgx.Batch
	b.Queue(lockNodesSQL, ids)
	b.Queue(heartbeatsSQL, fleetrow.Ms(at), ids, lives)
	if err := f.pool.SendBatch(ctx, &b).Close(); err != nil {
		return f.wrap("record heartbeats", err)
	}
	return nil
}

// Ingest stores a batch for one node in one transaction: each minute not
// stored before is added to its hour at the node's price now, each event
// not stored before is kept, and the rest count as duplicates. It costs
// three round trips: BEGIN with the node, minutes and events in one pgx
// batch, the hours the new minutes add to in a second, then COMMIT.
func (f *Fleet) Ingest(ctx context.Context, node string, b gpuwarden.FleetBatch) (gpuwarden.BatchResult, error) {
	batch, err := fleetrow.EncodeBatch(node, b)
	if err != nil {
		return gpuwarden.BatchResult{}, err
	}
	res, err := f.ingest(ctx, node, batch)
	if err != nil {
		return gpuwarden.BatchResult{}, f.wrap("ingest node "+node, err)
	}
	return res, nil
}

func (f *Fleet) ingest(ctx context.Context, node string, batch fleetrow.Batch) (gpuwarden.BatchResult, error) {
	var (
		price    int64
		currency string
		stored   = map[int64]int64{}
		events   int
		first    pgx.Batch
	)
	first.BeginTx(pgx.TxOptions{})
	first.Queue(fleetrow.NodePriceSQL, node).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&price, &currency)
		if errors.Is(err, pgx.ErrNoRows) {
			return gpuwarden.Errorf(gpuwarden.ENotFound, "ingest: node %s not found", node).
				WithHint("the agent registers its node before it ships minutes")
		}
		return err
	})
	if hours := fleetrow.SetHours(batch.Minutes); len(hours) > 0 {
		first.Queue(ensureSetsSQL, node, hours)
		first.Queue(lockSetsSQL, node, hours).Query(func(rows pgx.Rows) error {
			var h, bits int64
			_, err := pgx.ForEachRow(rows, []any{&h, &bits}, func() error {
				stored[h] = bits
				return nil
			})
			return err
		})
	}
	if n := len(batch.Events); n > 0 {
		seq, at := make([]int64, n), make([]int64, n)
		kind, sev, msg := make([]string, n), make([]string, n), make([]string, n)
		key, data := make([]*string, n), make([]*string, n)
		for i, e := range batch.Events {
			seq[i], at[i], kind[i], sev[i], msg[i] = e.Seq, e.TimeMs, e.Kind, e.Severity, e.Message
			key[i], data[i] = text(e.Key), text(e.Data)
		}
		first.Queue(insertEventsSQL, node, seq, at, kind, sev, msg, key, data).Exec(func(tag pgconn.CommandTag) error {
			events = int(tag.RowsAffected())
			return nil
		})
	}
	br := f.pool.SendBatch(ctx, &first)
	tx := br.Tx()
	if tx != nil {
		// After Commit this is a no-op; on any error it ends the
		// transaction and returns the connection to the pool.
		defer func() { _ = tx.Rollback(ctx) }()
	}
	if err := br.Close(); err != nil {
		return gpuwarden.BatchResult{}, err
	}
	if tx == nil {
		return gpuwarden.BatchResult{}, errors.New("the batch began no transaction")
	}
	minutes, sets := fleetrow.Fresh(batch.Minutes, stored)
	if len(minutes) > 0 {
		hours, gpus := fleetrow.Hours(minutes, gpuwarden.Micros(price), gpuwarden.Currency(currency))
		var second pgx.Batch
		sh, sb := make([]int64, len(sets)), make([]int64, len(sets))
		for i, s := range sets {
			sh[i], sb[i] = s.HourMs, s.Bits
		}
		second.Queue(addSetsSQL, node, sh, sb)
		n := len(hours)
		hh, hm, hp, hc := make([]int64, n), make([]int64, n), make([]int64, n), make([]string, n)
		hs, hu := make([]int64, n), make([]float64, n)
		for i, h := range hours {
			hh[i], hm[i], hp[i], hc[i], hs[i], hu[i] = h.HourMs, h.Minutes, h.PriceMinutes, h.Currency, h.Samples, h.CPUSum
		}
		second.Queue(upsertHoursSQL, node, hh, hm, hp, hc, hs, hu)
		if n := len(gpus); n > 0 {
			gh, gg, gm, gu, gmem := make([]int64, n), make([]int64, n), make([]int64, n), make([]float64, n), make([]float64, n)
			for i, g := range gpus {
				gh[i], gg[i], gm[i], gu[i], gmem[i] = g.HourMs, g.GPU, g.Minutes, g.UtilSum, g.MemSum
			}
			second.Queue(upsertGPUHoursSQL, node, gh, gg, gm, gu, gmem)
		}
		if err := tx.SendBatch(ctx, &second).Close(); err != nil {
			return gpuwarden.BatchResult{}, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return gpuwarden.BatchResult{}, err
	}
	return batch.Result(len(minutes), events), nil
}

// text is a nullable JSON column value (nil or a string) as a pgx array
// element.
func text(v any) *string {
	if s, ok := v.(string); ok {
		return &s
	}
	return nil
}

// Node returns one node.
func (f *Fleet) Node(ctx context.Context, id string) (gpuwarden.Node, error) {
	n, err := readNode(ctx, f.pool, id)
	if err != nil {
		return gpuwarden.Node{}, f.wrap("read node "+id, err)
	}
	return n, nil
}

// Nodes lists a project's nodes by ID, or every node for AllProjects.
func (f *Fleet) Nodes(ctx context.Context, project string) ([]gpuwarden.Node, error) {
	query, args := fleetrow.ListSQL(fleetrow.NodeCols, "nodes", "id", project)
	rows, err := f.pool.Query(ctx, query, args...)
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
	rows, err := f.pool.Query(ctx, query, args...)
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
	rows, err := f.pool.Query(ctx, query, args...)
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
// older than FleetHourRetention, in one batch; PostgreSQL's row locks let
// heartbeats and ingests go on while it deletes.
func (f *Fleet) Retain(ctx context.Context, now time.Time) error {
	var b pgx.Batch
	for _, c := range fleetrow.Cutoffs(now) {
		b.Queue("DELETE FROM "+c.Table+" WHERE "+c.Column+" < $1", c.Before)
	}
	b.Queue(fleetrow.SweepSessionsSQL, now.UnixMilli())
	if err := f.pool.SendBatch(ctx, &b).Close(); err != nil {
		return f.wrap("retain", err)
	}
	return nil
}
