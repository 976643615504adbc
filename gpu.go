package gpuwarden

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
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
	// MIGInstances is the MIG layout when MIG is on: one entry per MIG
	// device, in NVML's MIG index order.
	MIGInstances []MIGInstance `json:"mig_instances,omitempty"`
}

// MIGInstance is one MIG device of a GPU as the layout fixes it: which GPU
// and compute instance it is and how much memory its profile has.
type MIGInstance struct {
	// Index is the MIG device's index within its parent GPU.
	Index int    `json:"index"`
	UUID  string `json:"uuid,omitempty"`
	// GPUInstanceID and ComputeInstanceID are what nvidia-smi calls GI and CI.
	GPUInstanceID     int `json:"gpu_instance_id"`
	ComputeInstanceID int `json:"compute_instance_id"`
	// Profile is the instance's profile, "1g.10gb" or "3g.40gb".
	Profile       string `json:"profile"`
	MemTotalBytes uint64 `json:"mem_total_bytes"`
}

// MIGLayout describes the instances as one stable line, for locks and
// diffs: "GI 1/CI 0 3g.40gb; GI 2/CI 0 3g.40gb", or "" without MIG.
func MIGLayout(instances []MIGInstance) string {
	parts := make([]string, 0, len(instances))
	for _, m := range instances {
		parts = append(parts, fmt.Sprintf("GI %d/CI %d %s", m.GPUInstanceID, m.ComputeInstanceID, m.Profile))
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}

// Telemetry is one sample of what a GPU is doing.
//
// A field the driver could not read is named in Unknown with the reason,
// and its value is zero. Unknown is a map beside plain fields, rather than a
// pointer per field, so that the code reading known values stays simple and
// old readers of the JSON keep working; the JSON writes an unknown field as
// null, never as a 0 that reads like an idle card. Code that decides
// anything from a field must ask Known first.
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
	// MIG is one entry per MIG instance when MIG is on.
	MIG []MIGSample `json:"mig,omitempty"`
	// Unknown maps a field's JSON name (the Field constants) to why it
	// could not be read (the Unknown reasons).
	Unknown map[string]string `json:"unknown,omitempty"`
}

// The telemetry fields by their JSON names, for Unknown.
const (
	FieldUtil      = "util_percent"
	FieldMemUtil   = "mem_util_percent"
	FieldMemUsed   = "mem_used_bytes"
	FieldMemTotal  = "mem_total_bytes"
	FieldPower     = "power_w"
	FieldTemp      = "temp_c"
	FieldSMClock   = "sm_clock_mhz"
	FieldMemClock  = "mem_clock_mhz"
	FieldThrottle  = "throttle_reasons"
	FieldProcesses = "processes"
)

// TelemetryFields are every field a sample can miss, in JSON order.
var TelemetryFields = []string{FieldUtil, FieldMemUtil, FieldMemUsed, FieldMemTotal, FieldPower, FieldTemp,
	FieldSMClock, FieldMemClock, FieldThrottle, FieldProcesses}

// Why a field is unknown.
const (
	// UnknownNotSupported: the card or driver does not report it.
	UnknownNotSupported = "not-supported"
	// UnknownMIG: the driver does not report it for a GPU in MIG mode
	// (nvml.h: utilization "is not currently supported" under MIG).
	UnknownMIG = "mig"
	// UnknownNoPermission: the driver reports it only to a privileged caller.
	UnknownNoPermission = "no-permission"
	// UnknownTimeout: the driver did not answer in time.
	UnknownTimeout = "timeout"
	// UnknownError: the driver answered with an error.
	UnknownError = "error"
	// UnknownPending: a rate that needs two samples (GPM) has had one.
	UnknownPending = "pending"
)

// UnknownText says a reason in words, for tables and alerts.
func UnknownText(reason string) string {
	switch reason {
	case UnknownNotSupported:
		return "not supported"
	case UnknownMIG:
		return "not supported under MIG"
	case UnknownNoPermission:
		return "no permission"
	case UnknownTimeout:
		return "driver timed out"
	case UnknownError:
		return "driver error"
	case UnknownPending:
		return "needs a second sample"
	}
	return reason
}

// ErrNoAnswer marks a GPU read the driver did not answer in time: a hung
// call, or one refused because an earlier call is still stuck.
var ErrNoAnswer = errors.New("the GPU driver did not answer")

