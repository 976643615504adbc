// Package gpusim simulates the GPUs of a host behind the same interfaces as
// the real drivers (gpuwarden.GPUs, Prober and Burner): a model, a count,
// a load, and faults planted on purpose. Every CI test that needs a GPU uses
// it, and so does `--simulate SPEC` on the command line, for demos.
package gpusim

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/catalog"
)

// The driver the simulation reports: the one the anchors were measured on.
const (
	DriverVersion = "580.159.04"
	CUDAVersion   = "13.0"
)

// Fault kinds a spec can plant.
const (
	// FaultXID makes Health report an Xid (79 unless given: "fallen off the bus").
	FaultXID = "xid"
	// FaultECC makes Health report an uncorrected ECC error.
	FaultECC = "ecc"
	// FaultRemap makes Health report a pending row remap.
	FaultRemap = "remap"
	// FaultVerify makes the probe find wrong words after the fill.
	FaultVerify = "verify"
	// FaultHang makes the probe (the CUDA work) block until it is killed.
	FaultHang = "hang"
	// FaultNVMLHang makes every NVML-like call block until its deadline, as
	// a driver stuck in a call does. With a duration ("nvml-hang:5s", or
	// plain seconds) the hang lasts that long from the simulation's start
	// (the agent's) and then clears, which is what recovery tests need;
	// without one it never clears.
	FaultNVMLHang = "nvml-hang"
	// FaultNoKmsg makes the kernel log unreadable, as without CAP_SYSLOG or
	// in a container: Health reports the kmsg Xid source as not live.
	FaultNoKmsg = "no-kmsg"
	// FaultNoXIDEvents makes NVML's Xid event set unavailable; with
	// no-kmsg too, no Xid source is live.
	FaultNoXIDEvents = "no-nvml-events"
	// FaultNoDriver makes every call fail as on a host without the driver.
	FaultNoDriver = "nodriver"
	// FaultBadMem makes the burn-in memory test find errors (3 unless given).
	FaultBadMem = "badmem"
	// FaultThrottle makes a loaded GPU run hot and thermally throttled, and
	// slows the burn-in's FP32 soak.
	FaultThrottle = "throttle"
	// FaultSlowBW makes the burn-in's device copy slow enough to warn about.
	FaultSlowBW = "slowbw"
)

var faultKinds = []string{FaultXID, FaultECC, FaultRemap, FaultVerify, FaultHang, FaultNVMLHang, FaultNoDriver,
	FaultBadMem, FaultThrottle, FaultSlowBW, FaultNoKmsg, FaultNoXIDEvents}

// maxMIG is the most MIG instances one GPU can have (seven 1g slices).
const maxMIG = 7

// Fault is one planted failure, on one GPU or (GPU −1) on all of them.
type Fault struct {
	Kind  string
	GPU   int
	Value uint64
	// For is how long a clearable fault (nvml-hang:5s) lasts; zero is forever.
	For time.Duration
}

// Spec describes a simulated host: "2xH100", "8xH200,load=80",
// "1xH100,fault=xid", "2xA100-80GB,fault=ecc@1", "1xH100,fault=xid:48",
// "nodriver", "1xH100,load=80,mig=2".
type Spec struct {
	Count       int
	Model       string
	LoadPercent float64
	// MIG, when above zero, puts every GPU in MIG mode with that many equal
	// instances: the device's utilization reads as unknown (NVML does not
	// report it under MIG), its process list as unknown (aggregate only
	// with privileges), and each instance has its own memory and processes.
	MIG    int
	Faults []Fault
	// Text is the spec as written, for the child process that runs probes.
	Text string
}

