package http

import (
	"context"
	"encoding/json"
	"html"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/report"
)

// nov is a day and hour of November 2026, the fixture's month.
func nov(day, hour int) time.Time { return time.Date(2026, 11, day, hour, 0, 0, 0, time.UTC) }

// seedSavings records a month of savings for seedFleet's boxes: in euros
// for project ml an idle stop the provider confirmed, one it did not (the
// box powered off but kept billing), a budget stop and an orphan ended by
// hand; in dollars for vision a spot run that lost money, and an idle stop
// of October. November's totals, by hand: EUR confirmed 25.20, estimated
// 100.80, attributed 84.00, total 210.00, 4 events of which 1 not saved;
// USD confirmed −3.25.
func seedSavings(t testing.TB, store gpuwarden.Fleet) []gpuwarden.Saving {
	t.Helper()
	ev := []gpuwarden.Saving{
		{Kind: gpuwarden.SavingIdleStop, Node: "ml-idle-2", Project: "ml", Owner: "bo", From: nov(10, 20), To: nov(11, 8), Hours: 12,
			Rate: 2_100_000, RateSource: "box rate", Amount: 2520, Currency: "EUR", Basis: gpuwarden.SavingConfirmed,
			Evidence: "idle episode 2026-11-10T19:30:00Z; provider answer: stopped (gcp-stop operation op-1)"},
		{Kind: gpuwarden.SavingIdleStop, Node: "ml-train-1", Project: "ml", Owner: "ana", From: nov(12, 0), To: nov(12, 10), Hours: 10,
			Rate: 4_200_000, RateSource: "box rate", Currency: "EUR", Basis: gpuwarden.SavingEstimated,
			Evidence: "idle episode 2026-11-11T23:30:00Z; provider answer: powered-off-still-billing (os-shutdown)",
			NotSaved: "provider kept billing: powered-off-still-billing"},
		{Kind: gpuwarden.SavingBudgetStop, Node: "ml-train-1", Project: "ml", Owner: "ana", From: nov(20, 0), To: nov(21, 0), Hours: 24,
			Rate: 4_200_000, RateSource: "box rate", Amount: 10080, Currency: "EUR", Basis: gpuwarden.SavingEstimated,
			Evidence: "budget stop at 100 % of €2,500.00; provider answer: stopped, method os-shutdown; no state read back: AWS documents that an OS shutdown stops an EBS-backed instance"},
		{Kind: gpuwarden.SavingOrphanEnded, Node: "ml-idle-2", Project: "ml", Owner: "bo", From: nov(25, 0), To: nov(26, 16), Hours: 40,
			Rate: 2_100_000, RateSource: "box rate", Amount: 8400, Currency: "EUR", Basis: gpuwarden.SavingAttributed,
			Evidence: "orphan review 2026-11-24 flagged no-owner; ended by hand 2026-11-25T00:00:00Z"},
		{Kind: gpuwarden.SavingSpot, Node: "vision-x", Project: "vision", From: nov(15, 0), To: nov(15, 10), Hours: 10,
			Rate: 400_000, RateSource: "catalog offer lambda/gpu_1x_a100 us-east-1", Amount: -325, Currency: "USD", Basis: gpuwarden.SavingConfirmed,
			Evidence: "run r-42: 2 preemptions, 6000 s lost × $4.35/h"},
		{Kind: gpuwarden.SavingIdleStop, Node: "vision-x", Project: "vision", From: time.Date(2026, 10, 30, 0, 0, 0, 0, time.UTC),
			To: time.Date(2026, 10, 31, 0, 0, 0, 0, time.UTC), Hours: 10, Rate: 1_290_000, RateSource: "box rate", Amount: 1290,
			Currency: "USD", Basis: gpuwarden.SavingConfirmed, Evidence: "idle episode 2026-10-29T23:00:00Z; provider answer: stopped"},
	}
	for i := range ev {
		ev[i].ID = gpuwarden.SavingID(ev[i].Kind, ev[i].Node, ev[i].Evidence)
		ev[i].At = ev[i].To
	}
	l, ok := store.(gpuwarden.SavingsLedger)
	if !ok {
		t.Fatal("the fleet ledger keeps no savings")
	}
	if err := l.RecordSavings(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

// TestSavingsAPI asks GET /api/v1/savings what it would answer the
// dashboard and scripts: per token, period, kind and grouping, with the
// totals to the cent against the hand-computed ones of seedSavings.
func TestSavingsAPI(t *testing.T) {
	f := newDashFixtureAt(t, func() time.Time { return fixtureNow })
	seedFleet(t, f.store, fixtureNow)
	seedSavings(t, f.store)
	admin := f.token(gpuwarden.AllProjects, gpuwarden.RoleAdmin)
	ml := f.token("ml", gpuwarden.RoleViewer)
	type total struct {
		cur                                     gpuwarden.Currency
		confirmed, estimated, attributed, total gpuwarden.Cents
		events, notSaved                        int
	}
	eur := total{"EUR", 2520, 10080, 8400, 21000, 4, 1}
	usd := total{"USD", -325, 0, 0, -325, 1, 0}
	for _, tt := range []struct {
		name, token, query string
		status             int
		totals             []total
		rows               []string // "key currency total"
		events             int
	}{
		{"the month, every project", admin, "", 200, []total{eur, usd}, []string{"ml EUR 210.00", "vision USD -3.25"}, 5},
		{"a project token sees its project", ml, "", 200, []total{eur}, []string{"ml EUR 210.00"}, 4},
		{"nor another project's", ml, "?project=vision", 403, nil, nil, 0},
		{"by kind", admin, "?by=kind&project=ml", 200, []total{eur},
			[]string{"idle-stop EUR 25.20", "budget-stop EUR 100.80", "orphan-ended EUR 84.00"}, 4},
		{"by owner", admin, "?by=owner", 200, []total{eur, usd}, []string{"(none) USD -3.25", "ana EUR 100.80", "bo EUR 109.20"}, 5},
		{"one kind", admin, "?kind=idle-stop", 200, []total{{"EUR", 2520, 0, 0, 2520, 2, 1}}, []string{"ml EUR 25.20"}, 2},
		{"a kind by its title", admin, "?kind=idle%20stop&month=2026-10", 200, []total{{"USD", 1290, 0, 0, 1290, 1, 0}}, []string{"vision USD 12.90"}, 1},
		{"a period overlapping one event", admin, "?from=2026-11-12&to=2026-11-13", 200, []total{{"EUR", 0, 0, 0, 0, 1, 1}}, []string{"ml EUR 0.00"}, 1},
		{"an RFC 3339 period", admin, "?from=2026-11-15T05:00:00Z&to=2026-11-15T06:00:00Z", 200, []total{usd}, []string{"vision USD -3.25"}, 1},
		{"a month with nothing", admin, "?month=2026-09", 200, nil, nil, 0},
		{"an unknown kind", admin, "?kind=nap", 400, nil, nil, 0},
		{"an unknown grouping", admin, "?by=colour", 400, nil, nil, 0},
		{"a period backwards", admin, "?from=2026-11-13&to=2026-11-12", 400, nil, nil, 0},
		{"a time that is not one", admin, "?from=yesterday", 400, nil, nil, 0},
		{"no token", "", "", 401, nil, nil, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := map[string]string{}
			if tt.token != "" {
				h["Authorization"] = "Bearer " + tt.token
			}
			resp, body := f.do("GET", "/api/v1/savings"+tt.query, "", nil, h)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			if tt.status != 200 {
				var e errorBody
				if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == "" {
					t.Errorf("error answer %q is not a JSON error", body)
				}
				return
			}
			var got report.SavingsReport
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatal(err)
			}
			var totals []total
			for _, x := range got.Totals {
				totals = append(totals, total{x.Currency, x.Confirmed, x.Estimated, x.Attributed, x.Total, x.Events, x.NotSaved})
			}
			if !slices.Equal(totals, tt.totals) {
				t.Errorf("totals %+v, want %+v", totals, tt.totals)
			}
			var rows []string
			for _, r := range got.Rows {
				rows = append(rows, r.Key+" "+string(r.Total.Currency)+" "+r.Total.Total.Decimal())
			}
			if !slices.Equal(rows, tt.rows) {
				t.Errorf("rows %q, want %q", rows, tt.rows)
			}
			if len(got.Events) != tt.events {
				t.Errorf("%d events, want %d", len(got.Events), tt.events)
			}
			// The events add up to the totals, to the cent.
			if sum := gpuwarden.SumSavingsByCurrency(got.Events); len(sum) != len(got.Totals) ||
				len(sum) > 0 && sum[0] != got.Totals[0] {
				t.Errorf("the events add up to %+v, the answer says %+v", sum, got.Totals)
			}
			for _, e := range got.Events {
				if e.Evidence == "" {
					t.Errorf("event %s without evidence", e.ID)
				}
			}
		})
	}
}

