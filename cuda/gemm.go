package cuda

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/gpuwarden/gpuwarden"
)

// gemmPTX holds the bf16 GEMM soak's fill and compare kernels, a module
// of its own so that the burn-in's kernels.ptx stays as it is.
//
//go:embed gemm.ptx
var gemmPTX string

const (
	kernelBF16Fill = "gw_bf16fill" // (u64 buf, u64 nwords, u64 seed)
	kernelBF16Cmp  = "gw_bf16cmp"  // (u64 ref, u64 buf, u64 nwords, u64 count)
)

var gemmKernelNames = []string{kernelBF16Fill, kernelBF16Cmp}

// cuBLASLt is found by name first (the loader's path, ld.so.cache), then
// in the toolkit's default directory; newest major version first.
var (
	cublasLtNames = []string{"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11"}
	cublasLtDirs  = []string{"/usr/local/cuda/lib64"}
)

// gemmDim is M = N = K of the soak; a variable so tests can run a tiny
// GEMM on the stand-in libraries. gemmMinDim is as far as short memory
// may shrink it.
var (
	gemmDim    uint64 = 8192
	gemmMinDim uint64 = 1024
)

// cuBLASLt and CUDA ABI values.
const (
	cublasCompute32F = 68 // CUBLAS_COMPUTE_32F
	cudaR32F         = 0  // CUDA_R_32F
	cudaR16BF        = 14 // CUDA_R_16BF
	gemmWorkspace    = 32 << 20
	defaultGEMMSecs  = 10.0

	prefMaxWorkspaceBytes = 1  // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, a uint64_t
	ltStatusNotSupported  = 15 // CUBLAS_STATUS_NOT_SUPPORTED: no heuristic for this configuration
)

// ltHeuristicResult is cublasLtMatmulHeuristicResult_t from cublasLt.h:
// { cublasLtMatmulAlgo_t algo (uint64_t data[8]); size_t workspaceSize;
// cublasStatus_t state; float wavesCount; int reserved[4]; }, 96 bytes.
type ltHeuristicResult struct {
	algo          [8]uint64
	workspaceSize uint64
	state         int32
	wavesCount    float32
	reserved      [4]int32
}

// GEMMResult is what the bf16 GEMM soak measured. Available is false,
// with Reason, when no cuBLASLt library was found; that is no error.
type GEMMResult = gpuwarden.GEMMResult

// ltAPI holds the cuBLASLt entry points; handles and descriptors are
// opaque pointers, statuses cublasStatus_t (0 is success).
type ltAPI struct {
	create        func(handle *uintptr) int32
	destroy       func(handle uintptr) int32
	descCreate    func(desc *uintptr, computeType int32, scaleType int32) int32
	descDestroy   func(desc uintptr) int32
	layoutCreate  func(layout *uintptr, typ int32, rows, cols uint64, ld int64) int32
	layoutDestroy func(layout uintptr) int32
	matmul        func(handle, desc uintptr, alpha unsafe.Pointer, a uint64, adesc uintptr, b uint64, bdesc uintptr,
		beta unsafe.Pointer, c uint64, cdesc uintptr, d uint64, ddesc uintptr, algo unsafe.Pointer,
		workspace uint64, workspaceBytes uint64, stream uintptr) int32
	// cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref)
	prefCreate func(pref *uintptr) int32
	// cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
	prefDestroy func(pref uintptr) int32
	// cublasLtMatmulPreferenceSetAttribute(pref, cublasLtMatmulPreferenceAttributes_t attr,
	// const void *buf, size_t sizeInBytes)
	prefSetAttribute func(pref uintptr, attr int32, buf unsafe.Pointer, size uint64) int32
	// cublasLtMatmulAlgoGetHeuristic(handle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference,
	// int requestedAlgoCount, cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int *returnAlgoCount)
	algoGetHeuristic func(handle, desc, adesc, bdesc, cdesc, ddesc, pref uintptr, requested int32,
		results *ltHeuristicResult, returned *int32) int32
}

