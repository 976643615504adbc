// Package cuda drives the NVIDIA CUDA driver API through purego: no cgo and
// no CUDA toolkit on the host, only the driver's libcuda.so.1, with the
// kernels embedded as PTX that the driver JIT-compiles for whatever GPU it
// finds. It proves that a GPU really runs a kernel (gpuwarden canary) and
// measures it (burn-in).
//
// Driver calls can hang on a sick GPU, so callers run this package in a
// child process that the parent kills on timeout; the package itself just
// does the work in-process and returns.
package cuda

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/gpuwarden/gpuwarden"
)

// libraryNames are tried in order: the versioned name is what the driver
// package installs; the bare name exists only where a -dev package adds it.
var libraryNames = []string{"libcuda.so.1", "libcuda.so"}

// Result is a CUresult, the status code every driver API call returns.
type Result int32

// The CUresult values this package and its callers act on; the driver's
// own name for any code comes from cuGetErrorName.
const (
	// Success is CUDA_SUCCESS.
	Success Result = 0
	// ErrOutOfMemory is CUDA_ERROR_OUT_OF_MEMORY: the allocation does not fit.
	ErrOutOfMemory Result = 2
	// ErrNoDevice is CUDA_ERROR_NO_DEVICE: the driver loads but sees no GPU.
	ErrNoDevice Result = 100
	// ErrInvalidDevice is CUDA_ERROR_INVALID_DEVICE: no GPU at that ordinal.
	ErrInvalidDevice Result = 101
)

// Error is a failed driver call: which call, and the driver's code and name
// for what went wrong, so callers can tell a sick GPU from a missing one.
type Error struct {
	Call string
	Code Result
	// Name is the driver's name for Code ("CUDA_ERROR_OUT_OF_MEMORY").
	Name string
	// Detail is extra text from the driver, such as the PTX JIT log.
	Detail string
}

// Error reads "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY".
func (e *Error) Error() string {
	if e.Detail != "" {
		return e.Call + ": " + e.Name + ": " + e.Detail
	}
	return e.Call + ": " + e.Name
}

// api holds the driver entry points. Handles (CUcontext, CUmodule,
// CUfunction, CUevent) are opaque pointers and travel as uintptr; device
// pointers (CUdeviceptr) and sizes (size_t) are 64-bit on every platform
// this package runs on.
type api struct {
	cuInit                    func(flags uint32) int32
	cuDriverGetVersion        func(version *int32) int32
	cuGetErrorName            func(code int32, name **byte) int32
	cuDeviceGetCount          func(count *int32) int32
	cuDeviceGet               func(dev *int32, ordinal int32) int32
	cuDeviceGetName           func(name *byte, n int32, dev int32) int32
	cuDeviceTotalMem          func(bytes *uint64, dev int32) int32
	cuDeviceGetUuid           func(uuid *UUID, dev int32) int32
	cuDeviceGetAttribute      func(value *int32, attr int32, dev int32) int32
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, dev int32) int32
	cuDevicePrimaryCtxRelease func(dev int32) int32
	cuCtxSetCurrent           func(ctx uintptr) int32
	cuCtxSynchronize          func() int32
	cuMemGetInfo              func(free, total *uint64) int32
	cuMemAlloc                func(dptr *uint64, bytes uint64) int32
	cuMemFree                 func(dptr uint64) int32
	cuMemAllocHost            func(p *unsafe.Pointer, bytes uint64) int32
	cuMemFreeHost             func(p unsafe.Pointer) int32
	cuMemcpyHtoD              func(dst uint64, src unsafe.Pointer, bytes uint64) int32
	cuMemcpyDtoH              func(dst unsafe.Pointer, src uint64, bytes uint64) int32
	cuMemcpyDtoD              func(dst, src uint64, bytes uint64) int32
	cuMemsetD32               func(dst uint64, value uint32, n uint64) int32
	cuModuleLoadDataEx        func(mod *uintptr, image *byte, nopts uint32, opts *int32, vals *uintptr) int32
	cuModuleUnload            func(mod uintptr) int32
	cuModuleGetFunction       func(fn *uintptr, mod uintptr, name *byte) int32
	cuLaunchKernel            func(fn uintptr, gx, gy, gz, bx, by, bz, sharedBytes uint32, stream uintptr, params unsafe.Pointer, extra unsafe.Pointer) int32
	cuEventCreate             func(ev *uintptr, flags uint32) int32
	cuEventRecord             func(ev uintptr, stream uintptr) int32
	cuEventSynchronize        func(ev uintptr) int32
	cuEventElapsedTime        func(ms *float32, start, end uintptr) int32
	cuEventDestroy            func(ev uintptr) int32
}

// symbol binds one api field to the first of its names the library exports.
// Versioned names come first: the driver keeps the old ones only for old
// binaries, and the unversioned cuMemAlloc takes a 32-bit size.
type symbol struct {
	fptr  any
	names []string
}

