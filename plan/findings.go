package plan

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/parallel"
)

// split orders the priced rows, ranks those the plan does not forbid
// (spot without tolerance, over budget) and makes plan A and plan B.
func (r *Report) split() {
	r.order = sortOrder(r.rows)
	// The order is walked in parts on every core. Counting the ranked rows
	// in each part first gives each its own run of the ranking.
	parts := partsFor(len(r.order))
	rankedBefore := make([]int, parts+1)
	parallel.Do(parts, func(part int) {
		lo, hi := span(len(r.order), parts, part)
		ranked := 0 // counted here, not in rankedBefore, which the parts share a cache line of
		for _, j := range r.order[lo:hi] {
			if r.forbids(r.rows[j]) == "" {
				ranked++
			}
		}
		rankedBefore[part+1] = ranked
	})
	for part := range parts {
		rankedBefore[part+1] += rankedBefore[part]
	}
	r.ranked = make([]int32, rankedBefore[parts])
	parallel.Do(parts, func(part int) {
		lo, hi := span(len(r.order), parts, part)
		ranked := rankedBefore[part]
		for _, j := range r.order[lo:hi] {
			if r.forbids(r.rows[j]) == "" {
				r.ranked[ranked] = j
				ranked++
			}
		}
	})
	r.planB = -1
	if len(r.ranked) == 0 {
		return
	}
	r.planB = r.planBIndex()
	best := r.RankedAt(0)
	r.Best = best
	if r.planB > 0 {
		r.PlanB = r.RankedAt(r.planB)
	}
}

// forbids is the rule that excludes a priced row: spot without tolerance,
// or over the budget; "" when it is ranked.
func (r *Report) forbids(p priced) Reason {
	switch {
	case p.billing == Spot && r.plan.Interruptions.Tolerance == gpuwarden.TolerateNone:
		return ReasonSpot
	case p.overBudget():
		return ReasonBudget
	}
	return ""
}

// Packed sort keys: total cents in the top bits, then "not preferred", then
// the row's index, so equal totals keep the catalog's order. Sorting
// plain uint64s needs no comparison callback, which was most of the time on
// 100,000 offers.
const (
	keyIndexBits = 24
	keyTotalMax  = 1<<39 - 1
)

// sortOrder returns the rows' indices, cheapest first.
func sortOrder(rows []priced) []int32 {
	if len(rows) >= 1<<keyIndexBits {
		order := make([]int32, len(rows))
		for i := range order {
			order[i] = int32(i)
		}
		slices.SortFunc(order, func(a, b int32) int { return compareRows(rows, a, b) })
		return order
	}
	keys := make([]uint64, len(rows))
	for i, p := range rows {
		total := uint64(max(min(int64(p.total()), keyTotalMax), 0))
		notPreferred := uint64(1)
		if p.preferred() {
			notPreferred = 0
		}
		keys[i] = total<<(keyIndexBits+1) | notPreferred<<keyIndexBits | uint64(i)
	}
	keys = radixSort(keys, make([]uint64, len(keys)))
	// The order is written over the sorted keys, in their first half: a
	// separate slice was 6.4 MB more at the peak of planning 1,000,000
	// offers. Entry i takes bytes 4i to 4i+4, which held key i/2, read
	// already, so no key is overwritten before it is read.
	order := unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(keys))), len(keys))
	for i, k := range keys {
		order[i] = int32(k & (1<<keyIndexBits - 1))
	}
	return order
}

// radixSort sorts keys with eight passes of one byte each, skipping a pass
// when every key has the same byte there; it returns the sorted slice, which
// is keys or buf. On 160,000 keys it takes a third of the time of a
// comparison sort. From parallelMin keys each pass is shared by every core:
// each counts and then places its own part, after the parts before it, so
// the sort stays stable.
func radixSort(keys, buf []uint64) []uint64 {
	if len(keys) == 0 {
		return keys // nothing fits the plan
	}
	parts := partsFor(len(keys))
	counts := make([][256]int, parts)
	for shift := uint(0); shift < 64; shift += 8 {
		parallel.Do(parts, func(part int) {
			lo, hi := span(len(keys), parts, part)
			count := &counts[part]
			*count = [256]int{}
			for _, k := range keys[lo:hi] {
				count[byte(k>>shift)]++
			}
		})
		first := byte(keys[0] >> shift)
		same := 0
		for part := range counts {
			same += counts[part][first]
		}
		if same == len(keys) {
			continue
		}
		pos := 0
		for d := range 256 {
			for part := range counts {
				n := counts[part][d]
				counts[part][d] = pos
				pos += n
			}
		}
		parallel.Do(parts, func(part int) {
			lo, hi := span(len(keys), parts, part)
			next := &counts[part]
			for _, k := range keys[lo:hi] {
				d := byte(k >> shift)
				buf[next[d]] = k
				next[d]++
			}
		})
		keys, buf = buf, keys
	}
	return keys
}

