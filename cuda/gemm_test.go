package cuda

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// fakeLt is testdata/fakecublaslt.c, built beside the stand-in libcuda.
var (
	fakeLtOnce    sync.Once
	fakeLtPath    string
	fakeLtErr     error
	fakeLtReset   func()
	fakeLtLive    func() int32
	fakeLtCalls   func() int32
	fakeLtCorrupt func(run int32)
	// fakeLtHeuristic picks the heuristic's answer: 0 an algo, 1 none,
	// 2 CUBLAS_STATUS_NOT_SUPPORTED, 3 CUBLAS_STATUS_INTERNAL_ERROR.
	fakeLtHeuristic func(mode int32)
	fakeLtAlgoCalls func() int32
)

// fakeLtAlgoWorkspace is what the stand-in heuristic's algo needs.
const fakeLtAlgoWorkspace = 4 << 20

// loadFakeLt builds the stand-in cuBLASLt and points GEMMSoak at it with
// a 64×64 GEMM for the test's duration.
func loadFakeLt(t *testing.T) {
	t.Helper()
	fakeLtOnce.Do(func() {
		cc, err := exec.LookPath("cc")
		if err != nil {
			if cc, err = exec.LookPath("gcc"); err != nil {
				fakeLtErr = err
				return
			}
		}
		fakeLtPath = filepath.Join(fakeDir, "libcublasLt.so.13")
		out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", fakeLtPath, "testdata/fakecublaslt.c").CombinedOutput()
		if err != nil {
			fakeLtErr = errors.New("build fakecublaslt.c: " + err.Error() + "\n" + string(out))
			return
		}
		h, err := purego.Dlopen(fakeLtPath, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			fakeLtErr = err
			return
		}
		purego.RegisterLibFunc(&fakeLtReset, h, "fake_lt_reset")
		purego.RegisterLibFunc(&fakeLtLive, h, "fake_lt_live")
		purego.RegisterLibFunc(&fakeLtCalls, h, "fake_lt_calls")
		purego.RegisterLibFunc(&fakeLtCorrupt, h, "fake_lt_corrupt")
		purego.RegisterLibFunc(&fakeLtHeuristic, h, "fake_lt_heuristic")
		purego.RegisterLibFunc(&fakeLtAlgoCalls, h, "fake_lt_algo_calls")
	})
	if fakeLtErr != nil {
		t.Fatal(fakeLtErr)
	}
	names, dirs, dim, minDim := cublasLtNames, cublasLtDirs, gemmDim, gemmMinDim
	cublasLtNames, cublasLtDirs, gemmDim, gemmMinDim = []string{fakeLtPath}, nil, 64, 16
	fakeLtReset()
	t.Cleanup(func() {
		if n := fakeLtLive(); n != 0 {
			t.Errorf("%d cuBLASLt objects left undestroyed", n)
		}
		cublasLtNames, cublasLtDirs, gemmDim, gemmMinDim = names, dirs, dim, minDim
	})
}

func TestFakeGEMMSoak(t *testing.T) {
	f := loadFake(t) // skips where there is no C compiler, and in gpu builds
	for _, tc := range []struct {
		name    string
		corrupt int32 // the cublasLtMatmul call whose result is bad; 0 is the reference
		want    func(runs int) uint64
	}{
		{"clean", -1, func(int) uint64 { return 0 }},
		{"one bad repeat", 2, func(int) uint64 { return 1 }},
		{"bad reference", 0, func(runs int) uint64 { return uint64(runs) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loadFakeLt(t)
			fakeLtCorrupt(tc.corrupt)
			res, err := f.d.GEMMSoak(context.Background(), 0, "", 0.05)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", res)
			// The stand-in offers its 4 MiB algo only when the preference
			// allows that much workspace, and counts the matmuls that used it.
			if res.Algo != "heuristic" || res.WorkspaceBytes != fakeLtAlgoWorkspace {
				t.Errorf("algo %q with %d bytes of workspace, want the heuristic's with %d", res.Algo, res.WorkspaceBytes, fakeLtAlgoWorkspace)
			}
			if got := int(fakeLtAlgoCalls()); got != res.Runs+1 {
				t.Errorf("%d matmuls ran the heuristic's algo, want all %d", got, res.Runs+1)
			}
			if !res.Available || res.Dim != 64 || res.Runs < 3 || res.TFLOPs <= 0 {
				t.Errorf("got %+v, want 64×64, at least 3 runs and a rate", res)
			}
			if int(fakeLtCalls()) != res.Runs+1 {
				t.Errorf("%d cublasLtMatmul calls for %d runs and a reference", fakeLtCalls(), res.Runs)
			}
			if want := tc.want(res.Runs); res.Mismatches != want {
				t.Errorf("mismatches = %d, want %d", res.Mismatches, want)
			}
		})
	}
}

