package report

import (
	"reflect"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

func budget(limit gpuwarden.Cents, spent, forecast float64) *BudgetUse {
	return &BudgetUse{Limit: limit, SpentPercent: spent, ForecastPercent: forecast}
}

func TestSpendRows(t *testing.T) {
	tests := []struct {
		name   string
		by     string
		month  time.Time
		want   string // the month's name
		left   float64
		rows   []SpendRow
		totals []CurrencyTotal
	}{
		{
			name: "by project", by: ByProject, want: "2026-11", left: 252,
			// ml: 2,000 + 1,000 + 1,200 spent; a and b burn 5.50/h for 252 h;
			// c is lost, so it counts as a node but burns nothing.
			rows: []SpendRow{
				{Key: "ml", Currency: "EUR", Spent: 420000, Nodes: 3, Running: 2, HourlyBurn: eur("5.5"), Forecast: 558600,
					Budget: budget(500000, 84, 111.7)},
				{Key: "web", Currency: "USD", Spent: 60150, Nodes: 2, Running: 1, HourlyBurn: eur("1.5"), Forecast: 97950,
					Budget: budget(100000, 60.2, 98)},
				{Key: "web", Currency: "EUR", Spent: 1000, Nodes: 1, Forecast: 1000},
				{Key: Unknown, Currency: "EUR", Spent: 500, Forecast: 500},
				{Key: "research", Currency: "EUR"},
			},
			totals: []CurrencyTotal{
				{Currency: "EUR", Spent: 421500, Nodes: 4, Running: 2, HourlyBurn: eur("5.5"), Forecast: 560100},
				{Currency: "USD", Spent: 60150, Nodes: 2, Running: 1, HourlyBurn: eur("1.5"), Forecast: 97950},
			},
		},
		{
			name: "by owner", by: ByOwner, want: "2026-11", left: 252,
			rows: []SpendRow{
				{Key: "alice", Currency: "EUR", Spent: 300000, Nodes: 1, Running: 1, HourlyBurn: eur("3.5"), Forecast: 388200},
				{Key: "bob", Currency: "EUR", Spent: 120000, Nodes: 1, Running: 1, HourlyBurn: eur("2"), Forecast: 170400},
				{Key: "carol", Currency: "USD", Spent: 60150, Nodes: 2, Running: 1, HourlyBurn: eur("1.5"), Forecast: 97950},
				{Key: "dave", Currency: "EUR", Spent: 1000, Nodes: 1, Forecast: 1000},
				{Key: Unknown, Currency: "EUR", Spent: 500, Forecast: 500},
				{Key: None, Currency: "EUR", Nodes: 1},
			},
			totals: []CurrencyTotal{
				{Currency: "EUR", Spent: 421500, Nodes: 4, Running: 2, HourlyBurn: eur("5.5"), Forecast: 560100},
				{Currency: "USD", Spent: 60150, Nodes: 2, Running: 1, HourlyBurn: eur("1.5"), Forecast: 97950},
			},
		},
		{
			name: "by provider", by: ByProvider, want: "2026-11", left: 252,
			rows: []SpendRow{
				{Key: "aws", Currency: "EUR", Spent: 300000, Nodes: 1, Running: 1, HourlyBurn: eur("3.5"), Forecast: 388200},
				{Key: "hetzner", Currency: "EUR", Spent: 120000, Nodes: 1, Running: 1, HourlyBurn: eur("2"), Forecast: 170400},
				{Key: "aws", Currency: "USD", Spent: 60150, Nodes: 2, Running: 1, HourlyBurn: eur("1.5"), Forecast: 97950},
				{Key: "lambda", Currency: "EUR", Spent: 1000, Nodes: 1, Forecast: 1000},
				{Key: Unknown, Currency: "EUR", Spent: 500, Forecast: 500},
				{Key: None, Currency: "EUR", Nodes: 1},
			},
			totals: []CurrencyTotal{
				{Currency: "EUR", Spent: 421500, Nodes: 4, Running: 2, HourlyBurn: eur("5.5"), Forecast: 560100},
				{Currency: "USD", Spent: 60150, Nodes: 2, Running: 1, HourlyBurn: eur("1.5"), Forecast: 97950},
			},
		},
		{
			// A past month: its hours only, nothing left to forecast, while
			// nodes and burn still say what runs now.
			name: "past month", by: ByProject, month: time.Date(2026, 10, 9, 0, 0, 0, 0, time.UTC), want: "2026-10", left: 0,
			rows: []SpendRow{
				{Key: "ml", Currency: "EUR", Spent: 9900, Nodes: 3, Running: 2, HourlyBurn: eur("5.5"), Forecast: 9900,
					Budget: budget(500000, 2, 2)},
				{Key: "research", Currency: "EUR"},
				{Key: "web", Currency: "EUR", Nodes: 1},
				{Key: "web", Currency: "USD", Nodes: 1, Running: 1, HourlyBurn: eur("1.5"), Budget: budget(100000, 0, 0)},
			},
			totals: []CurrencyTotal{
				{Currency: "EUR", Spent: 9900, Nodes: 4, Running: 2, HourlyBurn: eur("5.5"), Forecast: 9900},
				{Currency: "USD", Nodes: 1, Running: 1, HourlyBurn: eur("1.5")},
			},
		},
		{
			// A month not begun forecasts all of it: 31 days of December.
			name: "next month", by: ByOwner, month: time.Date(2026, 11, 30, 23, 0, 0, 0, time.FixedZone("EST", -5*3600)), want: "2026-12", left: 744,
			rows: []SpendRow{
				{Key: None, Currency: "EUR", Nodes: 1},
				{Key: "alice", Currency: "EUR", Nodes: 1, Running: 1, HourlyBurn: eur("3.5"), Forecast: 260400},
				{Key: "bob", Currency: "EUR", Nodes: 1, Running: 1, HourlyBurn: eur("2"), Forecast: 148800},
				{Key: "carol", Currency: "USD", Nodes: 1, Running: 1, HourlyBurn: eur("1.5"), Forecast: 111600},
				{Key: "dave", Currency: "EUR", Nodes: 1},
			},
			totals: []CurrencyTotal{
				{Currency: "EUR", Nodes: 4, Running: 2, HourlyBurn: eur("5.5"), Forecast: 409200},
				{Currency: "USD", Nodes: 1, Running: 1, HourlyBurn: eur("1.5"), Forecast: 111600},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Spend(fixture(), tt.by, tt.month)
			if err != nil {
				t.Fatal(err)
			}
			if got.Month != tt.want {
				t.Errorf("month = %q, want %q", got.Month, tt.want)
			}
			if got.HoursLeft != tt.left {
				t.Errorf("hours left = %v, want %v", got.HoursLeft, tt.left)
			}
			if !reflect.DeepEqual(got.Rows, tt.rows) {
				t.Errorf("rows:\n got %+v\nwant %+v", got.Rows, tt.rows)
			}
			if !reflect.DeepEqual(got.Totals, tt.totals) {
				t.Errorf("totals:\n got %+v\nwant %+v", got.Totals, tt.totals)
			}
		})
	}
}

func TestSpendFindings(t *testing.T) {
	project := func(b gpuwarden.Cents) []gpuwarden.Project {
		return []gpuwarden.Project{{Name: "ml", Budget: b, Currency: "EUR"}}
	}
	node := gpuwarden.Node{ID: "n", Project: "ml", LastSeen: now,
		Labels: gpuwarden.NodeLabels{HourlyPrice: eur("10"), Currency: "EUR"}, Live: gpuwarden.Heartbeat{State: gpuwarden.NodeRunning}}
	spent := func(cost string) []gpuwarden.NodeHour {
		return []gpuwarden.NodeHour{hour("n", ago(time.Hour), 60, cost, "EUR")}
	}
	tests := []struct {
		name string
		in   Input
		want []string
	}{
		{"the fixture", fixture(), []string{
			"ml is at 84 % of its €5,000.00 budget; forecast €5,586.00 exceeds it",
			"web is at 60 % of its $1,000.00 budget",
			"web spent €10.00 in EUR, which is not compared with its $1,000.00 budget in USD",
			"1 node hour (€5.00) belongs to nodes the ledger no longer lists; they show as (unknown)",
		}},
		{"no data", Input{Now: now}, []string{}},
		{"under half, forecast within", Input{Now: now, Projects: project(10000000), Nodes: []gpuwarden.Node{node}, Hours: spent("100")},
			[]string{}},
		{"under half, forecast over", Input{Now: now, Projects: project(200000), Nodes: []gpuwarden.Node{node}, Hours: spent("100")},
			// 100 + 10 × 252 = 2,620 > 2,000.
			[]string{"ml is at 5 % of its €2,000.00 budget; forecast €2,620.00 exceeds it"}},
		{"over the budget", Input{Now: now, Projects: project(200000), Nodes: []gpuwarden.Node{node}, Hours: spent("2050")},
			[]string{"ml has spent €2,050.00, 102 % of its €2,000.00 budget"}},
		{"exactly half", Input{Now: now, Projects: project(200000), Hours: spent("1000"),
			Nodes: []gpuwarden.Node{{ID: "n", Project: "ml", Live: gpuwarden.Heartbeat{State: gpuwarden.NodeStopped}}}},
			[]string{"ml is at 50 % of its €2,000.00 budget"}},
		{"no budget set", Input{Now: now, Projects: project(0), Nodes: []gpuwarden.Node{node}, Hours: spent("999999")},
			[]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Spend(tt.in, ByProject, now)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Findings, tt.want) {
				t.Errorf("findings:\n got %q\nwant %q", got.Findings, tt.want)
			}
		})
	}
}

