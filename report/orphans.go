package report

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// Orphan reasons, in the order a review reads them.
const (
	ReasonNoOwner     = "no-owner"
	ReasonTTLExceeded = "ttl-exceeded"
	ReasonIdle        = "idle"
	// ReasonPoweredOff is a box powered off where that keeps the compute
	// bill running (node state powered-off-still-billing).
	ReasonPoweredOff = gpuwarden.NodePoweredOffStillBilling
	// ReasonStopRequested is a stop the provider accepted and never
	// confirmed (node state stop-requested).
	ReasonStopRequested = gpuwarden.NodeStopRequested
	// ReasonAgentStopped is a box whose agent was stopped, not the box,
	// silent for the lost window (node state agent-stopped).
	ReasonAgentStopped  = gpuwarden.NodeAgentStopped
	ReasonHeartbeatLost = "heartbeat-lost"
)

// OrphanPeriod is how far back the orphan review counts what a box cost.
const OrphanPeriod = 7 * 24 * time.Hour

// reasonOrder fixes the order of reasons in every output.
var reasonOrder = []string{ReasonNoOwner, ReasonTTLExceeded, ReasonIdle, ReasonPoweredOff, ReasonStopRequested, ReasonAgentStopped, ReasonHeartbeatLost}

// reasonAdvice is the line per reason the review ends with: what to do.
var reasonAdvice = map[string]string{
	ReasonNoOwner:     "nobody answers for these boxes: find who launched them (provider console, token) and set the owner label at registration, or stop them",
	ReasonTTLExceeded: "they outlived the time they were launched for: stop them, or raise the TTL in the launch if the work really needs longer",
	ReasonIdle:        "the GPUs sleep: stop the boxes, or enable the idle policy of `gpuwarden up` so that they stop themselves",
	ReasonPoweredOff: "these boxes powered off where that does not end the bill: stop them through the provider itself " +
		"(deallocate, stop, terminate: each box's fix says which), give their agent a stop that ends the bill, " +
		"and mark them gone with `gpuwarden node gone ID` once they no longer bill",
	ReasonStopRequested: "the provider accepted the stop but never said it ended: check each box in the provider's console, " +
		"stop it there if it still runs, then `gpuwarden node gone ID`",
	ReasonAgentStopped: "their agent was stopped, not the box, which may run and bill on with nobody watching: start the agent " +
		"again (`gpuwarden up`), or stop the box through the provider and `gpuwarden node gone ID`",
	ReasonHeartbeatLost: "the agent stopped reporting but the box may still bill: check in the provider's console that it is really gone, and terminate it there if not",
}

// OrphanOptions tunes what counts as idle and as lost.
type OrphanOptions struct {
	// IdleAfter is how long a box may sleep before it is an orphan; zero
	// means DefaultIdleAfter.
	IdleAfter time.Duration
	// LostAfter is how long without a heartbeat makes a box lost; zero
	// means the input's LostAfter, else DefaultLostAfter.
	LostAfter time.Duration
}

// OrphanReport is the orphan review: boxes that bill while nobody watches.
type OrphanReport struct {
	Now              time.Time     `json:"now"`
	IdleAfterSeconds int64         `json:"idle_after_seconds"`
	LostAfterSeconds int64         `json:"lost_after_seconds"`
	Orphans          []Orphan      `json:"orphans"`
	Totals           []OrphanTotal `json:"totals"`
	Reasons          []ReasonCount `json:"reasons"`
}

// Orphan is one box that bills with nobody watching, and why we think so.
type Orphan struct {
	Node         string         `json:"node"`
	Project      string         `json:"project"`
	Hostname     string         `json:"hostname,omitempty"`
	Owner        string         `json:"owner"`
	Provider     string         `json:"provider"`
	Region       string         `json:"region,omitempty"`
	InstanceType string         `json:"instance_type,omitempty"`
	State        string         `json:"state"`
	Registered   time.Time      `json:"registered,omitzero"`
	LastSeen     time.Time      `json:"last_seen,omitzero"`
	Reasons      []OrphanReason `json:"reasons"`
	// HourlyPrice is the node's price label; BillsHourly what it bills an
	// hour now: the price, or after a stop the rate that still bills.
	HourlyPrice gpuwarden.Micros   `json:"hourly_price"`
	BillsHourly gpuwarden.Micros   `json:"bills_hourly"`
	Currency    gpuwarden.Currency `json:"currency"`
	// CostSoFar is what the node cost in the report's period (OrphanPeriod):
	// its hours and AfterStop.
	CostSoFar gpuwarden.Cents `json:"cost_so_far"`
	// AfterStop is the part of CostSoFar billed since the box stopped
	// reporting (still billing after stop).
	AfterStop gpuwarden.Cents `json:"after_stop"`
	// WeeklyCost is what another week at BillsHourly would cost.
	WeeklyCost gpuwarden.Cents `json:"weekly_cost"`
}

