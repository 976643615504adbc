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

	"github.com/gpuwarden/gpuwarden"
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

// TestGPUMIG checks MIG enumeration on a GPU in MIG mode: the layout in
// the inventory, per-instance memory and processes in the sample, the
// device's utilization unknown (not 0), and GPM utilization from the
// second sample where the card has GPM. It skips when no GPU is in MIG mode.
func TestGPUMIG(t *testing.T) {
	g := openReal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gpus, err := g.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	found := false
	for _, gpu := range gpus {
		if !gpu.MIG {
			continue
		}
		found = true
		t.Logf("gpu %d MIG layout: %s", gpu.Index, gpuwarden.MIGLayout(gpu.MIGInstances))
		if len(gpu.MIGInstances) == 0 {
			t.Logf("gpu %d: MIG on but no instance created (nvidia-smi mig -cgi … -C)", gpu.Index)
			continue
		}
		for _, m := range gpu.MIGInstances {
			if m.UUID == "" || m.Profile == "" || m.MemTotalBytes == 0 {
				t.Errorf("gpu %d: MIG instance incomplete: %+v", gpu.Index, m)
			}
		}
		first, err := g.Sample(ctx, gpu.Index)
		if err != nil {
			t.Fatalf("Sample(%d): %v", gpu.Index, err)
		}
		if first.Known(gpuwarden.FieldUtil) {
			t.Logf("gpu %d: the driver reports device utilization under MIG (%.0f%%)", gpu.Index, first.UtilPercent)
		}
		if len(first.MIG) != len(gpu.MIGInstances) {
			t.Errorf("gpu %d: %d MIG samples, inventory has %d", gpu.Index, len(first.MIG), len(gpu.MIGInstances))
		}
		time.Sleep(time.Second)
		second, err := g.Sample(ctx, gpu.Index)
		if err != nil {
			t.Fatalf("Sample(%d): %v", gpu.Index, err)
		}
		t.Logf("sample %d under MIG: %s", gpu.Index, pretty(second))
		for _, m := range second.MIG {
			if !m.Known(gpuwarden.FieldMemUsed) {
				t.Errorf("gpu %d MIG %d: memory unknown (%s)", gpu.Index, m.Index, m.Unknown[gpuwarden.FieldMemUsed])
			}
			if gpu.ComputeCapability >= "9.0" && !m.Known(gpuwarden.FieldUtil) {
				t.Logf("gpu %d MIG %d: no GPM utilization on a %s card (%s)", gpu.Index, m.Index, gpu.ComputeCapability, m.Unknown[gpuwarden.FieldUtil])
			}
		}
		h, err := g.Health(ctx, gpu.Index)
		if err != nil {
			t.Fatalf("Health(%d): %v", gpu.Index, err)
		}
		t.Logf("health %d under MIG: %s", gpu.Index, pretty(h))
	}
	if !found {
		t.Skip("no GPU in MIG mode: enable it with nvidia-smi -i 0 -mig 1 to run this test")
	}
}

// TestGPUXIDEvents checks that NVML's Xid event set registers and says
// which Xid sources are live. It cannot make an Xid happen; it proves the
// registration and the source report, and prints them.
func TestGPUXIDEvents(t *testing.T) {
	g := openReal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	g.WatchXIDEvents(ctx)
	t.Logf("event set registered in %s", time.Since(start))
	h, err := g.Health(ctx, 0)
	if err != nil {
		t.Fatalf("Health: %v", err)
	}
	t.Logf("xid sources: %s", gpuwarden.DescribeXIDSources(h.XIDSources))
	var events gpuwarden.XIDSource
	for _, s := range h.XIDSources {
		if s.Name == gpuwarden.XIDSourceNVMLEvents {
			events = s
		}
	}
	if !events.Live {
		t.Errorf("nvml Xid events not live: %s", events.Reason)
	}
	// A second read must come back fast: the watch runs on its own goroutine
	// and nvmlEventSetWait is bounded.
	start = time.Now()
	if _, err := g.Health(ctx, 0); err != nil || time.Since(start) > time.Second {
		t.Errorf("second Health: %v after %s", err, time.Since(start))
	}
}
