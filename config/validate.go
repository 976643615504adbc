package config

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/yamlerr"
	"github.com/gpuwarden/gpuwarden/launch"
	"github.com/gpuwarden/gpuwarden/notify"
)

// Limits the validation enforces.
const (
	// MaxParamsB caps model size at 100 trillion parameters; anything larger
	// is a unit mistake (parameters written out instead of billions).
	MaxParamsB = 100_000
	// MaxHoursPerMonth is the longest calendar month, 31 × 24.
	MaxHoursPerMonth = 744
	// MaxIdleMinutes keeps auto-shutdown below a day; a longer idle timer
	// never fires in a working week and only hides a box left on.
	MaxIdleMinutes = 1440
	// MaxSpotInterruptionsPerDay is one reclaim an hour, the worst a spot
	// market is worth planning for.
	MaxSpotInterruptionsPerDay = 24
	// MaxAlertPercent lets alerts fire up to ten times over the limit.
	MaxAlertPercent = 1000
)

// StorageKinds lists the storage products a plan may price.
var StorageKinds = []string{"block", "object", "volume"}

// Optimizers lists the optimizers whose state sizing knows.
var Optimizers = []string{"adamw", "adamw-8bit"}

// Tolerances lists the interruption tolerances in the order help shows them.
var Tolerances = []gpuwarden.Tolerance{gpuwarden.TolerateNone, gpuwarden.TolerateCheckpointed,
	gpuwarden.TolerateStateless}

// checker collects the first failed rule; rules run in the order of the
// plan file's sections, so the error shown is the first one a reader meets.
type checker struct {
	idx index
	err *yamlerr.FieldError
}

// fail records a problem with the value at path.
func (c *checker) fail(path, msg, hint string) {
	if c.err == nil {
		c.err = &yamlerr.FieldError{At: c.idx.at(path), Field: path, Msg: msg, Hint: hint}
	}
}

// failKey records a problem with a mapping key rather than its value.
func (c *checker) failKey(path, msg, hint string) {
	if c.err == nil {
		at := c.idx.at(path)
		if e := c.idx[path]; e != nil {
			at = e.key
		}
		c.err = &yamlerr.FieldError{At: at, Field: path, Msg: msg, Hint: hint}
	}
}

// nonNegative checks a quantity that cannot be below zero.
func (c *checker) nonNegative(path string, v float64, hint string) {
	if v < 0 {
		c.fail(path, "must not be negative", hint)
	}
}

// checkRaw checks what ApplyDefaults would hide: the spelling of
// currency_rates keys, which it upper-cases and so may merge.
func checkRaw(p *gpuwarden.Plan, idx index) *yamlerr.FieldError {
	c := &checker{idx: idx}
	keys := make([]string, 0, len(p.CurrencyRates))
	for k := range p.CurrencyRates {
		keys = append(keys, string(k))
	}
	sortByPosition(keys, "currency_rates", idx)
	seen := map[gpuwarden.Currency]string{}
	for _, k := range keys {
		path := childPath("currency_rates", k)
		code := upperCode(gpuwarden.Currency(k))
		if !isLetters(string(code), 3) {
			c.failKey(path, fmt.Sprintf("%q is not a three-letter currency code", k),
				"an ISO 4217 code such as EUR or GBP, saying what one unit is worth in the budget currency")
		}
		if first, dup := seen[code]; dup {
			c.failKey(path, fmt.Sprintf("same currency as %s", first), "give each currency once")
		}
		seen[code] = k
		if p.CurrencyRates[gpuwarden.Currency(k)] <= 0 {
			c.fail(path, "must be greater than 0",
				"what one unit of this currency is worth in the budget currency, e.g. EUR: 1.08 for a USD budget")
		}
	}
	return c.err
}

