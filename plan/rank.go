package plan

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/gpuwarden/gpuwarden"
)

// Candidate is one offer under one billing mode, priced for the whole month
// in the plan's currency. Total is always the sum of Lines().
type Candidate struct {
	Offer   *gpuwarden.Offer `json:"offer"`
	Billing Billing          `json:"billing"`
	// Rate is per hour, or per month for monthly billing, in the plan's currency.
	Rate gpuwarden.Micros `json:"rate"`
	// Hours points at the plan's hours for this billing mode, shared by all.
	Hours *Hours `json:"hours"`
	// shared are the provider's egress and storage lines, the same for
	// every candidate of that provider; see Lines.
	shared []Line
	Total  gpuwarden.Cents `json:"total"`
	// PerResult is the month's total over the month's results, when a throughput is known.
	PerResult *PerResult `json:"per_result,omitempty"`
	// BreakEvenHours, on a monthly row, is the billed hours above which the
	// monthly price beats the same offer's hourly rate.
	BreakEvenHours float64 `json:"break_even_hours,omitempty"`
	// SpotSavings, on a spot row, is the same offer's on-demand total minus
	// this total: negative when on-demand is cheaper after rework.
	SpotSavings *gpuwarden.Cents `json:"spot_savings,omitempty"`
	Preferred   bool             `json:"preferred,omitempty"`
	Rank        int32            `json:"rank,omitempty"`
	seq         int32            // order of pricing, the last tie-break
	Role        Role             `json:"role,omitempty"`
}

// PerResult is the cost of one result (an epoch, 1,000 requests). Amount
// keeps six decimals: a fraction of a cent per result still matters at scale.
type PerResult struct {
	Unit    string           `json:"unit"`
	Results float64          `json:"results"`
	Amount  gpuwarden.Micros `json:"amount"`
}

// Reason says why an offer was left out of the ranking.
type Reason string

// The exclusion reasons.
const (
	ReasonProvider  Reason = "provider-excluded"
	ReasonResidency Reason = "outside-residency"
	ReasonTooSmall  Reason = "too-small"
	ReasonCurrency  Reason = "no-exchange-rate"
	ReasonSpot      Reason = "spot-not-tolerated"
	ReasonBudget    Reason = "over-budget"
)

// Exclusion is an offer (or one billing mode of it) left out, and why.
// A budget over 1,000,000 offers excludes about 1.5 million billing modes,
// so an exclusion holds no words and no pointer of its own: Why writes the
// words from the report when asked.
type Exclusion struct {
	Offer *gpuwarden.Offer
	// Total is the month's total of a priced billing mode (spot, budget);
	// it is set when Billing is.
	Total   gpuwarden.Cents
	report  *Report
	Reason  Reason
	Billing Billing
}

// Why is the exclusion in words.
func (e *Exclusion) Why() string {
	r := e.report
	switch e.Reason {
	case ReasonBudget:
		return fmt.Sprintf("%s a month is over the %s budget", r.Currency.Format(e.Total), r.Currency.Format(r.BudgetLimit))
	case ReasonSpot:
		return "interruptions.tolerance is none: a reclaim would lose the work"
	case ReasonCurrency:
		o := e.Offer
		return fmt.Sprintf("no exchange rate from %s to %s: add currency_rates: {%s: …} to the plan", o.Currency, r.Currency, o.Currency)
	}
	_, msg := r.rules.static(e.Offer, r.Sizing)
	return msg
}

// MarshalJSON writes the exclusion with its message, and its total when it
// was priced.
func (e Exclusion) MarshalJSON() ([]byte, error) {
	f := struct {
		Offer   *gpuwarden.Offer `json:"offer"`
		Billing Billing          `json:"billing,omitempty"`
		Reason  Reason           `json:"reason"`
		Message string           `json:"message"`
		Total   *gpuwarden.Cents `json:"total,omitempty"`
	}{Offer: e.Offer, Billing: e.Billing, Reason: e.Reason, Message: e.Why()}
	if e.Billing != 0 {
		f.Total = &e.Total
	}
	return json.Marshal(f)
}

