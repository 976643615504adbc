package http

import (
	"bytes"
	"flag"
	"maps"
	nethttp "net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

var update = flag.Bool("update", false, "rewrite golden files")

// scrape fetches /metrics over HTTP and parses it as Prometheus does.
func scrape(t testing.TB, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, body := get(t, "GET", base+"/metrics")
	if resp.StatusCode != nethttp.StatusOK {
		t.Fatalf("/metrics status %d: %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") || !strings.Contains(ct, "version=0.0.4") {
		t.Errorf("Content-Type = %q, want the Prometheus text format", ct)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return mfs
}

// series finds the metric of a family with exactly the given labels.
func series(mf *dto.MetricFamily, labels map[string]string) (*dto.Metric, bool) {
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		if maps.Equal(got, labels) {
			return m, true
		}
	}
	return nil, false
}

func valueOf(mf *dto.MetricFamily, m *dto.Metric) float64 {
	if mf.GetType() == dto.MetricType_COUNTER {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

func TestMetrics(t *testing.T) {
	_, base := startServer(t, newFakeAgent(fixtureStatus()))
	mfs := scrape(t, base)

	g0 := map[string]string{"gpu": "0", "uuid": "GPU-0000aaaa", "model": "H200"}
	g1 := map[string]string{"gpu": "1", "uuid": "GPU-1111bbbb", "model": "H200"}
	eur := map[string]string{"currency": "EUR"}
	none := map[string]string{}
	gauge, counter := dto.MetricType_GAUGE, dto.MetricType_COUNTER
	for _, tc := range []struct {
		name   string
		typ    dto.MetricType
		labels map[string]string
		want   float64
	}{
		{"gpuwarden_gpu_utilization_ratio", gauge, g0, 0.37},
		{"gpuwarden_gpu_utilization_ratio", gauge, g1, 0},
		{"gpuwarden_gpu_memory_utilization_ratio", gauge, g0, 0.20},
		{"gpuwarden_gpu_memory_used_bytes", gauge, g0, 64 * gib},
		{"gpuwarden_gpu_memory_used_bytes", gauge, g1, 0},
		{"gpuwarden_gpu_memory_total_bytes", gauge, g1, 141 * gib},
		{"gpuwarden_gpu_power_watts", gauge, g0, 412.5},
		{"gpuwarden_gpu_temperature_celsius", gauge, g1, 33},
		{"gpuwarden_gpu_sm_clock_hertz", gauge, g0, 1.98e9},
		{"gpuwarden_gpu_sm_clock_hertz", gauge, g1, 345e6},
		{"gpuwarden_gpu_throttled", gauge, g0, 1}, // sw_power_cap
		{"gpuwarden_gpu_throttled", gauge, g1, 0}, // gpu_idle only
		{"gpuwarden_gpu_processes", gauge, g0, 2},
		{"gpuwarden_gpu_processes", gauge, g1, 0},
		{"gpuwarden_host_cpu_utilization_ratio", gauge, none, 0.125},
		{"gpuwarden_host_iowait_ratio", gauge, none, 0.015},
		{"gpuwarden_host_load1", gauge, none, 3.25},
		{"gpuwarden_host_memory_used_bytes", gauge, none, 32 * gib},
		{"gpuwarden_host_memory_total_bytes", gauge, none, 64 * gib},
		{"gpuwarden_host_disk_read_bytes_per_second", gauge, none, 1 << 20},
		{"gpuwarden_host_disk_write_bytes_per_second", gauge, none, 2 << 20},
		{"gpuwarden_host_network_receive_bytes_per_second", gauge, none, 125000},
		{"gpuwarden_host_network_transmit_bytes_per_second", gauge, none, 250000},
		{"gpuwarden_idle", gauge, none, 1},
		{"gpuwarden_idle_seconds", gauge, none, 600},
		{"gpuwarden_idle_seconds_total", counter, none, 4321.5},
		{"gpuwarden_idle_window_seconds", gauge, none, 1800},
		{"gpuwarden_cost_total", counter, eur, 1234.56},
		{"gpuwarden_cost_forecast", gauge, eur, 2800.10},
		{"gpuwarden_budget_limit", gauge, eur, 2520},
		{"gpuwarden_cost_hourly_rate", gauge, eur, 3.790142},
		{"gpuwarden_diagnosis", gauge, map[string]string{"verdict": "oversized"}, 1},
		{"gpuwarden_diagnosis", gauge, map[string]string{"verdict": "healthy"}, 0},
		{"gpuwarden_diagnosis", gauge, map[string]string{"verdict": "unknown"}, 0},
		{"gpuwarden_notices_total", counter, none, 1},
		{"gpuwarden_agent_start_time_seconds", gauge, none, float64(fixtureNow.Unix() - 3*3600)},
		{"gpuwarden_agent_info", gauge, map[string]string{"node": "gpu-node-1", "driver_version": "580.159.04", "cuda_version": "13.0", "simulated": "false", "cpu_only": "false"}, 1},
	} {
		mf, ok := mfs[tc.name]
		if !ok {
			t.Errorf("%s missing", tc.name)
			continue
		}
		if mf.GetType() != tc.typ {
			t.Errorf("%s type = %v, want %v", tc.name, mf.GetType(), tc.typ)
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

	if n := len(mfs["gpuwarden_diagnosis"].GetMetric()); n != len(verdicts) {
		t.Errorf("gpuwarden_diagnosis has %d series, want one per verdict (%d)", n, len(verdicts))
	}
	for name, mf := range mfs {
		if strings.HasPrefix(name, "gpuwarden_") && mf.GetHelp() == "" {
			t.Errorf("%s has no help text", name)
		}
	}
	if _, ok := mfs["go_goroutines"]; !ok {
		t.Error("go_goroutines missing: the Go collector is not registered")
	}
	if _, ok := mfs["process_resident_memory_bytes"]; !ok && runtime.GOOS == "linux" {
		t.Error("process_resident_memory_bytes missing: the process collector is not registered")
	}
}

// TestMetricsFollowConventions runs promlint, which checks suffixes, units
// and help texts the way promtool check metrics does.
func TestMetricsFollowConventions(t *testing.T) {
	mfs, err := newRegistry(fixtureStatus, nil).Gather()
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

// TestMetricsHaveNoStaleSeries: a GPU that goes away, a budget that is
// dropped and a new verdict show at the next scrape, with nothing left over.
func TestMetricsHaveNoStaleSeries(t *testing.T) {
	agent := newFakeAgent(fixtureStatus())
	_, base := startServer(t, agent)
	scrape(t, base)

	st := fixtureStatus()
	st.GPUs, st.Last.GPUs = st.GPUs[:1], st.Last.GPUs[:1]
	st.Budget = fixtureStatus().Budget
	st.Budget.Currency, st.Budget.Limit = "USD", 0
	st.Diagnosis.Verdict = "thermal-bound" // newer than this package's list
	st.Idle.Idle = false
	agent.setStatus(st)
	mfs := scrape(t, base)

	if n := len(mfs["gpuwarden_gpu_utilization_ratio"].GetMetric()); n != 1 {
		t.Errorf("gpuwarden_gpu_utilization_ratio has %d series after a GPU went away, want 1", n)
	}
	if _, ok := series(mfs["gpuwarden_cost_total"], map[string]string{"currency": "EUR"}); ok {
		t.Error("gpuwarden_cost_total{currency=EUR} still present after the currency changed")
	}
	if _, ok := mfs["gpuwarden_budget_limit"]; ok {
		t.Error("gpuwarden_budget_limit present without a limit")
	}
	if m, ok := series(mfs["gpuwarden_diagnosis"], map[string]string{"verdict": "thermal-bound"}); !ok || m.GetGauge().GetValue() != 1 {
		t.Error("an unknown verdict is not exposed as 1")
	}
	if m, _ := series(mfs["gpuwarden_idle_seconds"], map[string]string{}); m.GetGauge().GetValue() != 0 {
		t.Errorf("gpuwarden_idle_seconds = %v while busy, want 0", m.GetGauge().GetValue())
	}
}

// TestMetricsBeforeFirstSample: no host series and no GPU series rather
// than zeros that would look like a dead box.
func TestMetricsBeforeFirstSample(t *testing.T) {
	st := fixtureStatus()
	st.Last = gpuwarden.NodeSample{}
	_, base := startServer(t, newFakeAgent(st))
	mfs := scrape(t, base)
	for _, name := range []string{"gpuwarden_host_cpu_utilization_ratio", "gpuwarden_gpu_utilization_ratio"} {
		if _, ok := mfs[name]; ok {
			t.Errorf("%s present before the first sample", name)
		}
	}
	if _, ok := mfs["gpuwarden_idle"]; !ok {
		t.Error("gpuwarden_idle missing: policy state exists before the first sample")
	}
}

// TestMetricsGolden pins the exposition of the fixture; refresh it with
// go test ./http/ -run Golden -update after a deliberate change.
func TestMetricsGolden(t *testing.T) {
	_, base := startServer(t, newFakeAgent(fixtureStatus()))
	mfs := scrape(t, base)
	var buf bytes.Buffer
	for _, name := range slices.Sorted(maps.Keys(mfs)) {
		if !strings.HasPrefix(name, "gpuwarden_") || name == "gpuwarden_build_info" {
			continue // go_, process_ and build series change with every run and toolchain
		}
		if _, err := expfmt.MetricFamilyToText(&buf, mfs[name]); err != nil {
			t.Fatal(err)
		}
	}
	golden := filepath.Join("testdata", "metrics.golden")
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

// lineDiff lists the lines only one side has, enough to read a golden miss.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var out strings.Builder
	for _, l := range w {
		if !slices.Contains(g, l) {
			out.WriteString("- " + l + "\n")
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			out.WriteString("+ " + l + "\n")
		}
	}
	return out.String()
}

// BenchmarkMetricsScrape measures one /metrics answer for a box with eight
// GPUs without the network: the whole page (Go and process collectors
// included, as Prometheus sees it) and the agent's own series alone.
func BenchmarkMetricsScrape(b *testing.B) {
	st := fixtureStatusN(8)
	status := func() gpuwarden.AgentStatus { return st }
	b.Run("full", func(b *testing.B) { benchScrape(b, NewServer(status, nil, nil).Handler()) })
	b.Run("gpuwarden_only", func(b *testing.B) { benchGather(b, statusCollector{status: status}) })
}

// benchScrape serves /metrics from h once per iteration.
func benchScrape(b *testing.B, h nethttp.Handler) {
	req := httptest.NewRequest("GET", "http://127.0.0.1:7070/metrics", nil)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatalf("status %d", rec.Code)
		}
	}
}

// benchGather gathers c alone and writes it as text once per iteration.
func benchGather(b *testing.B, c prometheus.Collector) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	b.ReportAllocs()
	for b.Loop() {
		mfs, err := reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		var buf bytes.Buffer
		for _, mf := range mfs {
			if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
				b.Fatal(err)
			}
		}
	}
}
