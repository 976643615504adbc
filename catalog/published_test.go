package catalog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryFixtureRegionHasACountry reads every real SkyPilot file kept in
// testdata and fails on an offer the region table cannot place: such an
// offer is excluded by any residency rule.
func TestEveryFixtureRegionHasACountry(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "published", "*", "vms.csv"))
	more, _ := filepath.Glob(filepath.Join("testdata", "skypilot", "*", "vms.csv"))
	files = append(files, more...)
	if len(files) < 8 {
		t.Fatalf("found %d fixture files, want the published and skypilot ones", len(files))
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		// The provider comes from the folder, as `catalog update` and the
		// loader give it: a cloud new to v8 need not be known by name.
		offers, warns, err := ReadOffersAs(name, filepath.Base(filepath.Dir(name)), f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, o := range offers {
			if o.Country == "" && !unplaceable[o.Provider+"/"+o.Region] {
				t.Errorf("%s: %s region %q has no country", name, o.Provider, o.Region)
			}
		}
		for _, w := range warns {
			if strings.Contains(w, "not in the region table") && !strings.Contains(w, "1 region of primeintellect is not") &&
				!strings.Contains(w, "1 region of daytona is not") {
				t.Errorf("%s: %s", name, w)
			}
		}
	}
}

// unplaceable are regions a catalog gives that name no place: Prime
// Intellect's UNSPECIFIED is a marketplace pool, Daytona's GPU sizes are
// all in "earth" (its CPU sizes say "us" or "eu", a union, not a
// country). They stay without a country, and the reader names them in a
// warning.
var unplaceable = map[string]bool{"primeintellect/UNSPECIFIED": true, "daytona/earth": true, "daytona/eu": true}

func TestUnknownRegionIsNamed(t *testing.T) {
	csv := "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice\r\n" +
		"gpu_1x_h100_sxm5,H100,1.0,26.0,225.0,3.29,mars-north-1,,\r\n"
	_, warns, err := ReadOffersAs("lambda/vms.csv", "lambda", strings.NewReader(csv))
	if err != nil {
		t.Fatal(err)
	}
	if !containsWarning(warns, "1 region of lambda is not in the region table") || !containsWarning(warns, "mars-north-1") {
		t.Errorf("warnings %q, want one naming mars-north-1", warns)
	}
}