// Report is the outcome of planning: sizing, the ranked offers with their
// bills, the exclusions, and findings in words.
type Report struct {
	Name          string             `json:"name,omitempty"`
	Currency      gpuwarden.Currency `json:"currency"`
	HoursPerMonth float64            `json:"hours_per_month"`
	WorkHours     float64            `json:"work_hours"`
	// AutoShutdownIdleMinutes is the plan's policy; 0 means none.
	AutoShutdownIdleMinutes float64         `json:"auto_shutdown_idle_minutes"`
	BudgetLimit             gpuwarden.Cents `json:"budget_limit"`
	Sizing                  Sizing          `json:"sizing"`
	SmallestCard            *Card           `json:"smallest_card,omitempty"`
	Ranked                  []*Candidate    `json:"ranked"`
	Excluded                []Exclusion     `json:"excluded"`
	Findings                []Finding       `json:"findings"`
	Warnings                []string        `json:"warnings"`
	IdleSaving              *IdleSaving     `json:"idle_saving,omitempty"`
	SpotVerdict             *SpotVerdict    `json:"spot_verdict,omitempty"`
	Best                    *Candidate      `json:"-"`
	PlanB                   *Candidate      `json:"-"`
	fits                    []Candidate     // every priced candidate, budget aside
	fx                      fx              // for findings
	plan                    *gpuwarden.Plan // for findings
	hours                   hoursModel      // for findings
	rules                   rules           // for the words of exclusions
	cat                     *gpuwarden.Catalog
	centArena               []gpuwarden.Cents
	shared                  map[sharedKey]sharedLines
	estimates               map[estimateKey]estimated
	priced                  []string                   // providers with egress or storage prices
	byCountry               map[string]map[string]bool // country → providers with offers there
	order                   []int32                    // indices of fits, cheapest first
}

// Finding is one conclusion for people, with a stable kind for machines.
type Finding struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// IdleSaving is what an idle policy costs and what auto-shutdown would save,
// for the best offer.
type IdleSaving struct {
	IdleHours      float64         `json:"idle_hours"`
	IdleAmount     gpuwarden.Cents `json:"idle_amount"`
	WithMinutes    float64         `json:"with_auto_shutdown_minutes"`
	WithIdleHours  float64         `json:"with_idle_hours"`
	WithIdleAmount gpuwarden.Cents `json:"with_idle_amount"`
	Saves          gpuwarden.Cents `json:"saves"`
}

// SpotVerdict compares spot with on-demand on the cheapest offer that has both.
type SpotVerdict struct {
	Offer         *gpuwarden.Offer `json:"offer"`
	SpotTotal     gpuwarden.Cents  `json:"spot_total"`
	OnDemandTotal gpuwarden.Cents  `json:"on_demand_total"`
	Saves         gpuwarden.Cents  `json:"saves"`
	Rework        gpuwarden.Cents  `json:"rework"`
	Allowed       bool             `json:"allowed"`
	Message       string           `json:"message"`
}

// Rank prices every offer for the plan's month and orders those that fit the
// workload, the residency rules and the budget, cheapest first.
func Rank(p *gpuwarden.Plan, cat *gpuwarden.Catalog) (*Report, error) {
	sz, err := Size(p.Workload)
	if err != nil {
		return nil, err
	}
	r := &Report{
		Name: p.Name, Currency: p.Budget.Currency, HoursPerMonth: p.HoursPerMonth, WorkHours: p.WorkHours,
		AutoShutdownIdleMinutes: p.OnHours.AutoShutdownIdleMinutes, BudgetLimit: gpuwarden.CentsOf(p.Budget.MonthlyLimit),
		Sizing: sz, Ranked: []*Candidate{}, Excluded: []Exclusion{}, Findings: []Finding{}, Warnings: []string{},
		fx: fx{to: p.Budget.Currency, rates: p.CurrencyRates}, plan: p, hours: newHoursModel(p), cat: cat,
	}
	if c, ok := sz.SmallestCard(cat.GPUs); ok {
		r.SmallestCard = &c
	}
	r.rules = newRules(p)
	r.fits = make([]Candidate, 0, billingModes(cat.Offers))
	for i := range cat.Offers {
		o := &cat.Offers[i]
		if reason, _ := r.rules.static(o, sz); reason != "" {
			r.Excluded = append(r.Excluded, Exclusion{Offer: o, Reason: reason, report: r})
			continue
		}
		r.price(o)
	}
	r.split()
	r.findings()
	return r, nil
}

