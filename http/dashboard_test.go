package http

import (
	"errors"
	nethttp "net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

func TestDashboardRendersTheFixture(t *testing.T) {
	_, base := startServer(t, newFakeAgent(fixtureStatus()))
	resp, body := get(t, "GET", base+"/")
	if resp.StatusCode != nethttp.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("Content-Type = %q", ct)
	}
	checkSecurityHeaders(t, resp)
	page := string(body)
	for _, want := range []string{
		"gpu-node-1",                   // header
		"up 3h 00m",                    // uptime
		"driver 580.159.04, CUDA 13.0", // driver
		"GPU-0000aaaa", "GPU-1111bbbb", // both GPUs
		"412 W / 700 W", "61 °C", // power, temperature
		"SM 1980 MHz, mem 3201 MHz",                          // clocks
		"python (pid 4242, 60.0 GiB)",                        // processes
		"sw_power_cap",                                       // throttle
		"64.0 GiB / 141.0 GiB",                               // memory
		"idle for 10m 00s",                                   // idle clock
		"of 30m 00s",                                         // idle window
		"stop at <time",                                      // stop time
		"(in 20m 00s)",                                       //
		"dry run",                                            //
		"€1,234.56", "€2,800.10", "€2,520.00", "€3.790142/h", // spend, forecast, limit, rate
		`class="bar-forecast over"`,    // forecast beyond the limit
		"oversized",                    // verdict
		"a smaller card fits this job", // verdict detail
		"forecast €2,800.10 is over",   // an event
		"MIGRATE_ON_HOST_MAINTENANCE",  // a notice
		"Last durable checkpoint",      // the supervised jobs
		"last durable checkpoint: step 120, 12m0s old, s3://ckpts/job/000006-step-000120",
		"NOT DURABLE: the newest committed, 000007-step-000140, is only on this box",
		"<svg", "<polyline", // charts
		"GPU 0 H200", "GPU 1 H200", // chart legend
	} {
		if !strings.Contains(page, want) {
			t.Errorf("dashboard lacks %q", want)
		}
	}
	if strings.Contains(page, "simulated GPUs") {
		t.Error("dashboard flags real GPUs as simulated")
	}
	// Every script is an external file from this origin, so the CSP holds.
	for _, tag := range regexp.MustCompile(`<script[^>]*>`).FindAllString(page, -1) {
		if !strings.Contains(tag, `src="/assets/`) {
			t.Errorf("inline or foreign script %s", tag)
		}
	}
	if strings.Count(page, "<svg") != strings.Count(page, "</svg>") {
		t.Error("unbalanced <svg> elements")
	}
	if strings.Contains(page, "style=") {
		t.Error("inline style attribute: the CSP blocks it")
	}
}

func TestDashboardEscapesEverything(t *testing.T) {
	const hostile = `<script>alert(1)</script>`
	st := fixtureStatus()
	st.Node = hostile
	st.Diagnosis.Detail = hostile
	st.Events[0].Message = hostile
	st.Events[0].Severity = `x" onmouseover="alert(1)`
	st.Notices[0].Detail = `<img src=x onerror=alert(1)>`
	st.Last.GPUs[0].Processes[0].Name = hostile
	st.GPUs[0].Model = `"><svg onload=alert(1)>`
	_, base := startServer(t, newFakeAgent(st))
	_, body := get(t, "GET", base+"/")
	page := string(body)
	for _, bad := range []string{"<script>alert", "<img src=x", `"><svg onload`, `" onmouseover="`} {
		if strings.Contains(page, bad) {
			t.Errorf("dashboard contains unescaped %q", bad)
		}
	}
	if !strings.Contains(page, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Error("hostile node name is not shown escaped")
	}
}

func TestDashboardWithoutData(t *testing.T) {
	agent := newFakeAgent(gpuwarden.AgentStatus{CPUOnly: true, Simulated: true})
	agent.samples = nil
	_, base := startServer(t, agent)
	resp, body := get(t, "GET", base+"/")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	page := string(body)
	for _, want := range []string{"(unnamed node)", "CPU only", "simulated GPUs", "No GPUs on this node", "No budget configured", "no samples in the last hour", "unknown"} {
		if !strings.Contains(page, want) {
			t.Errorf("empty dashboard lacks %q", want)
		}
	}
}

