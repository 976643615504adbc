package plan

import (
	"encoding/json"
	"fmt"
	"iter"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/parallel"
)

// Candidate is one offer under one billing mode, priced for the whole month
// in the plan's currency. Total is always the sum of Lines().
type Candidate struct {
	Offer   *gpuwarden.Offer `json:"offer"`
	Billing Billing          `json:"billing"`
	// Rate is per hour, or per month for monthly billing, in the plan's currency.
	Rate gpuwarden.Micros `json:"rate"`
	// Hours points at the box's hours for this billing mode, shared by
	// every offer of the same GPU model and count; Hours.Work is the box
	// hours to finish the work.
	Hours *Hours `json:"hours"`
	// TimeToFinish is the wall-clock hours to finish: the work and, on
	// spot, the rework.
	TimeToFinish float64 `json:"time_to_finish_h"`
	// Speed is how the box's hours were worked out.
	Speed *Speed `json:"speed"`
	// shared are the provider's egress and storage lines, the same for
	// every candidate of that provider; see Lines.
	shared []Line
	Total  gpuwarden.Cents `json:"total"`
	// PerResult is the total over the results: of the whole work when the
	// plan states an amount, else of the month when a throughput is known.
	PerResult *PerResult `json:"per_result,omitempty"`
	// BreakEvenHours, on a monthly row, is the billed hours above which the
	// monthly price beats the same offer's hourly rate.
	BreakEvenHours float64 `json:"break_even_hours,omitempty"`
	// SpotSavings, on a spot row, is the same offer's on-demand total minus
	// this total: negative when on-demand is cheaper after rework.
	SpotSavings *gpuwarden.Cents `json:"spot_savings,omitempty"`
	Preferred   bool             `json:"preferred,omitempty"`
	Rank        int32            `json:"rank,omitempty"`
	row         int32            // index in Report.rows
	Role        Role             `json:"role,omitempty"`
	months      float64          // monthly prices the work pays
	// hoursPerMonth is the plan's month, for the storage of further months.
	hoursPerMonth float64
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
	// ReasonNoSpeed: the plan states an amount of work and nothing says how
	// fast this card does it (no datasheet, no throughput figure).
	ReasonNoSpeed Reason = "no-speed-figure"
	// ReasonDeadline: the box cannot finish the work by the deadline.
	ReasonDeadline Reason = "too-slow"
)

