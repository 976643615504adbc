package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/catalog"
	"github.com/gpuwarden/gpuwarden/config"
	"github.com/gpuwarden/gpuwarden/internal/textsafe"
	"github.com/gpuwarden/gpuwarden/plan"
	"github.com/spf13/cobra"
)

// planJSONSchema names the layout of `plan -o json`; it changes only with a
// new version, documented in docs/plan-json.md.
const planJSONKind = "plan/v2"

var planJSONSchema = jsonSchema(planJSONKind)

func (a *app) planCommand() *cobra.Command {
	var (
		cats          catalogFlags
		output        string
		explain       bool
		allExclusions bool
		limit         int
		deadline      string
	)
	c := &cobra.Command{
		Use:   "plan [FILE]",
		Short: "Size the card and rank offers by the cost to finish the work",
		Long: `plan reads a plan file (default gpuwarden.yaml), sizes the VRAM the workload
needs, works out how long each box takes to finish the work, prices every
catalog offer that fits — compute for those hours, idle hours the box stays
on, spot rework, egress by tier and storage — and ranks them by the cost to
finish, marking plan A and a plan B on another provider or region. Offers
left out are listed with the reason.

The work is an amount where it has one (tokens_b, epochs, frames,
requests_per_second; docs/sizing.md): a box's hours then come from the
card's datasheet and a published MFU, from the plan's throughput figures, or
from a run's measured progress on that card (gpuwarden progress --gpu, read
from --data-dir's ledger), and --explain prints each box's figure. With
work_hours alone every card gets the same hours and speed is ignored.

Every total is the sum of its printed lines, in the budget's currency.

` + exitCodes("0  ranked: plan A fits the workload, residency and budget",
			"1  nothing fits the workload, residency and budget",
			"2  bad input or usage: the plan file (an unknown provider or region in it too), a price file, a flag",
			"4  internal error"),
		Example: `  gpuwarden plan examples/notebook-a100.yaml --catalog examples/notebook-a100.csv
  gpuwarden plan gpuwarden.yaml --explain
  gpuwarden plan examples/pretrain-7b.yaml --deadline 72h
  gpuwarden plan gpuwarden.yaml --catalog aws/vms.csv -o json
  gpuwarden plan gpuwarden.yaml -o targets >> gpuwarden.yaml`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := outputFormat(output, "table", "json", "csv", "md", "targets"); err != nil {
				return err
			}
			if limit < 0 {
				return gpuwarden.Errorf(gpuwarden.EInvalid, "--limit: must be 0 (all) or more, got %d", limit)
			}
			path := "gpuwarden.yaml"
			if len(args) == 1 {
				path = args[0]
			}
			pf, err := config.LoadFile(path)
			if err != nil {
				return err
			}
			p := pf.Plan
			if deadline != "" {
				if _, err := gpuwarden.ParseDeadline(deadline); err != nil {
					return gpuwarden.Errorf(gpuwarden.EInvalid, "--deadline: %v", err)
				}
				if !p.Workload.HasAmount() {
					return gpuwarden.Errorf(gpuwarden.EInvalid, "--deadline needs the work as an amount").
						WithHint("with work_hours every box takes the same hours; state tokens_b, frames or a load in the plan (docs/sizing.md)")
				}
				p.Deadline = deadline
			}
			var in plan.Inputs
			if p.Workload.HasAmount() && cats.dataDir != nil {
				if in.Measured, err = readMeasurements(cmd.Context(), cats.dataDir()); err != nil {
					return err
				}
			}
			defer pricingGC()()
			loaded := leanLoad()
			cat, err := cats.loadWith(a.now(), planCatalogs(path, p), p.EmbeddedCatalog == nil || *p.EmbeddedCatalog)
			loaded()
			if err != nil {
				return err
			}
			// Only now are the plan's own catalogs read, with the providers
			// and regions they add.
			if err := pf.CheckNames(catalog.KnownNames(cat)); err != nil {
				return err
			}
			r, err := plan.RankWith(p, cat, in)
			if err != nil {
				return err
			}
			r.Warnings = append(r.Warnings, cat.Warnings...)
			priceAges(a.stderr, a.now(), cat, p.Residency.Countries)
			warnAll(a.stderr, r.Warnings)
			v := planView{Report: r, Schema: planJSONSchema, File: path, PriceSources: nonNilSources(cat.Sources),
				Exclusions: summariseExclusions(r)}
			if allExclusions {
				v.Excluded = slices.Collect(r.Exclusions())
			}
			switch output {
			case "json":
				err = writeJSON(a.stdout, planJSONKind, planJSON{planView: v, Ranked: v.shown(limit), RankedTotal: r.RankedCount()})
			case "csv":
				err = v.csv(a.stdout)
			case "md":
				err = v.markdown(a.stdout, limit)
			case "targets":
				if r.RankedCount() > 0 {
					err = writeTargets(a.stdout, r, path, min(limit, 3))
				}
			default:
				err = v.table(a.stdout, limit, explain)
			}
			if err != nil {
				return fmt.Errorf("write plan: %w", err)
			}
			if r.RankedCount() == 0 {
				return gpuwarden.Errorf(gpuwarden.EFinding, "nothing fits")
			}
			return nil
		},
	}
	cats.registerDownloads(c)
	c.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json, csv, md, or targets (a launch plan for the plan file)")
	c.Flags().BoolVar(&explain, "explain", false, "show the VRAM arithmetic behind the sizing and each box's time to finish")
	c.Flags().StringVar(&deadline, "deadline", "", "leave out boxes that cannot finish the work within this `DURATION` (72h, 10d, 2w); overrides deadline: in the plan")
	c.Flags().BoolVar(&allExclusions, "all-exclusions", false, "-o json: list every excluded offer, not a count per reason and a sample of 20")
	c.Flags().IntVar(&limit, "limit", 10, "ranked rows to show in table, md and json output (0 = all; plan B always shows)")
	return c
}