// TestFakeGEMMSoakHeuristicFallback: without an algorithm from the
// heuristic the soak still runs, on cuBLASLt's default, and says why; a
// heuristic that fails outright is an error.
func TestFakeGEMMSoakHeuristicFallback(t *testing.T) {
	f := loadFake(t)
	for _, tc := range []struct {
		name     string
		mode     int32
		wantAlgo string
		wantErr  string
	}{
		{"no algorithm", 1, "default, no workspace: cublasLtMatmulAlgoGetHeuristic returned no algorithm", ""},
		{"not supported", 2, "default, no workspace: cublasLtMatmulAlgoGetHeuristic: no heuristic for this configuration", ""},
		{"internal error", 3, "", "cublasLtMatmulAlgoGetHeuristic: cublasStatus 14"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loadFakeLt(t)
			fakeLtHeuristic(tc.mode)
			res, err := f.d.GEMMSoak(context.Background(), 0, "", 0.02)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Algo != tc.wantAlgo || res.WorkspaceBytes != 0 || res.Runs < 1 {
				t.Errorf("got %+v, want algo %q, no workspace, some runs", res, tc.wantAlgo)
			}
			if n := fakeLtAlgoCalls(); n != 0 {
				t.Errorf("%d matmuls claim the heuristic's algo", n)
			}
		})
	}
}

func TestJudgeHeuristic(t *testing.T) {
	ok := ltHeuristicResult{workspaceSize: 1 << 20}
	for _, tc := range []struct {
		name          string
		rc, returned  int32
		r             ltHeuristicResult
		wantOK        bool
		wantWhy, wErr string
	}{
		{"fits", 0, 1, ok, true, "", ""},
		{"exactly the buffer", 0, 1, ltHeuristicResult{workspaceSize: 2 << 20}, true, "", ""},
		{"over the buffer", 0, 1, ltHeuristicResult{workspaceSize: 2<<20 + 1}, false, "needs 2097153 bytes of workspace, over the 2097152 given", ""},
		{"bad state", 0, 1, ltHeuristicResult{state: 15}, false, "state cublasStatus 15", ""},
		{"none", 0, 0, ok, false, "returned no algorithm", ""},
		{"not supported", 15, 0, ok, false, "no heuristic for this configuration", ""},
		{"failed", 7, 0, ok, false, "", "cublasStatus 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := judgeHeuristic(tc.rc, tc.returned, tc.r, 2<<20)
			if tc.wErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wErr) {
					t.Fatalf("err = %v, want %q", err, tc.wErr)
				}
				return
			}
			if err != nil || got.ok != tc.wantOK || !strings.Contains(got.why, tc.wantWhy) {
				t.Errorf("got %+v, %v; want ok %v, why containing %q", got, err, tc.wantOK, tc.wantWhy)
			}
		})
	}
}

