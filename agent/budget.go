package agent

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// BudgetConfig is the month's limit and what the box costs.
type BudgetConfig struct {
	Currency gpuwarden.Currency
	// Limit is the monthly limit; 0 turns the budget policy off.
	Limit gpuwarden.Cents
	// AlertsPercent are the thresholds, ascending (default 50, 80, 100).
	AlertsPercent []int
	// HourlyRate is what the running box costs per hour, storage included.
	HourlyRate gpuwarden.Micros
	// StopAtLimit stops the box when the month's spend reaches the limit.
	StopAtLimit bool
}

// budgetMeter accrues the month's spend in micros. The ledger keeps it per
// month, so a restart neither loses nor double-counts what was spent.
type budgetMeter struct {
	month string
	spent gpuwarden.Micros
	last  time.Time
}

func monthKey(t time.Time) string { return t.UTC().Format("2006-01") }

func spendKey(month string) string { return "spend-" + month }

func (m *budgetMeter) restore(ctx context.Context, l gpuwarden.Ledger, cfg BudgetConfig, now time.Time) error {
	m.month = monthKey(now)
	v, ok, err := l.State(ctx, spendKey(m.month))
	if err != nil {
		return fmt.Errorf("read the month's spend: %w", err)
	}
	if ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err == nil {
			m.spent = gpuwarden.Micros(n)
		}
	}
	return nil
}

// maxGap is the longest time between two ticks that still counts as the box
// running: past it the agent was down, and nothing says the box was up.
const maxGap = 5 * time.Minute

// budgetPolicy accrues the time since the last tick, then sends each
// threshold's ACTUAL and FORECASTED alert once per month.
func (a *Agent) budgetPolicy(ctx context.Context, now time.Time) gpuwarden.BudgetState {
	cfg := a.cfg.Budget
	m := &a.budget
	if month := monthKey(now); month != m.month {
		m.month, m.spent = month, 0
	}
	if !m.last.IsZero() {
		if dt := now.Sub(m.last); dt > 0 && dt <= maxGap {
			m.spent += cfg.HourlyRate.Mul(gpuwarden.MicrosFromFloat(dt.Hours()))
		}
	}
	m.last = now
	if err := a.ledger.SetState(ctx, spendKey(m.month), strconv.FormatInt(int64(m.spent), 10)); err != nil {
		a.warn(ctx, "keep the month's spend", "err", err)
	}
	st := gpuwarden.BudgetState{Month: m.month, Currency: cfg.Currency, Limit: cfg.Limit,
		Spent: gpuwarden.CentsOf(m.spent), HourlyRate: cfg.HourlyRate}
	// The box runs as long as its agent does: the burn is its rate.
	st.Forecast = gpuwarden.MonthForecast(st.Spent, cfg.HourlyRate, now)
	if cfg.Limit <= 0 {
		return st
	}
	cur := cfg.Currency.Format
	for _, pct := range cfg.AlertsPercent {
		threshold := cfg.Limit * gpuwarden.Cents(pct) / 100
		sev := gpuwarden.SeverityWarning
		if pct >= 100 {
			sev = gpuwarden.SeverityCritical
		}
		if st.Spent >= threshold {
			a.alert(ctx, gpuwarden.Event{Kind: "budget-actual", Severity: sev, Key: fmt.Sprintf("budget-actual-%d-%s", pct, m.month),
				Message: fmt.Sprintf("%s has spent %s this month, %d%% of the %s budget", a.cfg.Node, cur(st.Spent), pct, cur(cfg.Limit)),
				Data:    map[string]string{"percent": strconv.Itoa(pct), "month": m.month}})
		}
		if st.Forecast >= threshold {
			a.alert(ctx, gpuwarden.Event{Kind: "budget-forecast", Severity: sev, Key: fmt.Sprintf("budget-forecast-%d-%s", pct, m.month),
				Message: fmt.Sprintf("%s is on course to spend %s this month, past %d%% of the %s budget", a.cfg.Node, cur(st.Forecast), pct, cur(cfg.Limit)),
				Data:    map[string]string{"percent": strconv.Itoa(pct), "month": m.month}})
		}
	}
	if cfg.StopAtLimit && st.Spent >= cfg.Limit {
		if a.telemetryLost() {
			// A stop acts on a box the agent cannot see; it waits, and the
			// alert (which is what runs the stop, once) comes after.
			a.log.Warn("budget reached, stop suspended while telemetry is lost")
			return st
		}
		if a.alert(ctx, gpuwarden.Event{Kind: "budget-stop", Severity: gpuwarden.SeverityCritical, Key: "budget-stop-" + m.month,
			Message: fmt.Sprintf("%s reached the %s budget: stopping the box", a.cfg.Node, cur(cfg.Limit))}) {
			a.stop(ctx, "budget")
		}
	}
	return st
}
