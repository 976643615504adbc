package catalog

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// readFileT reads a testdata file through ReadOffers or, with a provider,
// ReadOffersAs.
func readFileT(t *testing.T, name, provider string) ([]gpuwarden.Offer, []string) {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		offers []gpuwarden.Offer
		warns  []string
	)
	if provider == "" {
		offers, warns, err = ReadOffers(name, f)
	} else {
		offers, warns, err = ReadOffersAs(name, provider, f)
	}
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return offers, warns
}

// checkGolden compares v, as indented JSON, with testdata/golden/NAME.json;
// go test -update rewrites the file.
func checkGolden(t *testing.T, name string, v any) {
	t.Helper()
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", "golden", name+".json")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from the golden file; got:\n%s", path, got)
	}
}

// offerWant is the part of an offer a test pins down.
type offerWant struct {
	region, instance, gpu string
	count                 float64
	country               string
	vram                  float64
	onDemand, spot        string
}

func findOffer(offers []gpuwarden.Offer, region, instance, gpu string, count float64) (gpuwarden.Offer, bool) {
	for _, o := range offers {
		if o.Region == region && o.Instance == instance && o.GPU == gpu && o.GPUCount == count {
			return o, true
		}
	}
	return gpuwarden.Offer{}, false
}

func checkOffers(t *testing.T, offers []gpuwarden.Offer, wants []offerWant) {
	t.Helper()
	if len(offers) != len(wants) {
		t.Errorf("got %d offers, want %d", len(offers), len(wants))
		for _, o := range offers {
			t.Logf("  %s %s %s x%v", o.Region, o.Instance, o.GPU, o.GPUCount)
		}
	}
	for _, w := range wants {
		o, ok := findOffer(offers, w.region, w.instance, w.gpu, w.count)
		if !ok {
			t.Errorf("no offer %s %s %s x%v", w.region, w.instance, w.gpu, w.count)
			continue
		}
		got := offerWant{o.Region, o.Instance, o.GPU, o.GPUCount, o.Country, o.VRAMGBPerGPU,
			o.OnDemandHourly.String(), o.SpotHourly.String()}
		if got != w {
			t.Errorf("offer %s %s:\n got %+v\nwant %+v", w.region, w.instance, got, w)
		}
	}
}

func checkWarnings(t *testing.T, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings:\n got %q\nwant %q", got, want)
	}
}

const undatedSkyPilot = "SkyPilot catalogs carry no date: these offers are undated and cannot be checked for staleness"

