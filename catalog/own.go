package catalog

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuwarden/gpuwarden"
)

// readOwn reads gpuwarden's own prices.csv layout, the format of
// `gpuwarden offers -o csv` and of Azure's downloaded prices. Columns come
// in any order and case, and every row has one field per column: a comma
// inside a field must be quoted.
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
func readOwn(t *table, dst *gpuwarden.OffersBuilder) ([]string, error) {
	// A big file without quotes is read in a piece per processor; any
	// other in one piece, by the same reader.
	chunks := splitRows(t)
	if chunks == nil {
		rest := t.r.data[t.r.off:]
		chunks = []rowChunk{{data: rest, lineBefore: t.r.numLine, lines: strings.Count(rest, "\n") + 1}}
	}
	// The lines left are the most rows there can be: counted first, the
	// table grows once instead of doubling.
	lines := 0
	for _, c := range chunks {
		lines += c.lines
	}
	dst.Grow(lines)
	joined := &ownReader{}
	if err := readOwnPieces(t, chunks, dst, make([]gpuwarden.OffersBuilder, len(chunks)), joined); err != nil {
		return nil, err
	}
	return joined.warnings(), nil
}

// ownReader reads the rows of one own-format file, or of one piece of it.
type ownReader struct {
	cProvider, cRegion, cCountry, cInstance, cGPU, cCount, cVRAM, cVCPUs, cRAM int
	cCurrency, cOnDemand, cSpot, cMonthly, cAsOf, cSource, priceCol            int
	undated, noCountry, noVRAM                                                 counted
	names                                                                      map[ownGPUKey]ownGPU
	lastAsOf                                                                   string // the last as_of that parsed
	lastProvider                                                               struct{ raw, name string }
	// lastChecked are the names of the last row that passed checkNames.
	lastChecked struct{ provider, region, instance string }
}

func newOwnReader(t *table) *ownReader {
	r := &ownReader{
		cProvider: t.col("provider"), cRegion: t.col("region"), cCountry: t.col("country"),
		cInstance: t.col("instance"), cGPU: t.col("gpu"), cCount: t.col("gpu_count"),
		cVRAM: t.col("vram_gb_per_gpu"), cVCPUs: t.col("vcpus"), cRAM: t.col("ram_gb"),
		cCurrency: t.col("currency"), cOnDemand: t.col("on_demand_hourly"), cSpot: t.col("spot_hourly"),
		cMonthly: t.col("monthly"), cAsOf: t.col("as_of"), cSource: t.col("source"),
		names: map[ownGPUKey]ownGPU{},
	}
	r.priceCol = firstCol(r.cOnDemand, r.cSpot, r.cMonthly)
	return r
}