// OrphanReason is one reason a box is an orphan, with the evidence in words
// and, where one box needs its own, the fix.
type OrphanReason struct {
	Reason   string `json:"reason"`
	Evidence string `json:"evidence"`
	Fix      string `json:"fix,omitempty"`
}

// OrphanTotal sums the orphans of one currency; HourlyPrice is what they
// bill an hour (their BillsHourly).
type OrphanTotal struct {
	Currency    gpuwarden.Currency `json:"currency"`
	Orphans     int                `json:"orphans"`
	HourlyPrice gpuwarden.Micros   `json:"hourly_price"`
	CostSoFar   gpuwarden.Cents    `json:"cost_so_far"`
	AfterStop   gpuwarden.Cents    `json:"after_stop"`
	WeeklyCost  gpuwarden.Cents    `json:"weekly_cost"`
}

// ReasonCount is how many orphans have a reason, and what to do about it.
type ReasonCount struct {
	Reason string `json:"reason"`
	Count  int    `json:"count"`
	Advice string `json:"advice"`
}

// hoursPerWeek prices a week left on, in micros of an hour.
const hoursPerWeek = 168 * gpuwarden.MicrosPerUnit

// Orphans finds the boxes that may bill (neither confirmed stopped nor
// marked gone) yet have no owner, outlived their TTL, sleep, powered off
// where that keeps billing, had a stop the provider never confirmed, or
// stopped reporting. A box is listed once with every reason that holds,
// most expensive per week first.
func Orphans(in Input, opt OrphanOptions) OrphanReport {
	if opt.IdleAfter <= 0 {
		opt.IdleAfter = DefaultIdleAfter
	}
	if opt.LostAfter <= 0 {
		opt.LostAfter = cmp.Or(in.LostAfter, DefaultLostAfter)
	}
	in.LostAfter = opt.LostAfter
	now := in.Now.UTC()
	ix := newIndex(in)
	costs := map[string]map[gpuwarden.Currency]gpuwarden.Micros{}
	for _, h := range in.Hours {
		if costs[h.Node] == nil {
			costs[h.Node] = map[gpuwarden.Currency]gpuwarden.Micros{}
		}
		costs[h.Node][ix.hourCurrency(h)] += h.Cost
	}

	r := OrphanReport{Now: now, IdleAfterSeconds: int64(opt.IdleAfter / time.Second),
		LostAfterSeconds: int64(opt.LostAfter / time.Second), Orphans: []Orphan{}, Totals: []OrphanTotal{}, Reasons: []ReasonCount{}}
	for i := range in.Nodes {
		n := &in.Nodes[i]
		state := in.state(n)
		if billsNothing(state) || ix.nodes[n.ID] != n { // a node listed twice counts once
			continue
		}
		cur := ix.currency(n)
		as, accruing := StillBilling(*n, cur, now, opt.LostAfter)
		accruing = accruing && as.Accruing()
		reasons := orphanReasons(n, state, as, accruing, now, opt)
		if len(reasons) == 0 {
			continue
		}
		if cur == "" && len(costs[n.ID]) == 1 {
			// A box with no currency anywhere still has hours that say it.
			for c := range costs[n.ID] {
				cur = c
			}
		}
		o := Orphan{Node: n.ID, Project: n.Project, Hostname: n.Hostname, Owner: orNone(n.Labels.Owner),
			Provider: orNone(n.Labels.Provider), Region: n.Labels.Region, InstanceType: n.Labels.InstanceType,
			State: orNone(n.Live.State), Registered: utc(n.Registered), LastSeen: utc(n.LastSeen), Reasons: reasons,
			HourlyPrice: n.Labels.HourlyPrice, BillsHourly: n.Labels.HourlyPrice, Currency: cur}
		spent := costs[n.ID][cur]
		if accruing && (as.Currency == cur || cur == "") {
			o.Currency, o.BillsHourly = as.Currency, as.Hourly
			after := as.Within(now.Add(-OrphanPeriod), now)
			spent += after
			o.AfterStop = gpuwarden.CentsOf(after)
		}
		o.CostSoFar = gpuwarden.CentsOf(spent)
		o.WeeklyCost = gpuwarden.MulCents(o.BillsHourly, hoursPerWeek)
		r.Orphans = append(r.Orphans, o)
	}
	slices.SortFunc(r.Orphans, func(a, b Orphan) int {
		return cmp.Or(cmp.Compare(b.WeeklyCost, a.WeeklyCost), cmp.Compare(a.Node, b.Node))
	})

	totals := map[gpuwarden.Currency]*OrphanTotal{}
	counts := map[string]int{}
	for _, o := range r.Orphans {
		t := totals[o.Currency]
		if t == nil {
			t = &OrphanTotal{Currency: o.Currency}
			totals[o.Currency] = t
		}
		t.Orphans++
		t.HourlyPrice += o.BillsHourly
		t.CostSoFar += o.CostSoFar
		t.AfterStop += o.AfterStop
		t.WeeklyCost += o.WeeklyCost
		for _, rs := range o.Reasons {
			counts[rs.Reason]++
		}
	}
	for _, c := range sortedKeys(totals) {
		r.Totals = append(r.Totals, *totals[c])
	}
	for _, reason := range reasonOrder {
		if counts[reason] > 0 {
			r.Reasons = append(r.Reasons, ReasonCount{Reason: reason, Count: counts[reason], Advice: reasonAdvice[reason]})
		}
	}
	return r
}

