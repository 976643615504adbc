package http

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

func u64(v uint64) *uint64 { return &v }

// healthStatus is the fixture pair with error counters: GPU 0 has Xids (13
// twice, then 79), ECC errors and a pending remap; GPU 1 reports only its
// PCIe replays, as a card without ECC or row remapping does, and a
// throttle reason newer than this package's list.
func healthStatus() gpuwarden.AgentStatus {
	st := fixtureStatus()
	st.Last.GPUs[1].ThrottleReasons = []string{"gpu_idle", "unknown_0x1000"}
	st.Health = []gpuwarden.Health{
		{Index: 0, RemapPending: true,
			XIDs: []gpuwarden.XIDEvent{
				{Index: 0, XID: 13, Time: fixtureNow.Add(-time.Hour)},
				{Index: 0, XID: 79, Time: fixtureNow.Add(-time.Minute)},
				{Index: 0, XID: 13, Time: fixtureNow.Add(-30 * time.Minute)},
			},
			Counters: gpuwarden.ErrorCounters{
				ECCCorrectedVolatile: u64(12), ECCUncorrectedVolatile: u64(1),
				ECCCorrectedAggregate: u64(40), ECCUncorrectedAggregate: u64(2),
				RemappedRowsCorrectable: u64(3), RemappedRowsUncorrectable: u64(1), PCIeReplays: u64(7),
			}},
		{Index: 1, Counters: gpuwarden.ErrorCounters{PCIeReplays: u64(0)}},
	}
	return st
}

var healthNode = gpuwarden.Node{Project: "llm-eval", InstanceID: "i-0abc",
	Labels: gpuwarden.NodeLabels{Owner: "ana", Provider: "aws", Region: "eu-central-1", InstanceType: "p5e.48xlarge", Spot: true}}

func TestMetricsHealth(t *testing.T) {
	st := healthStatus()
	// Two containers share GPU 0 (time-slicing); GPU 1 is nobody's.
	st.GPUs[0].Pods = []gpuwarden.PodRef{{Namespace: "ml", Pod: "train-0", Container: "trainer"}, {Namespace: "ml", Pod: "eval-0", Container: "eval"}}
	_, base := startServer(t, newFakeAgent(st))
	mfs := scrape(t, base)
	g0 := map[string]string{"gpu": "0", "uuid": "GPU-0000aaaa", "model": "H200"}
	g1 := map[string]string{"gpu": "1", "uuid": "GPU-1111bbbb", "model": "H200"}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"gpuwarden_gpu_xid_errors_total", with(g0, "xid", "13"), 2},
		{"gpuwarden_gpu_xid_errors_total", with(g0, "xid", "79"), 1},
		{"gpuwarden_gpu_last_xid", g0, 79}, // the newest, not the last listed
		{"gpuwarden_gpu_ecc_errors_total", with(g0, "type", "corrected", "counter", "volatile"), 12},
		{"gpuwarden_gpu_ecc_errors_total", with(g0, "type", "uncorrected", "counter", "volatile"), 1},
		{"gpuwarden_gpu_ecc_errors_total", with(g0, "type", "corrected", "counter", "aggregate"), 40},
		{"gpuwarden_gpu_ecc_errors_total", with(g0, "type", "uncorrected", "counter", "aggregate"), 2},
		{"gpuwarden_gpu_remapped_rows_total", with(g0, "cause", "correctable"), 3},
		{"gpuwarden_gpu_remapped_rows_total", with(g0, "cause", "uncorrectable"), 1},
		{"gpuwarden_gpu_row_remap_pending", g0, 1},
		{"gpuwarden_gpu_row_remap_failed", g0, 0},
		{"gpuwarden_gpu_pcie_replays_total", g0, 7},
		{"gpuwarden_gpu_pcie_replays_total", g1, 0},
		{"gpuwarden_gpu_throttle_reason", with(g0, "reason", "sw_power_cap"), 1},
		{"gpuwarden_gpu_throttle_reason", with(g0, "reason", "hw_thermal_slowdown"), 0},
		{"gpuwarden_gpu_throttle_reason", with(g1, "reason", "gpu_idle"), 1},
		{"gpuwarden_gpu_throttle_reason", with(g1, "reason", "unknown_0x1000"), 1},
		{"gpuwarden_gpu_pod_info", with(g0, "namespace", "ml", "pod", "train-0", "container", "trainer"), 1},
		{"gpuwarden_gpu_pod_info", with(g0, "namespace", "ml", "pod", "eval-0", "container", "eval"), 1},
	} {
		mf, ok := mfs[tc.name]
		if !ok {
			t.Errorf("%s missing", tc.name)
			continue
		}
		m, ok := series(mf, tc.labels)
		if !ok {
			t.Errorf("%s%v missing", tc.name, tc.labels)
			continue
		}
		if got := valueOf(mf, m); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	// What GPU 1 does not report stays absent: a 0 would claim a clean card.
	for _, name := range []string{"gpuwarden_gpu_ecc_errors_total", "gpuwarden_gpu_remapped_rows_total",
		"gpuwarden_gpu_row_remap_pending", "gpuwarden_gpu_retired_pages_total", "gpuwarden_gpu_last_xid", "gpuwarden_gpu_xid_errors_total"} {
		for _, m := range mfs[name].GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "gpu" && lp.GetValue() == "1" {
					t.Errorf("%s has a series for GPU 1, which reports none", name)
				}
			}
		}
	}
	if b := mfs["gpuwarden_build_info"].GetMetric(); len(b) != 1 {
		t.Errorf("gpuwarden_build_info has %d series on the agent, want 1", len(b))
	} else if _, ok := series(mfs["gpuwarden_build_info"], map[string]string{"version": gpuwarden.Version,
		"revision": vcsRevision(), "goversion": runtime.Version()}); !ok {
		t.Errorf("gpuwarden_build_info labels = %v", b[0].GetLabel())
	}
	if _, ok := mfs["gpuwarden_gpu_retired_pages_total"]; ok {
		t.Error("gpuwarden_gpu_retired_pages_total present though no GPU retires pages")
	}
	if n := len(mfs["gpuwarden_gpu_throttle_reason"].GetMetric()); n != 2*len(throttleReasonNames)+1 {
		t.Errorf("gpuwarden_gpu_throttle_reason has %d series, want every known reason per GPU plus the unknown one (%d)", n, 2*len(throttleReasonNames)+1)
	}
}