// ParseSpec reads a spec; errors are invalid-input errors with a hint.
func ParseSpec(s string) (Spec, error) {
	spec := Spec{Count: 1, Model: "H100-SXM", Text: s}
	parts := strings.Split(strings.TrimSpace(s), ",")
	bad := func(format string, args ...any) error {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "--simulate %q: %s", s, fmt.Sprintf(format, args...)).
			WithHint("write COUNTxMODEL[,load=PERCENT][,mig=INSTANCES][,fault=KIND[:VALUE][@GPU]]… e.g. 2xH100,fault=xid@1 or 1xH100,mig=2,fault=nvml-hang:5s; faults: %s",
				strings.Join(faultKinds, ", "))
	}
	for i, p := range parts {
		p = strings.TrimSpace(p)
		key, val, hasEq := strings.Cut(p, "=")
		switch {
		case i == 0 && p == FaultNoDriver:
			spec.Faults = append(spec.Faults, Fault{Kind: FaultNoDriver, GPU: -1})
		case i == 0 && !hasEq:
			n, model, ok := strings.Cut(strings.ToLower(p), "x")
			count, err := strconv.Atoi(n)
			if !ok || err != nil || count < 1 || count > 64 || model == "" {
				return Spec{}, bad("%q is not COUNTxMODEL with 1 to 64 GPUs", p)
			}
			spec.Count = count
			spec.Model = catalog.CanonicalGPU(p[len(n)+1:], 0)
			if _, ok := specFor(spec.Model); !ok {
				return Spec{}, bad("unknown GPU model %q", p[len(n)+1:])
			}
		case key == "load":
			f, err := strconv.ParseFloat(val, 64)
			if err != nil || f < 0 || f > 100 {
				return Spec{}, bad("load=%s is not a percentage from 0 to 100", val)
			}
			spec.LoadPercent = f
		case key == "mig":
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 || n > maxMIG {
				return Spec{}, bad("mig=%s is not a number of MIG instances from 1 to %d", val, maxMIG)
			}
			spec.MIG = n
		case key == "fault":
			f, err := parseFault(val)
			if err != nil {
				return Spec{}, bad("%v", err)
			}
			spec.Faults = append(spec.Faults, f)
		default:
			return Spec{}, bad("unknown part %q", p)
		}
	}
	for _, f := range spec.Faults {
		if f.GPU >= spec.Count {
			return Spec{}, bad("fault on GPU %d, but there are only %d", f.GPU, spec.Count)
		}
	}
	return spec, nil
}

func parseFault(s string) (Fault, error) {
	f := Fault{GPU: -1}
	kind, at, hasAt := strings.Cut(s, "@")
	if hasAt {
		n, err := strconv.Atoi(at)
		if err != nil || n < 0 {
			return f, fmt.Errorf("@%s is not a GPU index", at)
		}
		f.GPU = n
	}
	kind, val, hasVal := strings.Cut(kind, ":")
	f.Kind = kind
	known := false
	for _, k := range faultKinds {
		known = known || k == kind
	}
	if !known {
		return f, fmt.Errorf("unknown fault %q", kind)
	}
	if hasVal && kind == FaultNVMLHang {
		d, err := time.ParseDuration(val)
		if n, nerr := strconv.ParseUint(val, 10, 32); nerr == nil {
			d, err = time.Duration(n)*time.Second, nil
		}
		if err != nil || d <= 0 {
			return f, fmt.Errorf("nvml-hang:%s is not a positive duration such as 5s", val)
		}
		f.For = d
		return f, nil
	}
	if hasVal {
		v, err := strconv.ParseUint(val, 10, 64)
		if err != nil {
			return f, fmt.Errorf("fault value %q is not a number", val)
		}
		f.Value = v
	} else if kind == FaultXID {
		f.Value = 79
	} else if kind == FaultBadMem {
		f.Value = 3
	}
	return f, nil
}

// has returns the fault of a kind that applies to GPU i (−1: any GPU).
func (s Spec) has(kind string, i int) (Fault, bool) {
	for _, f := range s.Faults {
		if f.Kind == kind && (f.GPU < 0 || i < 0 || f.GPU == i) {
			return f, true
		}
	}
	return Fault{}, false
}

