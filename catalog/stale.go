package catalog

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// Stale returns one warning per price file and provider whose newest price
// is older than maxAge at now ("prices of aws in mine/aws.csv are from
// 2026-03, 243 days old: refresh the file"). A source with one fresh price
// is fresh: the newest as_of is what tells whether anybody looked lately.
// Undated offers are left out; their import already warned about them. The
// embedded snapshot is one source, not one per provider: its warning is a
// single line ("prices of the embedded snapshot are from 2026-12-03, 95 days
// old: run `gpuwarden catalog update`"), after PriceNotes has said its age
// on the prices: line from 30 days on.
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
		if isEmbedded(o.Origin.File) {
			f.g = group{file: embeddedPrefix}
		}
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
		if g.file == embeddedPrefix {
			out = append(out, fmt.Sprintf("prices of the embedded snapshot are from %s, %d days old: run `gpuwarden catalog update`", n.asOf, days))
			continue
		}
		if g.file == "" {
			out = append(out, fmt.Sprintf("prices of %s are from %s, %d days old: refresh with --catalog", g.provider, n.asOf, days))
			continue
		}
		out = append(out, fmt.Sprintf("prices of %s in %s are from %s, %d days old: refresh the file", g.provider, g.file, n.asOf, days))
	}
	return out
}

// PriceNotes are the prices: lines that every plan, offers and preflight
// print about the embedded snapshot and the countries the work may run in
// (downloaded catalogs get a line each from their PriceSource):
//
//   - the snapshot's date and what it holds, when any of its offers is in c;
//     past 30 days at now, also its age and the fix;
//   - when countries (or, without any, the whole catalog) leave fewer than
//     three providers: which ones are left, and the fix. Plan B then sits on
//     the same provider as plan A, or is missing.
//
// A snapshot that is old or thin says so here, on every report, rather than
// in a warning that scrolls past.
func PriceNotes(c *gpuwarden.Catalog, now time.Time, countries []string) []string {
	var (
		snapOffers int
		snapFrom   string // the oldest read date of the snapshot's offers
		snapProv   = map[string]bool{}
		inScope    = map[string]bool{}
		allowed    = map[string]bool{}
		lastGroup  struct{ provider, country, file, asOf string }
	)
	for _, code := range countries {
		allowed[code] = true
	}
	for _, o := range c.Offers.All() {
		emb := isEmbedded(o.Origin.File)
		if emb {
			snapOffers++
		}
		// Offers come in long runs of one provider, country and file: the
		// maps are touched once per run.
		g := struct{ provider, country, file, asOf string }{o.Provider, o.Country, o.Origin.File, o.AsOf}
		if g == lastGroup {
			continue
		}
		lastGroup = g
		if emb {
			snapProv[o.Provider] = true
			if snapFrom == "" || o.AsOf < snapFrom {
				snapFrom = o.AsOf
			}
		}
		if len(allowed) == 0 || allowed[o.Country] {
			inScope[o.Provider] = true
		}
	}
	fix := "run `gpuwarden catalog update` for every cloud's current prices"
	var out []string
	if snapOffers > 0 {
		line := fmt.Sprintf("embedded snapshot of %s (SkyPilot catalog %s): %s offers from %d providers",
			snapFrom, SnapshotSchema, gpuwarden.GroupDigits(int64(snapOffers)), len(snapProv))
		if at, err := gpuwarden.ParseAsOf(snapFrom); err == nil && now.Sub(at) > PriceMaxAge {
			line += fmt.Sprintf(", %d days old: %s", int(now.Sub(at).Hours()/24), fix)
		}
		out = append(out, line)
	}
	if len(inScope) < thinProviders {
		names := make([]string, 0, len(inScope))
		for p := range inScope {
			names = append(names, p)
		}
		sort.Strings(names)
		where := "in these prices"
		if len(countries) > 0 {
			where = "in " + strings.Join(countries, ", ")
		}
		var line string
		switch len(names) {
		case 0:
			line = "no provider has offers " + where
		case 1:
			line = fmt.Sprintf("only 1 provider has offers %s (%s): no plan B on another provider", where, names[0])
		default:
			line = fmt.Sprintf("only %d providers have offers %s (%s): few plan Bs on another provider", len(names), where, strings.Join(names, ", "))
		}
		out = append(out, line+"; "+fix)
	}
	return out
}
