package http

import (
	"github.com/gpuwarden/gpuwarden"
	"github.com/prometheus/client_golang/prometheus"
)

// The host's cumulative figures, named and shaped as node_exporter's
// (node_cpu_seconds_total, node_disk_read_bytes_total, …) so that the same
// rate() queries work: the agent's *_per_second and *_ratio gauges are
// rates over its own one-second tick, which a query cannot widen. Those
// gauges stay, deprecated (docs/metrics.md).
var (
	descHostCPUSeconds = newDesc("gpuwarden_host_cpu_seconds_total",
		"Host CPU time over all cores since boot, in seconds, by mode: busy (user, nice, system, irq, softirq, steal), idle, iowait.", "mode")
	descHostDiskReadTotal = newDesc("gpuwarden_host_disk_read_bytes_total",
		"Bytes read from the host's whole disks since boot.")
	descHostDiskWrittenTotal = newDesc("gpuwarden_host_disk_written_bytes_total",
		"Bytes written to the host's whole disks since boot.")
	descHostNetRxTotal = newDesc("gpuwarden_host_network_receive_bytes_total",
		"Bytes received on every network interface but lo since boot.")
	descHostNetTxTotal = newDesc("gpuwarden_host_network_transmit_bytes_total",
		"Bytes sent on every network interface but lo since boot.")
)

var hostDescs = []*prometheus.Desc{descHostCPUSeconds, descHostDiskReadTotal, descHostDiskWrittenTotal, descHostNetRxTotal, descHostNetTxTotal}

// collectHostCounters exports the last host sample's counters; before the
// first sample, and for what /proc does not expose, there is no series.
func collectHostCounters(ch chan<- prometheus.Metric, n *gpuwarden.HostCounters) {
	if n == nil {
		return
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	counter(descHostCPUSeconds, n.CPUBusySeconds, "busy")
	counter(descHostCPUSeconds, n.CPUIdleSeconds, "idle")
	counter(descHostCPUSeconds, n.CPUIOWaitSeconds, "iowait")
	if n.HasDisk {
		counter(descHostDiskReadTotal, float64(n.DiskReadBytes))
		counter(descHostDiskWrittenTotal, float64(n.DiskWrittenBytes))
	}
	if n.HasNet {
		counter(descHostNetRxTotal, float64(n.NetReceiveBytes))
		counter(descHostNetTxTotal, float64(n.NetTransmitBytes))
	}
}
