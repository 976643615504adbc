//go:build gpu

package nvml

// The gpu suite runs on a host with an NVIDIA driver and GPU (build it here
// with `go test -c -tags gpu -o bin/nvml.test ./nvml/`, run it there with
// `./nvml.test -test.v -test.bench . -test.run GPU`). It prints the figures
// rather than asserting exact values: they are the host's, not ours.

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"regexp"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// openReal opens the real NVML or fails: the gpu tag promises a GPU.
func openReal(tb testing.TB) *GPUs {
	tb.Helper()
	g, err := New(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() {
		if err := g.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return g
}

// pretty prints v as JSON for the log of the device check.
func pretty(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

func TestGPUInventoryTelemetryHealth(t *testing.T) {
	g := openReal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	d, err := g.Driver(ctx)
	if err != nil {
		t.Fatalf("Driver: %v", err)
	}
	t.Logf("driver: %s", pretty(d))
	if d.Version == "" || d.CUDAVersion == "" {
		t.Errorf("driver or CUDA version empty: %+v", d)
	}
	// A symbol reported missing on a current driver means a misspelt name in
	// checkedSymbols, which would silently zero its field.
	for _, sym := range checkedSymbols {
		if !g.present[sym] {
			t.Errorf("symbol %s missing on driver %s", sym, d.Version)
		}
	}

	gpus, err := g.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(gpus) == 0 {
		t.Fatal("List found no GPU")
	}
	cc := regexp.MustCompile(`^\d+\.\d+$`)
	for _, gpu := range gpus {
		t.Logf("gpu %d: %s", gpu.Index, pretty(gpu))
		if gpu.UUID == "" || gpu.Name == "" || gpu.Model == "" || gpu.VRAMBytes == 0 {
			t.Errorf("gpu %d: inventory incomplete: %+v", gpu.Index, gpu)
		}
		if !cc.MatchString(gpu.ComputeCapability) {
			t.Errorf("gpu %d: compute capability %q", gpu.Index, gpu.ComputeCapability)
		}
		if _, ok := parseBus(gpu.BusID); !ok {
			t.Errorf("gpu %d: bus id %q does not parse, so its Xids would be lost", gpu.Index, gpu.BusID)
		}

		s, err := g.Sample(ctx, gpu.Index)
		if err != nil {
			t.Fatalf("Sample(%d): %v", gpu.Index, err)
		}
		t.Logf("sample %d: %s", gpu.Index, pretty(s))
		if s.MemTotalBytes != gpu.VRAMBytes {
			t.Errorf("gpu %d: sample total %d != inventory %d", gpu.Index, s.MemTotalBytes, gpu.VRAMBytes)
		}
		if s.TempC <= 0 || s.TempC > 120 || s.PowerWatts <= 0 || s.SMClockMHz <= 0 || s.MemClockMHz <= 0 {
			t.Errorf("gpu %d: implausible sample %+v", gpu.Index, s)
		}

		h, err := g.Health(ctx, gpu.Index)
		if err != nil {
			t.Fatalf("Health(%d): %v", gpu.Index, err)
		}
		t.Logf("health %d: %s (faulty: %v)", gpu.Index, pretty(h), h.Faulty())
	}

	if _, err := g.Sample(ctx, len(gpus)); err == nil {
		t.Errorf("Sample(%d) past the last GPU: no error", len(gpus))
	}
}

// BenchmarkSample is one telemetry sample of GPU 0 through the package:
// budget 50 µs; the anchors measured 9.9 µs for NVML util+power+temp+memory
// alone, which BenchmarkSampleNVMLCore repeats for comparison.
func BenchmarkSample(b *testing.B) {
	g := openReal(b)
	ctx := context.Background()
	if _, err := g.Sample(ctx, 0); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := g.Sample(ctx, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSampleNVMLCore is the anchors' measurement: the four NVML calls
// straight, without the goroutine, the clocks, throttle reasons or processes.
func BenchmarkSampleNVMLCore(b *testing.B) {
	g := openReal(b)
	dev, ret := g.lib.DeviceGetHandleByIndex(0)
	if ret != gonvml.SUCCESS {
		b.Fatal(ret)
	}
	for b.Loop() {
		dev.GetUtilizationRates()
		dev.GetPowerUsage()
		dev.GetTemperature(gonvml.TEMPERATURE_GPU)
		dev.GetMemoryInfo()
	}
}
