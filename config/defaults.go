package config

import (
	"math"
	"strings"

	"github.com/gpuwarden/gpuwarden"
)

// Default values that ApplyDefaults fills in; the starter file's comments
// quote the same figures.
const (
	// DefaultAdapterPercent is a LoRA adapter's size as a share of the model;
	// rank-16 adapters on the attention projections of a 7B are about 0.5 %.
	DefaultAdapterPercent = 0.5
	// DefaultSpotInterruptionsPerDay assumes a spot box is reclaimed about
	// every other day, a middle figure between quiet and busy regions.
	DefaultSpotInterruptionsPerDay = 0.5
	// DefaultRestartMinutes is the time from a reclaim to work resumed on a
	// new box: boot, image pull and checkpoint load.
	DefaultRestartMinutes = 10
	// DefaultCurrency is the budget currency when the plan names none.
	DefaultCurrency gpuwarden.Currency = "USD"
	// DefaultStorageKind is the storage product a plan is priced with when it
	// names none: disks attached to the box.
	DefaultStorageKind = "block"
	// DefaultOptimizer is the optimizer of full fine-tunes and pretraining.
	DefaultOptimizer = "adamw"
	// HoursPerSession is the length of a working day, used to count how many
	// idle windows an auto-shutdown box leaves on the bill.
	HoursPerSession = 8
)

// DefaultAlertsPercent returns the budget alert thresholds a plan gets when it
// names none; a fresh slice each call, so no caller can change another's.
func DefaultAlertsPercent() []int { return []int{50, 80, 100} }

// ApplyDefaults fills the fields a plan left out and normalises the case of
// country and currency codes (upper) and provider names (lower), so that every
// package compares them without caring how the file spelled them. Keywords
// such as kind and precision are left as written; validation names the
// accepted spellings instead of guessing. Zero means
// "not given" for every field it fills, so it is meant for a plan built from
// flags or decoded but not yet defaulted: Parse calls it once and then keeps
// the zeros a file wrote on purpose (spot_interruptions_per_day,
// restart_minutes, sessions_per_month), which a second call would replace.
func ApplyDefaults(p *gpuwarden.Plan) {
	if p == nil {
		return
	}
	if p.HoursPerMonth == 0 {
		p.HoursPerMonth = gpuwarden.DefaultHoursPerMonth
	}

	w := &p.Workload
	if w.Precision == "" {
		w.Precision = defaultPrecision(w.Kind)
	}
	if w.Batch == 0 && w.Layers > 0 && w.KVHeads > 0 && w.HeadDim > 0 && w.Context > 0 {
		w.Batch = 1
	}
	if w.Optimizer == "" && (w.Kind == gpuwarden.KindFinetuneFull || w.Kind == gpuwarden.KindPretrain) {
		w.Optimizer = DefaultOptimizer
	}
	if w.AdapterPercent == 0 && (w.Kind == gpuwarden.KindFinetuneLoRA || w.Kind == gpuwarden.KindFinetuneQLoRA) {
		w.AdapterPercent = DefaultAdapterPercent
	}

	if p.OnHours.AutoShutdownIdleMinutes > 0 && p.OnHours.SessionsPerMonth == 0 && p.WorkHours > 0 {
		p.OnHours.SessionsPerMonth = math.Ceil(p.WorkHours / HoursPerSession)
	}

	if p.Data.StorageKind == "" {
		p.Data.StorageKind = DefaultStorageKind
	}

	in := &p.Interruptions
	if in.Tolerance == "" {
		in.Tolerance = defaultTolerance(p)
	}
	if in.SpotInterruptionsPerDay == 0 {
		in.SpotInterruptionsPerDay = DefaultSpotInterruptionsPerDay
	}
	if in.RestartMinutes == 0 {
		in.RestartMinutes = DefaultRestartMinutes
	}

	p.Budget.Currency = upperCode(p.Budget.Currency)
	if p.Budget.Currency == "" {
		p.Budget.Currency = DefaultCurrency
	}
	// nil means "not given"; an empty list written as [] turns alerts off.
	if p.Budget.AlertsPercent == nil {
		p.Budget.AlertsPercent = DefaultAlertsPercent()
	}

	// New slices, not in-place edits: a YAML alias makes two fields share
	// one backing array, and countries must not lower-case providers.
	p.Residency.Countries = mapStrings(p.Residency.Countries, func(s string) string {
		return strings.ToUpper(strings.TrimSpace(s))
	})
	p.Residency.Regions = mapStrings(p.Residency.Regions, normaliseRegion)
	lower := func(s string) string { return strings.ToLower(strings.TrimSpace(s)) }
	p.Providers.Prefer = mapStrings(p.Providers.Prefer, lower)
	p.Providers.Exclude = mapStrings(p.Providers.Exclude, lower)
	if len(p.CurrencyRates) > 0 {
		rates := make(map[gpuwarden.Currency]gpuwarden.Micros, len(p.CurrencyRates))
		for code, rate := range p.CurrencyRates {
			up := upperCode(code)
			// Two spellings of one code: keep the one already canonical, so
			// the result does not depend on map order. Parse rejects this.
			if _, taken := rates[up]; taken && code != up {
				continue
			}
			rates[up] = rate
		}
		p.CurrencyRates = rates
	}
}

// defaultPrecision is how each kind usually stores weights: bf16 for
// everything but QLoRA, whose base model is quantised to NF4 by definition.
func defaultPrecision(k gpuwarden.WorkloadKind) gpuwarden.Precision {
	switch k {
	case gpuwarden.KindFinetuneQLoRA:
		return gpuwarden.NF4
	case gpuwarden.KindInference, gpuwarden.KindFinetuneLoRA, gpuwarden.KindFinetuneFull,
		gpuwarden.KindPretrain, gpuwarden.KindNotebook, gpuwarden.KindRender:
		return gpuwarden.BF16
	}
	return "" // an unknown kind gets no guess; validation reports the kind
}

// defaultTolerance guesses how the job survives losing its box: a job that
// checkpoints resumes, a render loses only its frame, anything else is lost.
func defaultTolerance(p *gpuwarden.Plan) gpuwarden.Tolerance {
	switch {
	case p.Data.CheckpointIntervalMinutes > 0:
		return gpuwarden.TolerateCheckpointed
	case p.Workload.Kind == gpuwarden.KindRender:
		return gpuwarden.TolerateStateless
	}
	return gpuwarden.TolerateNone
}

func upperCode(c gpuwarden.Currency) gpuwarden.Currency {
	return gpuwarden.Currency(strings.ToUpper(strings.TrimSpace(string(c))))
}

// normaliseRegion lower-cases the provider of a "provider:region" entry, as
// provider names are everywhere; the region keeps the provider's spelling.
func normaliseRegion(r string) string {
	r = strings.TrimSpace(r)
	if provider, region, ok := strings.Cut(r, ":"); ok {
		return strings.ToLower(strings.TrimSpace(provider)) + ":" + strings.TrimSpace(region)
	}
	return r
}

// mapStrings returns f applied to each of in, as a new slice; nil stays nil so
// that a plan's JSON does not change shape.
func mapStrings(in []string, f func(string) string) []string {
	if in == nil {
		return nil
	}
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = f(s)
	}
	return out
}
