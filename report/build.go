package report

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/launch"
)

// Names are the reports Build makes, in the order the CLI lists them.
var Names = []string{"spend", "orphans", "nodes", "providers", "heatmap", "cost", "provisioning"}

// Request names a report and its period; zero fields take the defaults.
type Request struct {
	Name string
	// Project limits the report to one project; AllProjects for all.
	Project string
	// By groups spend: project, owner or provider.
	By string
	// Month is any time in the spend report's month; zero is this month.
	Month time.Time
	// Days is the scorecards' and cost report's look-back (default 30).
	Days int
	// Hours is the heatmap's span (default 24).
	Hours int
	// IdleAfter tunes the orphan review; LostAfter, how long a silent
	// node takes to be lost, every report (zero: the defaults).
	IdleAfter, LostAfter time.Duration
}

// Build reads what a report needs from the fleet ledger and makes it. The
// server's API and `gpuwarden report --db` both call it, so they agree.
func Build(ctx context.Context, store gpuwarden.Fleet, now time.Time, req Request) (any, error) {
	now = now.UTC()
	if req.Project == "" {
		req.Project = gpuwarden.AllProjects
	}
	if req.Days <= 0 {
		req.Days = 30
	}
	if req.Hours <= 0 {
		req.Hours = 24
	}
	if req.Days > 400 || req.Hours > 24*31 {
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "days must be at most 400 and hours at most 744")
	}
	lookBack := now.Add(-time.Duration(req.Days) * 24 * time.Hour)
	switch req.Name {
	case "spend":
		month := req.Month
		if month.IsZero() {
			month = now
		}
		month = month.UTC() // Spend's month is a UTC month: read the same hours
		from := time.Date(month.Year(), month.Month(), 1, 0, 0, 0, 0, time.UTC)
		in, err := gather(ctx, store, now, req, from, from.AddDate(0, 1, 0), false)
		if err != nil {
			return nil, err
		}
		by := req.By
		if by == "" {
			by = "project"
		}
		return Spend(in, by, month)
	case "orphans":
		in, err := gather(ctx, store, now, req, now.Add(-OrphanPeriod), now.Add(time.Hour), false)
		if err != nil {
			return nil, err
		}
		return Orphans(in, OrphanOptions{IdleAfter: req.IdleAfter, LostAfter: req.LostAfter}), nil
	case "nodes", "providers", "cost":
		in, err := gather(ctx, store, now, req, lookBack, now.Add(time.Hour), true)
		if err != nil {
			return nil, err
		}
		switch req.Name {
		case "nodes":
			return nonNil(NodeScores(in)), nil
		case "providers":
			return nonNil(ProviderScores(in)), nil
		}
		return CostPerResult(in), nil
	case "provisioning":
		evs, err := store.Events(ctx, gpuwarden.EventQuery{Project: req.Project, Kinds: []string{launch.EventKind}, Since: lookBack})
		if err != nil {
			return nil, fmt.Errorf("read launch records: %w", err)
		}
		return Launches(launch.Attempts(eventsOf(evs)), lookBack, now), nil
	case "heatmap":
		to := now.Truncate(time.Hour).Add(time.Hour)
		from := to.Add(-time.Duration(req.Hours) * time.Hour)
		in, err := gather(ctx, store, now, req, from, to, false)
		if err != nil {
			return nil, err
		}
		return Heatmap(in, from, to), nil
	}
	return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "no report %q", req.Name).WithHint("reports: %v", Names)
}

// nonNil makes an empty list encode as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// gather reads one project's (or every project's) rows for [from, to).
func gather(ctx context.Context, store gpuwarden.Fleet, now time.Time, req Request, from, to time.Time, events bool) (Input, error) {
	project := req.Project
	in := Input{Now: now, LostAfter: req.LostAfter}
	var err error
	if in.Projects, err = store.Projects(ctx); err != nil {
		return in, fmt.Errorf("read projects: %w", err)
	}
	if project != gpuwarden.AllProjects {
		in.Projects = slices.DeleteFunc(in.Projects, func(p gpuwarden.Project) bool { return p.Name != project })
	}
	if in.Nodes, err = store.Nodes(ctx, project); err != nil {
		return in, fmt.Errorf("read nodes: %w", err)
	}
	if in.Hours, err = store.Hours(ctx, project, from, to); err != nil {
		return in, fmt.Errorf("read node hours: %w", err)
	}
	if events {
		if in.Events, err = store.Events(ctx, gpuwarden.EventQuery{Project: project, Since: from}); err != nil {
			return in, fmt.Errorf("read events: %w", err)
		}
	}
	return in, nil
}

// Zero returns a pointer to an empty report of the named kind, for a
// client to decode the server's JSON into.
func Zero(name string) (any, error) {
	switch name {
	case "spend":
		return &SpendReport{}, nil
	case "orphans":
		return &OrphanReport{}, nil
	case "nodes":
		return &[]NodeScore{}, nil
	case "providers":
		return &[]ProviderScore{}, nil
	case "heatmap":
		return &HeatmapReport{}, nil
	case "cost":
		return &CostPerResultReport{}, nil
	case "provisioning":
		return &ProvisioningReport{}, nil
	}
	return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "no report %q", name).WithHint("reports: %v", Names)
}

// Write prints a report made by Build (or decoded into Zero's value) as a
// table, or as markdown where the report has one (spend, orphans).
func Write(w io.Writer, v any, markdown bool, title string) error {
	switch r := v.(type) {
	case *SpendReport:
		return Write(w, *r, markdown, title)
	case SpendReport:
		if markdown {
			_, err := io.WriteString(w, r.Markdown(title))
			return err
		}
		return WriteSpendTable(w, r)
	case *OrphanReport:
		return Write(w, *r, markdown, title)
	case OrphanReport:
		if markdown {
			_, err := io.WriteString(w, r.Markdown(title))
			return err
		}
		return WriteOrphanTable(w, r)
	case *[]NodeScore:
		return Write(w, *r, markdown, title)
	case []NodeScore:
		return WriteNodeScoreTable(w, r)
	case *[]ProviderScore:
		return Write(w, *r, markdown, title)
	case []ProviderScore:
		return WriteProviderScoreTable(w, r)
	case *HeatmapReport:
		return WriteHeatmap(w, *r)
	case HeatmapReport:
		return WriteHeatmap(w, r)
	case *CostPerResultReport:
		return WriteCostPerResultTable(w, *r)
	case CostPerResultReport:
		return WriteCostPerResultTable(w, r)
	case *ProvisioningReport:
		return WriteProvisioningTable(w, *r)
	case ProvisioningReport:
		return WriteProvisioningTable(w, r)
	}
	return fmt.Errorf("write report: unknown type %T", v)
}

// eventsOf drops the node from fleet events; launch records stand alone.
func eventsOf(nes []gpuwarden.NodeEvent) []gpuwarden.Event {
	out := make([]gpuwarden.Event, len(nes))
	for i, ne := range nes {
		out[i] = ne.Event
	}
	return out
}
