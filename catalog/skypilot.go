package catalog

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gpuwarden/gpuwarden"
)

// readSkyPilot reads a SkyPilot catalog vms.csv (skypilot-org/skypilot-catalog,
// catalogs/vN/<cloud>/vms.csv). The traps it handles, all seen in real files:
//
//   - rows without AcceleratorName are CPU machines: skipped without a word;
//   - each availability zone repeats the row: one offer per region, instance
//     and GPU is kept, with the cheapest on-demand and the cheapest spot
//     price of its zones (AWS spot prices differ by zone);
//   - SpotPrice empty, 0 (Vast) or equal to Price (RunPod, some AWS rows)
//     means there is no spot market;
//   - GCP prices a GPU machine in two halves: the machine type with an empty
//     AcceleratorName (a2-highgpu-1g, n1-highmem-8: the host alone) and the
//     accelerator with an empty InstanceType. Halves in the same zone are
//     added up into one offer, as SkyPilot itself does; a half that finds no
//     partner is skipped with a warning, never shown as a GPU price;
//   - GpuInfo is a Python dict in text ('Gpus': [{'MemoryInfo': {'SizeInMiB':
//     81920}}]); its memory is per GPU on AWS and GCP, the whole box's on Vast,
//     and plain wrong on some clouds (Nebius writes the host's RAM), so it is
//     checked against the sizes the GPU model ships with;
//   - fractional AcceleratorCount (AWS g6f: 0.125 of an L4) is kept;
//   - TPUs, Inferentia, Trainium, Gaudi and Radeon rows are skipped;
//   - prices are pandas floats (0.36979999999999996, 1e-05): rounded to micros;
//   - the file carries no date: offers are left undated, with one warning.
//
// Memory is converted from MiB to GB by dividing by 1024: 81,920 MiB is the
// "80GB" of the datasheet. The result is really GiB, but it is the figure
// vendors print and that VRAM sizing compares against; an L4's 22,888 MiB
// comes out as 22.35, the memory the card really exposes.
func readSkyPilot(t *table, provider string) ([]gpuwarden.Offer, []string, error) {
	var (
		cInst   = t.col("instancetype")
		cAcc    = t.col("acceleratorname")
		cCount  = t.col("acceleratorcount")
		cVCPUs  = t.col("vcpus")
		cMem    = t.col("memorygib")
		cInfo   = t.col("gpuinfo")
		cPrice  = t.col("price")
		cSpot   = t.col("spotprice")
		cRegion = t.col("region")
		cZone   = t.col("availabilityzone")
	)
	s := &skyPilotReader{t: t, provider: provider, gcp: provider == "gcp",
		source: "SkyPilot catalog " + t.name, names: map[gpuKey]gpuName{}, places: map[string]place{},
		bareH100: map[string]bool{}}
	s.out.idx = map[offerKey]int{}
	for {
		ok, err := t.next()
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			break
		}
		acc := t.cell(cAcc)
		inst := t.cell(cInst)
		if acc == "" {
			if s.gcp && isGCPHost(inst) {
				if err := s.addHost(inst, cVCPUs, cMem, cPrice, cSpot, cRegion, cZone); err != nil {
					return nil, nil, err
				}
			}
			continue // a CPU-only machine
		}
		info := t.cell(cInfo)
		if isNonNVIDIA(acc, infoValue(info, "Manufacturer")) {
			s.nonNVIDIA.add(t.line())
			continue
		}
		if t.cell(cCount) == "" {
			return nil, nil, t.cellErr(cCount, "a value is required when AcceleratorName is set")
		}
		count, err := t.number(cCount)
		if err != nil {
			return nil, nil, err
		}
		if count == 0 {
			continue // an accelerator name with no accelerator: a CPU machine
		}
		price, spot, priced, err := s.prices(cPrice, cSpot)
		if err != nil {
			return nil, nil, err
		}
		if !priced {
			continue
		}
		region := t.cell(cRegion)
		if region == "" {
			// Seeweb lists sizes it rents nowhere at the moment this way:
			// a price with no place is no offer.
			s.noRegion.add(t.line())
			continue
		}
		sizeMiB, totalMiB, err := s.memory(cInfo, info)
		if err != nil {
			return nil, nil, err
		}
		if inst == "" {
			// GCP's accelerator half; elsewhere a row nobody can rent.
			if !s.gcp {
				s.accOnly.add(t.line())
				continue
			}
			s.accs = append(s.accs, gcpAccel{name: acc, count: count, region: region, zone: t.cell(cZone),
				price: price, spot: spot, sizeMiB: sizeMiB, totalMiB: totalMiB, line: t.line(), origin: t.origin()})
			continue
		}
		if count != math.Trunc(count) {
			s.fractional.add(t.line())
		}
		vcpus, err := t.cpus(cVCPUs)
		if err != nil {
			return nil, nil, err
		}
		ram, err := t.number(cMem)
		if err != nil {
			return nil, nil, err
		}
		pl := s.place(region)
		gpu, vram := s.gpu(acc, inst, info, count, sizeMiB, totalMiB)
		zoned := t.cell(cZone) != ""
		if s.out.merge(offerKey{pl.region, inst, gpu, count}, price, spot, zoned) {
			continue // another zone of an offer already read
		}
		o := gpuwarden.Offer{Provider: provider, Region: pl.region, Country: pl.country, Instance: inst,
			GPU: gpu, GPUCount: count, VRAMGBPerGPU: vram, VCPUs: int(math.Round(vcpus)), RAMGB: ram,
			Currency: "USD", OnDemandHourly: price, SpotHourly: spot, Source: s.source, Origin: t.origin()}
		if zoned {
			o.Zones = 1
		}
		s.out.add(o)
	}
	if s.gcp {
		s.combineGCP()
	}
	return s.out.offers, s.warnings(), nil
}