// validate checks a defaulted plan; idx tells which fields the file wrote and
// where, so that an explicit 0 is not mistaken for a field left out.
func validate(p *gpuwarden.Plan, idx index) *yamlerr.FieldError {
	c := &checker{idx: idx}
	if strings.ContainsAny(p.Name, "\r\n") {
		c.fail("name", "must be one line", "the name labels reports and alerts; keep it short")
	}
	validateWorkload(c, &p.Workload)

	const monthHint = "hours in a billing month: 730 (the default, 365 × 24 / 12), 720, or 744 for 31 days"
	if idx.zero("hours_per_month") || p.HoursPerMonth <= 0 || p.HoursPerMonth > MaxHoursPerMonth {
		c.fail("hours_per_month", fmt.Sprintf("must be greater than 0 and at most %d", MaxHoursPerMonth), monthHint)
	}
	const workHint = "hours per month the GPU is busy on real work, e.g. 120; or state the work as an amount (tokens_b, frames, requests_per_second: docs/sizing.md)"
	amount := p.Workload.HasAmount()
	switch {
	case p.WorkHours == 0 && !idx.has("work_hours") && amount:
		// The amount gives each box its hours.
	case amount && p.Workload.Kind != gpuwarden.KindInference:
		c.fail("work_hours", "give work_hours or the work as an amount, not both",
			"with an amount plan works out each box's hours; work_hours would be the same on every card")
	case p.WorkHours == 0 && !idx.has("work_hours"):
		c.fail("work_hours", "required", workHint)
	case p.WorkHours <= 0:
		c.fail("work_hours", "must be greater than 0", workHint)
	case p.WorkHours > p.HoursPerMonth:
		c.fail("work_hours", fmt.Sprintf("%s is more than the %s hours of a month (hours_per_month)",
			num(p.WorkHours), num(p.HoursPerMonth)), "work_hours counts busy hours within one month")
	}

	if v := p.OnHours.AutoShutdownIdleMinutes; v < 0 || v >= MaxIdleMinutes {
		c.fail("on_hours.auto_shutdown_idle_minutes", fmt.Sprintf("must be at least 0 and less than %d", MaxIdleMinutes),
			"minutes idle before the box is stopped; 0 turns auto-shutdown off")
	}
	if st := p.OnHours.Stop; st != "" && !slices.Contains(gpuwarden.StopModes, st) {
		c.fail("on_hours.stop", fmt.Sprintf("%q is not a stop mode", st),
			"one of: "+strings.Join(gpuwarden.StopModes, ", ")+"; auto is what ends the provider's bill")
	}
	if p.OnHours.Stop == "command" && strings.TrimSpace(p.OnHours.StopCommand) == "" {
		c.fail("on_hours.stop_command", "required with stop: command", "the command that stops the box, e.g. az vm deallocate --ids …")
	}
	c.nonNegative("on_hours.sessions_per_month", p.OnHours.SessionsPerMonth,
		"work sessions per month, each ending in one idle window; leave it out for one per 8 work hours")

	const gbHint = "a monthly volume in GB; leave it out or write 0 for none"
	c.nonNegative("data.egress_gb.internet", p.Data.EgressGB.Internet, gbHint)
	c.nonNegative("data.egress_gb.inter_region", p.Data.EgressGB.InterRegion, gbHint)
	c.nonNegative("data.egress_gb.intra_region", p.Data.EgressGB.IntraRegion, gbHint)
	c.nonNegative("data.storage_gb", p.Data.StorageGB, "GB kept all month; leave it out or write 0 for none")
	if !slices.Contains(StorageKinds, p.Data.StorageKind) {
		c.fail("data.storage_kind", fmt.Sprintf("%q is not a storage kind", p.Data.StorageKind),
			"one of: "+strings.Join(StorageKinds, ", "))
	}
	c.nonNegative("data.checkpoint_gb", p.Data.CheckpointGB, "the size of one checkpoint in GB")
	c.nonNegative("data.checkpoint_interval_minutes", p.Data.CheckpointIntervalMinutes,
		"minutes between checkpoints; leave it out if the job does not checkpoint")

	in := p.Interruptions
	if !slices.Contains(Tolerances, in.Tolerance) {
		c.fail("interruptions.tolerance", fmt.Sprintf("%q is not a tolerance", in.Tolerance),
			"one of: "+joinStrings(Tolerances))
	}
	if v := in.SpotInterruptionsPerDay; v < 0 || v > MaxSpotInterruptionsPerDay {
		c.fail("interruptions.spot_interruptions_per_day", fmt.Sprintf("must be between 0 and %d", MaxSpotInterruptionsPerDay),
			"expected spot reclaims per day; 0.5 (the default) is one every other day")
	}
	c.nonNegative("interruptions.restart_minutes", in.RestartMinutes,
		"minutes from a reclaim to work resumed on a new box (default 10)")

	validateBudget(c, &p.Budget)
	if p.Deadline != "" {
		if _, err := gpuwarden.ParseDeadline(p.Deadline); err != nil {
			c.fail("deadline", fmt.Sprintf("%q is not a deadline", p.Deadline), "a duration such as 72h, 10d or 2w")
		} else if !amount {
			c.fail("deadline", "needs the work as an amount", "with work_hours every box takes the same hours; state tokens_b, frames or a load instead")
		}
	}

	for i, country := range p.Residency.Countries {
		if !isLetters(country, 2) {
			c.fail(fmt.Sprintf("residency.countries[%d]", i), fmt.Sprintf("%q is not a two-letter country code", country),
				"ISO 3166 alpha-2 codes such as DE, FR or US")
		}
	}
	for i, region := range p.Residency.Regions {
		if region == "" || strings.HasSuffix(region, ":") || strings.HasPrefix(region, ":") {
			c.fail(fmt.Sprintf("residency.regions[%d]", i), fmt.Sprintf("%q is not a region", region),
				"write provider:region such as aws:eu-central-1, or just the region")
		}
	}

	for i, name := range p.Providers.Prefer {
		if name == "" {
			c.fail(fmt.Sprintf("providers.prefer[%d]", i), "must not be empty", "a provider name such as aws or runpod")
		}
	}
	for i, name := range p.Providers.Exclude {
		switch {
		case name == "":
			c.fail(fmt.Sprintf("providers.exclude[%d]", i), "must not be empty", "a provider name such as aws or runpod")
		case slices.Contains(p.Providers.Prefer, name):
			c.fail(fmt.Sprintf("providers.exclude[%d]", i), fmt.Sprintf("%q is also in providers.prefer", name),
				"a provider is either preferred or excluded, not both")
		}
	}
	for i, f := range p.Catalogs {
		if strings.TrimSpace(f) == "" {
			c.fail(fmt.Sprintf("catalogs[%d]", i), "must not be empty", "a price file path, relative to the plan file")
		}
	}
	if b := p.Box; b != nil {
		if b.HourlyRate < 0 {
			c.fail("box.hourly_rate", "must not be negative", "the box's price per hour in the budget currency")
		}
		if b.Billing != "" && b.Billing != "on-demand" && b.Billing != "spot" {
			c.fail("box.billing", fmt.Sprintf("unknown billing %q", b.Billing), "one of: on-demand, spot")
		}
		if b.HourlyRate == 0 && (b.Provider == "" || b.Instance == "") {
			c.fail("box", "needs hourly_rate, or provider and instance to find the rate in the catalog",
				"e.g. box: {hourly_rate: 0.80} or box: {provider: aws, region: us-east-1, instance: g6.xlarge}")
		}
	}
	validateLaunch(c, p)
	for k, v := range p.Labels {
		if k == "ttl" {
			if _, err := time.ParseDuration(v); err != nil {
				c.fail("labels.ttl", fmt.Sprintf("%q is not a duration", v), "e.g. ttl: 72h")
			}
		}
	}
	for i, w := range p.Webhooks {
		// pagerduty://ROUTING_KEY is notify's short form of PagerDuty's
		// events URL; FORMAT+https://… names the body format on the URL.
		_, bare, _ := notify.SplitFormat(w)
		if u, err := url.Parse(bare); err != nil || (u.Scheme != "https" && u.Scheme != "http" && u.Scheme != "pagerduty") || u.Host == "" {
			c.fail(fmt.Sprintf("webhooks[%d]", i), "is not an http(s) or pagerduty:// URL",
				"e.g. https://hooks.slack.com/services/…, pagerduty://ROUTING_KEY or json+https://… (docs/alerts.md)")
		}
	}
	return c.err
}

