package catalog

import (
	"slices"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

// TestGPUTableTakesTheDatasheet: gpus.csv holds memory and power; its
// speed figures are the root package's datasheet row (the 16-bit peak is
// fp16 on cards without bf16), so the two cannot drift apart. Every
// datasheet row is complete, sourced and named as offers name the card.
func TestGPUTableTakesTheDatasheet(t *testing.T) {
	table, err := gpuTable()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		model         string
		bw, bf16, f32 float64
	}{
		{"H200", 4.8, 989, 67},
		{"T4", 0.32, 65, 8.1},
		{"V100-32GB", 0.9, 125, 15.7},
	}
	for _, tt := range tests {
		i := slices.IndexFunc(table, func(g gpuwarden.GPUSpec) bool { return g.Model == tt.model })
		if i < 0 {
			t.Fatalf("%s: not in gpus.csv", tt.model)
		}
		g := table[i]
		if g.MemBWTBs != tt.bw || g.BF16TFLOPs != tt.bf16 || g.FP32TFLOPs != tt.f32 {
			t.Errorf("%s: %v TB/s, %v bf16, %v fp32; want %v, %v, %v", tt.model, g.MemBWTBs, g.BF16TFLOPs, g.FP32TFLOPs, tt.bw, tt.bf16, tt.f32)
		}
	}
	for _, d := range gpuwarden.Datasheets {
		if d.Source == "" || d.MemBWTBs <= 0 || d.FP32 <= 0 || (d.BF16 <= 0 && d.FP16 <= 0) {
			t.Errorf("%s: datasheet row incomplete: %+v", d.Model, d)
		}
		if CanonicalGPU(d.Model, 0) != d.Model && CanonicalGPU(d.Model, 80) != d.Model {
			t.Errorf("%s: not a canonical name (CanonicalGPU gives %q): offers would never match it", d.Model, CanonicalGPU(d.Model, 0))
		}
	}
}
