package cuda

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ebitengine/purego"

	"github.com/gpuwarden/gpuwarden"
)

// fakeCUDA is testdata/fakecuda.c loaded as the driver, with its hooks.
type fakeCUDA struct {
	d         *Driver
	reset     func()
	live      func() int32
	launches  func() int32
	lastGrid  func() uint32
	setDevs   func(n int32)
	flip      func(word int64)
	failNext  func(call string, code int32)
	setUUID   func(dev int32, uuid *UUID)
	lastDev   func() int32
	buildErr  error
	buildSkip string
}

var (
	fakeOnce sync.Once
	fake     fakeCUDA
	// fakeMu serialises the tests that plant faults: the hooks are global
	// to the library.
	fakeMu sync.Mutex
)

// fakeDir holds the stand-in library for the life of the test binary.
var fakeDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fakecuda")
	if err != nil {
		panic(err)
	}
	fakeDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// loadFake builds the stand-in driver with the system C compiler, once;
// without one the tests that need it skip.
func loadFake(t *testing.T) *fakeCUDA {
	t.Helper()
	if gpuBuild {
		t.Skip("a gpu build runs the real driver; the stand-in stays out of its process")
	}
	fakeOnce.Do(func() {
		cc, err := exec.LookPath("cc")
		if err != nil {
			if cc, err = exec.LookPath("gcc"); err != nil {
				fake.buildSkip = "no C compiler to build the stand-in libcuda"
				return
			}
		}
		lib := filepath.Join(fakeDir, "libcuda.so.1")
		out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", lib, "testdata/fakecuda.c", "-lpthread", "-lm").CombinedOutput()
		if err != nil {
			fake.buildErr = errors.New("build fakecuda.c: " + err.Error() + "\n" + string(out))
			return
		}
		d, err := open(lib)
		if err != nil {
			fake.buildErr = err
			return
		}
		fake.d = d
		purego.RegisterLibFunc(&fake.reset, d.lib, "fake_reset")
		purego.RegisterLibFunc(&fake.live, d.lib, "fake_live")
		purego.RegisterLibFunc(&fake.launches, d.lib, "fake_launches")
		purego.RegisterLibFunc(&fake.lastGrid, d.lib, "fake_last_grid")
		purego.RegisterLibFunc(&fake.setDevs, d.lib, "fake_set_devices")
		purego.RegisterLibFunc(&fake.flip, d.lib, "fake_flip")
		purego.RegisterLibFunc(&fake.failNext, d.lib, "fake_fail")
		purego.RegisterLibFunc(&fake.setUUID, d.lib, "fake_set_uuid")
		purego.RegisterLibFunc(&fake.lastDev, d.lib, "fake_last_device")
	})
	if fake.buildSkip != "" {
		t.Skip(fake.buildSkip)
	}
	if fake.buildErr != nil {
		t.Fatal(fake.buildErr)
	}
	fakeMu.Lock()
	fake.reset()
	t.Cleanup(func() {
		if n := fake.live(); n != 0 {
			t.Errorf("%d driver objects left unreleased", n)
		}
		fake.reset()
		fakeMu.Unlock()
	})
	return &fake
}

const fakeAlloc = 1 << 20

func TestFakeProbe(t *testing.T) {
	f := loadFake(t)
	const seed = 0x5eed_0000_1234
	words := uint64(fakeAlloc / 4)
	for _, tc := range []struct {
		name       string
		verifySeed uint64
		flip       int64
		wantErrors uint64
		wantFirst  uint64
	}{
		{"clean", 0, -1, 0, 0},
		{"same seed given twice", seed, -1, 0, 0},
		{"planted fault", seed + 1, -1, words, 0},
		{"bad word", 0, 1000, 1, 4000},
		{"bad last word", 0, int64(words - 1), 1, 4 * (words - 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.flip(tc.flip)
			res, err := f.d.Probe(context.Background(), gpuwarden.ProbeRequest{
				Index: 0, AllocBytes: fakeAlloc + 7, Seed: seed, VerifySeed: tc.verifySeed})
			if err != nil {
				t.Fatal(err)
			}
			if res.VerifiedWords != words || res.VerifyErrors != tc.wantErrors || res.FirstBadOffset != tc.wantFirst {
				t.Errorf("verified %d, errors %d, first bad %d; want %d, %d, %d",
					res.VerifiedWords, res.VerifyErrors, res.FirstBadOffset, words, tc.wantErrors, tc.wantFirst)
			}
			if res.HostToDeviceGBs <= 0 || res.DeviceToHostGBs <= 0 || res.DeviceCopyGBs <= 0 {
				t.Errorf("bandwidths %v %v %v, want all > 0", res.HostToDeviceGBs, res.DeviceToHostGBs, res.DeviceCopyGBs)
			}
			if res.CUDADriverVersion != "13.0" {
				t.Errorf("driver version %q, want 13.0", res.CUDADriverVersion)
			}
			if res.InitSeconds <= 0 || res.AllocSeconds <= 0 || res.KernelSeconds <= 0 {
				t.Errorf("timings %v %v %v, want all > 0", res.InitSeconds, res.AllocSeconds, res.KernelSeconds)
			}
		})
	}
	// The copy of 512 KiB is 32768 vectors: 128 blocks, capped at 4 SMs × 8.
	if got := f.lastGrid(); got != 32 {
		t.Errorf("last grid = %d blocks, want 32", got)
	}
}