// orphanReasons lists the reasons that hold for a box that may bill; as
// is what it bills after a stop, when accruing.
func orphanReasons(n *gpuwarden.Node, state string, as AfterStop, accruing bool, now time.Time, opt OrphanOptions) []OrphanReason {
	var out []OrphanReason
	if n.Labels.Owner == "" {
		ev := "no owner label"
		if !n.Registered.IsZero() {
			ev += fmt.Sprintf(", registered %s ago", human(now.Sub(n.Registered)))
		}
		out = append(out, OrphanReason{Reason: ReasonNoOwner, Evidence: ev})
	}
	// A TTL past what a Duration holds (about 292 years) cannot have run
	// out; converting it would wrap round to a TTL long gone.
	if n.Labels.TTLSeconds > 0 && n.Labels.TTLSeconds <= math.MaxInt64/int64(time.Second) && !n.Registered.IsZero() {
		ttl := time.Duration(n.Labels.TTLSeconds) * time.Second
		if end := n.Registered.Add(ttl); now.After(end) {
			out = append(out, OrphanReason{Reason: ReasonTTLExceeded, Evidence: fmt.Sprintf("TTL %s ran out %s ago", human(ttl), human(now.Sub(end)))})
		}
	}
	// A box that powered off or had its stop requested sleeps for good:
	// its stop reason says what matters.
	if !n.Live.IdleSince.IsZero() && state != gpuwarden.NodePoweredOffStillBilling && state != gpuwarden.NodeStopRequested {
		if d := now.Sub(n.Live.IdleSince); d >= opt.IdleAfter {
			out = append(out, OrphanReason{Reason: ReasonIdle, Evidence: fmt.Sprintf("idle for %s", human(d))})
		}
	}
	if state == gpuwarden.NodePoweredOffStillBilling || state == gpuwarden.NodeStopRequested {
		if !accruing {
			// A price unknown: the box still bills, at a rate nobody gave.
			as = AfterStop{State: state, Currency: as.Currency}
		}
		if rs, ok := stopReasonOf(n, as, now); ok {
			out = append(out, rs)
		}
	}
	if state == gpuwarden.NodeAgentStopped && !n.LastSeen.IsZero() && now.Sub(n.LastSeen) >= opt.LostAfter {
		// Within the lost window an agent restarting is no news.
		ev := fmt.Sprintf("its agent was stopped %s ago, not the box, which may run on", human(now.Sub(n.LastSeen)))
		if accruing {
			ev += "; bills " + rate(as.Currency, as.Hourly) + " in full until someone looks"
		}
		fix := fmt.Sprintf("start the agent again (`gpuwarden up`), or stop the box through %s, then `gpuwarden node gone %s`",
			cmp.Or(n.Labels.Provider, "the provider"), n.ID)
		out = append(out, OrphanReason{Reason: ReasonAgentStopped, Evidence: ev, Fix: fix})
	}
	if state == gpuwarden.NodeLost {
		var ev string
		switch {
		case !n.LastSeen.IsZero():
			ev = fmt.Sprintf("last heartbeat %s ago", human(now.Sub(n.LastSeen)))
		case !n.Registered.IsZero():
			ev = fmt.Sprintf("no heartbeat since it registered %s ago", human(now.Sub(n.Registered)))
		default:
			ev = "never sent a heartbeat"
		}
		if n.Live.State == gpuwarden.NodeLost && !n.LastSeen.IsZero() && now.Sub(n.LastSeen) < opt.LostAfter {
			ev = "marked lost by the server; " + ev
		}
		if s := n.Live.Stop; s != nil && !s.StopsBilling && s.Why != "" {
			ev += "; its idle stop would not have ended the bill: " + s.Why
		}
		fix := fmt.Sprintf("check in %s's console whether it still runs, stop it there if so, then `gpuwarden node gone %s`",
			cmp.Or(n.Labels.Provider, "the provider"), n.ID)
		out = append(out, OrphanReason{Reason: ReasonHeartbeatLost, Evidence: ev, Fix: fix})
	}
	return out
}

