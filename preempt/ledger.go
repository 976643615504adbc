package preempt

import (
	"slices"

	"github.com/gpuwarden/gpuwarden"
)

// ledger remembers the cancellable notices a source has reported, by ID, so
// that the source can say once that an event is gone. It holds only events
// the provider still lists, because each one is forgotten as soon as its
// cancellation is out, which keeps it bounded by the provider's document. The
// zero value is ready; the owning source serializes access.
type ledger struct {
	m map[string]gpuwarden.Notice
}

// put records n as reported, replacing what an earlier poll said about its ID.
func (l *ledger) put(n gpuwarden.Notice) {
	if l.m == nil {
		l.m = make(map[string]gpuwarden.Notice)
	}
	l.m[n.ID] = n
}

// cancel forgets id and returns its cancellation, ok=false when id was never
// reported (a completed event seen for the first time is history, not news).
func (l *ledger) cancel(id, detail string) (gpuwarden.Notice, bool) {
	n, ok := l.m[id]
	if !ok {
		return gpuwarden.Notice{}, false
	}
	delete(l.m, id)
	return canceled(n, detail), true
}

// sweep cancels every reported ID that is not in present, in ID order so
// that a poll's answer does not depend on map order; detail says why, after
// what the notice said.
func (l *ledger) sweep(present map[string]bool, why string) []gpuwarden.Notice {
	var gone []string
	for id := range l.m {
		if !present[id] {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	var out []gpuwarden.Notice
	for _, id := range gone {
		n, _ := l.cancel(id, l.m[id].Detail+" ("+why+")")
		out = append(out, n)
	}
	return out
}

// canceled is n's cancellation: same provider, ID, Kind and At, so that a
// consumer finds the plan it made for n.
func canceled(n gpuwarden.Notice, detail string) gpuwarden.Notice {
	n.Canceled = true
	n.Detail = detail
	return n
}
