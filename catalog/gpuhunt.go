package catalog

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gpuwarden/gpuwarden"
)

// readGpuhunt reads a CSV of dstack's gpuhunt catalog (one file per provider,
// aws.csv, gcp.csv …, columns instance_name,location,price,cpu,memory,
// gpu_count,gpu_name,gpu_memory,spot,disk_size,gpu_vendor,flags,…). Each row is
// one price: the on-demand row and the spot row of the same machine in the
// same place become one offer. gpu_memory is GB per GPU already. GCP rows
// name a zone (us-central1-a), which is folded into its region like SkyPilot's
// zones. Rows of other vendors (gpu_vendor amd, google, intel; tpu- names)
// and rows without GPUs are skipped. A provider column, when present, wins
// over the provider from the file name.
func readGpuhunt(t *table, provider string) ([]gpuwarden.Offer, []string, error) {
	var (
		cInst   = t.col("instance_name")
		cLoc    = t.col("location")
		cPrice  = t.col("price")
		cCPU    = t.col("cpu")
		cMem    = t.col("memory")
		cCount  = t.col("gpu_count")
		cName   = t.col("gpu_name")
		cGPUMem = t.col("gpu_memory")
		cSpot   = t.col("spot")
		cVendor = t.col("gpu_vendor")
		cProv   = t.col("provider")
	)
	var (
		out                                    = collapser{idx: map[offerKey]int{}}
		nonNVIDIA, noPrice, fractional, zeroes counted
		source                                 = "gpuhunt catalog " + t.name
	)
	for {
		ok, err := t.next()
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			break
		}
		prov := provider
		if p := normalizeProvider(t.cell(cProv)); p != "" {
			prov = p
		}
		if prov == "" {
			return nil, nil, t.cellErr(cProv, "a value is required: the file name does not tell the provider either")
		}
		count, err := t.number(cCount)
		if err != nil {
			return nil, nil, err
		}
		if count == 0 {
			continue // a CPU machine
		}
		name := t.cell(cName)
		if name == "" {
			return nil, nil, t.cellErr(cName, "a value is required when gpu_count is not 0")
		}
		if strings.HasPrefix(strings.ToLower(name), "tpu-") || isNonNVIDIA(name, t.cell(cVendor)) {
			nonNVIDIA.add(t.line())
			continue
		}
		spot := false
		if s := t.cell(cSpot); s != "" {
			if spot, err = strconv.ParseBool(s); err != nil {
				return nil, nil, t.cellErr(cSpot, "%s is neither true nor false", quoted(s))
			}
		}
		price, err := t.price(cPrice, false)
		if err != nil {
			return nil, nil, err
		}
		if price == 0 {
			noPrice.add(t.line())
			continue
		}
		inst, loc := t.cell(cInst), t.cell(cLoc)
		if inst == "" {
			return nil, nil, t.cellErr(cInst, "a value is required")
		}
		if loc == "" {
			return nil, nil, t.cellErr(cLoc, "a value is required")
		}
		if prov == "gcp" {
			loc = gcpRegionOfZone(loc)
		}
		if count != math.Trunc(count) {
			fractional.add(t.line())
		}
		o := gpuwarden.Offer{Provider: prov, Instance: inst, GPUCount: count, Currency: "USD",
			Source: source, Origin: t.origin()}
		o.Region, o.Country = placeOf(prov, loc)
		if spot {
			o.SpotHourly = price
		} else {
			o.OnDemandHourly = price
		}
		mem, err := t.number(cGPUMem)
		if err != nil {
			return nil, nil, err
		}
		if isBareH100(name) {
			name = h100Hint(inst)
		}
		model, sizes := canonicalGPU(name, mem)
		o.GPU, o.VRAMGBPerGPU = model, snapVRAM(mem, sizes)
		if mem == 0 {
			o.VRAMGBPerGPU = specVRAM(model, sizes)
		}
		cpu, err := t.cpus(cCPU)
		if err != nil {
			return nil, nil, err
		}
		o.VCPUs = int(math.Round(cpu))
		if o.RAMGB, err = t.number(cMem); err != nil {
			return nil, nil, err
		}
		out.add(o)
	}
	for i := range out.offers {
		if o := &out.offers[i]; o.SpotHourly != 0 && o.SpotHourly == o.OnDemandHourly {
			o.SpotHourly = 0
			zeroes.n++
		}
	}
	w := []string{"gpuhunt catalogs carry no date per row: these offers are undated and cannot be checked for staleness"}
	add := func(c counted, format string, args ...any) {
		if c.n > 0 {
			w = append(w, fmt.Sprintf(format, args...)+" ("+c.where()+")")
		}
	}
	if zeroes.n > 0 {
		w = append(w, fmt.Sprintf("%s a spot price equal to on-demand: treated as no spot market", countDo(zeroes.n, "offer", "lists", "list")))
	}
	add(fractional, "%s a fraction of a GPU: the count is kept as a fraction", rowsDo(fractional.n, "rents", "rent"))
	add(nonNVIDIA, "skipped %s of TPUs and other non-NVIDIA accelerators", rows(nonNVIDIA.n))
	add(noPrice, "skipped %s of GPUs without a price", rows(noPrice.n))
	return out.offers, w, nil
}

// gcpRegionOfZone folds a GCP zone (us-central1-a) into its region.
func gcpRegionOfZone(loc string) string {
	i := strings.LastIndexByte(loc, '-')
	if i > 0 && len(loc)-i == 2 && loc[i+1] >= 'a' && loc[i+1] <= 'z' {
		return loc[:i]
	}
	return loc
}