func (l *ltAPI) symbols() []symbol {
	return []symbol{
		{&l.create, []string{"cublasLtCreate"}},
		{&l.destroy, []string{"cublasLtDestroy"}},
		{&l.descCreate, []string{"cublasLtMatmulDescCreate"}},
		{&l.descDestroy, []string{"cublasLtMatmulDescDestroy"}},
		{&l.layoutCreate, []string{"cublasLtMatrixLayoutCreate"}},
		{&l.layoutDestroy, []string{"cublasLtMatrixLayoutDestroy"}},
		{&l.matmul, []string{"cublasLtMatmul"}},
		{&l.prefCreate, []string{"cublasLtMatmulPreferenceCreate"}},
		{&l.prefDestroy, []string{"cublasLtMatmulPreferenceDestroy"}},
		{&l.prefSetAttribute, []string{"cublasLtMatmulPreferenceSetAttribute"}},
		{&l.algoGetHeuristic, []string{"cublasLtMatmulAlgoGetHeuristic"}},
	}
}

// openCublasLt loads the first cuBLASLt library it finds; nil and a reason
// when there is none, or it lacks an entry point.
func openCublasLt() (*ltAPI, string) {
	var tries []string
	tries = append(tries, cublasLtNames...)
	for _, dir := range cublasLtDirs {
		for _, n := range cublasLtNames {
			tries = append(tries, filepath.Join(dir, n))
		}
	}
	for _, name := range tries {
		h, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			continue
		}
		l := &ltAPI{}
		if err := bind(h, l.symbols()); err != nil {
			return nil, fmt.Sprintf("%s: %v", name, err)
		}
		return l, ""
	}
	return nil, "no cuBLASLt library found (tried " + fmt.Sprint(cublasLtNames) + " and under " + fmt.Sprint(cublasLtDirs) + ")"
}

// ltCheck turns a cublasStatus_t into nil or an error named after the call.
func ltCheck(call string, rc int32) error {
	if rc == 0 {
		return nil
	}
	return fmt.Errorf("%s: cublasStatus %d", call, rc)
}