// modelInfo is what the simulation needs beyond the datasheet table.
type modelInfo struct {
	name    string
	cc      string
	pcieGen int
}

var models = map[string]modelInfo{
	"H200": {"NVIDIA H200", "9.0", 5}, "H100-SXM": {"NVIDIA H100 80GB HBM3", "9.0", 5},
	"H100-NVL": {"NVIDIA H100 NVL", "9.0", 5}, "H100-PCIe": {"NVIDIA H100 PCIe", "9.0", 5},
	"A100-80GB": {"NVIDIA A100-SXM4-80GB", "8.0", 4}, "A100-40GB": {"NVIDIA A100-SXM4-40GB", "8.0", 4},
	"L40S": {"NVIDIA L40S", "8.9", 4}, "L4": {"NVIDIA L4", "8.9", 4}, "A10G": {"NVIDIA A10G", "8.6", 4},
	"T4": {"Tesla T4", "7.5", 3}, "RTX-4090": {"NVIDIA GeForce RTX 4090", "8.9", 4},
	"V100-32GB": {"Tesla V100-SXM2-32GB", "7.0", 3},
}

func specFor(model string) (gpuwarden.GPUSpec, bool) {
	if _, ok := models[model]; !ok {
		return gpuwarden.GPUSpec{}, false
	}
	return catalog.EmbeddedGPU(model)
}

// Sim is a simulated host; it implements gpuwarden.GPUs, gpuwarden.Prober
// and gpuwarden.Burner.
type Sim struct {
	spec  Spec
	gpu   gpuwarden.GPUSpec
	info  modelInfo
	boot  time.Time
	Now   func() time.Time
	Sleep func(context.Context, time.Duration) error

	// mu guards the load a running Burn puts on each GPU, which Sample
	// reports: busy counts the burns in flight, hotUntil is when a card
	// that just finished one has cooled down.
	mu       sync.Mutex
	busy     map[int]int
	hotUntil map[int]time.Time

	// created is when the simulation started, in real time: a clearable
	// hang lasts from here, whatever clock Now is.
	created time.Time
}

// New builds the simulated host of a parsed spec.
func New(spec Spec) *Sim {
	g, _ := specFor(spec.Model)
	return &Sim{spec: spec, gpu: g, info: models[spec.Model], Now: time.Now, boot: time.Now().Add(-time.Hour), created: time.Now(),
		Sleep: func(ctx context.Context, d time.Duration) error {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				return nil
			}
		}}
}

// Spec returns the spec the host was built from.
func (s *Sim) Spec() Spec { return s.spec }

// call is the common gate of every NVML-like method: no driver fails at
// once, a planted hang blocks until the deadline.
func (s *Sim) call(ctx context.Context, what string) error {
	if _, ok := s.spec.has(FaultNoDriver, -1); ok {
		return gpuwarden.Errorf(gpuwarden.EEnvironment, "no NVIDIA driver: libnvidia-ml.so.1 not found (simulated)").
			WithHint("install the NVIDIA driver, or pass --cpu-ok on a host without GPUs")
	}
	if f, ok := s.spec.has(FaultNVMLHang, -1); ok && (f.For == 0 || time.Since(s.created) < f.For) {
		<-ctx.Done()
		return &gpuwarden.Error{Code: gpuwarden.EEnvironment, Message: "nvml call timed out: " + what + " (simulated hang)",
			Err: fmt.Errorf("%w: %w", gpuwarden.ErrNoAnswer, ctx.Err())}
	}
	return ctx.Err()
}

func (s *Sim) index(i int) error {
	if i < 0 || i >= s.spec.Count {
		return gpuwarden.Errorf(gpuwarden.ENotFound, "no GPU %d: this host has %d", i, s.spec.Count)
	}
	return nil
}

