package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// The fleet's behaviour is ledgertest's, run by TestFleetConformance; these
// tests hold what the suite cannot see.

func TestFleetReadersCannotWrite(t *testing.T) {
	ctx := context.Background()
	f, err := OpenFleet(ctx, filepath.Join(t.TempDir(), "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.rdb.ExecContext(ctx, "INSERT INTO projects (name, budget_cents, currency, created_ms) VALUES ('p', 0, '', 0)"); err == nil {
		t.Error("a write through the read-only pool succeeded, want an error")
	}
	// A write through the writer is seen by the next read at once.
	if err := f.PutProject(ctx, gpuwarden.Project{Name: "q", Currency: "USD"}); err != nil {
		t.Fatal(err)
	}
	if ps, err := f.Projects(ctx); err != nil || len(ps) != 1 || ps[0].Name != "q" {
		t.Errorf("Projects = %+v, %v; want q", ps, err)
	}
}

// TestOpenWhileAnotherWrites opens the file again, as a second process or
// a new reader connection does, while a writer commits without pause: no
// open and no first read may fail. A pragma that writes (auto_vacuum) made
// them fail at once with SQLITE_BUSY, which no busy timeout waits out.
func TestOpenWhileAnotherWrites(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fleet.db")
	w, err := OpenFleet(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.PutProject(ctx, gpuwarden.Project{Name: "p", Currency: "USD"}); err != nil {
		t.Fatal(err)
	}
	hbs := make([]gpuwarden.Heartbeat, 20)
	for i := range hbs {
		id := fmt.Sprintf("n%d", i)
		if _, err := w.RegisterNode(ctx, gpuwarden.Node{ID: id, Project: "p", Registered: time.Now()}); err != nil {
			t.Fatal(err)
		}
		hbs[i] = gpuwarden.Heartbeat{Node: id, Time: time.Now()}
	}
	if err := w.CreateToken(ctx, gpuwarden.Token{ID: "t", Project: "p", Role: gpuwarden.RoleViewer, Hash: []byte("h"), Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	writer := make(chan error, 1)
	go func() {
		for !stop.Load() {
			if err := w.RecordHeartbeats(ctx, time.Now(), hbs); err != nil {
				writer <- err
				return
			}
		}
		writer <- nil
	}()
	var failed atomic.Int64
	for range 30 {
		f, err := OpenFleet(ctx, path)
		if err != nil {
			t.Errorf("open while another writes: %v", err)
			continue
		}
		var wg sync.WaitGroup
		for range readers * 2 {
			wg.Go(func() {
				if _, err := f.Token(ctx, "t"); err != nil && failed.Add(1) <= 3 {
					t.Errorf("first read on a new connection: %v", err)
				}
			})
		}
		wg.Wait()
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	}
	stop.Store(true)
	if err := <-writer; err != nil {
		t.Errorf("writer: %v", err)
	}
	if n := failed.Load(); n > 0 {
		t.Errorf("%d reads failed", n)
	}
}

func TestOpenFleetErrors(t *testing.T) {
	if _, err := OpenFleet(context.Background(), ""); gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
		t.Errorf("OpenFleet(\"\") = %v, want an invalid error", err)
	}
}
