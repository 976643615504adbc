package http

import (
	"maps"
	"slices"
	"strconv"

	"github.com/gpuwarden/gpuwarden"
	"github.com/prometheus/client_golang/prometheus"
)

// throttleReasonNames are the clock event reasons NVML names (nvml/'s
// decoding), each exported at 0 or 1 so that an alert on one sees 0 rather
// than an absent series while the GPU runs free. A reason a newer driver adds
// ("unknown_0x…") still shows, at 1.
var throttleReasonNames = []string{
	"gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
	"sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "display_clock_setting",
}

// The series of the GPUs' error counters and the node's identity: the set
// dcgm-exporter exports by default (docs/metrics.md maps each one), in
// Prometheus units. Counters the driver does not report are absent, not 0.
var (
	descGPUMemClock = newDesc("gpuwarden_gpu_memory_clock_hertz",
		"GPU memory clock, in hertz.", gpuLabels...)
	descThrottleReason = newDesc("gpuwarden_gpu_throttle_reason",
		"1 while NVML gives this reason for holding the GPU clocks down, else 0.", append(gpuLabels, "reason")...)
	descXIDErrors = newDesc("gpuwarden_gpu_xid_errors_total",
		"Xid errors the driver logged for the GPU, by Xid code, since the agent started reading the kernel log (it starts with what the ring buffer still held).", append(gpuLabels, "xid")...)
	descLastXID = newDesc("gpuwarden_gpu_last_xid",
		"Code of the most recent Xid error logged for the GPU; absent when none was seen (dcgm-exporter's DCGM_FI_DEV_XID_ERRORS).", gpuLabels...)
	descECCErrors = newDesc("gpuwarden_gpu_ecc_errors_total",
		"ECC memory errors: type corrected (single-bit) or uncorrected (double-bit); counter volatile (since the driver loaded) or aggregate (the card's life).", append(gpuLabels, "type", "counter")...)
	descRemappedRows = newDesc("gpuwarden_gpu_remapped_rows_total",
		"Memory rows the GPU remapped, by the cause: correctable or uncorrectable errors (A100 and later).", append(gpuLabels, "cause")...)
	descRemapPending = newDesc("gpuwarden_gpu_row_remap_pending",
		"1 when a row remap waits for a GPU reset, else 0.", gpuLabels...)
	descRemapFailed = newDesc("gpuwarden_gpu_row_remap_failed",
		"1 when a row remap failed and the card needs replacing, else 0.", gpuLabels...)
	descRetiredPages = newDesc("gpuwarden_gpu_retired_pages_total",
		"Memory pages retired for double-bit or repeated single-bit ECC errors (cards before A100).", gpuLabels...)
	descPCIeReplays = newDesc("gpuwarden_gpu_pcie_replays_total",
		"PCIe packets the GPU's link had to resend.", gpuLabels...)
	descPodInfo = newDesc("gpuwarden_gpu_pod_info",
		"Always 1, one series per Kubernetes container the kubelet allocated the GPU to (pod-resources API, up --kubelet-socket); join it to a GPU series on uuid for dcgm-exporter's namespace, pod and container labels.",
		append(gpuLabels, "namespace", "pod", "container")...)
	descNodeInfo = newDesc("gpuwarden_node_info",
		"Always 1; labels say who pays for the box and where it runs, for joins: "+
			"… * on (instance) group_left (node, owner, project) gpuwarden_node_info.", nodeInfoLabels...)
)

// nodeInfoLabels are the node's labels as `up --label` and the plan give
// them. The cloud instance ID is instance_id: "instance" is the label
// Prometheus gives every scraped series (the target), and a series that
// brought its own would have it renamed exported_instance.
var nodeInfoLabels = []string{"node", "owner", "project", "provider", "region", "instance_type", "instance_id", "spot"}