// Exclusion is an offer (or one billing mode of it) left out, and why.
// A budget over 1,000,000 offers excludes about 1.5 million billing modes,
// so the report does not keep them: Report.Exclusions makes each as it is
// walked, and Why writes its words from the report when asked.
type Exclusion struct {
	Offer gpuwarden.Offer
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
		sp := r.speedOf(&e.Offer)
		if months := monthsSpanned(sp, r.HoursPerMonth); months > 1 {
			return fmt.Sprintf("%s over %.2g months is over the %s monthly budget", r.Currency.Format(e.Total), months, r.Currency.Format(r.BudgetLimit))
		}
		return fmt.Sprintf("%s a month is over the %s budget", r.Currency.Format(e.Total), r.Currency.Format(r.BudgetLimit))
	case ReasonSpot:
		return "interruptions.tolerance is none: a reclaim would lose the work"
	case ReasonCurrency:
		o := &e.Offer
		return fmt.Sprintf("no exchange rate from %s to %s: add currency_rates: {%s: …} to the plan", o.Currency, r.Currency, o.Currency)
	}
	_, msg := r.rules.static(&e.Offer, r.Sizing, r.speedOf(&e.Offer))
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
	}{Offer: &e.Offer, Billing: e.Billing, Reason: e.Reason, Message: e.Why()}
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
	// WorkHours is the plan's work_hours; with an amount of work each box
	// has its own (Candidate.Hours.Work).
	WorkHours float64 `json:"work_hours"`
	// Amount is the work in words when the plan states one, and ResultUnit
	// the result its cost per result counts.
	Amount     string `json:"amount,omitempty"`
	ResultUnit string `json:"result_unit,omitempty"`
	// DeadlineHours rules out boxes that need longer; 0 is none.
	DeadlineHours float64 `json:"deadline_h,omitempty"`
	// AutoShutdownIdleMinutes is the plan's policy; 0 means none.
	AutoShutdownIdleMinutes float64           `json:"auto_shutdown_idle_minutes"`
	BudgetLimit             gpuwarden.Cents   `json:"budget_limit"`
	Sizing                  Sizing            `json:"sizing"`
	SmallestCard            *Card             `json:"smallest_card,omitempty"`
	Findings                []Finding         `json:"findings"`
	Warnings                []string          `json:"warnings"`
	IdleSaving              *IdleSaving       `json:"idle_saving,omitempty"`
	SpotVerdict             *SpotVerdict      `json:"spot_verdict,omitempty"`
	Best                    *Candidate        `json:"-"`
	PlanB                   *Candidate        `json:"-"`
	rows                    []priced          // every priced billing mode, budget aside, in catalog order
	static                  []staticExclusion // offers the rules leave out before pricing, in catalog order
	fx                      fx                // for findings
	plan                    *gpuwarden.Plan   // for findings
	// stopEnds is gpuwarden.StopEndsBill per provider for the plan's stop.
	stopEnds  map[string]bool
	rules     rules // for the words of exclusions
	cat       *gpuwarden.Catalog
	cents     centArena // spot savings of the candidates made after the ranking
	ranked    []int32   // indices of the rows the plan ranks, cheapest first
	planB     int       // plan B's place in ranked; -1 when there is none
	shared    map[sharedKey]sharedLines
	estimates map[estimateKey]estimated
	priced    []string                   // providers with egress or storage prices
	byCountry map[string]map[string]bool // country → providers with offers there
	order     []int32                    // indices of rows, cheapest first
	speeds    speedModel
	// anySpeed is every box's speed when the plan states work_hours: the
	// same hours on any card, so no offer needs a lookup.
	anySpeed *Speed
	speedMu  sync.Mutex
	speedMap map[speedKey]*Speed
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

// Rank prices every offer for the plan's work and orders those that fit the
// workload, the residency rules, the deadline and the budget, cheapest to
// finish first.
func Rank(p *gpuwarden.Plan, cat *gpuwarden.Catalog) (*Report, error) {
	return RankWith(p, cat, Inputs{})
}

// RankWith is Rank with throughputs measured by earlier runs.
func RankWith(p *gpuwarden.Plan, cat *gpuwarden.Catalog, in Inputs) (*Report, error) {
	sz, err := Size(p.Workload)
	if err != nil {
		return nil, err
	}
	r := &Report{
		Name: p.Name, Currency: p.Budget.Currency, HoursPerMonth: p.HoursPerMonth, WorkHours: p.WorkHours,
		AutoShutdownIdleMinutes: p.OnHours.AutoShutdownIdleMinutes, BudgetLimit: gpuwarden.CentsOf(p.Budget.MonthlyLimit),
		Sizing: sz, Findings: []Finding{}, Warnings: []string{},
		fx: fx{to: p.Budget.Currency, rates: p.CurrencyRates}, plan: p, stopEnds: stopEndsByProvider(p.OnHours.Stop), cat: cat,
	}
	a, has := newAmount(p)
	r.speeds = speedModel{p: p, amount: a, has: has, measured: in.Measured}
	if has {
		r.Amount, r.ResultUnit = a.text, a.unit
	} else {
		r.anySpeed = r.speeds.speed(speedKey{})
	}
	if p.Deadline != "" {
		if r.DeadlineHours, err = gpuwarden.ParseDeadline(p.Deadline); err != nil {
			return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "%v", err)
		}
	}

	if c, ok := sz.SmallestCard(cat.GPUs); ok {
		r.SmallestCard = &c
	}
	r.rules = newRules(p, r.DeadlineHours)
	if err := r.priceAll(&cat.Offers); err != nil {
		return nil, err
	}
	r.split()
	r.findings()
	return r, nil
}