// rules are the plan's filters, prepared once.
type rules struct {
	exclude, prefer map[string]bool
	countries       map[string]bool
	regions         []string
	countryText     string
}

func newRules(p *gpuwarden.Plan) rules {
	rs := rules{exclude: set(p.Providers.Exclude), prefer: set(p.Providers.Prefer), regions: p.Residency.Regions}
	if len(p.Residency.Countries) > 0 {
		rs.countries = set(p.Residency.Countries)
		rs.countryText = strings.Join(p.Residency.Countries, ", ")
	}
	return rs
}

func set(xs []string) map[string]bool {
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}

func (rs rules) static(o *gpuwarden.Offer, sz Sizing) (Reason, string) {
	if rs.exclude[o.Provider] {
		return ReasonProvider, "provider " + o.Provider + " is excluded by the plan"
	}
	if rs.countries != nil && !rs.countries[o.Country] {
		if o.Country == "" {
			return ReasonResidency, "country of " + o.Provider + " " + o.Region + " is unknown; residency allows " + rs.countryText
		}
		return ReasonResidency, o.Country + " is outside the allowed countries (" + rs.countryText + ")"
	}
	if len(rs.regions) > 0 && !rs.regionAllowed(o) {
		return ReasonResidency, o.Provider + ":" + o.Region + " is not in residency.regions"
	}
	if f := sz.FitsOffer(*o); !f.OK {
		return ReasonTooSmall, f.Reason
	}
	return "", ""
}

func (rs rules) regionAllowed(o *gpuwarden.Offer) bool {
	for _, reg := range rs.regions {
		prov, name, ok := strings.Cut(reg, ":")
		if !ok {
			name, prov = reg, o.Provider
		}
		if strings.EqualFold(prov, o.Provider) && strings.EqualFold(name, o.Region) {
			return true
		}
	}
	return false
}

// billingModes counts the candidates the offers can expand into, so the
// slice that holds them is allocated once.
func billingModes(offers []gpuwarden.Offer) int {
	n := 0
	for i := range offers {
		o := &offers[i]
		if o.OnDemandHourly > 0 {
			n++
		}
		if o.SpotHourly > 0 {
			n++
		}
		if o.Monthly > 0 {
			n++
		}
	}
	return n
}

func (r *Report) add(c Candidate) {
	c.seq = int32(len(r.fits))
	r.fits = append(r.fits, c)
}

// cents stores v in a shared chunk and returns its address: one allocation
// per 4,096 spot rows instead of one each.
func (r *Report) cents(v gpuwarden.Cents) *gpuwarden.Cents {
	if len(r.centArena) == cap(r.centArena) {
		r.centArena = make([]gpuwarden.Cents, 0, 4096)
	}
	r.centArena = append(r.centArena, v)
	return &r.centArena[len(r.centArena)-1]
}

