package gpuwarden

// The names the right-size saving (issue #29) rests on: the agent records
// the event, a replacing box carries the label, and the fleet server reads
// both. Named here once because the agent and the server import neither
// of each other.
const (
	// EventDiagnosisOversized is the kind of the event an agent records
	// once per episode in which its diagnosis says the GPUs are oversized:
	// the evidence a right-size saving rests on.
	EventDiagnosisOversized = "diagnosis-oversized"
	// LabelReplaces is the node label (`up --label replaces=NODE_ID`) by
	// which a box says it runs instead of a node diagnosed oversized.
	LabelReplaces = "replaces"
)

// The Data keys of a diagnosis-oversized event.
const (
	// DataUtilAvg is the GPUs' mean utilization over the window, percent.
	DataUtilAvg = "util_avg"
	// DataMemAvg is the GPUs' mean memory use over the window, percent.
	DataMemAvg = "mem_avg"
	// DataGPUModel is the model of the cards diagnosed oversized.
	DataGPUModel = "gpu_model"
	// DataGPUCount is how many of them the box has.
	DataGPUCount = "gpu_count"
	// DataWindowSeconds is the span of samples the verdict rests on.
	DataWindowSeconds = "window_seconds"
)
