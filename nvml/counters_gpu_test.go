//go:build gpu

package nvml

import (
	"context"
	"testing"
	"time"
)

// TestGPUErrorCounters prints each GPU's error counters on a real card and
// holds what every data-centre card since Ampere reports: ECC counts
// (corrected and uncorrected, volatile and aggregate) when ECC is on, row
// remapping instead of page retirement, and a PCIe replay count. Run with
// ./nvml.test -test.v -test.run GPUErrorCounters.
func TestGPUErrorCounters(t *testing.T) {
	g := openReal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gpus, err := g.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for _, gpu := range gpus {
		h, err := g.Health(ctx, gpu.Index)
		if err != nil {
			t.Fatalf("Health(%d): %v", gpu.Index, err)
		}
		t.Logf("gpu %d (%s) counters: %s", gpu.Index, gpu.Name, pretty(h.Counters))
		c := h.Counters
		if c.PCIeReplays == nil {
			t.Errorf("gpu %d: no PCIe replay count", gpu.Index)
		}
		if gpu.ECC && (c.ECCCorrectedVolatile == nil || c.ECCUncorrectedVolatile == nil ||
			c.ECCCorrectedAggregate == nil || c.ECCUncorrectedAggregate == nil) {
			t.Errorf("gpu %d: ECC is on but a count is missing: %s", gpu.Index, pretty(c))
		}
		if cc := gpu.ComputeCapability; cc >= "8.0" && len(cc) == 3 && gpu.ECC &&
			(c.RemappedRowsCorrectable == nil || c.RemappedRowsUncorrectable == nil || c.RetiredPages != nil) {
			t.Errorf("gpu %d (compute %s): want remapped rows and no page retirement: %s", gpu.Index, cc, pretty(c))
		}
	}
}