// price expands an offer into its billing modes and prices each one.
func (r *Report) price(o *gpuwarden.Offer) {
	shared := r.sharedFor(o)
	if !shared.ok {
		r.Excluded = append(r.Excluded, Exclusion{Offer: o, Reason: ReasonCurrency, report: r})
		return
	}
	preferred := r.plan != nil && slices.Contains(r.plan.Providers.Prefer, o.Provider)
	var onDemandTotal gpuwarden.Cents
	var hourly gpuwarden.Micros
	if o.OnDemandHourly > 0 {
		rate, _ := r.fx.convert(o.OnDemandHourly, o.Currency)
		c := r.candidate(o, OnDemand, rate, &r.hours.onDemand, shared)
		c.Preferred = preferred
		onDemandTotal, hourly = c.Total, rate
		r.add(c)
	}
	if o.SpotHourly > 0 {
		rate, _ := r.fx.convert(o.SpotHourly, o.Currency)
		c := r.candidate(o, Spot, rate, &r.hours.spot, shared)
		c.Preferred = preferred
		if o.OnDemandHourly > 0 {
			c.SpotSavings = r.cents(onDemandTotal - c.Total)
		}
		r.add(c)
	}
	if o.Monthly > 0 {
		rate, _ := r.fx.convert(o.Monthly, o.Currency)
		c := r.candidate(o, Monthly, rate, &r.hours.monthly, shared)
		c.Preferred = preferred
		if hourly > 0 {
			c.BreakEvenHours = roundHours(rate.Float() / hourly.Float())
		}
		r.add(c)
	}
}

// candidate prices one billing mode. The lines are built on the stack only
// to add them up: Lines rebuilds them when asked, so ranking 100,000 offers
// stores no lines at all.
func (r *Report) candidate(o *gpuwarden.Offer, b Billing, rate gpuwarden.Micros, h *Hours, shared sharedLines) Candidate {
	c := Candidate{Offer: o, Billing: b, Rate: rate, Hours: h, shared: shared.lines}
	var buf [3]Line
	c.Total = sum(c.ownLines(buf[:0])) + shared.total
	r.perResult(&c)
	return c
}

// Lines is the candidate's bill: its hours (or its monthly price), then the
// provider's egress and storage lines. Total is the sum of their amounts.
func (c *Candidate) Lines() []Line {
	return append(c.ownLines(make([]Line, 0, 3+len(c.shared))), c.shared...)
}

// ownLines are the lines that depend on the billing mode: the hours at the
// rate, or the monthly price.
func (c *Candidate) ownLines(dst []Line) []Line {
	if c.Billing == Monthly {
		return append(dst, Line{Item: ItemMonthly, Quantity: gpuwarden.MicrosPerUnit, Unit: UnitMonth, Rate: c.Rate,
			Amount: gpuwarden.CentsOf(c.Rate)})
	}
	dst = append(dst, hoursLine(ItemCompute, c.Hours.Work, c.Rate))
	if c.Hours.Idle > 0 {
		dst = append(dst, hoursLine(ItemIdle, c.Hours.Idle, c.Rate))
	}
	if c.Hours.Rework > 0 {
		dst = append(dst, hoursLine(ItemRework, c.Hours.Rework, c.Rate))
	}
	return dst
}

// MarshalJSON writes the candidate with its lines, which it does not store.
func (c *Candidate) MarshalJSON() ([]byte, error) {
	type fields Candidate
	return json.Marshal(struct {
		*fields
		Lines []Line `json:"lines"`
	}{(*fields)(c), c.Lines()})
}

func hoursLine(item LineItem, h float64, rate gpuwarden.Micros) Line {
	q := gpuwarden.MicrosFromFloat(h)
	return Line{Item: item, Quantity: q, Unit: UnitHour, Rate: rate, Amount: gpuwarden.MulCents(rate, q)}
}

// sharedKey is what the egress and storage lines depend on.
type sharedKey struct {
	provider string
	currency gpuwarden.Currency
	// country matters only to estimates, which are made from the
	// providers priced in the same country.
	country string
}

type sharedLines struct {
	lines []Line
	total gpuwarden.Cents
	ok    bool
}

