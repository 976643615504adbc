package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"unsafe"

	"github.com/gpuwarden/gpuwarden"
)

// Driver API constants this package passes in; their values are fixed by
// the CUDA ABI.
const (
	attrMultiprocessorCount = 16 // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	attrCCMajor             = 75 // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	attrCCMinor             = 76 // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
	jitErrorLogBuffer       = 5  // CU_JIT_ERROR_LOG_BUFFER
	jitErrorLogBufferSize   = 6  // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
)

// Device is one GPU as the CUDA driver numbers it. CUDA's ordinals follow
// CUDA_DEVICE_ORDER (fastest first unless set to PCI_BUS_ID), which can
// differ from NVML's PCI order on mixed hosts.
type Device struct {
	Index int `json:"index"`
	// UUID is NVML's form of the device's UUID, "GPU-…".
	UUID       string `json:"uuid"`
	Name       string `json:"name"`
	TotalBytes uint64 `json:"total_bytes"`
	SMs        int    `json:"sms"`
	// ComputeCapability is major.minor, "9.0" on Hopper.
	ComputeCapability string `json:"compute_capability"`
}

// Devices lists the GPUs the driver sees; it needs no context, so it is
// cheap enough to run before picking a GPU to probe.
func (d *Driver) Devices() ([]Device, error) {
	if err := d.init(); err != nil {
		return nil, err
	}
	var n int32
	if err := d.check("cuDeviceGetCount", d.api.cuDeviceGetCount(&n)); err != nil {
		return nil, err
	}
	devs := make([]Device, 0, n)
	for i := range int(n) {
		var dev int32
		if err := d.check("cuDeviceGet", d.api.cuDeviceGet(&dev, int32(i))); err != nil {
			return nil, err
		}
		name := make([]byte, 256)
		if err := d.check("cuDeviceGetName", d.api.cuDeviceGetName(&name[0], int32(len(name)), dev)); err != nil {
			return nil, err
		}
		if j := bytes.IndexByte(name, 0); j >= 0 {
			name = name[:j]
		}
		var uuid UUID
		if err := d.check("cuDeviceGetUuid_v2", d.api.cuDeviceGetUuid(&uuid, dev)); err != nil {
			return nil, err
		}
		var total uint64
		if err := d.check("cuDeviceTotalMem_v2", d.api.cuDeviceTotalMem(&total, dev)); err != nil {
			return nil, err
		}
		sms, err := d.attribute(dev, attrMultiprocessorCount)
		if err != nil {
			return nil, err
		}
		major, err := d.attribute(dev, attrCCMajor)
		if err != nil {
			return nil, err
		}
		minor, err := d.attribute(dev, attrCCMinor)
		if err != nil {
			return nil, err
		}
		devs = append(devs, Device{
			Index:             i,
			UUID:              "GPU-" + uuid.String(),
			Name:              string(name),
			TotalBytes:        total,
			SMs:               sms,
			ComputeCapability: fmt.Sprintf("%d.%d", major, minor),
		})
	}
	return devs, nil
}

// init runs cuInit, which is idempotent, and classifies its failures:
// they all mean the machine, not the request, is at fault.
func (d *Driver) init() error {
	err := d.check("cuInit", d.api.cuInit(0))
	if err == nil {
		return nil
	}
	var ce *Error
	if errors.As(err, &ce) && ce.Code == ErrNoDevice {
		return (&gpuwarden.Error{Code: gpuwarden.EEnvironment, Message: "no CUDA device visible", Err: err}).
			WithHint("check nvidia-smi and CUDA_VISIBLE_DEVICES, or run with --cpu-ok to skip the GPU checks")
	}
	return (&gpuwarden.Error{Code: gpuwarden.EEnvironment, Message: "cannot initialise CUDA", Err: err}).
		WithHint("check nvidia-smi; a driver and kernel module of different versions need a reboot or a driver reinstall")
}

