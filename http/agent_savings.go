package http

import (
	"context"
	"fmt"
	"log/slog"
	nethttp "net/http"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/report"
	"github.com/gpuwarden/gpuwarden/savings"
	"github.com/prometheus/client_golang/prometheus"
)

// savingsTimeout bounds a read of the savings ledger for a page or a
// scrape: a slow ledger must not hold either.
const savingsTimeout = 2 * time.Second

// descSaved is what gpuwarden saved, per kind, currency and basis: the
// savings ledger's amounts in currency units (cents / 100).
var descSaved = newDesc("gpuwarden_saved_total",
	"What gpuwarden saved, in currency units, per kind of saving and basis (confirmed, estimated, attributed), from the savings ledger; events that saved nothing count 0, a spot run that lost money counts negative.",
	"kind", "currency", "basis")

// savingsCollector reads the savings ledger at each scrape: the ledger is
// the record, so the series survive restarts and match `report savings`.
type savingsCollector struct {
	ledger func() gpuwarden.SavingsLedger
	log    *slog.Logger
}

// Describe sends the one descriptor.
func (c savingsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descSaved }

// Collect sums every event of the ledger per kind, currency and basis; a
// ledger that fails exports nothing rather than a false 0.
func (c savingsCollector) Collect(ch chan<- prometheus.Metric) {
	l := c.ledger()
	if l == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), savingsTimeout)
	defer cancel()
	events, err := l.Savings(ctx, gpuwarden.SavingsQuery{})
	if err != nil {
		c.log.Warn("metrics: read savings", "err", err)
		return
	}
	type key struct {
		kind gpuwarden.SavingKind
		cur  gpuwarden.Currency
		b    gpuwarden.SavingBasis
	}
	sums := map[key]gpuwarden.Cents{}
	var order []key
	for _, e := range events {
		k := key{e.Kind, e.Currency, e.Basis}
		if _, ok := sums[k]; !ok {
			// A kind whose events all saved nothing still shows, at 0.
			order = append(order, k)
			sums[k] = 0
		}
		if e.NotSaved == "" {
			sums[k] += e.Amount
		}
	}
	for _, k := range order {
		ch <- prometheus.MustNewConstMetric(descSaved, prometheus.CounterValue, units(sums[k]), string(k.kind), string(k.cur), string(k.b))
	}
}

// agentSavings answers the agent's GET /api/v1/savings, the same shape as
// the fleet server's: this month by default, rows by kind.
func (s *Server) handleSavings(w nethttp.ResponseWriter, r *nethttp.Request) {
	if s.Savings == nil {
		s.writeError(w, gpuwarden.Errorf(gpuwarden.ENotFound, "this agent keeps no savings ledger"))
		return
	}
	req, err := parseSavingsQuery(r.URL.Query(), s.now().UTC())
	if err != nil {
		s.writeError(w, err)
		return
	}
	a, err := savingsAnswer(r.Context(), s.Savings, req)
	if err != nil {
		s.writeError(w, err)
		return
	}
	s.writeJSON(w, nethttp.StatusOK, a)
}

// savingsAnswer reads the events a request selects and adds them up
// (report.Savings), the one function both servers answer with; it lists at
// most maxSavingsEvents events, and the totals count them all.
func savingsAnswer(ctx context.Context, l gpuwarden.SavingsLedger, r savingsRequest) (report.SavingsReport, error) {
	events, err := l.Savings(ctx, r.q)
	if err != nil {
		return report.SavingsReport{}, fmt.Errorf("read savings: %w", err)
	}
	a, err := report.Savings(events, r.q.From, r.q.To, r.by)
	if err != nil {
		return a, err
	}
	if len(a.Events) > maxSavingsEvents {
		a.Events, a.Truncated = a.Events[:maxSavingsEvents], true
	}
	return a, nil
}

// savedView is the agent dashboard's "saved this month" card.
type savedView struct {
	Present bool
	Month   string
	Total   string
	// Split is "€500.00 confirmed · €123.45 estimated · €0.00 attributed".
	Split string
	// Kinds are the month's rows by kind.
	Kinds    []savedRow
	Events   []savingEventRow
	NotSaved int
	Error    string
}

// maxDashboardSavings is how many of the month's events the agent's page
// lists, newest first; /api/v1/savings has them all.
const maxDashboardSavings = 10

// buildSaved reads this month's savings for the agent's page.
func (s *Server) buildSaved(ctx context.Context, now time.Time) savedView {
	if s.Savings == nil {
		return savedView{}
	}
	from, to := savings.Month(now)
	v := savedView{Present: true, Month: from.Format("2006-01")}
	ctx, cancel := context.WithTimeout(ctx, savingsTimeout)
	defer cancel()
	a, err := savingsAnswer(ctx, s.Savings, savingsRequest{q: gpuwarden.SavingsQuery{From: from, To: to}, by: "kind"})
	if err != nil {
		s.log.Warn("dashboard savings", "err", err)
		v.Error = "savings unavailable: " + err.Error()
		return v
	}
	v.Total = joinTotals(a.Totals, totalOf)
	v.Split = joinTotals(a.Totals, confirmedOf) + " confirmed · " + joinTotals(a.Totals, estimatedOf) + " estimated · " +
		joinTotals(a.Totals, attributedOf) + " attributed"
	v.NotSaved = a.Total.NotSaved
	v.Kinds = savedRows(a.Rows, "", "")
	for i := range v.Kinds {
		// The agent serves no savings page: /api/v1/savings lists the events.
		v.Kinds[i].Key, v.Kinds[i].Href = gpuwarden.SavingKind(a.Rows[i].Key).Info().Title, ""
	}
	for i := len(a.Events) - 1; i >= 0 && len(v.Events) < maxDashboardSavings; i-- {
		v.Events = append(v.Events, savingEventView(a.Events[i]))
	}
	return v
}