// TestFakeProbeFailures plants an error in each call and checks that it
// comes back named, with the right code, and that nothing leaks.
func TestFakeProbeFailures(t *testing.T) {
	for _, tc := range []struct {
		call     string
		code     int32
		wantCode gpuwarden.ErrorCode
		want     string
	}{
		{"cuInit", 999, gpuwarden.EEnvironment, "cannot initialise CUDA: cuInit: CUresult 999"},
		{"cuDeviceGetCount", 1, gpuwarden.EInternal, "cuDeviceGetCount: CUDA_ERROR_INVALID_VALUE"},
		{"cuDevicePrimaryCtxRetain", 1, gpuwarden.EInternal, "cuDevicePrimaryCtxRetain: CUDA_ERROR_INVALID_VALUE"},
		{"cuCtxSetCurrent", 201, gpuwarden.EInternal, "cuCtxSetCurrent: CUDA_ERROR_INVALID_CONTEXT"},
		{"cuModuleLoadDataEx", 218, gpuwarden.EInternal, "load kernels: cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX: ptxas fatal: fake JIT says no"},
		{"cuModuleGetFunction", 500, gpuwarden.EInternal, "kernel gw_fill: cuModuleGetFunction: CUDA_ERROR_NOT_FOUND"},
		{"cuEventCreate", 2, gpuwarden.EInternal, "cuEventCreate: CUDA_ERROR_OUT_OF_MEMORY"},
		{"cuMemAlloc_v2", 2, gpuwarden.EInternal, "allocate 1 MiB on the GPU (512 MiB free of 1024 MiB): cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY"},
		{"cuMemAllocHost_v2", 2, gpuwarden.EInternal, "pinned host memory: cuMemAllocHost_v2: CUDA_ERROR_OUT_OF_MEMORY"},
		{"cuMemsetD32_v2", 700, gpuwarden.EInternal, "cuMemsetD32_v2: CUDA_ERROR_ILLEGAL_ADDRESS"},
		{"cuLaunchKernel", 700, gpuwarden.EInternal, "launch gw_fill: cuLaunchKernel: CUDA_ERROR_ILLEGAL_ADDRESS"},
		{"cuCtxSynchronize", 700, gpuwarden.EInternal, "fill and verify: cuCtxSynchronize: CUDA_ERROR_ILLEGAL_ADDRESS"},
		{"cuMemcpyDtoH_v2", 700, gpuwarden.EInternal, "cuMemcpyDtoH_v2: CUDA_ERROR_ILLEGAL_ADDRESS"},
		{"cuMemcpyHtoD_v2", 700, gpuwarden.EInternal, "host to device: cuMemcpyHtoD_v2: CUDA_ERROR_ILLEGAL_ADDRESS"},
		{"cuEventSynchronize", 700, gpuwarden.EInternal, "device to host: cuEventSynchronize: CUDA_ERROR_ILLEGAL_ADDRESS"},
	} {
		t.Run(tc.call, func(t *testing.T) {
			f := loadFake(t)
			f.failNext(tc.call, tc.code)
			_, err := f.d.Probe(context.Background(), gpuwarden.ProbeRequest{Index: 0, AllocBytes: fakeAlloc, Seed: 3})
			if err == nil {
				t.Fatal("Probe succeeded")
			}
			if !strings.HasPrefix(err.Error(), "cuda probe gpu 0: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
			if got := gpuwarden.ErrorCodeOf(err); got != tc.wantCode {
				t.Errorf("code %q, want %q", got, tc.wantCode)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Code != Result(tc.code) {
				t.Errorf("error %v does not carry CUresult %d", err, tc.code)
			}
		})
	}
}

func TestFakeProbeEnvironment(t *testing.T) {
	t.Run("index out of range", func(t *testing.T) {
		f := loadFake(t)
		_, err := f.d.Probe(context.Background(), gpuwarden.ProbeRequest{Index: 1, AllocBytes: fakeAlloc, Seed: 1})
		if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid || !strings.Contains(err.Error(), "CUDA sees 1 device(s)") {
			t.Errorf("Probe(index 1) = %v", err)
		}
	})
	t.Run("no device", func(t *testing.T) {
		f := loadFake(t)
		f.setDevs(0)
		_, err := f.d.Probe(context.Background(), gpuwarden.ProbeRequest{Index: 0, AllocBytes: fakeAlloc, Seed: 1})
		var ce *Error
		if gpuwarden.ErrorCodeOf(err) != gpuwarden.EEnvironment || !errors.As(err, &ce) || ce.Code != ErrNoDevice {
			t.Errorf("Probe without devices = %v, want an environment error carrying CUDA_ERROR_NO_DEVICE", err)
		}
		if gpuwarden.ErrorHint(err) == "" {
			t.Error("no hint")
		}
	})
}

// countdownCtx reports cancellation from its n-th Err call on, so each
// step boundary of Probe can be cut in turn.
type countdownCtx struct {
	context.Context
	n int
}

func (c *countdownCtx) Err() error {
	if c.n <= 0 {
		return context.Canceled
	}
	c.n--
	return nil
}

func TestFakeProbeCancel(t *testing.T) {
	f := loadFake(t)
	for n := 0; ; n++ {
		_, err := f.d.Probe(&countdownCtx{Context: context.Background(), n: n}, gpuwarden.ProbeRequest{AllocBytes: fakeAlloc, Seed: 1})
		if live := f.live(); live != 0 {
			t.Fatalf("cancelled at check %d: %d driver objects left unreleased", n, live)
		}
		if err == nil {
			if n < 5 {
				t.Fatalf("Probe finished after only %d context checks", n)
			}
			return
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled at check %d: %v, want context.Canceled", n, err)
		}
		if n > 50 {
			t.Fatal("Probe never finishes")
		}
	}
}

func TestFakeProbeConcurrent(t *testing.T) {
	f := loadFake(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			res, err := f.d.Probe(context.Background(), gpuwarden.ProbeRequest{AllocBytes: 64 << 10, Seed: 11})
			if err == nil && res.VerifyErrors != 0 {
				err = errors.New("verify errors on a clean run")
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestFakeDevices(t *testing.T) {
	f := loadFake(t)
	devs, err := f.d.Devices()
	if err != nil {
		t.Fatal(err)
	}
	want := Device{Index: 0, UUID: "GPU-a0111111-1111-1111-1111-111111111111", Name: "Fake GPU", TotalBytes: 1 << 30, SMs: 4, ComputeCapability: "9.0"}
	if len(devs) != 1 || devs[0] != want {
		t.Errorf("Devices() = %+v, want [%+v]", devs, want)
	}
	if v, err := f.d.Version(); err != nil || v != "13.0" {
		t.Errorf("Version() = %q, %v", v, err)
	}
}

func TestParseUUID(t *testing.T) {
	for _, tc := range []struct {
		in, want, wantErr string
	}{
		{"GPU-a0111111-1111-1111-1111-111111111111", "a0111111-1111-1111-1111-111111111111", ""},
		{"MIG-3e3e0c35-9f1a-5b0e-8e12-0123456789ab", "3e3e0c35-9f1a-5b0e-8e12-0123456789ab", ""},
		{"GPU-A0111111-1111-1111-1111-111111111111", "a0111111-1111-1111-1111-111111111111", ""},
		{"a0111111-1111-1111-1111-111111111111", "", "want GPU-"},
		{"MIG-GPU-a0111111-1111-1111-1111-111111111111/1/0", "", "8-4-4-4-12"},
		{"GPU-a0111111-1111-1111-1111-11111111111", "", "8-4-4-4-12"},
		{"GPU-z0111111-1111-1111-1111-111111111111", "", "invalid byte"},
		{"", "", "want GPU-"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseUUID(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseUUID(%q) = %v, %v; want an error containing %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Errorf("ParseUUID(%q) = %s, %v; want %s", tc.in, got, err, tc.want)
			}
		})
	}
}

// TestFakeOrdinalByUUID: CUDA numbers the stand-in's three GPUs in the
// reverse of NVML's order (as CUDA_DEVICE_ORDER=FASTEST_FIRST or a
// CUDA_VISIBLE_DEVICES list can); the probe of NVML's GPU 0 must land on
// CUDA ordinal 2, the one with GPU 0's UUID.
func TestFakeOrdinalByUUID(t *testing.T) {
	f := loadFake(t)
	f.setDevs(3)
	nvmlUUIDs := []string{
		"GPU-0a0a0a0a-0000-0000-0000-000000000000",
		"GPU-0b0b0b0b-0000-0000-0000-000000000001",
		"GPU-0c0c0c0c-0000-0000-0000-000000000002",
	}
	for nvmlIndex, s := range nvmlUUIDs {
		u, err := ParseUUID(s)
		if err != nil {
			t.Fatal(err)
		}
		f.setUUID(int32(2-nvmlIndex), &u)
	}
	for nvmlIndex, uuid := range nvmlUUIDs {
		got, err := f.d.Ordinal(nvmlIndex, uuid)
		if want := 2 - nvmlIndex; err != nil || got != want {
			t.Errorf("Ordinal(%d, %s) = %d, %v; want %d", nvmlIndex, uuid, got, err, want)
		}
		res, err := f.d.Probe(context.Background(), gpuwarden.ProbeRequest{Index: nvmlIndex, UUID: uuid, AllocBytes: 64 << 10, Seed: 5})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := int(f.lastDev()), 2-nvmlIndex; got != want || res.Index != nvmlIndex {
			t.Errorf("probe of NVML GPU %d ran on CUDA ordinal %d and reports index %d; want ordinal %d, index %d",
				nvmlIndex, got, res.Index, want, nvmlIndex)
		}
	}
	t.Run("no uuid means a CUDA ordinal", func(t *testing.T) {
		if got, err := f.d.Ordinal(1, ""); err != nil || got != 1 {
			t.Errorf("Ordinal(1, \"\") = %d, %v", got, err)
		}
	})
	t.Run("a GPU CUDA does not see", func(t *testing.T) {
		_, err := f.d.Ordinal(3, "GPU-0d0d0d0d-0000-0000-0000-000000000003")
		if gpuwarden.ErrorCodeOf(err) != gpuwarden.EEnvironment || !strings.Contains(err.Error(), "not among the 3 device(s) CUDA sees") {
			t.Errorf("err = %v, want an environment error naming the 3 devices", err)
		}
		if !strings.Contains(gpuwarden.ErrorHint(err), "CUDA_VISIBLE_DEVICES") {
			t.Errorf("hint %q does not name CUDA_VISIBLE_DEVICES", gpuwarden.ErrorHint(err))
		}
	})
	t.Run("a malformed uuid", func(t *testing.T) {
		if _, err := f.d.Ordinal(0, "GPU-nope"); gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
			t.Errorf("err = %v, want invalid", err)
		}
	})
	t.Run("the driver fails the query", func(t *testing.T) {
		f.failNext("cuDeviceGetUuid_v2", 101)
		if _, err := f.d.Ordinal(0, nvmlUUIDs[0]); err == nil || !strings.Contains(err.Error(), "cuDeviceGetUuid_v2: CUDA_ERROR_INVALID_DEVICE") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("burn finds it too", func(t *testing.T) {
		res, err := f.d.Burn(context.Background(), gpuwarden.BurnRequest{Index: 0, UUID: nvmlUUIDs[0], MemFraction: 0.01,
			Patterns: []string{"zeros"}, SoakSeconds: 0.01, BandwidthRuns: 1, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if f.lastDev() != 2 || res.Index != 0 {
			t.Errorf("burn of NVML GPU 0 ran on CUDA ordinal %d, reports index %d", f.lastDev(), res.Index)
		}
	})
}

// FuzzParseUUID: whatever ParseUUID accepts prints back, with NVML's
// prefix, to a string that parses to the same bytes.
func FuzzParseUUID(f *testing.F) {
	for _, s := range []string{"GPU-a0111111-1111-1111-1111-111111111111", "MIG-3e3e0c35-9f1a-5b0e-8e12-0123456789ab", "GPU-", "MIG-GPU-x/1/0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseUUID(s)
		if err != nil {
			return
		}
		back, err := ParseUUID("GPU-" + u.String())
		if err != nil || back != u {
			t.Fatalf("%q parsed to %s, which reads back as %s, %v", s, u, back, err)
		}
		if !strings.EqualFold(s[4:], u.String()) {
			t.Fatalf("%q parsed to %s", s, u)
		}
	})
}
