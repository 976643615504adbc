package gpuwarden

import (
	"context"
	"time"
)

// GPU is one device's inventory: what it is and how it is set up. Fields the
// driver cannot report stay zero.
type GPU struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	// Name is what the driver calls it ("NVIDIA H200"); Model is the
	// canonical name of the GPU table ("H200").
	Name      string `json:"name"`
	Model     string `json:"model"`
	Serial    string `json:"serial,omitempty"`
	BusID     string `json:"bus_id,omitempty"`
	VRAMBytes uint64 `json:"vram_bytes"`
	// ComputeCapability is major.minor, "9.0" on Hopper.
	ComputeCapability string `json:"compute_capability"`
	// PCIeGen and PCIeWidth are the link's maximum; the current ones drop at idle.
	PCIeGen         int     `json:"pcie_gen,omitempty"`
	PCIeWidth       int     `json:"pcie_width,omitempty"`
	MIG             bool    `json:"mig"`
	Persistence     bool    `json:"persistence"`
	ECC             bool    `json:"ecc"`
	PowerLimitWatts float64 `json:"power_limit_w,omitempty"`
	// Pods are the Kubernetes containers the kubelet allocated this GPU
	// to, when the agent reads the pod-resources API; empty elsewhere.
	Pods []PodRef `json:"pods,omitempty"`
}

// Telemetry is one sample of what a GPU is doing.
type Telemetry struct {
	Index       int       `json:"index"`
	Time        time.Time `json:"time"`
	UtilPercent float64   `json:"util_percent"`
	// MemUtilPercent is the share of time memory was read or written.
	MemUtilPercent  float64      `json:"mem_util_percent"`
	MemUsedBytes    uint64       `json:"mem_used_bytes"`
	MemTotalBytes   uint64       `json:"mem_total_bytes"`
	PowerWatts      float64      `json:"power_w"`
	TempC           float64      `json:"temp_c"`
	SMClockMHz      int          `json:"sm_clock_mhz"`
	MemClockMHz     int          `json:"mem_clock_mhz"`
	ThrottleReasons []string     `json:"throttle_reasons,omitempty"`
	Processes       []GPUProcess `json:"processes,omitempty"`
}

// GPUProcess is a process holding memory on a GPU.
type GPUProcess struct {
	PID       int    `json:"pid"`
	Name      string `json:"name,omitempty"`
	UsedBytes uint64 `json:"used_bytes"`
}

// Health is a GPU's error counters: what says a card is sick before a job
// finds out.
type Health struct {
	Index int `json:"index"`
	// ECC uncorrected errors since the driver loaded (volatile) and over the
	// card's life (aggregate).
	ECCVolatileUncorrected  uint64 `json:"ecc_volatile_uncorrected"`
	ECCAggregateUncorrected uint64 `json:"ecc_aggregate_uncorrected"`
	// Row remapping (A100 and later): pending needs a reset, failed needs an RMA.
	RemapPending bool `json:"remap_pending"`
	RemapFailed  bool `json:"remap_failed"`
	// RetiredPages is page retirement on older cards (before A100).
	RetiredPages int        `json:"retired_pages"`
	XIDs         []XIDEvent `json:"xids,omitempty"`

	// Counters are the cumulative error counts /metrics exports, each one
	// only when the driver answered for it.
	Counters ErrorCounters `json:"counters"`
}

// ErrorCounters are the error counts fleets alert on, in the set
// dcgm-exporter exports. A nil field is one the driver did not report (no
// ECC on consumer cards, no row remapping before Ampere, an old driver):
// exporting it as 0 would read as a clean card nobody checked.
type ErrorCounters struct {
	// ECC errors, single-bit (corrected) and double-bit (uncorrected), since
	// the driver loaded (volatile) and over the card's life (aggregate).
	ECCCorrectedVolatile    *uint64 `json:"ecc_corrected_volatile,omitempty"`
	ECCUncorrectedVolatile  *uint64 `json:"ecc_uncorrected_volatile,omitempty"`
	ECCCorrectedAggregate   *uint64 `json:"ecc_corrected_aggregate,omitempty"`
	ECCUncorrectedAggregate *uint64 `json:"ecc_uncorrected_aggregate,omitempty"`
	// RemappedRows* are the rows the card remapped after correctable and
	// uncorrectable errors (A100 and later); RemapPending and RemapFailed of
	// Health are only meaningful when these are set.
	RemappedRowsCorrectable   *uint64 `json:"remapped_rows_correctable,omitempty"`
	RemappedRowsUncorrectable *uint64 `json:"remapped_rows_uncorrectable,omitempty"`
	// RetiredPages counts pages retired for double-bit and repeated
	// single-bit errors (cards before A100).
	RetiredPages *uint64 `json:"retired_pages,omitempty"`
	// PCIeReplays counts PCIe packets the link had to resend: a rising count
	// is a bad riser, slot or cable before it is a crash.
	PCIeReplays *uint64 `json:"pcie_replays,omitempty"`
}

