package http

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// TestDashboardShowsUnknown: a field the driver did not give reads
// "unknown" with why, MIG instances get their rows, and what the agent
// cannot see is a warning at the top; the old page showed 0 %.
func TestDashboardShowsUnknown(t *testing.T) {
	st := fixtureStatus()
	g := &st.Last.GPUs[0]
	g.UtilPercent, g.Processes = 0, nil
	g.SetUnknown(gpuwarden.FieldUtil, gpuwarden.UnknownMIG)
	g.SetUnknown(gpuwarden.FieldProcesses, gpuwarden.UnknownNoPermission)
	inst := gpuwarden.MIGSample{MIGInstance: gpuwarden.MIGInstance{Index: 1, UUID: "MIG-1", Profile: "3g.71gb", MemTotalBytes: 71 << 30},
		MemUsedBytes: 20 << 30, Processes: []gpuwarden.GPUProcess{{PID: 4711, Name: "trainer"}}}
	inst.SetUnknown(gpuwarden.FieldUtil, gpuwarden.UnknownNotSupported)
	g.MIG = []gpuwarden.MIGSample{inst}
	st.Warnings = []string{"Xid source unavailable: no Xid would be seen (kmsg unavailable)"}
	_, base := startServer(t, newFakeAgent(st))
	_, body := get(t, "GET", base+"/")
	page := string(body)
	for _, want := range []string{"unknown (not supported under MIG)", "unknown (no permission)", "MIG 3g.71gb", "0/1",
		"trainer (pid 4711", "unknown (not supported)", "What the agent cannot see", "Xid source unavailable: no Xid would be seen"} {
		if !strings.Contains(page, want) {
			t.Errorf("dashboard lacks %q", want)
		}
	}
}

// TestDashboardGPUsUnknown: while the driver has not answered, the page
// says the GPUs are unknown rather than that the node has none.
func TestDashboardGPUsUnknown(t *testing.T) {
	st := fixtureStatus()
	st.GPUs, st.Last.GPUs = nil, nil
	st.Telemetry = gpuwarden.TelemetryState{Lost: true, Failures: 3}
	_, base := startServer(t, newFakeAgent(st))
	_, body := get(t, "GET", base+"/")
	page := string(body)
	if !strings.Contains(page, "GPUs unknown") || strings.Contains(page, "No GPUs on this node") {
		t.Errorf("dashboard with an unanswering driver does not say the GPUs are unknown")
	}
}

// TestDashboardChartSkipsMIG: the ledger stores numbers only, so a MIG
// GPU's history would chart its unknown utilization as 0 %; it is left out.
func TestDashboardChartSkipsMIG(t *testing.T) {
	st := fixtureStatus()
	st.GPUs[0].MIG = true
	samples := []gpuwarden.NodeSample{{Time: st.Now.Add(-time.Minute), GPUs: []gpuwarden.Telemetry{{Index: 0}, {Index: 1, UtilPercent: 50}}}}
	charts := buildCharts(st, samples, st.Now)
	if len(charts) == 0 || charts[0].ID != "chart-gpu" {
		t.Fatalf("charts %+v", charts)
	}
	for _, s := range charts[0].Series {
		if strings.HasPrefix(s.Name, "GPU 0") {
			t.Errorf("the MIG GPU is charted: %+v", s)
		}
	}
	if len(charts[0].Series) != 1 {
		t.Errorf("series %+v, want GPU 1 only", charts[0].Series)
	}
}