func TestHeuristicResultLayout(t *testing.T) {
	// cublasLt.h: algo (64) + workspaceSize (8) + state (4) + wavesCount (4) + reserved (16).
	if got := unsafe.Sizeof(ltHeuristicResult{}); got != 96 {
		t.Errorf("ltHeuristicResult is %d bytes, cublasLtMatmulHeuristicResult_t is 96", got)
	}
	if got := unsafe.Offsetof(ltHeuristicResult{}.workspaceSize); got != 64 {
		t.Errorf("workspaceSize at offset %d, want 64", got)
	}
}

func TestGEMMSoakNoCublasLt(t *testing.T) {
	names, dirs := cublasLtNames, cublasLtDirs
	cublasLtNames = []string{"libgpuwarden-no-such-cublaslt.so.99"}
	cublasLtDirs = []string{t.TempDir()}
	t.Cleanup(func() { cublasLtNames, cublasLtDirs = names, dirs })
	// The library is looked for before the GPU is touched, so a driver
	// with nothing bound is enough.
	res, err := (&Driver{}).GEMMSoak(context.Background(), 0, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Available || res.Reason == "" || res.Runs != 0 {
		t.Errorf("got %+v, want unavailable with a reason", res)
	}
	if _, err := (&Driver{}).GEMMSoak(context.Background(), 0, "", -1); err == nil {
		t.Error("a negative duration was accepted")
	}
}

func TestGEMMSize(t *testing.T) {
	for _, tc := range []struct{ free, want uint64 }{
		{80 << 30, 8192},
		{600 << 20, 4096},
		{100 << 20, 2048},
		{10 << 20, 0},
	} {
		if got := gemmSize(8192, 1024, tc.free); got != tc.want {
			t.Errorf("gemmSize(free %d MiB) = %d, want %d", tc.free>>20, got, tc.want)
		}
	}
}

// bf16Word is gw_bf16fill's word i, from its definition in gemm.ptx.
func bf16Word(i, seed uint64) uint32 {
	return Pattern(i, seed)&0x807F807F | 0x3F803F80
}

func TestPTXBF16Kernels(t *testing.T) {
	ks, err := parsePTX(gemmPTX)
	if err != nil {
		t.Fatalf("parse gemm.ptx: %v", err)
	}
	for _, name := range gemmKernelNames {
		if ks[name] == nil {
			t.Fatalf("parser found no %s", name)
		}
	}
	const nwords, seed = 1001, 0x1234_5678_9abc
	mem := newSimMemory()
	ref := mem.alloc(nwords * 4)
	buf := mem.alloc(nwords * 4)
	count := mem.alloc(8)
	for _, p := range []uint64{ref, buf} {
		if err := ks[kernelBF16Fill].launch(mem, 2, threadsPerBlock, p, nwords, seed); err != nil {
			t.Fatal(err)
		}
	}
	for i := range uint64(nwords) {
		got := mem.u32(ref + 4*i)
		if want := bf16Word(i, seed); got != want {
			t.Fatalf("word %d = %#08x, want %#08x", i, got, want)
		}
		for _, h := range []uint32{got & 0xFFFF, got >> 16} {
			if e := h >> 7 & 0xFF; e != 127 {
				t.Fatalf("word %d: bf16 %#04x has exponent %d, want 127", i, h, e)
			}
		}
	}
	cmp := func() uint64 {
		mem.setU64(count, 0)
		if err := ks[kernelBF16Cmp].launch(mem, 3, threadsPerBlock, ref, buf, nwords, count); err != nil {
			t.Fatal(err)
		}
		return mem.u64(count)
	}
	if got := cmp(); got != 0 {
		t.Errorf("identical matrices: %d mismatches", got)
	}
	mem.setU32(buf+4*7, mem.u32(buf+4*7)^0x1)            // the low element
	mem.setU32(buf+4*500, mem.u32(buf+4*500)^0x10000)    // the high element
	mem.setU32(buf+4*1000, mem.u32(buf+4*1000)^0x8001)   // two bits of one element
	mem.setU32(buf+4*999, mem.u32(buf+4*999)^0x80008000) // both elements
	if got := cmp(); got != 5 {
		t.Errorf("planted 5 bad elements, counted %d", got)
	}
}
