// Package preflight is the checklist before pressing Run, made executable:
// plan B, budget alerts, idle shutdown, owner and TTL, priced egress and
// storage, a durable checkpoint store in the right place, a right-sized
// card, fresh prices, a reachable webhook — and, on the box, the pinned
// stack, a recent burn-in, a proven resume and a running agent. Each item
// says what it saw and what fixes it; plan-file fixes come as edits.
//
// Check is pure: the CLI gathers the facts (plan, ranking, ledger, agent,
// canary, webhook) and prints the items.
package preflight

import (
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/catalog"
	"github.com/gpuwarden/gpuwarden/config"
	"github.com/gpuwarden/gpuwarden/launch"
	"github.com/gpuwarden/gpuwarden/plan"
)

// Status is an item's verdict.
type Status string

// The verdicts, printed ✓ ⚠ ✗.
const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "fail"
)

// Mark is the status as one character for the table.
func (s Status) Mark() string {
	switch s {
	case OK:
		return "✓"
	case Warn:
		return "⚠"
	}
	return "✗"
}

// Item is one line of the checklist.
type Item struct {
	ID       string `json:"id"`
	Title    string `json:"title"`
	Status   Status `json:"status"`
	Evidence string `json:"evidence"`
	// Fix is the command or change that fixes it; empty when OK.
	Fix string `json:"fix,omitempty"`
	// Edits are the plan-file changes that fix it, which --fix applies.
	Edits []config.Edit `json:"edits,omitempty"`
	// PlanFile is true for items about the plan file alone.
	PlanFile bool `json:"plan_file"`
}

// Facts are what the checks read; the CLI gathers them. Nil pointers and
// empty values mean "not known here" (no GPU, no ledger, offline).
type Facts struct {
	Now      time.Time
	Plan     *gpuwarden.Plan
	PlanPath string
	Catalog  *gpuwarden.Catalog
	// Report is the plan's ranking; nil when nothing fits.
	Report *plan.Report
	// LockPath is where the lock should be; LockFound whether it is.
	LockPath  string
	LockFound bool
	// OnGPUBox is true when an NVIDIA driver answered here.
	OnGPUBox bool
	// Canary is the canary's exit code against the lock, when it ran.
	Canary *CanaryRun
	// NodeID identifies this box in the ledger (burn-in).
	NodeID string
	// Events are this box's ledger events (burn-ins, drills), newest first.
	Events []gpuwarden.Event
	// WeekGPUMemPercent is the mean share of VRAM in use over the last
	// week, from the ledger; negative when unknown.
	WeekGPUMemPercent float64
	// AgentRunning says whether `gpuwarden up` answers here; nil: not asked.
	AgentRunning *bool
	// Webhooks maps each plan webhook to its reachability error (nil: it
	// answered); a webhook missing from the map was not tried (offline).
	Webhooks map[string]error
	// Stop is the stop the plan's provider and on_hours.stop get, with its
	// proof where one could be tried; nil when not worked out.
	Stop *StopCheck
}

// StopCheck is the stop a plan gets on its provider (the box, else the
// first target, else plan A: BoxProvider), as `up` would build it, and the
// proof of it tried from here.
type StopCheck struct {
	Provider string
	Report   gpuwarden.StopReport
	// Proof is nil when no proof was tried (offline, or no stopper).
	Proof *gpuwarden.StopProof
	// NotHere says the proof could not run from this machine (it is not
	// a box of that provider): not proven, not refused.
	NotHere bool
}

// BoxProvider is the provider the work runs on: the box, else the first
// target, else plan A.
func BoxProvider(p *gpuwarden.Plan, r *plan.Report) string {
	provider, _ := boxPlace(Facts{Plan: p, Report: r})
	return provider
}

// CanaryRun is the outcome of the canary against the lock.
type CanaryRun struct {
	ExitCode int    `json:"exit_code"`
	Detail   string `json:"detail"`
}

// Freshness limits.
const (
	BurninMaxAge  = 30 * 24 * time.Hour
	DrillMaxAge   = 30 * 24 * time.Hour
	DefaultTTL    = "72h"
	idleMinutes   = 30
	budgetHeadway = 1.2
)

