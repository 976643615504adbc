// Package savings computes the events of the savings ledger from the
// evidence gpuwarden already records: the agent's stops and the provider's
// answers, its run reports, the fleet server's orphan review. It is pure:
// events and records in, []gpuwarden.Saving out, no I/O and no clock, so
// that the agent, the server and the tests compute the same amounts.
//
// The honesty rules (docs/savings.md) live here once: no event without
// evidence; a stop the provider did not confirm saves nothing and says why;
// an hour of a box is never counted twice, whatever saved it.
package savings

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// Month is the UTC calendar month of t, [from, to): the period a stop's
// counterfactual runs to at most.
func Month(t time.Time) (from, to time.Time) {
	u := t.UTC()
	from = time.Date(u.Year(), u.Month(), 1, 0, 0, 0, 0, time.UTC)
	return from, from.AddDate(0, 1, 0)
}

// ParseMonth reads "2026-11" as its UTC month; anything else is EInvalid.
func ParseMonth(s string) (from, to time.Time, err error) {
	t, err := time.Parse("2006-01", strings.TrimSpace(s))
	if err != nil {
		return from, to, gpuwarden.Errorf(gpuwarden.EInvalid, "month %q is not YYYY-MM", s).WithHint("write the month as 2026-11")
	}
	from, to = Month(t)
	return from, to, nil
}

// microHours is a duration in millionths of an hour, rounded half up:
// the exact quantity MulCents prices, so that Hours × Rate on an event is
// the Amount to the cent.
func microHours(d time.Duration) gpuwarden.Micros {
	if d <= 0 {
		return 0
	}
	const nsPerMicroHour = int64(time.Hour / gpuwarden.MicrosPerUnit) // 3.6 ms
	return gpuwarden.Micros((int64(d) + nsPerMicroHour/2) / nsPerMicroHour)
}

// span is a half-open interval of time.
type span struct{ from, to time.Time }

// minus returns the parts of s that no interval of cover touches, in order.
func (s span) minus(cover []span) []span {
	slices.SortFunc(cover, func(a, b span) int { return a.from.Compare(b.from) })
	out := []span{}
	cur := s.from
	for _, c := range cover {
		if !c.to.After(cur) || !c.from.Before(s.to) {
			continue
		}
		if c.from.After(cur) {
			out = append(out, span{cur, c.from})
		}
		if c.to.After(cur) {
			cur = c.to
		}
		if !cur.Before(s.to) {
			break
		}
	}
	if cur.Before(s.to) {
		out = append(out, span{cur, s.to})
	}
	return out
}

// OnHours says whether the plan declares the box on at a time (the agent's
// Schedule.On); nil means every hour is on.
type OnHours func(time.Time) bool

// onDuration is the time in [from, to) that on declares on, read minute
// by minute: on-hours windows are whole minutes.
func onDuration(sp span, on OnHours) time.Duration {
	if on == nil {
		return sp.to.Sub(sp.from)
	}
	var d time.Duration
	for t := sp.from; t.Before(sp.to); {
		next := t.Truncate(time.Minute).Add(time.Minute)
		if next.After(sp.to) {
			next = sp.to
		}
		if on(t) {
			d += next.Sub(t)
		}
		t = next
	}
	return d
}

// stopLike reports whether a kind counts hours a box did not run: those
// are the hours that must never be counted twice for one box.
func stopLike(k gpuwarden.SavingKind) bool {
	return k == gpuwarden.SavingIdleStop || k == gpuwarden.SavingBudgetStop || k == gpuwarden.SavingOrphanEnded
}

// counted is the spans of a node's stop-like events that saved something:
// a not-saved event covers nothing, so a later confirmed stop of the same
// hours still counts.
func counted(node string, events []gpuwarden.Saving) ([]span, []string) {
	var spans []span
	var ids []string
	for _, e := range events {
		if e.Node == node && stopLike(e.Kind) && e.NotSaved == "" && e.Hours > 0 {
			spans = append(spans, span{e.From, e.To})
			ids = append(ids, e.ID)
		}
	}
	return spans, ids
}

