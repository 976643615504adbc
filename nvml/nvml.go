// Package nvml reads NVIDIA GPUs through NVML and their Xid errors through
// the kernel log.
//
// NVML comes from NVIDIA/go-nvml, which dlopens libnvidia-ml.so.1 at run
// time: binaries build without the driver and New reports a missing driver as
// an environment error instead of failing to start.
//
// Every method bounds its NVML calls by the context: the calls run in a
// goroutine and the method returns when the deadline passes. A call that is
// stuck in the driver cannot be interrupted, so it is abandoned: its
// goroutine (and the OS thread cgo pins to it) stays behind until the driver
// answers, and until then every later call fails at once with an environment
// error instead of piling up more stuck threads. A process that must not hang
// should treat that error as fatal and exit.
package nvml

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/catalog"
)

// checkedSymbols are the NVML functions newer than the drivers we still meet
// in the wild. go-nvml calls them directly, so on an older libnvidia-ml a
// call would jump to an unresolved symbol; New looks each one up once and a
// missing one reads as ERROR_NOT_SUPPORTED. Functions as old as NVML itself
// (names, memory, power, clocks) are not listed.
var checkedSymbols = []string{
	"nvmlSystemGetCudaDriverVersion",         // R410
	"nvmlDeviceGetMigMode",                   // R450, Ampere
	"nvmlDeviceGetRemappedRows",              // R460, Ampere
	"nvmlDeviceGetCurrentClocksEventReasons", // R535, replaces ...ThrottleReasons
	"nvmlDeviceGetMaxMigDeviceCount",         // R450, Ampere
	"nvmlDeviceGetMigDeviceHandleByIndex",    // R450
	"nvmlDeviceGetGpuInstanceId",             // R450
	"nvmlDeviceGetComputeInstanceId",         // R450
	"nvmlGpmQueryDeviceSupport",              // R520, Hopper
	"nvmlGpmSampleAlloc",                     // R520
	"nvmlGpmMigSampleGet",                    // R520
	"nvmlGpmMetricsGet",                      // R520
}

// GPUs reads the NVIDIA GPUs of this host through NVML.
type GPUs struct {
	lib gonvml.Interface
	log *slog.Logger
	// present says, for each of checkedSymbols, whether the loaded library
	// exports it. Written once in newGPUs, read-only afterwards.
	present map[string]bool

	// Seams for tests; New sets the real values.
	kmsgPath     string                    // kernel log, read without blocking
	procRoot     string                    // where /proc/PID/comm names processes
	now          func() time.Time          // stamps telemetry
	bootTime     func() (time.Time, error) // turns kmsg timestamps into wall time
	closeTimeout time.Duration             // how long Close waits for nvmlShutdown

	mu      sync.Mutex
	handles map[int]gonvml.Device // device handles stay valid until Shutdown
	stuck   map[*call]struct{}    // abandoned calls still inside the driver
	// gpm keeps each MIG GPU instance's last GPM sample, the start of the
	// next utilization interval; gpmSupport whether a GPU has GPM.
	gpm        map[gpmKey]gonvml.GpmSample
	gpmSupport map[int]bool

	kmsg      kernelLog     // Xids followed across Health calls
	events    eventWatch    // Xids from NVML's event set
	eventWait time.Duration // how long one nvmlEventSetWait blocks
	closeOnce sync.Once
	closeErr  error
	closed    atomic.Bool
}

var _ gpuwarden.GPUs = (*GPUs)(nil)

// New loads NVML and returns the host's GPUs, or an environment error when
// there is no usable NVIDIA driver; log may be nil.
func New(log *slog.Logger) (*GPUs, error) {
	return newGPUs(gonvml.New(), log)
}

// newGPUs is New on any NVML implementation, so that tests can hand in
// go-nvml's generated mocks.
func newGPUs(lib gonvml.Interface, log *slog.Logger) (*GPUs, error) {
	// The caller names the component (cmd does log.With("component", "nvml")).
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if ret := lib.Init(); ret != gonvml.SUCCESS {
		return nil, initError(ret)
	}
	g := &GPUs{
		lib:          lib,
		log:          log,
		present:      make(map[string]bool, len(checkedSymbols)),
		kmsgPath:     "/dev/kmsg",
		procRoot:     "/proc",
		now:          time.Now,
		bootTime:     sync.OnceValues(procBootTime),
		closeTimeout: 5 * time.Second,
		handles:      make(map[int]gonvml.Device),
		stuck:        make(map[*call]struct{}),
		gpm:          make(map[gpmKey]gonvml.GpmSample),
		gpmSupport:   make(map[int]bool),
		eventWait:    500 * time.Millisecond,
	}
	ext := lib.Extensions()
	for _, sym := range checkedSymbols {
		err := ext.LookupSymbol(sym)
		g.present[sym] = err == nil
		if err != nil {
			log.Debug("nvml symbol missing, treated as not supported", "symbol", sym)
		}
	}
	return g, nil
}