var healthDescs = []*prometheus.Desc{
	descGPUMemClock, descThrottleReason, descXIDErrors, descLastXID, descECCErrors, descRemappedRows,
	descRemapPending, descRemapFailed, descRetiredPages, descPCIeReplays, descPodInfo, descNodeInfo,
}

// collectHealth exports the error counters of the agent's last health
// reading, the throttle reasons of its last sample, the GPUs' pods and the
// node's labels, from the scrape's one status snapshot.
func collectHealth(ch chan<- prometheus.Metric, st gpuwarden.AgentStatus, inventory map[int]gpuwarden.GPU, node gpuwarden.Node) {
	emit := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, t, v, labels...)
	}
	labelsOf := func(index int) []string {
		g := inventory[index]
		return []string{strconv.Itoa(index), g.UUID, modelOf(g)}
	}

	for _, g := range st.GPUs {
		for _, p := range g.Pods {
			emit(descPodInfo, prometheus.GaugeValue, 1, append(labelsOf(g.Index), p.Namespace, p.Pod, p.Container)...)
		}
	}

	for _, t := range st.Last.GPUs {
		l := labelsOf(t.Index)
		emit(descGPUMemClock, prometheus.GaugeValue, float64(t.MemClockMHz)*1e6, l...)
		for _, r := range throttleReasonNames {
			emit(descThrottleReason, prometheus.GaugeValue, boolFloat(slices.Contains(t.ThrottleReasons, r)), append(l, r)...)
		}
		for _, r := range t.ThrottleReasons {
			if !slices.Contains(throttleReasonNames, r) {
				emit(descThrottleReason, prometheus.GaugeValue, 1, append(l, r)...)
			}
		}
	}

	for _, h := range st.Health {
		l := labelsOf(h.Index)
		counts := map[uint64]int{}
		var last gpuwarden.XIDEvent
		for i, x := range h.XIDs {
			counts[x.XID]++
			if i == 0 || !x.Time.Before(last.Time) {
				last = x
			}
		}
		for _, code := range slices.Sorted(maps.Keys(counts)) {
			emit(descXIDErrors, prometheus.CounterValue, float64(counts[code]), append(l, strconv.FormatUint(code, 10))...)
		}
		if len(h.XIDs) > 0 {
			emit(descLastXID, prometheus.GaugeValue, float64(last.XID), l...)
		}

		n := h.Counters
		count := func(d *prometheus.Desc, v *uint64, extra ...string) {
			if v != nil {
				emit(d, prometheus.CounterValue, float64(*v), append(slices.Clone(l), extra...)...)
			}
		}
		count(descECCErrors, n.ECCCorrectedVolatile, "corrected", "volatile")
		count(descECCErrors, n.ECCUncorrectedVolatile, "uncorrected", "volatile")
		count(descECCErrors, n.ECCCorrectedAggregate, "corrected", "aggregate")
		count(descECCErrors, n.ECCUncorrectedAggregate, "uncorrected", "aggregate")
		count(descRemappedRows, n.RemappedRowsCorrectable, "correctable")
		count(descRemappedRows, n.RemappedRowsUncorrectable, "uncorrectable")
		// Pending and failed are only known where rows are remapped at all.
		if n.RemappedRowsCorrectable != nil || n.RemappedRowsUncorrectable != nil {
			emit(descRemapPending, prometheus.GaugeValue, boolFloat(h.RemapPending), l...)
			emit(descRemapFailed, prometheus.GaugeValue, boolFloat(h.RemapFailed), l...)
		}
		count(descRetiredPages, n.RetiredPages)
		count(descPCIeReplays, n.PCIeReplays)
	}

	lb := node.Labels
	project := node.Project
	if project == "" {
		project = lb.Extra["project"]
	}
	emit(descNodeInfo, prometheus.GaugeValue, 1, st.Node, lb.Owner, project, lb.Provider, lb.Region,
		lb.InstanceType, node.InstanceID, strconv.FormatBool(lb.Spot))
}
