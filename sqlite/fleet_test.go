package sqlite

import (
	"context"
	"path/filepath"
	"testing"

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

func TestOpenFleetErrors(t *testing.T) {
	if _, err := OpenFleet(context.Background(), ""); gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
		t.Errorf("OpenFleet(\"\") = %v, want an invalid error", err)
	}
}
