package http

import (
	"context"
	"encoding/json"
	"html"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/report"
	"github.com/gpuwarden/gpuwarden/sqlite"
)

// agentSaving is an event of the fixture's box this month: amount cents
// in euros, or nothing saved and why.
func agentSaving(kind gpuwarden.SavingKind, amount gpuwarden.Cents, notSaved string) gpuwarden.Saving {
	from := fixtureNow.Add(-time.Duration(amount%7+2) * 24 * time.Hour)
	e := gpuwarden.Saving{Kind: kind, Node: "gpu-box-1", Project: "ml", Owner: "ana", From: from, To: from.Add(10 * time.Hour),
		Hours: 10, Rate: gpuwarden.Micros(amount) * 1000, RateSource: "box rate", Amount: amount, Currency: "EUR",
		Basis: gpuwarden.SavingConfirmed, Evidence: "idle episode " + from.Format(time.RFC3339) + "; provider answer: stopped", NotSaved: notSaved, At: from}
	if notSaved != "" {
		e.Amount, e.Basis, e.Evidence = 0, gpuwarden.SavingEstimated, "idle episode "+from.Format(time.RFC3339)+"; provider answer: powered-off-still-billing"
	}
	if kind == gpuwarden.SavingBudgetStop {
		e.Basis = gpuwarden.SavingEstimated
	}
	e.ID = gpuwarden.SavingID(kind, e.Node, e.Evidence)
	return e
}

// agentLedger is an agent's SQLite ledger holding events.
func agentLedger(t *testing.T, events ...gpuwarden.Saving) gpuwarden.SavingsLedger {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := db.RecordSavings(context.Background(), events); err != nil {
		t.Fatal(err)
	}
	return db
}

// startSavingAgent serves the fixture agent with a savings ledger.
func startSavingAgent(t *testing.T, l gpuwarden.SavingsLedger) string {
	t.Helper()
	agent := newFakeAgent(fixtureStatus())
	srv := NewServer(agent.status, agent.history, nil)
	srv.Now = func() time.Time { return fixtureNow }
	srv.Savings = l
	ctx, cancel := context.WithCancel(context.Background())
	addr, err := srv.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = srv.Wait() })
	return "http://" + addr
}

// The agent's month: an idle stop the provider confirmed (€25.20), one
// that left the bill running (nothing), a budget stop (€100.80 estimated).
func agentMonth() []gpuwarden.Saving {
	return []gpuwarden.Saving{
		agentSaving(gpuwarden.SavingIdleStop, 2520, ""),
		agentSaving(gpuwarden.SavingIdleStop, 0, "provider kept billing: powered-off-still-billing"),
		agentSaving(gpuwarden.SavingBudgetStop, 10080, ""),
	}
}

// TestAgentSavedMetric scrapes gpuwarden_saved_total from the agent: one
// series per kind, currency and basis, in currency units; a stop that left
// the bill running counts 0; without a ledger there is no series at all.
func TestAgentSavedMetric(t *testing.T) {
	for _, tt := range []struct {
		name   string
		ledger gpuwarden.SavingsLedger
		want   []string
		not    []string
	}{
		{"a month of stops", agentLedger(t, agentMonth()...), []string{
			"# TYPE gpuwarden_saved_total counter",
			`gpuwarden_saved_total{basis="confirmed",currency="EUR",kind="idle-stop"} 25.2`,
			`gpuwarden_saved_total{basis="estimated",currency="EUR",kind="idle-stop"} 0`,
			`gpuwarden_saved_total{basis="estimated",currency="EUR",kind="budget-stop"} 100.8`,
		}, nil},
		{"an empty ledger", agentLedger(t), nil, []string{"gpuwarden_saved_total{"}},
		{"no ledger", nil, nil, []string{"gpuwarden_saved_total{"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			base := startSavingAgent(t, tt.ledger)
			resp, body := get(t, "GET", base+"/metrics")
			if resp.StatusCode != 200 {
				t.Fatalf("/metrics: %d", resp.StatusCode)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(body), w+"\n") {
					t.Errorf("/metrics lacks %q", w)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(string(body), n) {
					t.Errorf("/metrics has %q", n)
				}
			}
		})
	}
}

// TestAgentSavingsAPIAndDashboard: the agent answers /api/v1/savings as
// the fleet server does, and its page shows the month's savings with each
// event's arithmetic and "not saved: <why>".
func TestAgentSavingsAPIAndDashboard(t *testing.T) {
	base := startSavingAgent(t, agentLedger(t, agentMonth()...))
	for _, tt := range []struct {
		query  string
		status int
		total  string
		events int
	}{
		{"", 200, "126.00", 3},
		{"?by=kind", 200, "126.00", 3},
		{"?kind=budget-stop", 200, "100.80", 1},
		{"?month=2026-10", 200, "0.00", 0},
		{"?kind=nap", 400, "", 0},
	} {
		resp, body := get(t, "GET", base+"/api/v1/savings"+tt.query)
		if resp.StatusCode != tt.status {
			t.Errorf("%s: status %d, want %d: %s", tt.query, resp.StatusCode, tt.status, body)
			continue
		}
		if tt.status != 200 {
			continue
		}
		var got report.SavingsReport
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		if got.Total.Total.Decimal() != tt.total || len(got.Events) != tt.events {
			t.Errorf("%s: total %s with %d events, want %s with %d", tt.query, got.Total.Total.Decimal(), len(got.Events), tt.total, tt.events)
		}
	}
	_, page := get(t, "GET", base+"/")
	text := html.UnescapeString(string(page))
	for _, w := range []string{"Saved this month", `id="saved-total">€126.00<`, "€25.20 confirmed · €100.80 estimated · €0.00 attributed · 1 not saved",
		"not saved: provider kept billing: powered-off-still-billing", "10 h × €2.52/h", "budget stop"} {
		if !strings.Contains(text, w) {
			t.Errorf("the agent's page does not show %q", w)
		}
	}
	// An agent without a ledger says so in JSON, and its page has no card.
	bare := startSavingAgent(t, nil)
	if resp, _ := get(t, "GET", bare+"/api/v1/savings"); resp.StatusCode != 404 {
		t.Errorf("no ledger: /api/v1/savings = %d, want 404", resp.StatusCode)
	}
	if _, page := get(t, "GET", bare+"/"); strings.Contains(string(page), "Saved this month") {
		t.Error("an agent without a savings ledger shows a savings card")
	}
}
