package catalog

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuwarden/gpuwarden"
)

// readOwn reads gpuwarden's own prices.csv layout, the format of the embedded
// snapshot and of `gpuwarden offers -o csv`. Columns come in any order and
// case, and every row has one field per column: a comma inside a field must
// be quoted.
//
// Required columns, each with a value on every row except vram_gb_per_gpu:
// provider, region, gpu, gpu_count, currency, vram_gb_per_gpu, and at least
// one of on_demand_hourly, spot_hourly and monthly (a row fills one or
// more). vram_gb_per_gpu may be left empty only for a GPU model whose name
// pins its memory (T4, L4, H100-NVL): a name several sizes share (A100 40
// or 80 GB, H100 80 or 94 GB) is an error rather than a guess, and an
// unknown model without it is kept with a warning, since no workload fits
// it.
//
// Optional columns, empty when absent: country (else the region table's,
// with a warning when it does not know the region), instance, vcpus, ram_gb,
// as_of (without it the price is undated, with a warning) and source (the
// file name when empty). Other columns are ignored.
//
// Prices are exact decimals: a curated file has no excuse for binary float
// tails, so more than six decimals is an error, not a rounding.
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
		offers                     = make([]gpuwarden.Offer, 0, t.rowsHint)
		undated, noCountry, noVRAM counted
		priceCol                   = firstCol(cOnDemand, cSpot, cMonthly)
		names                      = map[ownGPUKey]ownGPU{}
		lines                      = make([]int, 0, t.rowsHint) // of each offer, for setOrigins
		lastAsOf                   string                       // the last as_of that parsed
	)
	for {
		ok, err := t.next()
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			break
		}
		o := gpuwarden.Offer{}
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
			return nil, nil, t.cellErr(cCount, "%s: a GPU offer needs at least part of one GPU", quoted(t.cell(cCount)))
		}
		if o.VRAMGBPerGPU, err = t.number(cVRAM); err != nil {
			return nil, nil, err
		}
		// A price file repeats a few GPU names thousands of times.
		nk := ownGPUKey{t.cell(cGPU), o.VRAMGBPerGPU}
		g, seen := names[nk]
		if !seen {
			g.name, g.sizes = canonicalGPU(nk.name, nk.vram)
			names[nk] = g
		}
		name, sizes := g.name, g.sizes
		o.GPU = name
		switch {
		case t.cell(cVRAM) != "" && o.VRAMGBPerGPU == 0:
			return nil, nil, t.cellErr(cVRAM, "%s: a GPU has more than 0 GB of memory", quoted(t.cell(cVRAM)))
		case o.VRAMGBPerGPU > 0:
		case len(sizes) == 1:
			o.VRAMGBPerGPU = specVRAM(name, sizes) // the name says how much
		case len(sizes) > 1:
			return nil, nil, t.cellErr(cVRAM, "a value is required: %s comes with %s GB", quoted(t.cell(cGPU)), orList(sizes))
		default:
			noVRAM.add(t.line())
		}
		if o.VCPUs, err = t.integer(cVCPUs); err != nil {
			return nil, nil, err
		}
		if o.RAMGB, err = t.number(cRAM); err != nil {
			return nil, nil, err
		}
		cur := strings.ToUpper(t.cell(cCurrency))
		if !isCurrencyCode(cur) {
			return nil, nil, t.cellErr(cCurrency, "%s is not a three-letter ISO 4217 code such as USD", quoted(t.cell(cCurrency)))
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
			// openTable makes sure the file has one of the price columns.
			return nil, nil, t.cellErr(priceCol, "row has no price: fill on_demand_hourly, spot_hourly or monthly")
		}
		o.Country = strings.ToUpper(t.cell(cCountry))
		if o.Country != "" && !isCountryCode(o.Country) {
			return nil, nil, t.cellErr(cCountry, "%s is not a two-letter ISO 3166 code such as DE", quoted(t.cell(cCountry)))
		}
		if o.Country == "" {
			if o.Country = CountryOf(o.Provider, o.Region); o.Country == "" {
				noCountry.add(t.line())
			}
		}
		o.AsOf = t.cell(cAsOf)
		if o.AsOf == "" {
			undated.add(t.line())
		} else if o.AsOf != lastAsOf {
			// Files repeat one date on every row: check each new one once.
			if _, err := gpuwarden.ParseAsOf(o.AsOf); err != nil {
				return nil, nil, t.cellErr(cAsOf, "%s is not a date written YYYY-MM or YYYY-MM-DD", quoted(o.AsOf))
			}
			lastAsOf = o.AsOf
		}
		if o.Source = t.cell(cSource); o.Source == "" {
			o.Source = t.name
		}
		offers = append(offers, o)
		lines = append(lines, t.line())
	}
	setOrigins(offers, t.name, lines)
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

// orList writes sizes as "40 or 80".
func orList(sizes []float64) string {
	parts := make([]string, len(sizes))
	for i, v := range slices.Sorted(slices.Values(sizes)) {
		parts[i] = strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strings.Join(parts, " or ")
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

// ownGPUKey and ownGPU cache canonicalGPU per GPU cell and memory figure.
type ownGPUKey struct {
	name string
	vram float64
}

type ownGPU struct {
	name  string
	sizes []float64
}

// setOrigins writes every offer's "file:line" into one string and gives
// each offer its slice of it: two allocations per row were a third of
// reading a big file.
func setOrigins(offers []gpuwarden.Offer, name string, lines []int) {
	buf := make([]byte, 0, len(offers)*(len(name)+8))
	ends := make([]int, len(offers))
	for i, l := range lines {
		buf = append(buf, name...)
		buf = append(buf, ':')
		buf = strconv.AppendInt(buf, int64(l), 10)
		ends[i] = len(buf)
	}
	all := string(buf)
	start := 0
	for i := range offers {
		offers[i].Origin = all[start:ends[i]]
		start = ends[i]
	}
}