func TestReadOffersFormats(t *testing.T) {
	tests := []struct {
		file, provider string
		wantProvider   string
		offers         []offerWant
		warnings       []string
	}{
		{
			file: "testdata/skypilot/aws/vms.csv", wantProvider: "aws",
			offers: []offerWant{
				// Two zones: the cheaper spot wins; on-demand is region-wide.
				{"us-east-1", "g4dn.xlarge", "T4", 1, "US", 16, "0.526", "0.1987"},
				// Spot equal to on-demand: no spot market.
				{"us-west-2", "g4dn.xlarge", "T4", 1, "US", 16, "0.526", "0"},
				{"eu-central-1", "g4dn.xlarge", "T4", 1, "DE", 16, "0.658", "0.2296"},
				{"us-east-1", "g5.xlarge", "A10G", 1, "US", 24, "1.006", "0.4246"},
				// 22,888 MiB is what an L4 exposes; it is compared at the 24 GB it is sold as.
				{"us-east-1", "g6.xlarge", "L4", 1, "US", 24, "0.8048", "0.349"},
				// An eighth of an L4: the slice's 2,861 MiB scaled back to the card.
				{"us-east-1", "g6f.large", "L4", 0.125, "US", 24, "0.2008", "0"},
				{"us-east-1", "p3dn.24xlarge", "V100-32GB", 8, "US", 32, "31.212", "9.3636"},
				{"us-east-1", "p4d.24xlarge", "A100-40GB", 8, "US", 40, "32.7726", "13.109"},
				{"us-east-1", "p4de.24xlarge", "A100-80GB", 8, "US", 80, "40.96575", "0"},
				// 55.069999999999993 is pandas for 55.07.
				{"us-east-1", "p5.48xlarge", "H100-SXM", 8, "US", 80, "98.32", "55.07"},
			},
			warnings: []string{
				undatedSkyPilot,
				"1 row lists a spot price of 0, equal to on-demand or above it: treated as no spot market (line 6)",
				"1 row rents a fraction of a GPU: the count is kept as a fraction and VRAM per GPU is the whole card's (line 11)",
				"skipped 2 rows of TPUs and other non-NVIDIA accelerators (lines 8, 12)",
			},
		},
		{
			file: "testdata/skypilot/gcp/vms.csv", wantProvider: "gcp",
			offers: []offerWant{
				// Machine type (0.81406) plus accelerator (3.229739).
				{"europe-west4", "a2-highgpu-1g", "A100-40GB", 1, "NL", 40, "4.043799", "1.61023"},
				{"us-central1", "a2-highgpu-1g", "A100-40GB", 1, "US", 40, "3.673388", "1.469323"},
				// The cheapest N1 with 4 vCPUs and 16 GB: n1-standard-4 has 15 GB.
				{"us-central1", "n1-highmem-4", "T4", 1, "US", 16, "0.586606", "0.119812"},
				// A V100 wants 8 vCPUs and 32 GB: n1-standard-8 has 30 GB.
				{"us-central1", "n1-highmem-8", "V100", 1, "US", 16, "2.953212", "1.091624"},
			},
			warnings: []string{
				undatedSkyPilot,
				"skipped 2 rows of TPUs and other non-NVIDIA accelerators (lines 17, 18)",
				"skipped 1 row pricing a GCP accelerator alone: no machine type in its zone can carry it (line 14)",
				"skipped 1 row pricing a GCP GPU machine type (a2-ultragpu-1g) without its GPUs, with no accelerator row to add (line 5)",
			},
		},
		{
			file: "testdata/skypilot/vast/vms.csv", wantProvider: "vast",
			offers: []offerWant{
				{"Czechia", "1x-H100_SXM-32-65536", "H100-SXM", 1, "CZ", 80, "1.8", "0"},
				// Vast writes the whole box's memory: 163,118 MiB over 2 GPUs.
				{"Florida", "2x-H100_SXM-32-65536", "H100-SXM", 2, "US", 80, "3.6", "0"},
				{"California", "2x-H100_NVL-32-65536", "H100-NVL", 2, "US", 94, "4.53", "0"},
				{"Slovenia", "2x-A100_SXM4-32-65536", "A100-40GB", 2, "SI", 40, "1.47", "0"},
				// ", US, NA": no city, the country stands in.
				{"US", "4x-H200-32-65536", "H200", 4, "US", 141, "11.3", "0"},
				// 98,280 MiB for two 4090s is neither 24 nor 48 per card: datasheet.
				{"Hong Kong", "2x-RTX_4090-32-65536", "RTX-4090", 2, "HK", 24, "0.8", "0"},
				{"Taiwan", "1x-RTX_5090-32-65536", "RTX-5090", 1, "TW", 32, "0.53", "0"},
			},
			warnings: []string{
				undatedSkyPilot,
				"7 rows list a spot price of 0, equal to on-demand or above it: treated as no spot market (lines 2, 3, 4, 5, 6, …)",
				"1 row gives GPU memory that no model of that name has: used the datasheet figure (line 7)",
			},
		},
		{
			file: "testdata/skypilot/lambda/vms.csv", wantProvider: "lambda",
			offers: []offerWant{
				// Lambda's TotalGpuMemoryInMiB is per GPU too: 16 GB V100s.
				{"us-east-1", "gpu_8x_v100", "V100", 8, "US", 16, "4.4", "0"},
				{"us-east-1", "gpu_8x_a100", "A100-40GB", 8, "US", 40, "10.32", "0"},
				{"us-east-1", "gpu_1x_h100_pcie", "H100-PCIe", 1, "US", 80, "2.49", "0"},
				{"europe-central-1", "gpu_1x_a6000", "RTX-A6000", 1, "DE", 48, "0.8", "0"},
			},
			warnings: []string{undatedSkyPilot},
		},
		{
			// Nebius writes the host's RAM where GPU memory belongs.
			file: "testdata/skypilot/nebius/vms.csv", wantProvider: "nebius",
			offers: []offerWant{
				{"eu-north1", "gpu-h100-sxm_8gpu-128vcpu-1600gb", "H100-SXM", 8, "FI", 80, "23.6", "10"},
				{"eu-north1", "gpu-l40s-a_1gpu-8vcpu-32gb", "L40S", 1, "FI", 48, "1.5484", "0"},
				{"us-central1", "gpu-b200-sxm_8gpu-160vcpu-1792gb", "B200", 8, "US", 180, "44", "0"},
			},
			warnings: []string{
				undatedSkyPilot,
				"3 rows give GPU memory that no model of that name has: used the datasheet figure (lines 3, 4, 5)",
			},
		},
		{
			// The name says nothing; the caller does.
			file: "testdata/skypilot/vast/vms.csv", provider: "VastAI", wantProvider: "vast",
			offers: []offerWant{
				{"Czechia", "1x-H100_SXM-32-65536", "H100-SXM", 1, "CZ", 80, "1.8", "0"},
				{"Florida", "2x-H100_SXM-32-65536", "H100-SXM", 2, "US", 80, "3.6", "0"},
				{"California", "2x-H100_NVL-32-65536", "H100-NVL", 2, "US", 94, "4.53", "0"},
				{"Slovenia", "2x-A100_SXM4-32-65536", "A100-40GB", 2, "SI", 40, "1.47", "0"},
				{"US", "4x-H200-32-65536", "H200", 4, "US", 141, "11.3", "0"},
				{"Hong Kong", "2x-RTX_4090-32-65536", "RTX-4090", 2, "HK", 24, "0.8", "0"},
				{"Taiwan", "1x-RTX_5090-32-65536", "RTX-5090", 1, "TW", 32, "0.53", "0"},
			},
			warnings: []string{
				undatedSkyPilot,
				"7 rows list a spot price of 0, equal to on-demand or above it: treated as no spot market (lines 2, 3, 4, 5, 6, …)",
				"1 row gives GPU memory that no model of that name has: used the datasheet figure (line 7)",
			},
		},
		{
			file: "testdata/gpuhunt/aws.csv", wantProvider: "aws",
			offers: []offerWant{
				// The on-demand row and the spot row merge.
				{"us-east-1", "g5.xlarge", "A10G", 1, "US", 24, "1.006", "0.4246"},
				{"us-east-1", "g6.xlarge", "L4", 1, "US", 24, "0.8048", "0"},
				{"us-east-1", "p4d.24xlarge", "A100-40GB", 8, "US", 40, "32.7726", "13.109"},
				// Only a spot row: on-demand not offered.
				{"us-west-2", "p4d.24xlarge", "A100-40GB", 8, "US", 40, "0", "12.5001"},
				{"eu-central-1", "p5.48xlarge", "H100-SXM", 8, "DE", 80, "104", "0"},
			},
			warnings: []string{
				"gpuhunt catalogs carry no date per row: these offers are undated and cannot be checked for staleness",
				"1 offer lists a spot price equal to on-demand: treated as no spot market",
				"skipped 1 row of TPUs and other non-NVIDIA accelerators (line 2)",
			},
		},
		{
			file: "testdata/gpuhunt/gcp.csv", wantProvider: "gcp",
			offers: []offerWant{
				{"europe-west4", "a2-highgpu-1g", "A100-40GB", 1, "NL", 40, "3.67", "0"},
				// Three zones fold into us-central1.
				{"us-central1", "n1-standard-4", "T4", 1, "US", 16, "0.539999", "0.1"},
				{"us-central1", "n1-standard-4", "T4", 2, "US", 16, "0.889999", "0"},
			},
			warnings: []string{
				"gpuhunt catalogs carry no date per row: these offers are undated and cannot be checked for staleness",
				"skipped 1 row of TPUs and other non-NVIDIA accelerators (line 8)",
			},
		},
		{
			file: "testdata/own/prices.csv",
			offers: []offerWant{
				// Country from the region table, VRAM from the GPU table.
				{"eu-central-1", "p5.48xlarge", "H100-SXM", 8, "DE", 80, "98.32", "0"},
				{"fsn1", "GEX44", "RTX-4090", 1, "DE", 24, "0.25", "0"},
				{"zone-9", "acme.b200x8", "B200", 8, "", 180, "38.5", "19.25"},
				{"zone-9", "acme.qx", "QUADRO-X9000", 2, "", 0, "1.1", "0"},
			},
			warnings: []string{
				"1 row without as_of (line 3): undated, so their staleness cannot be checked",
				"2 rows without country in a region gpuwarden does not know (lines 4, 5): residency rules cannot place them",
				"1 row of GPU models gpuwarden does not know without vram_gb_per_gpu (line 5): no workload fits them until it is filled",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file+"/"+tt.provider, func(t *testing.T) {
			offers, warns := readFileT(t, tt.file, tt.provider)
			checkOffers(t, offers, tt.offers)
			checkWarnings(t, warns, tt.warnings)
			for _, o := range offers {
				if tt.wantProvider != "" && o.Provider != tt.wantProvider {
					t.Errorf("%s: provider %q, want %q", o.Origin, o.Provider, tt.wantProvider)
				}
				if o.Source == "" || o.Origin.IsZero() || o.Currency == "" {
					t.Errorf("offer without source, origin or currency: %+v", o)
				}
			}
			if tt.provider == "" {
				name := strings.NewReplacer("testdata/", "", "/", "_", ".csv", "").Replace(tt.file)
				checkGolden(t, name, struct {
					Offers   []gpuwarden.Offer
					Warnings []string
				}{offers, warns})
			}
		})
	}
}

func TestReadOffersOwnDetails(t *testing.T) {
	offers, _ := readFileT(t, "testdata/own/prices.csv", "")
	tests := []struct {
		field, got, want string
	}{
		// The BOM and upper-case header names are read; "usd" is upper-cased.
		{"provider", offers[0].Provider, "aws"},
		{"currency", string(offers[0].Currency), "USD"},
		{"as_of", offers[0].AsOf, "2026-10-01"},
		{"source with a quoted comma", offers[0].Source, "aws.amazon.com/ec2/pricing, read by hand"},
		{"origin", offers[0].Origin.String(), "testdata/own/prices.csv:2"},
		{"undated as_of", offers[1].AsOf, ""},
		{"currency EUR", string(offers[1].Currency), "EUR"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.field, tt.got, tt.want)
		}
	}
}