// initError explains a failed nvmlInit in terms of what the user must fix.
func initError(ret gonvml.Return) error {
	e := &gpuwarden.Error{Code: gpuwarden.EEnvironment, Err: fmt.Errorf("nvmlInit: %w", ret)}
	switch ret {
	case gonvml.ERROR_LIBRARY_NOT_FOUND:
		e.Message = "no NVIDIA driver: libnvidia-ml.so.1 not found"
		e.Hint = "install the NVIDIA driver (nvidia-smi must work); in a container, run it with the NVIDIA container toolkit (--gpus all)"
	case gonvml.ERROR_DRIVER_NOT_LOADED:
		e.Message = "no NVIDIA driver: the kernel module is not loaded"
		e.Hint = "load it (modprobe nvidia) or reboot after installing the driver; check dmesg for NVRM errors"
	case gonvml.ERROR_LIB_RM_VERSION_MISMATCH:
		e.Message = "no NVIDIA driver: libnvidia-ml and the kernel module are different versions"
		e.Hint = "reboot (or reload the nvidia module) after a driver upgrade"
	case gonvml.ERROR_NO_PERMISSION:
		e.Message = "no NVIDIA driver: no permission to open the GPU devices"
		e.Hint = "run as a user that can open /dev/nvidia*"
	default:
		e.Message = "no NVIDIA driver" // the cause, nvmlInit's own words, follows
		e.Hint = "check that nvidia-smi works on this host"
	}
	return e
}

// Driver returns the kernel driver, CUDA and NVML versions.
func (g *GPUs) Driver(ctx context.Context) (gpuwarden.Driver, error) {
	return run(ctx, g, "driver", -1, func(c *call) (gpuwarden.Driver, error) {
		var d gpuwarden.Driver
		d.Version, _ = get(c, "nvmlSystemGetDriverVersion", g.lib.SystemGetDriverVersion)
		if v, ok := get(c, "nvmlSystemGetCudaDriverVersion", g.lib.SystemGetCudaDriverVersion); ok {
			d.CUDAVersion = cudaVersion(v)
		}
		d.NVMLVersion, _ = get(c, "nvmlSystemGetNVMLVersion", g.lib.SystemGetNVMLVersion)
		return d, c.err
	})
}

// cudaVersion turns NVML's 1000*major + 10*minor (13000) into "13.0".
func cudaVersion(v int) string {
	if v <= 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}

// List returns the inventory of every GPU NVML sees, in NVML index order.
func (g *GPUs) List(ctx context.Context) ([]gpuwarden.GPU, error) {
	return run(ctx, g, "list", -1, func(c *call) ([]gpuwarden.GPU, error) {
		n, _ := get(c, "nvmlDeviceGetCount", g.lib.DeviceGetCount)
		if c.err != nil {
			return nil, c.err
		}
		gpus := make([]gpuwarden.GPU, 0, n)
		for i := range n {
			c.index = i
			dev, err := g.device(c, i)
			if err != nil {
				return nil, err
			}
			gpu := inventory(c, i, dev)
			if c.err != nil {
				return nil, c.err
			}
			gpus = append(gpus, gpu)
		}
		return gpus, nil
	})
}

