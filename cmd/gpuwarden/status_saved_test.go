package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	gwhttp "github.com/gpuwarden/gpuwarden/http"
	"github.com/gpuwarden/gpuwarden/sqlite"
)

// TestStatusShowsSaved asks a real agent server over its SQLite ledger
// what it saved this month, and checks the status screen's "Saved" line:
// the total with confirmed and estimated apart, and the stop that saved
// nothing counted; an agent without a savings API shows no line.
func TestStatusShowsSaved(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ev := func(kind gpuwarden.SavingKind, day int, amount gpuwarden.Cents, basis gpuwarden.SavingBasis, notSaved string) gpuwarden.Saving {
		from := time.Date(2026, 12, day, 0, 0, 0, 0, time.UTC)
		e := gpuwarden.Saving{Kind: kind, Node: "box", From: from, To: from.Add(10 * time.Hour), Hours: 10, Rate: 2_520_000,
			RateSource: "box rate", Amount: amount, Currency: "EUR", Basis: basis, Evidence: "idle episode " + from.Format(time.RFC3339),
			NotSaved: notSaved, At: from}
		e.ID = gpuwarden.SavingID(kind, e.Node, e.Evidence)
		return e
	}
	if err := db.RecordSavings(ctx, []gpuwarden.Saving{
		ev(gpuwarden.SavingIdleStop, 1, 2520, gpuwarden.SavingConfirmed, ""),
		ev(gpuwarden.SavingIdleStop, 2, 0, gpuwarden.SavingEstimated, "provider kept billing: powered-off-still-billing"),
		ev(gpuwarden.SavingBudgetStop, 3, 10080, gpuwarden.SavingEstimated, ""),
	}); err != nil {
		t.Fatal(err)
	}
	st := gpuwarden.AgentStatus{Node: "box", Now: now, Started: now.Add(-time.Hour)}
	for _, tt := range []struct {
		name    string
		ledger  gpuwarden.SavingsLedger
		want    string
		wantNot string
	}{
		{"a month of stops", db, "Saved     €126.00 in 2026-12 (€25.20 confirmed, €100.80 estimated); 3 events, 1 not saved\n", ""},
		{"no savings ledger", nil, "", "Saved"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := gwhttp.NewServer(func() gpuwarden.AgentStatus { return st },
				func(context.Context, time.Time) ([]gpuwarden.NodeSample, error) { return nil, nil }, nil)
			srv.Now = func() time.Time { return now }
			srv.Savings = tt.ledger
			sctx, cancel := context.WithCancel(ctx)
			addr, err := srv.Serve(sctx, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { cancel(); _ = srv.Wait() }()
			var b strings.Builder
			if err := statusScreen(&b, st, fetchSaved(ctx, addr)); err != nil {
				t.Fatal(err)
			}
			if tt.want != "" && !strings.Contains(b.String(), tt.want) {
				t.Errorf("status does not say %q:\n%s", tt.want, b.String())
			}
			if tt.wantNot != "" && strings.Contains(b.String(), tt.wantNot) {
				t.Errorf("status says %q:\n%s", tt.wantNot, b.String())
			}
		})
	}
}