// price fills Hours and Amount of an event from the time it covers, and
// shortens From/To to what is left once the hours already counted for the
// node are taken out. It notes in Evidence what was left out and why.
func price(s *gpuwarden.Saving, whole span, on OnHours, already []gpuwarden.Saving) {
	cover, ids := counted(s.Node, already)
	parts := whole.minus(cover)
	var d time.Duration
	for _, p := range parts {
		d += onDuration(p, on)
	}
	if len(parts) > 0 {
		s.From, s.To = parts[0].from, parts[len(parts)-1].to
	} else {
		s.From, s.To = whole.from, whole.from
	}
	if skipped := whole.to.Sub(whole.from) - sumSpans(parts); skipped > 0 {
		s.Evidence += fmt.Sprintf("; %s already counted by %s", hoursWords(microHours(skipped)), strings.Join(overlapping(whole, cover, ids), ", "))
	}
	if on != nil {
		if off := sumSpans(parts) - d; off > 0 {
			s.Evidence += fmt.Sprintf("; %s outside the plan's on-hours not counted", hoursWords(microHours(off)))
		}
	}
	q := microHours(d)
	s.Hours = q.Float()
	s.Amount = gpuwarden.MulCents(s.Rate, q)
}

func sumSpans(ps []span) time.Duration {
	var d time.Duration
	for _, p := range ps {
		d += p.to.Sub(p.from)
	}
	return d
}

func overlapping(whole span, cover []span, ids []string) []string {
	var out []string
	for i, c := range cover {
		if c.to.After(whole.from) && c.from.Before(whole.to) {
			out = append(out, ids[i])
		}
	}
	return out
}

// hoursWords prints micro-hours for evidence: "12.5 h".
func hoursWords(q gpuwarden.Micros) string { return q.String() + " h" }

// Stop is one stop of a box as the agent recorded it: the alert that
// called for it and the provider's answer to it.
type Stop struct {
	// Kind is SavingIdleStop or SavingBudgetStop.
	Kind gpuwarden.SavingKind
	Node string
	// Key is the key of the alert that called for the stop
	// ("idle-stop-2026-11-03T18:00:00Z", "budget-stop-2026-11"): with the
	// node and the kind it makes the event's ID.
	Key string
	// Outcome is the provider's answer (box-stopped's data).
	Outcome gpuwarden.StopOutcome
	// Provider is the box's provider, for the stop semantics' words.
	Provider string
	// Rate is what the box cost an hour while it ran; StillBills what it
	// bills an hour once stopped (disks, IPs): the stop removed the
	// difference.
	Rate, StillBills gpuwarden.Micros
	// RateSource says where Rate came from ("box rate (--label price)").
	RateSource string
	Currency   gpuwarden.Currency
	// Why is the stop report's word on what the method does to the bill.
	Why string
}

