package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/ledgerrow"
)

// migrationFiles are the schema changes, applied in the order of their
// numeric prefix; a released file is never edited, only followed by a new one.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// pragmas configure every connection: WAL so that a reader (`gpuwarden
// status`, the dashboard) never blocks the sampler, a busy timeout so that a
// second process waits instead of failing, NORMAL sync because WAL keeps the
// file consistent and losing the last second of samples on power loss is
// fine, and IMMEDIATE transactions so that a transaction that reads before it
// writes (Compact, migrations) takes the write lock up front, where
// busy_timeout applies, rather than failing with SQLITE_BUSY when it upgrades.
const pragmas = "_pragma=busy_timeout(5000)" +
	"&_pragma=journal_mode(WAL)" +
	"&_pragma=foreign_keys(1)" +
	"&_pragma=synchronous(NORMAL)" +
	"&_txlock=immediate"

// newFilePragmas are added for a file that does not exist yet: incremental
// auto-vacuum, so that Compact can hand pages back, takes effect only on a
// new file. On an existing one the pragma is a write that, when another
// connection commits between its read and its write, fails at once with
// SQLITE_BUSY (a stale snapshot, which no busy timeout waits out): a reader
// opened while the server or the agent writes failed that way.
const newFilePragmas = "&_auto_vacuum=INCREMENTAL"

// Ledger is the agent's ledger in one SQLite file; it is safe for concurrent
// use, and its writes go through one connection, one at a time.
type Ledger struct {
	path string

	// mu guards the connection and its statements: every method holds it
	// to read, Replace to swap them for a fresh file's.
	mu          sync.RWMutex
	db          *sql.DB
	insertHost  *sql.Stmt
	insertGPU   *sql.Stmt
	insertEvent *sql.Stmt
	// file is the file opened, which Gone compares with what the path
	// names now; closed is set once the connection is closed, and shut by
	// Close, after which Replace opens nothing.
	file         os.FileInfo
	closed, shut bool
}

var _ gpuwarden.Ledger = (*Ledger)(nil)

// Open opens the ledger at path, creating the file and its directory (0700)
// when missing, and brings its schema up to date.
func Open(ctx context.Context, path string) (*Ledger, error) {
	db, abs, err := openDB(ctx, "open ledger", path)
	if err != nil {
		return nil, err
	}
	l := &Ledger{db: db, path: abs}
	if err := l.prepare(ctx); err != nil {
		_ = l.Close()
		return nil, l.wrap("open ledger", err)
	}
	return l, nil
}

// prepare prepares the statements on l.db and notes which file it opened.
func (l *Ledger) prepare(ctx context.Context) error {
	p := preparer{ctx: ctx, db: l.db}
	l.insertHost = p.prepare(ledgerrow.UpsertSQL("host_samples", []string{"time_ms"}, ledgerrow.HostCols))
	l.insertGPU = p.prepare(ledgerrow.UpsertSQL("gpu_samples", []string{"time_ms", "gpu"}, ledgerrow.GPUCols))
	l.insertEvent = p.prepare(insertEventSQL)
	if p.err != nil {
		return p.err
	}
	fi, err := os.Stat(l.path)
	if err != nil {
		return err
	}
	l.file = fi
	return nil
}

// openDB opens the file at path for op ("open ledger"), creating it and its
// directory (0700) when missing, and brings its schema up to date: the agent
// ledger and the fleet ledger share one file format and one migration
// sequence. It returns the database and the absolute path errors name.
func openDB(ctx context.Context, op, path string) (*sql.DB, string, error) {
	if path == "" {
		return nil, "", gpuwarden.Errorf(gpuwarden.EInvalid, "%s: no path", op)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, "", fmt.Errorf("%s %s: %w", op, path, err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, "", fmt.Errorf("%s %s: %w", op, abs, err)
	}
	uri := dsn(abs)
	if fi, err := os.Stat(abs); errors.Is(err, fs.ErrNotExist) || err == nil && fi.Size() == 0 {
		uri += newFilePragmas
	}
	if err := private(abs); err != nil {
		return nil, "", fmt.Errorf("%s %s: %w", op, abs, err)
	}
	db, err := sql.Open("sqlite", uri)
	if err != nil {
		return nil, "", fmt.Errorf("%s %s: %w", op, abs, err)
	}
	// One connection: SQLite has one writer anyway, and one connection makes
	// the pragmas above hold for every statement without a connection hook.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, "", fmt.Errorf("%s %s: %w", op, abs, err)
	}
	if err := migrate(ctx, db); err != nil {
		_ = db.Close()
		var app *gpuwarden.Error
		if errors.As(err, &app) {
			app.Message = fmt.Sprintf("%s %s: %s", op, abs, app.Message)
			return nil, "", app
		}
		return nil, "", fmt.Errorf("%s %s: %w", op, abs, err)
	}
	return db, abs, nil
}

