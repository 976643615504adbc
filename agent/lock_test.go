//go:build unix

package agent

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// TestLockDataDir: one lock per data dir. A held lock is a conflict naming
// the holder's PID, and a lock file a dead agent left (a PID, no flock)
// blocks nobody.
func TestLockDataDir(t *testing.T) {
	me := strconv.Itoa(os.Getpid())
	tests := []struct {
		name string
		// before prepares the dir; it returns what to release afterwards.
		before  func(t *testing.T, dir string) func()
		wantErr string
	}{
		{"a fresh dir", func(*testing.T, string) func() { return func() {} }, ""},
		{"a dead agent's lock file", func(t *testing.T, dir string) func() {
			if err := os.WriteFile(filepath.Join(dir, LockFile), []byte("4194303\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return func() {}
		}, ""},
		{"a live agent's lock", func(t *testing.T, dir string) func() {
			// A second open file description conflicts with the first even
			// within one process, as a second agent would.
			l, err := LockDataDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			return func() { l.Close() }
		}, "another agent (PID " + me + ") runs on the data dir"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			release := tt.before(t, dir)
			defer release()
			l, err := LockDataDir(dir)
			if tt.wantErr != "" {
				if err == nil {
					l.Close()
					t.Fatal("LockDataDir took a lock another holds")
				}
				if !strings.Contains(err.Error(), tt.wantErr) || gpuwarden.ErrorCodeOf(err) != gpuwarden.EConflict {
					t.Errorf("error = %v (%s), want a conflict containing %q", err, gpuwarden.ErrorCodeOf(err), tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("LockDataDir: %v", err)
			}
			b, _ := os.ReadFile(filepath.Join(dir, LockFile))
			if got := strings.TrimSpace(string(b)); got != me {
				t.Errorf("lock file holds %q, want this process's PID %s", got, me)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			// Released: the next agent takes it.
			again, err := LockDataDir(dir)
			if err != nil {
				t.Fatalf("after Close: %v", err)
			}
			again.Close()
		})
	}
}

// TestListenSocketLeavesALiveOne: a socket an agent answers on is not
// removed, and its agent goes on answering; a dead agent's socket file is
// replaced.
func TestListenSocketLeavesALiveOne(t *testing.T) {
	tests := []struct {
		name    string
		live    bool
		wantErr bool
	}{
		{"a dead agent's socket", false, false},
		{"a live agent's socket", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "agent.sock")
			first, err := ListenSocket(path, NewJobs(), slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.live {
				go first.Serve(ctx)
			} else {
				// What a killed agent leaves: the file, nobody listening.
				first.ln.(*net.UnixListener).SetUnlinkOnClose(false)
				first.ln.Close()
			}
			second, err := ListenSocket(path, NewJobs(), slog.New(slog.DiscardHandler))
			if tt.wantErr {
				if err == nil || gpuwarden.ErrorCodeOf(err) != gpuwarden.EConflict {
					t.Fatalf("ListenSocket over a live socket = %v, want a conflict", err)
				}
				c, err := Dial(ctx, path)
				if err != nil {
					t.Fatalf("the live agent's socket is gone: %v", err)
				}
				defer c.Close()
				if err := c.Report("j1", JobRunning); err != nil {
					t.Fatal(err)
				}
				deadline := time.Now().Add(2 * time.Second)
				for len(first.jobs.Active()) == 0 && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if len(first.jobs.Active()) != 1 {
					t.Errorf("the live agent heard no job report")
				}
				return
			}
			if err != nil {
				t.Fatalf("ListenSocket over a dead agent's socket: %v", err)
			}
			second.ln.Close()
		})
	}
}
