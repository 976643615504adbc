package report

import (
	"reflect"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

func micros(s string) *gpuwarden.Micros {
	m := eur(s)
	return &m
}

func TestCostPerResultFixture(t *testing.T) {
	want := CostPerResultReport{
		Results: []ResultCost{
			// 2.5 epochs over the 09:00 and 10:00 hours: €3,000.00, €1,200 an epoch.
			{Node: "a", Unit: "epoch", Units: eur("2.5"), Events: 2, First: ago(3*time.Hour - 10*time.Minute),
				Last: ago(2*time.Hour - 5*time.Minute), Hours: 2, Cost: 300000, Currency: "EUR", CostPerUnit: micros("1200"), Skipped: 1},
			// €10 for 120,000 requests: €0.000083 each, €0.083333 per 1,000.
			{Node: "f", Unit: UnitRequests, Units: eur("120000"), Events: 1, First: ago(50 * time.Minute), Last: ago(50 * time.Minute),
				Hours: 1, Cost: 1000, Currency: "EUR", CostPerUnit: micros("0.000083"), CostPer1000: micros("0.083333")},
		},
		Skipped: 2,
	}
	got := CostPerResult(fixture())
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestCostPerResultEdges(t *testing.T) {
	at := func(h, m int) time.Time { return time.Date(2026, 11, 20, h, m, 0, 0, time.UTC) }
	node := gpuwarden.Node{ID: "n", Labels: gpuwarden.NodeLabels{Currency: "USD"}}
	hours := []gpuwarden.NodeHour{
		hour("n", at(0, 0), 60, "100", "USD"), // before the first event's hour
		hour("n", at(1, 0), 60, "2", "USD"),
		hour("n", at(2, 0), 0, "0", "USD"),  // zero minutes, still in the span
		hour("n", at(3, 0), 60, "3", "EUR"), // another currency
		hour("n", at(4, 0), 60, "5", "USD"),
		hour("n", at(5, 0), 60, "100", "USD"), // after the last event's hour
	}
	tests := []struct {
		name string
		in   Input
		want CostPerResultReport
	}{
		{"no data", Input{Now: now}, CostPerResultReport{Results: []ResultCost{}}},
		{"malformed counts", Input{Now: now, Events: []gpuwarden.NodeEvent{
			progress("n", "epoch", "-1", now), progress("n", "epoch", "1e3", now), progress("n", "epoch", " ", now),
			progress("n", "epoch", "0.0000001", now), progress("n", "  ", "1", now),
		}}, CostPerResultReport{Results: []ResultCost{}, Skipped: 5}},
		{"the span is hour-granular and inclusive; other currencies left out", Input{Now: now, Nodes: []gpuwarden.Node{node}, Hours: hours,
			Events: []gpuwarden.NodeEvent{progress("n", "steps", "1,000", at(1, 0)), progress("n", "steps", "700", at(4, 59)),
				progress("n", "steps", "300", at(1, 30))}},
			CostPerResultReport{Skipped: 1, Results: []ResultCost{
				{Node: "n", Unit: "steps", Units: eur("1000"), Events: 2, First: at(1, 30), Last: at(4, 59), Hours: 3, Cost: 700,
					Currency: "USD", CostPerUnit: micros("0.007"), Skipped: 1, OtherCurrencyHours: 1},
			}}},
		{"no units done: no cost per unit", Input{Now: now, Nodes: []gpuwarden.Node{node}, Hours: hours,
			Events: []gpuwarden.NodeEvent{progress("n", UnitRequests, "0", at(4, 10))}},
			CostPerResultReport{Results: []ResultCost{
				{Node: "n", Unit: UnitRequests, Events: 1, First: at(4, 10), Last: at(4, 10), Hours: 1, Cost: 500, Currency: "USD"},
			}}},
		{"a node with no labels takes its hours' currency", Input{Now: now, Nodes: []gpuwarden.Node{{ID: "n"}}, Hours: hours[3:4],
			Events: []gpuwarden.NodeEvent{progress("n", "epoch", "3", at(3, 10))}},
			CostPerResultReport{Results: []ResultCost{
				{Node: "n", Unit: "epoch", Units: eur("3"), Events: 1, First: at(3, 10), Last: at(3, 10), Hours: 1, Cost: 300,
					Currency: "EUR", CostPerUnit: micros("1")},
			}}},
		{"no hours at all", Input{Now: now, Events: []gpuwarden.NodeEvent{progress("x", "epoch", "2", at(3, 10))}},
			CostPerResultReport{Results: []ResultCost{
				{Node: "x", Unit: "epoch", Units: eur("2"), Events: 1, First: at(3, 10), Last: at(3, 10)},
			}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CostPerResult(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}