func (d *Driver) attribute(dev int32, attr int32) (int, error) {
	var v int32
	if err := d.check("cuDeviceGetAttribute", d.api.cuDeviceGetAttribute(&v, attr, dev)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// session is one GPU's primary context with the kernels loaded and two
// timing events. Its methods must run on the OS thread that opened it,
// because a CUDA context is current per thread: callers lock the thread.
type session struct {
	d           *Driver
	dev         int32
	sms         int
	mod         uintptr
	fns         map[string]uintptr
	start, stop uintptr
	// undo holds the releases in the order of acquisition; close runs
	// them backwards, so memory goes before the context that owns it.
	undo []func()
}

// openSession initialises CUDA and makes GPU index current on the calling
// (locked) OS thread. The primary context is the one the CUDA runtime and
// every framework share, so the probe sees what a job would.
func (d *Driver) openSession(index int) (s *session, err error) {
	if err := d.init(); err != nil {
		return nil, err
	}
	var n int32
	if err := d.check("cuDeviceGetCount", d.api.cuDeviceGetCount(&n)); err != nil {
		return nil, err
	}
	if index < 0 || index >= int(n) {
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "gpu index %d: CUDA sees %d device(s)", index, n).
			WithHint("pick an index below %d; CUDA_VISIBLE_DEVICES renumbers the GPUs it keeps", n)
	}
	s = &session{d: d, fns: map[string]uintptr{}}
	defer func() {
		if err != nil {
			s.close()
			s = nil
		}
	}()
	if err := d.check("cuDeviceGet", d.api.cuDeviceGet(&s.dev, int32(index))); err != nil {
		return s, err
	}
	if s.sms, err = d.attribute(s.dev, attrMultiprocessorCount); err != nil {
		return s, err
	}
	var ctx uintptr
	if err := d.check("cuDevicePrimaryCtxRetain", d.api.cuDevicePrimaryCtxRetain(&ctx, s.dev)); err != nil {
		return s, err
	}
	dev := s.dev
	s.undo = append(s.undo, func() { d.api.cuDevicePrimaryCtxRelease(dev) })
	if err := d.check("cuCtxSetCurrent", d.api.cuCtxSetCurrent(ctx)); err != nil {
		return s, err
	}
	s.undo = append(s.undo, func() { d.api.cuCtxSetCurrent(0) })
	if err := s.loadModule(); err != nil {
		return s, err
	}
	for _, name := range kernelNames {
		var fn uintptr
		cname := cString(name)
		if err := d.check("cuModuleGetFunction", d.api.cuModuleGetFunction(&fn, s.mod, &cname[0])); err != nil {
			return s, fmt.Errorf("kernel %s: %w", name, err)
		}
		s.fns[name] = fn
	}
	for _, ev := range []*uintptr{&s.start, &s.stop} {
		if err := d.check("cuEventCreate", d.api.cuEventCreate(ev, 0)); err != nil {
			return s, err
		}
		h := *ev
		s.undo = append(s.undo, func() { d.api.cuEventDestroy(h) })
	}
	return s, nil
}

// loadModule JIT-compiles the embedded PTX, asking for the JIT's error log
// so that a kernel the driver rejects says why.
func (s *session) loadModule() error {
	image := cString(kernelsPTX)
	logBuf := make([]byte, 8192)
	var pin runtime.Pinner
	pin.Pin(&logBuf[0])
	defer pin.Unpin()
	opts := []int32{jitErrorLogBuffer, jitErrorLogBufferSize}
	// Option values are void*: a pointer for the buffer, the size itself
	// for the size, which the driver overwrites with the log's length.
	vals := []uintptr{uintptr(unsafe.Pointer(&logBuf[0])), uintptr(len(logBuf))}
	rc := s.d.api.cuModuleLoadDataEx(&s.mod, &image[0], uint32(len(opts)), &opts[0], &vals[0])
	runtime.KeepAlive(image)
	if err := s.d.check("cuModuleLoadDataEx", rc); err != nil {
		var ce *Error
		if errors.As(err, &ce) {
			n := min(int(vals[1]), len(logBuf))
			if j := bytes.IndexByte(logBuf[:n], 0); j >= 0 {
				n = j
			}
			ce.Detail = string(bytes.TrimSpace(logBuf[:n]))
		}
		return fmt.Errorf("load kernels: %w", err)
	}
	mod := s.mod
	s.undo = append(s.undo, func() { s.d.api.cuModuleUnload(mod) })
	return nil
}

// close releases everything the session holds, newest first. Release
// errors are dropped: after a sticky GPU error every call fails, and the
// error that matters was already returned.
func (s *session) close() {
	for _, f := range slices.Backward(s.undo) {
		f()
	}
	s.undo = nil
}

// alloc allocates device memory that close frees; an allocation that does
// not fit says how much was free.
func (s *session) alloc(bytes uint64) (uint64, error) {
	var p uint64
	if err := s.d.check("cuMemAlloc_v2", s.d.api.cuMemAlloc(&p, bytes)); err != nil {
		var free, total uint64
		if s.d.api.cuMemGetInfo(&free, &total) == int32(Success) {
			return 0, fmt.Errorf("allocate %d MiB on the GPU (%d MiB free of %d MiB): %w",
				bytes>>20, free>>20, total>>20, err)
		}
		return 0, fmt.Errorf("allocate %d MiB on the GPU: %w", bytes>>20, err)
	}
	s.undo = append(s.undo, func() { s.d.api.cuMemFree(p) })
	return p, nil
}

// allocHost allocates page-locked host memory, which close frees: copies
// from pageable memory go through a staging buffer and would measure the
// CPU's memcpy rather than the PCIe link.
func (s *session) allocHost(bytes uint64) ([]byte, error) {
	var p unsafe.Pointer
	if err := s.d.check("cuMemAllocHost_v2", s.d.api.cuMemAllocHost(&p, bytes)); err != nil {
		return nil, fmt.Errorf("allocate %d MiB of pinned host memory: %w", bytes>>20, err)
	}
	s.undo = append(s.undo, func() { s.d.api.cuMemFreeHost(p) })
	return unsafe.Slice((*byte)(p), bytes), nil
}

func (s *session) memsetD32(dst uint64, v uint32, n uint64) error {
	return s.d.check("cuMemsetD32_v2", s.d.api.cuMemsetD32(dst, v, n))
}

func (s *session) htod(dst uint64, src []byte) error {
	return s.d.check("cuMemcpyHtoD_v2", s.d.api.cuMemcpyHtoD(dst, unsafe.Pointer(unsafe.SliceData(src)), uint64(len(src))))
}

func (s *session) dtoh(dst []byte, src uint64) error {
	return s.d.check("cuMemcpyDtoH_v2", s.d.api.cuMemcpyDtoH(unsafe.Pointer(unsafe.SliceData(dst)), src, uint64(len(dst))))
}

func (s *session) sync() error {
	return s.d.check("cuCtxSynchronize", s.d.api.cuCtxSynchronize())
}

// launch runs kernel name over n elements with the shared geometry. Each
// argument is a uint64 or a uint32; cuLaunchKernel takes an array of
// pointers to the values and copies them before it returns.
func (s *session) launch(name string, n uint64, args ...any) error {
	blocks := gridBlocks(n, s.sms)
	if blocks == 0 {
		return nil
	}
	fn, ok := s.fns[name]
	if !ok {
		return fmt.Errorf("launch %s: no such kernel", name)
	}
	// One 8-byte slot per argument: a u32 parameter reads the slot's first
	// four bytes, which is where the uint32 store puts it.
	slots := make([]uint64, len(args))
	params := make([]unsafe.Pointer, len(args))
	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(&slots[0])
	for i, a := range args {
		switch v := a.(type) {
		case uint64:
			slots[i] = v
		case uint32:
			*(*uint32)(unsafe.Pointer(&slots[i])) = v
		default:
			panic(fmt.Sprintf("cuda: kernel %s argument %d is a %T, not a uint64 or uint32", name, i, a))
		}
		params[i] = unsafe.Pointer(&slots[i])
	}
	pin.Pin(&params[0])
	rc := s.d.api.cuLaunchKernel(fn, blocks, 1, 1, threadsPerBlock, 1, 1, 0, 0, unsafe.Pointer(&params[0]), nil)
	runtime.KeepAlive(slots)
	runtime.KeepAlive(params)
	if err := s.d.check("cuLaunchKernel", rc); err != nil {
		return fmt.Errorf("launch %s: %w", name, err)
	}
	return nil
}

// timed runs op between two events on the default stream and returns the
// GPU's own measure of it in seconds, free of launch and wake-up latency.
func (s *session) timed(op func() error) (float64, error) {
	if err := s.d.check("cuEventRecord", s.d.api.cuEventRecord(s.start, 0)); err != nil {
		return 0, err
	}
	if err := op(); err != nil {
		return 0, err
	}
	if err := s.d.check("cuEventRecord", s.d.api.cuEventRecord(s.stop, 0)); err != nil {
		return 0, err
	}
	if err := s.d.check("cuEventSynchronize", s.d.api.cuEventSynchronize(s.stop)); err != nil {
		return 0, err
	}
	var ms float32
	if err := s.d.check("cuEventElapsedTime", s.d.api.cuEventElapsedTime(&ms, s.start, s.stop)); err != nil {
		return 0, err
	}
	return float64(ms) / 1e3, nil
}
