package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
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
	rows, err := l.db.Query("SELECT version, name, applied_at FROM schema_migrations ORDER BY version")
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
	if len(first) != 1 || first[0].Version != 1 || first[0].Name != "0001_init.sql" {
		t.Fatalf("schema_migrations = %+v, want version 1, 0001_init.sql", first)
	}
	if at := first[0].AppliedAt; at < before || at > time.Now().UnixMilli() {
		t.Errorf("applied_at = %d, want between %d and now", at, before)
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

func TestRecordEventDedupAcrossReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	at := time.Date(2026, 11, 29, 10, 0, 0, int(123*time.Millisecond), time.UTC)
	alert := gpuwarden.Event{Time: at, Kind: "budget", Severity: gpuwarden.SeverityWarning,
		Message: "80% of the month's budget spent", Key: "budget-actual-80-2026-11",
		Data: map[string]string{"spent": "800.00", "limit": "1000.00"}}
	info := gpuwarden.Event{Time: at.Add(time.Second), Kind: "idle", Severity: gpuwarden.SeverityInfo, Message: "idle"}

	steps := []struct {
		name   string
		reopen bool
		event  gpuwarden.Event
		want   bool
	}{
		{"first keyed event", false, alert, true},
		{"same key again", false, alert, false},
		{"same key, other text", false, gpuwarden.Event{Time: at.Add(time.Hour), Kind: "budget", Message: "again", Key: alert.Key}, false},
		{"same key after restart", true, alert, false},
		{"no key", false, info, true},
		{"no key again", false, info, true},
		{"new key after restart", true, gpuwarden.Event{Time: at.Add(2 * time.Second), Kind: "budget", Key: "budget-actual-100-2026-11"}, true},
	}
	l, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	for _, s := range steps {
		if s.reopen {
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if l, err = Open(ctx, path); err != nil {
				t.Fatal(err)
			}
		}
		got, err := l.RecordEvent(ctx, s.event)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got != s.want {
			t.Errorf("%s: RecordEvent = %v, want %v", s.name, got, s.want)
		}
	}

	got, err := l.Events(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []gpuwarden.Event{steps[6].event, info, info, alert}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Events =\n%+v\nwant\n%+v", got, want)
	}
}

func TestEventsLimitAndOrder(t *testing.T) {
	ctx := context.Background()
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.db"))
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	// Recorded out of time order, two in the same millisecond.
	for i, off := range []time.Duration{2, 0, 1, 1} {
		e := gpuwarden.Event{Time: at.Add(off * time.Second), Kind: "k", Message: fmt.Sprint(i)}
		if _, err := l.RecordEvent(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		limit int
		want  []string
	}{
		{0, nil},
		{-1, nil},
		{1, []string{"0"}},
		{3, []string{"0", "3", "2"}},
		{10, []string{"0", "3", "2", "1"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.limit), func(t *testing.T) {
			events, err := l.Events(ctx, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range events {
				got = append(got, e.Message)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Events(%d) = %q, want %q", tt.limit, got, tt.want)
			}
		})
	}
}

func TestStateSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range [][2]string{{"idle.since", "2026-11-29T10:00:00Z"}, {"budget.spent", "100"}, {"budget.spent", "250"}, {"empty", ""}} {
		if err := l.SetState(ctx, kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTest(t, path)
	tests := []struct {
		key   string
		want  string
		found bool
	}{
		{"idle.since", "2026-11-29T10:00:00Z", true},
		{"budget.spent", "250", true},
		{"empty", "", true},
		{"missing", "", false},
	}
	for _, tt := range tests {
		got, found, err := l.State(ctx, tt.key)
		if err != nil {
			t.Fatal(err)
		}
		if got != tt.want || found != tt.found {
			t.Errorf("State(%q) = %q, %v; want %q, %v", tt.key, got, found, tt.want, tt.found)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	ctx := context.Background()
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.db"))
	start := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	const writers, ticks = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range writers {
		wg.Add(3)
		go func() {
			defer wg.Done()
			for i := range ticks {
				if err := l.RecordSample(ctx, tick(start.Add(time.Duration(w*ticks+i)*time.Second), 2)); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := range ticks {
				if _, err := l.RecordEvent(ctx, gpuwarden.Event{Time: start, Kind: "k", Key: fmt.Sprint(i)}); err != nil {
					errs <- err
					return
				}
				if _, err := l.Events(ctx, 5); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range ticks / 5 {
				if _, err := l.Samples(ctx, start); err != nil {
					errs <- err
					return
				}
				if err := l.Compact(ctx, start); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	samples, err := l.Samples(ctx, start)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(samples), writers*ticks; got != want {
		t.Errorf("len(Samples) = %d, want %d", got, want)
	}
	for _, s := range samples {
		if len(s.GPUs) != 2 {
			t.Errorf("tick %v has %d GPUs, want 2", s.Time, len(s.GPUs))
		}
	}
	events, err := l.Events(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(events), ticks; got != want {
		t.Errorf("len(Events) = %d, want %d (keys deduplicated across writers)", got, want)
	}
}
