//go:build gpu

package cuda

// The real-GPU suite: build it here with
//
//	go test -c -tags gpu -o bin/cuda-gpu.test ./cuda/
//
// and run it on a GPU host (no Go toolchain needed there) with
//
//	CUDA_DEVICE_ORDER=PCI_BUS_ID ./cuda-gpu.test -test.v -test.bench . -test.benchtime 5x

import (
	"context"
	"encoding/binary"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// gpuBuild keeps the stand-in driver out of this build: loaded with
// RTLD_GLOBAL beside the real libcuda, its symbols could interpose.
const gpuBuild = true

const probeBytes = 256 << 20

func openGPU(t testing.TB) *Driver {
	t.Helper()
	d, err := Open()
	if err != nil {
		t.Fatalf("Open: %v (hint: %s)", err, gpuwarden.ErrorHint(err))
	}
	return d
}

func TestGPUDevices(t *testing.T) {
	d := openGPU(t)
	v, err := d.Version()
	if err != nil {
		t.Fatal(err)
	}
	devs, err := d.Devices()
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) == 0 {
		t.Fatal("no devices")
	}
	t.Logf("CUDA driver %s", v)
	for _, dev := range devs {
		t.Logf("gpu %d: %s %s, %.1f GiB, %d SMs, compute %s",
			dev.Index, dev.UUID, dev.Name, float64(dev.TotalBytes)/(1<<30), dev.SMs, dev.ComputeCapability)
		if dev.SMs <= 0 || dev.TotalBytes == 0 || dev.Name == "" {
			t.Errorf("gpu %d: implausible %+v", dev.Index, dev)
		}
		// The UUID must read back in NVML's form (compare with nvidia-smi -L)
		// and lead back to the same ordinal.
		if _, err := ParseUUID(dev.UUID); err != nil {
			t.Errorf("gpu %d: %v", dev.Index, err)
		}
		if got, err := d.Ordinal(dev.Index, dev.UUID); err != nil || got != dev.Index {
			t.Errorf("Ordinal(%s) = %d, %v; want %d", dev.UUID, got, err, dev.Index)
		}
	}
}

func TestGPUProbe(t *testing.T) {
	d := openGPU(t)
	const seed = 0x5eed_1234_abcd
	words := uint64(probeBytes / 4)

	start := time.Now()
	res, err := d.Probe(context.Background(), gpuwarden.ProbeRequest{Index: 0, AllocBytes: probeBytes, Seed: seed})
	wall := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("probe 256 MiB: wall %v; init %.0f ms, alloc %.0f ms, fill+verify %.1f ms",
		wall.Round(time.Millisecond), 1e3*res.InitSeconds, 1e3*res.AllocSeconds, 1e3*res.KernelSeconds)
	t.Logf("h2d %.1f GB/s, d2h %.1f GB/s, device copy %.0f GB/s (read+write), CUDA %s",
		res.HostToDeviceGBs, res.DeviceToHostGBs, res.DeviceCopyGBs, res.CUDADriverVersion)
	if res.VerifiedWords != words || res.VerifyErrors != 0 {
		t.Errorf("right seed: %d errors in %d words, want 0 in %d", res.VerifyErrors, res.VerifiedWords, words)
	}
	if res.HostToDeviceGBs <= 0 || res.DeviceToHostGBs <= 0 || res.DeviceCopyGBs <= 0 {
		t.Errorf("bandwidths %+v, want all > 0", res)
	}

	planted, err := d.Probe(context.Background(), gpuwarden.ProbeRequest{
		Index: 0, AllocBytes: probeBytes, Seed: seed, VerifySeed: seed + 1})
	if err != nil {
		t.Fatal(err)
	}
	if planted.VerifyErrors != words || planted.FirstBadOffset != 0 {
		t.Errorf("wrong seed: %d errors, first bad at %d; want %d errors at 0",
			planted.VerifyErrors, planted.FirstBadOffset, words)
	}
	t.Logf("planted fault: %d of %d words flagged, fill+verify %.1f ms",
		planted.VerifyErrors, planted.VerifiedWords, 1e3*planted.KernelSeconds)
}

