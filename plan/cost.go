package plan

import (
	"math"

	"github.com/gpuwarden/gpuwarden"
)

// Billing is how an offer is paid for; a small number, like Role, to keep
// the 100,000 candidates of a large catalog compact.
type Billing uint8

// The billing modes a catalog offer can expand into.
const (
	OnDemand Billing = iota + 1
	Spot
	Monthly
)

var billingNames = [...]string{"", "on-demand", "spot", "monthly"}

// String returns the mode's name: on-demand, spot or monthly.
func (b Billing) String() string {
	if int(b) < len(billingNames) {
		return billingNames[b]
	}
	return "unknown"
}

// MarshalText writes the mode's name into JSON.
func (b Billing) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// Role marks plan A and plan B among the ranked candidates.
type Role uint8

// The roles; most candidates have none.
const (
	NoRole Role = iota
	PlanA
	PlanB
)

var roleNames = [...]string{"", "best", "plan-b"}

// String returns "best" for plan A, "plan-b", or "".
func (r Role) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return "unknown"
}

// MarshalText writes the role's name into JSON.
func (r Role) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// LineItem names one line of a month's bill. It is a small number, like
// Unit, so that a Line holds no pointers: the lines of 100,000 offers then
// cost the garbage collector nothing to scan.
type LineItem uint8

// The line items, in the order reports print them.
const (
	ItemCompute LineItem = iota + 1
	ItemIdle
	ItemRework
	ItemMonthly
	ItemEgressNet
	ItemEgressInter
	ItemEgressIntra
	ItemStorage
	// ItemStorageMore is the storage of the months past the first that
	// work longer than a month keeps its data for.
	ItemStorageMore
)

var lineItemNames = [...]string{"", "compute", "idle", "spot rework", "monthly price",
	"egress internet", "egress inter-region", "egress intra-region", "storage", "storage, later"}

// String returns the item's name as reports print it.
func (i LineItem) String() string {
	if int(i) < len(lineItemNames) {
		return lineItemNames[i]
	}
	return "unknown"
}

// MarshalText writes the item's name into JSON.
func (i LineItem) MarshalText() ([]byte, error) { return []byte(i.String()), nil }

// Unit is what a line's quantity counts.
type Unit uint8

// The units of bill lines.
const (
	UnitHour Unit = iota + 1
	UnitMonth
	UnitGB
	UnitGiB
	UnitGBMonth
)

var unitNames = [...]string{"", "h", "month", "GB", "GiB", "GB-month"}

// String returns the unit's symbol.
func (u Unit) String() string {
	if int(u) < len(unitNames) {
		return unitNames[u]
	}
	return "unknown"
}

// MarshalText writes the unit's symbol into JSON.
func (u Unit) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

// Line is one priced line: Quantity of Unit at Rate, rounded to the cent.
// Tiered means the quantity spans several price bands and Rate is absent;
// Unpriced means the catalog has no price for it and Amount is zero.
type Line struct {
	Item     LineItem `json:"item"`
	Unit     Unit     `json:"unit"`
	Tiered   bool     `json:"tiered,omitempty"`
	Unpriced bool     `json:"unpriced,omitempty"`
	// Estimated means the provider has no price for it and Amount is the
	// median of the providers that do (docs/pricing.md); Basis says which.
	Estimated bool             `json:"estimated,omitempty"`
	Basis     string           `json:"estimate_basis,omitempty"`
	Quantity  gpuwarden.Micros `json:"quantity"`
	Rate      gpuwarden.Micros `json:"rate,omitempty"`
	Amount    gpuwarden.Cents  `json:"amount"`
}

// Hours splits the billed hours: of the month for work_hours, of the
// whole work when the plan states an amount.
type Hours struct {
	Work   float64 `json:"work"`
	Idle   float64 `json:"idle"`
	Rework float64 `json:"rework"`
	// Interruptions is the expected number of spot reclaims in the month.
	Interruptions float64 `json:"interruptions,omitempty"`
}

