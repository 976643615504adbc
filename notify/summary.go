package notify

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// KindSavingsSummary is the event kind of the monthly summary: what the
// fleet spent and saved last month, sent once on the first day of the next.
const KindSavingsSummary = "savings-summary"

// MonthlySummary is one month of the fleet's money for the webhooks: what it
// spent, what gpuwarden saved (confirmed and estimated kept apart), the
// biggest saving and the biggest waste still billing when it is sent.
type MonthlySummary struct {
	// Month is "2026-11"; From and To bound it in UTC (half-open).
	Month    string
	From, To time.Time
	// Sent is when the summary goes out, the event's time.
	Sent time.Time
	// Spent is the month's spend, one line per currency.
	Spent []SpentLine
	// Saved is the month's savings, one total per currency.
	Saved []gpuwarden.SavingsTotal
	// BiggestSaving is the event that saved the most; nil when none did.
	BiggestSaving *gpuwarden.Saving
	// BiggestWaste is the box that bills most an hour with nobody
	// watching (the orphan review) when the summary is sent; nil when none.
	BiggestWaste *Waste
	// Source names the sender ("gpuwarden server"), PagerDuty's source.
	Source string
	// Link is the fleet dashboard's savings page; empty when not known.
	Link string
}

// SpentLine is what the fleet spent in one currency.
type SpentLine struct {
	Currency gpuwarden.Currency
	Spent    gpuwarden.Cents
}

// Waste is a box that still bills with nobody watching: an orphan.
type Waste struct {
	Node, Project, Owner string
	// Why is the orphan review's reasons, "no-owner, idle".
	Why      string
	Hourly   gpuwarden.Micros
	Currency gpuwarden.Currency
	// Weekly is what another week of it costs.
	Weekly gpuwarden.Cents
}

// Key is the summary's dedup key: one per month, so that PagerDuty folds a
// resend into the same alert.
func (s MonthlySummary) Key() string { return KindSavingsSummary + "-" + s.Month }

// moneyList joins amounts of several currencies, "€1,200.00 + $40.00";
// "none" when there are none.
func moneyList[T any](items []T, f func(T) string) string {
	parts := make([]string, 0, len(items))
	for _, it := range items {
		parts = append(parts, f(it))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " + ")
}

// Alert renders the summary as an alert every webhook format can post:
// the same facts in each, the amounts in Data for the JSON and PagerDuty
// bodies so that a program need not parse the words.
func (s MonthlySummary) Alert() Alert {
	spent := moneyList(s.Spent, func(l SpentLine) string { return l.Currency.Format(l.Spent) })
	saved := moneyList(s.Saved, func(t gpuwarden.SavingsTotal) string { return t.Currency.Format(t.Total) })
	part := func(f func(gpuwarden.SavingsTotal) gpuwarden.Cents) string {
		return moneyList(s.Saved, func(t gpuwarden.SavingsTotal) string { return t.Currency.Format(f(t)) })
	}
	confirmed := part(func(t gpuwarden.SavingsTotal) gpuwarden.Cents { return t.Confirmed })
	estimated := part(func(t gpuwarden.SavingsTotal) gpuwarden.Cents { return t.Estimated })
	attributed := part(func(t gpuwarden.SavingsTotal) gpuwarden.Cents { return t.Attributed })
	events, notSaved := 0, 0
	for _, t := range s.Saved {
		events += t.Events
		notSaved += t.NotSaved
	}
	data := map[string]string{"month": s.Month, "from": s.From.UTC().Format(time.RFC3339), "to": s.To.UTC().Format(time.RFC3339),
		"events": fmt.Sprint(events), "not_saved": fmt.Sprint(notSaved)}
	for _, l := range s.Spent {
		data["spent_"+string(l.Currency)] = l.Spent.Decimal()
	}
	for _, t := range s.Saved {
		c := string(t.Currency)
		data["saved_"+c] = t.Total.Decimal()
		data["saved_confirmed_"+c] = t.Confirmed.Decimal()
		data["saved_estimated_"+c] = t.Estimated.Decimal()
		data["saved_attributed_"+c] = t.Attributed.Decimal()
	}
	best, waste := "none", "none"
	if b := s.BiggestSaving; b != nil {
		best = fmt.Sprintf("%s %s on %s (%s, %s)", b.Currency.Format(b.Amount), b.Kind.Info().Title, b.Node, b.Basis, b.Evidence)
		data["biggest_saving_id"] = b.ID
	}
	if w := s.BiggestWaste; w != nil {
		who := w.Owner
		if who == "" {
			who = "no owner"
		}
		waste = fmt.Sprintf("%s in project %s (%s): %s, %s a week; %s", w.Node, w.Project, who,
			w.Currency.FormatRate(w.Hourly, "h"), w.Currency.Format(w.Weekly), w.Why)
		data["biggest_waste_node"] = w.Node
	}
	summary := fmt.Sprintf("Spent %s, saved %s (confirmed %s, estimated %s, attributed %s)",
		spent, saved, confirmed, estimated, attributed)
	source := s.Source
	if source == "" {
		source = "gpuwarden server"
	}
	e := gpuwarden.Event{Time: s.Sent, Kind: KindSavingsSummary, Severity: gpuwarden.SeverityInfo, Key: s.Key(),
		Message: summary, Data: data}
	a := Alert{Event: e, Box: Box{Host: source, Link: s.Link}, Title: "gpuwarden: " + s.Month + " spent and saved",
		Summary: summary, Action: "summary only, nothing stopped"}
	a.Facts = []Fact{{"Month", s.Month + " (" + s.From.UTC().Format("2006-01-02") + " to " + s.To.UTC().AddDate(0, 0, -1).Format("2006-01-02") + ")"},
		{"Spent", spent}, {"Saved", saved}, {"Confirmed", confirmed}, {"Estimated", estimated}, {"Attributed", attributed},
		{"Events", fmt.Sprintf("%d, of which %d saved nothing (not saved: see the dashboard)", events, notSaved)},
		{"Biggest saving", best}, {"Biggest waste still running", waste}}
	if s.Link != "" {
		a.Facts = append(a.Facts, Fact{"Dashboard", s.Link})
	}
	return a
}

// SendSummary posts the monthly summary in the webhook's format: for
// PagerDuty an info trigger whose dedup_key is the month's, so that a
// resend folds into one alert.
func (w *Webhook) SendSummary(ctx context.Context, s MonthlySummary) error {
	return w.sendAlert(ctx, s.Alert())
}