// StopSaving prices one stop: the hours from the provider's confirmed stop
// until nextStart (zero when the box has not started again), or the end
// of the stop's month, counting only on-hours when the plan declares them
// and no hour of already (this node's events counted before) twice, at the
// compute rate the stop removed. A stop the provider did not confirm, or
// one that left the bill running, is an event that saved nothing and says
// why. recorded is the event's At.
func StopSaving(s Stop, nextStart time.Time, on OnHours, already []gpuwarden.Saving, recorded time.Time) gpuwarden.Saving {
	out := s.Outcome
	ev := gpuwarden.Saving{
		ID: gpuwarden.SavingID(s.Kind, s.Node, s.Key), Kind: s.Kind, Node: s.Node,
		Currency: s.Currency, Basis: gpuwarden.SavingConfirmed, At: recorded.UTC(),
	}
	ev.Evidence = fmt.Sprintf("%s %s; provider answer: %s", s.Kind.Info().Title, s.Key, answer(out))
	from := out.At.UTC()
	_, monthEnd := Month(from)
	to := monthEnd
	if !nextStart.IsZero() && nextStart.Before(to) {
		to = nextStart.UTC()
		ev.Evidence += "; next start " + to.Format(time.RFC3339)
	} else {
		ev.Evidence += "; not started again before " + monthEnd.Format(time.RFC3339)
	}
	if to.Before(from) {
		to = from
	}
	whole := span{from, to}
	ev.From, ev.To = from, to
	ev.Rate = max(s.Rate-s.StillBills, 0)
	sem, _ := gpuwarden.StopSemanticsOf(s.Provider)
	ev.RateSource = rateWords(s, sem)

	switch out.Billing {
	case gpuwarden.NodeStopped:
		if !providerAnswered(out) {
			// Stopped on the documentation's word (an OS shutdown where
			// that ends the bill): nothing read the state back.
			ev.Basis = gpuwarden.SavingEstimated
			ev.Evidence += "; no state read back: the provider's documented stop semantics say it ends compute billing"
		}
	case gpuwarden.NodePoweredOffStillBilling:
		ev.NotSaved = "provider kept billing: " + gpuwarden.NodePoweredOffStillBilling + orWhy(s.Why)
	case gpuwarden.NodeStopRequested:
		ev.NotSaved = "the provider accepted the stop but never confirmed a state that ends compute billing (" + gpuwarden.NodeStopRequested + ")"
	default:
		ev.NotSaved = "the stop did not go through (" + cmp.Or(out.Billing, "no answer") + ")"
	}
	switch {
	case ev.NotSaved != "":
	case s.Rate <= 0:
		ev.NotSaved = "the box's rate is unknown (no price label, plan or --rate)"
	case ev.Rate <= 0:
		ev.NotSaved = "what still bills after the stop is the whole rate"
	}
	if ev.NotSaved != "" {
		ev.Hours, ev.Amount = 0, 0
		return ev
	}
	price(&ev, whole, on, already)
	return ev
}

// providerAnswered reports whether the outcome holds the provider's own
// answer: an HTTP status, an operation or a state read back.
func providerAnswered(o gpuwarden.StopOutcome) bool {
	return o.HTTPStatus != 0 || o.OperationID != "" || o.State != ""
}

func orWhy(why string) string {
	if why == "" {
		return ""
	}
	return " (" + why + ")"
}

// rateWords says where the rate came from and what the stop removed.
func rateWords(s Stop, sem gpuwarden.StopSemantics) string {
	src := cmp.Or(s.RateSource, "box rate")
	w := src + " " + s.Rate.String()
	if s.StillBills > 0 {
		w += " − " + s.StillBills.String() + " still billed after the stop"
		if len(sem.StillBills) > 0 {
			w += " (" + strings.Join(sem.StillBills, ", ") + ")"
		}
	}
	if sem.Provider != "" && sem.Action != gpuwarden.ActionNoneKnown {
		w += "; provider stop semantics: " + sem.Provider + " " + string(sem.Action) + " ends compute billing"
	}
	return w
}

// answer is the provider's answer in words for the evidence.
func answer(o gpuwarden.StopOutcome) string {
	parts := []string{cmp.Or(o.Billing, "none")}
	if o.Method != "" {
		parts = append(parts, "method "+o.Method)
	}
	if a := o.Answer(); a != "" {
		parts = append(parts, a)
	}
	if !o.At.IsZero() {
		parts = append(parts, "at "+o.At.UTC().Format(time.RFC3339))
	}
	return strings.Join(parts, ", ")
}