// skyPilotReader is the state of one SkyPilot file being read.
type skyPilotReader struct {
	t        *table
	provider string
	gcp      bool
	source   string
	out      collapser
	names    map[gpuKey]gpuName // canonical names already worked out
	places   map[string]place   // regions already looked up
	bareH100 map[string]bool    // accelerator names already checked

	hosts []gcpHost
	accs  []gcpAccel

	nonNVIDIA, noSpot, fractional, noPrice, memFixed, accOnly, unmatched, hostOnly, noRegion counted
	hostOnlyNames                                                                            []string
	// unknownRegions are regions the region table has no country for.
	unknownRegions []string
}

// prices reads Price and SpotPrice; ok is false for a row with neither.
func (s *skyPilotReader) prices(cPrice, cSpot int) (price, spot gpuwarden.Micros, ok bool, err error) {
	if price, err = s.t.price(cPrice, false); err != nil {
		return 0, 0, false, err
	}
	if spot, err = s.t.price(cSpot, false); err != nil {
		return 0, 0, false, err
	}
	// Prime Intellect writes 99999999 for "no spot": a spot price above
	// on-demand is no spot market anyone would use.
	if s.t.cell(cSpot) != "" && (spot == 0 || spot == price || (price > 0 && spot > price)) {
		s.noSpot.add(s.t.line())
		spot = 0
	}
	if price == 0 && spot == 0 {
		s.noPrice.add(s.t.line())
		return 0, 0, false, nil
	}
	return price, spot, true, nil
}

// memory reads SizeInMiB and TotalGpuMemoryInMiB from GpuInfo; 0 when the
// cell holds just a name, as RunPod's does.
func (s *skyPilotReader) memory(cInfo int, info string) (size, total float64, err error) {
	if size, err = s.mib(cInfo, info, "SizeInMiB"); err != nil {
		return 0, 0, err
	}
	if total, err = s.mib(cInfo, info, "TotalGpuMemoryInMiB"); err != nil {
		return 0, 0, err
	}
	return size, total, nil
}

func (s *skyPilotReader) mib(cInfo int, info, key string) (float64, error) {
	v := infoValue(info, key)
	if v == "" {
		return 0, nil
	}
	n, err := parseNumber(v)
	if err != nil || n < 0 {
		return 0, s.t.cellErr(cInfo, "%s %s is not a number of MiB", key, quoted(v))
	}
	return n, nil
}

// place is a region as offers show it, and its country.
type place struct{ region, country string }

// place resolves a catalog region once per file.
func (s *skyPilotReader) place(loc string) place {
	p, ok := s.places[loc]
	if !ok {
		p.region, p.country = placeOf(s.provider, loc)
		s.places[loc] = p
		if p.country == "" {
			s.unknownRegions = append(s.unknownRegions, loc)
		}
	}
	return p
}

// gpuKey and gpuName cache the canonical name and memory of a GPU row: a
// catalog repeats the same few GPUs thousands of times.
type gpuKey struct {
	acc, hint          string
	count, size, total float64
}

type gpuName struct {
	name  string
	vram  float64
	fixed bool
}