// Check runs every item in the order people read the list.
func Check(f Facts) []Item {
	checks := []func(Facts) Item{planB, budgetAlerts, idleShutdown, idleStop, labels, pricing, checkpoint, cardSize, webhooks,
		catalogAge, lock, burnin, drill, agentRunning}
	out := make([]Item, 0, len(checks))
	for _, c := range checks {
		out = append(out, c(f))
	}
	return out
}

// Failed reports whether the list fails: any ✗, or with strict any ⚠.
func Failed(items []Item, strict bool) bool {
	return slices.ContainsFunc(items, func(it Item) bool { return it.Status == Fail || strict && it.Status == Warn })
}

func planB(f Facts) Item {
	it := Item{ID: "plan-b", Title: "plan B target in another region or provider", PlanFile: true}
	ts := f.Plan.Targets
	for _, t := range ts[min(1, len(ts)):] {
		if t.Provider != ts[0].Provider || t.Region != ts[0].Region {
			it.Status, it.Evidence = OK, fmt.Sprintf("%s (%s %s) backs %s (%s %s)", t.Name, t.Provider, t.Region, ts[0].Name, ts[0].Provider, ts[0].Region)
			return it
		}
	}
	it.Status = Fail
	switch len(ts) {
	case 0:
		it.Evidence = "no launch targets: when the first choice has no capacity, nothing is ready"
	case 1:
		it.Evidence = fmt.Sprintf("only %s (%s %s): a capacity or quota error there stops the work", ts[0].Name, ts[0].Provider, ts[0].Region)
	default:
		it.Evidence = fmt.Sprintf("all %d targets are %s %s: one capacity shortage or quota blocks them all", len(ts), ts[0].Provider, ts[0].Region)
	}
	it.Fix = "add a target on another provider or region (`gpuwarden plan -o targets` writes them from the ranking)"
	if t, ok := planBTarget(f); ok {
		it.Fix = fmt.Sprintf("add target %s: %s %s %s, the ranking's plan B", t.Name, t.Provider, t.Region, t.Offer)
		it.Edits = []config.Edit{{Path: "targets", Append: true, Value: t, Why: "plan B from the ranking"}}
	}
	return it
}

// planBTarget proposes the ranking's first offer that is not where the
// existing targets are, with a launch command to adapt.
func planBTarget(f Facts) (gpuwarden.Target, bool) {
	if f.Report == nil {
		return gpuwarden.Target{}, false
	}
	// Plan B must stand apart from where the targets will be once the
	// card-size fix moves them, or applying both fixes would put plan A and
	// plan B in one place.
	places := targetPlaces(f)
	taken := func(o *gpuwarden.Offer) bool {
		return slices.Contains(places, [2]string{o.Provider, o.Region})
	}
	for _, c := range f.Report.Ranked() {
		if taken(c.Offer) {
			continue
		}
		t := launch.Template(c.Offer.Provider)
		t.Name = fmt.Sprintf("plan-%c", 'a'+len(f.Plan.Targets))
		t.Provider, t.Region, t.Offer = c.Offer.Provider, c.Offer.Region, c.Offer.Instance
		return t, true
	}
	return gpuwarden.Target{}, false
}

// targetPlaces are the targets' provider and region once the card-size
// fix is done: the targets that rent the box's card move to the smaller
// offer, by its edits or (a launch command of the user's own) by hand.
func targetPlaces(f Facts) [][2]string {
	moved := map[int]bool{}
	var smaller *gpuwarden.Offer
	if rs := f.Report.RightSize(); rs != nil && rs.Smaller != nil {
		smaller = rs.Smaller.Offer
		for _, i := range boxTargets(f) {
			moved[i] = true
		}
	}
	var out [][2]string
	for i, t := range f.Plan.Targets {
		if moved[i] {
			out = append(out, [2]string{smaller.Provider, smaller.Region})
			continue
		}
		out = append(out, [2]string{t.Provider, t.Region})
	}
	return out
}