// validateLaunch checks the targets and launch rules with the launcher's
// own rules, pointing at the field in the file.
func validateLaunch(c *checker, p *gpuwarden.Plan) {
	names := map[string]int{}
	for i, t := range p.Targets {
		path := fmt.Sprintf("targets[%d]", i)
		var fe *launch.FieldError
		if err := launch.ValidateTarget(t); errors.As(err, &fe) {
			c.fail(path+"."+fe.Field, fe.Problem, "see the targets: section of `gpuwarden init`'s template")
		} else if err != nil {
			c.fail(path, err.Error(), "")
		}
		if j, dup := names[t.Name]; dup {
			c.fail(path+".name", fmt.Sprintf("%q is also the name of targets[%d]", t.Name, j), "each target needs its own name")
		}
		names[t.Name] = i
	}
	for i, r := range p.LaunchRules {
		path := fmt.Sprintf("launch_rules[%d]", i)
		var fe *launch.FieldError
		if err := launch.ValidateRule(r); errors.As(err, &fe) {
			c.fail(path+"."+fe.Field, fe.Problem, "class: capacity, quota, auth, config or unknown; scope: zone, region or provider")
		} else if err != nil {
			c.fail(path, err.Error(), "")
		}
	}
}

// validateWorkload checks what sizing needs to know about the job.
func validateWorkload(c *checker, w *gpuwarden.Workload) {
	kindHint := "one of: " + joinStrings(gpuwarden.WorkloadKinds)
	switch {
	case w.Kind == "":
		c.fail("workload.kind", "required", kindHint)
	case !w.Kind.Valid():
		c.fail("workload.kind", fmt.Sprintf("%q is not a workload kind", w.Kind), kindHint)
	}

	const paramsHint = "the model size in billions of parameters: 7 for a 7B model, 0.5 for 500M"
	switch {
	case w.ParamsB < 0:
		c.fail("workload.params_b", "must be greater than 0", paramsHint)
	case w.ParamsB > MaxParamsB:
		c.fail("workload.params_b", fmt.Sprintf("must be at most %d (it counts billions)", MaxParamsB), paramsHint)
	case w.ParamsB == 0 && needsParams(w.Kind) && w.VRAMGB <= 0:
		if c.idx.has("workload.params_b") {
			c.fail("workload.params_b", "must be greater than 0", paramsHint)
		} else {
			c.fail("workload.params_b", fmt.Sprintf("required for kind %s", w.Kind),
				paramsHint+"; or give the memory need outright with vram_gb")
		}
	}
	// An empty precision after defaults means the kind was unknown, which is
	// reported above.
	if w.Precision != "" && !slices.Contains(gpuwarden.Precisions, w.Precision) {
		c.fail("workload.precision", fmt.Sprintf("%q is not a precision", w.Precision),
			"one of: "+joinStrings(gpuwarden.Precisions))
	}

	kv := []struct {
		name string
		v    int
	}{{"layers", w.Layers}, {"kv_heads", w.KVHeads}, {"head_dim", w.HeadDim}, {"context", w.Context}, {"batch", w.Batch}}
	for _, f := range kv {
		if f.v < 0 {
			c.fail("workload."+f.name, "must not be negative", "a whole number such as 32")
		}
	}
	var given, missing []string
	for _, f := range kv[:4] { // batch has a default; the shape does not
		if f.v > 0 {
			given = append(given, f.name)
		} else {
			missing = append(missing, f.name)
		}
	}
	if len(given) > 0 && len(missing) > 0 {
		c.fail("workload."+missing[0], "required with "+andList(given)+" to size the KV cache",
			"give all of layers, kv_heads, head_dim and context (from the model's config.json), or none")
	}

	if w.Optimizer != "" && !slices.Contains(Optimizers, w.Optimizer) {
		c.fail("workload.optimizer", fmt.Sprintf("%q is not an optimizer", w.Optimizer),
			"one of: "+strings.Join(Optimizers, ", "))
	}
	if c.idx.zero("workload.adapter_percent") || w.AdapterPercent < 0 || w.AdapterPercent > 100 {
		c.fail("workload.adapter_percent", "must be greater than 0 and at most 100",
			"adapter parameters as a percentage of the model; LoRA adapters are typically 0.1 to 1")
	}
	c.nonNegative("workload.activations_gb", w.ActivationsGB, "activation memory in GB; leave it out for the rule of thumb")
	c.nonNegative("workload.vram_gb", w.VRAMGB, "the GPU memory the job needs in GB")

	validateAmount(c, w)

	if t := w.Throughput; t != nil {
		const unitHint = `name one result: "epoch", "1k requests", "frame"`
		if strings.TrimSpace(t.Unit) == "" {
			c.fail("workload.throughput.unit", "required", unitHint)
		}
		c.nonNegative("workload.throughput.per_hour", t.PerHour, "results per working hour on one box")
		if t.PerHour == 0 && len(t.PerHourByGPU) == 0 {
			c.fail("workload.throughput", "give per_hour, per_hour_by_gpu or both",
				"results per working hour: per_hour for any box, per_hour_by_gpu for one GPU model")
		}
		base := "workload.throughput.per_hour_by_gpu"
		gpus := make([]string, 0, len(t.PerHourByGPU))
		for g := range t.PerHourByGPU {
			gpus = append(gpus, g)
		}
		sortByPosition(gpus, base, c.idx)
		for _, g := range gpus {
			path := childPath(base, g)
			if strings.TrimSpace(g) == "" {
				c.failKey(path, "GPU model must not be empty", "a GPU model name such as H100-SXM or A100-80GB")
			}
			if t.PerHourByGPU[g] <= 0 {
				c.fail(path, "must be greater than 0", "results per working hour on one box with this GPU")
			}
		}
	}
}