func TestMetricsNodeInfo(t *testing.T) {
	tests := []struct {
		name string
		node gpuwarden.Node
		want map[string]string
	}{
		{"labels given", healthNode, map[string]string{"node": "gpu-node-1", "owner": "ana", "project": "llm-eval", "provider": "aws",
			"region": "eu-central-1", "instance_type": "p5e.48xlarge", "instance_id": "i-0abc", "spot": "true"}},
		{"project as a --label", gpuwarden.Node{Labels: gpuwarden.NodeLabels{Extra: map[string]string{"project": "vision"}}},
			map[string]string{"node": "gpu-node-1", "owner": "", "project": "vision", "provider": "", "region": "",
				"instance_type": "", "instance_id": "", "spot": "false"}},
		{"none: still one series naming the node", gpuwarden.Node{}, map[string]string{"node": "gpu-node-1", "owner": "", "project": "",
			"provider": "", "region": "", "instance_type": "", "instance_id": "", "spot": "false"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := tt.node
			reg := newRegistry(fixtureStatus, func() gpuwarden.Node { return node })
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(mfs, func(f *dtoFamily) bool { return f.GetName() == "gpuwarden_node_info" })
			if i < 0 {
				t.Fatal("gpuwarden_node_info missing")
			}
			if got := mfs[i].GetMetric(); len(got) != 1 {
				t.Fatalf("gpuwarden_node_info has %d series, want 1", len(got))
			}
			if _, ok := series(mfs[i], tt.want); !ok {
				t.Errorf("gpuwarden_node_info = %v, want labels %v", mfs[i].GetMetric()[0].GetLabel(), tt.want)
			}
		})
	}
}

// TestMetricsHealthFollowConventions runs promlint over the new series.
func TestMetricsHealthFollowConventions(t *testing.T) {
	mfs, err := newRegistry(healthStatus, func() gpuwarden.Node { return healthNode }).Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "gpuwarden_") {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
	}
}

