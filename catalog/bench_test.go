package catalog

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

// skyPilot50k builds a 50,000-row SkyPilot vms.csv shaped like AWS's: GPU
// machines repeated per zone with per-zone spot prices, CPU machines mixed
// in, GpuInfo dicts and pandas-style long float prices.
func skyPilot50k() []byte {
	type machine struct {
		inst, acc  string
		count      string
		vcpus, mem int
		mib        int
		price      float64
	}
	machines := []machine{
		{"g4dn.xlarge", "T4", "1", 4, 16, 16384, 0.526}, {"g4dn.12xlarge", "T4", "4", 48, 192, 16384, 3.912},
		{"g5.xlarge", "A10G", "1", 4, 16, 24576, 1.006}, {"g5.48xlarge", "A10G", "8", 192, 768, 24576, 16.288},
		{"g6.xlarge", "L4", "1", 4, 16, 22888, 0.8048}, {"g6.48xlarge", "L4", "8", 192, 768, 22888, 13.3504},
		{"g6e.xlarge", "L40S", "1", 4, 32, 45776, 1.861}, {"g6e.48xlarge", "L40S", "8", 192, 1536, 45776, 30.13118},
		{"g6f.large", "L4", "0.125", 2, 8, 2861, 0.2008}, {"p3.2xlarge", "V100", "1", 8, 61, 16384, 3.06},
		{"p3dn.24xlarge", "V100-32GB", "8", 96, 768, 32768, 31.212}, {"p4d.24xlarge", "A100", "8", 96, 1152, 40960, 32.7726},
		{"p4de.24xlarge", "A100-80GB", "8", 96, 1152, 81920, 40.96575}, {"p5.48xlarge", "H100", "8", 192, 2048, 81920, 98.32},
		{"p5en.48xlarge", "H200", "8", 192, 2048, 143771, 84.8}, {"m5.large", "", "", 2, 8, 0, 0.096},
		{"c5.xlarge", "", "", 4, 8, 0, 0.17}, {"r5.2xlarge", "", "", 8, 64, 0, 0.504},
	}
	regions := []string{"us-east-1", "us-east-2", "us-west-1", "us-west-2", "ca-central-1", "eu-central-1",
		"eu-west-1", "eu-west-2", "eu-west-3", "eu-north-1", "eu-south-1", "ap-south-1", "ap-northeast-1",
		"ap-northeast-2", "ap-southeast-1", "ap-southeast-2", "sa-east-1", "me-south-1", "af-south-1", "ap-east-1"}
	var b bytes.Buffer
	b.WriteString("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone,Arch\n")
	for i := 0; i < 50_000; i++ {
		m := machines[i%len(machines)]
		region := regions[(i/len(machines))%len(regions)]
		zone := (i / (len(machines) * len(regions))) % 6
		// Regions differ in price; zones only in spot.
		price := m.price * (1 + float64((i/len(machines))%len(regions))*0.013)
		spot := price * (0.3 + float64(zone)*0.017)
		info := ""
		if m.acc != "" {
			count, _ := strconv.ParseFloat(m.count, 64)
			total := int(float64(m.mib) * count)
			info = fmt.Sprintf(`"{'Gpus': [{'Name': '%s', 'Manufacturer': 'NVIDIA', 'Count': %s, 'MemoryInfo': {'SizeInMiB': %d}}], 'TotalGpuMemoryInMiB': %d}"`,
				m.acc, m.count, m.mib, total)
		}
		fmt.Fprintf(&b, "%s,%s,%s,%d.0,%d.0,%s,%s,%s,%s,%s-az%d,x86_64\n", m.inst, m.acc, m.count, m.vcpus, m.mem, info,
			strconv.FormatFloat(price, 'g', 17, 64), strconv.FormatFloat(spot, 'f', 6, 64), region, region, zone+1)
	}
	return b.Bytes()
}

func BenchmarkImportSkyPilot50k(b *testing.B) {
	in := skyPilot50k()
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	var n int
	for b.Loop() {
		offers, _, err := ReadOffersAs("aws/vms.csv", "aws", bytes.NewReader(in))
		if err != nil {
			b.Fatal(err)
		}
		n = len(offers)
	}
	b.ReportMetric(float64(n), "offers")
}

