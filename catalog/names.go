package catalog

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/suggest"
)

// gpuModels are the canonical names CanonicalGPU gives the models it knows
// by name; with the GPU table and the offers read they are the GPU names a
// filter can mean. TestGPUModelsAreCanonical keeps the list in step with
// canonicalGPU.
var gpuModels = []string{
	"H100-SXM", "H100-PCIe", "H100-NVL", "GH200", "H200", "H200-NVL", "B200",
	"A100-80GB", "A100-40GB", "A800", "A10G", "A10", "A40", "A30",
	"L40S", "L40", "L4", "T4", "V100", "V100-32GB", "P100", "P4", "K80",
	"RTX-3060", "RTX-3070", "RTX-3080", "RTX-3090", "RTX-3090-TI", "RTX-4070", "RTX-4080", "RTX-4080-SUPER",
	"RTX-4090", "RTX-5090", "RTX-A4000", "RTX-A4500", "RTX-A5000", "RTX-A6000", "RTX-4000-ADA", "RTX-6000-ADA",
}

// Names is what gpuwarden knows by name once a catalog is loaded: GPU
// models and families, providers and their regions. It tells a typo
// ("H1OO", "awz", "us-est-1"), which is an error with a suggestion, from a
// name that is right but matches no offer, which is an empty answer.
// Names compare as Filter compares them: without regard to case, and GPU
// names in any of the spellings CanonicalGPU reads.
type Names struct {
	gpus      []gpuwarden.Offer // one per known model and offer GPU, for gpuMatches
	gpuNames  []string          // what GPU suggestions are made from, families first
	providers map[string]bool   // lower case
	// regions maps a provider to its regions, lower case, to the region
	// as written.
	regions map[string]map[string]string
}

// KnownNames gathers the names cat's offers, egress tiers and storage rates
// use, and those of the built-in GPU model, provider and region tables, so
// that a provider or region the user's own price file adds is known too.
func KnownNames(cat *gpuwarden.Catalog) *Names {
	n := &Names{providers: map[string]bool{}, regions: map[string]map[string]string{}}
	type gpuKey struct {
		name string
		vram float64
	}
	seenGPU := map[gpuKey]bool{}
	addGPU := func(name string, vram float64) {
		if name == "" || seenGPU[gpuKey{name, vram}] {
			return
		}
		seenGPU[gpuKey{name, vram}] = true
		n.gpus = append(n.gpus, gpuwarden.Offer{GPU: name, VRAMGBPerGPU: vram})
	}
	for _, m := range gpuModels {
		addGPU(m, 0)
	}
	if table, err := gpuTable(); err == nil {
		for _, g := range table {
			addGPU(g.Model, 0)
		}
	}
	for p := range knownProviders {
		n.providers[p] = true
	}
	if table, err := regionTable(); err == nil {
		for key := range table {
			p, r, _ := strings.Cut(key, "\x00")
			n.addRegion(p, r)
		}
	}
	if cat != nil {
		// A million offers name a few hundred places: look each up once.
		type place struct{ provider, region string }
		seenPlace := map[place]bool{}
		for _, o := range cat.Offers.All() {
			addGPU(o.GPU, o.VRAMGBPerGPU)
			if pl := (place{o.Provider, o.Region}); !seenPlace[pl] {
				seenPlace[pl] = true
				n.addRegion(o.Provider, o.Region)
			}
		}
		for _, e := range cat.Egress {
			n.providers[normalizeProvider(e.Provider)] = true
		}
		for _, s := range cat.Storage {
			n.providers[normalizeProvider(s.Provider)] = true
		}
	}
	names := map[string]bool{}
	for _, o := range n.gpus {
		names[o.GPU] = true
		if family, _, ok := strings.Cut(o.GPU, "-"); ok {
			names[family] = true
		}
	}
	for name := range names {
		n.gpuNames = append(n.gpuNames, name)
	}
	sort.Strings(n.gpuNames)
	return n
}

// addRegion records a provider and one of its regions.
func (n *Names) addRegion(provider, region string) {
	p := normalizeProvider(provider)
	if p == "" {
		return
	}
	n.providers[p] = true
	region = strings.TrimSpace(region)
	if region == "" {
		return
	}
	if n.regions[p] == nil {
		n.regions[p] = map[string]string{}
	}
	if _, ok := n.regions[p][strings.ToLower(region)]; !ok {
		n.regions[p][strings.ToLower(region)] = region
	}
}