// gpu works out the canonical model and the memory per GPU of a row.
func (s *skyPilotReader) gpu(acc, inst, info string, count, sizeMiB, totalMiB float64) (string, float64) {
	key := gpuKey{acc: acc, count: count, size: sizeMiB, total: totalMiB}
	bare, ok := s.bareH100[acc]
	if !ok {
		bare = isBareH100(acc)
		s.bareH100[acc] = bare
	}
	if bare {
		// The instance or the GPU-info name may say which H100 it is.
		key.hint = h100Hint(inst, infoValue(info, "Name"))
	}
	g, ok := s.names[key]
	if !ok {
		g = resolveGPU(acc, key.hint, count, sizeMiB, totalMiB, s.provider == "vast")
		s.names[key] = g
	}
	if g.fixed {
		s.memFixed.add(s.t.line())
	}
	return g.name, g.vram
}

// resolveGPU names a GPU and settles its memory per GPU from GpuInfo figures.
// totals says the file writes the whole box's memory (Vast).
func resolveGPU(acc, hint string, count, sizeMiB, totalMiB float64, totals bool) gpuName {
	if hint != "" {
		acc = hint
	}
	family, sizes := canonicalGPU(acc, 0)
	if sizeMiB <= 0 {
		return gpuName{name: family, vram: specVRAM(family, sizes)}
	}
	whole := sizeMiB / 1024
	perGPU := whole / count
	first, second := whole, perGPU
	switch {
	case count > 1 && totalMiB > 0 && math.Abs(totalMiB-count*sizeMiB) < 2:
		// AWS and GCP: SizeInMiB per GPU, TotalGpuMemoryInMiB for the box.
	case totals || count < 1:
		// Vast writes the box; AWS's fractional g6f the slice.
		first, second = perGPU, whole
	}
	for _, v := range []float64{first, second} {
		if len(sizes) == 0 || withinTenPercent(v, sizes) {
			v = roundTo(v, 2)
			name, named := canonicalGPU(acc, v)
			if len(named) == 0 {
				named = sizes
			}
			return gpuName{name: name, vram: snapVRAM(v, named)}
		}
	}
	return gpuName{name: family, vram: specVRAM(family, sizes), fixed: true}
}

// infoValue finds 'Key': value in SkyPilot's GpuInfo text and returns the
// value, unquoted; "" when the key is absent. GpuInfo is a Python dict, not
// JSON, so a scan beats a parser: it also copes with the bare names some
// clouds write there.
func infoValue(info, key string) string {
	from := 0
	for {
		i := strings.Index(info[from:], key)
		if i < 0 {
			return ""
		}
		i += from
		j := i + len(key)
		from = i + 1
		if i == 0 || j >= len(info) || !isQuote(info[i-1]) || !isQuote(info[j]) {
			continue
		}
		j++
		for j < len(info) && (info[j] == ' ' || info[j] == ':') {
			j++
		}
		if j < len(info) && isQuote(info[j]) {
			end := strings.IndexByte(info[j+1:], info[j])
			if end < 0 {
				return ""
			}
			return info[j+1 : j+1+end]
		}
		k := j
		for k < len(info) && (isDigit(info[k]) || strings.IndexByte(".-+eE", info[k]) >= 0) {
			k++
		}
		return info[j:k]
	}
}

func isQuote(c byte) bool { return c == '\'' || c == '"' }

// GCP machine types that only ever carry GPUs, and the general-purpose N1
// types GCP attaches T4, V100, P100, P4 and K80 cards to.
var gcpHostPrefixes = []string{"a2-", "a3-", "a4-", "g2-", "n1-standard-", "n1-highmem-", "n1-highcpu-"}

func isGCPHost(inst string) bool {
	for _, p := range gcpHostPrefixes {
		if strings.HasPrefix(inst, p) {
			return true
		}
	}
	return false
}

func isGCPGPUFamily(inst string) bool { return !strings.HasPrefix(inst, "n1-") }

