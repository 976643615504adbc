package report

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// memFleet serves an Input as the fleet ledger would: hours only in the
// asked [from, to), nodes and hours only of the asked project. Build reads
// nothing else.
type memFleet struct {
	gpuwarden.Fleet
	in Input
}

func (f memFleet) inProject(project, node string) bool {
	if project == gpuwarden.AllProjects {
		return true
	}
	i := slices.IndexFunc(f.in.Nodes, func(n gpuwarden.Node) bool { return n.ID == node })
	return i >= 0 && f.in.Nodes[i].Project == project
}

func (f memFleet) Projects(context.Context) ([]gpuwarden.Project, error) {
	return slices.Clone(f.in.Projects), nil
}

func (f memFleet) Nodes(_ context.Context, project string) ([]gpuwarden.Node, error) {
	var out []gpuwarden.Node
	for _, n := range f.in.Nodes {
		if f.inProject(project, n.ID) {
			out = append(out, n)
		}
	}
	return out, nil
}

func (f memFleet) Hours(_ context.Context, project string, from, to time.Time) ([]gpuwarden.NodeHour, error) {
	var out []gpuwarden.NodeHour
	for _, h := range f.in.Hours {
		if !h.Hour.Before(from) && h.Hour.Before(to) && f.inProject(project, h.Node) {
			out = append(out, h)
		}
	}
	return out, nil
}

func (f memFleet) Events(_ context.Context, q gpuwarden.EventQuery) ([]gpuwarden.NodeEvent, error) {
	var out []gpuwarden.NodeEvent
	for _, e := range f.in.Events {
		if !e.Time.Before(q.Since) && (q.Project == "" || f.inProject(q.Project, e.Node)) {
			out = append(out, e)
		}
	}
	return out, nil
}

// TestBuildSpendMonthIsUTC checks that Build reads the hours of the same
// UTC month that Spend reports, whatever zone the asked time is in.
func TestBuildSpendMonthIsUTC(t *testing.T) {
	tests := []struct {
		name  string
		month time.Time
		want  string
		spent gpuwarden.Cents // ml's spend in EUR
	}{
		{"this month", time.Time{}, "2026-11", 420000},
		{"UTC", time.Date(2026, 10, 9, 0, 0, 0, 0, time.UTC), "2026-10", 9900},
		// Half past midnight on 1 November east of Greenwich is still
		// 31 October in UTC: October's hour must be read.
		{"ahead of UTC", time.Date(2026, 11, 1, 0, 30, 0, 0, time.FixedZone("EET", 2*3600)), "2026-10", 9900},
		// 30 November in the evening west of Greenwich is December in UTC.
		{"behind UTC", time.Date(2026, 11, 30, 23, 0, 0, 0, time.FixedZone("EST", -5*3600)), "2026-12", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := Build(context.Background(), memFleet{in: fixture()}, now, Request{Name: "spend", Month: tt.month})
			if err != nil {
				t.Fatal(err)
			}
			r := v.(SpendReport)
			if r.Month != tt.want {
				t.Errorf("month = %q, want %q", r.Month, tt.want)
			}
			var got gpuwarden.Cents
			for _, row := range r.Rows {
				if row.Key == "ml" && row.Currency == "EUR" {
					got = row.Spent
				}
			}
			if got != tt.spent {
				t.Errorf("ml spent %d cents, want %d", got, tt.spent)
			}
		})
	}
}