func TestReadOffersErrors(t *testing.T) {
	const own = "provider,region,gpu,gpu_count,currency,on_demand_hourly,spot_hourly,monthly,as_of,vram_gb_per_gpu\n"
	const sky = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone\n"
	const hunt = "instance_name,location,price,cpu,memory,gpu_count,gpu_name,gpu_memory,spot\n"
	ownHint := formats[formatOwn].hint
	const rowHint = `quote a field that holds a comma ("a, b"), and give every row one field per column, empty ones too; `
	skyHint := formats[formatSkyPilot].hint
	huntHint := formats[formatGpuhunt].hint
	tests := []struct {
		name, file, input string
		wantMsg, wantHint string
	}{
		{"not a number", "bad.csv", own + "aws,us-east-1,T4,1,USD,abc,,,2026-11,\n",
			`bad.csv:2:6: column on_demand_hourly: "abc" is not a number`, ownHint},
		{"negative price", "bad.csv", own + "aws,us-east-1,T4,1,USD,0.5,-0.1,,2026-11,\n",
			`bad.csv:2:7: column spot_hourly: "-0.1" is negative`, ownHint},
		{"too many decimals in our format", "bad.csv", own + "aws,us-east-1,T4,1,USD,0.1234567,,,2026-11,\n",
			`bad.csv:2:6: column on_demand_hourly: "0.1234567" has more than 6 decimal places`, ownHint},
		{"exponent in our format", "bad.csv", own + "aws,us-east-1,T4,1,USD,1e-3,,,2026-11,\n",
			`bad.csv:2:6: column on_demand_hourly: "1e-3" is not a number`, ownHint},
		{"bad GPU count", "bad.csv", own + "aws,us-east-1,T4,one,USD,0.5,,,2026-11,\n",
			`bad.csv:2:4: column gpu_count: "one" is not a number`, ownHint},
		{"zero GPUs", "bad.csv", own + "aws,us-east-1,T4,0,USD,0.5,,,2026-11,\n",
			`bad.csv:2:4: column gpu_count: "0": a GPU offer needs at least part of one GPU`, ownHint},
		{"missing provider", "bad.csv", own + ",us-east-1,T4,1,USD,0.5,,,2026-11,\n",
			`bad.csv:2:1: column provider: a value is required`, ownHint},
		{"bad currency", "bad.csv", own + "aws,us-east-1,T4,1,US$,0.5,,,2026-11,\n",
			`bad.csv:2:5: column currency: "US$" is not a three-letter ISO 4217 code such as USD`, ownHint},
		{"bad date", "bad.csv", own + "aws,us-east-1,T4,1,USD,0.5,,,2026/11,\n",
			`bad.csv:2:9: column as_of: "2026/11" is not a date written YYYY-MM or YYYY-MM-DD`, ownHint},
		{"no price", "bad.csv", own + "aws,us-east-1,T4,1,USD,,,,2026-11,\n",
			`bad.csv:2:6: column on_demand_hourly: row has no price: fill on_demand_hourly, spot_hourly or monthly`, ownHint},
		{"short row", "bad.csv", own + "aws,us-east-1,T4,1,USD,0.5\n",
			`bad.csv:2:7: row has 6 fields, the header has 10`, rowHint + ownHint},
		{"error on a later line", "bad.csv", own + "aws,us-east-1,T4,1,USD,0.5,,,2026-11,\n\naws,us-east-1,T4,1,USD,0.5,,x,2026-11,\n",
			`bad.csv:4:8: column monthly: "x" is not a number`, ownHint},
		{"broken quote", "bad.csv", own + "aws,\"us-east-1,T4,1,USD,0.5,,,2026-11,\n",
			`bad.csv:2:40: extraneous or missing " in quoted-field`, ownHint},
		{"SkyPilot price", "aws/vms.csv", sky + "p5.48xlarge,H100,8,192,2048,,98.3.2,,us-east-1,use1-az1\n",
			`aws/vms.csv:2:7: column Price: "98.3.2" is not a number`, skyHint},
		{"SkyPilot negative spot", "aws/vms.csv", sky + "p5.48xlarge,H100,8,192,2048,,98.32,-1e-2,us-east-1,use1-az1\n",
			`aws/vms.csv:2:8: column SpotPrice: "-1e-2" is negative`, skyHint},
		{"SkyPilot vCPUs past 32 bits", "aws/vms.csv", sky + "p5.48xlarge,H100,8,3e9,2048,,98.32,,us-east-1,use1-az1\n",
			`aws/vms.csv:2:4: column vCPUs: "3e9" is more vCPUs than any machine has`, skyHint},
		{"gpuhunt cpus past 32 bits", "runpod.csv", hunt + "1x_A100,US,1.39,5000000000,64,1,A100,80,false\n",
			`runpod.csv:2:4: column cpu: "5000000000" is more vCPUs than any machine has`, huntHint},
		{"SkyPilot count", "aws/vms.csv", sky + "p5.48xlarge,H100,eight,192,2048,,98.32,,us-east-1,use1-az1\n",
			`aws/vms.csv:2:3: column AcceleratorCount: "eight" is not a number`, skyHint},
		{"SkyPilot count missing", "aws/vms.csv", sky + "p5.48xlarge,H100,,192,2048,,98.32,,us-east-1,use1-az1\n",
			`aws/vms.csv:2:3: column AcceleratorCount: a value is required when AcceleratorName is set`, skyHint},
		{"SkyPilot GPU memory", "aws/vms.csv", sky + "p5.48xlarge,H100,8,192,2048,{'SizeInMiB': '8x'},98.32,,us-east-1,use1-az1\n",
			`aws/vms.csv:2:6: column GpuInfo: SizeInMiB "8x" is not a number of MiB`, skyHint},
		{"gpuhunt spot flag", "aws.csv", hunt + "g5.xlarge,us-east-1,1.006,4,16,1,A10G,24,maybe\n",
			`aws.csv:2:9: column spot: "maybe" is neither true nor false`, huntHint},
		{"gpuhunt price", "aws.csv", hunt + "g5.xlarge,us-east-1,$1,4,16,1,A10G,24,False\n",
			`aws.csv:2:3: column price: "$1" is not a number`, huntHint},
		{"unrecognised header", "x.csv", "a,b,c\n1,2,3\n",
			`x.csv:1: unrecognised header "a,b,c": expected ` + acceptedFormats, acceptedFormats},
		{"missing column", "x.csv", "provider,region,gpu,currency,on_demand_hourly\n",
			`x.csv:1: header has no column gpu_count, which a gpuwarden prices.csv needs`, ownHint},
		{"duplicate column", "x.csv", "provider,region,Region\n",
			`x.csv:1:3: column Region appears twice in the header`, acceptedFormats},
		{"empty file", "x.csv", "",
			`x.csv: empty file: expected a header row of ` + acceptedFormats, acceptedFormats},
		{"provider not in the name", "/tmp/catalog/vms.csv", sky,
			`/tmp/catalog/vms.csv: cannot tell the provider of this SkyPilot vms.csv from its name`,
			"rename the file after its provider (aws.csv, aws-vms.csv) or keep it in a folder named after it (aws/vms.csv), or give the provider explicitly"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			offers, warns, err := ReadOffers(tt.file, strings.NewReader(tt.input))
			if offers != nil || warns != nil {
				t.Errorf("got %d offers and %d warnings with the error, want none", len(offers), len(warns))
			}
			var e *gpuwarden.Error
			if !errors.As(err, &e) {
				t.Fatalf("got error %v (%T), want *gpuwarden.Error", err, err)
			}
			if e.Code != gpuwarden.EInvalid {
				t.Errorf("code %q, want %q", e.Code, gpuwarden.EInvalid)
			}
			if e.Error() != tt.wantMsg {
				t.Errorf("message:\n got %s\nwant %s", e.Error(), tt.wantMsg)
			}
			if e.Hint != tt.wantHint {
				t.Errorf("hint:\n got %s\nwant %s", e.Hint, tt.wantHint)
			}
		})
	}
}