// movableTargets splits the targets that launch the box's offer (see
// boxTargets) by whether the card-size fix can point them at o with field
// edits alone: on o's provider, with a launch command that reads the offer
// from the target ({{.Offer}}) and, when the region changes, the region too
// with no zone pinned. Any other target launches what its own command says,
// and a fix never rewrites a command: it is kept, and the user moves it.
func movableTargets(f Facts, o *gpuwarden.Offer) (movable, kept []int) {
	for _, i := range boxTargets(f) {
		t := f.Plan.Targets[i]
		sameRegion := strings.EqualFold(t.Region, o.Region)
		if strings.EqualFold(t.Provider, o.Provider) && launchReads(t.Launch, "Offer") &&
			(sameRegion || launchReads(t.Launch, "Region") && t.Zone == "") {
			movable = append(movable, i)
		} else {
			kept = append(kept, i)
		}
	}
	return movable, kept
}

// launchReads reports whether a launch command's template reads the
// target's field ({{.Offer}}, {{ .Region }}, {{if .Zone}}…).
func launchReads(launch, field string) bool {
	return regexp.MustCompile(`\{\{[^}]*\.` + field + `\b`).MatchString(launch)
}

// targetNames names targets for a fix: "target plan-a", "targets plan-a and plan-c".
func targetNames(f Facts, idx []int) string {
	var names []string
	for _, i := range idx {
		names = append(names, f.Plan.Targets[i].Name)
	}
	if len(names) == 1 {
		return "target " + names[0]
	}
	return "targets " + strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// boxTargets are the indexes of the targets that launch the box's offer.
func boxTargets(f Facts) []int {
	b := f.Plan.Box
	if b == nil || b.Instance == "" {
		return nil
	}
	var out []int
	for i, t := range f.Plan.Targets {
		if t.Provider == b.Provider && t.Region == b.Region && t.Offer == b.Instance {
			out = append(out, i)
		}
	}
	return out
}

func budgetAlerts(f Facts) Item {
	it := Item{ID: "budget-alerts", Title: "budget limit and alerts", PlanFile: true}
	b := f.Plan.Budget
	cur := b.Currency
	switch {
	case b.MonthlyLimit > 0 && len(b.AlertsPercent) > 0:
		it.Status = OK
		it.Evidence = fmt.Sprintf("%s a month, alerts at %s %%", cur.Format(gpuwarden.CentsOf(b.MonthlyLimit)), joinInts(b.AlertsPercent))
		return it
	case b.MonthlyLimit > 0:
		it.Status, it.Evidence = Fail, "a limit of "+cur.Format(gpuwarden.CentsOf(b.MonthlyLimit))+" but alerts_percent is empty: nobody hears of it"
		it.Fix = "set budget.alerts_percent to [50, 80, 100]"
		it.Edits = []config.Edit{{Path: "budget.alerts_percent", Value: []int{50, 80, 100}, Why: "alerts at half, 80 % and the limit"}}
		return it
	}
	it.Status, it.Evidence = Fail, "no monthly limit: no budget alert can fire, and the agent cannot forecast the month"
	limit := suggestedLimit(f)
	it.Fix = fmt.Sprintf("set budget.monthly_limit to %s (the month's bill with 20 %% headroom) and alerts at 50/80/100 %%", cur.Format(gpuwarden.CentsOf(limit)))
	it.Edits = []config.Edit{{Path: "budget.monthly_limit", Value: limit.Float(), Why: "plan A's month + 20 %"},
		{Path: "budget.alerts_percent", Value: []int{50, 80, 100}, Why: "alerts at half, 80 % and the limit"}}
	return it
}

// suggestedLimit is the month of the box the plan should run, with headroom, rounded
// up to a round figure people would write.
func suggestedLimit(f Facts) gpuwarden.Micros {
	total := 0.0
	if f.Report != nil {
		// Budget for the box the plan should run: the right-sized one when
		// the card-size item moves it.
		if rs := f.Report.RightSize(); rs != nil && rs.Smaller != nil {
			total = rs.Smaller.Total.Micros().Float()
		} else if c := f.Report.Current(); c != nil {
			total = c.Total.Micros().Float()
		}
	}
	step := 50.0
	if total > 5000 {
		step = 500
	}
	limit := math.Max(step, math.Ceil(total*budgetHeadway/step)*step)
	return gpuwarden.MicrosFromFloat(limit)
}

func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, "/")
}