// planCatalogs resolves the plan's own price files against its directory.
func planCatalogs(planPath string, p *gpuwarden.Plan) []string {
	out := make([]string, 0, len(p.Catalogs))
	for _, f := range p.Catalogs {
		if !filepath.IsAbs(f) {
			f = filepath.Join(filepath.Dir(planPath), f)
		}
		out = append(out, f)
	}
	return out
}

// planView is the report as printed; JSON adds the schema and file name.
type planView struct {
	Schema string `json:"schema"`
	File   string `json:"file"`
	// PriceSources are the downloaded catalogs priced with, and their age.
	PriceSources []gpuwarden.PriceSource `json:"price_sources"`
	// Exclusions summarises Report.Exclusions: a budget over 100,000 offers
	// excludes most of them, and a full list would be tens of megabytes.
	Exclusions exclusionSummary `json:"exclusions"`
	// Excluded is the full list, only with --all-exclusions.
	Excluded []plan.Exclusion `json:"excluded,omitempty"`
	*plan.Report
}

// planJSON is what -o json writes: the view with the ranking cut to
// --limit rows (plan B kept), so that 100,000 offers make a report of a few
// hundred kilobytes, and the number of rows the full ranking has.
type planJSON struct {
	planView
	Ranked      []*plan.Candidate `json:"ranked"`
	RankedTotal int               `json:"ranked_total"`
}

// exclusionSample is how many exclusions the summary shows.
const exclusionSample = 20

// exclusionSummary counts exclusions per reason and shows a few: the first
// of each reason (the cheapest, for the budget), then more in report order.
type exclusionSummary struct {
	Total    int                 `json:"total"`
	ByReason map[plan.Reason]int `json:"by_reason"`
	Sample   []plan.Exclusion    `json:"sample"`
	// first is the first exclusion of each reason, for the table.
	first map[plan.Reason]plan.Exclusion
}