// inventory reads what one device is and how it is set up.
func inventory(c *call, index int, dev gonvml.Device) gpuwarden.GPU {
	gpu := gpuwarden.GPU{Index: index}
	gpu.UUID, _ = get(c, "nvmlDeviceGetUUID", dev.GetUUID)
	gpu.Name, _ = get(c, "nvmlDeviceGetName", dev.GetName)
	gpu.Serial, _ = get(c, "nvmlDeviceGetSerial", dev.GetSerial)
	if pci, ok := get(c, "nvmlDeviceGetPciInfo", dev.GetPciInfo); ok {
		gpu.BusID = busID(pci)
	}
	if mem, ok := get(c, "nvmlDeviceGetMemoryInfo", dev.GetMemoryInfo); ok {
		gpu.VRAMBytes = mem.Total
	}
	if cc, ok := get(c, "nvmlDeviceGetCudaComputeCapability", func() ([2]int, gonvml.Return) {
		major, minor, ret := dev.GetCudaComputeCapability()
		return [2]int{major, minor}, ret
	}); ok {
		gpu.ComputeCapability = fmt.Sprintf("%d.%d", cc[0], cc[1])
	}
	gpu.PCIeGen, _ = get(c, "nvmlDeviceGetMaxPcieLinkGeneration", dev.GetMaxPcieLinkGeneration)
	gpu.PCIeWidth, _ = get(c, "nvmlDeviceGetMaxPcieLinkWidth", dev.GetMaxPcieLinkWidth)
	gpu.MIG, _ = migMode(c, dev)
	if gpu.MIG {
		for _, m := range migDevices(c, dev) {
			gpu.MIGInstances = append(gpu.MIGInstances, m.inst)
		}
	}
	if mode, ok := get(c, "nvmlDeviceGetPersistenceMode", dev.GetPersistenceMode); ok {
		gpu.Persistence = mode == gonvml.FEATURE_ENABLED
	}
	if mode, ok := get(c, "nvmlDeviceGetEccMode", func() (gonvml.EnableState, gonvml.Return) {
		current, _, ret := dev.GetEccMode()
		return current, ret
	}); ok {
		gpu.ECC = mode == gonvml.FEATURE_ENABLED
	}
	if mw, ok := get(c, "nvmlDeviceGetPowerManagementLimit", dev.GetPowerManagementLimit); ok {
		gpu.PowerLimitWatts = float64(mw) / 1000
	}
	// GiB, not GB: cards are sold by the binary size the driver reports
	// (an H200 reports 140.4 GiB and is sold as 141 GB; as 10^9 bytes it
	// would be 150.8 and look like another model).
	gpu.Model = catalog.CanonicalGPU(gpu.Name, float64(gpu.VRAMBytes)/(1<<30))
	return gpu
}

