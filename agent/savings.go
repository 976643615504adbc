package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/savings"
)

// SavingsConfig is what the agent prices its savings with, beside the
// budget's rate and the stop report: where the box runs, whether on spot,
// and what the same box costs on demand.
type SavingsConfig struct {
	// Node is the node's ID at the fleet server (--node-id), which may
	// differ from the agent's name for it; empty takes the agent's.
	Node     string
	Provider string
	// Rate is the box's hourly price and RateSource where it came from;
	// zero takes the budget's rate.
	Rate       gpuwarden.Micros
	RateSource string
	Currency   gpuwarden.Currency
	// Spot marks a spot box; OnDemandRate is the same box on demand
	// (label on_demand_price), OnDemandSource where that came from.
	Spot           bool
	OnDemandRate   gpuwarden.Micros
	OnDemandSource string
}

// LabelOnDemandPrice is the node label that gives a spot box's on-demand
// price, which its spot saving is measured against.
const LabelOnDemandPrice = "on_demand_price"

// SavingsFromNode reads a node's labels into a SavingsConfig; an
// on_demand_price label that is not a price is an error naming it.
func SavingsFromNode(n gpuwarden.Node) (SavingsConfig, error) {
	l := n.Labels
	c := SavingsConfig{Node: n.ID, Provider: l.Provider, Rate: l.HourlyPrice, RateSource: "box rate (price label)", Currency: l.Currency, Spot: l.Spot}
	if v, ok := l.Extra[LabelOnDemandPrice]; ok {
		m, err := gpuwarden.ParseMicros(v)
		if err != nil || m <= 0 {
			return c, gpuwarden.Errorf(gpuwarden.EInvalid, "--label %s=%s: not an hourly price such as 32.77", LabelOnDemandPrice, v)
		}
		c.OnDemandRate, c.OnDemandSource = m, "label "+LabelOnDemandPrice
	}
	return c, nil
}

// SetSavings sets how the agent prices its savings; call it before Run.
func (a *Agent) SetSavings(c SavingsConfig) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.savings = c
}

// Ledger state key of the times the agent started: each is a start of the
// box, which ends the counterfactual of the stop before it.
const savingsStartsKey = "savings.starts"

// savingsKeep is how far back the agent keeps its starts and re-prices its
// events: the month before this one is still being closed.
const savingsKeep = 62 * 24 * time.Hour

// savingsEventKinds are the ledger events savings are computed from.
var savingsEventKinds = []string{"idle-stop", "budget-stop", "box-stopped", "run-report"}

// kindReader is a ledger that reads one kind of event (sqlite.Ledger):
// cheaper than reading every alert back.
type kindReader interface {
	EventsOfKind(ctx context.Context, kind string, limit int) ([]gpuwarden.Event, error)
}

// noteStart keeps the time the agent started among the box's starts.
func (a *Agent) noteStart(ctx context.Context, now time.Time) error {
	starts, err := a.starts(ctx)
	if err != nil {
		return err
	}
	starts = append(starts, now.UTC())
	starts = slices.DeleteFunc(starts, func(t time.Time) bool { return now.Sub(t) > savingsKeep })
	b, err := json.Marshal(starts)
	if err != nil {
		return err
	}
	return a.ledger.SetState(ctx, savingsStartsKey, string(b))
}

func (a *Agent) starts(ctx context.Context) ([]time.Time, error) {
	v, ok, err := a.ledger.State(ctx, savingsStartsKey)
	if err != nil || !ok || v == "" {
		return nil, err
	}
	var starts []time.Time
	if err := json.Unmarshal([]byte(v), &starts); err != nil {
		return nil, nil // a damaged list only loses the re-pricing of old stops
	}
	return starts, nil
}

// SupervisorGone prices the savings again when a supervisor of `gpuwarden
// run` went away: the run report it wrote to the ledger before it exited
// is a spot saving, which should not wait for the box's next stop or start.
func (a *Agent) SupervisorGone(ctx context.Context) {
	a.recordSavings(ctx)
}