func (a *api) symbols() []symbol {
	return []symbol{
		{&a.cuInit, []string{"cuInit"}},
		{&a.cuDriverGetVersion, []string{"cuDriverGetVersion"}},
		{&a.cuGetErrorName, []string{"cuGetErrorName"}},
		{&a.cuDeviceGetCount, []string{"cuDeviceGetCount"}},
		{&a.cuDeviceGet, []string{"cuDeviceGet"}},
		{&a.cuDeviceGetName, []string{"cuDeviceGetName"}},
		{&a.cuDeviceTotalMem, []string{"cuDeviceTotalMem_v2"}},
		// CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev), CUDA 11.4+;
		// the first version, same signature, is all an R450 driver has.
		{&a.cuDeviceGetUuid, []string{"cuDeviceGetUuid_v2", "cuDeviceGetUuid"}},
		{&a.cuDeviceGetAttribute, []string{"cuDeviceGetAttribute"}},
		{&a.cuDevicePrimaryCtxRetain, []string{"cuDevicePrimaryCtxRetain"}},
		{&a.cuDevicePrimaryCtxRelease, []string{"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"}},
		{&a.cuCtxSetCurrent, []string{"cuCtxSetCurrent"}},
		{&a.cuCtxSynchronize, []string{"cuCtxSynchronize"}},
		{&a.cuMemGetInfo, []string{"cuMemGetInfo_v2"}},
		{&a.cuMemAlloc, []string{"cuMemAlloc_v2"}},
		{&a.cuMemFree, []string{"cuMemFree_v2"}},
		{&a.cuMemAllocHost, []string{"cuMemAllocHost_v2"}},
		{&a.cuMemFreeHost, []string{"cuMemFreeHost"}},
		{&a.cuMemcpyHtoD, []string{"cuMemcpyHtoD_v2"}},
		{&a.cuMemcpyDtoH, []string{"cuMemcpyDtoH_v2"}},
		{&a.cuMemcpyDtoD, []string{"cuMemcpyDtoD_v2"}},
		{&a.cuMemsetD32, []string{"cuMemsetD32_v2"}},
		{&a.cuModuleLoadDataEx, []string{"cuModuleLoadDataEx"}},
		{&a.cuModuleUnload, []string{"cuModuleUnload"}},
		{&a.cuModuleGetFunction, []string{"cuModuleGetFunction"}},
		{&a.cuLaunchKernel, []string{"cuLaunchKernel"}},
		{&a.cuEventCreate, []string{"cuEventCreate"}},
		{&a.cuEventRecord, []string{"cuEventRecord"}},
		{&a.cuEventSynchronize, []string{"cuEventSynchronize"}},
		// The original entry point first: its signature has not changed
		// since CUDA 2.0, while CUDA 12.8 added a _v2 beside it.
		{&a.cuEventElapsedTime, []string{"cuEventElapsedTime", "cuEventElapsedTime_v2"}},
		{&a.cuEventDestroy, []string{"cuEventDestroy_v2", "cuEventDestroy"}},
	}
}

// Driver is the loaded CUDA driver library; it is safe for concurrent use,
// each Probe binding its own OS thread to the GPU's context.
type Driver struct {
	lib uintptr
	api api
}

// Open loads libcuda and binds the entry points this package calls. The
// library stays loaded for the life of the process, which is a short-lived
// child in every caller.
func Open() (*Driver, error) {
	return open(libraryNames...)
}

// open loads the first library of names that dlopen accepts; tests pass
// the path of a stand-in library.
func open(names ...string) (*Driver, error) {
	var lib uintptr
	var firstErr error
	for _, name := range names {
		h, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			lib = h
			break
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if lib == 0 {
		return nil, &gpuwarden.Error{
			Code:    gpuwarden.EEnvironment,
			Message: "no NVIDIA driver: libcuda.so.1 not found",
			Hint:    "install the NVIDIA driver (it ships libcuda.so.1), or run with --cpu-ok to skip the GPU checks",
			Err:     firstErr,
		}
	}
	d := &Driver{lib: lib}
	if err := bind(lib, d.api.symbols()); err != nil {
		return nil, err
	}
	return d, nil
}

// bind resolves every symbol with Dlsym before registering it, because
// purego.RegisterLibFunc panics on a missing symbol and an old driver must
// instead say what it lacks.
func bind(lib uintptr, syms []symbol) error {
	for _, s := range syms {
		var addr uintptr
		for _, name := range s.names {
			if a, err := purego.Dlsym(lib, name); err == nil && a != 0 {
				addr = a
				break
			}
		}
		if addr == 0 {
			return gpuwarden.Errorf(gpuwarden.EEnvironment,
				"NVIDIA driver too old: libcuda lacks %s", s.names[0]).
				WithHint("update the NVIDIA driver; CUDA 11.0 (R450) or newer is needed")
		}
		purego.RegisterFunc(s.fptr, addr)
	}
	return nil
}

// Version is the newest CUDA version the driver supports, "13.0"; it needs
// no cuInit, so it works even when no GPU is visible.
func (d *Driver) Version() (string, error) {
	var v int32
	if err := d.check("cuDriverGetVersion", d.api.cuDriverGetVersion(&v)); err != nil {
		return "", err
	}
	return formatVersion(v), nil
}

// formatVersion turns cuDriverGetVersion's 1000*major + 10*minor into
// "major.minor" (13000 → "13.0", 12080 → "12.8").
func formatVersion(v int32) string {
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}

// check turns a CUresult into nil or an *Error named after the call.
func (d *Driver) check(call string, rc int32) error {
	if rc == int32(Success) {
		return nil
	}
	return &Error{Call: call, Code: Result(rc), Name: d.errorName(rc)}
}

// errorName asks the driver for a code's name, falling back to the number
// for codes newer than the driver's table.
func (d *Driver) errorName(rc int32) string {
	var p *byte
	if d.api.cuGetErrorName(rc, &p) != int32(Success) || p == nil {
		return fmt.Sprintf("CUresult %d", rc)
	}
	return goString(p)
}

// goString copies a NUL-terminated C string that the driver owns.
func goString(p *byte) string {
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// cString returns s as a NUL-terminated byte slice for the driver to read.
func cString(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}