// TestSavingsOnTheDashboard: the overview's "saved this month" tile beside
// "burning now" and its rows per project and per kind, and the drill-down
// listing each event with its arithmetic, basis, evidence and "not saved:
// <why>"; a project's token sees its project only.
func TestSavingsOnTheDashboard(t *testing.T) {
	f := newDashFixtureAt(t, func() time.Time { return fixtureNow })
	seedFleet(t, f.store, fixtureNow)
	seedSavings(t, f.store)
	admin := f.token(gpuwarden.AllProjects, gpuwarden.RoleAdmin)
	ml := f.token("ml", gpuwarden.RoleViewer)
	for _, tt := range []struct {
		name, token, path string
		want, not         []string
	}{
		{"overview tile", admin, "/", []string{
			`<span class="stat-n ok" id="saved-total">€210.00 + -$3.25</span> saved this month`,
			"€25.20 + -$3.25 confirmed · €100.80 + $0.00 estimated · €84.00 + $0.00 attributed · 1 not saved",
			"burning now", `href="/savings?month=2026-11&project=ml"`, `href="/savings?kind=idle-stop&month=2026-11"`,
			">orphan ended</a>"}, nil},
		{"overview of one project", ml, "/", []string{`id="saved-total">€210.00</span>`}, []string{"$3.25", "vision"}},
		{"drill-down", admin, "/savings", []string{"Savings 2026-11", "€210.00 + -$3.25",
			"12 h × €2.10/h", "box rate", "€25.20", "idle episode 2026-11-10T19:30:00Z; provider answer: stopped (gcp-stop operation op-1)",
			"not saved: provider kept billing: powered-off-still-billing", "-$3.25", "a loss", "catalog offer lambda/gpu_1x_a100 us-east-1",
			`<span class="badge ok">confirmed</span>`, `<span class="badge warn">attributed</span>`, "2026-11-25 00:00 UTC – 2026-11-26 16:00 UTC",
			`href="/nodes/ml-idle-2"`}, []string{"2026-10-30"}},
		{"drill-down to a kind", admin, "/savings?kind=budget-stop", []string{"kind budget-stop", "24 h × €4.20/h", "€100.80"},
			[]string{"12 h × €2.10/h", "run r-42"}},
		{"drill-down to a project", admin, "/savings?project=vision", []string{"project vision", "run r-42"}, []string{"op-1"}},
		{"last month", admin, "/savings?month=2026-10", []string{"Savings 2026-10", "$12.90"}, []string{"op-1"}},
		{"a project token's drill-down", ml, "/savings", []string{"op-1"}, []string{"run r-42"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := f.do("GET", tt.path, tt.token, nil, nil)
			// html/template writes + as &#43;: compare what a reader sees.
			body = html.UnescapeString(body)
			if resp.StatusCode != 200 {
				t.Fatalf("GET %s: %d\n%s", tt.path, resp.StatusCode, body)
			}
			for _, w := range tt.want {
				if !strings.Contains(body, w) {
					t.Errorf("GET %s does not show %q", tt.path, w)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(body, n) {
					t.Errorf("GET %s shows %q", tt.path, n)
				}
			}
		})
	}
	if resp, _ := f.do("GET", "/savings?project=vision", ml, nil, nil); resp.StatusCode != 403 {
		t.Errorf("a project token asking for another project's savings got %d, want 403", resp.StatusCode)
	}
}
