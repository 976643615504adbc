package cuda

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/ebitengine/purego"

	"github.com/gpuwarden/gpuwarden"
)

func TestOpenWithoutDriver(t *testing.T) {
	for _, name := range libraryNames {
		if h, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL); err == nil {
			purego.Dlclose(h)
			t.Skipf("%s is installed here; the gpu-tagged tests cover this host", name)
		}
	}
	d, err := Open()
	if err == nil {
		t.Fatalf("Open() = %v, nil; want an error without libcuda", d)
	}
	var e *gpuwarden.Error
	if !errors.As(err, &e) {
		t.Fatalf("Open() error %T %v is not a *gpuwarden.Error", err, err)
	}
	if e.Code != gpuwarden.EEnvironment {
		t.Errorf("code = %q, want %q", e.Code, gpuwarden.EEnvironment)
	}
	if e.Message != "no NVIDIA driver: libcuda.so.1 not found" {
		t.Errorf("message = %q", e.Message)
	}
	if !strings.Contains(e.Hint, "--cpu-ok") || !strings.Contains(e.Hint, "driver") {
		t.Errorf("hint = %q, want it to mention the driver and --cpu-ok", e.Hint)
	}
}

// TestSignatures registers every entry point against a libc function:
// purego checks the Go signature then, so a type it cannot pass fails
// here rather than on the first GPU host. Nothing is called.
func TestSignatures(t *testing.T) {
	libc, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		t.Skipf("no libc.so.6: %v", err)
	}
	addr, err := purego.Dlsym(libc, "abs")
	if err != nil {
		t.Fatal(err)
	}
	var a api
	for _, s := range a.symbols() {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: %v", s.names[0], r)
				}
			}()
			purego.RegisterFunc(s.fptr, addr)
		}()
	}

	var missing func() int32
	err = bind(libc, []symbol{{&missing, []string{"cuNoSuchCall_v9", "cuNoSuchCall"}}})
	if gpuwarden.ErrorCodeOf(err) != gpuwarden.EEnvironment || !strings.Contains(err.Error(), "cuNoSuchCall_v9") {
		t.Errorf("bind with a missing symbol = %v, want an environment error naming it", err)
	}
	var abs func(int32) int32
	if err := bind(libc, []symbol{{&abs, []string{"no_such_abs", "abs"}}}); err != nil {
		t.Fatalf("bind falls back to the second name: %v", err)
	}
	if got := abs(-7); got != 7 {
		t.Errorf("abs(-7) through the fallback name = %d", got)
	}
}

func TestFormatVersion(t *testing.T) {
	for _, tc := range []struct {
		v    int32
		want string
	}{
		{12080, "12.8"},
		{13000, "13.0"},
		{11020, "11.2"},
		{12010, "12.1"},
	} {
		if got := formatVersion(tc.v); got != tc.want {
			t.Errorf("formatVersion(%d) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

func TestErrorText(t *testing.T) {
	err := error(&Error{Call: "cuMemAlloc_v2", Code: ErrOutOfMemory, Name: "CUDA_ERROR_OUT_OF_MEMORY"})
	if got := err.Error(); got != "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("Error() = %q", got)
	}
	err = &Error{Call: "cuModuleLoadDataEx", Code: 218, Name: "CUDA_ERROR_INVALID_PTX", Detail: "ptxas: syntax error"}
	if got := err.Error(); got != "cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX: ptxas: syntax error" {
		t.Errorf("Error() = %q", got)
	}
}

func TestMedianAndRate(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{9, 1, 2, 8, 3}, 3},
		{[]float64{4, 1}, 4},
	} {
		if got := median(tc.xs); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
	if got := gbPerSecond(4e9, 2); got != 2 {
		t.Errorf("gbPerSecond(4e9, 2) = %v, want 2", got)
	}
	if got := gbPerSecond(1, 0); got != 0 {
		t.Errorf("gbPerSecond(1, 0) = %v, want 0", got)
	}
}

func TestCheckReadback(t *testing.T) {
	const seed = 99
	host := make([]byte, 4*100_000)
	for i := range uint64(len(host) / 4) {
		binary.LittleEndian.PutUint32(host[4*i:], Pattern(i, seed))
	}
	if err := checkReadback(host, seed); err != nil {
		t.Fatalf("clean readback: %v", err)
	}
	if err := checkReadback(host, seed+1); err == nil {
		t.Error("readback against another seed passed")
	}
	last := len(host) - 4
	binary.LittleEndian.PutUint32(host[last:], 0)
	if err := checkReadback(host, seed); err == nil || !strings.Contains(err.Error(), "word 99999") {
		t.Errorf("corrupt last word: %v", err)
	}
}

// TestProbeRejects covers the checks made before any driver call, so a
// Driver with nothing bound is enough.
func TestProbeRejects(t *testing.T) {
	d := &Driver{}
	for _, tc := range []struct {
		name string
		req  gpuwarden.ProbeRequest
	}{
		{"too small", gpuwarden.ProbeRequest{AllocBytes: 100, Seed: 1}},
		{"rounds below the minimum", gpuwarden.ProbeRequest{AllocBytes: minProbeBytes - 1, Seed: 1}},
		{"verify seed fills alike", gpuwarden.ProbeRequest{AllocBytes: 1 << 20, Seed: 5, VerifySeed: 5 ^ (1<<32 | 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.Probe(context.Background(), tc.req)
			if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
				t.Errorf("Probe = %v, want an invalid-request error", err)
			}
		})
	}
}