// recordSavings computes the box's savings from its ledger's events and
// starts (savings.FromAgent) and records those that are new or changed:
// the agent calls it when it starts (which closes the stop before), after
// each stop and when a supervisor went away (SupervisorGone). A ledger that
// keeps no savings records nothing.
func (a *Agent) recordSavings(ctx context.Context) {
	sl, ok := a.ledger.(gpuwarden.SavingsLedger)
	if !ok {
		return
	}
	// A supervisor's goodbye may come during a stop: one pricing at a time.
	a.savingsMu.Lock()
	defer a.savingsMu.Unlock()
	if err := a.computeSavings(ctx, sl); err != nil {
		a.warn(ctx, "record savings", "err", err)
	}
}

func (a *Agent) computeSavings(ctx context.Context, sl gpuwarden.SavingsLedger) error {
	now := a.Now()
	var events []gpuwarden.Event
	if kr, ok := a.ledger.(kindReader); ok {
		for _, k := range savingsEventKinds {
			evs, err := kr.EventsOfKind(ctx, k, 5000)
			if err != nil {
				return fmt.Errorf("read %s events: %w", k, err)
			}
			events = append(events, evs...)
		}
	} else {
		evs, err := a.ledger.Events(ctx, 20000)
		if err != nil {
			return fmt.Errorf("read events: %w", err)
		}
		events = evs
	}
	events = slices.DeleteFunc(events, func(e gpuwarden.Event) bool { return now.Sub(e.Time) > savingsKeep })
	starts, err := a.starts(ctx)
	if err != nil {
		return fmt.Errorf("read starts: %w", err)
	}
	a.mu.Lock()
	c := a.savings
	stop := a.stopReport
	a.mu.Unlock()
	node := c.Node
	if node == "" {
		node = a.cfg.Node
	}
	box := savings.Box{Node: node, Provider: c.Provider, Rate: c.Rate, RateSource: c.RateSource, Currency: c.Currency,
		StillBills: stop.StillBillsHourly, Why: stop.Why, Spot: c.Spot, OnDemandRate: c.OnDemandRate, OnDemandSource: c.OnDemandSource}
	if box.Rate <= 0 {
		box.Rate, box.RateSource = a.cfg.Budget.HourlyRate, "box rate (plan or --rate)"
	}
	if box.Currency == "" {
		box.Currency = a.cfg.Budget.Currency
	}
	var on savings.OnHours
	if a.cfg.OffHours != nil {
		on = a.cfg.OffHours.On
	}
	computed := savings.FromAgent(box, events, starts, on, now)
	stored, err := sl.Savings(ctx, gpuwarden.SavingsQuery{Node: node, From: now.Add(-2 * savingsKeep)})
	if err != nil {
		return fmt.Errorf("read recorded savings: %w", err)
	}
	byID := make(map[string]gpuwarden.Saving, len(stored))
	for _, s := range stored {
		byID[s.ID] = s
	}
	var changed []gpuwarden.Saving
	for _, s := range computed {
		if old, ok := byID[s.ID]; ok && sameSaving(old, s) {
			continue
		}
		changed = append(changed, s)
	}
	if len(changed) == 0 {
		return nil
	}
	if err := sl.RecordSavings(ctx, changed); err != nil {
		return err
	}
	for _, s := range changed {
		a.log.Info("saving recorded", "kind", s.Kind, "amount", s.Amount.Decimal(), "currency", s.Currency,
			"basis", s.Basis, "hours", strconv.FormatFloat(s.Hours, 'f', -1, 64), "not_saved", s.NotSaved)
	}
	return nil
}

// sameSaving reports whether an event recorded before says what a new
// computation says, at the ledger's millisecond precision: then it is
// not recorded (nor shipped) again.
func sameSaving(old, s gpuwarden.Saving) bool {
	return old.From.Equal(s.From.Truncate(time.Millisecond)) && old.To.Equal(s.To.Truncate(time.Millisecond)) &&
		gpuwarden.MicrosFromFloat(old.Hours) == gpuwarden.MicrosFromFloat(s.Hours) && old.Rate == s.Rate &&
		old.Amount == s.Amount && old.Basis == s.Basis && old.NotSaved == s.NotSaved && old.Evidence == s.Evidence &&
		old.RateSource == s.RateSource && old.Currency == s.Currency && old.Kind == s.Kind
}
