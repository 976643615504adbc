package catalog

import (
	"bytes"
	"encoding/csv"
	"slices"
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

// TestEmbeddedOffersUsable: every embedded offer is dated, sourced and
// gives its GPU memory (known rows: TestSnapshotKnownRows).
func TestEmbeddedOffersUsable(t *testing.T) {
	c, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	offered := map[string]int{}
	for _, o := range c.Offers.All() {
		if o.Source == "" || o.AsOf == "" {
			t.Errorf("%s: offer without source or as_of", o.Origin)
		}
		if _, err := gpuwarden.ParseAsOf(o.AsOf); err != nil {
			t.Errorf("%s: %v", o.Origin, err)
		}
		if o.VRAMGBPerGPU <= 0 {
			t.Errorf("%s: GPU %q without its memory", o.Origin, o.GPU)
		}
		offered[o.GPU]++
	}
	// The snapshot rents every card the GPU table describes; models the
	// table lacks still rank, sized by the memory their rows give.
	for _, g := range c.GPUs {
		if offered[g.Model] == 0 {
			t.Errorf("no embedded offer of %s, a model of the GPU table", g.Model)
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

// TestEmbeddedTables: the side tables alone, without the offers' parse,
// and the same ones Embedded returns.
func TestEmbeddedTables(t *testing.T) {
	full, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	tables, err := EmbeddedTables()
	if err != nil {
		t.Fatal(err)
	}
	if tables.Offers.Len() != 0 {
		t.Errorf("%d offers, want none", tables.Offers.Len())
	}
	if !slices.Equal(tables.GPUs, full.GPUs) || !slices.Equal(tables.Egress, full.Egress) || !slices.Equal(tables.Storage, full.Storage) {
		t.Error("the side tables differ from Embedded's")
	}
}
