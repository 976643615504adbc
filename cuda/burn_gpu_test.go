//go:build gpu

package cuda

import (
	"context"
	"slices"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

// logBurn prints every figure of a burn-in, so a run on a GPU host can be
// held against the anchors (H200: copy kernel 3.98–4.03 TB/s read+write,
// FP32 FMA 57.4–57.7 TFLOP/s).
func logBurn(t testing.TB, res gpuwarden.BurnResult) {
	t.Helper()
	m := res.Mem
	t.Logf("memory test: %.2f GiB, patterns %v, %d errors, bad offsets %v, %.1f GB/s, %.2f s",
		float64(m.Bytes)/(1<<30), m.Patterns, m.Errors, m.BadOffsets, m.GBs, m.Seconds)
	t.Logf("device copy: median %.1f GB/s (read+write), runs %.1f", res.BandwidthGBs, res.BandwidthRuns)
	t.Logf("fp32 soak: %.2f TFLOP/s over %.2f s, %d FMA errors", res.FP32TFLOPs, res.SoakSeconds, res.FMAErrors)
	t.Logf("pinned copies: host→device %.2f GB/s, device→host %.2f GB/s", res.HostToDeviceGBs, res.DeviceToHostGBs)
	t.Logf("whole burn: %.2f s", res.Seconds)
}

func TestGPUBurn(t *testing.T) {
	d := openGPU(t)
	for _, inject := range []bool{false, true} {
		req := gpuwarden.BurnRequest{Index: 0, MemFraction: 0.5, SoakSeconds: 5, Seed: 0x5eed, InjectFault: inject}
		res, err := d.Burn(context.Background(), req)
		if err != nil {
			t.Fatalf("inject %v: %v (hint: %s)", inject, err, gpuwarden.ErrorHint(err))
		}
		t.Logf("InjectFault %v:", inject)
		logBurn(t, res)
		if len(res.Mem.Patterns) != len(burnPatterns) || res.Mem.Bytes == 0 {
			t.Errorf("memory test covered %d bytes with %v", res.Mem.Bytes, res.Mem.Patterns)
		}
		if inject {
			if res.Mem.Errors != 1 || !slices.Equal(res.Mem.BadOffsets, []uint64{4 * faultWord}) {
				t.Errorf("injected fault: %d errors at %v, want 1 at [%d]", res.Mem.Errors, res.Mem.BadOffsets, 4*faultWord)
			}
		} else if res.Mem.Errors != 0 {
			t.Errorf("clean run: %d memory errors at %v", res.Mem.Errors, res.Mem.BadOffsets)
		}
		if res.FMAErrors != 0 {
			t.Errorf("%d FMA results differ from the exact CPU values", res.FMAErrors)
		}
		if len(res.BandwidthRuns) != defaultBandwidthRuns || res.BandwidthGBs <= 0 || res.FP32TFLOPs <= 0 ||
			res.HostToDeviceGBs <= 0 || res.DeviceToHostGBs <= 0 || res.SoakSeconds < 5 {
			t.Errorf("figures missing: %+v", res)
		}
	}
}

// BenchmarkBurnQuick is a short burn: 10 % of free memory with two
// patterns, three copies, a 1 s soak.
func BenchmarkBurnQuick(b *testing.B) {
	d := openGPU(b)
	req := gpuwarden.BurnRequest{MemFraction: 0.1, Patterns: []string{"aa", "random"}, SoakSeconds: 1, BandwidthRuns: 3, Seed: 1}
	var res gpuwarden.BurnResult
	for b.Loop() {
		var err error
		if res, err = d.Burn(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(res.Mem.GBs, "mem-GB/s")
	b.ReportMetric(res.BandwidthGBs, "copy-GB/s")
	b.ReportMetric(res.FP32TFLOPs, "TFLOP/s")
	logBurn(b, res)
}
