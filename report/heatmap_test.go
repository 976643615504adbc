package report

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

func TestHeatmapFixture(t *testing.T) {
	n := NoData
	want := HeatmapReport{
		From:  ago(4 * time.Hour),
		To:    now,
		Hours: []time.Time{ago(4 * time.Hour), ago(3 * time.Hour), ago(2 * time.Hour), ago(time.Hour)},
		Rows: []HeatmapRow{
			// 10 % for 60 minutes and 30 % for 30: 16.7 % over the row.
			{Node: "a", Hostname: "a.example", GPU: 0, Cells: []float64{n, 10, 30, n}, Mean: 16.7},
			// The NaN of the third hour is no data, not a zero.
			{Node: "a", Hostname: "a.example", GPU: 1, Cells: []float64{n, 90, n, n}, Mean: 90},
			{Node: "e", GPU: 0, Cells: []float64{n, n, n, 0}, Mean: 0},
			{Node: "f", GPU: 0, Cells: []float64{n, n, n, 80}, Mean: 80},
			{Node: "gone", GPU: 0, Cells: []float64{n, n, n, 40}, Mean: 40},
		},
	}
	got := Heatmap(fixture(), ago(4*time.Hour), now)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestHeatmapEdges(t *testing.T) {
	at := func(h int) time.Time { return time.Date(2026, 11, 20, h, 0, 0, 0, time.UTC) }
	n := NoData
	tests := []struct {
		name     string
		in       Input
		from, to time.Time
		hours    int
		rows     []HeatmapRow
	}{
		{"no data", Input{Now: now}, at(0), at(2), 2, []HeatmapRow{}},
		{"empty range", Input{Now: now, Hours: []gpuwarden.NodeHour{hour("x", at(1), 60, "1", "EUR", 50)}}, at(2), at(2), 0, []HeatmapRow{}},
		{"reversed range", Input{Now: now, Hours: []gpuwarden.NodeHour{hour("x", at(1), 60, "1", "EUR", 50)}}, at(3), at(1), 0, []HeatmapRow{}},
		{"from inside an hour starts at that hour", Input{Now: now, Hours: []gpuwarden.NodeHour{hour("x", at(1), 60, "1", "EUR", 50)}},
			at(1).Add(30 * time.Minute), at(2), 1, []HeatmapRow{{Node: "x", Cells: []float64{50}, Mean: 50}}},
		{"to is excluded", Input{Now: now, Hours: []gpuwarden.NodeHour{hour("x", at(1), 60, "1", "EUR", 50), hour("x", at(2), 60, "1", "EUR", 70)}},
			at(1), at(2), 1, []HeatmapRow{{Node: "x", Cells: []float64{50}, Mean: 50}}},
		{"zero-minute hours are no data", Input{Now: now, Hours: []gpuwarden.NodeHour{hour("x", at(1), 0, "0", "EUR", 50)}},
			at(1), at(2), 1, []HeatmapRow{{Node: "x", Cells: []float64{n}, Mean: n}}},
		{"out-of-range values are clamped, infinities dropped", Input{Now: now, Hours: []gpuwarden.NodeHour{
			hour("x", at(1), 60, "1", "EUR", 250, -5, math.Inf(1))}},
			at(1), at(2), 1, []HeatmapRow{
				{Node: "x", GPU: 0, Cells: []float64{100}, Mean: 100},
				{Node: "x", GPU: 1, Cells: []float64{0}, Mean: 0},
				{Node: "x", GPU: 2, Cells: []float64{n}, Mean: n},
			}},
		{"two rows of one hour weigh by minutes", Input{Now: now, Hours: []gpuwarden.NodeHour{
			hour("x", at(1), 20, "1", "EUR", 0), hour("x", at(1), 40, "1", "EUR", 60)}},
			at(1), at(2), 1, []HeatmapRow{{Node: "x", Cells: []float64{40}, Mean: 40}}},
		{"inventory GPUs with no samples show as no data", Input{Now: now,
			Nodes: []gpuwarden.Node{{ID: "x", Hostname: "h", GPUs: []gpuwarden.GPU{{Index: 0}, {Index: 1}}}},
			Hours: []gpuwarden.NodeHour{hour("x", at(1), 60, "1", "EUR", 20)}},
			at(1), at(2), 1, []HeatmapRow{
				{Node: "x", Hostname: "h", GPU: 0, Cells: []float64{20}, Mean: 20},
				{Node: "x", Hostname: "h", GPU: 1, Cells: []float64{n}, Mean: n},
			}},
		{"a node with no labels and no GPUs in its hours has no rows", Input{Now: now,
			Nodes: []gpuwarden.Node{{ID: "x"}}, Hours: []gpuwarden.NodeHour{hour("x", at(1), 60, "1", "")}},
			at(1), at(2), 1, []HeatmapRow{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Heatmap(tt.in, tt.from, tt.to)
			if len(got.Hours) != tt.hours {
				t.Errorf("%d columns, want %d", len(got.Hours), tt.hours)
			}
			if !reflect.DeepEqual(got.Rows, tt.rows) {
				t.Errorf("rows:\n got %+v\nwant %+v", got.Rows, tt.rows)
			}
		})
	}
}

func TestHeatmapCapsColumns(t *testing.T) {
	got := Heatmap(Input{Now: now}, now, now.AddDate(5, 0, 0))
	if len(got.Hours) != MaxHeatmapHours || !got.To.Equal(now.Add(MaxHeatmapHours*time.Hour)) {
		t.Errorf("%d columns to %s, want the cap %d", len(got.Hours), got.To, MaxHeatmapHours)
	}
}

func TestShade(t *testing.T) {
	tests := []struct {
		u    float64
		want rune
	}{{NoData, '·'}, {0, '░'}, {24.9, '░'}, {25, '▒'}, {49.9, '▒'}, {50, '▓'}, {74.9, '▓'}, {75, '█'}, {100, '█'}}
	for _, tt := range tests {
		if got := shade(tt.u); got != tt.want {
			t.Errorf("shade(%v) = %q, want %q", tt.u, got, tt.want)
		}
	}
}
