package gpuwarden

import (
	"context"
	"time"
)

// BurnRequest asks for the GPU checks of a burn-in on one GPU.
type BurnRequest struct {
	Index int `json:"index"`
	// UUID is NVML's UUID of the GPU; CUDA finds the device by it.
	UUID string `json:"uuid,omitempty"`
	// MemFraction of the free VRAM the memory test covers (at least 0.95 in a full run).
	MemFraction float64 `json:"mem_fraction"`
	// Patterns for the memory test: zeros, ones, aa, 55, walking-ones,
	// address, random. Empty means all.
	Patterns []string `json:"patterns,omitempty"`
	// SoakSeconds is how long the FP32 compute soak runs.
	SoakSeconds float64 `json:"soak_s"`
	// BandwidthRuns is the number of timed device copies (median reported).
	BandwidthRuns int    `json:"bandwidth_runs"`
	Seed          uint64 `json:"seed"`
	// InjectFault flips one word after the fill of the first pattern: the
	// memory test must catch it.
	InjectFault bool `json:"inject_fault,omitempty"`
}

// MemTestResult is the memory test of one GPU.
type MemTestResult struct {
	Bytes    uint64   `json:"bytes"`
	Patterns []string `json:"patterns"`
	Errors   uint64   `json:"errors"`
	// BadOffsets are the byte offsets of the first wrong words (at most 16).
	BadOffsets []uint64 `json:"bad_offsets,omitempty"`
	// GBs is the fill-and-verify throughput, 10^9 bytes per second.
	GBs     float64 `json:"gbs"`
	Seconds float64 `json:"seconds"`
}

// BurnResult is what the GPU checks of a burn-in measured.
type BurnResult struct {
	Index int           `json:"index"`
	Mem   MemTestResult `json:"mem"`
	// BandwidthGBs is the median device copy, read plus write, GB/s; Runs are all of them.
	BandwidthGBs  float64   `json:"bandwidth_gbs"`
	BandwidthRuns []float64 `json:"bandwidth_runs"`
	// FP32TFLOPs from the FMA soak, whose per-thread results are verified.
	FP32TFLOPs  float64 `json:"fp32_tflops"`
	FMAErrors   uint64  `json:"fma_errors"`
	SoakSeconds float64 `json:"soak_s"`
	// GEMM is the bf16 cuBLASLt soak, when the library is on the box.
	GEMM *GEMMResult `json:"gemm,omitempty"`
	// Pinned host↔device copies, GB/s.
	HostToDeviceGBs float64 `json:"h2d_gbs"`
	DeviceToHostGBs float64 `json:"d2h_gbs"`
	Seconds         float64 `json:"seconds"`
}

// GEMMResult is a bf16 GEMM soak through cuBLASLt: every repeat compared
// bit for bit with the first result, as gpu-burn does.
type GEMMResult struct {
	// Available is false when libcublasLt is not on the box; Reason says so.
	Available  bool    `json:"available"`
	TFLOPs     float64 `json:"tflops"`
	Mismatches uint64  `json:"mismatches"`
	Runs       int     `json:"runs"`
	Dim        int     `json:"dim"`
	Reason     string  `json:"reason,omitempty"`
	// Algo says how the GEMM kernel was chosen: "heuristic" (asked for the
	// workspace) or "default, no workspace: " and why no heuristic answered.
	Algo string `json:"algo,omitempty"`
	// WorkspaceBytes is what the heuristic's algorithm uses of the buffer.
	WorkspaceBytes uint64 `json:"workspace_bytes,omitempty"`
}

// Burner runs the GPU checks of a burn-in: real CUDA kernels, or a simulation.
type Burner interface {
	Burn(ctx context.Context, req BurnRequest) (BurnResult, error)
}

// Burn-in verdicts, mildest first.
const (
	VerdictPass = "PASS"
	VerdictWarn = "WARN"
	VerdictFail = "FAIL"
	// VerdictSkip is a check that was not run, with the reason why: it
	// does not pass, and makes the report's verdict a WARN at best.
	VerdictSkip = "SKIP"
)

// BurnCheck is one check of a burn-in with its verdict and the expectation
// it was held against.
type BurnCheck struct {
	Name   string  `json:"name"`
	GPU    *int    `json:"gpu,omitempty"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Expect float64 `json:"expect,omitempty"`
	// Verdict is PASS, WARN, FAIL or SKIP; Reason says why in words.
	Verdict string `json:"verdict"`
	Reason  string `json:"reason"`
}

// BurnReport is a whole burn-in of one node.
type BurnReport struct {
	// Node identifies the box: host name and the GPUs' UUIDs and serials.
	Node    string       `json:"node"`
	Host    string       `json:"host"`
	GPUs    []GPU        `json:"gpus"`
	Start   time.Time    `json:"start"`
	End     time.Time    `json:"end"`
	Mode    string       `json:"mode"`
	Checks  []BurnCheck  `json:"checks"`
	Results []BurnResult `json:"results"`
	Verdict string       `json:"verdict"`
	// Telemetry is the GPU samples taken during the soak.
	Telemetry []Telemetry `json:"telemetry,omitempty"`
}