// MaxMFU is the highest model FLOPs utilisation a plan may claim: 100 %
// of the dense peak is the ceiling no run reaches.
const MaxMFU = 1

// validateAmount checks the work stated as an amount: each figure
// positive, the pairs complete, and each kind's own fields only.
func validateAmount(c *checker, w *gpuwarden.Workload) {
	type field struct {
		path string
		v    float64
		hint string
	}
	fields := []field{
		{"tokens_b", w.TokensB, "training tokens in billions: 2000 for 2T"},
		{"epochs", w.Epochs, "passes over the dataset, with dataset_tokens_b"},
		{"dataset_tokens_b", w.DatasetTokensB, "tokens in one epoch, in billions"},
		{"samples", w.Samples, "training examples, with tokens_per_sample"},
		{"tokens_per_sample", w.TokensPerSample, "mean tokens per example, padding included"},
		{"requests_per_second", w.RequestsPerSecond, "the load to serve, with prompt_tokens and output_tokens"},
		{"prompt_tokens", w.PromptTokens, "mean prompt tokens per request"},
		{"output_tokens", w.OutputTokens, "mean generated tokens per request"},
		{"tokens_per_second", w.TokensPerSecond, "generated tokens per second to serve"},
		{"p95_latency_s", w.P95LatencySeconds, "seconds a request may take at the 95th percentile"},
		{"frames", w.Frames, "frames to render, with seconds_per_frame and reference_gpu"},
		{"seconds_per_frame", w.SecondsPerFrame, "seconds one frame takes on reference_gpu"},
		{"mfu", w.MFU, "model FLOPs utilisation, e.g. 0.4; leave it out for the default (docs/sizing.md)"},
	}
	for _, f := range fields {
		path := "workload." + f.path
		if f.v < 0 || c.idx.zero(path) || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			c.fail(path, "must be greater than 0", f.hint)
		}
	}
	if w.MFU > MaxMFU {
		c.fail("workload.mfu", "must be at most 1", "a share of the dense peak, e.g. 0.4")
	}
	// A missing half is reported at the half that is there: a field left
	// out has no line to point at.
	pair := func(a string, av float64, b string, bv float64) {
		switch {
		case av > 0 && bv <= 0:
			c.fail("workload."+a, "needs "+b, "give both "+a+" and "+b)
		case bv > 0 && av <= 0:
			c.fail("workload."+b, "needs "+a, "give both "+a+" and "+b)
		}
	}
	only := func(ok bool, path string, v float64, kinds string) {
		if v > 0 && !ok {
			c.fail("workload."+path, fmt.Sprintf("does not apply to kind %s", w.Kind), "it states work for "+kinds)
		}
	}
	trains, infer, render := w.Kind.Trains(), w.Kind == gpuwarden.KindInference, w.Kind == gpuwarden.KindRender
	for _, f := range fields[:5] {
		only(trains, f.path, f.v, "training kinds (pretrain, finetune-*)")
	}
	for _, f := range fields[5:10] {
		only(infer, f.path, f.v, "kind inference")
	}
	for _, f := range fields[10:12] {
		only(render, f.path, f.v, "kind render")
	}
	only(trains || infer, "mfu", w.MFU, "training and inference kinds")
	if c.err != nil {
		return
	}
	pair("epochs", w.Epochs, "dataset_tokens_b", w.DatasetTokensB)
	pair("samples", w.Samples, "tokens_per_sample", w.TokensPerSample)
	if n := countPositive(w.TokensB, w.Epochs, w.Samples); n > 1 {
		c.fail("workload.tokens_b", "give one of tokens_b, epochs × dataset_tokens_b or samples × tokens_per_sample", "they state the same amount three ways")
	}
	if w.RequestsPerSecond > 0 {
		pair("requests_per_second", w.RequestsPerSecond, "output_tokens", w.OutputTokens)
		pair("requests_per_second", w.RequestsPerSecond, "prompt_tokens", w.PromptTokens)
		if w.TokensPerSecond > 0 {
			c.fail("workload.tokens_per_second", "give requests_per_second or tokens_per_second, not both", "tokens_per_second is a load without a request shape")
		}
	} else {
		pair("requests_per_second", w.RequestsPerSecond, "prompt_tokens", w.PromptTokens)
		pair("requests_per_second", w.RequestsPerSecond, "output_tokens", w.OutputTokens)
	}
	if w.P95LatencySeconds > 0 && w.RequestsPerSecond <= 0 {
		c.fail("workload.p95_latency_s", "needs requests_per_second", "a latency target is per request")
	}
	pair("frames", w.Frames, "seconds_per_frame", w.SecondsPerFrame)
	if w.Frames > 0 {
		if w.ReferenceGPU == "" {
			c.fail("workload.frames", "needs reference_gpu", "the card seconds_per_frame was timed on, e.g. RTX-4090")
		} else if _, ok := gpuwarden.DatasheetOf(w.ReferenceGPU); !ok {
			c.fail("workload.reference_gpu", fmt.Sprintf("%q is not in the GPU datasheet", w.ReferenceGPU), "a model name such as RTX-4090, L40S or A10G")
		}
	} else if w.ReferenceGPU != "" {
		c.fail("workload.reference_gpu", "needs frames and seconds_per_frame", "the card seconds_per_frame was timed on")
	}
	if w.Kind.Trains() && w.TrainingTokens() > 0 && w.ParamsB <= 0 {
		c.fail("workload.params_b", "required with an amount of training", "the model size sets the FLOPs per token")
	}
	if infer && (w.RequestsPerSecond > 0 || w.TokensPerSecond > 0) && w.ParamsB <= 0 {
		c.fail("workload.params_b", "required with an inference load", "the model size sets the bytes read per token")
	}
}