func idleShutdown(f Facts) Item {
	it := Item{ID: "idle-shutdown", Title: "idle shutdown", PlanFile: true}
	if m := f.Plan.OnHours.AutoShutdownIdleMinutes; m > 0 {
		it.Status, it.Evidence = OK, fmt.Sprintf("the agent stops the box after %g idle minutes", m)
		return it
	}
	it.Status = Fail
	it.Evidence = "on_hours.auto_shutdown_idle_minutes is 0: a box left on bills every hour of the month"
	if f.Report != nil && f.Report.IdleSaving != nil && f.Report.IdleSaving.Saves > 0 {
		it.Evidence += fmt.Sprintf(" (%s of plan A's month is idle)", f.Plan.Budget.Currency.Format(f.Report.IdleSaving.IdleAmount))
	}
	it.Fix = fmt.Sprintf("set on_hours.auto_shutdown_idle_minutes to %d", idleMinutes)
	it.Edits = []config.Edit{{Path: "on_hours.auto_shutdown_idle_minutes", Value: idleMinutes, Why: "stop after 30 idle minutes"}}
	return it
}

// idleStop checks that the stop the agent will run ends the bill on the
// plan's provider (gpuwarden's stop table), and that it was proven: an OS
// shutdown leaves an Azure VM allocated and billed, a Lambda instance
// billed until terminated, a RunPod or Vast container running.
func idleStop(f Facts) Item {
	it := Item{ID: "idle-stop", Title: "the stop ends the bill", PlanFile: true}
	s := f.Stop
	if s == nil || s.Provider == "" {
		it.Status, it.Evidence = Warn, "no provider named (box: or a target): what a stop does to the bill is unknown"
		it.Fix = "name the box's provider in box: (provider, region, instance)"
		return it
	}
	r := s.Report
	mode := f.Plan.OnHours.Stop
	if mode == "" {
		mode = "auto"
	}
	switch {
	case r.Method == "none" || !r.StopsBilling:
		it.Status = Fail
		if r.Method == "none" {
			it.Evidence = fmt.Sprintf("on %s nothing gpuwarden runs ends the bill (on_hours.stop: %s): %s", s.Provider, mode, r.Why)
		} else {
			it.Evidence = fmt.Sprintf("%s on %s: %s", r.Method, s.Provider, r.Why)
		}
		it.Fix = r.Fix
		sem, _ := gpuwarden.StopSemanticsOf(s.Provider)
		switch {
		case sem.Method == gpuwarden.StopLambdaTerminate:
			it.Fix = "set on_hours.stop to terminate (the instance and its disk go: keep checkpoints in a store)"
			it.Edits = []config.Edit{{Path: "on_hours.stop", Value: "terminate", Why: "Lambda bills until the instance is terminated"}}
		case sem.Method != "" && mode != "auto":
			it.Fix = "set on_hours.stop to auto (" + sem.Method + ")"
			it.Edits = []config.Edit{{Path: "on_hours.stop", Value: "auto", Why: "the provider's own stop ends the bill; an OS shutdown does not"}}
		}
	case s.Proof != nil && s.Proof.Proven:
		it.Status = OK
		it.Evidence = fmt.Sprintf("%s ends the bill on %s, proven: %s", r.Method, s.Provider, strings.Join(s.Proof.Checked, "; "))
	case s.Proof != nil && !s.NotHere:
		it.Status = Fail
		it.Evidence = fmt.Sprintf("%s would end the bill on %s but is not proven: %s", r.Method, s.Provider, s.Proof.Reason)
		it.Fix = s.Proof.Fix
	default:
		it.Status = Warn
		it.Evidence = fmt.Sprintf("%s ends the bill on %s; not proven from here", r.Method, s.Provider)
		if s.Proof != nil && s.Proof.Reason != "" {
			it.Evidence += " (" + s.Proof.Reason + ")"
		}
		it.Fix = "run gpuwarden preflight on the box, or start the agent there: it proves the stop at start"
	}
	return it
}

