package catalog

import (
	"fmt"
	"sort"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// Stale returns one warning per price source whose newest price is older
// than maxAge at now: per provider for the embedded snapshot ("prices of aws
// are from 2026-07, 121 days old: refresh with --catalog"), per provider and
// file for imported files. A source with one fresh price is fresh: the
// newest as_of is what tells whether anybody looked lately. Undated offers
// are left out; their import already warned about them.
func Stale(c *gpuwarden.Catalog, now time.Time, maxAge time.Duration) []string {
	type group struct{ file, provider string }
	type newest struct {
		at   time.Time
		asOf string
	}
	latest := map[group]newest{}
	// Rows repeat one date and one provider: parse each run's date once,
	// and fold in a row only when it differs from the one before.
	type folded struct {
		g    group
		asOf string
	}
	var (
		at   time.Time
		ok   bool
		last folded
	)
	for _, o := range c.Offers.All() {
		if o.AsOf == "" {
			continue
		}
		if o.AsOf != last.asOf {
			var err error
			at, err = gpuwarden.ParseAsOf(o.AsOf)
			ok = err == nil
		}
		f := folded{group{file: o.Origin.File, provider: o.Provider}, o.AsOf}
		if f == last {
			continue
		}
		last = f
		if !ok {
			continue
		}
		g := f.g
		if cur, ok := latest[g]; !ok || at.After(cur.at) {
			latest[g] = newest{at: at, asOf: o.AsOf}
		}
	}
	groups := make([]group, 0, len(latest))
	for g := range latest {
		groups = append(groups, g)
	}
	sort.Slice(groups, func(i, j int) bool {
		if groups[i].file != groups[j].file {
			return groups[i].file < groups[j].file
		}
		return groups[i].provider < groups[j].provider
	})
	var out []string
	for _, g := range groups {
		n := latest[g]
		age := now.Sub(n.at)
		if age <= maxAge {
			continue
		}
		days := int(age.Hours() / 24)
		if g.file == embeddedPrices || g.file == "" {
			out = append(out, fmt.Sprintf("prices of %s are from %s, %d days old: refresh with --catalog", g.provider, n.asOf, days))
			continue
		}
		out = append(out, fmt.Sprintf("prices of %s in %s are from %s, %d days old: refresh the file", g.provider, g.file, n.asOf, days))
	}
	return out
}