// GEMMSoak runs bf16 GEMMs (M = N = K = 8192, fewer when memory is short,
// FP32 accumulation) through cuBLASLt on GPU index for seconds (0: 10 s)
// and, as gpu-burn does, compares every result bitwise with the first.
//
// cuBLASLt gives bitwise-identical results for the same algorithm and
// configuration on one GPU; the soak keeps them fixed: one handle, one
// matmul descriptor, the same layouts, one algorithm picked once by
// cublasLtMatmulAlgoGetHeuristic for the 32 MiB workspace, that workspace
// at the same address and the default stream for every call. Any
// differing element is then a fault of the GPU, not of the library.
//
// GPU index is NVML's, found in CUDA by uuid (see Driver.Ordinal).
func (d *Driver) GEMMSoak(ctx context.Context, index int, uuid string, seconds float64) (res GEMMResult, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("cuda gemm soak gpu %d: %w", index, err)
		}
	}()
	if seconds == 0 {
		seconds = defaultGEMMSecs
	}
	if !(seconds > 0) || math.IsInf(seconds, 0) {
		return res, gpuwarden.Errorf(gpuwarden.EInvalid, "gemm soak of %v s: want a positive duration", seconds)
	}
	lt, reason := openCublasLt()
	if lt == nil {
		res.Reason = reason
		return res, nil
	}
	res.Available = true
	if err := ctx.Err(); err != nil {
		return res, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ordinal, err := d.Ordinal(index, uuid)
	if err != nil {
		return res, err
	}
	s, err := d.openSession(ordinal)
	if err != nil {
		return res, err
	}
	defer s.close()
	if err := s.loadGEMMModule(); err != nil {
		return res, err
	}
	free, err := s.freeMem()
	if err != nil {
		return res, err
	}
	n := gemmSize(gemmDim, gemmMinDim, free)
	if n == 0 {
		return res, fmt.Errorf("%d MiB free is too little for a %d×%d bf16 GEMM", free>>20, gemmMinDim, gemmMinDim)
	}
	res.Dim = int(n)
	matBytes := n * n * 2
	nwords := n * n / 2
	var bufs [4]uint64 // A, B, the first result, the latest result
	for i := range bufs {
		if bufs[i], err = s.alloc(matBytes); err != nil {
			return res, err
		}
	}
	a, b, ref, out := bufs[0], bufs[1], bufs[2], bufs[3]
	ws, err := s.alloc(gemmWorkspace)
	if err != nil {
		return res, err
	}
	count, err := s.alloc(8)
	if err != nil {
		return res, err
	}
	if err := s.memsetD32(count, 0, 2); err != nil {
		return res, err
	}
	if err := s.launch(kernelBF16Fill, nwords, a, nwords, uint64(0x6a09e667f3bcc908)); err != nil {
		return res, err
	}
	if err := s.launch(kernelBF16Fill, nwords, b, nwords, uint64(0xbb67ae8584caa73b)); err != nil {
		return res, err
	}

	var handle, desc uintptr
	if err := ltCheck("cublasLtCreate", lt.create(&handle)); err != nil {
		return res, err
	}
	defer lt.destroy(handle)
	if err := ltCheck("cublasLtMatmulDescCreate", lt.descCreate(&desc, cublasCompute32F, cudaR32F)); err != nil {
		return res, err
	}
	defer lt.descDestroy(desc)
	var layout uintptr // A, B, C and D share one column-major n×n layout
	if err := ltCheck("cublasLtMatrixLayoutCreate", lt.layoutCreate(&layout, cudaR16BF, n, n, int64(n))); err != nil {
		return res, err
	}
	defer lt.layoutDestroy(layout)
	algo, err := lt.pickAlgo(handle, desc, layout, gemmWorkspace)
	if err != nil {
		return res, err
	}
	var algoPtr unsafe.Pointer
	if algo.ok {
		res.Algo, res.WorkspaceBytes = "heuristic", algo.result.workspaceSize
	} else {
		res.Algo = "default, no workspace: " + algo.why
	}
	alpha, beta := new(float32), new(float32)
	*alpha = 1
	var pin runtime.Pinner
	pin.Pin(alpha)
	pin.Pin(beta)
	if algo.ok {
		pin.Pin(&algo.result)
		algoPtr = unsafe.Pointer(&algo.result.algo)
	}
	defer pin.Unpin()
	gemm := func(dst uint64) error {
		return ltCheck("cublasLtMatmul", lt.matmul(handle, desc, unsafe.Pointer(alpha), a, layout, b, layout,
			unsafe.Pointer(beta), dst, layout, dst, layout, algoPtr, ws, gemmWorkspace, 0))
	}
	// The reference result, untimed: it also absorbs the heuristic's and
	// the kernel's first-call costs.
	if err := gemm(ref); err != nil {
		return res, err
	}
	if err := s.sync(); err != nil {
		return res, err
	}
	deadline := time.Now().Add(time.Duration(seconds * float64(time.Second)))
	var gemmSecs float64
	for res.Runs == 0 || time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			break
		}
		// Each GEMM is timed on its own between events; its compare is
		// queued behind it and runs while the host starts the next.
		t, err := s.timed(func() error { return gemm(out) })
		if err != nil {
			return res, err
		}
		gemmSecs += t
		if err := s.launch(kernelBF16Cmp, nwords, ref, out, nwords, count); err != nil {
			return res, err
		}
		res.Runs++
	}
	if err := s.sync(); err != nil {
		return res, err
	}
	var got [8]byte
	if err := s.dtoh(got[:], count); err != nil {
		return res, err
	}
	res.Mismatches = *(*uint64)(unsafe.Pointer(&got[0]))
	if gemmSecs > 0 {
		res.TFLOPs = 2 * float64(n) * float64(n) * float64(n) * float64(res.Runs) / gemmSecs / 1e12
	}
	return res, ctx.Err()
}

// pickedAlgo is what the heuristic chose: ok with its result, or why
// there is none.
type pickedAlgo struct {
	ok     bool
	result ltHeuristicResult
	why    string
}

