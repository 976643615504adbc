package http

import (
	"fmt"
	"log/slog"
	nethttp "net/http"
	"strconv"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// verdicts are the diagnosis verdicts /metrics always exposes, one series
// each at 0 or 1, so that an alert on a verdict sees 0 rather than an absent
// series while another verdict holds.
var verdicts = []string{"healthy", "oversized", "input-bound", "io-bound", "idle", "unknown"}

// gpuLabels name a GPU three ways: the index for humans, the UUID because
// indices can change across reboots, the model for aggregation by card type.
var gpuLabels = []string{"gpu", "uuid", "model"}

// currencyLabel carries the ISO 4217 code of a money metric. The currency is
// a label rather than part of the name (gpuwarden_cost_eur_total) because it
// is a setting of the plan, not a property of what is measured: one fleet may
// bill in several currencies, and a name that changed with the config would
// break every dashboard and alert rule written against it. As a label, rules
// stay the same and `sum by (currency)` keeps euros and dollars apart.
var currencyLabel = []string{"currency"}

func newDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// Every series the agent exposes. Units follow Prometheus conventions:
// ratios 0 to 1, bytes, seconds, hertz, celsius, watts.
var (
	descGPUUtil = newDesc("gpuwarden_gpu_utilization_ratio",
		"Share of the last sample period in which a kernel ran on the GPU, 0 to 1.", gpuLabels...)
	descGPUMemUtil = newDesc("gpuwarden_gpu_memory_utilization_ratio",
		"Share of the last sample period in which GPU memory was read or written, 0 to 1.", gpuLabels...)
	descGPUMemUsed = newDesc("gpuwarden_gpu_memory_used_bytes",
		"GPU memory allocated by processes, in bytes.", gpuLabels...)
	descGPUMemTotal = newDesc("gpuwarden_gpu_memory_total_bytes",
		"GPU memory the driver makes available, in bytes.", gpuLabels...)
	descGPUPower = newDesc("gpuwarden_gpu_power_watts",
		"GPU board power draw, in watts.", gpuLabels...)
	descGPUTemp = newDesc("gpuwarden_gpu_temperature_celsius",
		"GPU core temperature, in degrees Celsius.", gpuLabels...)
	descGPUSMClock = newDesc("gpuwarden_gpu_sm_clock_hertz",
		"GPU streaming multiprocessor clock, in hertz.", gpuLabels...)
	descGPUThrottled = newDesc("gpuwarden_gpu_throttled",
		"1 when the GPU clocks are held down for a reason other than idleness (power cap, thermal, slowdown), else 0.", gpuLabels...)
	descGPUProcs = newDesc("gpuwarden_gpu_processes",
		"Processes holding memory on the GPU.", gpuLabels...)

	descHostCPU = newDesc("gpuwarden_host_cpu_utilization_ratio",
		"Host CPU busy share over all cores since the previous sample, 0 to 1. Deprecated: rate(gpuwarden_host_cpu_seconds_total[…]).")
	descHostIOWait = newDesc("gpuwarden_host_iowait_ratio",
		"Host CPU share spent waiting on I/O since the previous sample, 0 to 1. Deprecated: rate(gpuwarden_host_cpu_seconds_total{mode=\"iowait\"}[…]).")
	descHostLoad1 = newDesc("gpuwarden_host_load1",
		"Host one-minute load average.")
	descHostMemUsed = newDesc("gpuwarden_host_memory_used_bytes",
		"Host memory in use, in bytes.")
	descHostMemTotal = newDesc("gpuwarden_host_memory_total_bytes",
		"Host memory installed, in bytes.")
	descHostDiskRead = newDesc("gpuwarden_host_disk_read_bytes_per_second",
		"Host disk read throughput since the previous sample, in bytes per second. Deprecated: rate(gpuwarden_host_disk_read_bytes_total[…]).")
	descHostDiskWrite = newDesc("gpuwarden_host_disk_write_bytes_per_second",
		"Host disk write throughput since the previous sample, in bytes per second. Deprecated: rate(gpuwarden_host_disk_written_bytes_total[…]).")
	descHostNetRx = newDesc("gpuwarden_host_network_receive_bytes_per_second",
		"Host network receive throughput since the previous sample, in bytes per second. Deprecated: rate(gpuwarden_host_network_receive_bytes_total[…]).")
	descHostNetTx = newDesc("gpuwarden_host_network_transmit_bytes_per_second",
		"Host network transmit throughput since the previous sample, in bytes per second. Deprecated: rate(gpuwarden_host_network_transmit_bytes_total[…]).")

	descIdle = newDesc("gpuwarden_idle",
		"1 when every idle condition holds now, else 0.")
	descIdleSeconds = newDesc("gpuwarden_idle_seconds",
		"How long the box has been idle without a break, in seconds; 0 when busy.")
	descIdleTotal = newDesc("gpuwarden_idle_seconds_total",
		"Seconds the box was idle since the agent started.")
	descIdleWindow = newDesc("gpuwarden_idle_window_seconds",
		"Idle time after which the policy stops the box, in seconds.")

	descStopProven = newDesc("gpuwarden_stop_proven",
		"1 when the idle stop was last proven to work without stopping anything (credentials, permission, this instance), 0 when the proof failed; absent before the first proof.", "method")
	descStopEndsBilling = newDesc("gpuwarden_stop_ends_billing",
		"1 when the idle stop in force ends compute billing on this provider, 0 when the box would stop but bill on (an OS shutdown on Azure), or nothing here can stop its bill.", "method")
	descStopProofTime = newDesc("gpuwarden_stop_proof_time_seconds",
		"When the idle stop was last proven (or failed to be), in seconds since the Unix epoch.", "method")

	descCostTotal = newDesc("gpuwarden_cost_total",
		"Spend this calendar month in currency units; it restarts at 0 each month, which rate and increase treat as a counter reset.", currencyLabel...)
	descCostForecast = newDesc("gpuwarden_cost_forecast",
		"Forecast spend for the whole calendar month at the current rate, in currency units.", currencyLabel...)
	descBudgetLimit = newDesc("gpuwarden_budget_limit",
		"Monthly budget limit in currency units; absent when no limit is set.", currencyLabel...)
	descHourlyRate = newDesc("gpuwarden_cost_hourly_rate",
		"What the box costs per hour now, storage included, in currency units.", currencyLabel...)

	descDiagnosis = newDesc("gpuwarden_diagnosis",
		"1 for the current verdict on why the GPUs sleep, 0 for the others.", "verdict")
	descNotices = newDesc("gpuwarden_notices_total",
		"Cloud preemption and maintenance notices the agent has received.")
	descNoticeSourceUp = newDesc("gpuwarden_notice_source_up",
		"1 when the cloud metadata service the agent polls for preemption and maintenance notices answered the last poll, 0 when it did not (the notices are not heard); absent when no cloud is polled.", "cloud")
	descStart = newDesc("gpuwarden_agent_start_time_seconds",
		"When the agent started, in seconds since the Unix epoch.")
	descInfo = newDesc("gpuwarden_agent_info",
		"Always 1; labels describe the agent's node and driver, for joins.",
		"node", "driver_version", "cuda_version", "simulated", "cpu_only")
)

var allDescs = []*prometheus.Desc{
	descGPUUtil, descGPUMemUtil, descGPUMemUsed, descGPUMemTotal, descGPUPower, descGPUTemp,
	descGPUSMClock, descGPUThrottled, descGPUProcs,
	descHostCPU, descHostIOWait, descHostLoad1, descHostMemUsed, descHostMemTotal,
	descHostDiskRead, descHostDiskWrite, descHostNetRx, descHostNetTx,
	descIdle, descIdleSeconds, descIdleTotal, descIdleWindow,
	descStopProven, descStopEndsBilling, descStopProofTime,
	descCostTotal, descCostForecast, descBudgetLimit, descHourlyRate,
	descDiagnosis, descNotices, descNoticeSourceUp, descStart, descInfo,
}

// statusCollector reads the agent's status on every scrape and builds const
// metrics from it: values are never older than the agent's last tick, and a
// GPU or currency that goes away leaves no stale series behind, as a vector
// of gauges would.
type statusCollector struct {
	status func() gpuwarden.AgentStatus
	// node is the node's identity for gpuwarden_node_info; nil: none.
	node func() gpuwarden.Node
}

// Describe sends every descriptor so that the registry checks the collector.
func (c statusCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
	for _, descs := range [][]*prometheus.Desc{unknownDescs, healthDescs, hostDescs} {
		for _, d := range descs {
			ch <- d
		}
	}
}

// Collect takes one status snapshot so that all series of a scrape agree.
func (c statusCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.status()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}

	inventory := make(map[int]gpuwarden.GPU, len(st.GPUs))
	for _, g := range st.GPUs {
		inventory[g.Index] = g
	}
	for _, t := range st.Last.GPUs {
		g := inventory[t.Index]
		l := []string{strconv.Itoa(t.Index), g.UUID, modelOf(g)}
		memTotal := float64(t.MemTotalBytes)
		if memTotal == 0 {
			memTotal = float64(g.VRAMBytes)
		}
		// An unknown field exports no sample: an absent series, with
		// gpuwarden_gpu_field_unknown saying why, never a 0.
		known := func(d *prometheus.Desc, field string, v float64) {
			if t.Known(field) {
				gauge(d, v, l...)
			}
		}
		known(descGPUUtil, gpuwarden.FieldUtil, t.UtilPercent/100)
		known(descGPUMemUtil, gpuwarden.FieldMemUtil, t.MemUtilPercent/100)
		known(descGPUMemUsed, gpuwarden.FieldMemUsed, float64(t.MemUsedBytes))
		if memTotal > 0 {
			gauge(descGPUMemTotal, memTotal, l...)
		}
		known(descGPUPower, gpuwarden.FieldPower, t.PowerWatts)
		known(descGPUTemp, gpuwarden.FieldTemp, t.TempC)
		known(descGPUSMClock, gpuwarden.FieldSMClock, float64(t.SMClockMHz)*1e6)
		known(descGPUThrottled, gpuwarden.FieldThrottle, boolFloat(throttled(t.ThrottleReasons)))
		known(descGPUProcs, gpuwarden.FieldProcesses, float64(len(t.Processes)))
	}
	collectUnknown(ch, st, inventory)
	node := gpuwarden.Node{}
	if c.node != nil {
		node = c.node()
	}
	collectHealth(ch, st, inventory, node)
	collectHostCounters(ch, st.Last.Host.Counters)

	// Before the first tick there is no host reading; absent beats a false 0.
	if h := st.Last.Host; !st.Last.Time.IsZero() || !h.Time.IsZero() {
		gauge(descHostCPU, h.CPUPercent/100)
		gauge(descHostIOWait, h.IOWaitPercent/100)
		gauge(descHostLoad1, h.Load1)
		gauge(descHostMemUsed, float64(h.MemUsedBytes))
		gauge(descHostMemTotal, float64(h.MemTotalBytes))
		gauge(descHostDiskRead, h.DiskReadBps)
		gauge(descHostDiskWrite, h.DiskWriteBps)
		gauge(descHostNetRx, h.NetRxBps)
		gauge(descHostNetTx, h.NetTxBps)
	}

	gauge(descIdle, boolFloat(st.Idle.Idle))
	gauge(descIdleSeconds, idleFor(st).Seconds())
	counter(descIdleTotal, st.IdleSecondsTotal)
	gauge(descIdleWindow, st.Idle.WindowSeconds)

	if r := st.Stop; r != nil && r.Method != "" {
		gauge(descStopEndsBilling, boolFloat(r.StopsBilling), r.Method)
		if p := r.Proof; p != nil {
			gauge(descStopProven, boolFloat(p.Proven), r.Method)
			gauge(descStopProofTime, float64(p.At.UnixNano())/1e9, r.Method)
		}
	}

	if b := st.Budget; b.Currency != "" {
		cur := string(b.Currency)
		counter(descCostTotal, units(b.Spent), cur)
		gauge(descCostForecast, units(b.Forecast), cur)
		if b.Limit > 0 {
			gauge(descBudgetLimit, units(b.Limit), cur)
		}
		gauge(descHourlyRate, b.HourlyRate.Float(), cur)
	}

	verdict := st.Diagnosis.Verdict
	if verdict == "" {
		verdict = "unknown"
	}
	known := false
	for _, v := range verdicts {
		known = known || v == verdict
		gauge(descDiagnosis, boolFloat(v == verdict), v)
	}
	if !known { // a verdict newer than this list still shows
		gauge(descDiagnosis, 1, verdict)
	}

	counter(descNotices, float64(len(st.Notices)))
	if ns := st.NoticeSource; ns != nil {
		gauge(descNoticeSourceUp, boolFloat(ns.Up), ns.Cloud)
	}
	if !st.Started.IsZero() {
		gauge(descStart, float64(st.Started.UnixNano())/1e9)
	}
	var driver, cuda string
	if st.Driver != nil {
		driver, cuda = st.Driver.Version, st.Driver.CUDAVersion
	}
	gauge(descInfo, 1, st.Node, driver, cuda, strconv.FormatBool(st.Simulated), strconv.FormatBool(st.CPUOnly))
}