// TestPublishedGPUs pins the cards of the real files: marketed memory, not
// the listing's MiB, and the form factor kept in the name.
func TestPublishedGPUs(t *testing.T) {
	tests := []struct {
		file, instance string
		gpu            string
		vram, total    float64
		zones          int
	}{
		// 81,559 MiB is 79.65 GiB; the card is sold as 80 GB.
		{"hyperbolic", "1x-H100-28-271", "H100-SXM", 80, 80, 0},
		{"hyperbolic", "7x-H100-196-1894", "H100-SXM", 80, 560, 0},
		{"hyperbolic", "1x-RTX4090-11-45", "RTX-4090", 24, 24, 0},
		{"lambda", "gpu_1x_h100_sxm5", "H100-SXM", 80, 80, 0},
		{"runpod", "1x_A100-80GB_SECURE", "A100-80GB", 80, 80, 3},
		{"runpod", "1x_A100-80GB-SXM_SECURE", "A100-80GB-SXM", 80, 80, 3},
		{"nebius", "gpu-l40s-d_2gpu-64vcpu-384gb", "L40S", 48, 96, 0},
	}
	read := map[string][]struct {
		inst, gpu   string
		vram, total float64
		zones       int
		region      string
	}{}
	for _, cloud := range []string{"hyperbolic", "lambda", "runpod", "nebius"} {
		name := filepath.Join("testdata", "published", cloud, "vms.csv")
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		offers, _, err := ReadOffers(name, f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range offers {
			read[cloud] = append(read[cloud], struct {
				inst, gpu   string
				vram, total float64
				zones       int
				region      string
			}{o.Instance, o.GPU, o.VRAMGBPerGPU, o.VRAMGB(), o.Zones, o.Region})
		}
	}
	for _, tt := range tests {
		found := false
		for _, o := range read[tt.file] {
			if o.inst != tt.instance || (tt.file == "runpod" && o.region != "IS") {
				continue
			}
			found = true
			if o.gpu != tt.gpu || o.vram != tt.vram || o.total != tt.total || o.zones != tt.zones {
				t.Errorf("%s %s: %s %v GB/GPU %v GB, %d zones; want %s %v %v, %d zones",
					tt.file, tt.instance, o.gpu, o.vram, o.total, o.zones, tt.gpu, tt.vram, tt.total, tt.zones)
			}
			break
		}
		if !found {
			t.Errorf("%s: no offer %s", tt.file, tt.instance)
		}
	}
}

// TestSkyPilotRowWithoutRegion: Seeweb lists sizes with an empty Region;
// they are skipped with a count, and the rest of the file still reads.
func TestSkyPilotRowWithoutRegion(t *testing.T) {
	csv := "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice\r\n" +
		"ECS1GPU8,H100,1,16,256.0,1.89,,\"{'Gpus': [{'Name': 'H100', 'Manufacturer': 'NVIDIA', 'Count': 1.0, 'MemoryInfo': {'SizeInMiB': 81920}}], 'TotalGpuMemoryInMiB': 81920}\",\r\n" +
		"ECS1GPU10,H200,1,32,256.0,2.6,it-fr2,\"{'Gpus': [{'Name': 'H200', 'Manufacturer': 'NVIDIA', 'Count': 1.0, 'MemoryInfo': {'SizeInMiB': 144384}}], 'TotalGpuMemoryInMiB': 144384}\",\r\n"
	offers, warns, err := ReadOffersAs("seeweb/vms.csv", "seeweb", strings.NewReader(csv))
	if err != nil {
		t.Fatal(err)
	}
	if len(offers) != 1 || offers[0].GPU != "H200" || offers[0].Country != "IT" || offers[0].VRAMGBPerGPU != 141 {
		t.Errorf("offers %+v, want the H200 in it-fr2 (IT, 141 GB)", offers)
	}
	if !containsWarning(warns, "skipped 1 row without a Region (line 2)") {
		t.Errorf("warnings %q, want the skipped row counted", warns)
	}
}

// TestPrimeIntellect: "CC - region" places itself, 99999999 is no spot
// price, and UNSPECIFIED is named as a region without a country.
func TestPrimeIntellect(t *testing.T) {
	name := filepath.Join("testdata", "published", "primeintellect", "vms.csv")
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	offers, warns, err := ReadOffers(name, f)
	if err != nil {
		t.Fatal(err)
	}
	countries := map[string]string{}
	for _, o := range offers {
		countries[o.Region] = o.Country
		if o.SpotHourly != 0 {
			t.Errorf("%s %s: spot %s, want none (99999999 means no spot)", o.Region, o.Instance, o.SpotHourly)
		}
	}
	want := map[string]string{"UNSPECIFIED": "", "US - us-midwest-1": "US", "AU - australia-east-1": "AU",
		"CA - CANADA-1": "CA", "FI - FIN-01": "FI", "DE - FRA": "DE", "SE - se-stockholm-1": "SE"}
	for region, cc := range want {
		if got, ok := countries[region]; !ok || got != cc {
			t.Errorf("region %q: country %q (found %v), want %q", region, got, ok, cc)
		}
	}
	if !containsWarning(warns, "(UNSPECIFIED)") {
		t.Errorf("warnings %q, want UNSPECIFIED named", warns)
	}
}

// TestV8Clouds reads one real row of each cloud new to schema v8 through
// the path `catalog update` takes (the provider given by the folder): its
// columns land where they belong, whatever order the file puts them in.
func TestV8Clouds(t *testing.T) {
	type row struct {
		region, country, gpu string
		vramTotal            float64
		onDemand, spot       string
	}
	tests := []struct {
		cloud, instance string
		want            row
	}{
		// Price before SpotPrice before Region.
		{"daytona", "8x-H100", row{"earth", "", "H100-SXM", 640, "47.7856", "27.52"}},
		// GpuInfo before Price; no spot.
		{"hyperstack", "n3-A100x1", row{"CANADA-1", "CA", "A100-80GB-PCIe", 80, "1.35", "0"}},
		// Price last, after an empty SpotPrice.
		{"jarvislabs", "1x_H200_28V_300G", row{"IN2", "IN", "H200", 141, "4.59", "0"}},
		// The region is the country code.
		{"lium", "H200_1x", row{"PT", "PT", "H200", 141, "3.9", "0"}},
		{"oci", "BM.GPU.H100.8", row{"af-casablanca-1", "MA", "H100-SXM", 640, "80", "0"}},
		// Extra columns (Provider, OperatingSystem, SpheronInstanceType) and
		// a spot-only row.
		{"spheron", "n3-A100x1-spot__CANADA-1", row{"CANADA-1", "CA", "A100-80GB-PCIe", 80, "0", "1.1476"}},
		{"spheron", "H100_677dc00033f3247083221e73_paris-france-1", row{"paris-france-1", "FR", "H100-PCIe", 80, "4.0656", "0"}},
		// UpstreamCloudId, GPU columns after the memory.
		{"verda", "1H100.80S.32V", row{"FIN-02", "FI", "H100-SXM", 80, "2.29", "0.8015"}},
		// No newline after the last row, as published.
		{"yotta", "2x60v230g_NVIDIA_GeForce_RTX_5090_32G_SECURE", row{"us-central-2", "US", "RTX-5090", 64, "1.3", "0"}},
	}
	got := map[string]map[string]row{}
	for _, tt := range tests {
		if got[tt.cloud] != nil {
			continue
		}
		name := filepath.Join("testdata", "published", tt.cloud, "vms.csv")
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		offers, _, err := ReadOffersAs(name, tt.cloud, f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got[tt.cloud] = map[string]row{}
		for _, o := range offers {
			got[tt.cloud][o.Instance] = row{o.Region, o.Country, o.GPU, o.VRAMGB(), o.OnDemandHourly.String(), o.SpotHourly.String()}
		}
	}
	for _, tt := range tests {
		g, ok := got[tt.cloud][tt.instance]
		if !ok {
			t.Errorf("%s: no offer %s", tt.cloud, tt.instance)
			continue
		}
		if g != tt.want {
			t.Errorf("%s %s = %+v, want %+v", tt.cloud, tt.instance, g, tt.want)
		}
	}
}

// TestPrimeIntellectV8: v8 moved Prime Intellect's place out of Region
// ("US - us-midwest-1" in v7) into AvailabilityZone, leaving the country
// code in Region. Real rows of catalogs/v8/primeintellect/vms.csv (commit
// d9a304ea01e96cd4a043159c60d9326d8de4cf0f), a zone that is a UUID included.
func TestPrimeIntellectV8(t *testing.T) {
	csv := "InstanceType,UpstreamCloudId,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice\n" +
		`lambdalabs__8xA100_80GB__240__1800,gpu_8x_a100_80gb_sxm4,240.0,1800,A100-80GB,8.0,"{""Gpus"":[{""Name"":""A100-80GB"",""Count"":8,""MemoryInfo"":{""SizeInMiB"":655360}}],""TotalGpuMemoryInMiB"":5242880}",US,us-midwest-1,14.32,` + "\n" +
		`datacrunch__8xH100_80GB__176__1480__SPOT,8H100.80S.176V_SPOT,176.0,1480,H100,8.0,"{""Gpus"":[{""Name"":""H100"",""Count"":8,""MemoryInfo"":{""SizeInMiB"":655360}}],""TotalGpuMemoryInMiB"":5242880}",IS,ICE-01,,6.84` + "\n" +
		`latitude__8xA100_80GB__128__1536,g3-a100-large,128.0,1536,A100-80GB,8.0,"{""Gpus"":[{""Name"":""A100-80GB"",""Count"":8,""MemoryInfo"":{""SizeInMiB"":655360}}],""TotalGpuMemoryInMiB"":5242880}",DE,FRA,8.28,` + "\n" +
		`dc_roan__8xH100_80GB__104__1024,h100-sxm5-80gb_eth,104.0,1024,H100,8.0,"{""Gpus"":[{""Name"":""H100"",""Count"":8,""MemoryInfo"":{""SizeInMiB"":655360}}],""TotalGpuMemoryInMiB"":5242880}",US,a3111bd4-550a-47d0-838a-0a52bff2ae3f,15.92,` + "\n"
	offers, warns, err := ReadOffersAs("primeintellect/vms.csv", "primeintellect", strings.NewReader(csv))
	if err != nil {
		t.Fatal(err)
	}
	if len(offers) != 4 {
		t.Fatalf("got %d offers, want 4: %+v", len(offers), offers)
	}
	for _, o := range offers {
		if o.Country == "" || o.Country != strings.ToUpper(o.Region[:2]) {
			t.Errorf("%s %s: country %q, want the Region's code", o.Instance, o.Region, o.Country)
		}
	}
	if containsWarning(warns, "not in the region table") {
		t.Errorf("warnings %q: a country-code region was not placed", warns)
	}
}