// Driver reports the simulated driver.
func (s *Sim) Driver(ctx context.Context) (gpuwarden.Driver, error) {
	if err := s.call(ctx, "nvmlSystemGetDriverVersion"); err != nil {
		return gpuwarden.Driver{}, err
	}
	return gpuwarden.Driver{Version: DriverVersion, CUDAVersion: CUDAVersion, NVMLVersion: "13." + DriverVersion}, nil
}

// List returns the simulated devices.
func (s *Sim) List(ctx context.Context) ([]gpuwarden.GPU, error) {
	if err := s.call(ctx, "nvmlDeviceGetHandleByIndex"); err != nil {
		return nil, err
	}
	out := make([]gpuwarden.GPU, s.spec.Count)
	for i := range out {
		out[i] = gpuwarden.GPU{Index: i, UUID: fmt.Sprintf("GPU-5151a000-0000-4000-8000-%012d", i), Name: s.info.name,
			Model: s.spec.Model, Serial: fmt.Sprintf("165%010d", i), BusID: fmt.Sprintf("00000000:%02X:00.0", 0x18+i*0x10),
			VRAMBytes: uint64(s.gpu.VRAMGB * (1 << 30)), ComputeCapability: s.info.cc, PCIeGen: s.info.pcieGen, PCIeWidth: 16,
			Persistence: true, ECC: s.spec.Model != "RTX-4090", PowerLimitWatts: s.gpu.TDPWatts}
		if s.spec.MIG > 0 {
			out[i].MIG, out[i].MIGInstances = true, s.migLayout(i)
		}
	}
	return out, nil
}

// migLayout splits a GPU into equal instances: seven compute slices and
// the memory shared out, named as nvidia-smi names profiles ("3g.40gb").
// Real profiles round memory to the card's slices; this is close enough
// for policies, which read memory used against the instance's own total.
func (s *Sim) migLayout(i int) []gpuwarden.MIGInstance {
	n := s.spec.MIG
	total := uint64(s.gpu.VRAMGB*(1<<30)) / uint64(n)
	profile := fmt.Sprintf("%dg.%.0fgb", maxMIG/n, s.gpu.VRAMGB/float64(n))
	out := make([]gpuwarden.MIGInstance, n)
	for m := range out {
		out[m] = gpuwarden.MIGInstance{Index: m, UUID: fmt.Sprintf("MIG-5151a000-%04d-4000-8000-%012d", i, m),
			GPUInstanceID: m + 1, ComputeInstanceID: 0, Profile: profile, MemTotalBytes: total}
	}
	return out
}

// Sample returns telemetry that follows the spec's load.
func (s *Sim) Sample(ctx context.Context, i int) (gpuwarden.Telemetry, error) {
	if err := s.call(ctx, "nvmlDeviceGetUtilizationRates"); err != nil {
		return gpuwarden.Telemetry{}, err
	}
	if err := s.index(i); err != nil {
		return gpuwarden.Telemetry{}, err
	}
	busy, hot := s.loaded(i)
	pct := s.spec.LoadPercent
	if busy {
		pct = 100
	}
	load := pct / 100
	total := uint64(s.gpu.VRAMGB * (1 << 30))
	t := gpuwarden.Telemetry{Index: i, Time: s.Now(), UtilPercent: pct, MemUtilPercent: pct * 0.6,
		MemUsedBytes: uint64(float64(total) * load * 0.9), MemTotalBytes: total,
		PowerWatts: 70 + load*(s.gpu.TDPWatts-70), TempC: 30 + load*45, SMClockMHz: 345 + int(load*1635), MemClockMHz: 2619}
	switch {
	case load == 0 && !hot:
		t.ThrottleReasons = []string{"gpu_idle"}
	case busy:
		t.Processes = []gpuwarden.GPUProcess{{PID: 4242 + i, Name: "gpuwarden-burn", UsedBytes: t.MemUsedBytes}}
	case load > 0:
		t.Processes = []gpuwarden.GPUProcess{{PID: 4242 + i, Name: "python", UsedBytes: t.MemUsedBytes}}
	}
	// A throttled card is one that runs hot under load: the clocks drop
	// and the driver says why.
	if hasFault(s.spec, FaultThrottle, i) && (load > 0 || hot) {
		t.TempC, t.SMClockMHz = 91, 1410
		t.ThrottleReasons = []string{"hw_thermal_slowdown"}
	}
	if s.spec.MIG > 0 {
		s.migSample(&t, i, load)
	}
	return t, nil
}