// pickAlgo asks cuBLASLt for the fastest algorithm that fits in
// workspace bytes. Without this the soak passes a NULL algo, and
// cublasLtMatmul's implicit heuristic then uses the default preference,
// "0 - no workspace allowed", which rules out the split-K and stream-K
// kernels a large GEMM is fastest with. No algorithm (count 0 or
// CUBLAS_STATUS_NOT_SUPPORTED) is no error: the soak falls back to that
// default and says so; any other failure is one.
func (l *ltAPI) pickAlgo(handle, desc, layout uintptr, workspace uint64) (pickedAlgo, error) {
	var pref uintptr
	if err := ltCheck("cublasLtMatmulPreferenceCreate", l.prefCreate(&pref)); err != nil {
		return pickedAlgo{}, err
	}
	defer l.prefDestroy(pref)
	maxWS := new(uint64)
	*maxWS = workspace
	rc := l.prefSetAttribute(pref, prefMaxWorkspaceBytes, unsafe.Pointer(maxWS), 8)
	runtime.KeepAlive(maxWS)
	if err := ltCheck("cublasLtMatmulPreferenceSetAttribute", rc); err != nil {
		return pickedAlgo{}, err
	}
	results := new(ltHeuristicResult)
	returned := new(int32)
	rc = l.algoGetHeuristic(handle, desc, layout, layout, layout, layout, pref, 1, results, returned)
	runtime.KeepAlive(results)
	return judgeHeuristic(rc, *returned, *results, workspace)
}

// judgeHeuristic reads cublasLtMatmulAlgoGetHeuristic's answer: a
// result is only usable when its state is success and its workspace fits
// the buffer the soak passes.
func judgeHeuristic(rc, returned int32, r ltHeuristicResult, workspace uint64) (pickedAlgo, error) {
	switch {
	case rc == ltStatusNotSupported:
		return pickedAlgo{why: "cublasLtMatmulAlgoGetHeuristic: no heuristic for this configuration"}, nil
	case rc != 0:
		return pickedAlgo{}, ltCheck("cublasLtMatmulAlgoGetHeuristic", rc)
	case returned < 1:
		return pickedAlgo{why: "cublasLtMatmulAlgoGetHeuristic returned no algorithm"}, nil
	case r.state != 0:
		return pickedAlgo{why: fmt.Sprintf("the heuristic's algorithm has state cublasStatus %d", r.state)}, nil
	case r.workspaceSize > workspace:
		return pickedAlgo{why: fmt.Sprintf("the heuristic's algorithm needs %d bytes of workspace, over the %d given",
			r.workspaceSize, workspace)}, nil
	}
	return pickedAlgo{ok: true, result: r}, nil
}

// gemmSize is the largest of dim, dim/2, ... (not below minDim) whose four
// bf16 matrices and workspace fit in 90% of free; 0 when none does.
func gemmSize(dim, minDim, free uint64) uint64 {
	for n := dim; n >= minDim && n >= 2; n /= 2 {
		if 4*n*n*2+gemmWorkspace <= free/10*9 {
			return n &^ 1
		}
	}
	return 0
}

// loadGEMMModule JIT-compiles gemm.ptx into the session and resolves its
// kernels beside the burn-in's.
func (s *session) loadGEMMModule() error {
	image := cString(gemmPTX)
	var mod uintptr
	rc := s.d.api.cuModuleLoadDataEx(&mod, &image[0], 0, nil, nil)
	runtime.KeepAlive(image)
	if err := s.d.check("cuModuleLoadDataEx", rc); err != nil {
		return fmt.Errorf("load gemm kernels: %w", err)
	}
	s.undo = append(s.undo, func() { s.d.api.cuModuleUnload(mod) })
	for _, name := range gemmKernelNames {
		var fn uintptr
		cname := cString(name)
		if err := s.d.check("cuModuleGetFunction", s.d.api.cuModuleGetFunction(&fn, mod, &cname[0])); err != nil {
			return fmt.Errorf("kernel %s: %w", name, err)
		}
		s.fns[name] = fn
	}
	return nil
}
