package catalog

import (
	"bytes"
	"encoding/csv"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

// dataRows counts the data rows of an embedded CSV with encoding/csv, the
// yardstick for "every row made it".
func dataRows(t *testing.T, file string) int {
	t.Helper()
	raw, err := data.ReadFile("data/" + file)
	if err != nil {
		t.Fatal(err)
	}
	r := csv.NewReader(bytes.NewReader(raw))
	r.FieldsPerRecord = -1
	recs, err := r.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return len(recs) - 1
}

func TestEmbeddedRowCounts(t *testing.T) {
	c, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		file string
		got  int
	}{
		{"prices.csv", c.Offers.Len()},
		{"egress.csv", len(c.Egress)},
		{"storage.csv", len(c.Storage)},
		{"gpus.csv", len(c.GPUs)},
	}
	for _, tt := range tests {
		if want := dataRows(t, tt.file); tt.got != want {
			t.Errorf("%s: %d rows parsed, the file has %d", tt.file, tt.got, want)
		}
	}
	if len(c.Warnings) != 0 {
		t.Errorf("the snapshot should read without warnings, got %q", c.Warnings)
	}
}

// TestEmbeddedGPU: the one-table lookup the simulator uses finds every
// row Embedded has, and nothing for a model outside the table.
func TestEmbeddedGPU(t *testing.T) {
	c, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range c.GPUs {
		if got, ok := EmbeddedGPU(want.Model); !ok || got != want {
			t.Errorf("EmbeddedGPU(%q) = %+v, %v; want %+v, true", want.Model, got, ok, want)
		}
	}
	if got, ok := EmbeddedGPU("RTX-9999"); ok {
		t.Errorf("EmbeddedGPU(RTX-9999) = %+v, true; want nothing", got)
	}
}

func TestEmbeddedKnownRows(t *testing.T) {
	c, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	gcp, ok := findOffer(c.Offers.Slice(), "asia-east1", "a2-highgpu-1g", "A100-40GB", 1)
	if !ok {
		t.Fatal("no gcp a2-highgpu-1g offer in asia-east1")
	}
	want := gpuwarden.Offer{Provider: "gcp", Region: "asia-east1", Country: "TW", Instance: "a2-highgpu-1g",
		GPU: "A100-40GB", GPUCount: 1, VRAMGBPerGPU: 40, VCPUs: 12, RAMGB: 85, Currency: "USD",
		OnDemandHourly: 3_790_142, SpotHourly: 756_300, Monthly: 2_766_800_000, AsOf: "2026-11",
		Source: "Cyclenerd/google-cloud-pricing-cost-calculator pricing.yml (1y commit 1743.06/month; 3y 968.40/month)",
		Origin: gpuwarden.Origin{File: "embedded prices.csv", Line: 9}}
	if gcp != want {
		t.Errorf("gcp row:\n got %+v\nwant %+v", gcp, want)
	}
	// The source of this row holds an unquoted comma in the reference data.
	h200, ok := findOffer(c.Offers.Slice(), "us-central1", "a3-ultragpu-8g", "H200", 8)
	if !ok {
		t.Fatal("no gcp a3-ultragpu-8g offer")
	}
	if got, want := h200.Source, "HF dataset tanod/cloud-gpu-list-prices (per GPU-hour 10.4365 on-demand / 6.2607 spot, times 8)"; got != want {
		t.Errorf("H200 source %q, want %q", got, want)
	}
	for _, o := range c.Offers.All() {
		if o.Source == "" || o.AsOf == "" {
			t.Errorf("%s: offer without source or as_of", o.Origin)
		}
		if _, err := gpuwarden.ParseAsOf(o.AsOf); err != nil {
			t.Errorf("%s: %v", o.Origin, err)
		}
		if specVRAM(o.GPU, nil) == 0 {
			t.Errorf("%s: GPU %q is not in the GPU table", o.Origin, o.GPU)
		}
	}
}

func TestEmbeddedEgressAndStorage(t *testing.T) {
	c, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	units := map[string]string{}
	for _, e := range c.Egress {
		if u, seen := units[e.Provider]; seen && u != e.Unit {
			t.Errorf("%s: tiers with units %s and %s", e.Provider, u, e.Unit)
		}
		units[e.Provider] = e.Unit
		if e.Source == "" || e.Source == "same" {
			t.Errorf("%s %s tier from %v: source %q not resolved", e.Provider, e.Scope, e.FromGB, e.Source)
		}
	}
	for provider, want := range map[string]string{"aws": "GiB", "gcp": "GiB", "azure": "GB", "lambda": "GB", "runpod": "GB"} {
		if units[provider] != want {
			t.Errorf("egress unit of %s = %q, want %q", provider, units[provider], want)
		}
	}
	first := c.Egress[0]
	want := gpuwarden.EgressTier{Provider: "aws", Scope: gpuwarden.EgressInternet, FromGB: 0, ToGB: 10_240_000_000,
		Currency: "USD", PerGB: 90_000, Unit: "GiB",
		Source: "AWS data transfer out (us-east-1 tiers) as encoded in infracost golden files and SkyPilot aws.py"}
	if first != want {
		t.Errorf("first tier:\n got %+v\nwant %+v", first, want)
	}
	last := c.Egress[5]
	if got, want := last.Source, want.Source+" (billed each way)"; got != want {
		t.Errorf("intra-region source %q, want %q", got, want)
	}
	if got, want := c.Storage[1], (gpuwarden.StorageRate{Provider: "aws", Kind: "block (EBS gp3)", Currency: "USD",
		PerGBMonth: 80_000, Note: "billed while the volume exists, instance stopped or not"}); got != want {
		t.Errorf("EBS rate:\n got %+v\nwant %+v", got, want)
	}
	h200 := c.GPUs[0]
	if h200.Model != "H200" || h200.VRAMGB != 141 || h200.MemBWTBs != 4.8 || h200.BF16TFLOPs != 989 || h200.MeasuredNotes == "" {
		t.Errorf("H200 spec: %+v", h200)
	}
}

// Callers get their own slices: sorting or editing one result must not show
// in the next.
func TestEmbeddedReturnsCopies(t *testing.T) {
	a, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	want := a.Offers.At(0)
	a.Egress[0].PerGB = 1
	a.GPUs[0].VRAMGB = 1
	a.Offers = gpuwarden.OffersOf(gpuwarden.Offer{Provider: "hostco", Instance: "replaced"})
	b, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	if b.Offers.At(0) != want || b.Egress[0].PerGB == 1 || b.GPUs[0].VRAMGB == 1 {
		t.Error("a caller's edits leaked into the next Embedded result")
	}
}

func TestResolveSame(t *testing.T) {
	tests := []struct{ src, prev, want string }{
		{"AWS docs", "", "AWS docs"},
		{"same", "AWS docs", "AWS docs"},
		{"same (billed each way)", "AWS docs", "AWS docs (billed each way)"},
		{"same continent", "GCP docs", "GCP docs (same continent)"},
		{"samesies", "GCP docs", "samesies"},
		{"same", "", "same"},
	}
	for _, tt := range tests {
		if got := resolveSame(tt.src, tt.prev); got != tt.want {
			t.Errorf("resolveSame(%q, %q) = %q, want %q", tt.src, tt.prev, got, tt.want)
		}
	}
}