func (o Orphan) reasonNames() string {
	names := make([]string, len(o.Reasons))
	for i, r := range o.Reasons {
		names[i] = r.Reason
	}
	return strings.Join(names, ", ")
}

func (o Orphan) evidence() string {
	ev := make([]string, len(o.Reasons))
	for i, r := range o.Reasons {
		ev[i] = r.Evidence
		if r.Fix != "" {
			ev[i] += "; fix: " + r.Fix
		}
	}
	return strings.Join(ev, "; ")
}

func (r OrphanReport) heading() string {
	return fmt.Sprintf("Orphan review at %s (idle after %s, lost after %s)", stamp(r.Now),
		human(time.Duration(r.IdleAfterSeconds)*time.Second), human(time.Duration(r.LostAfterSeconds)*time.Second))
}

// summary is one sentence per currency: how many orphans, what they cost.
func (r OrphanReport) summary() []string {
	var out []string
	for _, t := range r.Totals {
		noun := "orphans bill"
		if t.Orphans == 1 {
			noun = "orphan bills"
		}
		s := fmt.Sprintf("%d %s %s: %s a week if left on, %s so far this period",
			t.Orphans, noun, rate(t.Currency, t.HourlyPrice), money(t.Currency, t.WeeklyCost), money(t.Currency, t.CostSoFar))
		if t.AfterStop > 0 {
			s += fmt.Sprintf(", %s of it after they stopped reporting", money(t.Currency, t.AfterStop))
		}
		out = append(out, s+".")
	}
	return out
}

// WriteOrphanTable prints the orphan review for the terminal: a table, the
// evidence per box, and what to do per reason.
func WriteOrphanTable(w io.Writer, r OrphanReport) error {
	var b strings.Builder
	b.WriteString(r.heading() + "\n\n")
	if len(r.Orphans) == 0 {
		b.WriteString("No orphans: every box that bills has an owner, a live agent and work to do.\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	for _, s := range r.summary() {
		b.WriteString(wrap(s, ""))
	}
	b.WriteString("\n")
	t := newTable("NODE", "PROJECT", "OWNER", "PROVIDER", "REASONS", "PRICE", "SO FAR", "PER WEEK").alignRight(5, 6, 7)
	for _, o := range r.Orphans {
		t.add(truncate(o.Node, 24), truncate(o.Project, 12), truncate(o.Owner, 12), truncate(o.Provider, 10), o.reasonNames(),
			rate(o.Currency, o.BillsHourly), money(o.Currency, o.CostSoFar), money(o.Currency, o.WeeklyCost))
	}
	if err := t.write(&b); err != nil {
		return err
	}
	b.WriteString("\nEvidence:\n")
	for _, o := range r.Orphans {
		b.WriteString(wrap(o.evidence(), "  "+truncate(o.Node, 24)+": "))
	}
	b.WriteString("\nWhat to do:\n")
	for _, rc := range r.Reasons {
		b.WriteString(wrap(fmt.Sprintf("%s (%d): %s", rc.Reason, rc.Count, rc.Advice), "  - "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Markdown renders the weekly orphan review for Slack or a GitHub issue.
func (r OrphanReport) Markdown(title string) string {
	var b strings.Builder
	if title != "" {
		b.WriteString("## " + mdCell(title) + "\n\n")
	}
	b.WriteString(r.heading() + ".\n\n")
	if len(r.Orphans) == 0 {
		b.WriteString("No orphans: every box that bills has an owner, a live agent and work to do.\n")
		return b.String()
	}
	for _, s := range r.summary() {
		b.WriteString(s + "\n")
	}
	b.WriteString("\n")
	head := []string{"node", "project", "owner", "provider", "reasons", "evidence", "price", "so far", "per week"}
	right := []bool{false, false, false, false, false, false, true, true, true}
	var rows [][]string
	for _, o := range r.Orphans {
		rows = append(rows, []string{mdCode(o.Node), o.Project, o.Owner, o.Provider, o.reasonNames(), o.evidence(),
			rate(o.Currency, o.BillsHourly), money(o.Currency, o.CostSoFar), money(o.Currency, o.WeeklyCost)})
	}
	b.WriteString(mdTable(head, right, rows))
	b.WriteString("\n**What to do**\n\n")
	for _, rc := range r.Reasons {
		fmt.Fprintf(&b, "- **%s** (%d): %s\n", rc.Reason, rc.Count, rc.Advice)
	}
	return b.String()
}