// summariseExclusions counts the report's exclusions and takes the first
// of each reason and the first few in report order, without walking them
// all.
func summariseExclusions(r *plan.Report) exclusionSummary {
	s := exclusionSummary{Total: r.ExcludedCount(), ByReason: r.ExclusionCounts(), Sample: []plan.Exclusion{}, first: map[plan.Reason]plan.Exclusion{}}
	for _, reason := range exclusionOrder {
		if e, ok := r.FirstExclusion(reason); ok {
			s.first[reason] = e
			if len(s.Sample) < exclusionSample {
				s.Sample = append(s.Sample, e)
			}
		}
	}
	var head []plan.Exclusion
	for e := range r.Exclusions() {
		if len(head) == exclusionSample {
			break
		}
		head = append(head, e)
	}
	for _, e := range head {
		if len(s.Sample) == exclusionSample {
			break
		}
		if s.first[e.Reason] != e { // not already in the sample
			s.Sample = append(s.Sample, e)
		}
	}
	return s
}

func (v planView) money(c gpuwarden.Cents) string { return v.Currency.Format(c) }

// columns splits a row's lines into the table's four money columns, which
// add up to its total: compute (or the monthly price), idle + rework, data.
func columns(c *plan.Candidate) (compute, idle, data gpuwarden.Cents) {
	for _, l := range c.Lines() {
		switch l.Item {
		case plan.ItemCompute, plan.ItemMonthly:
			compute += l.Amount
		case plan.ItemIdle, plan.ItemRework:
			idle += l.Amount
		default:
			data += l.Amount
		}
	}
	return
}

// unpriced reports whether a candidate has a line the catalog could not
// price, and whether it has one priced by an estimate.
func unpriced(c *plan.Candidate) (missing, estimated bool) {
	for _, l := range c.Lines() {
		missing = missing || l.Unpriced
		estimated = estimated || l.Estimated
	}
	return missing, estimated
}

func gpus(o *gpuwarden.Offer) string {
	return strconv.FormatFloat(o.GPUCount, 'f', -1, 64) + "× " + o.GPU
}

func roleMark(role plan.Role) string {
	switch role {
	case plan.PlanA:
		return "A"
	case plan.PlanB:
		return "B"
	}
	return ""
}

// shown are the ranked candidates a report prints: the first limit (all
// for 0), and plan B even when it ranks below the cut.
func (v planView) shown(limit int) []*plan.Candidate {
	n := v.RankedCount()
	if limit > 0 {
		n = min(n, limit)
	}
	rows := make([]*plan.Candidate, 0, n+1)
	for i := range n {
		rows = append(rows, v.RankedAt(i))
	}
	if v.PlanB != nil && int(v.PlanB.Rank) > n {
		rows = append(rows, v.PlanB)
	}
	return rows
}

func (v planView) table(w io.Writer, limit int, explain bool) error {
	var b strings.Builder
	v.header(&b)
	if explain {
		v.explain(&b)
	}
	if v.RankedCount() > 0 {
		rows := [][]string{{"#", "OFFER", "GPUS", "BILLING", "FINISH", "COMPUTE", "IDLE", "DATA", "TOTAL"}}
		anyUnpriced, anyEstimated := false, false
		shown := v.shown(limit)
		for _, c := range shown {
			compute, idle, data := columns(c)
			rank := strconv.Itoa(int(c.Rank))
			if m := roleMark(c.Role); m != "" {
				rank += " " + m
			}
			total := v.money(c.Total)
			missing, estimated := unpriced(c)
			if estimated {
				total = "~" + total
				anyEstimated = true
			}
			if missing {
				total += "*"
				anyUnpriced = true
			}
			rows = append(rows, []string{rank, offerName(c.Offer), gpus(c.Offer), c.Billing.String(), finish(c),
				v.money(compute), v.money(idle), v.money(data), total})
		}
		fitOfferColumn(rows, 1)
		rightAlign(rows, 4, 5, 6, 7, 8)
		t := newTable(&b)
		for _, r := range rows {
			t.row(r...)
		}
		if err := t.flush(); err != nil {
			return err
		}
		if n := v.RankedCount() - len(shown); n > 0 {
			fmt.Fprintf(&b, "… %d more (--limit 0 shows all)\n", n)
		}
		fmt.Fprintln(&b, "A = plan A, B = plan B; FINISH: time to finish; IDLE: idle + spot rework; DATA: egress + storage")
		if anyEstimated {
			fmt.Fprintln(&b, "~ the provider has no egress or storage price: estimated from other providers (docs/pricing.md)")
		}
		if anyUnpriced {
			fmt.Fprintln(&b, "* the catalog has no egress or storage price for this provider: the total leaves it out")
		}
		v.bill(&b, "Plan A", v.Best)
		v.bill(&b, "Plan B", v.PlanB)
	}
	v.findings(&b)
	v.exclusions(&b)
	// Offers carry third-party text (a source, a GPU name): nothing in it
	// may reach the terminal as an escape sequence.
	_, err := io.WriteString(w, textsafe.Terminal(b.String(), true))
	return err
}

