package plan

import (
	"fmt"
	"slices"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/parallel"
)

// estimateKey is what an estimate depends on: the line, the country the
// offer is in and the quantity.
type estimateKey struct {
	kind, country string
	quantity      gpuwarden.Micros
}

type estimated struct {
	amount gpuwarden.Micros
	basis  string
	ok     bool
}

func egressEstimateKind(s gpuwarden.EgressScope) string { return "egress " + string(s) }

// estimate fills a line the provider has no price for with the median of
// what the providers that do price it charge for the same quantity: those
// with offers in the same country when any of them is priced, else all of
// them. An omitted line would rank the offer as if the line were free, so
// plan A could be chosen on the omission alone; an estimate marked as one
// ranks it as it will roughly bill. With no priced provider at all the line
// stays unpriced. See docs/pricing.md.
func (r *Report) estimate(l *Line, country, kind string, price func(provider string) (gpuwarden.Micros, bool)) {
	key := estimateKey{kind, country, l.Quantity}
	e, done := r.estimates[key]
	if !done {
		e = r.makeEstimate(country, price)
		if r.estimates == nil {
			r.estimates = map[estimateKey]estimated{}
		}
		r.estimates[key] = e
	}
	if !e.ok {
		l.Unpriced = true
		return
	}
	l.Estimated, l.Basis, l.Amount = true, e.basis, gpuwarden.CentsOf(e.amount)
}

func (r *Report) makeEstimate(country string, price func(string) (gpuwarden.Micros, bool)) estimated {
	local := r.providersIn(country)
	var near, all []gpuwarden.Micros
	var nearNames []string
	for _, p := range r.pricedProviders() {
		v, ok := price(p)
		if !ok {
			continue
		}
		all = append(all, v)
		if local[p] {
			near = append(near, v)
			nearNames = append(nearNames, p)
		}
	}
	switch {
	case len(near) > 0:
		return estimated{amount: median(near), ok: true,
			basis: fmt.Sprintf("median of %d priced %s in %s", len(near), providerWord(len(near)), country)}
	case len(all) > 0:
		return estimated{amount: median(all), ok: true,
			basis: fmt.Sprintf("median of all %d priced %s", len(all), providerWord(len(all)))}
	}
	return estimated{}
}

func providerWord(n int) string {
	if n == 1 {
		return "provider"
	}
	return "providers"
}

// median of prices; the mean of the two middle ones for an even count.
func median(v []gpuwarden.Micros) gpuwarden.Micros {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// pricedProviders are the providers with an egress tier or a storage rate,
// sorted, computed once.
func (r *Report) pricedProviders() []string {
	if r.priced != nil {
		return r.priced
	}
	seen := map[string]bool{}
	for _, t := range r.cat.Egress {
		seen[t.Provider] = true
	}
	for _, s := range r.cat.Storage {
		seen[s.Provider] = true
	}
	r.priced = make([]string, 0, len(seen))
	for p := range seen {
		r.priced = append(r.priced, p)
	}
	slices.Sort(r.priced)
	return r.priced
}

// providersIn is the set of providers with an offer in a country; the
// offers are scanned once for all countries.
func (r *Report) providersIn(country string) map[string]bool {
	if country == "" {
		return nil
	}
	if r.byCountry == nil {
		r.byCountry = providersByCountry(&r.cat.Offers)
	}
	return r.byCountry[country]
}

// providersByCountry scans a large catalog in parts on every core: the
// first estimate scans it under the lock the pricing goroutines wait on,
// and on 1,000,000 offers the scan alone held them up for 33 ms.
func providersByCountry(offers *gpuwarden.Offers) map[string]map[string]bool {
	parts := make([]map[string]map[string]bool, partsFor(offers.Len()))
	parallel.Do(len(parts), func(i int) {
		lo, hi := span(offers.Len(), len(parts), i)
		found := map[string]map[string]bool{}
		for j := lo; j < hi; j++ {
			o := offers.At(j)
			if o.Country == "" {
				continue
			}
			m := found[o.Country]
			if m == nil {
				m = map[string]bool{}
				found[o.Country] = m
			}
			m[o.Provider] = true
		}
		parts[i] = found
	})
	all := parts[0]
	for _, found := range parts[1:] {
		for country, providers := range found {
			if all[country] == nil {
				all[country] = providers
				continue
			}
			for p := range providers {
				all[country][p] = true
			}
		}
	}
	return all
}
