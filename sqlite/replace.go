package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/ledgerrow"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Event kinds of a ledger that started afresh, the first event in it.
const (
	// KindLedgerDamaged: the file was damaged and is kept aside.
	KindLedgerDamaged = "ledger-damaged"
	// KindLedgerLost: the file was deleted or replaced while the agent ran.
	KindLedgerLost = "ledger-lost"
)

// DataAside is the Data key of a ledger-damaged event: where the damaged
// file now is.
const DataAside = "aside"

// damageError is a file that opens but fails SQLite's quick_check.
type damageError struct{ problems string }

func (e *damageError) Error() string { return "quick_check: " + e.problems }

// damaged reports whether err says that the file is not a sound SQLite
// database: not one at all, malformed, or failing quick_check. A file the
// process may not read, a full disk or a schema newer than this gpuwarden
// knows are not damage: moving such a file aside would lose a good ledger.
func damaged(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff { // the primary result code
		case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
			return true
		}
	}
	var de *damageError
	return errors.As(err, &de)
}

// damage is what was wrong with a damaged file, in SQLite's words and
// without the path, which the event names once.
func damage(err error) string {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Error()
	}
	var de *damageError
	if errors.As(err, &de) {
		return de.Error()
	}
	return err.Error()
}

// OpenOrReplace opens the agent's ledger at path as Open does, then checks
// it (PRAGMA quick_check: every page read once). A damaged file would keep
// the agent from starting, and with it every idle and budget stop, so it is
// put aside, never deleted: renamed with its -wal and -shm to
// PATH.damaged-YYYYMMDDTHHMMSSZ, where SQLite can still open it, and a
// fresh ledger starts at path. The fresh ledger's first event says so
// (critical, KindLedgerDamaged); it is returned for the agent to announce,
// nil when the file was sound. Any other failure to open is returned as Open
// returns it.
func OpenOrReplace(ctx context.Context, path string, now time.Time) (*Ledger, *gpuwarden.Event, error) {
	l, err := Open(ctx, path)
	if err == nil {
		l.mu.RLock()
		err = check(ctx, l.db)
		l.mu.RUnlock()
		if err != nil {
			_ = l.Close()
			err = l.wrap("check ledger", err)
		}
	}
	if err == nil || !damaged(err) {
		if err != nil {
			return nil, nil, err
		}
		return l, nil, nil
	}
	abs, aerr := filepath.Abs(path)
	if aerr != nil {
		return nil, nil, err
	}
	aside, aerr := putAside(abs, "damaged", now)
	if aerr != nil {
		return nil, nil, fmt.Errorf("%w (moving it aside failed too: %v)", err, aerr)
	}
	fresh, oerr := Open(ctx, abs)
	if oerr != nil {
		return nil, nil, oerr
	}
	e, rerr := recordFirst(ctx, fresh.db, damagedEvent(abs, aside, err, now))
	if rerr != nil {
		_ = fresh.Close()
		return nil, nil, fresh.wrap("record the fresh start", rerr)
	}
	return fresh, &e, nil
}

func damagedEvent(abs, aside string, err error, now time.Time) gpuwarden.Event {
	return gpuwarden.Event{Kind: KindLedgerDamaged, Severity: gpuwarden.SeverityCritical, Time: now,
		Key: KindLedgerDamaged + "-" + filepath.Base(aside), Data: map[string]string{DataAside: aside},
		Message: fmt.Sprintf("the ledger %s was damaged (%s): it was moved aside to %s and a fresh ledger started; "+
			"the history, the idle clock and the month's spend before now are not in the fresh one", abs, damage(err), aside)}
}