func (v planView) header(b *strings.Builder) {
	name := v.Name
	if name == "" {
		name = v.File
	}
	fmt.Fprintf(b, "Plan      %s (%s)\n", name, v.File)
	wl := fmt.Sprintf("%s, needs %s GB", v.plan().Workload.Kind, trimFloat(v.Sizing.NeedGB))
	if v.Sizing.OneGPU {
		wl += " on one GPU"
	}
	if v.SmallestCard != nil {
		wl += "; smallest card " + v.SmallestCard.String()
	}
	fmt.Fprint(b, wrap(wl, "Workload  ", pageWidth))
	policy := "no auto-shutdown"
	if v.AutoShutdownIdleMinutes > 0 {
		policy = "auto-shutdown after " + trimFloat(v.AutoShutdownIdleMinutes) + " idle min"
		if v.plan().OnHours.StopWhenJobsEnd {
			policy += ", at once when the jobs end"
		}
	}
	budget := "no budget limit"
	if v.BudgetLimit > 0 {
		budget = "budget " + v.money(v.BudgetLimit)
	}
	if v.Amount != "" {
		work := v.Amount + "; ranked by the cost to finish"
		if v.DeadlineHours > 0 {
			work += ", within " + hoursText(v.DeadlineHours)
		}
		fmt.Fprint(b, wrap(work, "Work      ", pageWidth))
		fmt.Fprintf(b, "Month     %s h, %s; %s\n\n", trimFloat(v.HoursPerMonth), policy, budget)
		return
	}
	fmt.Fprintf(b, "Month     %s h, %s h of work, %s; %s\n", trimFloat(v.HoursPerMonth), trimFloat(v.WorkHours), policy, budget)
	if v.plan().Workload.Kind != gpuwarden.KindNotebook {
		// Human time is a notebook's work; anything else could be timed.
		fmt.Fprintln(b, "Speed     ignored: work_hours is the same on any card (state the amount: docs/sizing.md)")
	}
	fmt.Fprintln(b)
}

// finish is the FINISH cell: the time to finish on the box, or the boxes
// an inference load needs (served for its hours whatever the box).
func finish(c *plan.Candidate) string {
	if c.Speed != nil && c.Speed.Replicas == 1 {
		return "1 box"
	}
	if c.Speed != nil && c.Speed.Replicas > 1 {
		return fmt.Sprintf("%d boxes", c.Speed.Replicas)
	}
	return hoursText(c.TimeToFinish)
}

// hoursText writes hours as people read a duration: 81 h, 25 d.
func hoursText(h float64) string {
	if h >= 96 {
		return strconv.FormatFloat(math.Round(h/24*10)/10, 'f', -1, 64) + " d"
	}
	return strconv.FormatFloat(math.Round(h*10)/10, 'f', -1, 64) + " h"
}

func (v planView) plan() *gpuwarden.Plan { return v.Report.Plan() }

func (v planView) explain(b *strings.Builder) {
	fmt.Fprintln(b, "Sizing (GB = 10^9 bytes; cards compared at their marketed size)")
	rows := [][]string{}
	for _, l := range v.Sizing.Lines {
		rows = append(rows, []string{"  " + l.Item, trimFloat(l.GB) + " GB", l.Formula})
	}
	rows = append(rows, []string{"  need", trimFloat(v.Sizing.NeedGB) + " GB", ""})
	rightAlign(rows, 1)
	t := newTable(b)
	for _, r := range rows {
		t.row(r...)
	}
	_ = t.flush()
	for _, n := range v.Sizing.Notes {
		fmt.Fprint(b, wrap(n, "  note: ", pageWidth))
	}
	fmt.Fprintln(b)
	v.explainSpeeds(b)
}