// row reads t's current row into o.
func (r *ownReader) row(t *table, o *gpuwarden.Offer) error {
	var err error
	for _, req := range []int{r.cProvider, r.cRegion, r.cGPU, r.cCount, r.cCurrency} {
		if t.cell(req) == "" {
			return t.cellErr(req, "a value is required")
		}
	}
	if raw := t.cell(r.cProvider); raw != r.lastProvider.raw {
		r.lastProvider.raw, r.lastProvider.name = raw, normalizeProvider(raw)
	}
	o.Provider = r.lastProvider.name
	o.Region = t.cell(r.cRegion)
	o.Instance = t.cell(r.cInstance)
	if err := r.checkNames(t, o); err != nil {
		return err
	}
	if o.GPUCount, err = t.number(r.cCount); err != nil {
		return err
	}
	if o.GPUCount == 0 {
		return t.cellErr(r.cCount, "%s: a GPU offer needs at least part of one GPU", quoted(t.cell(r.cCount)))
	}
	if o.VRAMGBPerGPU, err = t.number(r.cVRAM); err != nil {
		return err
	}
	// A price file repeats a few GPU names thousands of times.
	nk := ownGPUKey{t.cell(r.cGPU), o.VRAMGBPerGPU}
	g, seen := r.names[nk]
	if !seen {
		g.name, g.sizes = canonicalGPU(nk.name, nk.vram)
		g.bad = gpuwarden.CheckName(gpuwarden.NameGPU, g.name)
		r.names[nk] = g
	}
	if g.bad != nil {
		return t.cellErr(r.cGPU, "%v", g.bad)
	}
	name, sizes := g.name, g.sizes
	o.GPU = name
	switch {
	case t.cell(r.cVRAM) != "" && o.VRAMGBPerGPU == 0:
		return t.cellErr(r.cVRAM, "%s: a GPU has more than 0 GB of memory", quoted(t.cell(r.cVRAM)))
	case o.VRAMGBPerGPU > 0:
	case len(sizes) == 1:
		o.VRAMGBPerGPU = specVRAM(name, sizes) // the name says how much
	case len(sizes) > 1:
		return t.cellErr(r.cVRAM, "a value is required: %s comes with %s GB", quoted(t.cell(r.cGPU)), orList(sizes))
	default:
		r.noVRAM.add(t.line())
	}
	if o.VCPUs, err = t.integer(r.cVCPUs); err != nil {
		return err
	}
	if o.RAMGB, err = t.number(r.cRAM); err != nil {
		return err
	}
	cur := strings.ToUpper(t.cell(r.cCurrency))
	if !isCurrencyCode(cur) {
		return t.cellErr(r.cCurrency, "%s is not a three-letter ISO 4217 code such as USD", quoted(t.cell(r.cCurrency)))
	}
	o.Currency = gpuwarden.Currency(cur)
	if o.OnDemandHourly, err = t.price(r.cOnDemand, true); err != nil {
		return err
	}
	if o.SpotHourly, err = t.price(r.cSpot, true); err != nil {
		return err
	}
	if o.Monthly, err = t.price(r.cMonthly, true); err != nil {
		return err
	}
	if o.OnDemandHourly == 0 && o.SpotHourly == 0 && o.Monthly == 0 {
		// openTable makes sure the file has one of the price columns.
		return t.cellErr(r.priceCol, "row has no price: fill on_demand_hourly, spot_hourly or monthly")
	}
	o.Country = strings.ToUpper(t.cell(r.cCountry))
	if o.Country != "" && !isCountryCode(o.Country) {
		return t.cellErr(r.cCountry, "%s is not a two-letter ISO 3166 code such as DE", quoted(t.cell(r.cCountry)))
	}
	if o.Country == "" {
		if o.Country = CountryOf(o.Provider, o.Region); o.Country == "" {
			r.noCountry.add(t.line())
		}
	}
	o.AsOf = t.cell(r.cAsOf)
	if o.AsOf == "" {
		r.undated.add(t.line())
	} else if o.AsOf != r.lastAsOf {
		// Files repeat one date on every row: check each new one once.
		if _, err := gpuwarden.ParseAsOf(o.AsOf); err != nil {
			return t.cellErr(r.cAsOf, "%s is not a date written YYYY-MM or YYYY-MM-DD", quoted(o.AsOf))
		}
		r.lastAsOf = o.AsOf
	}
	if o.Source = t.cell(r.cSource); o.Source == "" {
		o.Source = t.name
	}
	o.Origin = t.origin()
	return nil
}

// warnings words what the rows lacked, a warning per kind.
func (r *ownReader) warnings() []string {
	var warns []string
	if r.undated.n > 0 {
		warns = append(warns, fmt.Sprintf("%s without as_of (%s): undated, so their staleness cannot be checked", rows(r.undated.n), r.undated.where()))
	}
	if r.noCountry.n > 0 {
		warns = append(warns, fmt.Sprintf("%s without country in a region gpuwarden does not know (%s): residency rules cannot place them", rows(r.noCountry.n), r.noCountry.where()))
	}
	if r.noVRAM.n > 0 {
		warns = append(warns, fmt.Sprintf("%s of GPU models gpuwarden does not know without vram_gb_per_gpu (%s): no workload fits them until it is filled", rows(r.noVRAM.n), r.noVRAM.where()))
	}
	return warns
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
	bad   error // the name is not one a GPU may have
}

// checkNames holds the provider, region and instance cells of a row to the
// names gpuwarden.CheckName allows: they reach launch commands and tables.
// A file repeats them row after row, so a value is checked only when it
// differs from the last row's.
func (r *ownReader) checkNames(t *table, o *gpuwarden.Offer) error {
	if err := r.checkName(t, r.cProvider, gpuwarden.NameProvider, o.Provider, &r.lastChecked.provider); err != nil {
		return err
	}
	if err := r.checkName(t, r.cRegion, gpuwarden.NameRegion, o.Region, &r.lastChecked.region); err != nil {
		return err
	}
	return r.checkName(t, r.cInstance, gpuwarden.NameInstance, o.Instance, &r.lastChecked.instance)
}

func (r *ownReader) checkName(t *table, col int, kind, value string, last *string) error {
	if value == *last {
		return nil
	}
	if err := gpuwarden.CheckName(kind, value); err != nil {
		return t.cellErr(col, "%v", err)
	}
	*last = value
	return nil
}