// UnknownReasonOf is the Unknown reason for a read that failed with err.
func UnknownReasonOf(err error) string {
	if errors.Is(err, ErrNoAnswer) || errors.Is(err, context.DeadlineExceeded) {
		return UnknownTimeout
	}
	return UnknownError
}

// UnreadTelemetry is the sample of a GPU whose read failed as a whole:
// every field unknown for the same reason.
func UnreadTelemetry(index int, at time.Time, reason string) Telemetry {
	t := Telemetry{Index: index, Time: at, Unknown: make(map[string]string, len(TelemetryFields))}
	for _, f := range TelemetryFields {
		t.Unknown[f] = reason
	}
	return t
}

// Known reports whether the field was read.
func (t Telemetry) Known(field string) bool {
	_, unknown := t.Unknown[field]
	return !unknown
}

// SetUnknown records that a field could not be read and zeroes nothing:
// the reader must not have set it.
func (t *Telemetry) SetUnknown(field, reason string) {
	if t.Unknown == nil {
		t.Unknown = map[string]string{}
	}
	t.Unknown[field] = reason
}

// Unread reports whether nothing of the sample was read.
func (t Telemetry) Unread() bool { return len(t.Unknown) == len(TelemetryFields) }

// MarshalJSON writes unknown fields as null.
func (t Telemetry) MarshalJSON() ([]byte, error) {
	type plain Telemetry
	return nullUnknown(plain(t), t.Unknown)
}

// MIGSample is what one MIG instance is doing. Utilization comes from GPM
// where the card has it (Hopper and later) and is unknown otherwise.
type MIGSample struct {
	MIGInstance
	UtilPercent  float64      `json:"util_percent"`
	MemUsedBytes uint64       `json:"mem_used_bytes"`
	Processes    []GPUProcess `json:"processes,omitempty"`
	// Unknown is as in Telemetry, with the same field names.
	Unknown map[string]string `json:"unknown,omitempty"`
}

// Known reports whether the field was read.
func (m MIGSample) Known(field string) bool {
	_, unknown := m.Unknown[field]
	return !unknown
}

// SetUnknown records that a field could not be read.
func (m *MIGSample) SetUnknown(field, reason string) {
	if m.Unknown == nil {
		m.Unknown = map[string]string{}
	}
	m.Unknown[field] = reason
}

// MarshalJSON writes unknown fields as null.
func (m MIGSample) MarshalJSON() ([]byte, error) {
	type plain MIGSample
	return nullUnknown(plain(m), m.Unknown)
}

// nullUnknown marshals v and turns the unknown fields' values into null.
func nullUnknown(v any, unknown map[string]string) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil || len(unknown) == 0 {
		return b, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, err
	}
	for f := range unknown {
		fields[f] = json.RawMessage("null")
	}
	return json.Marshal(fields)
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
	// XIDSources says where Xids were looked for and which of those places
	// could be read: no live source means no Xid would have been seen, which
	// is not the same as none having happened.
	XIDSources []XIDSource `json:"xid_sources,omitempty"`
	// Unknown maps a counter's JSON name ("ecc_volatile_uncorrected",
	// "remap_pending", "retired_pages") to why it could not be read.
	Unknown map[string]string `json:"unknown,omitempty"`
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

// The Xid sources.
const (
	XIDSourceKmsg       = "kmsg"
	XIDSourceNVMLEvents = "nvml-events"
)

// XIDSource is one place Xids come from and whether it is being read.
type XIDSource struct {
	Name string `json:"name"`
	Live bool   `json:"live"`
	// Reason says why a source is not live ("open /dev/kmsg: permission denied").
	Reason string `json:"reason,omitempty"`
}

// XIDBlind reports whether no Xid source is live: an empty XIDs then says
// nothing about the card.
func XIDBlind(sources []XIDSource) bool {
	for _, s := range sources {
		if s.Live {
			return false
		}
	}
	return true
}

// DescribeXIDSources says which sources are live, "kmsg live, nvml-events
// unavailable (not supported)".
func DescribeXIDSources(sources []XIDSource) string {
	if len(sources) == 0 {
		return "no Xid source reported"
	}
	parts := make([]string, 0, len(sources))
	for _, s := range sources {
		if s.Live {
			parts = append(parts, s.Name+" live")
		} else if s.Reason != "" {
			parts = append(parts, s.Name+" unavailable ("+s.Reason+")")
		} else {
			parts = append(parts, s.Name+" unavailable")
		}
	}
	return strings.Join(parts, ", ")
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