func TestProviderFromName(t *testing.T) {
	tests := []struct{ name, want string }{
		{"catalogs/v7/aws/vms.csv", "aws"},
		{`C:\catalogs\gcp\vms.csv`, "gcp"},
		{"aws-vms.csv", "aws"},
		{"runpod_2026-11.csv", "runpod"},
		{"lambdalabs.csv", "lambda"},
		{"vastai.csv", "vast"},
		{"downloads/OCI.csv", "oci"},
		{"vms.csv", ""},
		{"tmp/prices-2026.csv", ""},
	}
	for _, tt := range tests {
		got, err := providerFromName(&table{name: tt.name, format: formatSkyPilot})
		if got != tt.want || (err != nil) != (tt.want == "") {
			t.Errorf("providerFromName(%q) = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
}

func TestGpuhuntProviderColumn(t *testing.T) {
	in := "instance_name,location,price,cpu,memory,gpu_count,gpu_name,gpu_memory,spot,provider\n" +
		"gpu_1x_h100_pcie,us-east-1,2.49,26,200,1,H100,80,False,LambdaLabs\n"
	// No provider in the name, none given: the column is enough.
	offers, _, err := ReadOffers("export.csv", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := offers[0].Provider, "lambda"; got != want {
		t.Errorf("provider %q, want %q", got, want)
	}
	if got, want := offers[0].GPU, "H100-PCIe"; got != want {
		t.Errorf("GPU %q, want %q (from the instance name)", got, want)
	}
}

// TestReadOffersOwnRowsMatchTheHeader: a row of our own format must have
// one field per column. An unquoted "1,50" (a decimal comma) used to shift
// the rest of the row one column on, read as on-demand 1.00/h and spot
// 50.00/h, with the last column, source, swallowing what was left.
func TestReadOffersOwnRowsMatchTheHeader(t *testing.T) {
	const hdr = "provider,region,gpu,gpu_count,vram_gb_per_gpu,currency,on_demand_hourly,spot_hourly,as_of,source\n"
	tests := []struct {
		name, row, want string
	}{
		{"decimal comma", "aws,us-east-1,T4,1,16,USD,1,50,,2026-11,quote\n", "p.csv:2:11: row has 11 fields, the header has 10"},
		{"comma in the trailing source", "gcp,us-central1,H200,8,141,USD,83.492,,2026-11,per GPU-hour 10.4365, times 8\n",
			"p.csv:2:11: row has 11 fields, the header has 10"},
		{"field left out", "aws,us-east-1,T4,1,16,USD,0.5,,2026-11\n", "p.csv:2:10: row has 9 fields, the header has 10"},
		{"quoted comma", "gcp,us-central1,H200,8,141,USD,83.492,,2026-11,\"per GPU-hour 10.4365, times 8\"\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			offers, _, err := ReadOffers("p.csv", strings.NewReader(hdr+tt.row))
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Fatalf("ReadOffers error = %q, want %q", got, tt.want)
			}
			if err == nil && offers[0].Source != "per GPU-hour 10.4365, times 8" {
				t.Errorf("source %q, want the quoted text", offers[0].Source)
			}
		})
	}
}

// TestReadOffersOwnColumns: vram_gb_per_gpu is required and is never made
// up; a missing column used to read as 80 GB for every H100 and A100.
func TestReadOffersOwnColumns(t *testing.T) {
	ownHint := formats[formatOwn].hint
	tests := []struct {
		name, in  string
		wantErr   string
		wantVRAM  float64
		wantWarns int
	}{
		{"no vram column", "provider,region,gpu,gpu_count,currency,on_demand_hourly\naws,us-east-1,H100,8,USD,98.32\n",
			"x.csv:1: header has no column vram_gb_per_gpu, which a gpuwarden prices.csv needs", 0, 0},
		{"no price column", "provider,region,gpu,gpu_count,vram_gb_per_gpu,currency,as_of\naws,us-east-1,T4,1,16,USD,2026-11\n",
			"x.csv:1: header has no price column: a gpuwarden prices.csv needs on_demand_hourly, spot_hourly or monthly", 0, 0},
		{"empty vram of a name with one size", "provider,region,gpu,gpu_count,vram_gb_per_gpu,currency,spot_hourly,as_of\naws,us-east-1,T4,1,,USD,0.2,2026-11\n",
			"", 16, 0},
		{"empty vram of a name several sizes share", "provider,region,gpu,gpu_count,vram_gb_per_gpu,currency,monthly,as_of\nacme,x,H100,8,,USD,9000,2026-11\n",
			`x.csv:2:5: column vram_gb_per_gpu: a value is required: "H100" comes with 80 or 94 GB`, 0, 0},
		{"empty vram of an A100", "provider,region,gpu,gpu_count,vram_gb_per_gpu,currency,monthly,as_of\nacme,x,A100,8,,USD,9000,2026-11\n",
			`x.csv:2:5: column vram_gb_per_gpu: a value is required: "A100" comes with 40 or 80 GB`, 0, 0},
		{"zero vram", "provider,region,gpu,gpu_count,vram_gb_per_gpu,currency,monthly,as_of\nacme,x,T4,1,0,USD,90,2026-11\n",
			`x.csv:2:5: column vram_gb_per_gpu: "0": a GPU has more than 0 GB of memory`, 0, 0},
		{"empty vram of an unknown model", "provider,region,gpu,gpu_count,vram_gb_per_gpu,currency,monthly,as_of\nacme,x,X9000,1,,USD,90,2026-11\n",
			"", 0, 2}, // unknown VRAM, and a region without a country
		{"optional columns left out", "provider,region,gpu,gpu_count,vram_gb_per_gpu,currency,monthly\nacme,x,X9000,1,48,USD,90\n",
			"", 48, 2}, // undated, and a region without a country
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			offers, warns, err := ReadOffers("x.csv", strings.NewReader(tt.in))
			got := ""
			if err != nil {
				got = err.Error()
				if h := gpuwarden.ErrorHint(err); h != ownHint {
					t.Errorf("hint %q, want %q", h, ownHint)
				}
			}
			if got != tt.wantErr {
				t.Fatalf("error = %q, want %q", got, tt.wantErr)
			}
			if err != nil {
				return
			}
			if offers[0].VRAMGBPerGPU != tt.wantVRAM {
				t.Errorf("VRAM %g, want %g", offers[0].VRAMGBPerGPU, tt.wantVRAM)
			}
			if len(warns) != tt.wantWarns {
				t.Errorf("warnings %q, want %d", warns, tt.wantWarns)
			}
		})
	}
}

