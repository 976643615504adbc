//go:build unix

package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// TestLedgerFilesArePrivate: the ledger, its -wal and its -shm are 0600
// under any umask (the test clears it, so that what SQLite creates by
// default, 0644, would show), and an older ledger's 0644 files are
// narrowed when it is opened.
func TestLedgerFilesArePrivate(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	ctx := context.Background()
	tests := []struct {
		name string
		// before makes what is in dir before the open.
		before func(t *testing.T, path string)
		open   func(t *testing.T, path string) func() error
	}{
		{"a new agent ledger", func(*testing.T, string) {}, openAgent},
		{"an agent ledger created 0644", func(t *testing.T, path string) {
			// An older gpuwarden's ledger, its -wal and -shm left by a kill.
			if err := os.WriteFile(path, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			fillLedger(t, path, 5)
			for _, p := range []string{path, path + "-wal", path + "-shm"} {
				if err := os.WriteFile(p, nil, 0o644); err != nil && !os.IsExist(err) {
					t.Fatal(err)
				}
				if err := os.Chmod(p, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}, openAgent},
		{"a new fleet ledger", func(*testing.T, string) {}, func(t *testing.T, path string) func() error {
			f, err := OpenFleet(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.db.Exec("INSERT INTO state (name, value) VALUES ('k', 'v')"); err != nil {
				t.Fatal(err)
			}
			return f.Close
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.db")
			tt.before(t, path)
			closeIt := tt.open(t, path)
			defer closeIt()
			for _, p := range []string{path, path + "-wal", path + "-shm"} {
				fi, err := os.Stat(p)
				if err != nil {
					t.Errorf("stat %s: %v", filepath.Base(p), err)
					continue
				}
				if got := fi.Mode().Perm(); got != 0o600 {
					t.Errorf("%s: mode %o, want 600", filepath.Base(p), got)
				}
			}
		})
	}
}

// openAgent opens an agent ledger and writes a tick, so that SQLite has
// made its -wal and -shm.
func openAgent(t *testing.T, path string) func() error {
	t.Helper()
	l, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.RecordSample(context.Background(), gpuwarden.NodeSample{Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	return l.Close
}
