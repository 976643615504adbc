package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpuwarden/gpuwarden"
)

// migrationFiles are the schema changes, applied in the order of their
// numeric prefix; a released file is never edited, only followed by a new one.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrateLock is the advisory lock key that serializes migrations, so that
// two servers starting at once against one database do not both create the
// tables; any constant works as long as no other code in the database uses it.
const migrateLock int64 = 0x677075_77617264 // "gpuward"

// Ledger is a gpuwarden ledger in one PostgreSQL database; it is safe for
// concurrent use and pools its connections.
type Ledger struct {
	pool *pgxpool.Pool
	name string // the database, for errors; never the DSN, which may hold a password
}

var _ gpuwarden.Ledger = (*Ledger)(nil)

// Open connects to the database at dsn (a PostgreSQL URL or key=value
// string) and brings its schema up to date.
func Open(ctx context.Context, dsn string) (*Ledger, error) {
	pool, name, err := connect(ctx, "open ledger", dsn)
	if err != nil {
		return nil, err
	}
	return &Ledger{pool: pool, name: name}, nil
}

// connect opens a pool on dsn for op ("open ledger") and brings the schema
// up to date: the agent ledger and the fleet ledger share one migration
// sequence. It returns the pool and the name errors use for the database.
func connect(ctx context.Context, op, dsn string) (*pgxpool.Pool, string, error) {
	if dsn == "" {
		return nil, "", gpuwarden.Errorf(gpuwarden.EInvalid, "%s: no database address", op)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// The parse error may quote the DSN, password included; say only what kind it is.
		return nil, "", gpuwarden.Errorf(gpuwarden.EInvalid, "%s: the database address does not parse", op)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", op, err)
	}
	name := "postgres database " + cfg.ConnConfig.Database
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, "", fmt.Errorf("%s %s: %w", op, name, err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		var app *gpuwarden.Error
		if errors.As(err, &app) {
			app.Message = fmt.Sprintf("%s %s: %s", op, name, app.Message)
			return nil, "", app
		}
		return nil, "", fmt.Errorf("%s %s: %w", op, name, err)
	}
	return pool, name, nil
}

// Close waits for the connections in use and closes them all; the ledger
// cannot be used afterwards.
func (l *Ledger) Close() error {
	l.pool.Close()
	return nil
}

// wrap names the operation and the database, so that an error still says
// where to look.
func (l *Ledger) wrap(op string, err error) error {
	return fmt.Errorf("%s %s: %w", op, l.name, err)
}

// migration is one embedded schema change.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations reads the embedded files, ordered by version.
func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		prefix, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(prefix)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive version and '_'", e.Name())
		}
		b, err := fs.ReadFile(migrationFiles, "migrations/"+e.Name())
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("migrations %s and %s share version %d", ms[i-1].name, ms[i].name, ms[i].version)
		}
	}
	return ms, nil
}

// migrate applies the migrations the database lacks, each in its own
// transaction with its schema_migrations row, all under one session
// advisory lock: a second process waits for the first and then finds
// nothing left to do, instead of failing on a table the first created.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLock); err != nil {
		return fmt.Errorf("lock migrations: %w", err)
	}
	defer func() {
		// A fresh context: the lock must go even when ctx was cancelled,
		// or the pooled connection would keep it.
		if _, err := conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", migrateLock); err != nil {
			conn.Conn().Close(context.Background()) // closing the session drops the lock
		}
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    BIGINT NOT NULL PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at BIGINT NOT NULL
)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	var newest *int64
	if err := conn.QueryRow(ctx, "SELECT MAX(version) FROM schema_migrations").Scan(&newest); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if known := ms[len(ms)-1].version; newest != nil && int(*newest) > known {
		return gpuwarden.Errorf(gpuwarden.EConflict, "schema version %d is newer than this gpuwarden knows (%d)", *newest, known).
			WithHint("run the gpuwarden that wrote it, or point this one at another database")
	}
	for _, m := range ms {
		if err := apply(ctx, conn.Conn(), m); err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
	}
	return nil
}

func apply(ctx context.Context, conn *pgx.Conn, m migration) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var n int
	if err := tx.QueryRow(ctx, "SELECT COUNT(*) FROM schema_migrations WHERE version = $1", m.version).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	// The simple protocol, because a migration file holds several
	// statements and the extended protocol takes one.
	if _, err := tx.Exec(ctx, m.sql, pgx.QueryExecModeSimpleProtocol); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
		m.version, m.name, time.Now().UnixMilli()); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
