package catalog

import (
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

// TestGPUTableMatchesDatasheet: gpus.csv repeats bandwidth and bf16 (fp16
// on cards without bf16) for the importers and the simulator; the root
// package's datasheet is the one the throughput model reads. They must not
// drift apart, and every gpus.csv model must have a datasheet row.
func TestGPUTableMatchesDatasheet(t *testing.T) {
	table, err := gpuTable()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range table {
		d, ok := gpuwarden.DatasheetOf(g.Model)
		if !ok {
			t.Errorf("%s: in gpus.csv, not in gpuwarden.Datasheets", g.Model)
			continue
		}
		sixteen := d.BF16
		if sixteen == 0 {
			sixteen = d.FP16
		}
		if d.MemBWTBs != g.MemBWTBs || sixteen != g.BF16TFLOPs || d.FP32 != g.FP32TFLOPs {
			t.Errorf("%s: gpus.csv has %v TB/s, %v bf16, %v fp32; datasheet %v, %v, %v",
				g.Model, g.MemBWTBs, g.BF16TFLOPs, g.FP32TFLOPs, d.MemBWTBs, sixteen, d.FP32)
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