func labels(f Facts) Item {
	it := Item{ID: "labels", Title: "owner and TTL labels", PlanFile: true}
	owner, ttl := f.Plan.Labels["owner"], f.Plan.Labels["ttl"]
	var missing []string
	if owner == "" {
		missing = append(missing, "owner")
		it.Edits = append(it.Edits, config.Edit{Path: "labels.owner", Value: "CHANGE-ME", Why: "who answers for the box"})
	}
	if ttl == "" {
		missing = append(missing, "ttl")
		it.Edits = append(it.Edits, config.Edit{Path: "labels.ttl", Value: DefaultTTL, Why: "how long the box may live"})
	} else if _, err := time.ParseDuration(ttl); err != nil {
		it.Status, it.Evidence = Fail, fmt.Sprintf("labels.ttl %q is not a duration such as 72h", ttl)
		it.Fix = "set labels.ttl to a duration such as 72h"
		it.Edits = append(it.Edits, config.Edit{Path: "labels.ttl", Value: DefaultTTL, Why: "how long the box may live"})
		return it
	}
	if len(missing) == 0 {
		it.Status, it.Evidence = OK, fmt.Sprintf("owner %s, ttl %s", owner, ttl)
		return it
	}
	it.Status = Fail
	it.Evidence = "no " + strings.Join(missing, " and no ") + " label: the orphan review will flag this box"
	it.Fix = "set labels." + strings.Join(missing, " and labels.") + " (then put the real owner in place of CHANGE-ME)"
	return it
}

func pricing(f Facts) Item {
	it := Item{ID: "pricing", Title: "egress and storage priced", PlanFile: true}
	var best *plan.Candidate
	if f.Report != nil {
		best = f.Report.Current()
	}
	if best == nil {
		it.Status, it.Evidence = Warn, "no priced offer for the plan's box or plan A, so no bill to check"
		it.Fix = "see `gpuwarden plan`"
		return it
	}
	// An estimated line is still one the provider does not price: the
	// bill holds a median of others' rates, not this provider's.
	var unpriced, basis []string
	for _, l := range best.Lines() {
		if l.Unpriced || l.Estimated {
			unpriced = append(unpriced, l.Item.String())
		}
		if l.Estimated && l.Basis != "" {
			basis = append(basis, l.Item.String()+": "+l.Basis)
		}
	}
	d := f.Plan.Data
	stated := d.EgressGB.Internet+d.EgressGB.InterRegion+d.EgressGB.IntraRegion > 0 || d.StorageGB > 0
	switch {
	case len(unpriced) > 0:
		// The plan states the volumes; the catalog lacks the rates: a gap to
		// close, not a plan that is wrong.
		it.Status = Warn
		it.Evidence = fmt.Sprintf("%s has no price for %s in the catalog", best.Offer.Provider, strings.Join(unpriced, ", "))
		if len(basis) > 0 {
			it.Evidence += "; the bill holds estimates (" + strings.Join(basis, "; ") + ")"
		}
		it.Fix = "add the provider's egress and storage rates to a catalog file (catalogs: in the plan)"
	case !stated:
		it.Status = Warn
		it.Evidence = "the plan states no egress and no storage: the month's bill counts none"
		it.Fix = "set data.egress_gb and data.storage_gb to what the work moves and keeps"
	default:
		it.Status = OK
		it.Evidence = fmt.Sprintf("plan A's month includes %g GB egress and %g GB storage at %s's rates",
			d.EgressGB.Internet+d.EgressGB.InterRegion+d.EgressGB.IntraRegion, d.StorageGB, best.Offer.Provider)
	}
	return it
}

func checkpoint(f Facts) Item {
	it := Item{ID: "checkpoint", Title: "checkpoints on durable storage in the same region", PlanFile: true}
	p := f.Plan
	if !p.Workload.Kind.Trains() && p.Data.CheckpointGB == 0 && p.Data.CheckpointStore == "" {
		it.Status, it.Evidence = OK, fmt.Sprintf("the %s workload keeps no training state", p.Workload.Kind)
		return it
	}
	store := p.Data.CheckpointStore
	if store == "" {
		it.Status, it.Evidence = Fail, "no data.checkpoint_store: a reclaimed box takes its checkpoints with it"
		it.Fix = "set data.checkpoint_store to s3://BUCKET/PREFIX?region=REGION in the box's region, and run with `gpuwarden run --store`"
		return it
	}
	u, err := url.Parse(store)
	if err != nil || u.Scheme != "s3" && u.Scheme != "gs" && u.Scheme != "az" {
		it.Status, it.Evidence = Warn, store+" is a directory: it lives and dies with the box unless it is a network volume"
		it.Fix = "use an object store: data.checkpoint_store: s3://BUCKET/PREFIX?region=REGION"
		return it
	}
	region := u.Query().Get("region")
	provider, boxRegion := boxPlace(f)
	if region == "" {
		it.Status, it.Evidence = Warn, store+" names no region: cross-region writes are slow and cost egress"
		it.Fix = "add ?region=REGION to data.checkpoint_store"
		return it
	}
	if allowed := p.Residency.Countries; len(allowed) > 0 {
		if c := catalog.CountryOf(providerOfScheme(u.Scheme, provider), region); c != "" && !slices.Contains(allowed, c) {
			it.Status = Fail
			it.Evidence = fmt.Sprintf("the checkpoints go to %s (%s), outside the allowed countries %v", region, c, allowed)
			it.Fix = "move data.checkpoint_store to a bucket in an allowed country"
			return it
		}
	}
	if boxRegion != "" && region != boxRegion {
		it.Status = Warn
		it.Evidence = fmt.Sprintf("the box runs in %s and the checkpoints go to %s: every push is inter-region egress", boxRegion, region)
		it.Fix = "use a bucket in " + boxRegion
		return it
	}
	it.Status, it.Evidence = OK, fmt.Sprintf("%s, %s", store, region)
	return it
}