// gcpDedicated lists, per GCP accelerator name and count, the machine types
// that come with it (SkyPilot's gcp_catalog.py, GCP's GPU machine docs).
var gcpDedicated = map[string]map[int][]string{
	"A100":      {1: {"a2-highgpu-1g"}, 2: {"a2-highgpu-2g"}, 4: {"a2-highgpu-4g"}, 8: {"a2-highgpu-8g"}, 16: {"a2-megagpu-16g"}},
	"A100-80GB": {1: {"a2-ultragpu-1g"}, 2: {"a2-ultragpu-2g"}, 4: {"a2-ultragpu-4g"}, 8: {"a2-ultragpu-8g"}},
	"L4": {1: {"g2-standard-4", "g2-standard-8", "g2-standard-12", "g2-standard-16", "g2-standard-32"},
		2: {"g2-standard-24"}, 4: {"g2-standard-48"}, 8: {"g2-standard-96"}},
	"H100":      {1: {"a3-highgpu-1g"}, 2: {"a3-highgpu-2g"}, 4: {"a3-highgpu-4g"}, 8: {"a3-highgpu-8g"}},
	"H100-MEGA": {8: {"a3-megagpu-8g"}},
	"H200":      {8: {"a3-ultragpu-8g"}},
	"B200":      {8: {"a4-highgpu-8g"}},
}

// gcpN1CPUs is the smallest N1 host (vCPUs; memory at least 4 GB per vCPU)
// SkyPilot pairs with N GPUs of a model that attaches to any N1 machine.
var gcpN1CPUs = map[string]map[int]float64{
	"T4":      {1: 4, 2: 8, 4: 48},
	"K80":     {1: 4, 2: 8, 4: 16, 8: 32, 16: 64},
	"DEFAULT": {1: 8, 2: 16, 4: 32, 8: 64, 16: 128},
}

type gcpHost struct {
	inst        string
	zone        string
	vcpus, mem  float64
	price, spot gpuwarden.Micros
	line        int
	used        bool
}

type gcpAccel struct {
	name              string
	count             float64
	region, zone      string
	price, spot       gpuwarden.Micros
	sizeMiB, totalMiB float64
	line              int
	origin            gpuwarden.Origin
}

// addHost keeps a GCP machine-type row for pairing with accelerator rows.
func (s *skyPilotReader) addHost(inst string, cVCPUs, cMem, cPrice, cSpot, cRegion, cZone int) error {
	t := s.t
	h := gcpHost{inst: inst, zone: t.cell(cZone), line: t.line()}
	if h.zone == "" {
		h.zone = t.cell(cRegion)
	}
	var err error
	if h.price, err = t.price(cPrice, false); err != nil {
		return err
	}
	if h.spot, err = t.price(cSpot, false); err != nil {
		return err
	}
	if h.spot == h.price {
		h.spot = 0
	}
	if h.vcpus, err = t.cpus(cVCPUs); err != nil {
		return err
	}
	if h.mem, err = t.number(cMem); err != nil {
		return err
	}
	s.hosts = append(s.hosts, h)
	return nil
}

// combineGCP adds each accelerator row to the cheapest machine type in its
// zone that GCP lets carry it, and warns about halves left alone.
func (s *skyPilotReader) combineGCP() {
	byZone := map[string][]int{}
	for i, h := range s.hosts {
		byZone[h.zone] = append(byZone[h.zone], i)
	}
	// A zone's accelerator rows mostly repeat (acc, count) pairs; remember
	// the host each pair got so that pairing stays linear in practice.
	type pairing struct {
		zone, acc string
		count     float64
	}
	chosen := map[pairing]int{}
	for _, a := range s.accs {
		zone := a.zone
		if zone == "" {
			zone = a.region
		}
		key := pairing{zone, strings.ToUpper(a.name), a.count}
		best, done := chosen[key]
		if !done {
			best = -1
			fits := gcpHostFilter(key.acc, a.count)
			for _, i := range byZone[zone] {
				h := &s.hosts[i]
				if h.price > 0 && fits(h) && (best < 0 || h.price < s.hosts[best].price) {
					best = i
				}
			}
			chosen[key] = best
		}
		if best < 0 {
			s.unmatched.add(a.line)
			continue
		}
		h := &s.hosts[best]
		h.used = true
		o := gpuwarden.Offer{Provider: s.provider, Instance: h.inst, GPUCount: a.count, Currency: "USD",
			VCPUs: int(math.Round(h.vcpus)), RAMGB: h.mem, Origin: a.origin,
			Source: s.source + " (machine type and accelerator rows added up)"}
		if a.price > 0 {
			o.OnDemandHourly = h.price + a.price
		}
		if a.spot > 0 && h.spot > 0 {
			o.SpotHourly = h.spot + a.spot
		}
		if o.OnDemandHourly == 0 && o.SpotHourly == 0 {
			s.noPrice.add(a.line)
			continue
		}
		o.Region, o.Country = placeOf(s.provider, a.region)
		if a.zone != "" {
			o.Zones = 1
		}
		g := resolveGPU(a.name, "", a.count, a.sizeMiB, a.totalMiB, false)
		if g.fixed {
			s.memFixed.add(a.line)
		}
		o.GPU, o.VRAMGBPerGPU = g.name, g.vram
		s.out.add(o)
	}
	for _, h := range s.hosts {
		if !h.used && isGCPGPUFamily(h.inst) {
			s.hostOnly.add(h.line)
			if len(s.hostOnlyNames) < 3 && !slices.Contains(s.hostOnlyNames, cut(h.inst)) {
				s.hostOnlyNames = append(s.hostOnlyNames, cut(h.inst))
			}
		}
	}
}