// ExcludedCount is how many offers, or billing modes of them, the plan
// leaves out.
func (r *Report) ExcludedCount() int { return len(r.static) + len(r.rows) - len(r.ranked) }

// RankedCount is how many billing modes the plan ranks.
func (r *Report) RankedCount() int { return len(r.ranked) }

// RankedAt is the candidate ranked i-th, cheapest first from 0. A budget
// over a million offers can rank half a million modes, so the report keeps
// only their rows and makes a candidate when asked; plan A and plan B are
// made once and are always the same pointers.
func (r *Report) RankedAt(i int) *Candidate {
	switch {
	case i == 0 && r.Best != nil:
		return r.Best
	case i == r.planB && r.PlanB != nil:
		return r.PlanB
	}
	c := r.candidateAt(r.ranked[i])
	c.Rank = int32(i + 1)
	switch i {
	case 0:
		c.Role = PlanA
	case r.planB:
		c.Role = PlanB
	}
	return &c
}

// Ranked walks the ranked candidates, cheapest first, made as they are
// walked (see RankedAt).
func (r *Report) Ranked() iter.Seq2[int, *Candidate] {
	return func(yield func(int, *Candidate) bool) {
		for i := range r.ranked {
			if !yield(i, r.RankedAt(i)) {
				return
			}
		}
	}
}

// Exclusions walks what the plan leaves out, in report order: the offers
// the rules leave out before pricing, in catalog order, then the billing
// modes the plan forbids (spot without tolerance, over the budget),
// cheapest first. Each is made as it is walked, so that the report holds
// 8 bytes per excluded offer, not an Exclusion per excluded mode.
func (r *Report) Exclusions() iter.Seq[Exclusion] {
	return func(yield func(Exclusion) bool) {
		for _, e := range r.static {
			if !yield(Exclusion{Offer: r.cat.Offers.At(int(e.offer)), Reason: staticReasons[e.reason], report: r}) {
				return
			}
		}
		for _, j := range r.order {
			p := r.rows[j]
			if reason := r.forbids(p); reason != "" {
				if !yield(Exclusion{Offer: r.cat.Offers.At(int(p.offer)), Billing: p.billing, Reason: reason, Total: p.total(), report: r}) {
					return
				}
			}
		}
	}
}

// ExclusionCounts counts the exclusions per reason without making them:
// summing 1.5 million exclusions one by one was a third of planning a
// million offers.
func (r *Report) ExclusionCounts() map[Reason]int {
	var static [len(staticReasons)]int
	for _, e := range r.static {
		static[e.reason]++
	}
	counts := map[Reason]int{}
	for i, n := range static {
		if n > 0 {
			counts[staticReasons[i]] = n
		}
	}
	var spot, budget int
	for _, p := range r.rows {
		switch r.forbids(p) {
		case ReasonSpot:
			spot++
		case ReasonBudget:
			budget++
		}
	}
	if spot > 0 {
		counts[ReasonSpot] = spot
	}
	if budget > 0 {
		counts[ReasonBudget] = budget
	}
	return counts
}

// FirstExclusion is the first exclusion of a reason in report order (for
// the budget, the cheapest); ok is false when there is none.
func (r *Report) FirstExclusion(reason Reason) (e Exclusion, ok bool) {
	if code := slices.Index(staticReasons[:], reason); code >= 0 {
		for _, s := range r.static {
			if int(s.reason) == code {
				return Exclusion{Offer: r.cat.Offers.At(int(s.offer)), Reason: reason, report: r}, true
			}
		}
		return Exclusion{}, false
	}
	for _, j := range r.order {
		if p := r.rows[j]; r.forbids(p) == reason {
			return Exclusion{Offer: r.cat.Offers.At(int(p.offer)), Billing: p.billing, Reason: reason, Total: p.total(), report: r}, true
		}
	}
	return Exclusion{}, false
}