// XIDEvent is one Xid error the driver reported for a GPU.
type XIDEvent struct {
	Index int       `json:"index"`
	XID   uint64    `json:"xid"`
	Time  time.Time `json:"time"`
}

// Faulty reports whether the counters say the card must not be trusted:
// uncorrected ECC errors, a row remap, or an Xid that points at the hardware
// (an Xid that usually means an application bug does not count).
func (h Health) Faulty() bool {
	if h.ECCVolatileUncorrected > 0 || h.RemapFailed || h.RemapPending {
		return true
	}
	for _, x := range h.XIDs {
		if _, app := XIDMeaning(x.XID); !app {
			return true
		}
	}
	return false
}

// xidMeanings are the common Xids from NVIDIA's Xid catalogue, with whether
// they are usually the application's doing rather than the card's.
var xidMeanings = map[uint64]struct {
	text string
	app  bool
}{
	13:  {"graphics engine exception", true},
	31:  {"GPU memory page fault", true},
	43:  {"GPU stopped processing", true},
	45:  {"preemptive cleanup after earlier errors", true},
	48:  {"double-bit ECC error", false},
	61:  {"internal micro-controller breakpoint", false},
	62:  {"internal micro-controller halt", false},
	63:  {"ECC page retirement or row remap recorded", false},
	64:  {"ECC page retirement or row remap failed", false},
	74:  {"NVLink error", false},
	79:  {"GPU has fallen off the bus", false},
	92:  {"high single-bit ECC error rate", false},
	94:  {"contained ECC error", false},
	95:  {"uncontained ECC error", false},
	119: {"GSP RPC timeout", false},
	120: {"GSP error", false},
}

// XIDMeaning says what an Xid means and whether it is usually an application
// error; an unknown Xid is "unknown Xid" and counts as the hardware's.
func XIDMeaning(xid uint64) (meaning string, application bool) {
	if m, ok := xidMeanings[xid]; ok {
		return m.text, m.app
	}
	return "unknown Xid", false
}

// Driver is the host's NVIDIA driver.
type Driver struct {
	// Version is the kernel driver, "580.159.04".
	Version string `json:"version"`
	// CUDAVersion is the newest CUDA the driver supports, "13.0".
	CUDAVersion string `json:"cuda_version"`
	NVMLVersion string `json:"nvml_version,omitempty"`
}

// GPUs reads the devices of one host: the real ones through NVML, or
// simulated ones. Every method honours the context's deadline; a backend
// that cannot interrupt a hung driver call returns when the deadline passes
// and leaves the call behind.
type GPUs interface {
	Driver(ctx context.Context) (Driver, error)
	List(ctx context.Context) ([]GPU, error)
	Sample(ctx context.Context, index int) (Telemetry, error)
	Health(ctx context.Context, index int) (Health, error)
	Close() error
}

// ProbeRequest asks for the live checks of one GPU: a context, an
// allocation, a pattern fill and verify, host↔device copies and a short
// device-to-device bandwidth run.
type ProbeRequest struct {
	Index int `json:"index"`
	// UUID is NVML's UUID of the GPU ("GPU-…"): CUDA finds it by that,
	// since CUDA's ordinals need not follow NVML's index.
	UUID       string `json:"uuid,omitempty"`
	AllocBytes uint64 `json:"alloc_bytes"`
	// Seed picks the fill pattern; verify recomputes it from the same seed.
	Seed uint64 `json:"seed"`
	// VerifySeed, when non-zero, verifies against another seed: a planted
	// fault that must make every word count as an error.
	VerifySeed uint64 `json:"verify_seed,omitempty"`
}

// ProbeResult is what the live checks of one GPU found.
type ProbeResult struct {
	Index int `json:"index"`
	// Timings of each step, in seconds.
	InitSeconds   float64 `json:"init_s"`
	AllocSeconds  float64 `json:"alloc_s"`
	KernelSeconds float64 `json:"kernel_s"`
	// Words checked and words that did not hold the pattern.
	VerifiedWords uint64 `json:"verified_words"`
	VerifyErrors  uint64 `json:"verify_errors"`
	// FirstBadOffset is the byte offset of the first wrong word, when any.
	FirstBadOffset uint64 `json:"first_bad_offset,omitempty"`
	// Bandwidths in GB/s (10^9 bytes): host to device, device to host, and
	// device copy counting read plus write.
	HostToDeviceGBs   float64 `json:"h2d_gbs"`
	DeviceToHostGBs   float64 `json:"d2h_gbs"`
	DeviceCopyGBs     float64 `json:"device_copy_gbs"`
	CUDADriverVersion string  `json:"cuda_driver_version,omitempty"`
}

// Prober runs the live checks on a GPU: real CUDA kernels, or a simulation.
type Prober interface {
	Probe(ctx context.Context, req ProbeRequest) (ProbeResult, error)
}