// TestReadOffersCutsQuotedInput: a message shows at most 80 characters of a
// cell or header; a 50 MB line with a bad header used to be echoed whole.
func TestReadOffersCutsQuotedInput(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
	want := `"` + strings.Repeat("x", maxQuoted) + `…"`
	tests := []struct {
		name, file, in string
	}{
		{"unrecognised header", "x.csv", long + ",b\n"},
		{"own cell", "x.csv", "provider,region,gpu,gpu_count,vram_gb_per_gpu,currency,monthly\nacme,x,T4,1,16," + long + ",9\n"},
		{"own number", "x.csv", "provider,region,gpu,gpu_count,vram_gb_per_gpu,currency,monthly\nacme,x,T4,1,16,USD," + long + "\n"},
		{"SkyPilot GPU memory", "aws/vms.csv", "InstanceType,AcceleratorName,AcceleratorCount,GpuInfo,Price,Region\n" +
			"p5,H100,8,{'SizeInMiB': '" + long + "'},98.32,us-east-1\n"},
		{"gpuhunt spot flag", "aws.csv", "instance_name,location,price,gpu_count,gpu_name,spot\ng5,us-east-1,1.006,1,A10G," + long + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ReadOffers(tt.file, strings.NewReader(tt.in))
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if !strings.Contains(msg, want) {
				t.Errorf("message does not quote the cut value %s: %.300s", want, msg)
			}
			if len(msg) > 1000 {
				t.Errorf("message is %d bytes long, want under 1000", len(msg))
			}
		})
	}
}

