package catalog

import (
	"fmt"
	"strings"

	"github.com/gpuwarden/gpuwarden"
)

// readOwn reads gpuwarden's own prices.csv layout, the format of the embedded
// snapshot. Prices are exact decimals: a curated file has no excuse for binary
// float tails, so more than six decimals is an error, not a rounding.
func readOwn(t *table) ([]gpuwarden.Offer, []string, error) {
	var (
		cProvider = t.col("provider")
		cRegion   = t.col("region")
		cCountry  = t.col("country")
		cInstance = t.col("instance")
		cGPU      = t.col("gpu")
		cCount    = t.col("gpu_count")
		cVRAM     = t.col("vram_gb_per_gpu")
		cVCPUs    = t.col("vcpus")
		cRAM      = t.col("ram_gb")
		cCurrency = t.col("currency")
		cOnDemand = t.col("on_demand_hourly")
		cSpot     = t.col("spot_hourly")
		cMonthly  = t.col("monthly")
		cAsOf     = t.col("as_of")
		cSource   = t.col("source")
	)
	var (
		offers                     []gpuwarden.Offer
		undated, noCountry, noVRAM counted
		priceCol                   = firstCol(cOnDemand, cSpot, cMonthly)
	)
	for {
		ok, err := t.next()
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			break
		}
		o := gpuwarden.Offer{Origin: t.origin()}
		for _, req := range []int{cProvider, cRegion, cGPU, cCount, cCurrency} {
			if t.cell(req) == "" {
				return nil, nil, t.cellErr(req, "a value is required")
			}
		}
		o.Provider = normalizeProvider(t.cell(cProvider))
		o.Region = t.cell(cRegion)
		o.Instance = t.cell(cInstance)
		if o.GPUCount, err = t.number(cCount); err != nil {
			return nil, nil, err
		}
		if o.GPUCount == 0 {
			return nil, nil, t.cellErr(cCount, "%q: a GPU offer needs at least part of one GPU", t.cell(cCount))
		}
		if o.VRAMGBPerGPU, err = t.number(cVRAM); err != nil {
			return nil, nil, err
		}
		name, sizes := canonicalGPU(t.cell(cGPU), o.VRAMGBPerGPU)
		o.GPU = name
		if o.VRAMGBPerGPU == 0 {
			if len(sizes) > 0 {
				o.VRAMGBPerGPU = specVRAM(name, sizes)
			} else {
				noVRAM.add(t.line())
			}
		}
		if o.VCPUs, err = t.integer(cVCPUs); err != nil {
			return nil, nil, err
		}
		if o.RAMGB, err = t.number(cRAM); err != nil {
			return nil, nil, err
		}
		cur := strings.ToUpper(t.cell(cCurrency))
		if !isCurrencyCode(cur) {
			return nil, nil, t.cellErr(cCurrency, "%q is not a three-letter ISO 4217 code such as USD", t.cell(cCurrency))
		}
		o.Currency = gpuwarden.Currency(cur)
		if o.OnDemandHourly, err = t.price(cOnDemand, true); err != nil {
			return nil, nil, err
		}
		if o.SpotHourly, err = t.price(cSpot, true); err != nil {
			return nil, nil, err
		}
		if o.Monthly, err = t.price(cMonthly, true); err != nil {
			return nil, nil, err
		}
		if o.OnDemandHourly == 0 && o.SpotHourly == 0 && o.Monthly == 0 {
			if priceCol < 0 {
				return nil, nil, invalid(formats[formatOwn].hint, "%s:%d:1: row has no price: the file needs an on_demand_hourly, spot_hourly or monthly column", t.name, t.line())
			}
			return nil, nil, t.cellErr(priceCol, "row has no price: fill on_demand_hourly, spot_hourly or monthly")
		}
		o.Country = strings.ToUpper(t.cell(cCountry))
		if o.Country != "" && !isCountryCode(o.Country) {
			return nil, nil, t.cellErr(cCountry, "%q is not a two-letter ISO 3166 code such as DE", t.cell(cCountry))
		}
		if o.Country == "" {
			if o.Country = CountryOf(o.Provider, o.Region); o.Country == "" {
				noCountry.add(t.line())
			}
		}
		o.AsOf = t.cell(cAsOf)
		if o.AsOf == "" {
			undated.add(t.line())
		} else if _, err := gpuwarden.ParseAsOf(o.AsOf); err != nil {
			return nil, nil, t.cellErr(cAsOf, "%q is not a date written YYYY-MM or YYYY-MM-DD", o.AsOf)
		}
		if o.Source = t.cell(cSource); o.Source == "" {
			o.Source = t.name
		}
		offers = append(offers, o)
	}
	var warns []string
	if undated.n > 0 {
		warns = append(warns, fmt.Sprintf("%s without as_of (%s): undated, so their staleness cannot be checked", rows(undated.n), undated.where()))
	}
	if noCountry.n > 0 {
		warns = append(warns, fmt.Sprintf("%s without country in a region gpuwarden does not know (%s): residency rules cannot place them", rows(noCountry.n), noCountry.where()))
	}
	if noVRAM.n > 0 {
		warns = append(warns, fmt.Sprintf("%s of GPU models gpuwarden does not know without vram_gb_per_gpu (%s): no workload fits them until it is filled", rows(noVRAM.n), noVRAM.where()))
	}
	return offers, warns, nil
}

// firstCol returns the first column the file has, or -1.
func firstCol(cols ...int) int {
	for _, c := range cols {
		if c >= 0 {
			return c
		}
	}
	return -1
}

func isCurrencyCode(s string) bool { return len(s) == 3 && isUpperASCII(s) }

func isCountryCode(s string) bool { return len(s) == 2 && isUpperASCII(s) }

func isUpperASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}
