package catalog

import (
	"strings"

	"github.com/gpuwarden/gpuwarden"
)

// Filter narrows offers to those a user asked for on the command line; a
// zero field matches every offer.
type Filter struct {
	// GPU is a model or a family: "A100-80GB" matches that model only,
	// "A100" both A100 models, "H100" the SXM, PCIe and NVL cards.
	GPU string
	// MinVRAMGB is the least GPU memory of the whole box (all its GPUs), the
	// figure a sharded model needs; per-GPU limits are the planner's call.
	MinVRAMGB float64
	// Provider, Region and Country compare without regard to case; Country
	// is an ISO 3166 code and falls back to the region table.
	Provider, Region, Country string
	// MaxHourly caps the cheapest hourly price of the offer, spot or
	// on-demand, in the offer's own currency; monthly-only offers count
	// their monthly price over 730 hours.
	MaxHourly gpuwarden.Micros
}

// Match reports whether an offer passes every field of the filter.
func (f Filter) Match(o gpuwarden.Offer) bool {
	if f.GPU != "" && !gpuMatches(f.GPU, o) {
		return false
	}
	if f.MinVRAMGB > 0 && o.VRAMGB() < f.MinVRAMGB {
		return false
	}
	if f.Provider != "" && !strings.EqualFold(normalizeProvider(f.Provider), o.Provider) {
		return false
	}
	if f.Region != "" && !strings.EqualFold(strings.TrimSpace(f.Region), o.Region) {
		return false
	}
	if f.Country != "" {
		country := o.Country
		if country == "" {
			country = CountryOf(o.Provider, o.Region)
		}
		if !strings.EqualFold(strings.TrimSpace(f.Country), country) {
			return false
		}
	}
	if f.MaxHourly > 0 {
		h := cheapestHourly(o)
		if h == 0 || h > f.MaxHourly {
			return false
		}
	}
	return true
}

// gpuMatches compares canonical names, and lets a family name ("A100") stand
// for all its models ("A100-40GB", "A100-80GB").
func gpuMatches(want string, o gpuwarden.Offer) bool {
	got := CanonicalGPU(o.GPU, o.VRAMGBPerGPU)
	wantModel := CanonicalGPU(want, 0)
	if strings.EqualFold(wantModel, got) {
		return true
	}
	// A model without its form factor ("A100-80GB") stands for every form
	// of it (A100-80GB-SXM, A100-80GB-PCIe).
	if rest, ok := cutPrefixFold(got, wantModel+"-"); ok && (strings.EqualFold(rest, "SXM") || strings.EqualFold(rest, "PCIe")) {
		return true
	}
	tokens, mem := gpuTokens(want)
	if len(tokens) != 1 || mem > 0 {
		return false
	}
	return len(got) > len(tokens[0]) && strings.EqualFold(got[:len(tokens[0])+1], tokens[0]+"-")
}

// cheapestHourly is the lowest hourly price an offer lists, 0 when none.
func cheapestHourly(o gpuwarden.Offer) gpuwarden.Micros {
	h := minPositive(o.OnDemandHourly, o.SpotHourly)
	if h == 0 && o.Monthly > 0 {
		h = gpuwarden.Micros((int64(o.Monthly) + gpuwarden.DefaultHoursPerMonth/2) / gpuwarden.DefaultHoursPerMonth)
	}
	return h
}

// cutPrefixFold is strings.CutPrefix without regard to case.
func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return s, false
	}
	return s[len(prefix):], true
}
