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
	ReasonNoOwner       = "no-owner"
	ReasonTTLExceeded   = "ttl-exceeded"
	ReasonIdle          = "idle"
	ReasonHeartbeatLost = "heartbeat-lost"
)

// reasonOrder fixes the order of reasons in every output.
var reasonOrder = []string{ReasonNoOwner, ReasonTTLExceeded, ReasonIdle, ReasonHeartbeatLost}

// reasonAdvice is the line per reason the review ends with: what to do.
var reasonAdvice = map[string]string{
	ReasonNoOwner:       "nobody answers for these boxes: find who launched them (provider console, token) and set the owner label at registration, or stop them",
	ReasonTTLExceeded:   "they outlived the time they were launched for: stop them, or raise the TTL in the launch if the work really needs longer",
	ReasonIdle:          "the GPUs sleep: stop the boxes, or enable the idle policy of `gpuwarden up` so that they stop themselves",
	ReasonHeartbeatLost: "the agent stopped reporting but the box may still bill: check in the provider's console that it is really gone, and terminate it there if not",
}

// OrphanOptions tunes what counts as idle and as lost.
type OrphanOptions struct {
	// IdleAfter is how long a box may sleep before it is an orphan; zero
	// means DefaultIdleAfter.
	IdleAfter time.Duration
	// LostAfter is how long without a heartbeat makes a box lost; zero
	// means DefaultLostAfter.
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
	Node         string             `json:"node"`
	Project      string             `json:"project"`
	Hostname     string             `json:"hostname,omitempty"`
	Owner        string             `json:"owner"`
	Provider     string             `json:"provider"`
	Region       string             `json:"region,omitempty"`
	InstanceType string             `json:"instance_type,omitempty"`
	State        string             `json:"state"`
	Registered   time.Time          `json:"registered,omitzero"`
	LastSeen     time.Time          `json:"last_seen,omitzero"`
	Reasons      []OrphanReason     `json:"reasons"`
	HourlyPrice  gpuwarden.Micros   `json:"hourly_price"`
	Currency     gpuwarden.Currency `json:"currency"`
	// CostSoFar is the node's hours in the report's period.
	CostSoFar gpuwarden.Cents `json:"cost_so_far"`
	// WeeklyCost is what another week at the hourly price would cost.
	WeeklyCost gpuwarden.Cents `json:"weekly_cost"`
}

// OrphanReason is one reason a box is an orphan, with the evidence in words.
type OrphanReason struct {
	Reason   string `json:"reason"`
	Evidence string `json:"evidence"`
}

// OrphanTotal sums the orphans of one currency.
type OrphanTotal struct {
	Currency    gpuwarden.Currency `json:"currency"`
	Orphans     int                `json:"orphans"`
	HourlyPrice gpuwarden.Micros   `json:"hourly_price"`
	CostSoFar   gpuwarden.Cents    `json:"cost_so_far"`
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

// Orphans finds the boxes that are not stopped yet have no owner, outlived
// their TTL, sleep, or stopped reporting. A box is listed once with every
// reason that holds, most expensive per week first.
func Orphans(in Input, opt OrphanOptions) OrphanReport {
	if opt.IdleAfter <= 0 {
		opt.IdleAfter = DefaultIdleAfter
	}
	if opt.LostAfter <= 0 {
		opt.LostAfter = DefaultLostAfter
	}
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
		if stopped(n) || ix.nodes[n.ID] != n { // a node listed twice counts once
			continue
		}
		reasons := orphanReasons(n, now, opt)
		if len(reasons) == 0 {
			continue
		}
		cur := ix.currency(n)
		if cur == "" && len(costs[n.ID]) == 1 {
			// A box with no currency anywhere still has hours that say it.
			for c := range costs[n.ID] {
				cur = c
			}
		}
		o := Orphan{Node: n.ID, Project: n.Project, Hostname: n.Hostname, Owner: orNone(n.Labels.Owner),
			Provider: orNone(n.Labels.Provider), Region: n.Labels.Region, InstanceType: n.Labels.InstanceType,
			State: orNone(n.Live.State), Registered: utc(n.Registered), LastSeen: utc(n.LastSeen), Reasons: reasons,
			HourlyPrice: n.Labels.HourlyPrice, Currency: cur,
			CostSoFar:  gpuwarden.CentsOf(costs[n.ID][cur]),
			WeeklyCost: gpuwarden.MulCents(n.Labels.HourlyPrice, hoursPerWeek)}
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
		t.HourlyPrice += o.HourlyPrice
		t.CostSoFar += o.CostSoFar
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

// orphanReasons lists the reasons that hold for a box that is not stopped.
func orphanReasons(n *gpuwarden.Node, now time.Time, opt OrphanOptions) []OrphanReason {
	var out []OrphanReason
	if n.Labels.Owner == "" {
		ev := "no owner label"
		if !n.Registered.IsZero() {
			ev += fmt.Sprintf(", registered %s ago", human(now.Sub(n.Registered)))
		}
		out = append(out, OrphanReason{ReasonNoOwner, ev})
	}
	// A TTL past what a Duration holds (about 292 years) cannot have run
	// out; converting it would wrap round to a TTL long gone.
	if n.Labels.TTLSeconds > 0 && n.Labels.TTLSeconds <= math.MaxInt64/int64(time.Second) && !n.Registered.IsZero() {
		ttl := time.Duration(n.Labels.TTLSeconds) * time.Second
		if end := n.Registered.Add(ttl); now.After(end) {
			out = append(out, OrphanReason{ReasonTTLExceeded, fmt.Sprintf("TTL %s ran out %s ago", human(ttl), human(now.Sub(end)))})
		}
	}
	if !n.Live.IdleSince.IsZero() {
		if d := now.Sub(n.Live.IdleSince); d >= opt.IdleAfter {
			out = append(out, OrphanReason{ReasonIdle, fmt.Sprintf("idle for %s", human(d))})
		}
	}
	if lost(n, now, opt.LostAfter) {
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
		out = append(out, OrphanReason{ReasonHeartbeatLost, ev})
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
		out = append(out, fmt.Sprintf("%d %s %s: %s a week if left on, %s so far this period.",
			t.Orphans, noun, rate(t.Currency, t.HourlyPrice), money(t.Currency, t.WeeklyCost), money(t.Currency, t.CostSoFar)))
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
			rate(o.Currency, o.HourlyPrice), money(o.Currency, o.CostSoFar), money(o.Currency, o.WeeklyCost))
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
			rate(o.Currency, o.HourlyPrice), money(o.Currency, o.CostSoFar), money(o.Currency, o.WeeklyCost)})
	}
	b.WriteString(mdTable(head, right, rows))
	b.WriteString("\n**What to do**\n\n")
	for _, rc := range r.Reasons {
		fmt.Fprintf(&b, "- **%s** (%d): %s\n", rc.Reason, rc.Count, rc.Advice)
	}
	return b.String()
}