// compareRows orders rows a and b by total, then preferred providers, then
// the catalog's order: the same order as the packed keys, for catalogs too
// large to pack.
func compareRows(rows []priced, a, b int32) int {
	if c := cmp.Compare(rows[a].total(), rows[b].total()); c != 0 {
		return c
	}
	if rows[a].preferred() != rows[b].preferred() {
		if rows[a].preferred() {
			return -1
		}
		return 1
	}
	return cmp.Compare(a, b)
}

// planBIndex is the place of the cheapest ranked row that survives the
// best one's failure: another provider first (quota and outages are per
// provider), else another region; -1 when none does.
func (r *Report) planBIndex() int {
	offer := func(i int) gpuwarden.Offer { return r.cat.Offers.At(int(r.rows[r.ranked[i]].offer)) }
	best := offer(0)
	for i := 1; i < len(r.ranked); i++ {
		if offer(i).Provider != best.Provider {
			return i
		}
	}
	for i := 1; i < len(r.ranked); i++ {
		if offer(i).Region != best.Region {
			return i
		}
	}
	return -1
}

// findings turns the numbers into sentences: idle waste, spot verdict,
// monthly break-even, budget, plan B.
func (r *Report) findings() {
	add := func(kind, format string, args ...any) {
		r.Findings = append(r.Findings, Finding{Kind: kind, Message: fmt.Sprintf(format, args...)})
	}
	cur := r.Currency.Format
	if len(r.rows) == 0 {
		add("nothing-fits", "no offer in the catalog holds %s GB within the plan's rules; see the exclusions", fmtGB(r.Sizing.NeedGB))
		return
	}
	if r.Best == nil {
		cheapest := r.fit(0)
		add("over-budget", "every offer that fits is over the %s budget; the cheapest is %s (%s %s)",
			cur(r.BudgetLimit), cur(cheapest.Total), cheapest.Offer.Where(), cheapest.Offer.Instance)
	}
	if rs := r.RightSize(); rs != nil {
		add("oversized", "%s", upperFirst(rs.Message(r.Currency)))
	}
	r.finishFinding(add)
	r.idleFinding(add)
	r.spotFinding(add)
	r.monthlyFinding(add)
	if r.Best != nil {
		if r.PlanB == nil {
			add("no-plan-b", "no plan B: every offer that fits is %s %s; widen providers or regions", r.Best.Offer.Provider, r.Best.Offer.Region)
		} else {
			add("plan-b", "plan B is %s %s (%s) at %s, %s more than plan A",
				r.PlanB.Offer.Where(), r.PlanB.Offer.Instance, r.PlanB.Billing, cur(r.PlanB.Total), cur(r.PlanB.Total-r.Best.Total))
		}
		if r.BudgetLimit > 0 {
			add("budget", "plan A uses %d%% of the %s monthly budget", int64(r.Best.Total)*100/int64(r.BudgetLimit), cur(r.BudgetLimit))
		}
	}
}

