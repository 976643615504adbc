package catalog

import (
	"embed"
	"fmt"
	"strings"
	"sync"

	"github.com/gpuwarden/gpuwarden"
)

// data holds the dated snapshot: the GPU rows of SkyPilot's published
// catalogs, gzipped (data/skypilot holds them plain, with where and when
// each was read), the region → country table, egress and storage rates,
// the GPU table and the billing unit of each provider's egress "GB".
//
//go:embed data/egress.csv data/storage.csv data/gpus.csv data/regions.csv data/egress_units.csv
//go:embed data/skypilot/sources.csv data/snapshot/*.vms.csv.gz
var data embed.FS

var (
	tablesOnce sync.Once
	tables     *gpuwarden.Catalog
	tablesErr  error

	offersOnce sync.Once
	offers     gpuwarden.Offers
	offersErr  error
)

// Embedded returns the catalog built into the binary: offers with their
// source and as_of, egress tiers with their billing unit, storage rates and
// the GPU table. The files are parsed once; every call returns fresh slices,
// so a caller that sorts or edits them cannot change what the next one sees.
func Embedded() (*gpuwarden.Catalog, error) {
	c, err := EmbeddedTables()
	if err != nil {
		return nil, err
	}
	if c.Offers, err = embeddedOffers(); err != nil {
		return nil, err
	}
	return c, nil
}

// EmbeddedTables is Embedded without the offers, which take most of the
// parsing (12-40 ms): for callers that need the GPU table, egress or
// storage alone (canary, burn-in), and for a load that leaves the snapshot
// out or finds its parse in the cache.
func EmbeddedTables() (*gpuwarden.Catalog, error) {
	tablesOnce.Do(func() { tables, tablesErr = parseTables() })
	if tablesErr != nil {
		return nil, tablesErr
	}
	return cloneCatalog(tables), nil
}

// embeddedOffers parses the snapshot's offers once per process.
func embeddedOffers() (gpuwarden.Offers, error) {
	offersOnce.Do(func() {
		if _, err := regionTable(); err != nil {
			offersErr = err
			return
		}
		var b gpuwarden.OffersBuilder
		if _, offersErr = snapshotOffers(&b); offersErr == nil {
			offers = b.Offers()
		}
	})
	return offers, offersErr // a table does not change: shared
}

func cloneCatalog(c *gpuwarden.Catalog) *gpuwarden.Catalog {
	return &gpuwarden.Catalog{
		Offers:   c.Offers, // a table does not change: shared
		Egress:   append([]gpuwarden.EgressTier(nil), c.Egress...),
		Storage:  append([]gpuwarden.StorageRate(nil), c.Storage...),
		GPUs:     append([]gpuwarden.GPUSpec(nil), c.GPUs...),
		Warnings: append([]string(nil), c.Warnings...),
	}
}

// parseTables reads the snapshot's side tables: regions, GPUs, egress and
// storage.
func parseTables() (*gpuwarden.Catalog, error) {
	if _, err := regionTable(); err != nil {
		return nil, err
	}
	gpus, err := gpuTable()
	if err != nil {
		return nil, err
	}
	egress, err := parseEgress()
	if err != nil {
		return nil, err
	}
	storage, err := parseStorage()
	if err != nil {
		return nil, err
	}
	return &gpuwarden.Catalog{Egress: egress, Storage: storage, GPUs: gpus}, nil
}

// embeddedErr marks a broken embedded file: a build defect, not user input.
func embeddedErr(err error) error {
	return &gpuwarden.Error{Code: gpuwarden.EInternal, Message: "embedded catalog", Err: err,
		Hint: "the binary was built with a broken catalog/data; rebuild from a clean checkout"}
}

// simpleTable reads one of the small embedded tables into rows of named
// cells, checking that the header has the columns the caller reads.
func simpleTable(file string, cols ...string) ([]map[string]string, error) {
	raw, err := data.ReadFile("data/" + file)
	if err != nil {
		return nil, embeddedErr(err)
	}
	t, err := openPlain(file, raw)
	if err != nil {
		return nil, embeddedErr(err)
	}
	for _, c := range cols {
		if t.col(c) < 0 {
			return nil, embeddedErr(fmt.Errorf("%s: header has no column %s", file, c))
		}
	}
	var out []map[string]string
	for {
		ok, err := t.next()
		if err != nil {
			return nil, embeddedErr(err)
		}
		if !ok {
			return out, nil
		}
		row := make(map[string]string, len(t.cols))
		for i, c := range t.cols {
			row[strings.ToLower(c)] = t.cell(i)
		}
		row["@line"] = fmt.Sprint(t.line())
		out = append(out, row)
	}
}

// openPlain opens an embedded side table, which is none of the offer formats.
func openPlain(name string, raw []byte) (*table, error) {
	return readHeader(name, string(raw), "")
}

// sideTableErr reports a bad cell of an embedded table.
func sideTableErr(file string, row map[string]string, col, why string) error {
	return embeddedErr(fmt.Errorf("%s:%s: column %s: %s %s", file, row["@line"], col, quoted(row[col]), why))
}