// busID turns NVML's NUL-terminated C string into "00000000:3B:00.0".
func busID(pci gonvml.PciInfo) string {
	b := make([]byte, 0, len(pci.BusId))
	for _, c := range pci.BusId {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

// throttleReasons names the bits of nvmlClocksEventReasons, in bit order.
// NVML renamed the reasons "event" reasons in R535 but kept the throttle
// names for the hardware slowdowns, hence the mix.
var throttleReasons = []struct {
	bit  uint64
	name string
}{
	{gonvml.ClocksEventReasonGpuIdle, "gpu_idle"},
	{gonvml.ClocksEventReasonApplicationsClocksSetting, "applications_clocks_setting"},
	{gonvml.ClocksEventReasonSwPowerCap, "sw_power_cap"},
	{gonvml.ClocksThrottleReasonHwSlowdown, "hw_slowdown"},
	{gonvml.ClocksEventReasonSyncBoost, "sync_boost"},
	{gonvml.ClocksEventReasonSwThermalSlowdown, "sw_thermal_slowdown"},
	{gonvml.ClocksThrottleReasonHwThermalSlowdown, "hw_thermal_slowdown"},
	{gonvml.ClocksThrottleReasonHwPowerBrakeSlowdown, "hw_power_brake_slowdown"},
	{gonvml.ClocksEventReasonDisplayClockSetting, "display_clock_setting"},
}

// decodeThrottleReasons names the set bits; bits a newer driver adds come
// back as hex so that they are seen rather than dropped.
func decodeThrottleReasons(mask uint64) []string {
	var names []string
	for _, r := range throttleReasons {
		if mask&r.bit != 0 {
			names = append(names, r.name)
			mask &^= r.bit
		}
	}
	if mask != 0 {
		names = append(names, fmt.Sprintf("unknown_%#x", mask))
	}
	return names
}

// Sample reads one telemetry sample of the GPU at index.
func (g *GPUs) Sample(ctx context.Context, index int) (gpuwarden.Telemetry, error) {
	t, err := run(ctx, g, "sample", index, func(c *call) (gpuwarden.Telemetry, error) {
		t := gpuwarden.Telemetry{Index: index, Time: g.now()}
		dev, err := g.device(c, index)
		if err != nil {
			return t, err
		}
		// Every field the driver does not give is marked unknown with its
		// reason; under MIG, utilization is "not currently supported"
		// (nvml.h) and reads as unknown because of MIG, not as 0.
		mig, _ := migMode(c, dev)
		unknown := func(field string) {
			why := c.why
			if mig && why == gpuwarden.UnknownNotSupported {
				why = gpuwarden.UnknownMIG
			}
			t.SetUnknown(field, why)
		}
		if u, ok := get(c, "nvmlDeviceGetUtilizationRates", dev.GetUtilizationRates); ok {
			t.UtilPercent = float64(u.Gpu)
			t.MemUtilPercent = float64(u.Memory)
		} else {
			unknown(gpuwarden.FieldUtil)
			unknown(gpuwarden.FieldMemUtil)
		}
		if m, ok := get(c, "nvmlDeviceGetMemoryInfo", dev.GetMemoryInfo); ok {
			t.MemUsedBytes, t.MemTotalBytes = m.Used, m.Total
		} else {
			unknown(gpuwarden.FieldMemUsed)
			unknown(gpuwarden.FieldMemTotal)
		}
		if mw, ok := get(c, "nvmlDeviceGetPowerUsage", dev.GetPowerUsage); ok {
			t.PowerWatts = float64(mw) / 1000
		} else {
			unknown(gpuwarden.FieldPower)
		}
		if temp, ok := get(c, "nvmlDeviceGetTemperature", func() (uint32, gonvml.Return) {
			return dev.GetTemperature(gonvml.TEMPERATURE_GPU)
		}); ok {
			t.TempC = float64(temp)
		} else {
			unknown(gpuwarden.FieldTemp)
		}
		if mhz, ok := get(c, "nvmlDeviceGetClockInfo", func() (uint32, gonvml.Return) {
			return dev.GetClockInfo(gonvml.CLOCK_SM)
		}); ok {
			t.SMClockMHz = int(mhz)
		} else {
			unknown(gpuwarden.FieldSMClock)
		}
		if mhz, ok := get(c, "nvmlDeviceGetClockInfo", func() (uint32, gonvml.Return) {
			return dev.GetClockInfo(gonvml.CLOCK_MEM)
		}); ok {
			t.MemClockMHz = int(mhz)
		} else {
			unknown(gpuwarden.FieldMemClock)
		}
		// Event reasons are the R535 name of throttle reasons; the old call is
		// only for drivers that lack the new one.
		const events = "nvmlDeviceGetCurrentClocksEventReasons"
		mask, ok := get(c, events, dev.GetCurrentClocksEventReasons)
		if !g.has(events) {
			mask, ok = get(c, "nvmlDeviceGetCurrentClocksThrottleReasons", dev.GetCurrentClocksThrottleReasons)
		}
		if ok {
			t.ThrottleReasons = decodeThrottleReasons(mask)
		} else {
			unknown(gpuwarden.FieldThrottle)
		}
		// Under MIG the device's list is the aggregate, and only for a
		// privileged caller; the instances' own lists follow.
		if procs, ok := get(c, "nvmlDeviceGetComputeRunningProcesses", dev.GetComputeRunningProcesses); ok {
			t.Processes = processes(procs)
		} else {
			unknown(gpuwarden.FieldProcesses)
		}
		if mig {
			t.MIG = g.migSamples(c, index, dev)
		}
		return t, c.err
	})
	if err != nil {
		return gpuwarden.Telemetry{}, err
	}
	// /proc is read here, outside the bounded call, because it never waits
	// on the driver.
	for i := range t.Processes {
		t.Processes[i].Name = g.processName(t.Processes[i].PID)
	}
	for m := range t.MIG {
		for i := range t.MIG[m].Processes {
			t.MIG[m].Processes[i].Name = g.processName(t.MIG[m].Processes[i].PID)
		}
	}
	return t, nil
}

// processName reads /proc/PID/comm; a process that is gone or hidden (NVML
// sees host PIDs, a container may not) just stays unnamed.
func (g *GPUs) processName(pid int) string {
	b, err := os.ReadFile(filepath.Join(g.procRoot, strconv.Itoa(pid), "comm"))
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
}

// Health reads the error counters of the GPU at index and the Xid errors
// logged for it: those the kernel ring buffer held when this GPUs first read
// it, and every one since.
func (g *GPUs) Health(ctx context.Context, index int) (gpuwarden.Health, error) {
	type reading struct {
		health gpuwarden.Health
		bus    string
	}
	r, err := run(ctx, g, "health", index, func(c *call) (reading, error) {
		h := gpuwarden.Health{Index: index}
		dev, err := g.device(c, index)
		if err != nil {
			return reading{}, err
		}
		mig, _ := migMode(c, dev)
		unknown := func(fields ...string) {
			why := c.why
			if mig && why == gpuwarden.UnknownNotSupported {
				why = gpuwarden.UnknownMIG
			}
			if h.Unknown == nil {
				h.Unknown = map[string]string{}
			}
			for _, f := range fields {
				h.Unknown[f] = why
			}
		}
		readErrorCounts(c, dev, mig, &h, unknown)
		pci, _ := get(c, "nvmlDeviceGetPciInfo", dev.GetPciInfo)
		return reading{health: h, bus: busID(pci)}, c.err
	})
	if err != nil {
		return gpuwarden.Health{}, err
	}
	kmsgSource := gpuwarden.XIDSource{Name: gpuwarden.XIDSourceKmsg, Reason: "the GPU's bus id is unknown"}
	if r.bus != "" {
		r.health.XIDs, kmsgSource = g.xids(r.bus, index)
	}
	r.health.XIDSources = []gpuwarden.XIDSource{kmsgSource}
	if events, eventSource, watched := g.events.forGPU(index); watched {
		r.health.XIDs = mergeXIDs(r.health.XIDs, events)
		r.health.XIDSources = append(r.health.XIDSources, eventSource)
	}
	return r.health, nil
}

// Close shuts NVML down once; later calls return the first result.
// It must not run concurrently with other methods.
func (g *GPUs) Close() error {
	g.closeOnce.Do(func() {
		g.closed.Store(true)
		g.kmsg.close()
		g.stopEvents()
		// Shutting down under a call that is still inside the driver would
		// wait on the same stuck lock; the process is better off exiting.
		if name, _, stuck := g.stuckCall(); stuck {
			g.closeErr = fmt.Errorf("nvml: shutdown skipped: %s is still stuck in the driver", name)
			return
		}
		g.freeGPM()
		done := make(chan gonvml.Return, 1)
		go func() { done <- g.lib.Shutdown() }()
		select {
		case ret := <-done:
			if ret != gonvml.SUCCESS {
				g.closeErr = fmt.Errorf("nvml: nvmlShutdown: %w", ret)
			}
		case <-time.After(g.closeTimeout):
			g.closeErr = fmt.Errorf("nvml: nvmlShutdown did not return within %s", g.closeTimeout)
		}
	})
	return g.closeErr
}

// errClosed is what every method returns after Close.
var errClosed = errors.New("nvml: used after close")

// device returns the handle of the GPU at index, asking NVML only once.
func (g *GPUs) device(c *call, index int) (gonvml.Device, error) {
	if index < 0 {
		return nil, noSuchGPU(index)
	}
	g.mu.Lock()
	dev, ok := g.handles[index]
	g.mu.Unlock()
	if ok {
		return dev, nil
	}
	c.enter("nvmlDeviceGetHandleByIndex")
	dev, ret := g.lib.DeviceGetHandleByIndex(index)
	switch ret {
	case gonvml.SUCCESS:
	case gonvml.ERROR_INVALID_ARGUMENT, gonvml.ERROR_NOT_FOUND:
		return nil, noSuchGPU(index)
	default:
		return nil, c.fail("nvmlDeviceGetHandleByIndex", ret)
	}
	g.mu.Lock()
	g.handles[index] = dev
	g.mu.Unlock()
	return dev, nil
}

// noSuchGPU is the error for an index NVML does not know.
func noSuchGPU(index int) error {
	return gpuwarden.Errorf(gpuwarden.ENotFound, "no GPU with index %d", index).
		WithHint("indexes are NVML's, as nvidia-smi -L lists them, counted from 0")
}

// has reports whether the library exports fn; functions that are not in
// checkedSymbols are assumed present.
func (g *GPUs) has(fn string) bool {
	ok, checked := g.present[fn]
	return ok || !checked
}

// procBootTime reads the boot time from /proc/stat. btime is whole seconds
// but stable, so that one Xid gets the same time on every read and callers
// can deduplicate by it.
func procBootTime() (time.Time, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, fmt.Errorf("boot time: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			sec, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("boot time: %w", err)
			}
			return time.Unix(sec, 0), nil
		}
	}
	return time.Time{}, errors.New("boot time: no btime in /proc/stat")
}