// sharedFor computes the egress and storage lines once per provider and
// currency: they do not depend on the instance.
func (r *Report) sharedFor(o *gpuwarden.Offer) sharedLines {
	k := sharedKey{o.Provider, o.Currency, o.Country}
	if s, ok := r.shared[k]; ok {
		return s
	}
	lines, ok := r.sharedLines(o)
	if r.shared == nil {
		r.shared = map[sharedKey]sharedLines{}
	}
	s := sharedLines{lines: lines, total: sum(lines), ok: ok}
	r.shared[k] = s
	return s
}

// sharedLines are the egress and storage lines, the same for every billing
// mode of an offer; ok is false when a price cannot be converted.
func (r *Report) sharedLines(o *gpuwarden.Offer) ([]Line, bool) {
	if _, ok := r.fx.convert(0, o.Currency); !ok {
		return nil, false
	}
	p := r.plan
	var lines []Line
	for _, scope := range gpuwarden.EgressScopes {
		gb := p.Data.EgressGB.For(scope)
		if gb <= 0 {
			continue
		}
		l := Line{Item: egressItem(scope), Quantity: gpuwarden.MicrosFromFloat(gb), Unit: UnitGB}
		q, found := PriceEgress(r.cat.Egress, o.Provider, scope, l.Quantity)
		if !found {
			r.estimate(&l, o.Country, egressEstimateKind(scope), func(prov string) (gpuwarden.Micros, bool) {
				q, found := PriceEgress(r.cat.Egress, prov, scope, l.Quantity)
				if !found {
					return 0, false
				}
				return r.fx.convert(q.Amount, q.Currency)
			})
		} else {
			amt, ok := r.fx.convert(q.Amount, q.Currency)
			if !ok {
				return nil, false
			}
			if q.Unit == "GiB" {
				l.Unit = UnitGiB
			}
			switch len(q.Bands) {
			case 1:
				l.Rate, _ = r.fx.convert(q.Bands[0].PerGB, q.Currency)
			default:
				l.Tiered = true
			}
			l.Amount = gpuwarden.CentsOf(amt)
		}
		lines = append(lines, l)
	}
	if gb := p.Data.StorageGB; gb > 0 {
		l := Line{Item: ItemStorage, Quantity: gpuwarden.MicrosFromFloat(gb), Unit: UnitGBMonth}
		if sr, found := storageRate(r.cat.Storage, o.Provider, p.Data.StorageKind); !found {
			r.estimate(&l, o.Country, "storage "+p.Data.StorageKind, func(prov string) (gpuwarden.Micros, bool) {
				sr, found := storageRate(r.cat.Storage, prov, p.Data.StorageKind)
				if !found {
					return 0, false
				}
				rate, ok := r.fx.convert(sr.PerGBMonth, sr.Currency)
				return rate.Mul(l.Quantity), ok
			})
		} else {
			rate, ok := r.fx.convert(sr.PerGBMonth, sr.Currency)
			if !ok {
				return nil, false
			}
			l.Rate, l.Amount = rate, gpuwarden.MulCents(rate, l.Quantity)
		}
		lines = append(lines, l)
	}
	return lines, true
}

func egressItem(s gpuwarden.EgressScope) LineItem {
	switch s {
	case gpuwarden.EgressInterRegion:
		return ItemEgressInter
	case gpuwarden.EgressIntraRegion:
		return ItemEgressIntra
	}
	return ItemEgressNet
}

func sum(lines []Line) gpuwarden.Cents {
	var t gpuwarden.Cents
	for _, l := range lines {
		t += l.Amount
	}
	return t
}

func (r *Report) perResult(c *Candidate) {
	tp := r.plan.Workload.Throughput
	per := tp.For(c.Offer.GPU)
	if per <= 0 {
		return
	}
	results := per * c.Hours.Work
	c.PerResult = &PerResult{Unit: tp.Unit, Results: results,
		Amount: gpuwarden.MicrosFromFloat(c.Total.Micros().Float() / results)}
}

// Plan returns the plan the report was made for.
func (r *Report) Plan() *gpuwarden.Plan { return r.plan }