// staticExclusion is an offer the rules leave out before it is priced.
type staticExclusion struct {
	offer  int32 // index in the catalog's offers
	reason uint8 // index in staticReasons
}

// staticReasons are the reasons an offer is left out before pricing.
var staticReasons = [...]Reason{ReasonProvider, ReasonResidency, ReasonTooSmall, ReasonCurrency, ReasonNoSpeed, ReasonDeadline}

func staticExcluded(offer int, reason Reason) staticExclusion {
	i := slices.Index(staticReasons[:], reason)
	if i < 0 {
		panic("plan: " + string(reason) + " is not a reason to leave an offer out before pricing")
	}
	return staticExclusion{offer: int32(offer), reason: uint8(i)}
}

// rules are the plan's filters, prepared once.
type rules struct {
	exclude, prefer map[string]bool
	countries       map[string]bool
	regions         []string
	countryText     string
	deadline        float64 // hours; 0 is none
}

func newRules(p *gpuwarden.Plan, deadline float64) rules {
	rs := rules{exclude: set(p.Providers.Exclude), prefer: set(p.Providers.Prefer), regions: p.Residency.Regions, deadline: deadline}
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

// static is the rule that leaves an offer out before pricing, and why in
// words; sp is the box's speed (nil only where no speed applies).
func (rs rules) static(o *gpuwarden.Offer, sz Sizing, sp *Speed) (Reason, string) {
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
	if sp != nil && sp.unknown != "" {
		return ReasonNoSpeed, sp.unknown
	}
	if sp != nil && rs.deadline > 0 && sp.finishHours() > rs.deadline {
		return ReasonDeadline, fmt.Sprintf("%s× %s needs %s h to finish, past the %s h deadline", trim(o.GPUCount), o.GPU,
			trim(roundHours(sp.finishHours())), trim(rs.deadline))
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

// billingModes counts the rows offers lo to hi can expand into, so the
// slice that holds them is allocated once.
func billingModes(offers *gpuwarden.Offers, lo, hi int) int {
	n := 0
	for i := lo; i < hi; i++ {
		o := offers.At(i)
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

// centArena hands out addresses for spot savings from shared chunks: one
// allocation per 4,096 spot rows instead of one each.
type centArena []gpuwarden.Cents

func (a *centArena) store(v gpuwarden.Cents) *gpuwarden.Cents {
	if len(*a) == cap(*a) {
		*a = make([]gpuwarden.Cents, 0, 4096)
	}
	*a = append(*a, v)
	return &(*a)[len(*a)-1]
}

// priced is one billing mode of an offer and its month's total: all that
// the ordering and the budget need. A million offers have 1.6 million
// modes, so a Candidate is made only when a report asks for one
// (RankedAt, candidateAt), and a row is 12 bytes, not 104: the total is
// kept in 48 bits, ±2^47 cents (1.4 trillion a month), and a total past
// that is an error (pricedTotalMax), never a number cut short.
type priced struct {
	offer     int32  // index in the catalog's offers
	totalLow  uint32 // the total's low 32 bits
	totalHigh int16  // and its high 16, with the sign
	billing   Billing
	flags     rowFlags
}

// rowFlags are a priced row's yes/no facts, in the byte a bool took.
type rowFlags uint8

const (
	flagPreferred rowFlags = 1 << iota
	// flagOverBudget: the row's average month is over the monthly budget,
	// decided where its hours are known (work can span months).
	flagOverBudget
)

func (p priced) preferred() bool  { return p.flags&flagPreferred != 0 }
func (p priced) overBudget() bool { return p.flags&flagOverBudget != 0 }

// pricedTotalMax is the largest month's total a priced row holds.
const pricedTotalMax = 1<<47 - 1

func newPriced(offer int32, total gpuwarden.Cents, b Billing, flags rowFlags) priced {
	return priced{offer: offer, totalLow: uint32(total), totalHigh: int16(int64(total) >> 32), billing: b, flags: flags}
}

func (p priced) total() gpuwarden.Cents {
	return gpuwarden.Cents(int64(p.totalHigh)<<32 | int64(p.totalLow))
}

var billingModesInOrder = [...]Billing{OnDemand, Spot, Monthly}

// parallelMin is the number of offers (or sort keys) from which the work
// is split over every core; below it the goroutines cost about what they
// save.
const parallelMin = 20_000

// partsFor is how many parts n items are split into: one per core from
// parallelMin on, else one.
func partsFor(n int) int {
	if n < parallelMin {
		return 1
	}
	return runtime.GOMAXPROCS(0)
}

// span is the half-open range of part i of n items cut into parts.
func span(n, parts, i int) (lo, hi int) {
	size := (n + parts - 1) / parts
	lo = min(i*size, n)
	return lo, min(lo+size, n)
}

// chunk is one run of the catalog's offers, priced by one goroutine into
// its own window of the report's rows and its own exclusions:
// concatenated in chunk order, they are in catalog order.
type chunk struct {
	first, end int32    // the catalog's offers first to end (not included)
	rows       []priced // a window of Report.rows with room for every billing mode
	excluded   []staticExclusion
	offer      gpuwarden.Offer           // the offer being priced
	shared     map[sharedKey]sharedLines // this chunk's copy of Report.shared
	speeds     map[speedKey]*Speed       // this chunk's copy of Report.speedMap
	err        error                     // the first total too large to keep
}

// priceAll prices every offer's billing modes into r.rows and the static
// exclusions into r.static, on every core; the error is the first total,
// in catalog order, too large to keep.
func (r *Report) priceAll(offers *gpuwarden.Offers) error {
	chunks := make([]chunk, partsFor(offers.Len()))
	modes := make([]int, len(chunks))
	parallel.Do(len(chunks), func(i int) {
		lo, hi := span(offers.Len(), len(chunks), i)
		chunks[i].first, chunks[i].end = int32(lo), int32(hi)
		modes[i] = billingModes(offers, lo, hi)
	})
	// One allocation for all rows: each chunk's window has room for all its
	// billing modes, and what the static rules and missing exchange rates
	// leave empty is closed up below.
	var total int
	for _, n := range modes {
		total += n
	}
	r.rows = make([]priced, total)
	at := 0
	for i := range chunks {
		chunks[i].rows = r.rows[at:at:(at + modes[i])]
		at += modes[i]
	}
	var sharedMu sync.Mutex
	parallel.Do(len(chunks), func(i int) { chunks[i].price(r, &sharedMu) })
	var rows, excluded int
	for i := range chunks {
		if chunks[i].err != nil {
			return chunks[i].err
		}
		excluded += len(chunks[i].excluded)
	}
	r.static = make([]staticExclusion, 0, excluded)
	for i := range chunks {
		rows += copy(r.rows[rows:], chunks[i].rows)
		r.static = append(r.static, chunks[i].excluded...)
	}
	r.rows = r.rows[:rows]
	return nil
}

// price prices the chunk's offers: the rules first, then each billing mode
// into a row with its month's total.
func (c *chunk) price(r *Report, sharedMu *sync.Mutex) {
	// The offer being priced is made in the chunk, not on the heap per
	// offer.
	o := &c.offer
	for i := c.first; i < c.end; i++ {
		*o = r.cat.Offers.At(int(i))
		sp := c.speedFor(r, o)
		if reason, _ := r.rules.static(o, r.Sizing, sp); reason != "" {
			c.excluded = append(c.excluded, staticExcluded(int(i), reason))
			continue
		}
		shared := c.sharedFor(r, sharedMu, o)
		if !shared.ok {
			c.excluded = append(c.excluded, staticExcluded(int(i), ReasonCurrency))
			continue
		}
		var flags rowFlags
		if r.plan != nil && slices.Contains(r.plan.Providers.Prefer, o.Provider) {
			flags |= flagPreferred
		}
		for _, b := range billingModesInOrder {
			if listPrice(o, b) > 0 {
				cand := r.candidate(o, b, shared, sp)
				if cand.Total > pricedTotalMax || cand.Total < -pricedTotalMax {
					if c.err == nil {
						c.err = gpuwarden.Errorf(gpuwarden.EInvalid, "%s: %s %s %s (%s) costs %s a month, more than a plan can add up",
							o.Origin, o.Provider, o.Region, o.Instance, b, r.Currency.Format(cand.Total)).
							WithHint("check the prices of that row: they are per hour, or per month for monthly")
					}
					continue
				}
				f := flags
				if r.overBudget(cand.Total, cand.Hours, sp) {
					f |= flagOverBudget
				}
				c.rows = append(c.rows, newPriced(i, cand.Total, b, f))
			}
		}
	}
}

// sharedFor is Report.sharedFor for one goroutine: the report's maps are
// filled under the lock, once per provider, and read from the chunk's copy.
func (c *chunk) sharedFor(r *Report, mu *sync.Mutex, o *gpuwarden.Offer) sharedLines {
	k := sharedKey{o.Provider, o.Currency, o.Country}
	if s, ok := c.shared[k]; ok {
		return s
	}
	mu.Lock()
	s := r.sharedFor(o)
	mu.Unlock()
	if c.shared == nil {
		c.shared = map[sharedKey]sharedLines{}
	}
	c.shared[k] = s
	return s
}

// speedFor is Report.speedOf for one goroutine, read from the chunk's copy.
func (c *chunk) speedFor(r *Report, o *gpuwarden.Offer) *Speed {
	if r.anySpeed != nil {
		return r.anySpeed
	}
	k := speedKey{o.GPU, o.GPUCount, o.VRAMGBPerGPU}
	if s, ok := c.speeds[k]; ok {
		return s
	}
	s := r.speedOf(o)
	if c.speeds == nil {
		c.speeds = map[speedKey]*Speed{}
	}
	c.speeds[k] = s
	return s
}

// speedOf is the box's speed, worked out once per GPU model, count and
// memory for the whole report.
func (r *Report) speedOf(o *gpuwarden.Offer) *Speed {
	if r.anySpeed != nil {
		return r.anySpeed
	}
	k := speedKey{o.GPU, o.GPUCount, o.VRAMGBPerGPU}
	r.speedMu.Lock()
	defer r.speedMu.Unlock()
	if s, ok := r.speedMap[k]; ok {
		return s
	}
	s := r.speeds.speed(k)
	if r.speedMap == nil {
		r.speedMap = map[speedKey]*Speed{}
	}
	r.speedMap[k] = s
	return s
}

// Speeds are the speeds the report worked out, one per GPU model, count
// and memory, fastest first: what --explain prints.
func (r *Report) Speeds() []*Speed {
	if r.anySpeed != nil {
		return []*Speed{r.anySpeed}
	}
	r.speedMu.Lock()
	out := make([]*Speed, 0, len(r.speedMap))
	for _, s := range r.speedMap {
		out = append(out, s)
	}
	r.speedMu.Unlock()
	slices.SortFunc(out, func(a, b *Speed) int {
		if a.unknown != b.unknown {
			return strings.Compare(a.unknown, b.unknown)
		}
		if c := cmpFloat(a.Hours, b.Hours); c != 0 {
			return c
		}
		if c := strings.Compare(a.GPU, b.GPU); c != 0 {
			return c
		}
		return cmpFloat(a.GPUs, b.GPUs)
	})
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Unknown says why the model could not time this box, "" when it could.
func (s *Speed) Unknown() string { return s.unknown }

// finishHours is the wall-clock hours to finish on demand: the work itself
// (a load is served for its hours whatever the boxes).
func (s *Speed) finishHours() float64 {
	if s.Replicas > 0 {
		return s.Hours / float64(s.Replicas)
	}
	return s.Hours
}

// monthsSpanned is how many months of hours_per_month the box's billed
// hours span, at least 1.
func monthsSpanned(sp *Speed, hoursPerMonth float64) float64 {
	if sp == nil || hoursPerMonth <= 0 {
		return 1
	}
	return math.Max(sp.hours.onDemand.Billed()/hoursPerMonth, 1)
}

// overBudget reports whether a total breaks the monthly budget: work that
// spans several months is held to the budget in each, so its total is
// compared with the budget times the months it bills.
func (r *Report) overBudget(total gpuwarden.Cents, h *Hours, sp *Speed) bool {
	if r.BudgetLimit <= 0 {
		return false
	}
	months := 1.0
	if r.HoursPerMonth > 0 {
		months = math.Max(h.Billed()/r.HoursPerMonth, 1)
	}
	if sp != nil && months < sp.hours.months && h == &sp.hours.monthly {
		months = sp.hours.months
	}
	return float64(total) > float64(r.BudgetLimit)*months
}

// listPrice is the catalog's price of a billing mode, in the offer's currency.
func listPrice(o *gpuwarden.Offer, b Billing) gpuwarden.Micros {
	switch b {
	case OnDemand:
		return o.OnDemandHourly
	case Spot:
		return o.SpotHourly
	}
	return o.Monthly
}

// hoursOf is the plan's month for a billing mode on a provider: its idle
// hours are cut by auto-shutdown only where the plan's stop ends that
// provider's bill (gpuwarden.StopEndsBill).
func (r *Report) hoursOf(b Billing, provider string, sp *Speed) *Hours {
	ends := r.stopEndsBill(provider)
	h := &sp.hours
	switch {
	case b == OnDemand && ends:
		return &h.onDemand
	case b == OnDemand:
		return &h.onDemandBilled
	case b == Spot && ends:
		return &h.spot
	case b == Spot:
		return &h.spotBilled
	}
	return &h.monthly
}

// stopEndsBill is gpuwarden.StopEndsBill for the plan's stop, worked out
// before ranking for every provider the stop table knows (the chunks read
// it at once); a provider it does not know never has its bill ended.
func (r *Report) stopEndsBill(provider string) bool { return r.stopEnds[provider] }

func stopEndsByProvider(mode string) map[string]bool {
	m := map[string]bool{}
	for _, s := range gpuwarden.StopSemanticsAll() {
		m[s.Provider], _ = gpuwarden.StopEndsBill(s.Provider, mode)
	}
	return m
}

// candidate prices one billing mode. The lines are built on the stack only
// to add them up: Lines rebuilds them when asked, so ranking 100,000 offers
// stores no lines at all.
func (r *Report) candidate(o *gpuwarden.Offer, b Billing, shared sharedLines, sp *Speed) Candidate {
	rate, _ := r.fx.convert(listPrice(o, b), o.Currency)
	c := Candidate{Offer: o, Billing: b, Rate: rate, Hours: r.hoursOf(b, o.Provider, sp), shared: shared.lines, Speed: sp}
	c.months = sp.hours.months
	if r.speeds.has {
		// Only work stated as an amount can outlast the month; a month of
		// work_hours keeps its storage for that month alone.
		c.hoursPerMonth = r.HoursPerMonth
	}
	var buf [4]Line
	c.Total = sum(c.ownLines(buf[:0])) + shared.total
	return c
}

// candidateAt makes the candidate of row j, for the findings and the box
// that look past the ranking.
func (r *Report) candidateAt(j int32) Candidate {
	p := r.rows[j]
	offer := r.cat.Offers.At(int(p.offer))
	o := &offer
	shared := r.sharedFor(o)
	sp := r.speedOf(o)
	c := r.candidate(o, p.billing, shared, sp)
	c.Preferred, c.row = p.preferred(), j
	c.TimeToFinish = roundHours(sp.finishHours() + c.Hours.Rework)
	r.finish(&c, shared, &r.cents)
	return c
}

// finish adds what only a shown candidate needs: the spot savings, the
// monthly break-even and the cost per result.
func (r *Report) finish(c *Candidate, shared sharedLines, cents *centArena) {
	o := c.Offer
	switch c.Billing {
	case Spot:
		if o.OnDemandHourly > 0 {
			c.SpotSavings = cents.store(r.candidate(o, OnDemand, shared, c.Speed).Total - c.Total)
		}
	case Monthly:
		c.BreakEvenHours = r.breakEvenHours(o)
	}
	r.perResult(c)
}

// breakEvenHours is the billed hours above which the offer's monthly price
// beats its hourly rate; 0 when it has no hourly rate.
func (r *Report) breakEvenHours(o *gpuwarden.Offer) float64 {
	if o.OnDemandHourly <= 0 {
		return 0
	}
	hourly, _ := r.fx.convert(o.OnDemandHourly, o.Currency)
	if hourly <= 0 {
		return 0
	}
	monthly, _ := r.fx.convert(o.Monthly, o.Currency)
	return roundHours(monthly.Float() / hourly.Float())
}

// Lines is the candidate's bill: its hours (or its monthly price), then the
// provider's egress and storage lines. Total is the sum of their amounts.
func (c *Candidate) Lines() []Line {
	return append(c.ownLines(make([]Line, 0, 4+len(c.shared))), c.shared...)
}

// ownLines are the lines that depend on the billing mode: the hours at the
// rate, or the monthly price.
func (c *Candidate) ownLines(dst []Line) []Line {
	if c.Billing == Monthly {
		months := max(int64(c.months), 1)
		return append(dst, Line{Item: ItemMonthly, Quantity: gpuwarden.Micros(months) * gpuwarden.MicrosPerUnit, Unit: UnitMonth, Rate: c.Rate,
			Amount: gpuwarden.CentsOf(c.Rate) * gpuwarden.Cents(months)})
	}
	dst = append(dst, hoursLine(ItemCompute, c.Hours.Work, c.Rate))
	if c.Hours.Idle > 0 {
		dst = append(dst, hoursLine(ItemIdle, c.Hours.Idle, c.Rate))
	}
	if c.Hours.Rework > 0 {
		dst = append(dst, hoursLine(ItemRework, c.Hours.Rework, c.Rate))
	}
	return c.storageMore(dst)
}

// storageMore adds the storage of the further months that work longer than
// a month keeps its data for: the shared storage line prices one month.
// The months are the box's billed hours over the month's, prorated as
// providers bill GB-months.
func (c *Candidate) storageMore(dst []Line) []Line {
	if c.hoursPerMonth <= 0 {
		return dst
	}
	extra := math.Round((c.Hours.Billed()/c.hoursPerMonth-1)*100) / 100
	if c.Billing == Monthly {
		extra = c.months - 1
	}
	if extra <= 0 {
		return dst
	}
	for _, l := range c.shared {
		if l.Item != ItemStorage || l.Unpriced {
			continue
		}
		more := Line{Item: ItemStorageMore, Unit: UnitGBMonth, Quantity: l.Quantity.Mul(gpuwarden.MicrosFromFloat(extra)),
			Estimated: l.Estimated, Basis: l.Basis, Rate: l.Rate}
		if l.Rate > 0 {
			more.Amount = gpuwarden.MulCents(l.Rate, more.Quantity)
		} else {
			more.Amount = gpuwarden.Cents(math.Round(float64(l.Amount) * extra))
		}
		dst = append(dst, more)
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
	if a := r.speeds.amount; r.speeds.has && a.results > 0 {
		c.PerResult = &PerResult{Unit: a.unit, Results: a.results,
			Amount: gpuwarden.MicrosFromFloat(c.Total.Micros().Float() / a.results)}
		return
	}
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