func TestDashboardSurvivesAFailingLedger(t *testing.T) {
	agent := newFakeAgent(fixtureStatus())
	agent.historyErr = errors.New("database is locked")
	_, base := startServer(t, agent)
	resp, body := get(t, "GET", base+"/")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d, want the page without charts", resp.StatusCode)
	}
	if page := string(body); !strings.Contains(page, "history unavailable: database is locked") || !strings.Contains(page, "gpu-node-1") {
		t.Error("page does not say the history is missing, or lost the rest")
	}
}

func TestDashboardAsksForTheLastHour(t *testing.T) {
	agent := newFakeAgent(fixtureStatus())
	_, base := startServer(t, agent)
	get(t, "GET", base+"/")
	if got, want := agent.lastSince(), fixtureNow.Add(-time.Hour); !got.Equal(want) {
		t.Errorf("history since %v, want %v", got, want)
	}
}

func TestLineChartBreaksAtGapsAndScales(t *testing.T) {
	now := fixtureNow
	c := lineChart("c", "t", now.Add(-time.Hour), now, fixtureHistory(now), []seriesSpec{
		{name: "GPU 0", value: func(s gpuwarden.NodeSample) (float64, bool) { return s.GPUs[0].UtilPercent, true }},
		{name: "flat", value: func(s gpuwarden.NodeSample) (float64, bool) { return 150, true }},
		{name: "none", value: func(s gpuwarden.NodeSample) (float64, bool) { return 0, false }},
	})
	if c.Empty {
		t.Fatal("chart is empty")
	}
	if got := len(c.Series[0].Lines); got != 2 {
		t.Errorf("a five-minute hole gives %d lines, want 2", got)
	}
	pts := strings.Fields(strings.Join(c.Series[0].Lines, " "))
	if len(pts) > chartBuckets {
		t.Errorf("%d points, want at most %d", len(pts), chartBuckets)
	}
	y := func(p string) float64 {
		_, v, _ := strings.Cut(p, ",")
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("point %q: %v", p, err)
		}
		return f
	}
	if first, last := y(pts[0]), y(pts[len(pts)-1]); first < 148 || first > 150 || last < 10 || last > 12 {
		t.Errorf("ramp 0→100%% drawn from y=%v to y=%v, want from the bottom (150) to the top (10)", first, last)
	}
	for _, p := range strings.Fields(c.Series[1].Lines[0]) {
		if !strings.HasSuffix(p, ",10.0") {
			t.Fatalf("150%% drawn at %s, want clamped to the top (y=10.0)", p)
		}
	}
	if c.Series[2].Lines != nil || c.Series[2].Last != "" {
		t.Errorf("a series without values drew %v", c.Series[2].Lines)
	}
	if c.Series[0].Last != "100%" {
		t.Errorf("last value = %q, want 100%%", c.Series[0].Last)
	}
}

func TestFormatting(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{fmtDuration(0), "0s"},
		{fmtDuration(59 * time.Second), "59s"},
		{fmtDuration(61 * time.Second), "1m 01s"},
		{fmtDuration(3*time.Hour + 4*time.Minute), "3h 04m"},
		{fmtDuration(50 * time.Hour), "2d 02h"},
		{fmtDuration(-time.Second), "0s"},
		{fmtBytes(512), "512 B"},
		{fmtBytes(1536), "1.5 KiB"},
		{fmtBytes(141 * gib), "141.0 GiB"},
		{fmtWhen(fixtureNow.Add(-time.Hour), fixtureNow), "11:00:00"},
		{fmtWhen(fixtureNow.Add(-25*time.Hour), fixtureNow), "Nov 28 11:00"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// A box with no rate says so instead of "$0.00/h", and a dry run past its
// stop time says what it would have done instead of "due now" forever.
func TestDashboardSaysNoRateAndDryRunStop(t *testing.T) {
	st := fixtureStatus()
	st.Budget.HourlyRate = 0
	st.Idle.DryRun = true
	st.Idle.StopAt = fixtureNow.Add(-time.Minute)
	_, base := startServer(t, newFakeAgent(st))
	_, body := get(t, "GET", base+"/")
	page := string(body)
	for _, want := range []string{"no rate set", "gpuwarden up --rate", "dry run: would have stopped at"} {
		if !strings.Contains(page, want) {
			t.Errorf("dashboard lacks %q", want)
		}
	}
	for _, bad := range []string{"€0.000000/h", "due now"} {
		if strings.Contains(page, bad) {
			t.Errorf("dashboard shows %q", bad)
		}
	}
}