// The generated catalog must import cleanly and fold its zones, or the
// benchmark measures an error path.
func TestSkyPilot50kImports(t *testing.T) {
	in := skyPilot50k()
	offers, warns, err := ReadOffersAs("aws/vms.csv", "aws", bytes.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	// 15 GPU machines × 20 regions.
	if got, want := len(offers), 15*20; got != want {
		t.Errorf("got %d offers, want %d", got, want)
	}
	if len(warns) != 2 { // undated, fractional g6f
		t.Errorf("warnings: %q", warns)
	}
}

// own100k is a gpuwarden prices.csv of 100,000 rows: five providers, five
// GPU models, dated, half with a spot price.
func own100k() []byte {
	gpus := []string{"T4,16", "L4,24", "RTX-4090,24", "A100-80GB,80", "H100-SXM,80"}
	places := []string{"aws,us-east-1,US", "aws,eu-central-1,DE", "gcp,europe-west4,NL", "lambda,us-west-1,US", "runpod,EU-RO-1,RO"}
	var b bytes.Buffer
	b.WriteString("provider,region,country,instance,gpu,gpu_count,vram_gb_per_gpu,currency,on_demand_hourly,spot_hourly,monthly,as_of,source\n")
	for i := range 100_000 {
		count := 1 << (i % 4)
		od := float64(count) * (0.1 + float64(i%590)/100)
		spot := ""
		if i%2 == 0 {
			spot = strconv.FormatFloat(od*0.4, 'f', 4, 64)
		}
		fmt.Fprintf(&b, "%s,box-%d,%s,%d,USD,%s,%s,,2026-11,bench\n", places[i%len(places)], i,
			gpus[(i/7)%len(gpus)], count, strconv.FormatFloat(od, 'f', 4, 64), spot)
	}
	return b.Bytes()
}

func BenchmarkReadOwn100k(b *testing.B) {
	in := own100k()
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		var offers gpuwarden.OffersBuilder
		if _, err := parseOffers("prices.csv", "", string(in), &offers); err != nil || offers.Len() != 100_000 {
			b.Fatalf("%d offers, %v", offers.Len(), err)
		}
	}
	b.ReportMetric(100_000*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkReadCached100k reads the parse of own100k back from the
// parsed-catalog cache's layout (decode only, the file in memory), beside
// BenchmarkReadOwn100k's parse of the same rows.
func BenchmarkReadCached100k(b *testing.B) {
	var offers gpuwarden.OffersBuilder
	warns, err := parseOffers("prices.csv", "", string(own100k()), &offers)
	if err != nil {
		b.Fatal(err)
	}
	key := fmt.Sprintf("%064x", 1)
	var entry bytes.Buffer
	if err := encodeCache(&entry, key, &offers, 0, warns); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(entry.Len()))
	b.ReportAllocs()
	for b.Loop() {
		var got gpuwarden.OffersBuilder
		if _, err := decodeCache(bytes.NewReader(entry.Bytes()), int64(entry.Len()), key, &got); err != nil || got.Len() != 100_000 {
			b.Fatalf("%d offers, %v", got.Len(), err)
		}
	}
	b.ReportMetric(100_000*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkEncodeCache100k lays out own100k's parse for the cache, the
// first read's extra cost.
func BenchmarkEncodeCache100k(b *testing.B) {
	var offers gpuwarden.OffersBuilder
	warns, err := parseOffers("prices.csv", "", string(own100k()), &offers)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := encodeCache(io.Discard, fmt.Sprintf("%064x", 1), &offers, 0, warns); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSnapshotParse is what every `plan` pays for the embedded
// snapshot: gunzip each cloud's vms.csv and read it through the SkyPilot
// importer, zones folded and dated.
func BenchmarkSnapshotParse(b *testing.B) {
	if _, err := Embedded(); err != nil { // side tables parsed once per process
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		var o gpuwarden.OffersBuilder
		if _, err := snapshotOffers(&o); err != nil || o.Len() < 1500 {
			b.Fatalf("%v, %d offers", err, o.Len())
		}
	}
}

// BenchmarkSnapshotUnpack is the gunzip part of it alone.
func BenchmarkSnapshotUnpack(b *testing.B) {
	srcs, err := snapshotSources()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, s := range srcs {
			if _, err := unpack(s.cloud); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkSnapshotCached is the same offers read back from the parse
// cache, as every plan after the first does.
func BenchmarkSnapshotCached(b *testing.B) {
	dir := b.TempDir()
	if _, err := cachedSnapshot(newParseCache(dir)); err != nil {
		b.Fatal(err)
	}
	content, err := snapshotContent()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		var o gpuwarden.OffersBuilder
		if _, ok := newParseCache(dir).lookupEntry(snapshotCacheName, "", content, &o); !ok || o.Len() < 1500 {
			b.Fatalf("miss, or %d offers", o.Len())
		}
	}
}