// migSample is what NVML gives for a GPU in MIG mode: no device
// utilization, no device process list for an unprivileged caller, and per
// instance its memory and processes. Instance utilization would come from
// GPM, which the simulation does not model, so it stays unknown.
func (s *Sim) migSample(t *gpuwarden.Telemetry, i int, load float64) {
	t.UtilPercent, t.MemUtilPercent, t.Processes = 0, 0, nil
	t.SetUnknown(gpuwarden.FieldUtil, gpuwarden.UnknownMIG)
	t.SetUnknown(gpuwarden.FieldMemUtil, gpuwarden.UnknownMIG)
	t.SetUnknown(gpuwarden.FieldProcesses, gpuwarden.UnknownNoPermission)
	for m, inst := range s.migLayout(i) {
		ms := gpuwarden.MIGSample{MIGInstance: inst}
		ms.SetUnknown(gpuwarden.FieldUtil, gpuwarden.UnknownNotSupported)
		if load > 0 {
			ms.MemUsedBytes = uint64(float64(inst.MemTotalBytes) * load * 0.9)
			ms.Processes = []gpuwarden.GPUProcess{{PID: 5000 + 10*i + m, Name: "python", UsedBytes: ms.MemUsedBytes}}
		}
		t.MIG = append(t.MIG, ms)
	}
}

// Health reports the planted faults.
func (s *Sim) Health(ctx context.Context, i int) (gpuwarden.Health, error) {
	if err := s.call(ctx, "nvmlDeviceGetTotalEccErrors"); err != nil {
		return gpuwarden.Health{}, err
	}
	if err := s.index(i); err != nil {
		return gpuwarden.Health{}, err
	}
	h := gpuwarden.Health{Index: i}
	if _, ok := s.spec.has(FaultECC, i); ok {
		h.ECCVolatileUncorrected, h.ECCAggregateUncorrected = 1, 1
	}
	if _, ok := s.spec.has(FaultRemap, i); ok {
		h.RemapPending = true
	}
	if f, ok := s.spec.has(FaultXID, i); ok {
		h.XIDs = []gpuwarden.XIDEvent{{Index: i, XID: f.Value, Time: s.boot.Add(30 * time.Minute)}}
	}
	if s.spec.MIG > 0 {
		// nvml.h: row remapping is NOT_SUPPORTED on a GPU in MIG mode.
		h.RemapPending = false
		h.Unknown = map[string]string{"remap_pending": gpuwarden.UnknownMIG, "remap_failed": gpuwarden.UnknownMIG}
	}
	h.XIDSources = []gpuwarden.XIDSource{{Name: gpuwarden.XIDSourceKmsg, Live: true}, {Name: gpuwarden.XIDSourceNVMLEvents, Live: true}}
	if hasFault(s.spec, FaultNoKmsg, i) {
		h.XIDSources[0] = gpuwarden.XIDSource{Name: gpuwarden.XIDSourceKmsg, Reason: "open /dev/kmsg: permission denied (simulated)"}
	}
	if hasFault(s.spec, FaultNoXIDEvents, i) {
		h.XIDSources[1] = gpuwarden.XIDSource{Name: gpuwarden.XIDSourceNVMLEvents, Reason: "nvmlDeviceRegisterEvents: not supported (simulated)"}
	}
	h.Counters = s.counters(h)
	return h, nil
}