// parseEgress reads egress.csv. A source of "same" repeats the one of the
// provider's previous tier, so that every tier says where its price is from.
func parseEgress() ([]gpuwarden.EgressTier, error) {
	units, err := simpleTable("egress_units.csv", "provider", "unit")
	if err != nil {
		return nil, err
	}
	unitOf := map[string]string{}
	for _, u := range units {
		if u["unit"] != "GB" && u["unit"] != "GiB" {
			return nil, sideTableErr("egress_units.csv", u, "unit", "is neither GB nor GiB")
		}
		unitOf[u["provider"]] = u["unit"]
	}
	rowsIn, err := simpleTable("egress.csv", "provider", "scope", "tier_from_gb", "tier_to_gb", "currency", "per_gb", "source")
	if err != nil {
		return nil, err
	}
	var (
		out      []gpuwarden.EgressTier
		previous = map[string]string{}
	)
	for _, r := range rowsIn {
		e := gpuwarden.EgressTier{Provider: r["provider"], Scope: gpuwarden.EgressScope(r["scope"]),
			Currency: gpuwarden.Currency(r["currency"]), Unit: "GB"}
		if !validScope(e.Scope) {
			return nil, sideTableErr("egress.csv", r, "scope", "is not internet, inter-region or intra-region")
		}
		if u, ok := unitOf[e.Provider]; ok {
			e.Unit = u
		}
		for col, dst := range map[string]*gpuwarden.Micros{"tier_from_gb": &e.FromGB, "tier_to_gb": &e.ToGB, "per_gb": &e.PerGB} {
			if r[col] == "" && col == "tier_to_gb" {
				continue
			}
			v, err := parseExactMicros(r[col])
			if err != nil || v < 0 {
				return nil, sideTableErr("egress.csv", r, col, "is not a non-negative decimal")
			}
			*dst = v
		}
		e.Source = resolveSame(r["source"], previous[e.Provider])
		previous[e.Provider] = e.Source
		out = append(out, e)
	}
	return out, nil
}

// resolveSame expands "same" and "same (note)" to the previous source.
func resolveSame(src, prev string) string {
	if prev == "" || (src != "same" && !strings.HasPrefix(src, "same ")) {
		return src
	}
	rest := strings.TrimSpace(strings.TrimPrefix(src, "same"))
	switch {
	case rest == "":
		return prev
	case strings.HasPrefix(rest, "("):
		return prev + " " + rest
	}
	return prev + " (same " + rest + ")"
}

func validScope(s gpuwarden.EgressScope) bool {
	for _, v := range gpuwarden.EgressScopes {
		if v == s {
			return true
		}
	}
	return false
}

func parseStorage() ([]gpuwarden.StorageRate, error) {
	rowsIn, err := simpleTable("storage.csv", "provider", "kind", "currency", "per_gb_month", "note")
	if err != nil {
		return nil, err
	}
	out := make([]gpuwarden.StorageRate, 0, len(rowsIn))
	for _, r := range rowsIn {
		v, err := parseExactMicros(r["per_gb_month"])
		if err != nil || v < 0 {
			return nil, sideTableErr("storage.csv", r, "per_gb_month", "is not a non-negative decimal")
		}
		out = append(out, gpuwarden.StorageRate{Provider: r["provider"], Kind: r["kind"],
			Currency: gpuwarden.Currency(r["currency"]), PerGBMonth: v, Note: r["note"]})
	}
	return out, nil
}

var (
	gpusOnce sync.Once
	gpus     []gpuwarden.GPUSpec
	gpusErr  error
)

// gpuTable parses gpus.csv once; importers use it to fill VRAM that a file
// leaves out, the simulator and burn-in read its figures.
func gpuTable() ([]gpuwarden.GPUSpec, error) {
	gpusOnce.Do(func() { gpus, gpusErr = parseGPUs() })
	return gpus, gpusErr
}

// parseGPUs reads gpus.csv, which holds what a card's datasheet row does
// not (its memory, power and what was measured here); bandwidth and peak
// TFLOP/s come from gpuwarden.Datasheets, so each figure is written once.
func parseGPUs() ([]gpuwarden.GPUSpec, error) {
	rowsIn, err := simpleTable("gpus.csv", "model", "vram_gb", "tdp_w", "measured_here")
	if err != nil {
		return nil, err
	}
	out := make([]gpuwarden.GPUSpec, 0, len(rowsIn))
	for _, r := range rowsIn {
		g := gpuwarden.GPUSpec{Model: r["model"], MeasuredNotes: r["measured_here"]}
		for col, dst := range map[string]*float64{"vram_gb": &g.VRAMGB, "tdp_w": &g.TDPWatts} {
			v, err := parseNumber(r[col])
			if err != nil || v <= 0 {
				return nil, sideTableErr("gpus.csv", r, col, "is not a positive number")
			}
			*dst = v
		}
		if CanonicalGPU(g.Model, g.VRAMGB) != g.Model {
			return nil, sideTableErr("gpus.csv", r, "model", "is not its own canonical name: CanonicalGPU would rename offers away from it")
		}
		d, ok := gpuwarden.DatasheetOf(g.Model)
		if !ok {
			return nil, sideTableErr("gpus.csv", r, "model", "has no row in gpuwarden.Datasheets")
		}
		// BF16TFLOPs is the 16-bit tensor peak: fp16 on cards without bf16.
		g.MemBWTBs, g.FP32TFLOPs = d.MemBWTBs, d.FP32
		g.BF16TFLOPs, _ = d.PeakTFLOPs(gpuwarden.BF16)
		out = append(out, g)
	}
	return out, nil
}

// EmbeddedGPU returns the embedded GPU table's row of a canonical model.
// It parses that table alone: the simulator, which the agent's benchmark
// runs, needs a datasheet, not the prices, egress and regions of Embedded.
func EmbeddedGPU(model string) (gpuwarden.GPUSpec, bool) {
	table, _ := gpuTable()
	for _, g := range table {
		if g.Model == model {
			return g, true
		}
	}
	return gpuwarden.GPUSpec{}, false
}

// specVRAM is the memory per GPU of a canonical model: the GPU table's
// figure when it has the model, else the first size the name stands for.
func specVRAM(model string, sizes []float64) float64 {
	if g, ok := EmbeddedGPU(model); ok {
		return g.VRAMGB
	}
	if len(sizes) > 0 {
		return sizes[0]
	}
	return 0
}
