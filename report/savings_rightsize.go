package report

import (
	"cmp"
	"fmt"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/savings"
)

// RightSize is what a right-size saving rests on: the box that runs (B),
// which says with --label replaces=A.ID that it runs instead of A, and
// A's diagnosis-oversized event.
type RightSize struct {
	// B is the replacing box and A the one diagnosed oversized, as the
	// fleet ledger holds them; CurB and CurA are what each bills in.
	B, A       gpuwarden.Node
	CurB, CurA gpuwarden.Currency
	// Diagnosis is A's diagnosis-oversized event.
	Diagnosis gpuwarden.NodeEvent
	// Already are B's events counted before (its own stops): hours it did
	// not run are not right-sized hours.
	Already []gpuwarden.Saving
	// Now is the server's clock; LostAfter says when a silent B no longer
	// runs (NodeState).
	Now       time.Time
	LostAfter time.Duration
}

// RightSized prices B's right-size saving for the UTC month of Now: A's
// hourly price less B's over the hours B ran in the month, from its
// registration (or the month's start) to Now, or to its last heartbeat
// once it has stopped. Its ID depends only on B and the month, so every
// batch re-prices the same event. ok is false when there is no evidence:
// no diagnosis of A, A in another project, or no hour of B in the month.
// An unknown price, prices in two currencies or a replacement that costs
// as much as A is an event that saved nothing and says why.
func RightSized(r RightSize) (gpuwarden.Saving, bool) {
	b, a, d := r.B, r.A, r.Diagnosis
	if a.ID == "" || a.ID == b.ID || a.Project != b.Project || d.Node != a.ID || d.Kind != gpuwarden.EventDiagnosisOversized {
		return gpuwarden.Saving{}, false
	}
	now := r.Now.UTC()
	monthStart, _ := savings.Month(now)
	from := b.Registered.UTC()
	if from.Before(monthStart) {
		from = monthStart
	}
	to := now
	if st := NodeState(b, now, r.LostAfter); st != gpuwarden.NodeRunning && !b.LastSeen.IsZero() && b.LastSeen.Before(to) {
		to = b.LastSeen.UTC()
	}
	if !to.After(from) {
		return gpuwarden.Saving{}, false
	}
	data := func(k string) string { return cmp.Or(d.Data[k], "?") }
	evidence := fmt.Sprintf("%s of %s at %s (event %s): %s× %s at %s%% utilization using %s%% of their memory over %s s; %s carries --label %s=%s",
		gpuwarden.EventDiagnosisOversized, a.ID, d.Time.UTC().Format(time.RFC3339), cmp.Or(d.Key, "without key"),
		data(gpuwarden.DataGPUCount), data(gpuwarden.DataGPUModel), data(gpuwarden.DataUtilAvg), data(gpuwarden.DataMemAvg),
		data(gpuwarden.DataWindowSeconds), b.ID, gpuwarden.LabelReplaces, a.ID)
	s, ok := savings.RightSizeSaving(savings.RightSize{Node: b.ID, From: from, To: to,
		Oversized: a.Labels.HourlyPrice, OversizedSource: a.ID + "'s price label",
		Recommended: b.Labels.HourlyPrice, RecommendedSource: b.ID + "'s price label",
		Evidence: evidence, Currency: r.CurB, Already: r.Already}, now)
	if !ok {
		return gpuwarden.Saving{}, false
	}
	s.Project, s.Owner = b.Project, b.Labels.Owner
	why := ""
	switch {
	case a.Labels.HourlyPrice <= 0:
		why = "the oversized box " + a.ID + " has no price label"
	case b.Labels.HourlyPrice <= 0:
		why = "this box has no price label"
	case r.CurA != r.CurB:
		why = fmt.Sprintf("the two boxes bill in different currencies (%s in %s, %s in %s)", a.ID, r.CurA, b.ID, r.CurB)
	case b.Labels.HourlyPrice >= a.Labels.HourlyPrice:
		why = fmt.Sprintf("this box costs %s an hour, no less than the %s of %s it replaces", b.Labels.HourlyPrice, a.Labels.HourlyPrice, a.ID)
	}
	if why != "" {
		s.NotSaved, s.Hours, s.Amount = why, 0, 0
	}
	return s, true
}
