package http

import (
	"strconv"

	"github.com/gpuwarden/gpuwarden"
	"github.com/prometheus/client_golang/prometheus"
)

// The series that say what the agent cannot see, and the MIG instances.
// They live apart from the main list so that the GPU series and these grow
// without stepping on each other.
var (
	descFieldUnknown = newDesc("gpuwarden_gpu_field_unknown",
		"1 for each GPU telemetry field the driver did not give in the last sample, with why (not-supported, mig, no-permission, timeout, error); the field's own series is absent meanwhile.",
		"gpu", "uuid", "model", "field", "reason")
	descTelemetryLost = newDesc("gpuwarden_telemetry_lost",
		"1 when several samples in a row failed to read the GPUs: idle and budget stops are suspended; else 0.")
	descTelemetryFailures = newDesc("gpuwarden_telemetry_failed_samples",
		"Failed GPU samples in a row; 0 when the last one worked.")
	descXIDSource = newDesc("gpuwarden_xid_source_live",
		"1 when the agent can read this Xid source (kmsg, nvml-events), else 0: with none live an Xid would go unseen.", "source")
	descMIGMemUsed = newDesc("gpuwarden_mig_memory_used_bytes",
		"Memory in use on a MIG instance, in bytes.", "gpu", "uuid", "mig", "profile")
	descMIGMemTotal = newDesc("gpuwarden_mig_memory_total_bytes",
		"Memory of a MIG instance's profile, in bytes.", "gpu", "uuid", "mig", "profile")
	descMIGUtil = newDesc("gpuwarden_mig_utilization_ratio",
		"Share of time a MIG instance's SMs were busy (GPM), 0 to 1; absent where the card has no GPM.", "gpu", "uuid", "mig", "profile")
	descMIGProcs = newDesc("gpuwarden_mig_processes",
		"Processes on a MIG instance.", "gpu", "uuid", "mig", "profile")
)

var unknownDescs = []*prometheus.Desc{descFieldUnknown, descTelemetryLost, descTelemetryFailures, descXIDSource,
	descMIGMemUsed, descMIGMemTotal, descMIGUtil, descMIGProcs}

// collectUnknown exports which fields are unknown and why, whether
// telemetry is lost, which Xid sources are live, and the MIG instances.
func collectUnknown(ch chan<- prometheus.Metric, st gpuwarden.AgentStatus, inventory map[int]gpuwarden.GPU) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, t := range st.Last.GPUs {
		g := inventory[t.Index]
		idx := strconv.Itoa(t.Index)
		for _, f := range gpuwarden.TelemetryFields {
			if r, unknown := t.Unknown[f]; unknown {
				gauge(descFieldUnknown, 1, idx, g.UUID, modelOf(g), f, r)
			}
		}
		for _, m := range t.MIG {
			l := []string{idx, m.UUID, strconv.Itoa(m.Index), m.Profile}
			if m.Known(gpuwarden.FieldMemUsed) {
				gauge(descMIGMemUsed, float64(m.MemUsedBytes), l...)
			}
			gauge(descMIGMemTotal, float64(m.MemTotalBytes), l...)
			if m.Known(gpuwarden.FieldUtil) {
				gauge(descMIGUtil, m.UtilPercent/100, l...)
			}
			if m.Known(gpuwarden.FieldProcesses) {
				gauge(descMIGProcs, float64(len(m.Processes)), l...)
			}
		}
	}
	if !st.CPUOnly {
		gauge(descTelemetryLost, boolFloat(st.Telemetry.Lost))
		gauge(descTelemetryFailures, float64(st.Telemetry.Failures))
	}
	for _, src := range st.XIDSources {
		gauge(descXIDSource, boolFloat(src.Live), src.Name)
	}
}
