package report

import (
	"cmp"
	"fmt"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// States are the node states the fleet tells apart, in the order the
// dashboards and /metrics count them: a box's agent reports all but lost,
// which the server decides, and gone, which a person decides.
var States = []string{
	gpuwarden.NodeRunning,
	gpuwarden.NodeStopping,
	gpuwarden.NodeStopRequested,
	gpuwarden.NodePoweredOffStillBilling,
	gpuwarden.NodeAgentStopped,
	gpuwarden.NodeLost,
	gpuwarden.NodeStopped,
	gpuwarden.NodeGone,
}

// NodeState is a node's state as the fleet sees it. A box that said how it
// stopped keeps that state however long it stays silent: stopped (the
// provider confirmed a state that does not bill compute), stop-requested
// (the provider accepted the stop, never confirmed it),
// powered-off-still-billing, or agent-stopped (the agent alone stopped, the
// box may run on); a node a person marked gone stays gone until it reports
// again. Any other node silent for lostAfter (zero: DefaultLostAfter) is
// lost: it stopped reporting without saying how it stopped, and may bill in
// full. A node never heard from is running.
func NodeState(n gpuwarden.Node, now time.Time, lostAfter time.Duration) string {
	if lostAfter <= 0 {
		lostAfter = DefaultLostAfter
	}
	switch n.Live.State {
	case gpuwarden.NodeStopped, gpuwarden.NodeStopRequested, gpuwarden.NodePoweredOffStillBilling, gpuwarden.NodeAgentStopped, gpuwarden.NodeGone:
		return n.Live.State
	}
	seen := lastSign(&n)
	if seen.IsZero() || now.Sub(seen) >= lostAfter {
		return gpuwarden.NodeLost
	}
	return cmp.Or(n.Live.State, gpuwarden.NodeRunning)
}

// AfterStop is what a box bills once its agent no longer reports: the
// fleet's spend comes from the minutes agents ship, and a box that stopped
// shipping them may well bill on. It runs from the box's last heartbeat
// until now, or, for a node marked gone, until it was marked. The minute
// of the last heartbeat may also have been shipped, at the full price: the
// two overlap by less than a minute, which errs on the side of the bill.
type AfterStop struct {
	// State is the node's state (NodeState) that makes it bill.
	State string `json:"state"`
	// From is the last heartbeat; Until is when the billing ended (a node
	// marked gone), zero while it runs.
	From  time.Time `json:"from"`
	Until time.Time `json:"until,omitzero"`
	// Hourly is the rate that still bills: the stop report's
	// StillBillsHourly where the agent gave one, else the node's full
	// hourly price; a stopped box bills only the former (its disks).
	Hourly   gpuwarden.Micros   `json:"hourly"`
	Currency gpuwarden.Currency `json:"currency"`
}

// Accruing says whether the box bills now (not only until it was marked gone).
func (a AfterStop) Accruing() bool { return a.Until.IsZero() }

// Within is what the box billed after its stop in [from, to), exactly:
// the rate times the milliseconds, rounded once to the micro.
func (a AfterStop) Within(from, to time.Time) gpuwarden.Micros {
	if !a.Until.IsZero() {
		to = minTime(to, a.Until)
	}
	from = maxTime(from, a.From)
	if !to.After(from) || a.Hourly <= 0 {
		return 0
	}
	return gpuwarden.Micros(divRound(int64(a.Hourly), to.Sub(from).Milliseconds(), int64(time.Hour/time.Millisecond)))
}

// StillBilling returns what node n still bills after it stopped reporting,
// and false when it bills nothing that its shipped minutes do not already
// count: a box that reports, a stopped box without a storage rate, a node
// marked gone while nothing accrued. cur is the node's currency (its label,
// else its project's), now the report's clock.
//
// A lost box, and one whose agent alone stopped, bill at the full price
// whatever the stop report says the box would cost once stopped: nobody
// knows that it stopped. A node marked gone keeps what accrued until
// then: `gpuwarden node gone` writes a last heartbeat whose Time is when
// the node was last heard from and whose Stop.StillBillsHourly is the rate
// it was billing at (see GoneHeartbeat), and the server's LastSeen is when
// it was marked.
func StillBilling(n gpuwarden.Node, cur gpuwarden.Currency, now time.Time, lostAfter time.Duration) (AfterStop, bool) {
	state := NodeState(n, now, lostAfter)
	a := AfterStop{State: state, Hourly: n.Labels.HourlyPrice, Currency: cur}
	stop := n.Live.Stop
	storage := stop != nil && stop.StillBillsHourly > 0
	if storage && state != gpuwarden.NodeLost && state != gpuwarden.NodeAgentStopped {
		a.Hourly, a.Currency = stop.StillBillsHourly, cmp.Or(stop.Currency, cur)
	}
	since := lastSign(&n)
	switch state {
	case gpuwarden.NodeStopRequested, gpuwarden.NodePoweredOffStillBilling, gpuwarden.NodeAgentStopped, gpuwarden.NodeLost:
	case gpuwarden.NodeStopped:
		if !storage {
			return AfterStop{}, false
		}
	case gpuwarden.NodeGone:
		if !storage || n.Live.Time.IsZero() || n.LastSeen.IsZero() {
			return AfterStop{}, false
		}
		since, a.Until = n.Live.Time, n.LastSeen.UTC()
	default:
		return AfterStop{}, false
	}
	if since.IsZero() || a.Hourly <= 0 {
		return AfterStop{}, false
	}
	a.From = since.UTC()
	if !a.Until.IsZero() && !a.Until.After(a.From) {
		return AfterStop{}, false
	}
	return a, true
}

// GoneHeartbeat is the last heartbeat of a node a person marked gone at
// now: it keeps the stop report (so the node page still shows the
// provider's answer), and records from when and at what rate the node was
// billing, so that what accrued until it was marked stays in the spend
// (StillBilling reads it back). note says who marked it and why.
func GoneHeartbeat(n gpuwarden.Node, cur gpuwarden.Currency, now time.Time, lostAfter time.Duration, note string) gpuwarden.Heartbeat {
	hb := gpuwarden.Heartbeat{Node: n.ID, Time: now.UTC(), State: gpuwarden.NodeGone, Diagnosis: note}
	var stop gpuwarden.StopReport
	if n.Live.Stop != nil {
		stop = *n.Live.Stop
		stop.StillBills = append([]string(nil), stop.StillBills...)
		if p := stop.Proof; p != nil {
			pc := *p
			pc.Checked = append([]string(nil), p.Checked...)
			stop.Proof = &pc
		}
		if o := stop.Outcome; o != nil {
			oc := *o
			stop.Outcome = &oc
		}
	}
	stop.StillBillsHourly, stop.Currency = 0, ""
	if a, ok := StillBilling(n, cur, now, lostAfter); ok && a.Accruing() {
		hb.Time = lastSign(&n).UTC()
		stop.StillBillsHourly, stop.Currency = a.Hourly, a.Currency
	}
	if n.Live.Stop != nil || stop.StillBillsHourly > 0 {
		hb.Stop = &stop
	}
	return hb
}

// stopReasonOf is the orphan reason of a box whose stop did not end its
// bill, with its evidence and fix; ok is false for every other state.
func stopReasonOf(n *gpuwarden.Node, a AfterStop, now time.Time) (OrphanReason, bool) {
	provider := cmp.Or(n.Labels.Provider, "its provider")
	s := n.Live.Stop
	var why, fix string
	if s != nil {
		why, fix = s.Why, s.Fix
	}
	billing := fmt.Sprintf("still bills %s", rate(a.Currency, a.Hourly))
	if a.Hourly <= 0 {
		billing = "still bills, at a price its labels do not give"
	}
	ago := "just now"
	if d := now.Sub(lastSign(n)); d >= time.Minute {
		ago = human(d) + " ago"
	}
	switch a.State {
	case gpuwarden.NodePoweredOffStillBilling:
		ev := fmt.Sprintf("powered off on %s %s: %s; %s", provider, ago,
			cmp.Or(why, "a power-off there does not end the compute bill"), billing)
		return OrphanReason{Reason: ReasonPoweredOff, Evidence: ev, Fix: cmp.Or(fix, defaultStopFix(n))}, true
	case gpuwarden.NodeStopRequested:
		ev := fmt.Sprintf("the stop was requested %s but %s never confirmed a state that ends the bill", ago, provider)
		if s != nil && s.Outcome != nil {
			if ans := s.Outcome.Answer(); ans != "" {
				ev += " (" + ans + ")"
			}
		}
		ev += "; " + billing
		return OrphanReason{Reason: ReasonStopRequested, Evidence: ev, Fix: cmp.Or(fix, confirmFix(n))}, true
	}
	return OrphanReason{}, false
}

// defaultStopFix is what ends the bill on the node's provider, from the
// provider table, for a stop report that gave no fix.
func defaultStopFix(n *gpuwarden.Node) string {
	sem, ok := gpuwarden.StopSemanticsOf(n.Labels.Provider)
	gone := fmt.Sprintf("then `gpuwarden node gone %s`", n.ID)
	if !ok || sem.Action == gpuwarden.ActionNoneKnown {
		return "stop or delete it in the provider's console or API, whichever ends the bill there; " + gone
	}
	return fmt.Sprintf("%s it through %s itself (console or API): only that ends the compute bill; %s", sem.Action, sem.Provider, gone)
}

// confirmFix is the fix of a stop the provider accepted but never
// confirmed.
func confirmFix(n *gpuwarden.Node) string {
	sem, ok := gpuwarden.StopSemanticsOf(n.Labels.Provider)
	state := "a state that does not bill"
	if ok && sem.Confirmed != "" {
		state = sem.Confirmed
	}
	return fmt.Sprintf("check in the provider's console that it reached %s (stop it there if not), then `gpuwarden node gone %s`", state, n.ID)
}