func providerOfScheme(scheme, fallback string) string {
	if scheme == "gs" {
		return "gcp"
	}
	if scheme == "az" {
		return "azure"
	}
	if fallback == "" {
		return "aws"
	}
	return fallback
}

// boxPlace is where the work runs: the box, else the first target, else
// plan A.
func boxPlace(f Facts) (provider, region string) {
	switch {
	case f.Plan.Box != nil && f.Plan.Box.Region != "":
		return f.Plan.Box.Provider, f.Plan.Box.Region
	case len(f.Plan.Targets) > 0:
		return f.Plan.Targets[0].Provider, f.Plan.Targets[0].Region
	case f.Report != nil && f.Report.Best != nil:
		return f.Report.Best.Offer.Provider, f.Report.Best.Offer.Region
	}
	return "", ""
}

func cardSize(f Facts) Item {
	it := Item{ID: "card-size", Title: "the card fits the work", PlanFile: true}
	if f.Report == nil {
		it.Status, it.Evidence = Warn, "nothing fits the plan: no card to judge"
		return it
	}
	cur := f.Plan.Budget.Currency
	if rs := f.Report.RightSize(); rs != nil {
		it.Status = Fail
		it.Evidence = rs.Message(cur)
		var fixes []string
		if rs.Smaller != nil {
			o := rs.Smaller.Offer
			fix := fmt.Sprintf("rent %s %s %s instead", o.Provider, o.Region, o.Instance)
			if f.Plan.Box != nil && f.Plan.Box.Instance != "" {
				it.Edits = []config.Edit{{Path: "box.provider", Value: o.Provider, Why: "a card that fits"},
					{Path: "box.region", Value: o.Region, Why: "a card that fits"},
					{Path: "box.instance", Value: o.Instance, Why: fmt.Sprintf("%s saves %s a month", o.GPU, cur.Format(rs.Saving))}}
				movable, kept := movableTargets(f, o)
				for _, i := range movable {
					// Only the fields the target's own command reads: the
					// command, the stop and the rest stay the user's.
					if t := f.Plan.Targets[i]; !strings.EqualFold(t.Region, o.Region) {
						it.Edits = append(it.Edits, config.Edit{Path: fmt.Sprintf("targets[%d].region", i), Value: o.Region, Why: "launch the card that fits"})
					}
					it.Edits = append(it.Edits, config.Edit{Path: fmt.Sprintf("targets[%d].offer", i), Value: o.Instance, Why: "launch the card that fits"})
				}
				if len(kept) > 0 {
					fix += fmt.Sprintf(", then point %s at it (--fix leaves a launch command as you wrote it)", targetNames(f, kept))
				}
			}
			fixes = append(fixes, fix)
		}
		if rs.MIG != nil {
			fixes = append(fixes, fmt.Sprintf("or share the card: `nvidia-smi mig -cgi %s -C`", rs.MIG.Name))
		}
		it.Fix = strings.Join(fixes, ", ")
		return it
	}
	// The box fits; a target may still rent an oversized card with a
	// command of its own (one the card-size fix moved the box away from).
	for _, t := range f.Plan.Targets {
		rs := f.Report.RightSizeTarget(t)
		if rs == nil {
			continue
		}
		it.Status = Fail
		it.Evidence = fmt.Sprintf("target %s still rents %s %s %s: %s", t.Name, t.Provider, t.Region, t.Offer, rs.Message(cur))
		if b := f.Plan.Box; b != nil && b.Instance != "" {
			it.Fix = fmt.Sprintf("point target %s at the box, %s %s %s: its provider, region, offer and launch command", t.Name, b.Provider, b.Region, b.Instance)
		} else if rs.Smaller != nil {
			o := rs.Smaller.Offer
			it.Fix = fmt.Sprintf("point target %s at %s %s %s: its provider, region, offer and launch command", t.Name, o.Provider, o.Region, o.Instance)
		}
		return it
	}
	if f.WeekGPUMemPercent >= 0 && f.WeekGPUMemPercent < 100*plan.OversizedShare {
		it.Status = Warn
		it.Evidence = fmt.Sprintf("last week the GPUs used %.0f %% of their memory on average", f.WeekGPUMemPercent)
		it.Fix = "see `gpuwarden plan` for a smaller card, or MIG"
		return it
	}
	it.Status = OK
	it.Evidence = fmt.Sprintf("the work needs %.1f GB", f.Report.Sizing.NeedGB)
	if f.Report.SmallestCard != nil {
		it.Evidence += "; the smallest card that holds it is " + f.Report.SmallestCard.String()
	}
	return it
}