// private makes the file at abs, and the -wal and -shm files SQLite keeps
// beside it, readable by the owner only: the ledger holds the box's process
// names, its spend and the fleet's tokens. SQLite creates a file 0644 less
// the umask, and its -wal and -shm with the mode of the database file, so
// the file is created 0600 here before SQLite opens it; a file an older
// gpuwarden created is narrowed. A file another user owns is left as it is
// (chmod is refused): a reader such as `report` still opens it.
func private(abs string) error {
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
	switch {
	case errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS):
		return nil // a reader's: SQLite says what it can do with it
	case err != nil:
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	for _, p := range []string{abs, abs + "-wal", abs + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm()&0o077 == 0 {
			continue
		}
		if err := os.Chmod(p, fi.Mode().Perm()&0o700); err != nil && !errors.Is(err, fs.ErrPermission) {
			return err
		}
	}
	return nil
}

// readers is how many read-only connections openReaders keeps: enough that
// a slow dashboard query leaves others a connection, few enough that a
// two-core server is not swamped.
const readers = 4

// openReaders opens a pool of read-only connections to the file at abs, which
// openDB has already created and migrated. query_only makes a write through
// them an error rather than a second writer contending for the lock.
func openReaders(abs string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", dsn(abs)+"&_pragma=query_only(1)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(readers)
	db.SetMaxIdleConns(readers)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	return db, nil
}

// dsn is the modernc.org/sqlite URI for an absolute path; the path is
// escaped because SQLite decodes %XX and stops at '?' and '#'.
func dsn(abs string) string {
	return "file:" + (&url.URL{Path: abs}).EscapedPath() + "?" + pragmas
}

// preparer prepares statements until the first error, which it keeps, so
// that a ledger's statements read as a list.
type preparer struct {
	ctx context.Context
	db  *sql.DB
	err error
}

func (p *preparer) prepare(query string) *sql.Stmt {
	if p.err != nil {
		return nil
	}
	s, err := p.db.PrepareContext(p.ctx, query)
	if err != nil {
		p.err = fmt.Errorf("prepare %q: %w", strings.SplitN(query, "\n", 2)[0], err)
	}
	return s
}

// closeDB closes the statements that were prepared, then the database.
func closeDB(db *sql.DB, stmts ...*sql.Stmt) error {
	var errs []error
	for _, s := range stmts {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	errs = append(errs, db.Close())
	return errors.Join(errs...)
}

// Close releases the file; the ledger cannot be used afterwards.
func (l *Ledger) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.shut = true
	return l.closeLocked()
}

// closeLocked closes the connection once; l.mu is held for writing.
func (l *Ledger) closeLocked() error {
	if l.closed {
		return nil
	}
	l.closed = true
	if err := closeDB(l.db, l.insertHost, l.insertGPU, l.insertEvent); err != nil {
		return l.wrap("close ledger", err)
	}
	return nil
}

// wrap names the operation and the file, so that an error from a ledger the
// user did not know about still says where to look.
func (l *Ledger) wrap(op string, err error) error {
	return fmt.Errorf("%s %s: %w", op, l.path, err)
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

// migrate applies the migrations the file lacks, each in its own
// transaction with its schema_migrations row, so that a crash leaves the
// file at a known version and a second process racing this one skips what
// the first applied.
func migrate(ctx context.Context, db *sql.DB) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    BIGINT NOT NULL PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at BIGINT NOT NULL
)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	var newest sql.NullInt64
	if err := db.QueryRowContext(ctx, "SELECT MAX(version) FROM schema_migrations").Scan(&newest); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if known := ms[len(ms)-1].version; newest.Valid && int(newest.Int64) > known {
		return gpuwarden.Errorf(gpuwarden.EConflict, "schema version %d is newer than this gpuwarden knows (%d)", newest.Int64, known).
			WithHint("run the gpuwarden that wrote it, or move the file aside to start a new ledger")
	}
	applied, err := appliedVersions(ctx, db)
	if err != nil {
		return err
	}
	for _, m := range ms {
		// Only a missing migration takes the write lock: an open while
		// another process writes must not wait for it once per file.
		if applied[m.version] {
			continue
		}
		if err := apply(ctx, db, m); err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
	}
	return nil
}

// appliedVersions reads which migrations the file has, without a write
// lock; apply checks again inside its transaction.
func appliedVersions(ctx context.Context, db *sql.DB) (map[int]bool, error) {
	rows, err := db.QueryContext(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("read schema versions: %w", err)
	}
	defer rows.Close()
	applied := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("read schema versions: %w", err)
		}
		applied[v] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read schema versions: %w", err)
	}
	return applied, nil
}

func apply(ctx context.Context, db *sql.DB, m migration) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var n int
	if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations WHERE version = $1", m.version).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
		m.version, m.name, time.Now().UnixMilli()); err != nil {
		return err
	}
	return tx.Commit()
}