func countPositive(vs ...float64) int {
	n := 0
	for _, v := range vs {
		if v > 0 {
			n++
		}
	}
	return n
}

// needsParams reports whether sizing a kind needs the model size: every kind
// that holds a model, but not notebooks and renders, which size by vram_gb.
func needsParams(k gpuwarden.WorkloadKind) bool {
	switch k {
	case gpuwarden.KindInference, gpuwarden.KindFinetuneLoRA, gpuwarden.KindFinetuneQLoRA,
		gpuwarden.KindFinetuneFull, gpuwarden.KindPretrain:
		return true
	}
	return false
}

// validateBudget checks the limit, its currency and the alert thresholds.
func validateBudget(c *checker, b *gpuwarden.Budget) {
	if b.MonthlyLimit < 0 {
		c.fail("budget.monthly_limit", "must not be negative", "the monthly limit in the budget currency; 0 means no limit")
	}
	if !isLetters(string(b.Currency), 3) {
		c.fail("budget.currency", fmt.Sprintf("%q is not a three-letter currency code", b.Currency),
			"an ISO 4217 code such as USD, EUR or GBP")
	}
	const alertHint = "percentages of the monthly limit in ascending order, e.g. [50, 80, 100]; [] for none"
	for i, a := range b.AlertsPercent {
		path := fmt.Sprintf("budget.alerts_percent[%d]", i)
		switch {
		case a < 1 || a > MaxAlertPercent:
			c.fail(path, fmt.Sprintf("must be between 1 and %d, not %d", MaxAlertPercent, a), alertHint)
		case i > 0 && a <= b.AlertsPercent[i-1]:
			c.fail(path, fmt.Sprintf("%d must be greater than the threshold before it (%d)", a, b.AlertsPercent[i-1]),
				alertHint)
		}
	}
}