// idleFinding prices the idle hours of the reference row (plan A, or the
// cheapest that fits) and what 30 minutes of auto-shutdown would leave.
func (r *Report) idleFinding(add func(string, string, ...any)) {
	ref := r.Best
	if ref == nil {
		ref = r.fit(0)
	}
	if ref.Billing == Monthly || ref.Hours.Idle <= 0 {
		return
	}
	idle := lineAmount(ref.Lines(), ItemIdle)
	cur := r.Currency.Format
	provider := ref.Offer.Provider
	if ends, why := gpuwarden.StopEndsBill(provider, r.plan.OnHours.Stop); r.plan.OnHours.AutoShutdownIdleMinutes > 0 && !ends {
		add("idle", "auto-shutdown does not end the bill on %s (%s): all %g idle h bill (%s); see `gpuwarden up --help` for what ends it",
			provider, why, ref.Hours.Idle, cur(idle))
		return
	}
	if sem, _ := gpuwarden.StopSemanticsOf(provider); sem.Method == gpuwarden.StopLambdaTerminate && r.plan.OnHours.AutoShutdownIdleMinutes > 0 {
		add("idle", "on lambda the idle stop terminates the box (it has no stop): the instance's disk goes with it, so keep checkpoints and data in a store (data.checkpoint_store)")
	}
	if r.plan.OnHours.AutoShutdownIdleMinutes > 0 {
		if r.plan.Workload.HasAmount() && !r.plan.OnHours.StopWhenJobsEnd {
			add("idle", "auto-shutdown after %g idle minutes leaves %g idle h on the bill (%s) once the work ends, at the whole box's rate; on_hours.stop_when_jobs_end: true (`gpuwarden up --stop-when-jobs-end`) stops the box as the job of `gpuwarden run` ends",
				r.plan.OnHours.AutoShutdownIdleMinutes, ref.Hours.Idle, cur(idle))
			return
		}
		add("idle", "auto-shutdown after %g idle minutes leaves %g idle h on the bill (%s)",
			r.plan.OnHours.AutoShutdownIdleMinutes, ref.Hours.Idle, cur(idle))
		return
	}
	const minutes = 30
	alt := idleHours(r.plan, gpuwarden.OnHours{AutoShutdownIdleMinutes: minutes, SessionsPerMonth: r.plan.OnHours.SessionsPerMonth}, ref.Hours.Work)
	altAmount := gpuwarden.MulCents(ref.Rate, gpuwarden.MicrosFromFloat(alt))
	r.IdleSaving = &IdleSaving{IdleHours: ref.Hours.Idle, IdleAmount: idle, WithMinutes: minutes,
		WithIdleHours: alt, WithIdleAmount: altAmount, Saves: idle - altAmount}
	add("idle", "nobody turns it off: %g of %g billed h are idle, %s of %s (%d%%); auto-shutdown after %d idle minutes would bill %g idle h (%s) and save %s a month",
		ref.Hours.Idle, ref.Hours.Billed(), cur(idle), cur(ref.Total), percent(idle, ref.Total), minutes, alt, cur(altAmount), cur(idle-altAmount))
}

// spotFinding compares spot with on-demand on the same box: the cheapest
// offer that has both prices, so the verdict is about the market, not about
// two different cards.
func (r *Report) spotFinding(add func(string, string, ...any)) {
	var sp *Candidate
	for i, j := range r.order {
		// A spot row has savings when its offer has an on-demand price.
		if p := r.rows[j]; p.billing == Spot && r.cat.Offers.At(int(p.offer)).OnDemandHourly > 0 {
			sp = r.fit(i)
			break
		}
	}
	if sp == nil {
		add("spot", "no offer that fits has both a spot and an on-demand price in the catalog")
		return
	}
	allowed := r.plan.Interruptions.Tolerance != gpuwarden.TolerateNone
	rework := lineAmount(sp.Lines(), ItemRework)
	onDemand := sp.Total + *sp.SpotSavings
	v := &SpotVerdict{Offer: sp.Offer, SpotTotal: sp.Total, OnDemandTotal: onDemand, Saves: *sp.SpotSavings, Rework: rework, Allowed: allowed}
	cur := r.Currency.Format
	what := fmt.Sprintf("spot on %s %s costs %s with %s rework (%.2g reclaims × %.2g h lost) against %s on-demand",
		sp.Offer.Where(), sp.Offer.Instance, cur(sp.Total), cur(rework), sp.Hours.Interruptions, sp.Speed.hours.lostPerInterruption, cur(onDemand))
	per := "/month"
	if r.speeds.has {
		per = " to finish"
	}
	if v.Saves > 0 {
		v.Message = fmt.Sprintf("%s: spot saves %s%s after rework", what, cur(v.Saves), per)
	} else {
		v.Message = fmt.Sprintf("%s: on-demand is cheaper by %s", what, cur(-v.Saves))
	}
	if !allowed {
		v.Message += "; spot is excluded because interruptions.tolerance is none"
	}
	r.SpotVerdict = v
	add("spot", "%s", v.Message)
}

