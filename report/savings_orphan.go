package report

import (
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/savings"
)

// OrphanEnded is the saving of a node a person ends (`gpuwarden node gone`)
// while the orphan review flags it: the review is run on the node as it
// was just before, and if it is an orphan, its rate until the month's end,
// capped at its TTL or a week (savings.OrphanSaving), less the hours
// already counted for it (its own idle stop, say). ok is false when the
// review does not flag the node: then there is no event.
func OrphanEnded(n gpuwarden.Node, cur gpuwarden.Currency, now time.Time, lostAfter time.Duration, by string,
	already []gpuwarden.Saving) (gpuwarden.Saving, bool) {
	rev := Orphans(Input{Now: now, Nodes: []gpuwarden.Node{n}, LostAfter: lostAfter}, OrphanOptions{LostAfter: lostAfter})
	if len(rev.Orphans) != 1 {
		return gpuwarden.Saving{}, false
	}
	o := rev.Orphans[0]
	reasons := make([]string, len(o.Reasons))
	for i, r := range o.Reasons {
		reasons[i] = r.Reason
	}
	rate, source := o.BillsHourly, "orphan review: what it billed an hour"
	if rate <= 0 {
		rate, source = o.HourlyPrice, "box rate (price label)"
	}
	return savings.OrphanSaving(savings.Orphan{Node: n.ID, Project: n.Project, Owner: n.Labels.Owner, Reasons: reasons,
		Flagged: now, Ended: now, By: by, Rate: rate, RateSource: source, Currency: cur,
		TTL: time.Duration(n.Labels.TTLSeconds) * time.Second}, already, now)
}