// Spot is what a spot run's saving rests on.
type Spot struct {
	Node string
	// Run is the run report `gpuwarden run` recorded.
	Run gpuwarden.RunReport
	// SpotRate is what the spot box cost an hour; OnDemandRate what the same
	// box costs on demand, and OnDemandSource where that came from.
	SpotRate, OnDemandRate gpuwarden.Micros
	SpotSource             string
	OnDemandSource         string
	Currency               gpuwarden.Currency
}

// SpotSaving prices a run on spot: (on-demand − spot rate) × the hours
// the run took, less the rework its interruptions really cost (the
// attempts' lost seconds at the spot rate). It may be negative: a run that
// lost more than spot saved. Measured by `run`, so confirmed.
func SpotSaving(s Spot, recorded time.Time) gpuwarden.Saving {
	r := s.Run
	key := r.Start.UTC().Format(time.RFC3339Nano) + " " + strings.Join(r.Command, " ")
	ev := gpuwarden.Saving{ID: gpuwarden.SavingID(gpuwarden.SavingSpot, s.Node, key), Kind: gpuwarden.SavingSpot,
		Node: s.Node, From: r.Start.UTC(), To: r.End.UTC(), Currency: s.Currency, Basis: gpuwarden.SavingConfirmed, At: recorded.UTC()}
	preempted := 0
	for _, a := range r.Attempts {
		if a.Class == gpuwarden.ExitPreempted {
			preempted++
		}
	}
	q := microHours(r.End.Sub(r.Start))
	lost := gpuwarden.MicrosFromFloat(r.LostSeconds / 3600)
	ev.Evidence = fmt.Sprintf("run report of %q from %s: %d attempts, %d preempted, %s s of work lost",
		strings.Join(r.Command, " "), r.Start.UTC().Format(time.RFC3339), len(r.Attempts), preempted, trimFloat(r.LostSeconds))
	ev.Rate = s.OnDemandRate - s.SpotRate
	ev.RateSource = fmt.Sprintf("on-demand %s (%s) − spot %s (%s); rework %s h × spot %s",
		s.OnDemandRate, cmp.Or(s.OnDemandSource, "unknown"), s.SpotRate, cmp.Or(s.SpotSource, "box rate"), lost, s.SpotRate)
	switch {
	case s.OnDemandRate <= 0:
		ev.NotSaved = "the on-demand rate of this box is unknown (label on_demand_price, or a catalog offer)"
	case s.SpotRate <= 0:
		ev.NotSaved = "the spot rate of this box is unknown (no price label, plan or --rate)"
	case !r.End.After(r.Start):
		ev.NotSaved = "the run has no duration"
	}
	if ev.NotSaved != "" {
		return ev
	}
	ev.Hours = q.Float()
	ev.Amount = gpuwarden.MulCents(ev.Rate, q) - gpuwarden.MulCents(s.SpotRate, lost)
	return ev
}

func trimFloat(f float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", f), "0"), ".")
}

// Orphan is a box the orphan review flagged and a person then ended.
type Orphan struct {
	Node, Project, Owner string
	// Reasons are the review's reasons ("idle", "no-owner" …) and Flagged
	// when the review flagged it.
	Reasons []string
	Flagged time.Time
	// Ended is when the person ended it (marked it gone, or stopped it).
	Ended time.Time
	// By says who ended it and how ("admin token ab12: deleted in the portal").
	By string
	// Rate is what the box billed an hour when it was ended, RateSource
	// where that came from.
	Rate       gpuwarden.Micros
	RateSource string
	Currency   gpuwarden.Currency
	// TTL is the box's declared lifetime, zero when none.
	TTL time.Duration
}

// OrphanWindow is how long after the review flagged a box its end still
// counts as the review's doing, and how far the counterfactual runs.
const OrphanWindow = 7 * 24 * time.Hour

