package http

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/report"
)

// stopView is a node's idle stop as the dashboard shows it, in one line:
// how the box would stop and whether that was proven, or loudly that it
// would not end the bill, or after a stop what the provider answered.
type stopView struct {
	Text string
	// Class is the line's colour: ok, warn, bad or muted.
	Class string
	// Loud marks a stop that does not end the bill here: the node page
	// says so in a banner, the node list in the warning colour.
	Loud bool
}

// stopSummary says what the node's last heartbeat reported of its stop.
func stopSummary(n gpuwarden.Node, now time.Time) stopView {
	s := n.Live.Stop
	if s == nil {
		return stopView{Text: "idle stop not reported", Class: "muted"}
	}
	method := cmp.Or(s.Method, "none")
	if o := s.Outcome; o != nil {
		ans := o.Answer()
		if ans != "" {
			ans = " (" + ans + ")"
		}
		when := ""
		if !o.At.IsZero() {
			when = " " + fmtDuration(now.Sub(o.At)) + " ago"
		}
		switch o.Billing {
		case gpuwarden.NodeStopped:
			return stopView{Text: fmt.Sprintf("stopped by %s%s: the provider confirmed it%s", cmp.Or(o.Method, method), when, ans), Class: "ok"}
		case gpuwarden.NodeStopRequested:
			return stopView{Text: fmt.Sprintf("stop requested by %s%s, not confirmed: it bills until the provider says it stopped%s",
				cmp.Or(o.Method, method), when, ans), Class: "warn"}
		case gpuwarden.NodePoweredOffStillBilling:
			return stopView{Text: fmt.Sprintf("powered off by %s%s but STILL BILLING: %s%s", cmp.Or(o.Method, method), when,
				cmp.Or(s.Why, "a power-off does not end the bill here"), fixTail(s.Fix)), Class: "bad", Loud: true}
		default:
			return stopView{Text: fmt.Sprintf("the stop by %s%s was refused, the box still bills%s", cmp.Or(o.Method, method), when, ans),
				Class: "bad", Loud: true}
		}
	}
	if !s.StopsBilling {
		return stopView{Text: "idle stop would NOT stop billing here: " + cmp.Or(s.Why, method+" does not end the bill") + fixComma(s.Fix),
			Class: "bad", Loud: true}
	}
	switch p := s.Proof; {
	case p == nil:
		return stopView{Text: "idle stop: " + method + ", not proven yet", Class: "muted"}
	case p.Proven:
		return stopView{Text: fmt.Sprintf("idle stop: %s, proven %s ago", method, fmtDuration(now.Sub(p.At))), Class: "ok"}
	default:
		return stopView{Text: fmt.Sprintf("idle stop: %s, NOT proven: %s%s", method, cmp.Or(p.Reason, "the last check failed"), fixTail(p.Fix)),
			Class: "warn"}
	}
}

func fixTail(fix string) string {
	if fix == "" {
		return ""
	}
	return "; fix: " + fix
}

func fixComma(fix string) string {
	if fix == "" {
		return ""
	}
	return ", " + fix
}

// afterStopText says what a node bills after it stopped reporting: "still
// billing after stop: €3.50/h since 10:00 UTC, €7.00 so far", or for a
// node marked gone what it billed until then; empty when nothing.
func afterStopText(n gpuwarden.Node, cur gpuwarden.Currency, now time.Time, lostAfter time.Duration) string {
	a, ok := report.StillBilling(n, cur, now, lostAfter)
	if !ok {
		return ""
	}
	if !a.Accruing() {
		return fmt.Sprintf("billed %s after it stopped reporting (%s from %s until marked gone)",
			fmtMoney(a.Currency, gpuwarden.CentsOf(a.Within(a.From, a.Until))), fmtRate(a.Currency, a.Hourly), stampUTC(a.From))
	}
	what := "still billing after stop"
	switch a.State {
	case gpuwarden.NodeLost:
		what = "silent, may still bill in full"
	case gpuwarden.NodeAgentStopped:
		what = "its agent stopped, not the box: may still bill in full"
	case gpuwarden.NodeStopped:
		what = "stopped, its disks still bill"
	}
	return fmt.Sprintf("%s: %s since %s, %s so far", what, fmtRate(a.Currency, a.Hourly), stampUTC(a.From),
		fmtMoney(a.Currency, gpuwarden.CentsOf(a.Within(a.From, now))))
}

// stopDetails are the node page's rows about the idle stop: the method and
// what it does to the bill, the last proof, and the provider's answer to
// the stop once it ran.
func stopDetails(s *gpuwarden.StopReport, now time.Time) []keyValue {
	if s == nil {
		return nil
	}
	var out []keyValue
	add := func(k, v string) {
		if v != "" {
			out = append(out, keyValue{k, v})
		}
	}
	add("method", cmp.Or(s.Method, "none"))
	ends := "no"
	if s.StopsBilling {
		ends = "yes"
	}
	if s.Why != "" {
		ends += ": " + s.Why
	}
	add("ends the bill", ends)
	add("fix", s.Fix)
	var bills []string
	if s.StillBillsHourly > 0 {
		bills = append(bills, fmtRate(s.Currency, s.StillBillsHourly))
	}
	if len(s.StillBills) > 0 {
		bills = append(bills, strings.Join(s.StillBills, ", "))
	}
	add("still bills after a stop", strings.Join(bills, ": "))
	if p := s.Proof; p != nil {
		v := "NOT proven"
		if p.Proven {
			v = "proven"
		}
		if !p.At.IsZero() {
			v += " " + fmtDuration(now.Sub(p.At)) + " ago (" + stampUTC(p.At) + ")"
		}
		if p.Reason != "" {
			v += ": " + p.Reason
		}
		add("proof", v)
		add("checked", strings.Join(p.Checked, "; "))
		add("proof fix", p.Fix)
	}
	if o := s.Outcome; o != nil {
		add("stopped by", o.Method)
		if !o.At.IsZero() {
			add("stop at", stampUTC(o.At)+" ("+fmtDuration(now.Sub(o.At))+" ago)")
		}
		if o.HTTPStatus != 0 {
			add("provider's HTTP status", strconv.Itoa(o.HTTPStatus))
		}
		add("operation ID", o.OperationID)
		add("state read back", o.State)
		add("billing after the stop", o.Billing)
		add("provider's detail", o.Detail)
	}
	return out
}