// TestMetricsHealthGolden pins the error-counter and node series; refresh
// with go test ./http/ -run HealthGolden -update.
func TestMetricsHealthGolden(t *testing.T) {
	mfs, err := newRegistry(healthStatus, func() gpuwarden.Node { return healthNode }).Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for _, mf := range mfs {
		if !slices.ContainsFunc(healthDescs, func(d *prometheusDesc) bool { return strings.Contains(d.String(), `"`+mf.GetName()+`"`) }) {
			continue
		}
		if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
			t.Fatal(err)
		}
	}
	golden := filepath.Join("testdata", "metrics-health.golden")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got := buf.String(); got != string(want) {
		t.Errorf("metrics differ from %s (run with -update if intended):\n%s", golden, lineDiff(string(want), got))
	}
}

type (
	dtoFamily      = dto.MetricFamily
	prometheusDesc = prometheus.Desc
)

func TestMetricsHostCounters(t *testing.T) {
	st := fixtureStatus()
	st.Last.Host.Counters = &gpuwarden.HostCounters{CPUBusySeconds: 1234.5, CPUIdleSeconds: 9876, CPUIOWaitSeconds: 12.25,
		HasDisk: true, DiskReadBytes: 1 << 30, DiskWrittenBytes: 2 << 30}
	_, base := startServer(t, newFakeAgent(st))
	mfs := scrape(t, base)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"gpuwarden_host_cpu_seconds_total", map[string]string{"mode": "busy"}, 1234.5},
		{"gpuwarden_host_cpu_seconds_total", map[string]string{"mode": "idle"}, 9876},
		{"gpuwarden_host_cpu_seconds_total", map[string]string{"mode": "iowait"}, 12.25},
		{"gpuwarden_host_disk_read_bytes_total", map[string]string{}, 1 << 30},
		{"gpuwarden_host_disk_written_bytes_total", map[string]string{}, 2 << 30},
	} {
		mf, ok := mfs[tc.name]
		if !ok || mf.GetType() != dto.MetricType_COUNTER {
			t.Errorf("%s missing or not a counter", tc.name)
			continue
		}
		m, ok := series(mf, tc.labels)
		if !ok {
			t.Errorf("%s%v missing", tc.name, tc.labels)
			continue
		}
		if got := valueOf(mf, m); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	// No net/dev: no network counters rather than a 0 that reads as silence.
	for _, name := range []string{"gpuwarden_host_network_receive_bytes_total", "gpuwarden_host_network_transmit_bytes_total"} {
		if _, ok := mfs[name]; ok {
			t.Errorf("%s present though the sampler read no net/dev", name)
		}
	}
	// Before the first sample there are no counters at all.
	_, base = startServer(t, newFakeAgent(fixtureStatus()))
	if _, ok := scrape(t, base)["gpuwarden_host_cpu_seconds_total"]; ok {
		t.Error("gpuwarden_host_cpu_seconds_total present without counters")
	}
}

// BenchmarkMetricsScrapeHealth measures what this file's series add to a
// scrape of an 8-GPU box with full error counters (ECC, remapped rows, PCIe,
// three Xids each) and host counters: the whole page, and the new
// collectors alone, beside BenchmarkMetricsScrape's figures.
func BenchmarkMetricsScrapeHealth(b *testing.B) {
	st := fixtureStatusN(8)
	st.Last.Host.Counters = &gpuwarden.HostCounters{HasDisk: true, HasNet: true}
	proto := healthStatus().Health[0]
	for i := range 8 {
		h := proto
		h.Index = i
		st.Health = append(st.Health, h)
	}
	status := func() gpuwarden.AgentStatus { return st }
	node := func() gpuwarden.Node { return healthNode }
	srv := NewServer(status, nil, nil)
	srv.Node = healthNode
	b.Run("full", func(b *testing.B) { benchScrape(b, srv.Handler()) })
	b.Run("health_and_host_only", func(b *testing.B) { benchGather(b, healthOnly{status: status, node: node}) })
}

// healthOnly collects only the health and host-counter series, for the
// benchmark of what they add to a scrape.
type healthOnly struct {
	status func() gpuwarden.AgentStatus
	node   func() gpuwarden.Node
}

func (c healthOnly) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range append(slices.Clone(healthDescs), hostDescs...) {
		ch <- d
	}
}

func (c healthOnly) Collect(ch chan<- prometheus.Metric) {
	st := c.status()
	inventory := map[int]gpuwarden.GPU{}
	for _, g := range st.GPUs {
		inventory[g.Index] = g
	}
	collectHealth(ch, st, inventory, c.node())
	collectHostCounters(ch, st.Last.Host.Counters)
}
