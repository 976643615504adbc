package sqlite

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// fillLedger writes n one-GPU ticks and an event into a ledger at path and
// closes it, so that the file has pages beyond the schema's.
func fillLedger(t *testing.T, path string, n int) {
	t.Helper()
	l, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for i := range n {
		s := gpuwarden.NodeSample{Time: start.Add(time.Duration(i) * time.Second),
			Host: gpuwarden.HostSample{CPUPercent: 12, Processes: []string{"python3", "sshd"}},
			GPUs: []gpuwarden.Telemetry{{Index: 0, UtilPercent: 50, MemUsedBytes: 1 << 30}}}
		if err := l.RecordSample(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.RecordEvent(context.Background(), gpuwarden.Event{Time: start, Kind: "old", Severity: "info", Message: "before"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// overwrite writes garbage over the file from offset on, n bytes.
func overwrite(t *testing.T, path string, offset int64, n int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(bytes.Repeat([]byte("garbage!"), n/8), offset); err != nil {
		t.Fatal(err)
	}
}

// TestOpenOrReplaceDamaged: a damaged ledger is moved aside, byte for
// byte, and a fresh one starts whose first event is a critical
// ledger-damaged numbered above the lost file's events; a sound file, and
// one that is only newer than this gpuwarden, are left where they are.
func TestOpenOrReplaceDamaged(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 30, 0, 0, time.UTC)
	tests := []struct {
		name     string
		make     func(t *testing.T, path string)
		replaced bool
		wantErr  string // for a file that is not damaged but will not open
	}{
		{"sound", func(t *testing.T, path string) { fillLedger(t, path, 50) }, false, ""},
		{"not a database", func(t *testing.T, path string) {
			if err := os.WriteFile(path, bytes.Repeat([]byte("not sqlite "), 1000), 0o600); err != nil {
				t.Fatal(err)
			}
		}, true, ""},
		{"header overwritten", func(t *testing.T, path string) {
			fillLedger(t, path, 50)
			overwrite(t, path, 0, 64)
		}, true, ""},
		{"data pages overwritten", func(t *testing.T, path string) {
			fillLedger(t, path, 2000)
			overwrite(t, path, 5*4096, 8*4096)
		}, true, ""},
		{"schema newer than this gpuwarden", func(t *testing.T, path string) {
			l, err := Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.db.Exec("INSERT INTO schema_migrations VALUES (9999, '9999_future.sql', 0)"); err != nil {
				t.Fatal(err)
			}
			_ = l.Close()
		}, false, "newer than this gpuwarden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "ledger.db")
			tt.make(t, path)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			l, e, err := OpenOrReplace(context.Background(), path, now)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("OpenOrReplace = %v, want an error containing %q", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatalf("OpenOrReplace: %v", err)
			} else {
				defer l.Close()
			}
			aside := path + ".damaged-20261203T123000Z"
			if !tt.replaced {
				if e != nil {
					t.Errorf("event %+v for a file that was not damaged", *e)
				}
				if _, err := os.Stat(aside); err == nil {
					t.Errorf("%s exists: a file that was not damaged was moved aside", aside)
				}
				if after, _ := os.ReadFile(path); tt.wantErr != "" && !bytes.Equal(after, before) {
					t.Errorf("the file that would not open was changed")
				}
				return
			}
			if e == nil {
				t.Fatal("no event for a damaged ledger")
			}
			if e.Kind != KindLedgerDamaged || e.Severity != gpuwarden.SeverityCritical || e.Data[DataAside] != aside ||
				!strings.Contains(e.Message, "moved aside to "+aside) || e.Seq < now.UnixMilli() {
				t.Errorf("event = %+v, want critical %s naming %s, numbered from %d", *e, KindLedgerDamaged, aside, now.UnixMilli())
			}
			kept, err := os.ReadFile(aside)
			if err != nil || !bytes.Equal(kept, before) {
				t.Errorf("the damaged file was not kept as it was at %s (%v)", aside, err)
			}
			evs, err := l.Events(context.Background(), 10)
			if err != nil || len(evs) != 1 || evs[0].Kind != KindLedgerDamaged || evs[0].Seq != e.Seq {
				t.Errorf("events of the fresh ledger = %+v (%v), want the one ledger-damaged event", evs, err)
			}
			if fresh, err := l.RecordEvent(context.Background(), gpuwarden.Event{Time: now, Kind: "next", Severity: "info", Message: "x"}); err != nil || !fresh {
				t.Fatalf("record in the fresh ledger: %v", err)
			}
			if evs, _ := l.Events(context.Background(), 1); len(evs) != 1 || evs[0].Seq != e.Seq+1 {
				t.Errorf("the next event is numbered %+v, want %d", evs, e.Seq+1)
			}
		})
	}
}

// TestGoneAndReplace: a ledger whose file is deleted, with or without its
// -wal and -shm, or replaced by a damaged file, says so, and Replace
// starts writing to a file at the path again, whose first event says what
// happened.
func TestGoneAndReplace(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 30, 0, 0, time.UTC)
	tests := []struct {
		name     string
		do       func(t *testing.T, path string)
		wantGone string
		wantKind string
		// wantOrphan: the lost file's WAL, left at the path, is kept aside.
		wantOrphan bool
	}{
		{"nothing happened", func(*testing.T, string) {}, "", "", false},
		{"the file deleted", func(t *testing.T, path string) { mustRemove(t, path) }, "deleted", KindLedgerLost, true},
		{"the file, -wal and -shm deleted", func(t *testing.T, path string) {
			mustRemove(t, path)
			mustRemove(t, path+"-wal")
			mustRemove(t, path+"-shm")
		}, "deleted", KindLedgerLost, false},
		{"the file replaced by a damaged one", func(t *testing.T, path string) {
			mustRemove(t, path)
			if err := os.WriteFile(path, bytes.Repeat([]byte("not sqlite "), 1000), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "replaced by another file", KindLedgerDamaged, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.db")
			l := openTest(t, path)
			ctx := context.Background()
			if _, err := l.RecordEvent(ctx, gpuwarden.Event{Time: now, Kind: "old", Severity: "info", Message: "before"}); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(path + "-wal"); err != nil {
				t.Fatalf("no WAL while the ledger is open: %v", err)
			}
			tt.do(t, path)
			gone, err := l.Gone()
			if err != nil || gone != tt.wantGone {
				t.Fatalf("Gone() = %q, %v; want %q", gone, err, tt.wantGone)
			}
			if gone == "" {
				return
			}
			e, err := l.Replace(ctx, gone, now)
			if err != nil {
				t.Fatalf("Replace: %v", err)
			}
			if e.Kind != tt.wantKind || e.Severity != gpuwarden.SeverityCritical || !strings.Contains(e.Message, path) || e.Seq < now.UnixMilli() {
				t.Errorf("event = %+v, want critical %s naming %s", e, tt.wantKind, path)
			}
			if gone, err := l.Gone(); gone != "" || err != nil {
				t.Errorf("after Replace, Gone() = %q, %v; want \"\"", gone, err)
			}
			if _, err := os.Stat(path + ".orphan-20261203T123000Z-wal"); (err == nil) != tt.wantOrphan {
				t.Errorf("the lost file's WAL kept aside: %v, want %v", err == nil, tt.wantOrphan)
			}
			if err := l.RecordSample(ctx, gpuwarden.NodeSample{Time: now}); err != nil {
				t.Errorf("record after Replace: %v", err)
			}
			evs, err := l.Events(ctx, 10)
			if err != nil || len(evs) != 1 || evs[0].Kind != tt.wantKind {
				t.Errorf("events after Replace = %+v (%v), want the %s event alone", evs, err, tt.wantKind)
			}
			// What was written after Replace is in the file at the path.
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			again := openTest(t, path)
			if got, _ := again.Samples(ctx, now.Add(-time.Second)); len(got) != 1 {
				t.Errorf("the file at the path holds %d samples after Replace, want 1", len(got))
			}
		})
	}
}

// TestReplaceWhileWriting: the agent's tick, the dashboard and the shipper
// use the ledger while the watcher replaces its file (go test -race).
func TestReplaceWhileWriting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l := openTest(t, path)
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// Errors are expected while the file is swapped; a race or a
				// panic is what this looks for.
				_ = l.RecordSample(ctx, gpuwarden.NodeSample{Time: time.Unix(int64(w*1_000_000+i), 0)})
				_, _ = l.Events(ctx, 5)
				_ = l.SetState(ctx, "k", "v")
			}
		}()
	}
	for range 3 {
		mustRemove(t, path)
		if _, err := l.Replace(ctx, "deleted", time.Now()); err != nil {
			t.Errorf("Replace: %v", err)
		}
	}
	close(stop)
	wg.Wait()
	if gone, err := l.Gone(); gone != "" || err != nil {
		t.Errorf("Gone() = %q, %v after the replacements", gone, err)
	}
}

func mustRemove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}
