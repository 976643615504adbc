package report

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// UnitRequests is the progress unit priced per 1,000 as well: a request
// costs fractions of a cent, which reads better per thousand.
const UnitRequests = "requests"

// CostPerResultReport is what each unit of work cost, per node and unit.
type CostPerResultReport struct {
	Results []ResultCost `json:"results"`
	// Skipped counts progress events left out: no unit, or a count that is
	// not a non-negative decimal with at most six places.
	Skipped int `json:"skipped"`
}

// ResultCost is one node's progress in one unit and what the node's hours
// over that progress cost.
type ResultCost struct {
	Node string `json:"node"`
	Unit string `json:"unit"`
	// Units is the sum of the progress counts, exact.
	Units  gpuwarden.Micros `json:"units"`
	Events int              `json:"events"`
	First  time.Time        `json:"first"`
	Last   time.Time        `json:"last"`
	// Hours are the node hours from the first event's clock hour to the
	// last event's, both included, that were priced in Currency.
	Hours    int                `json:"hours"`
	Cost     gpuwarden.Cents    `json:"cost"`
	Currency gpuwarden.Currency `json:"currency"`
	// CostPerUnit is absent when no units were done or no hours were
	// priced: a quotient of nothing would read as "free".
	CostPerUnit *gpuwarden.Micros `json:"cost_per_unit,omitempty"`
	// CostPer1000 is set for the unit "requests".
	CostPer1000 *gpuwarden.Micros `json:"cost_per_1000,omitempty"`
	// Skipped counts this node and unit's malformed counts.
	Skipped int `json:"skipped"`
	// OtherCurrencyHours are hours in the span priced in another currency;
	// they cannot be added to Cost and are left out of it.
	OtherCurrencyHours int `json:"other_currency_hours,omitempty"`
}

// CostPerResult prices every (node, unit) with progress events: the cost of
// the node's hours spanning its first to its last progress event, divided by
// the units done. The first event's count covers work since a progress event
// that may lie before the period, so short spans overstate the units a little;
// a week of progress makes that noise.
func CostPerResult(in Input) CostPerResultReport {
	ix := newIndex(in)
	type key struct{ node, unit string }
	acc := map[key]*ResultCost{}
	badCounts := map[key]int{}
	r := CostPerResultReport{Results: []ResultCost{}}
	for _, e := range in.Events {
		if e.Kind != KindProgress {
			continue
		}
		unit := strings.TrimSpace(e.Data["unit"])
		if unit == "" {
			r.Skipped++
			continue
		}
		k := key{e.Node, unit}
		n, err := gpuwarden.ParseMicros(e.Data["count"])
		if err != nil || n < 0 {
			r.Skipped++
			badCounts[k]++
			continue
		}
		at := e.Time.UTC()
		rc := acc[k]
		if rc == nil {
			rc = &ResultCost{Node: e.Node, Unit: unit, First: at, Last: at}
			acc[k] = rc
		}
		rc.Units += n
		rc.Events++
		rc.First = minTime(rc.First, at)
		rc.Last = maxTime(rc.Last, at)
	}

	hours := map[string][]gpuwarden.NodeHour{}
	for _, h := range in.Hours {
		hours[h.Node] = append(hours[h.Node], h)
	}
	for _, hs := range hours {
		slices.SortStableFunc(hs, func(a, b gpuwarden.NodeHour) int { return a.Hour.Compare(b.Hour) })
	}
	for k, rc := range acc {
		rc.Skipped = badCounts[k]
		first, last := rc.First.Truncate(time.Hour), rc.Last.Truncate(time.Hour)
		var span []gpuwarden.NodeHour
		for _, h := range hours[k.node] {
			at := h.Hour.UTC().Truncate(time.Hour)
			if !at.Before(first) && !at.After(last) {
				span = append(span, h)
			}
		}
		rc.Currency = ix.currency(ix.nodes[k.node])
		if rc.Currency == "" && len(span) > 0 {
			rc.Currency = ix.hourCurrency(span[0])
		}
		var cost gpuwarden.Micros
		for _, h := range span {
			if ix.hourCurrency(h) != rc.Currency {
				rc.OtherCurrencyHours++
				continue
			}
			cost += h.Cost
			rc.Hours++
		}
		rc.Cost = gpuwarden.CentsOf(cost)
		if rc.Units > 0 && rc.Hours > 0 {
			per := gpuwarden.Micros(divRound(int64(cost), gpuwarden.MicrosPerUnit, int64(rc.Units)))
			rc.CostPerUnit = &per
			if rc.Unit == UnitRequests {
				k := gpuwarden.Micros(divRound(int64(cost), 1000*gpuwarden.MicrosPerUnit, int64(rc.Units)))
				rc.CostPer1000 = &k
			}
		}
		r.Results = append(r.Results, *rc)
	}
	slices.SortFunc(r.Results, func(a, b ResultCost) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Unit, b.Unit))
	})
	return r
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// units prints a count of units with thousands grouped: "1,200,000", "12.5".
func units(m gpuwarden.Micros) string {
	s := m.String()
	whole, frac, dot := strings.Cut(strings.TrimPrefix(s, "-"), ".")
	var w int64
	fmt.Sscan(whole, &w)
	out := gpuwarden.GroupDigits(w)
	if dot {
		out += "." + frac
	}
	if m < 0 {
		out = "-" + out
	}
	return out
}