// explainSpeedsMax is how many boxes --explain times in full.
const explainSpeedsMax = 12

// explainSpeeds prints how long each kind of box takes and why: the model's
// terms (peak, MFU, the scaling its interconnect gives), a measurement, or
// the plan's own figure.
func (v planView) explainSpeeds(b *strings.Builder) {
	if v.Amount == "" {
		return
	}
	fmt.Fprintln(b, "Time to finish (box hours; docs/sizing.md)")
	speeds := v.Speeds()
	shown := 0
	for _, s := range speeds {
		if s.Unknown() != "" {
			continue
		}
		if shown == explainSpeedsMax {
			fmt.Fprintf(b, "  … %d more boxes\n", len(speeds)-shown)
			break
		}
		shown++
		head := fmt.Sprintf("%s× %s: %s", trimFloat(s.GPUs), s.GPU, hoursText(s.Hours))
		if s.Scaling > 0 && s.Basis != plan.BasisThroughput && s.Basis != plan.BasisMeasured {
			head += fmt.Sprintf(", scaling %.3f over %s", s.Scaling, s.Link)
		}
		fmt.Fprint(b, wrapHanging(head+"; "+s.Detail, "  ", "      ", pageWidth))
	}
	fmt.Fprintf(b, "  scaling per doubling of GPUs: NVSwitch %.2f, NVLink bridge %.2f then PCIe, PCIe %.2f; across boxes %.2f\n\n",
		gpuwarden.ScalePerDoublingNVSwitch, gpuwarden.ScalePerDoublingBridge, gpuwarden.ScalePerDoublingPCIe, gpuwarden.ScalePerDoublingAcrossBoxes)
}

// fitOfferColumn truncates the free-text column so the table fits the page.
func fitOfferColumn(rows [][]string, col int) {
	used := 0
	for c := range rows[0] {
		if c == col {
			continue
		}
		w := 0
		for _, r := range rows {
			w = max(w, utf8.RuneCountInString(r[c]))
		}
		used += w + 2
	}
	room := max(pageWidth-used, 16)
	for _, r := range rows {
		r[col] = truncate(r[col], room)
	}
}

// bill prints one candidate's lines with quantities and rates.
func (v planView) bill(b *strings.Builder, title string, c *plan.Candidate) {
	if c == nil {
		return
	}
	fmt.Fprintf(b, "\n%s  %s %s · %s · %s\n", title, c.Offer.Where(), c.Offer.Instance, gpus(c.Offer), c.Billing)
	rows := [][]string{}
	for _, l := range c.Lines() {
		rows = append(rows, []string{"  " + l.Item.String(), v.lineDetail(l), v.lineAmount(l)})
	}
	total := v.money(c.Total)
	if _, estimated := unpriced(c); estimated {
		total = "~" + total
	}
	rows = append(rows, []string{"  total", "", total})
	if c.PerResult != nil {
		when := " a month"
		if v.Amount != "" {
			when = " to finish"
		}
		rows = append(rows, []string{"  per result", resultCount(c.PerResult.Results) + " × " + c.PerResult.Unit + when,
			v.Currency.FormatRate(fourPlaces(c.PerResult.Amount), c.PerResult.Unit)})
	}
	if v.Amount != "" && c.Speed != nil {
		rows = append(rows, []string{"  time to finish", hoursText(c.TimeToFinish) + " (" + c.Speed.Basis + ")", ""})
	}
	rightAlign(rows, 2)
	t := newTable(b)
	for _, r := range rows {
		t.row(r...)
	}
	_ = t.flush()
	fmt.Fprint(b, wrap(c.Offer.Source+", "+asOf(c.Offer), "  source: ", pageWidth))
}