// gcpHostFilter says which machine types may carry count GPUs of a model.
func gcpHostFilter(acc string, count float64) func(*gcpHost) bool {
	n := int(count)
	if float64(n) != count {
		return func(*gcpHost) bool { return false }
	}
	if perCount, ok := gcpDedicated[acc]; ok {
		types := perCount[n]
		return func(h *gcpHost) bool { return slices.Contains(types, h.inst) }
	}
	table, ok := gcpN1CPUs[acc]
	if !ok {
		table = gcpN1CPUs["DEFAULT"]
	}
	cpus := table[n]
	return func(h *gcpHost) bool {
		return cpus > 0 && strings.HasPrefix(h.inst, "n1-") && h.vcpus >= cpus && h.mem >= 4*cpus
	}
}

func (s *skyPilotReader) warnings() []string {
	w := []string{"SkyPilot catalogs carry no date: these offers are undated and cannot be checked for staleness"}
	add := func(c counted, format string, args ...any) {
		if c.n > 0 {
			w = append(w, fmt.Sprintf(format, args...)+" ("+c.where()+")")
		}
	}
	add(s.noSpot, "%s a spot price of 0, equal to on-demand or above it: treated as no spot market", rowsDo(s.noSpot.n, "lists", "list"))
	add(s.fractional, "%s a fraction of a GPU: the count is kept as a fraction and VRAM per GPU is the whole card's", rowsDo(s.fractional.n, "rents", "rent"))
	add(s.nonNVIDIA, "skipped %s of TPUs and other non-NVIDIA accelerators", rows(s.nonNVIDIA.n))
	add(s.noPrice, "skipped %s of GPUs without a price", rows(s.noPrice.n))
	add(s.memFixed, "%s GPU memory that no model of that name has: used the datasheet figure", rowsDo(s.memFixed.n, "gives", "give"))
	add(s.accOnly, "skipped %s pricing an accelerator without a machine (empty InstanceType)", rows(s.accOnly.n))
	add(s.unmatched, "skipped %s pricing a GCP accelerator alone: no machine type in its zone can carry it", rows(s.unmatched.n))
	add(s.noRegion, "skipped %s without a Region", rows(s.noRegion.n))
	if len(s.unknownRegions) > 0 {
		w = append(w, unknownRegionWarning(s.provider, s.unknownRegions))
	}
	add(s.hostOnly, "skipped %s pricing a GCP GPU machine type (%s) without its GPUs, with no accelerator row to add",
		rows(s.hostOnly.n), strings.Join(s.hostOnlyNames, ", "))
	return w
}

// offerKey identifies one offer after zones are folded together.
type offerKey struct {
	region, instance, gpu string
	count                 float64
}

// collapser keeps one offer per region, instance and GPU: the cheapest
// on-demand and the cheapest spot price any of its zones lists, and how
// many zones list it.
type collapser struct {
	idx    map[offerKey]int
	offers []gpuwarden.Offer
}

func (c *collapser) add(o gpuwarden.Offer) {
	k := offerKey{o.Region, o.Instance, o.GPU, o.GPUCount}
	if c.merge(k, o.OnDemandHourly, o.SpotHourly, o.Zones > 0) {
		return
	}
	c.idx[k] = len(c.offers)
	c.offers = append(c.offers, o)
}

// merge folds prices into the offer of key k and reports whether there was
// one; the hot path of a big catalog, it builds nothing.
func (c *collapser) merge(k offerKey, onDemand, spot gpuwarden.Micros, zoned bool) bool {
	i, ok := c.idx[k]
	if !ok {
		return false
	}
	cur := &c.offers[i]
	if zoned {
		cur.Zones++
	}
	cur.OnDemandHourly = minPositive(cur.OnDemandHourly, onDemand)
	cur.SpotHourly = minPositive(cur.SpotHourly, spot)
	return true
}

// minPositive is the smaller of two prices where 0 means "not offered".
func minPositive(a, b gpuwarden.Micros) gpuwarden.Micros {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}