// amount prints money with all its significant digits: a request can cost
// $0.000021, which cents would show as nothing.
func amount(cur gpuwarden.Currency, m gpuwarden.Micros) string {
	if c := gpuwarden.CentsOf(m); c.Micros() == m {
		return money(cur, c)
	}
	sign := ""
	if m < 0 {
		sign, m = "-", -m
	}
	whole, frac := int64(m)/gpuwarden.MicrosPerUnit, int64(m)%gpuwarden.MicrosPerUnit
	// Format gives the symbol and the grouped whole part; the fraction
	// keeps every digit past the cent.
	s := strings.TrimSuffix(money(cur, gpuwarden.Cents(whole*100)), ".00")
	return sign + s + "." + strings.TrimRight(fmt.Sprintf("%06d", frac), "0")
}

// span prints the time between the first and last progress event.
func span(d time.Duration) string {
	if d < time.Minute {
		return "0m"
	}
	return human(d)
}

// WriteCostPerResultTable prints what each unit of work cost.
func WriteCostPerResultTable(w io.Writer, r CostPerResultReport) error {
	var b strings.Builder
	b.WriteString("Cost per result (node hours from the first to the last progress event)\n\n")
	if len(r.Results) == 0 {
		b.WriteString("No progress recorded.\n")
	} else {
		t := newTable("NODE", "UNIT", "DONE", "SPAN", "HOURS", "COST", "PER UNIT", "PER 1,000").alignRight(2, 3, 4, 5, 6, 7)
		for _, rc := range r.Results {
			per, per1000 := "-", "-"
			if rc.CostPerUnit != nil {
				per = amount(rc.Currency, *rc.CostPerUnit)
			}
			if rc.CostPer1000 != nil {
				per1000 = amount(rc.Currency, *rc.CostPer1000)
			}
			t.add(truncate(rc.Node, 24), truncate(rc.Unit, 10), units(rc.Units), span(rc.Last.Sub(rc.First)),
				fmt.Sprint(rc.Hours), money(rc.Currency, rc.Cost), per, per1000)
		}
		if err := t.write(&b); err != nil {
			return err
		}
		for _, rc := range r.Results {
			if rc.OtherCurrencyHours > 0 {
				fmt.Fprintf(&b, "\n%s: %d hours priced in another currency than %s are left out.\n",
					rc.Node, rc.OtherCurrencyHours, curName(rc.Currency))
			}
		}
	}
	if r.Skipped > 0 {
		fmt.Fprintf(&b, "\n%d progress events skipped: no unit, or a count that is not a plain decimal.\n", r.Skipped)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