func (v planView) lineDetail(l plan.Line) string {
	q := l.Quantity.String() + " " + l.Unit.String()
	switch {
	case l.Unpriced:
		return q + ", no price in the catalog"
	case l.Estimated:
		return q + ", estimated: " + l.Basis
	case l.Item == plan.ItemMonthly:
		return "flat, whole month"
	case l.Tiered:
		return q + ", tiered"
	}
	unit := l.Unit.String()
	if l.Unit == plan.UnitGBMonth {
		unit = "GB"
	}
	return q + " × " + v.Currency.FormatRate(l.Rate, unit)
}

// fourPlaces rounds a per-result cost to four decimals: cents would round a
// fraction of a cent to nothing, six digits are noise.
func fourPlaces(m gpuwarden.Micros) gpuwarden.Micros { return (m + 50) / 100 * 100 }

func (v planView) lineAmount(l plan.Line) string {
	if l.Unpriced {
		return "unpriced"
	}
	if l.Estimated {
		return "~" + v.money(l.Amount)
	}
	return v.money(l.Amount)
}

func (v planView) findings(b *strings.Builder) {
	if len(v.Findings) == 0 {
		return
	}
	fmt.Fprintln(b, "\nFindings")
	for _, f := range v.Findings {
		fmt.Fprint(b, wrap(f.Message, "  • ", pageWidth))
	}
}

// exclusionOrder is the order reasons are printed in: fit first, money last.
var exclusionOrder = []plan.Reason{plan.ReasonTooSmall, plan.ReasonNoSpeed, plan.ReasonDeadline, plan.ReasonResidency, plan.ReasonProvider,
	plan.ReasonCurrency, plan.ReasonSpot, plan.ReasonBudget}

// exclusions prints one line per reason: how many offers it left out and the
// first of them (for the budget, the cheapest) with the reason in words.
func (v planView) exclusions(b *strings.Builder) {
	s := v.Exclusions
	if s.Total == 0 {
		return
	}
	fmt.Fprintf(b, "\nExcluded (%d; -o json --all-exclusions lists all)\n", s.Total)
	for _, reason := range exclusionOrder {
		n := s.ByReason[reason]
		if n == 0 {
			continue
		}
		e := s.first[reason]
		what := e.Offer.Provider + " " + e.Offer.Region + " " + e.Offer.Instance
		if e.Billing != 0 {
			what += " (" + e.Billing.String() + ")"
		}
		lead := "e.g."
		if reason == plan.ReasonBudget {
			lead = "cheapest:"
		}
		fmt.Fprint(b, wrapHanging(fmt.Sprintf("%d %s, %s %s: %s", n, reason, lead, what, e.Why()), "  ", "      ", pageWidth))
	}
}

var planCSVHeader = []string{"rank", "role", "provider", "region", "country", "instance", "gpu", "gpu_count",
	"billing", "currency", "rate", "compute", "idle", "rework", "egress", "storage", "total", "per_result", "result_unit", "as_of", "source",
	"work_hours", "time_to_finish_h", "speed_basis"}