// isLetters reports whether s is exactly n letters A–Z.
func isLetters(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := range len(s) {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

// sortByPosition orders map keys as the file wrote them, so that the first
// error reported is the first in the file and not the first in map order.
func sortByPosition(keys []string, base string, idx index) {
	sort.Slice(keys, func(i, j int) bool {
		a, b := idx.at(childPath(base, keys[i])), idx.at(childPath(base, keys[j]))
		if a != b {
			return a.Line < b.Line || a.Line == b.Line && a.Col < b.Col
		}
		return keys[i] < keys[j]
	})
}

// joinStrings joins the values of a string-based type for a hint.
func joinStrings[T ~string](vs []T) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}

// num prints a float the way a user would write it.
func num(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// andList joins names as a sentence does: "a", "a and b", "a, b and c".
func andList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// Names answers whether a provider or region is one gpuwarden knows, with
// an EInvalid *gpuwarden.Error that suggests the nearest known name when it
// is not; *catalog.Names, built from the loaded catalog, is one.
type Names interface {
	CheckProvider(name string) error
	CheckRegion(provider, region string) error
}

// CheckNames checks the provider and region names the plan gives against
// names, so that a typo ("awz") is an error at its line rather than a rule
// that quietly matches no offer: providers.prefer and providers.exclude,
// the provider and region of each residency.regions entry, and box.provider
// and box.region when the box's rate is looked up in the catalog. Launch
// targets are not checked, since they may name providers no catalog prices.
// The first unknown name is an EInvalid error at FILE:LINE:COL.
func (f *File) CheckNames(n Names) error {
	p := f.Plan
	c := &checker{idx: f.idx}
	check := func(path string, err error) {
		var e *gpuwarden.Error
		if errors.As(err, &e) {
			c.fail(path, e.Message, e.Hint)
		} else if err != nil {
			c.fail(path, err.Error(), "check the spelling")
		}
	}
	for i, r := range p.Residency.Regions {
		path := fmt.Sprintf("residency.regions[%d]", i)
		provider, region, ok := strings.Cut(r, ":")
		if !ok {
			provider, region = "", r
		}
		check(path, n.CheckProvider(provider))
		check(path, n.CheckRegion(provider, region))
	}
	for i, name := range p.Providers.Prefer {
		check(fmt.Sprintf("providers.prefer[%d]", i), n.CheckProvider(name))
	}
	for i, name := range p.Providers.Exclude {
		check(fmt.Sprintf("providers.exclude[%d]", i), n.CheckProvider(name))
	}
	if b := p.Box; b != nil && b.HourlyRate == 0 {
		check("box.provider", n.CheckProvider(b.Provider))
		check("box.region", n.CheckRegion(b.Provider, b.Region))
	}
	if c.err != nil {
		return c.err.ToError(f.name)
	}
	return nil
}