func TestQuoted(t *testing.T) {
	tests := []struct{ in, want string }{
		{"abc", `"abc"`},
		{"", `""`},
		{strings.Repeat("é", maxQuoted), `"` + strings.Repeat("é", maxQuoted) + `"`},
		{strings.Repeat("é", maxQuoted+1), `"` + strings.Repeat("é", maxQuoted) + `…"`},
		{"tab\there", `"tab\there"`},
	}
	for _, tt := range tests {
		if got := quoted(tt.in); got != tt.want {
			t.Errorf("quoted(%.20q…) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// readSequential parses with one processor, so that splitRows declines.
func readSequential(name, data string) ([]gpuwarden.Offer, []string, error) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	return parseSlice(name, "", data, nil)
}

// A big own-format file read in pieces gives what one pass gives: offers
// in order with their lines, warnings counting every piece (their first
// lines in order), and the first error of the file, not of a piece.
func TestOwnInPiecesMatchesOnePass(t *testing.T) {
	var b strings.Builder
	b.WriteString("provider,region,country,instance,gpu,gpu_count,vram_gb_per_gpu,currency,on_demand_hourly,spot_hourly,monthly,as_of,source\r\n")
	for i := 0; b.Len() < 3*minSplit; i++ {
		switch {
		case i%5000 == 17:
			b.WriteString("\n") // an empty line takes no row
		case i%7000 == 3:
			fmt.Fprintf(&b, "lambda,nowhere-%d,,x,A10,1,,USD,0.75,,,,\n", i) // undated, no country
		default:
			fmt.Fprintf(&b, "aws,us-east-1,US,box-%d,H100-SXM,%d,80,USD,%d.5,,,2026-11,bench\r\n", i, 1<<(i%4), 1+i%90)
		}
	}
	good := b.String()
	if !strings.Contains(good, "box-40000,") {
		t.Fatal("the file is too short for the late error")
	}
	cases := map[string]string{
		"good": good,
		// Errors near the end and near the start: the first one is told.
		"two errors": strings.Replace(strings.Replace(good, "box-10,H100-SXM,", "box-10,H100-SXM,x", 1),
			"box-40000,H100-SXM,", "box-40000,H100-SXM,y", 1),
		"error late": strings.Replace(good, "box-40000,H100-SXM,", "box-40000,H100-SXM,y", 1),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			if runtime.GOMAXPROCS(0) < 2 {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
			}
			tbl, err := openTable("big.csv", data)
			if err != nil {
				t.Fatal(err)
			}
			if chunks := splitRows(tbl); len(chunks) < 2 {
				t.Fatalf("%d pieces: the parallel path is not taken", len(chunks))
			}
			want, wantWarns, wantErr := readSequential("big.csv", data)
			if (wantErr == nil) != (name == "good") || (name == "good" && len(wantWarns) != 2) {
				t.Fatalf("the case does not test what it says: %v, warnings %q", wantErr, wantWarns)
			}
			got, gotWarns, gotErr := parseSlice("big.csv", "", data, nil)
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Fatalf("got error %v, want %v", gotErr, wantErr)
			}
			if !reflect.DeepEqual(gotWarns, wantWarns) {
				t.Errorf("got warnings %q, want %q", gotWarns, wantWarns)
			}
			if len(got) != len(want) || !reflect.DeepEqual(got, want) {
				t.Errorf("got %d offers, want %d; equal: %v", len(got), len(want), reflect.DeepEqual(got, want))
			}
			// Offers read before come first, in both paths.
			before := []gpuwarden.Offer{{Provider: "aws", Instance: "earlier"}, {Provider: "gcp", Instance: "earlier too"}}
			for _, read := range []func(string, string, []gpuwarden.Offer) ([]gpuwarden.Offer, []string, error){
				func(n, d string, b []gpuwarden.Offer) ([]gpuwarden.Offer, []string, error) {
					return parseSlice(n, "", d, b)
				},
				func(n, d string, b []gpuwarden.Offer) ([]gpuwarden.Offer, []string, error) {
					defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
					return parseSlice(n, "", d, b)
				},
			} {
				after, _, err := read("big.csv", data, before)
				if wantErr == nil && (err != nil || !reflect.DeepEqual(after, append(slices.Clip(before), want...))) {
					t.Errorf("after two offers: %v, %d offers, equal: %v", err, len(after), reflect.DeepEqual(after, append(slices.Clip(before), want...)))
				}
			}
		})
	}
}

// TestProviderFromFolderEveryCloud: a vms.csv in a folder named after any
// cloud `catalog update` downloads is read as that provider's (daytona,
// hyperstack, spheron and yotta were refused with "cannot tell the
// provider").
func TestProviderFromFolderEveryCloud(t *testing.T) {
	const sky = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region\nbox-1,H100,1,8,64,2.5,,somewhere\n"
	for _, cloud := range SkyPilotClouds {
		t.Run(cloud, func(t *testing.T) {
			name := filepath.Join(t.TempDir(), cloud, "vms.csv")
			offers, _, err := ReadOffers(name, strings.NewReader(sky))
			if err != nil {
				t.Fatal(err)
			}
			if len(offers) != 1 || offers[0].Provider != cloud {
				t.Errorf("got %+v, want 1 offer of %s", offers, cloud)
			}
		})
	}
}
