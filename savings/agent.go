package savings

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// Box is what the agent knows of its own box, for pricing its events.
type Box struct {
	Node, Provider string
	// Rate is what the box costs an hour running, RateSource where that
	// came from; StillBills what it bills once stopped.
	Rate       gpuwarden.Micros
	RateSource string
	StillBills gpuwarden.Micros
	Currency   gpuwarden.Currency
	// Why is the stop report's word on what the stop does to the bill.
	Why string
	// Spot marks a spot box; OnDemandRate is the same box on demand, and
	// OnDemandSource where that came from.
	Spot           bool
	OnDemandRate   gpuwarden.Micros
	OnDemandSource string
}

// The data keys of the agent's box-stopped event that pricing reads
// besides the outcome's (method, billing, http_status, operation_id,
// state): the stop's reason and the rates in force when it ran.
const (
	DataWhy        = "why"
	DataAt         = "at"
	DataRate       = "rate"
	DataStillBills = "still_bills_hourly"
	DataCurrency   = "currency"
)

// The reasons of a stop (box-stopped's DataWhy), as the agent's policies
// give them.
const (
	WhyIdle     = "idle"
	WhyBudget   = "budget"
	WhyOffHours = "off-hours"
)

// FromAgent computes a box's events from its agent's ledger events (in
// any order), the times the agent started (each a start of the box), and
// the plan's on-hours (nil: none declared). Idle and budget stops become
// stop events, run reports of a spot box spot events; off-hours stops are
// the plan itself, not a saving against it. Stops are priced in the order
// they happened, so that a later stop never counts an hour an earlier one
// did. Computing again with more starts gives the same IDs, with the
// hours up to the next start: recording them replaces the earlier ones.
func FromAgent(box Box, events []gpuwarden.Event, starts []time.Time, on OnHours, recorded time.Time) []gpuwarden.Saving {
	evs := slices.Clone(events)
	slices.SortStableFunc(evs, func(a, b gpuwarden.Event) int {
		if a.Seq != 0 && b.Seq != 0 {
			return int(a.Seq - b.Seq)
		}
		return a.Time.Compare(b.Time)
	})
	starts = slices.Clone(starts)
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	var out []gpuwarden.Saving
	pending := map[string]string{} // reason → key of the alert that called the stop
	for _, e := range evs {
		switch e.Kind {
		case "idle-stop":
			pending[WhyIdle] = e.Key
		case "budget-stop":
			pending[WhyBudget] = e.Key
		case "box-stopped":
			s, ok := stopOf(box, e, pending)
			if !ok {
				continue
			}
			out = append(out, StopSaving(s, nextAfter(starts, s.Outcome.At), on, out, recorded))
		case "run-report":
			if !box.Spot {
				continue
			}
			var r gpuwarden.RunReport
			if json.Unmarshal([]byte(e.Data["report"]), &r) != nil || r.Start.IsZero() {
				continue
			}
			out = append(out, SpotSaving(Spot{Node: box.Node, Run: r, SpotRate: box.Rate, SpotSource: box.RateSource,
				OnDemandRate: box.OnDemandRate, OnDemandSource: box.OnDemandSource, Currency: box.Currency}, recorded))
		}
	}
	return out
}

// stopOf reads a box-stopped event back into a Stop; ok is false for a
// stop that is not an idle or budget stop.
func stopOf(box Box, e gpuwarden.Event, pending map[string]string) (Stop, bool) {
	d := e.Data
	why := d[DataWhy]
	if why == "" {
		// An event of an older agent: the alert just before says why.
		switch {
		case pending[WhyBudget] != "" && pending[WhyIdle] == "":
			why = WhyBudget
		default:
			why = WhyIdle
		}
	}
	kind := gpuwarden.SavingIdleStop
	switch why {
	case WhyIdle:
	case WhyBudget:
		kind = gpuwarden.SavingBudgetStop
	default:
		return Stop{}, false
	}
	key := pending[why]
	delete(pending, why)
	if key == "" {
		key = e.Key
	}
	out := gpuwarden.StopOutcome{Method: d["method"], Billing: d["billing"], OperationID: d["operation_id"], State: d["state"], At: e.Time}
	out.HTTPStatus, _ = strconv.Atoi(d["http_status"])
	if t, err := time.Parse(time.RFC3339Nano, d[DataAt]); err == nil {
		out.At = t
	}
	s := Stop{Kind: kind, Node: box.Node, Key: key, Outcome: out, Provider: box.Provider, Rate: box.Rate,
		RateSource: box.RateSource, StillBills: box.StillBills, Currency: box.Currency, Why: box.Why}
	// The rates in force when the stop ran win over today's.
	if m, err := gpuwarden.ParseMicros(d[DataRate]); err == nil && d[DataRate] != "" {
		s.Rate = m
	}
	if m, err := gpuwarden.ParseMicros(d[DataStillBills]); err == nil && d[DataStillBills] != "" {
		s.StillBills = m
	}
	if c := d[DataCurrency]; c != "" {
		s.Currency = gpuwarden.Currency(c)
	}
	return s, true
}

// nextAfter is the first start after t, zero when none.
func nextAfter(starts []time.Time, t time.Time) time.Time {
	for _, s := range starts {
		if s.After(t) {
			return s
		}
	}
	return time.Time{}
}