func TestGPUProbeCancelled(t *testing.T) {
	d := openGPU(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.Probe(ctx, gpuwarden.ProbeRequest{AllocBytes: probeBytes, Seed: 1}); err == nil {
		t.Fatal("Probe with a cancelled context succeeded")
	}
}

// withSession runs f on GPU 0 with the kernels loaded, on a locked thread.
func withSession(t testing.TB, f func(s *session)) {
	t.Helper()
	d := openGPU(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s, err := d.openSession(0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	f(s)
}

// TestGPUKernels checks on the GPU what the interpreter checks here: every
// word gw_fill writes equals Pattern, gw_copy moves it intact, and gw_fma
// computes what the Go reference does. It also sets the copy kernel beside
// cuMemcpyDtoD.
func TestGPUKernels(t *testing.T) {
	withSession(t, func(s *session) {
		const size = 64 << 20
		const seed uint64 = 0xabad_1dea
		words := uint64(size / 4)
		src, err := s.alloc(size)
		if err != nil {
			t.Fatal(err)
		}
		dst, err := s.alloc(size)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.memsetD32(dst, 0, words); err != nil {
			t.Fatal(err)
		}
		if err := s.launch(kernelFill, words, src, words, seed); err != nil {
			t.Fatal(err)
		}
		if err := s.launch(kernelCopy, size/16, dst, src, uint64(size/16)); err != nil {
			t.Fatal(err)
		}
		if err := s.sync(); err != nil {
			t.Fatal(err)
		}
		host := make([]byte, size)
		if err := s.dtoh(host, dst); err != nil {
			t.Fatal(err)
		}
		for i := range words {
			if got, want := binary.LittleEndian.Uint32(host[4*i:]), Pattern(i, seed); got != want {
				t.Fatalf("copied word %d = %#08x, Pattern says %#08x", i, got, want)
			}
		}

		const big uint64 = 1 << 30
		a, err := s.alloc(big)
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.alloc(big)
		if err != nil {
			t.Fatal(err)
		}
		kernel := func() error { return s.launch(kernelCopy, big/16, b, a, big/16) }
		memcpy := func() error { return s.d.check("cuMemcpyDtoD_v2", s.d.api.cuMemcpyDtoD(b, a, big)) }
		for _, c := range []struct {
			name string
			op   func() error
		}{{"copy kernel", kernel}, {"cuMemcpyDtoD", memcpy}} {
			if _, err := s.timed(c.op); err != nil { // warm-up
				t.Fatal(err)
			}
			secs, err := s.timeRuns(context.Background(), 5, c.op)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s 1 GiB: %.2f TB/s read+write", c.name, gbPerSecond(2*big, secs)/1e3)
		}

		threads := uint64(gridBlocks(math.MaxUint32, s.sms)) * threadsPerBlock
		out, err := s.alloc(threads * 4)
		if err != nil {
			t.Fatal(err)
		}
		const checkIters = 100
		if err := s.launch(kernelFMA, threads, out, uint32(checkIters)); err != nil {
			t.Fatal(err)
		}
		if err := s.sync(); err != nil {
			t.Fatal(err)
		}
		sums := make([]byte, threads*4)
		if err := s.dtoh(sums, out); err != nil {
			t.Fatal(err)
		}
		for g := uint64(0); g < threads; g += 97 {
			got := math.Float32frombits(binary.LittleEndian.Uint32(sums[4*g:]))
			want := fmaReference(uint32(g%threadsPerBlock), checkIters)
			if math.Abs(float64(got-want)) > 1e-4*math.Abs(float64(want)) {
				t.Fatalf("fma thread %d = %v, the Go reference says %v", g, got, want)
			}
		}

		const iters = 20000
		fma := func() error { return s.launch(kernelFMA, threads, out, uint32(iters)) }
		if _, err := s.timed(fma); err != nil { // warm-up: the SM clock idles low
			t.Fatal(err)
		}
		secs, err := s.timeRuns(context.Background(), 5, fma)
		if err != nil {
			t.Fatal(err)
		}
		flops := float64(threads) * fmaFlopsPerIter * iters
		t.Logf("fma %d threads × %d iters: %.1f TFLOP/s FP32", threads, iters, flops/secs/1e12)
	})
}

func BenchmarkProbe256MiB(b *testing.B) {
	d := openGPU(b)
	var res gpuwarden.ProbeResult
	for b.Loop() {
		var err error
		res, err = d.Probe(context.Background(), gpuwarden.ProbeRequest{AllocBytes: probeBytes, Seed: 42})
		if err != nil {
			b.Fatal(err)
		}
		if res.VerifyErrors != 0 {
			b.Fatalf("%d verify errors", res.VerifyErrors)
		}
	}
	b.ReportMetric(res.HostToDeviceGBs, "h2d-GB/s")
	b.ReportMetric(res.DeviceToHostGBs, "d2h-GB/s")
	b.ReportMetric(res.DeviceCopyGBs, "copy-GB/s")
	b.ReportMetric(1e3*res.KernelSeconds, "fill+verify-ms")
}