// Billed is every hour the meter runs.
func (h Hours) Billed() float64 { return h.Work + h.Idle + h.Rework }

// hoursModel derives a box's hours once per GPU model and count (they
// follow from the box's work hours); only spot and the stop differ.
type hoursModel struct {
	onDemand Hours
	spot     Hours
	// onDemandBilled and spotBilled are the months where the plan's stop
	// does not end the provider's bill (an OS shutdown on Azure, Hetzner):
	// auto-shutdown saves nothing there, every hour not worked bills.
	onDemandBilled Hours
	spotBilled     Hours
	// monthly is every month the work spans, on all the time.
	monthly Hours
	// months is how many monthly prices the work pays: whole months.
	months float64
	// lostPerInterruption is the work redone plus the restart, in hours.
	lostPerInterruption float64
}

// newHoursModel splits the billed hours of w hours of work. Work longer
// than a month runs on without a break into the next one, so the box idles
// only in the gaps a month of work leaves (docs/sizing.md, "Work longer
// than a month").
//
// Work stated as an amount (released) runs from start to finish and the box
// is given back when it is done, which ends every provider's bill: it bills
// no rest of the month, and idles only in the auto-shutdown windows of its
// sessions — none when the agent stops the box as the job ends
// (on_hours.stop_when_jobs_end).
func newHoursModel(p *gpuwarden.Plan, w float64, released bool) hoursModel {
	on := p.OnHours
	if released && on.SessionsPerMonth == 0 {
		// One run from start to finish: one idle window, at its end.
		on.SessionsPerMonth = math.Min(p.HoursPerMonth/math.Max(w, 1), 1)
	}
	idle := idleHours(p, on, w)
	rest := roundHours(math.Max(p.HoursPerMonth-w, 0))
	if released {
		if p.OnHours.AutoShutdownIdleMinutes <= 0 || p.OnHours.StopWhenJobsEnd {
			// Given back by hand, or stopped by the agent the moment
			// `gpuwarden run`'s job ends: no idle window at the end.
			idle = 0
		}
		rest = idle
	}
	months := math.Max(math.Ceil(w/p.HoursPerMonth-1e-9), 1)
	m := hoursModel{onDemand: Hours{Work: w, Idle: idle}, months: months,
		monthly: Hours{Work: w, Idle: roundHours(math.Max(months*p.HoursPerMonth-w, 0))}}
	lost := p.Interruptions.RestartMinutes / 60
	switch p.Interruptions.Tolerance {
	case gpuwarden.TolerateCheckpointed:
		if iv := p.Data.CheckpointIntervalMinutes; iv > 0 {
			lost += iv / 2 / 60
		} else {
			lost += w / sessions(p, on, w) / 2
		}
	case gpuwarden.TolerateNone:
		// An interruption loses the session's work so far: half a session.
		lost += w / sessions(p, on, w) / 2
	}
	n := p.Interruptions.SpotInterruptionsPerDay * (w + idle) / 24
	m.lostPerInterruption = lost
	m.spot = Hours{Work: w, Idle: idle, Rework: roundHours(n * lost), Interruptions: math.Round(n*100) / 100}
	m.onDemandBilled = Hours{Work: w, Idle: rest}
	nb := p.Interruptions.SpotInterruptionsPerDay * (w + rest) / 24
	m.spotBilled = Hours{Work: w, Idle: rest, Rework: roundHours(nb * lost), Interruptions: math.Round(nb*100) / 100}
	return m
}

