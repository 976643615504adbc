package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// openTest opens a ledger at path and closes it when the test ends.
func openTest(t testing.TB, path string) *Ledger {
	t.Helper()
	l, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func TestOpenCreatesDirectoryAndSetsPragmas(t *testing.T) {
	// A space and a '?' in the path: the URI must escape both.
	dir := filepath.Join(t.TempDir(), "data dir?", "nested")
	l := openTest(t, filepath.Join(dir, "ledger.db"))
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o700 {
		t.Errorf("directory mode = %o, want 700", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "ledger.db")); err != nil {
		t.Errorf("ledger file: %v", err)
	}
	for _, tt := range []struct{ pragma, want string }{
		{"journal_mode", "wal"},
		{"busy_timeout", "5000"},
		{"foreign_keys", "1"},
		{"synchronous", "1"}, // NORMAL
		{"auto_vacuum", "2"}, // INCREMENTAL
	} {
		var got string
		if err := l.db.QueryRow("PRAGMA " + tt.pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != tt.want {
			t.Errorf("PRAGMA %s = %q, want %q", tt.pragma, got, tt.want)
		}
	}
}

func TestOpenErrorNamesPath(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(file, "ledger.db") // a directory that is a file
	_, err := Open(context.Background(), path)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("Open(%s) = %v, want an error naming the path", path, err)
	}
	if _, err := Open(context.Background(), ""); gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
		t.Errorf("Open(\"\") = %v, want an invalid error", err)
	}
}

// migrationRow is one row of schema_migrations.
type migrationRow struct {
	Version   int
	Name      string
	AppliedAt int64
}

func readMigrations(t *testing.T, l *Ledger) []migrationRow {
	t.Helper()
	return readMigrationsDB(t, l.db)
}

func readMigrationsDB(t *testing.T, db *sql.DB) []migrationRow {
	t.Helper()
	rows, err := db.Query("SELECT version, name, applied_at FROM schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []migrationRow
	for rows.Next() {
		var m migrationRow
		if err := rows.Scan(&m.Version, &m.Name, &m.AppliedAt); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestMigrationsAppliedOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	before := time.Now().UnixMilli()
	l := openTest(t, path)
	first := readMigrations(t, l)
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != len(ms) || first[0].Version != 1 || first[0].Name != "0001_init.sql" {
		t.Fatalf("schema_migrations = %+v, want all %d, starting at version 1, 0001_init.sql", first, len(ms))
	}
	for _, m := range first {
		if m.AppliedAt < before || m.AppliedAt > time.Now().UnixMilli() {
			t.Errorf("%s: applied_at = %d, want between %d and now", m.Name, m.AppliedAt, before)
		}
	}
	if err := l.SetState(context.Background(), "k", "v"); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopening must neither re-run the migration (CREATE TABLE would fail)
	// nor record it again.
	l = openTest(t, path)
	if got := readMigrations(t, l); !reflect.DeepEqual(got, first) {
		t.Errorf("after reopen schema_migrations = %+v, want %+v", got, first)
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l := openTest(t, path)
	if _, err := l.db.Exec("INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, '0999_future.sql', 0)"); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := Open(context.Background(), path)
	if gpuwarden.ErrorCodeOf(err) != gpuwarden.EConflict || !strings.Contains(err.Error(), path) {
		t.Errorf("Open = %v, want a conflict naming the path", err)
	}
}

func TestMigrationFilesParse(t *testing.T) {
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		if m.version != i+1 {
			t.Errorf("migration %s has version %d, want %d (no gaps)", m.name, m.version, i+1)
		}
	}
}

// TestFleetMigrationOnAgentLedger opens, as a fleet ledger, a file that an
// earlier gpuwarden left at version 1 with an agent's data in it: the fleet
// tables must be added and the agent's rows kept.
func TestFleetMigrationOnAgentLedger(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	db, err := sql.Open("sqlite", dsn(path))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE schema_migrations (version BIGINT NOT NULL PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if err := apply(ctx, db, ms[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO state (name, value) VALUES ('idle.since', 'then')"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	f, err := OpenFleet(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(readMigrationsDB(t, f.db)); got != len(ms) {
		t.Errorf("schema_migrations has %d rows, want %d", got, len(ms))
	}
	if err := f.PutProject(ctx, gpuwarden.Project{Name: "p", Currency: "USD"}); err != nil {
		t.Errorf("PutProject after the migration: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	l := openTest(t, path)
	if v, ok, err := l.State(ctx, "idle.since"); err != nil || !ok || v != "then" {
		t.Errorf("State(idle.since) = %q, %v, %v; want the agent's value kept", v, ok, err)
	}
}
