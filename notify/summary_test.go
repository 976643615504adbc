package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/notify/notifytest"
)

// testSummary is November 2026 of a fleet billing in euros, with one
// event that saved nothing, sent on the first of December.
func testSummary() MonthlySummary {
	from := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	best := gpuwarden.Saving{ID: "idle-stop-abc", Kind: gpuwarden.SavingIdleStop, Node: "ml-train-1", Project: "ml",
		Amount: 41_230, Currency: "EUR", Basis: gpuwarden.SavingConfirmed, Evidence: "idle episode 2026-11-12T03:00:00Z; provider answer: stopped"}
	return MonthlySummary{Month: "2026-11", From: from, To: from.AddDate(0, 1, 0), Sent: from.AddDate(0, 1, 0).Add(5 * time.Minute),
		Spent:         []SpentLine{{Currency: "EUR", Spent: 1_234_567}},
		Saved:         []gpuwarden.SavingsTotal{{Confirmed: 50_000, Estimated: 12_345, Attributed: 7_000, Total: 69_345, Currency: "EUR", Events: 6, NotSaved: 1}},
		BiggestSaving: &best,
		BiggestWaste:  &Waste{Node: "vision-x", Project: "vision", Why: "no-owner, heartbeat-lost", Hourly: 4_100_000, Currency: "EUR", Weekly: 68_880},
		Link:          "http://fleet.example:8080/savings"}
}

// TestSummaryReachesEveryReceiver posts the monthly summary to a loopback
// receiver of each format, which checks the body against the receiver's
// documented schema; every body says the month, the spend, the savings
// with confirmed and estimated apart, the biggest saving and the biggest
// waste, and matches its golden file.
func TestSummaryReachesEveryReceiver(t *testing.T) {
	want := []string{"2026-11", "€12,345.67", "€693.45", "€500.00", "€123.45", "€70.00",
		"€412.30", "idle stop", "ml-train-1", "vision-x", "€4.10/h", "€688.80", "no-owner, heartbeat-lost",
		"http://fleet.example:8080/savings"}
	for _, rc := range receivers {
		t.Run(rc.name, func(t *testing.T) {
			rec := &recorder{}
			srv := rec.serve(t)
			w := newTestWebhook(t, rc.url(srv.URL), rc.format, &sleeps{})
			if err := w.SendSummary(context.Background(), testSummary()); err != nil {
				t.Fatal(err)
			}
			bodies := rec.got()
			if len(bodies) != 1 {
				t.Fatalf("receiver got %d requests, want 1", len(bodies))
			}
			rc.check(t, []byte(bodies[0]), rec.headers[0])
			text := bodies[0]
			if rc.format == FormatNtfy {
				text += "\n" + rec.headers[0].Get("Title")
			}
			for _, s := range want {
				if !strings.Contains(text, s) {
					t.Errorf("%s body does not say %q:\n%s", rc.name, s, text)
				}
			}
			var golden bytes.Buffer
			golden.WriteString(indent(t, []byte(bodies[0])) + "\n")
			checkGolden(t, filepath.Join("testdata", rc.name+"-summary.golden"), golden.Bytes())
		})
	}
}

// TestSummaryPagerDutyFields checks the Events API v2 fields PagerDuty
// requires of a trigger (developer.pagerduty.com, "Send an Alert Event"):
// routing_key, event_action, payload.summary, payload.source and
// payload.severity, plus the month's dedup_key that folds a resend into
// one alert, and the amounts as custom_details.
func TestSummaryPagerDutyFields(t *testing.T) {
	rec := &recorder{}
	srv := rec.serve(t)
	w := newTestWebhook(t, srv.URL+"/v2/enqueue?routing_key="+routingKey, FormatPagerDuty, &sleeps{})
	if err := w.SendSummary(context.Background(), testSummary()); err != nil {
		t.Fatal(err)
	}
	bodies := rec.got()
	if len(bodies) != 1 {
		t.Fatalf("receiver got %d requests, want 1", len(bodies))
	}
	ev := notifytest.CheckPagerDuty(t, []byte(bodies[0]))
	if ev.Payload == nil {
		t.Fatal("no payload")
	}
	for _, c := range []struct{ name, got, want string }{
		{"routing_key", ev.RoutingKey, routingKey},
		{"event_action", ev.EventAction, "trigger"},
		{"dedup_key", ev.DedupKey, "savings-summary-2026-11"},
		{"payload.severity", ev.Payload.Severity, "info"},
		{"payload.source", ev.Payload.Source, "gpuwarden server"},
		{"payload.timestamp", ev.Payload.Timestamp, "2026-12-01T00:05:00Z"},
		{"custom_details.saved_confirmed_EUR", ev.Payload.CustomDetails["saved_confirmed_EUR"], "500.00"},
		{"custom_details.saved_estimated_EUR", ev.Payload.CustomDetails["saved_estimated_EUR"], "123.45"},
		{"custom_details.spent_EUR", ev.Payload.CustomDetails["spent_EUR"], "12345.67"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	if strings.Contains(srv.URL, routingKey) || strings.Contains(rec.headers[0].Get("Referer"), routingKey) {
		t.Error("the routing key left the body")
	}
}

// TestSummaryWithNothing: a month with no spend, no saving and no orphan
// still says so in words, never an empty field a receiver would refuse.
func TestSummaryWithNothing(t *testing.T) {
	s := MonthlySummary{Month: "2026-11", From: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
		To: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Sent: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	a := s.Alert()
	got := map[string]string{}
	for _, f := range a.Facts {
		got[f.Name] = f.Value
	}
	for _, c := range []struct{ fact, want string }{
		{"Spent", "none"}, {"Saved", "none"}, {"Biggest saving", "none"}, {"Biggest waste still running", "none"},
	} {
		if got[c.fact] != c.want {
			t.Errorf("fact %s = %q, want %q", c.fact, got[c.fact], c.want)
		}
	}
	if _, ok := got["Dashboard"]; ok {
		t.Error("a summary without a link shows a Dashboard fact")
	}
	b, err := json.Marshal(teamsBody(a))
	if err != nil {
		t.Fatal(err)
	}
	notifytest.CheckTeams(t, b)
}