func TestSpendEdges(t *testing.T) {
	t.Run("unknown grouping", func(t *testing.T) {
		_, err := Spend(fixture(), "team", now)
		if code := gpuwarden.ErrorCodeOf(err); code != gpuwarden.EInvalid {
			t.Fatalf("error %v has code %q, want %q", err, code, gpuwarden.EInvalid)
		}
		if gpuwarden.ErrorHint(err) == "" {
			t.Error("no hint")
		}
	})
	t.Run("no data", func(t *testing.T) {
		got, err := Spend(Input{Now: now}, ByOwner, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		want := SpendReport{By: ByOwner, Month: "2026-11", From: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
			To: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Now: now, HoursLeft: 252,
			Rows: []SpendRow{}, Totals: []CurrencyTotal{}, Findings: []string{}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got %+v\nwant %+v", got, want)
		}
	})
	t.Run("a row rounds its exact sum once", func(t *testing.T) {
		// Three hours of 0.004 are 0.012: one cent, where rounding each hour
		// first would give none.
		in := Input{Now: now, Hours: []gpuwarden.NodeHour{
			hour("x", ago(3*time.Hour), 60, "0.004", "EUR"),
			hour("x", ago(2*time.Hour), 60, "0.004", "EUR"),
			hour("x", ago(time.Hour), 60, "0.004", "EUR"),
		}}
		got, err := Spend(in, ByProvider, now)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Rows) != 1 || got.Rows[0].Spent != 1 {
			t.Errorf("rows = %+v, want one of 1 cent", got.Rows)
		}
	})
	t.Run("a node listed twice counts once", func(t *testing.T) {
		in := fixture()
		in.Nodes = append(in.Nodes, in.Nodes[0])
		got, err := Spend(in, ByProject, now)
		if err != nil {
			t.Fatal(err)
		}
		if r := got.Rows[0]; r.Running != 2 || r.HourlyBurn != eur("5.5") {
			t.Errorf("ml row = %+v, want 2 running burning 5.5", r)
		}
	})
}