func webhooks(f Facts) Item {
	it := Item{ID: "webhook", Title: "alerts reach people", PlanFile: true}
	if len(f.Plan.Webhooks) == 0 {
		it.Status, it.Evidence = Warn, "no webhooks: alerts reach only the box's log and terminals"
		it.Fix = "add webhooks: [https://hooks.slack.com/services/…] to the plan"
		return it
	}
	var bad, untried []string
	for _, w := range f.Plan.Webhooks {
		err, tried := f.Webhooks[w]
		switch {
		case !tried:
			untried = append(untried, redact(w))
		case err != nil:
			bad = append(bad, fmt.Sprintf("%s (%v)", redact(w), err))
		}
	}
	switch {
	case len(bad) > 0:
		it.Status, it.Evidence = Fail, "not reachable: "+strings.Join(bad, "; ")
		it.Fix = "check the webhook URL and that this box may reach it"
	case len(untried) > 0:
		it.Status, it.Evidence = Warn, "not tried (offline): "+strings.Join(untried, ", ")
	default:
		it.Status, it.Evidence = OK, fmt.Sprintf("%d webhook(s) answered", len(f.Plan.Webhooks))
	}
	return it
}

// redact keeps a webhook's scheme and host: its path is its secret.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(a webhook)"
	}
	return u.Scheme + "://" + u.Host + "/…"
}

func catalogAge(f Facts) Item {
	it := Item{ID: "prices", Title: "prices recent"}
	if f.Catalog == nil {
		it.Status, it.Evidence = Warn, "no catalog read"
		return it
	}
	if stale := catalog.Stale(f.Catalog, f.Now, catalog.PriceMaxAge); len(stale) > 0 {
		it.Status, it.Evidence = Warn, stale[0]
		if len(stale) > 1 {
			it.Evidence += fmt.Sprintf(" (and %d more)", len(stale)-1)
		}
		it.Fix = "refresh the prices: gpuwarden catalog update (or a newer file with --catalog)"
		return it
	}
	it.Status, it.Evidence = OK, fmt.Sprintf("every price source is under %d days old", int(catalog.PriceMaxAge.Hours()/24))
	return it
}

func lock(f Facts) Item {
	it := Item{ID: "lock", Title: "stack pinned and the canary passes here"}
	switch {
	case !f.LockFound && !f.OnGPUBox:
		// Before the first rental there is no box to lock on yet.
		it.Status, it.Evidence = Warn, "no "+f.LockPath+" yet: once the job works on a box, pin its stack there"
		it.Fix = "on the box, after the first good run: gpuwarden lock"
	case !f.LockFound:
		it.Status, it.Evidence = Fail, "no "+f.LockPath+": nothing says which driver, CUDA and framework the job was proven on"
		it.Fix = "once the job works on this box: gpuwarden lock"
	case !f.OnGPUBox:
		it.Status, it.Evidence = Warn, "lock found; no NVIDIA driver here, so the canary cannot run"
		it.Fix = "run gpuwarden preflight (or gpuwarden canary) on the rented box"
	case f.Canary == nil:
		it.Status, it.Evidence = Warn, "lock found; the canary was not run"
		it.Fix = "gpuwarden canary"
	case f.Canary.ExitCode == 0:
		it.Status, it.Evidence = OK, "the canary matches "+f.LockPath
	default:
		it.Status = Fail
		it.Evidence = fmt.Sprintf("the canary exits %d: %s", f.Canary.ExitCode, f.Canary.Detail)
		it.Fix = "gpuwarden canary (it names every drifted field)"
	}
	return it
}