// throttled ignores gpu_idle: an idle card lowers its clocks by design, and
// counting that would make every idle box look throttled.
func throttled(reasons []string) bool {
	for _, r := range reasons {
		if r != "gpu_idle" {
			return true
		}
	}
	return false
}

// idleFor is how long the box has been idle now, by the status's own clock.
func idleFor(st gpuwarden.AgentStatus) time.Duration {
	if !st.Idle.Idle || st.Idle.Since.IsZero() {
		return 0
	}
	now := st.Now
	if now.IsZero() {
		now = time.Now()
	}
	return max(0, now.Sub(st.Idle.Since))
}

// modelOf prefers the canonical model, falling back to the driver's name for
// cards the GPU table does not know.
func modelOf(g gpuwarden.GPU) string {
	if g.Model != "" {
		return g.Model
	}
	return g.Name
}

// units turns cents into whole currency units, the unit money metrics use.
func units(c gpuwarden.Cents) float64 { return float64(c) / 100 }

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// newRegistry is private to one server: the global registry would mix in
// whatever else the process registers and break with two servers in a test.
func newRegistry(status func() gpuwarden.AgentStatus, node func() gpuwarden.Node) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		statusCollector{status: status, node: node},
		buildInfo(),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

func newMetricsHandler(status func() gpuwarden.AgentStatus, node func() gpuwarden.Node, savings func() gpuwarden.SavingsLedger, log *slog.Logger) nethttp.Handler {
	reg := newRegistry(status, node)
	reg.MustRegister(savingsCollector{ledger: savings, log: log})
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: promLogger{log},
		// A collector that fails (the process collector off Linux) must not
		// hide the agent's own series.
		ErrorHandling:       promhttp.ContinueOnError,
		Registry:            reg,
		MaxRequestsInFlight: 4,
	})
}

// promLogger routes promhttp's errors to the injected slog logger.
type promLogger struct{ log *slog.Logger }

// Println logs one promhttp error.
func (l promLogger) Println(v ...any) { l.log.Warn("metrics scrape", "error", fmt.Sprint(v...)) }