// counters are what NVML would report for the simulated card: ECC and row
// remapping only on the cards that have them (not the RTX 4090), so that
// the unreported-stays-absent path of /metrics runs in simulation too.
func (s *Sim) counters(h gpuwarden.Health) gpuwarden.ErrorCounters {
	n := func(v uint64) *uint64 { return &v }
	c := gpuwarden.ErrorCounters{PCIeReplays: n(0)}
	if s.spec.Model == "RTX-4090" {
		return c
	}
	c.ECCCorrectedVolatile, c.ECCCorrectedAggregate = n(0), n(0)
	c.ECCUncorrectedVolatile, c.ECCUncorrectedAggregate = n(h.ECCVolatileUncorrected), n(h.ECCAggregateUncorrected)
	if s.spec.MIG > 0 {
		return c // no row remapping counts under MIG, as the remap flags
	}
	var remapped uint64
	if h.RemapPending {
		remapped = 1
	}
	c.RemappedRowsCorrectable, c.RemappedRowsUncorrectable = n(0), n(remapped)
	return c
}

// Close releases nothing; the simulation holds no resources.
func (s *Sim) Close() error { return nil }

// Probe simulates the live checks: a short pause per step, bandwidths at a
// realistic share of the datasheet, and the planted verify and hang faults.
// Verifying with a seed other than the fill's counts every word, as the
// real kernel does.
func (s *Sim) Probe(ctx context.Context, req gpuwarden.ProbeRequest) (gpuwarden.ProbeResult, error) {
	if err := s.call(ctx, "cuInit"); err != nil {
		return gpuwarden.ProbeResult{}, err
	}
	if err := s.index(req.Index); err != nil {
		return gpuwarden.ProbeResult{}, err
	}
	if _, ok := s.spec.has(FaultHang, req.Index); ok {
		<-ctx.Done()
		return gpuwarden.ProbeResult{}, fmt.Errorf("cuLaunchKernel: %w (simulated hang)", ctx.Err())
	}
	total := uint64(s.gpu.VRAMGB * (1 << 30))
	if req.AllocBytes > total {
		return gpuwarden.ProbeResult{}, fmt.Errorf("cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (simulated: %d bytes asked, %d on the card)", req.AllocBytes, total)
	}
	// The steps take a few milliseconds of real time, and report what they took.
	step := func(d time.Duration) (float64, error) {
		start := time.Now()
		err := s.Sleep(ctx, d)
		return time.Since(start).Seconds(), err
	}
	initS, err := step(2 * time.Millisecond)
	if err != nil {
		return gpuwarden.ProbeResult{}, err
	}
	kernelS, err := step(3 * time.Millisecond)
	if err != nil {
		return gpuwarden.ProbeResult{}, err
	}
	words := req.AllocBytes / 4
	r := gpuwarden.ProbeResult{Index: req.Index, InitSeconds: initS, KernelSeconds: kernelS,
		VerifiedWords: words, CUDADriverVersion: CUDAVersion,
		HostToDeviceGBs: pcieGBs(s.info.pcieGen), DeviceToHostGBs: pcieGBs(s.info.pcieGen) * 0.95,
		DeviceCopyGBs: s.gpu.MemBWTBs * 1000 * 0.84}
	switch {
	case req.VerifySeed != 0 && req.VerifySeed != req.Seed:
		r.VerifyErrors = words
	case hasFault(s.spec, FaultVerify, req.Index):
		r.VerifyErrors, r.FirstBadOffset = 3, (words/2)*4
	}
	return r, nil
}

func hasFault(s Spec, kind string, i int) bool {
	_, ok := s.has(kind, i)
	return ok
}

// pcieGBs is a realistic pinned-copy rate for a ×16 link of a generation.
func pcieGBs(gen int) float64 {
	switch gen {
	case 5:
		return 53.5
	case 4:
		return 26.2
	}
	return 12.8
}