func burnin(f Facts) Item {
	it := Item{ID: "burnin", Title: "this box burned in recently"}
	if !f.OnGPUBox {
		it.Status, it.Evidence = Warn, "no NVIDIA driver here: burn-in applies to the rented box"
		it.Fix = "on the box: gpuwarden burnin --quick"
		return it
	}
	for _, e := range f.Events {
		if e.Kind != "burnin" || e.Data["node"] != f.NodeID {
			continue
		}
		age := f.Now.Sub(e.Time)
		when := fmt.Sprintf("%s on %s", e.Data["verdict"], e.Time.Format("2006-01-02"))
		switch {
		case age > BurninMaxAge:
			it.Status, it.Evidence, it.Fix = Warn, "last burn-in "+when+", over 30 days ago", "gpuwarden burnin --quick"
		case e.Data["verdict"] == gpuwarden.VerdictFail:
			it.Status, it.Evidence, it.Fix = Fail, "last burn-in "+when+": "+e.Message, "replace the box, or gpuwarden burnin to recheck"
		case e.Data["verdict"] == gpuwarden.VerdictWarn:
			it.Status, it.Evidence, it.Fix = Warn, "last burn-in "+when, "see gpuwarden nodes"
		default:
			it.Status, it.Evidence = OK, "last burn-in "+when
		}
		return it
	}
	it.Status, it.Evidence, it.Fix = Fail, "no burn-in of this box ("+f.NodeID+") in the ledger", "gpuwarden burnin --quick"
	return it
}

func drill(f Facts) Item {
	it := Item{ID: "drill", Title: "a resume was proven"}
	if !f.Plan.Workload.Kind.Trains() {
		it.Status, it.Evidence = OK, fmt.Sprintf("the %s workload has nothing to resume", f.Plan.Workload.Kind)
		return it
	}
	for _, e := range f.Events {
		if e.Kind != "drill" {
			continue
		}
		if f.Now.Sub(e.Time) > DrillMaxAge {
			break
		}
		if e.Data["verdict"] == "PASS" {
			it.Status, it.Evidence = OK, fmt.Sprintf("drill passed on %s: %s", e.Time.Format("2006-01-02"), e.Data["command"])
		} else {
			it.Status, it.Evidence, it.Fix = Fail, e.Message, "fix the job's resume, then gpuwarden run --drill -- CMD"
		}
		return it
	}
	it.Status = Warn
	it.Evidence = "no resume drill in the last 30 days: a preemption may cost the whole run"
	it.Fix = "gpuwarden run --drill --checkpoint-dir DIR -- python train.py --resume {resume}"
	return it
}

func agentRunning(f Facts) Item {
	it := Item{ID: "agent", Title: "the agent watches this box"}
	switch {
	case !f.OnGPUBox:
		it.Status, it.Evidence = Warn, "not on the box: start the agent there before the first job"
		it.Fix = "on the box: gpuwarden up " + planArg(f) + "(or the systemd unit in packaging/systemd/)"
	case f.AgentRunning != nil && *f.AgentRunning:
		it.Status, it.Evidence = OK, "gpuwarden up answers on 127.0.0.1:7070"
	default:
		it.Status, it.Evidence = Fail, "no agent answers on 127.0.0.1:7070: nothing stops the box when it idles"
		it.Fix = "gpuwarden up " + planArg(f) + "(or sudo systemctl enable --now gpuwarden: the unit of the .deb and .rpm, packaging/systemd/gpuwarden.service)"
	}
	return it
}

func planArg(f Facts) string {
	if f.PlanPath == "" {
		return ""
	}
	return f.PlanPath + " "
}