// CheckGPU reports whether name is a GPU model or family that a filter can
// mean ("H100", "a100-80gb", "RTX4090", a model only the catalog's offers
// name), as nil, or else an EInvalid error that names the nearest known
// model. An empty name is no filter, and fine.
func (n *Names) CheckGPU(name string) error {
	if strings.TrimSpace(name) == "" {
		return nil
	}
	for _, o := range n.gpus {
		if gpuMatches(name, o) {
			return nil
		}
	}
	key := func(s string) string { t, _ := gpuTokens(s); return strings.Join(t, "") }
	return unknownName("GPU", name, suggestName(key(name), n.gpuNames, key), "GPU models gpuwarden knows: ", n.gpuNames)
}

// CheckProvider reports whether name is a provider gpuwarden or the
// catalog knows, under any alias ("lambdalabs" is lambda), as nil, or else
// an EInvalid error that names the nearest known provider.
func (n *Names) CheckProvider(name string) error {
	p := normalizeProvider(name)
	if p == "" || n.providers[p] {
		return nil
	}
	known := n.providerList()
	return unknownName("provider", name, suggestName(p, known, strings.ToLower), "providers gpuwarden knows: ", known)
}

// CheckRegion reports whether region is known: a region of provider, or
// of any provider when provider is "". A provider that is not known itself
// is CheckProvider's to report; its regions are not checked here. The
// error names the nearest region of that provider, or of all.
func (n *Names) CheckRegion(provider, region string) error {
	region = strings.TrimSpace(region)
	if region == "" {
		return nil
	}
	p := normalizeProvider(provider)
	if p != "" && !n.providers[p] {
		return nil
	}
	var candidates []string
	for prov, rs := range n.regions {
		if p != "" && prov != p {
			continue
		}
		if _, ok := rs[strings.ToLower(region)]; ok {
			return nil
		}
		for _, r := range rs {
			candidates = append(candidates, r)
		}
	}
	sort.Strings(candidates)
	candidates = dedupe(candidates)
	what, list := "region", "regions gpuwarden knows: "
	if p != "" {
		what, list = p+" region", p+" regions gpuwarden knows: "
	}
	err := unknownName(what, region, suggestName(strings.ToLower(region), candidates, strings.ToLower), list, candidates)
	// A region of another provider is a likely mix-up; say whose it is.
	var owners []string
	for prov, rs := range n.regions {
		if _, ok := rs[strings.ToLower(region)]; ok && prov != p {
			owners = append(owners, prov)
		}
	}
	if e, ok := err.(*gpuwarden.Error); ok && len(owners) > 0 {
		sort.Strings(owners)
		e.Message += fmt.Sprintf(" (it is a region of %s)", strings.Join(owners, ", "))
	}
	return err
}

// providerList is the known providers, sorted.
func (n *Names) providerList() []string {
	out := make([]string, 0, len(n.providers))
	for p := range n.providers {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// maxListed is how many known names a hint lists before "…".
const maxListed = 24

// unknownName is the error of a name nobody knows: what it is, the name
// (cut for the message), the suggestion if any and, in the hint, the known
// names.
func unknownName(what, name, suggestion, listed string, known []string) error {
	msg := fmt.Sprintf("unknown %s %s", what, quoted(strings.TrimSpace(name)))
	if suggestion != "" {
		msg += "; did you mean " + suggestion + "?"
	}
	shown := known
	if len(shown) > maxListed {
		shown = append(shown[:maxListed:maxListed], "…")
	}
	hint := listed + strings.Join(shown, ", ")
	if len(known) == 0 {
		hint = "gpuwarden knows none: add a price file with --catalog"
	}
	return gpuwarden.Errorf(gpuwarden.EInvalid, "%s", msg).WithHint("%s; names are compared without regard to case", hint)
}

// suggestName returns the known name closest to typed, compared by key:
// one an edit distance of at most 2 away (and shorter than typed itself),
// or else one that contains typed ("4090" in RTX-4090); "" if none is close.
func suggestName(typed string, known []string, key func(string) string) string {
	typed = strings.ToLower(strings.TrimSpace(typed))
	if typed == "" {
		return ""
	}
	best, bestScore := "", 0
	for _, k := range known {
		kk := strings.ToLower(key(k))
		score := 0
		switch d := suggest.Distance(typed, kk); {
		case d <= 1 && d < len(typed):
			score = 10 - d
		case len(typed) >= 3 && strings.Contains(kk, typed):
			// What was typed, whole, inside a name beats a name two edits
			// away: "4090" is the RTX-4090, not the A4000.
			score = 8
		case d == 2 && d < len(typed):
			score = 7
		default:
			continue
		}
		// Closer first; among equals, the shorter name (a family before
		// its models), then the first in order.
		if score > bestScore || score == bestScore && len(k) < len(best) {
			best, bestScore = k, score
		}
	}
	return best
}

// dedupe drops repeats from a sorted list.
func dedupe(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