// check runs SQLite's quick_check; a file that fails it is damaged.
func check(ctx context.Context, db *sql.DB) error {
	rows, err := db.QueryContext(ctx, "PRAGMA quick_check")
	if err != nil {
		return err
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return err
		}
		if s != "ok" && len(problems) < 3 {
			problems = append(problems, s)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(problems) > 0 {
		return &damageError{problems: strings.Join(problems, "; ")}
	}
	return nil
}

// putAside renames the file at abs and its -wal and -shm, those that
// exist, to abs.WHY-STAMP (and -wal, -shm), so that SQLite can open the
// set there; it returns the new name of the database file. The WAL goes
// first: a WAL left at the path would be replayed into the fresh file.
// With suffixes, it moves only those ("-wal", "-shm").
func putAside(abs, why string, now time.Time, suffixes ...string) (string, error) {
	if len(suffixes) == 0 {
		suffixes = []string{"-wal", "-shm", ""}
	}
	base := abs + "." + why + "-" + now.UTC().Format("20060102T150405Z")
	aside := base
	for n := 2; ; n++ {
		taken := false
		for _, suffix := range []string{"", "-wal", "-shm"} {
			if _, err := os.Lstat(aside + suffix); !errors.Is(err, fs.ErrNotExist) {
				taken = true
			}
		}
		if !taken {
			break
		}
		aside = fmt.Sprintf("%s-%d", base, n)
	}
	for _, suffix := range suffixes {
		if err := os.Rename(abs+suffix, aside+suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
	return aside, nil
}

// recordFirst records e as the first event of a ledger that starts afresh.
// Its number is the time in milliseconds, not 1: the fleet server keys
// events by node and number and drops one it holds as a replay, and it
// holds the lost ledger's 1, 2, 3…; no ledger records events faster than
// one a millisecond, so the numbers of a later file are always higher.
func recordFirst(ctx context.Context, db *sql.DB, e gpuwarden.Event) (gpuwarden.Event, error) {
	data, err := ledgerrow.JSONText(e.Data, len(e.Data) == 0)
	if err != nil {
		return e, err
	}
	var key any
	if e.Key != "" {
		key = e.Key
	}
	err = db.QueryRowContext(ctx, `INSERT INTO events (id, time_ms, kind, severity, message, dedup_key, data)
VALUES (MAX($1, (SELECT COALESCE(MAX(id), 0) + 1 FROM events)), $2, $3, $4, $5, $6, $7)
ON CONFLICT (dedup_key) DO NOTHING RETURNING id`,
		e.Time.UnixMilli(), e.Time.UnixMilli(), e.Kind, e.Severity, e.Message, key, data).Scan(&e.Seq)
	if errors.Is(err, sql.ErrNoRows) {
		return e, nil // recorded before: the same file, put aside twice in one second
	}
	return e, err
}

// Gone says what became of the file the ledger writes to: "" while it is
// still at the ledger's path, "deleted" when the path names nothing, and
// "replaced by another file" when it names another one. SQLite goes on
// writing to a deleted file, and everything written is lost when the agent
// stops; one stat is cheap enough to look every few seconds.
func (l *Ledger) Gone() (string, error) {
	l.mu.RLock()
	opened := l.file
	l.mu.RUnlock()
	now, err := os.Stat(l.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "deleted", nil
	case err != nil:
		return "", l.wrap("look at the ledger", err)
	case opened == nil || !os.SameFile(opened, now):
		return "replaced by another file", nil
	}
	return "", nil
}

// Replace closes the file the ledger writes to and opens the ledger's path
// afresh: a new file when it names none, the file it names otherwise (put
// aside first, as OpenOrReplace does, when damaged). why is what Gone said.
// The file's first event (critical, KindLedgerLost) says what happened and
// is returned. Until Replace succeeds the ledger's methods fail; the agent
// calls it again at its next look.
func (l *Ledger) Replace(ctx context.Context, why string, now time.Time) (gpuwarden.Event, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shut {
		return gpuwarden.Event{}, l.wrap("reopen ledger", errors.New("the ledger is closed"))
	}
	// The old connection goes first. SQLite neither checkpoints nor removes
	// the -wal and -shm of a file that was deleted or moved while open
	// (SQLITE_FCNTL_HAS_MOVED), so what is at the path beside the file is
	// the lost file's: a file opened there would replay that WAL into
	// itself, and a fresh file would come back as the old one. They are put
	// aside too. The close's error is about a file that is gone.
	_ = l.closeLocked()
	if _, err := putAside(l.path, "orphan", now, "-wal", "-shm"); err != nil {
		return gpuwarden.Event{}, l.wrap("reopen ledger", err)
	}
	e := gpuwarden.Event{Kind: KindLedgerLost, Severity: gpuwarden.SeverityCritical, Time: now,
		Key: fmt.Sprintf("%s-%d", KindLedgerLost, now.UnixMilli())}
	switch why {
	case "deleted":
		e.Message = fmt.Sprintf("the ledger %s was deleted while the agent ran: a fresh ledger started there; "+
			"the samples and events before now are lost, the month's spend goes on from the agent's memory", l.path)
	default:
		e.Message = fmt.Sprintf("the ledger %s was %s while the agent ran: the agent now writes to the file there", l.path, why)
	}
	db, _, err := openDB(ctx, "reopen ledger", l.path)
	if err == nil {
		if err = check(ctx, db); err != nil {
			_ = db.Close()
		}
	}
	if err != nil && damaged(err) {
		aside, aerr := putAside(l.path, "damaged", now)
		if aerr != nil {
			return gpuwarden.Event{}, l.wrap("reopen ledger", fmt.Errorf("%w (moving it aside failed too: %v)", err, aerr))
		}
		e = damagedEvent(l.path, aside, err, now)
		db, _, err = openDB(ctx, "reopen ledger", l.path)
	}
	if err != nil {
		return gpuwarden.Event{}, err
	}
	l.db, l.closed = db, false
	if err := l.prepare(ctx); err != nil {
		_ = l.closeLocked()
		return gpuwarden.Event{}, l.wrap("reopen ledger", err)
	}
	e, err = recordFirst(ctx, l.db, e)
	if err != nil {
		return e, l.wrap("record the fresh start", err)
	}
	return e, nil
}