func (r *Report) monthlyFinding(add func(string, string, ...any)) {
	for i, j := range r.order {
		p := r.rows[j]
		if p.billing != Monthly {
			continue
		}
		// A break-even at or past the month's hours is never reached: the
		// monthly price cannot beat the hourly rate, so there is nothing
		// to weigh.
		o := r.cat.Offers.At(int(p.offer))
		if be := r.breakEvenHours(&o); be == 0 || be >= r.HoursPerMonth {
			continue
		}
		c := r.fit(i)
		billed := c.Speed.hours.onDemand.Billed()
		verdict := "hourly is cheaper"
		if billed > c.BreakEvenHours {
			verdict = "monthly is cheaper"
		}
		add("monthly", "%s %s: the monthly price %s beats its hourly rate above %g billed h/month; this plan bills %g h, so %s",
			c.Offer.Where(), c.Offer.Instance, r.Currency.Format(gpuwarden.CentsOf(c.Rate)), c.BreakEvenHours, billed, verdict)
		return
	}
}

// fit makes the i-th cheapest priced candidate, budget aside; rows over the
// budget are not kept as candidates.
func (r *Report) fit(i int) *Candidate {
	c := r.candidateAt(r.order[i])
	return &c
}

func lineAmount(lines []Line, item LineItem) gpuwarden.Cents {
	for _, l := range lines {
		if l.Item == item {
			return l.Amount
		}
	}
	return 0
}

func percent(part, whole gpuwarden.Cents) int64 {
	if whole == 0 {
		return 0
	}
	return (int64(part)*100 + int64(whole)/2) / int64(whole)
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// finishScanMax bounds the ranked rows the finish finding walks to find
// the cheapest row of the fastest box: past the 20,000 cheapest, a faster
// box costs so much more that naming it helps nobody, and reading every
// row of a large catalog was a quarter of ranking it.
const finishScanMax = 20_000

// finishFinding says in words what plan A's time costs against the fastest
// box that finishes: "8× A100 finishes in 81 h for $2,050; 1× H200 needs
// 600 h for $1,713: the H200 is cheaper by $337 but 7.4× slower".
func (r *Report) finishFinding(add func(string, string, ...any)) {
	if !r.speeds.has || r.Best == nil || r.speeds.amount.serving > 0 {
		// A load is served for its hours on any box: no box finishes sooner.
		return
	}
	best := r.Best
	fastest := -1
	fastestHours := best.Speed.finishHours()
	// Every ranked row's speed was worked out while pricing: a copy of the
	// table, read without the lock, times the walk.
	r.speedMu.Lock()
	hours := make(map[speedKey]float64, len(r.speedMap))
	for k, s := range r.speedMap {
		hours[k] = s.finishHours()
	}
	r.speedMu.Unlock()
	for i, j := range r.ranked {
		if i == finishScanMax {
			break
		}
		o := r.cat.Offers.At(int(r.rows[j].offer))
		if h := hours[speedKey{o.GPU, o.GPUCount, o.VRAMGBPerGPU}]; h > 0 && h < fastestHours*0.999 {
			fastest, fastestHours = i, h
		}
	}
	cur := r.Currency.Format
	box := func(c *Candidate) string { return fmt.Sprintf("%s× %s", trimFloat(c.Offer.GPUCount), c.Offer.GPU) }
	if sp := best.Speed; sp.MeasuredAt != nil {
		add("measured", "plan A's %s h come from a run's measured progress, not the model: %s", trimFloat(best.Hours.Work), sp.Detail)
	}
	if fastest < 0 {
		add("finish", "plan A, %s (%s), finishes in %s h for %s: no box that fits finishes sooner",
			box(best), best.Offer.Where(), trimFloat(best.TimeToFinish), cur(best.Total))
		return
	}
	f := r.RankedAt(fastest)
	slower := best.TimeToFinish / math.Max(f.TimeToFinish, 0.01)
	times := strconv.FormatFloat(math.Round(slower*10)/10, 'f', -1, 64)
	if slower >= 10 {
		times = strconv.FormatFloat(math.Round(slower), 'f', -1, 64)
	}
	add("finish", "%s (%s) finishes in %s h for %s; plan A, %s, needs %s h for %s: plan A is cheaper by %s but %s× slower",
		box(f), f.Offer.Where(), trimFloat(f.TimeToFinish), cur(f.Total), box(best), trimFloat(best.TimeToFinish), cur(best.Total),
		cur(f.Total-best.Total), times)
}

func trimFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