func (v planView) csv(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(planCSVHeader); err != nil {
		return err
	}
	for _, c := range v.Ranked() {
		var amounts [5]gpuwarden.Cents // compute, idle, rework, egress, storage
		for _, l := range c.Lines() {
			switch l.Item {
			case plan.ItemCompute, plan.ItemMonthly:
				amounts[0] += l.Amount
			case plan.ItemIdle:
				amounts[1] += l.Amount
			case plan.ItemRework:
				amounts[2] += l.Amount
			case plan.ItemStorage, plan.ItemStorageMore:
				amounts[4] += l.Amount
			default:
				amounts[3] += l.Amount
			}
		}
		perResult, unit := "", ""
		if c.PerResult != nil {
			perResult, unit = c.PerResult.Amount.String(), c.PerResult.Unit
		}
		o := c.Offer
		rec := []string{strconv.Itoa(int(c.Rank)), c.Role.String(), o.Provider, o.Region, o.Country, o.Instance, o.GPU,
			strconv.FormatFloat(o.GPUCount, 'f', -1, 64), c.Billing.String(), string(v.Currency), c.Rate.String(),
			amounts[0].Decimal(), amounts[1].Decimal(), amounts[2].Decimal(), amounts[3].Decimal(), amounts[4].Decimal(),
			c.Total.Decimal(), perResult, unit, o.AsOf, o.Source,
			trimFloat(c.Hours.Work), trimFloat(c.TimeToFinish), c.Speed.Basis}
		if err := cw.Write(textsafe.CSVRecord(rec)); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func (v planView) markdown(w io.Writer, limit int) error {
	var b strings.Builder
	name := v.Name
	if name == "" {
		name = v.File
	}
	fmt.Fprintf(&b, "## Plan: %s\n\n", name)
	fmt.Fprintf(&b, "- Workload: %s, needs %s GB", v.plan().Workload.Kind, trimFloat(v.Sizing.NeedGB))
	if v.SmallestCard != nil {
		fmt.Fprintf(&b, " (smallest card %s)", v.SmallestCard)
	}
	if v.Amount != "" {
		fmt.Fprintf(&b, "\n- Work: %s, ranked by the cost to finish\n", textsafe.MarkdownCell(v.Amount))
	} else {
		fmt.Fprintf(&b, "\n- Month: %s h, %s h of work on any card (work_hours: speed ignored)\n", trimFloat(v.HoursPerMonth), trimFloat(v.WorkHours))
	}
	if v.BudgetLimit > 0 {
		fmt.Fprintf(&b, "- Budget: %s\n", v.money(v.BudgetLimit))
	}
	if v.RankedCount() > 0 {
		fmt.Fprintln(&b, "\n| # | Role | Offer | GPUs | Billing | Finish | Compute | Idle + rework | Data | Total |")
		fmt.Fprintln(&b, "|--:|---|---|---|---|--:|--:|--:|--:|--:|")
		for _, c := range v.shown(limit) {
			compute, idle, data := columns(c)
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.Rank, c.Role,
				textsafe.MarkdownCell(c.Offer.Provider+" "+c.Offer.Region+" "+c.Offer.Instance), textsafe.MarkdownCell(gpus(c.Offer)), c.Billing,
				finish(c), v.money(compute), v.money(idle), v.money(data), v.money(c.Total))
		}
	}
	if len(v.Findings) > 0 {
		fmt.Fprintln(&b, "\n### Findings")
		for _, f := range v.Findings {
			fmt.Fprintf(&b, "- %s\n", f.Message)
		}
	}
	if n := v.Exclusions.Total; n > 0 {
		fmt.Fprintf(&b, "\n### Excluded (%d)\n", n)
		i := 0
		for e := range v.Report.Exclusions() {
			if limit > 0 && i == limit {
				fmt.Fprintf(&b, "- … %d more\n", n-limit)
				break
			}
			fmt.Fprintf(&b, "- %s %s %s: %s\n", e.Offer.Provider, e.Offer.Region, e.Offer.Instance, e.Why())
			i++
		}
	}
	_, err := io.WriteString(w, textsafe.Terminal(b.String(), true))
	return err
}

func trimFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// resultCount writes a month's count of results with its thousands
// grouped, to two decimals when it is not whole: 21,900 or 1,234.5.
func resultCount(n float64) string {
	cents := math.Round(n * 100)
	if math.IsNaN(cents) || math.Abs(cents) > 1e17 {
		return trimFloat(n)
	}
	c := int64(cents)
	s := gpuwarden.GroupDigits(c / 100)
	if f := c % 100; f != 0 {
		s += strings.TrimRight(fmt.Sprintf(".%02d", max(f, -f)), "0")
	}
	return s
}

// asOf says when a price was read, or that nobody said: an empty date
// after "as of" reads as a cut-off line.
func asOf(o *gpuwarden.Offer) string {
	if o.AsOf == "" {
		return "undated"
	}
	return "as of " + o.AsOf
}

// offerName is the OFFER cell: provider, region and instance, with the
// number of zones folded into the row when there are several.
func offerName(o *gpuwarden.Offer) string {
	// The count goes before the instance, which the table may cut short.
	where := o.Provider + " " + o.Region
	if o.Zones > 1 {
		where += fmt.Sprintf(" (%d zones)", o.Zones)
	}
	return where + " " + o.Instance
}
