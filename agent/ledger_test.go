package agent

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/sqlite"
)

// notes records what the agent sends to its notifiers.
type notes struct {
	mu  sync.Mutex
	got []gpuwarden.Event
}

func (n *notes) Notify(_ context.Context, e gpuwarden.Event) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.got = append(n.got, e)
	return nil
}

// TestLedgerStartsAfreshLoudly: a ledger damaged at start, or deleted
// while the agent runs, is replaced by a fresh one, and the agent says so
// everywhere: a critical event in the ledger and the status, a notifier
// call, an error in the log and a warning in the status that stays.
func TestLedgerStartsAfreshLoudly(t *testing.T) {
	tests := []struct {
		name     string
		wantKind string
		// run does the damage and gets the agent to notice it.
		run func(t *testing.T, path string, a func(*sqlite.Ledger) *Agent) *Agent
	}{
		{"damaged at start", sqlite.KindLedgerDamaged, func(t *testing.T, path string, newAgent func(*sqlite.Ledger) *Agent) *Agent {
			if err := os.WriteFile(path, bytes.Repeat([]byte("not a ledger "), 500), 0o600); err != nil {
				t.Fatal(err)
			}
			l, e, err := sqlite.OpenOrReplace(context.Background(), path, time.Now())
			if err != nil || e == nil {
				t.Fatalf("OpenOrReplace = %v, %v; want a fresh ledger and its event", e, err)
			}
			t.Cleanup(func() { l.Close() })
			a := newAgent(l)
			a.LedgerReplaced(context.Background(), *e) // as up does before Run
			return a
		}},
		{"deleted while running", sqlite.KindLedgerLost, func(t *testing.T, path string, newAgent func(*sqlite.Ledger) *Agent) *Agent {
			l, err := sqlite.Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			a := newAgent(l)
			a.Tick(context.Background())
			if a.CheckLedger(context.Background(), l) {
				t.Fatal("CheckLedger replaced a ledger that was there")
			}
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if !a.CheckLedger(context.Background(), l) {
				t.Fatal("CheckLedger did not notice the deleted ledger")
			}
			if a.CheckLedger(context.Background(), l) {
				t.Error("CheckLedger replaced the fresh ledger again")
			}
			return a
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.db")
			n := &notes{}
			var logs bytes.Buffer
			c := &clock{t: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)}
			newAgent := func(l *sqlite.Ledger) *Agent {
				a := New(Config{Node: "box-1"}, nil, &fakeHost{}, l, n, slog.New(slog.NewTextHandler(&logs, nil)))
				a.Now = c.now
				if err := a.start(context.Background()); err != nil {
					t.Fatal(err)
				}
				return a
			}
			a := tt.run(t, path, newAgent)
			c.add(time.Second)
			a.Tick(context.Background())
			c.add(time.Second)
			a.Tick(context.Background())

			st := a.Status()
			if len(st.Events) == 0 || st.Events[len(st.Events)-1].Kind != tt.wantKind || st.Events[len(st.Events)-1].Severity != gpuwarden.SeverityCritical {
				t.Errorf("status events = %+v, want the critical %s event, the fresh ledger's first", st.Events, tt.wantKind)
			}
			warned := false
			for _, w := range st.Warnings {
				warned = warned || strings.Contains(w, path)
			}
			if !warned {
				t.Errorf("status warnings = %q, want one naming %s", st.Warnings, path)
			}
			n.mu.Lock()
			if len(n.got) != 1 || n.got[0].Kind != tt.wantKind || n.got[0].Severity != gpuwarden.SeverityCritical {
				t.Errorf("notified %+v, want the one critical %s event", n.got, tt.wantKind)
			}
			n.mu.Unlock()
			if !strings.Contains(logs.String(), "level=ERROR msg=\"the ledger "+path) {
				t.Errorf("no error in the log naming the ledger:\n%s", logs.String())
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("no ledger at %s: %v", path, err)
			}
		})
	}
}