// idleHours is the time the box bills without working under an on-hours
// policy, for w hours of work on one box: with auto-shutdown, one idle
// window per session; without it, every hour of the month that is not work
// ("nobody turns it off").
func idleHours(p *gpuwarden.Plan, on gpuwarden.OnHours, w float64) float64 {
	rest := math.Max(p.HoursPerMonth-w, 0)
	if on.AutoShutdownIdleMinutes <= 0 {
		return roundHours(rest)
	}
	windows := sessions(p, on, w) * on.AutoShutdownIdleMinutes / 60
	if w >= p.HoursPerMonth {
		// No month has hours left over, but every stop still leaves its window.
		return roundHours(windows)
	}
	return roundHours(math.Min(windows, rest))
}

// sessions is how many times work stops: sessions_per_month for each month
// the work spans, or one per 8 h working day.
func sessions(p *gpuwarden.Plan, on gpuwarden.OnHours, w float64) float64 {
	if on.SessionsPerMonth > 0 {
		return on.SessionsPerMonth * math.Max(w/p.HoursPerMonth, 1)
	}
	return math.Max(math.Ceil(w/8), 1)
}

func roundHours(h float64) float64 { return math.Round(h*100) / 100 }

// fx converts catalog amounts into the plan's currency.
type fx struct {
	to    gpuwarden.Currency
	rates map[gpuwarden.Currency]gpuwarden.Micros
}

func (f fx) convert(m gpuwarden.Micros, from gpuwarden.Currency) (gpuwarden.Micros, bool) {
	if from == f.to || from == "" {
		return m, true
	}
	r, ok := f.rates[from]
	if !ok {
		return 0, false
	}
	return m.Mul(r), true
}

// EgressQuote prices one volume against a provider's tiers.
type EgressQuote struct {
	Amount   gpuwarden.Micros   `json:"amount"`
	Currency gpuwarden.Currency `json:"currency"`
	Unit     string             `json:"unit"`
	Bands    []EgressBand       `json:"bands"`
}

// EgressBand is the part of the volume that falls in one tier.
type EgressBand struct {
	GB     gpuwarden.Micros `json:"gb"`
	PerGB  gpuwarden.Micros `json:"per_gb"`
	Amount gpuwarden.Micros `json:"amount"`
	Source string           `json:"source"`
}

// PriceEgress prices gb of one scope with the provider's tiers, each band of
// the volume at its own rate; ok is false when the catalog has no tier.
func PriceEgress(tiers []gpuwarden.EgressTier, provider string, scope gpuwarden.EgressScope, gb gpuwarden.Micros) (EgressQuote, bool) {
	var q EgressQuote
	found := false
	for _, t := range tiers {
		if t.Provider != provider || t.Scope != scope {
			continue
		}
		found = true
		q.Currency, q.Unit = t.Currency, t.Unit
		if gb <= t.FromGB {
			continue
		}
		top := gb
		if t.ToGB > 0 && t.ToGB < top {
			top = t.ToGB
		}
		band := EgressBand{GB: top - t.FromGB, PerGB: t.PerGB, Source: t.Source}
		band.Amount = band.GB.Mul(t.PerGB)
		q.Amount += band.Amount
		q.Bands = append(q.Bands, band)
	}
	return q, found
}

// storageRate finds the provider's price for a kind of storage; block and
// volume stand in for each other because providers name them differently.
func storageRate(rates []gpuwarden.StorageRate, provider, kind string) (gpuwarden.StorageRate, bool) {
	kinds := []string{kind}
	switch kind {
	case "block":
		kinds = append(kinds, "volume")
	case "volume":
		kinds = append(kinds, "block")
	}
	for _, k := range kinds {
		for _, r := range rates {
			if r.Provider == provider && containsWord(r.Kind, k) {
				return r, true
			}
		}
	}
	return gpuwarden.StorageRate{}, false
}

func containsWord(s, w string) bool {
	for i := 0; i+len(w) <= len(s); i++ {
		if s[i:i+len(w)] == w && (i == 0 || !isLetter(s[i-1])) && (i+len(w) == len(s) || !isLetter(s[i+len(w)])) {
			return true
		}
	}
	return false
}

func isLetter(b byte) bool { return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' }