// OrphanSaving prices an orphan ended by hand: its rate from the end until
// the end of the month, capped at its TTL (when it has one shorter than a
// week) or a week, and not over hours already counted for the node.
// Attributed: a person ended it. An end more than a week after the flag
// is no event at all (ok is false): nothing ties it to the review.
func OrphanSaving(o Orphan, already []gpuwarden.Saving, recorded time.Time) (gpuwarden.Saving, bool) {
	if o.Ended.Before(o.Flagged) || o.Ended.Sub(o.Flagged) > OrphanWindow || len(o.Reasons) == 0 {
		return gpuwarden.Saving{}, false
	}
	from := o.Ended.UTC()
	limit := OrphanWindow
	capWhy := "7 days"
	if o.TTL > 0 && o.TTL < limit {
		limit, capWhy = o.TTL, "its TTL of "+o.TTL.String()
	}
	_, monthEnd := Month(from)
	to := from.Add(limit)
	if monthEnd.Before(to) {
		to = monthEnd
	}
	ev := gpuwarden.Saving{ID: gpuwarden.SavingID(gpuwarden.SavingOrphanEnded, o.Node, from.Format(time.RFC3339Nano)),
		Kind: gpuwarden.SavingOrphanEnded, Node: o.Node, Project: o.Project, Owner: o.Owner, From: from, To: to,
		Rate: o.Rate, RateSource: cmp.Or(o.RateSource, "box rate") + " " + o.Rate.String(), Currency: o.Currency,
		Basis: gpuwarden.SavingAttributed, At: recorded.UTC()}
	ev.Evidence = fmt.Sprintf("orphan review %s flagged it (%s); ended %s by %s; counted to the month's end, at most %s",
		o.Flagged.UTC().Format(time.RFC3339), strings.Join(o.Reasons, ", "), from.Format(time.RFC3339), cmp.Or(o.By, "a person"), capWhy)
	if o.Rate <= 0 {
		ev.NotSaved = "the box's rate is unknown (no price label)"
		return ev, true
	}
	price(&ev, span{from, to}, nil, already)
	return ev, true
}

// RightSize is a box of the size `plan` recommended that ran instead of
// one diagnosed oversized.
type RightSize struct {
	Node string
	// From and To are when the recommended box ran.
	From, To time.Time
	// Oversized and Recommended are the two boxes' rates, with where each
	// came from; Evidence names the diagnosis and the plan.
	Oversized, Recommended             gpuwarden.Micros
	OversizedSource, RecommendedSource string
	Evidence                           string
	Currency                           gpuwarden.Currency
	// Already are the node's events counted before: the hours its own
	// stops counted are hours it did not run, so not right-sized hours.
	Already []gpuwarden.Saving
}

// RightSizeSaving prices a right-sized box: the rate difference over the
// hours it ran, less those its own stops counted (Already). Estimated:
// the oversized box did not run these hours. Without evidence (a
// diagnosis and a plan naming both boxes) there is no event (ok is false).
func RightSizeSaving(r RightSize, recorded time.Time) (gpuwarden.Saving, bool) {
	if strings.TrimSpace(r.Evidence) == "" {
		return gpuwarden.Saving{}, false
	}
	ev := gpuwarden.Saving{ID: gpuwarden.SavingID(gpuwarden.SavingRightSize, r.Node, r.From.UTC().Format(time.RFC3339Nano)),
		Kind: gpuwarden.SavingRightSize, Node: r.Node, From: r.From.UTC(), To: r.To.UTC(), Currency: r.Currency,
		Basis: gpuwarden.SavingEstimated, Evidence: r.Evidence, At: recorded.UTC(), Rate: r.Oversized - r.Recommended,
		RateSource: fmt.Sprintf("oversized %s (%s) − recommended %s (%s)", r.Oversized, cmp.Or(r.OversizedSource, "catalog"),
			r.Recommended, cmp.Or(r.RecommendedSource, "box rate"))}
	if r.Oversized <= 0 || r.Recommended <= 0 {
		ev.NotSaved = "a rate is unknown"
		return ev, true
	}
	price(&ev, span{ev.From, ev.To}, nil, r.Already)
	return ev, true
}
