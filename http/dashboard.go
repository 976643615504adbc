package http

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	nethttp "net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// The dashboard's files are embedded so that the agent is one binary that
// needs no network: no CDN, no framework, nothing to fetch at run time.
//
//go:embed assets
var assets embed.FS

const (
	styleCSS = "style.css"
	scriptJS = "refresh.js"
)

// Dashboard tuning: what the charts span, how finely they are drawn, and how
// often the page refreshes itself.
const (
	chartWindow     = time.Hour
	chartBuckets    = 240 // one point per 15 s over the hour: smooth, and a small page
	chartGapBuckets = 8   // two minutes without samples break the line rather than bridge it
	refreshSeconds  = 5
	maxEvents       = 10
	historyTimeout  = 3 * time.Second
)

// dashboardTmpl is parsed on the first page served, not at package init,
// so that an agent started with --listen "" never pays for it.
var dashboardTmpl = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("dashboard.html").ParseFS(assets, "assets/dashboard.html"))
})

// assetVersion is a hash of the file, put in its URL so that browsers may
// cache it for long and still see a new build at once.
func assetVersion(name string) string {
	b, err := assets.ReadFile("assets/" + name)
	if err != nil {
		panic(fmt.Sprintf("embedded asset %s: %v", name, err)) // a build without its assets is a bug
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

var (
	styleURL  = "/assets/" + styleCSS + "?v=" + assetVersion(styleCSS)
	scriptURL = "/assets/" + scriptJS + "?v=" + assetVersion(scriptJS)
)

func serveAsset(name, contentType string) nethttp.HandlerFunc {
	body, _ := assets.ReadFile("assets/" + name)
	return func(w nethttp.ResponseWriter, r *nethttp.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Cache-Control", "public, max-age=86400")
		_, _ = w.Write(body)
	}
}

// dashboardView is everything the template shows, formatted in Go so that
// the template stays free of arithmetic and every value goes through
// html/template's escaping as plain text.
type dashboardView struct {
	Node, Now, NowISO, Uptime, Started string
	Simulated, CPUOnly                 bool
	Driver                             string
	GPUs                               []gpuRow
	Host                               *hostRow
	Idle                               idleView
	Budget                             budgetView
	Diagnosis                          diagnosisView
	Events                             []eventRow
	Notices                            []noticeRow
	Jobs                               []jobRow
	Charts                             []chart
	// Saved is this month's savings from the agent's ledger.
	Saved        savedView
	HistoryError string
	// Warnings are what the agent cannot see: telemetry lost, no Xid source.
	Warnings []string
	// GPUsUnknown: the driver has not answered yet, so "no GPUs" would be a guess.
	GPUsUnknown         bool
	StyleURL, ScriptURL string
	Refresh             int
}

type gpuRow struct {
	Index                       int
	Model, UUID                 string
	HasSample                   bool
	Util, MemUtil               string
	UtilValue, MemValue         string
	Memory, Power, Temp, Clocks string
	Processes                   []string
	// ProcessesUnknown says why the process list could not be read.
	ProcessesUnknown string
	Throttle         []string
	Throttled        bool
	MIG              []migRow
}

// migRow is one MIG instance under its GPU.
type migRow struct {
	Name, Profile, UUID string
	Util, Memory        string
	MemValue            string
	Processes           []string
	ProcessesUnknown    string
}

type hostRow struct {
	CPU, IOWait, Load, Memory, Disk, Net string
	Sessions                             int
}

type idleView struct {
	Idle                    bool
	For, Window             string
	Progress                string
	StopAt, StopISO, StopIn string
	DryRun                  bool
	// StoppedInDryRun: the stop time passed in a dry run, which stopped nothing.
	StoppedInDryRun bool
	Busy            []string
}

type budgetView struct {
	Present                       bool
	Month, Spent, Forecast, Limit string
	Rate                          string
	// NoRate: the box's hourly rate is not set, so spend counts nothing.
	NoRate                       bool
	HasLimit, Over, ForecastOver bool
	SpentShare                   string
	SpentWidth, ForecastX        string
}

type diagnosisView struct {
	Verdict, Class, Detail, Window string
	GPUUtil, GPUMem, CPU, IOWait   string
}

type eventRow struct {
	Time, ISO, Severity, Kind, Message string
}

type noticeRow struct {
	Provider, Kind, At, Detail, ID string
	Over                           bool
}

// jobRow is one supervised job and what of its checkpoints is durable.
type jobRow struct {
	ID, State, Durable string
	NotDurable         bool
}

// chart is one server-rendered SVG line chart; coordinates are strings so
// the template only places them.
type chart struct {
	ID, Title      string
	Width, Height  int
	X0, X1, Y0, Y1 int
	Series         []chartSeries
	YTicks, XTicks []chartTick
	Empty          bool
}

type chartSeries struct {
	Name, Class, Last string
	Lines             []string
}

type chartTick struct {
	Pos   int
	Label string
}

func (s *Server) handleDashboard(w nethttp.ResponseWriter, r *nethttp.Request) {
	st := s.status()
	now := st.Now
	if now.IsZero() {
		now = s.now()
	}
	// A slow ledger must not hold the whole page: the charts are the only
	// part that needs it, and they can say they are missing.
	ctx, cancel := context.WithTimeout(r.Context(), historyTimeout)
	samples, err := s.history(ctx, now.Add(-chartWindow))
	cancel()
	v := buildView(st, now, samples)
	v.Saved = s.buildSaved(r.Context(), now)
	if err != nil {
		s.log.Warn("dashboard history", "error", err)
		v.HistoryError = "history unavailable: " + err.Error()
		v.Charts = nil
	}
	var buf bytes.Buffer
	if err := dashboardTmpl().Execute(&buf, v); err != nil {
		s.writeError(w, fmt.Errorf("render dashboard: %w", err))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}

func buildView(st gpuwarden.AgentStatus, now time.Time, samples []gpuwarden.NodeSample) dashboardView {
	v := dashboardView{
		Node:      st.Node,
		Now:       now.Format("2006-01-02 15:04:05 MST"),
		NowISO:    now.Format(time.RFC3339),
		Simulated: st.Simulated,
		CPUOnly:   st.CPUOnly,
		StyleURL:  styleURL,
		ScriptURL: scriptURL,
		Refresh:   refreshSeconds,
	}
	if v.Node == "" {
		v.Node = "(unnamed node)"
	}
	if !st.Started.IsZero() {
		v.Uptime = fmtDuration(now.Sub(st.Started))
		v.Started = st.Started.Format("2006-01-02 15:04 MST")
	}
	if st.Driver != nil && st.Driver.Version != "" {
		v.Driver = "driver " + st.Driver.Version
		if st.Driver.CUDAVersion != "" {
			v.Driver += ", CUDA " + st.Driver.CUDAVersion
		}
	}
	v.GPUs = gpuRows(st)
	if !st.Last.Time.IsZero() || !st.Last.Host.Time.IsZero() {
		h := st.Last.Host
		v.Host = &hostRow{
			CPU:      fmtPct(h.CPUPercent),
			IOWait:   fmtPct(h.IOWaitPercent),
			Load:     strconv.FormatFloat(h.Load1, 'f', 2, 64),
			Memory:   fmtBytes(float64(h.MemUsedBytes)) + " / " + fmtBytes(float64(h.MemTotalBytes)),
			Disk:     "read " + fmtBytes(h.DiskReadBps) + "/s, write " + fmtBytes(h.DiskWriteBps) + "/s",
			Net:      "in " + fmtBytes(h.NetRxBps) + "/s, out " + fmtBytes(h.NetTxBps) + "/s",
			Sessions: h.Sessions,
		}
	}
	v.Idle = buildIdle(st, now)
	v.Budget = buildBudget(st.Budget)
	v.Diagnosis = buildDiagnosis(st.Diagnosis)
	v.Events = buildEvents(st.Events, now)
	for _, n := range st.Notices {
		row := noticeRow{Provider: n.Provider, Kind: n.Kind, At: "not given", Detail: n.Detail, ID: n.ID, Over: n.Canceled}
		if !n.At.IsZero() {
			row.At = fmtWhen(n.At, now)
		}
		v.Notices = append(v.Notices, row)
	}
	for _, j := range st.Jobs {
		v.Jobs = append(v.Jobs, jobRow{ID: j.ID, State: j.State, Durable: gpuwarden.DescribeSync(j.Sync, now),
			NotDurable: j.Sync != nil && !j.Sync.Durable && j.Sync.NewestCommitted != ""})
	}
	v.Charts = buildCharts(st, samples, now)
	v.Warnings = st.Warnings
	v.GPUsUnknown = !st.CPUOnly && len(st.GPUs) == 0 && st.Telemetry.Failures > 0
	return v
}

// unknownCell is what a table shows for a field the driver did not give:
// the word and the reason, never a 0 that reads like an idle card.
func unknownCell(reason string) string {
	return "unknown (" + gpuwarden.UnknownText(reason) + ")"
}

// processList names processes for a table cell.
func processList(ps []gpuwarden.GPUProcess) []string {
	var out []string
	for _, p := range ps {
		name := p.Name
		if name == "" {
			name = "?"
		}
		out = append(out, fmt.Sprintf("%s (pid %d, %s)", name, p.PID, fmtBytes(float64(p.UsedBytes))))
	}
	return out
}

// migRows are a GPU's MIG instances for the table.
func migRows(t gpuwarden.Telemetry) []migRow {
	var rows []migRow
	for _, m := range t.MIG {
		r := migRow{Name: fmt.Sprintf("%d/%d", t.Index, m.Index), Profile: m.Profile, UUID: m.UUID}
		if r.Util = unknownCell(m.Unknown[gpuwarden.FieldUtil]); m.Known(gpuwarden.FieldUtil) {
			r.Util = fmtPct(m.UtilPercent)
		}
		if r.Memory = unknownCell(m.Unknown[gpuwarden.FieldMemUsed]); m.Known(gpuwarden.FieldMemUsed) {
			r.Memory = fmtBytes(float64(m.MemUsedBytes)) + " / " + fmtBytes(float64(m.MemTotalBytes))
			if m.MemTotalBytes > 0 {
				r.MemValue = fmtNum(clamp(100*float64(m.MemUsedBytes)/float64(m.MemTotalBytes), 0, 100))
			}
		}
		if m.Known(gpuwarden.FieldProcesses) {
			r.Processes = processList(m.Processes)
		} else {
			r.ProcessesUnknown = unknownCell(m.Unknown[gpuwarden.FieldProcesses])
		}
		rows = append(rows, r)
	}
	return rows
}

func gpuRows(st gpuwarden.AgentStatus) []gpuRow {
	tel := make(map[int]gpuwarden.Telemetry, len(st.Last.GPUs))
	for _, t := range st.Last.GPUs {
		tel[t.Index] = t
	}
	rows := make([]gpuRow, 0, len(st.GPUs))
	for _, g := range st.GPUs {
		row := gpuRow{Index: g.Index, Model: modelOf(g), UUID: g.UUID}
		t, ok := tel[g.Index]
		if !ok {
			rows = append(rows, row)
			continue
		}
		total := t.MemTotalBytes
		if total == 0 {
			total = g.VRAMBytes
		}
		row.HasSample = true
		// A field the driver did not give shows as unknown with the reason
		// and no meter, never as a 0.
		unknown := func(field string) (string, bool) {
			r, ok := t.Unknown[field]
			return unknownCell(r), ok
		}
		if row.Util, ok = unknown(gpuwarden.FieldUtil); !ok {
			row.Util, row.UtilValue = fmtPct(t.UtilPercent), fmtNum(clamp(t.UtilPercent, 0, 100))
		}
		if row.MemUtil, ok = unknown(gpuwarden.FieldMemUtil); !ok {
			row.MemUtil = fmtPct(t.MemUtilPercent)
		}
		if row.Memory, ok = unknown(gpuwarden.FieldMemUsed); !ok {
			if total > 0 {
				row.MemValue = fmtNum(clamp(100*float64(t.MemUsedBytes)/float64(total), 0, 100))
			}
			row.Memory = fmtBytes(float64(t.MemUsedBytes)) + " / " + fmtBytes(float64(total))
		}
		if row.Power, ok = unknown(gpuwarden.FieldPower); !ok {
			row.Power = fmt.Sprintf("%.0f W", t.PowerWatts)
			if g.PowerLimitWatts > 0 {
				row.Power += fmt.Sprintf(" / %.0f W", g.PowerLimitWatts)
			}
		}
		if row.Temp, ok = unknown(gpuwarden.FieldTemp); !ok {
			row.Temp = fmt.Sprintf("%.0f °C", t.TempC)
		}
		if row.Clocks, ok = unknown(gpuwarden.FieldSMClock); !ok {
			row.Clocks = fmt.Sprintf("SM %d MHz, mem %d MHz", t.SMClockMHz, t.MemClockMHz)
		}
		if why, unread := unknown(gpuwarden.FieldProcesses); unread {
			row.ProcessesUnknown = why
		} else {
			row.Processes = processList(t.Processes)
		}
		row.MIG = migRows(t)
		row.Throttle = t.ThrottleReasons
		row.Throttled = throttled(t.ThrottleReasons)
		rows = append(rows, row)
	}
	return rows
}

func buildIdle(st gpuwarden.AgentStatus, now time.Time) idleView {
	i := st.Idle
	v := idleView{Idle: i.Idle, DryRun: i.DryRun, Busy: i.Busy}
	if i.WindowSeconds > 0 {
		v.Window = fmtDuration(time.Duration(i.WindowSeconds * float64(time.Second)))
	}
	if i.Idle {
		d := idleFor(st)
		v.For = fmtDuration(d)
		if i.WindowSeconds > 0 {
			v.Progress = fmtNum(clamp(100*d.Seconds()/i.WindowSeconds, 0, 100))
		}
	}
	if !i.StopAt.IsZero() {
		v.StopAt = fmtWhen(i.StopAt, now)
		v.StopISO = i.StopAt.Format(time.RFC3339)
		switch left := i.StopAt.Sub(now); {
		case left > 0:
			v.StopIn = "in " + fmtDuration(left)
		case i.DryRun:
			// A dry run never stops the box, so the time is past, not due.
			v.StoppedInDryRun = true
		default:
			v.StopIn = "due now"
		}
	}
	return v
}

func buildBudget(b gpuwarden.BudgetState) budgetView {
	if b.Currency == "" {
		return budgetView{}
	}
	cur := b.Currency
	v := budgetView{
		Present:  true,
		Month:    b.Month,
		Spent:    cur.Format(b.Spent),
		Forecast: cur.Format(b.Forecast),
		Rate:     cur.FormatRate(b.HourlyRate, "h"),
		NoRate:   b.HourlyRate == 0,
	}
	if b.Limit > 0 {
		lim := float64(b.Limit)
		v.HasLimit = true
		v.Limit = cur.Format(b.Limit)
		v.Over = b.Spent > b.Limit
		v.ForecastOver = b.Forecast > b.Limit
		v.SpentShare = fmt.Sprintf("%.0f%%", 100*float64(b.Spent)/lim)
		v.SpentWidth = fmtNum(clamp(100*float64(b.Spent)/lim, 0, 100))
		v.ForecastX = fmtNum(clamp(100*float64(b.Forecast)/lim, 0, 100))
	}
	return v
}

func buildDiagnosis(d gpuwarden.Diagnosis) diagnosisView {
	v := diagnosisView{Verdict: d.Verdict, Detail: d.Detail}
	if v.Verdict == "" {
		v.Verdict = "unknown"
	}
	switch v.Verdict {
	case "healthy":
		v.Class = "ok"
	case "unknown":
		v.Class = "muted"
	default:
		v.Class = "warn"
	}
	if d.WindowSeconds > 0 {
		v.Window = fmtDuration(time.Duration(d.WindowSeconds * float64(time.Second)))
		v.GPUUtil, v.GPUMem = fmtPct(d.GPUUtilAvg), fmtPct(d.GPUMemAvg)
		v.CPU, v.IOWait = fmtPct(d.CPUAvg), fmtPct(d.IOWaitAvg)
	}
	return v
}

// buildEvents shows the newest first whatever order the agent keeps them in.
func buildEvents(events []gpuwarden.Event, now time.Time) []eventRow {
	es := slices.Clone(events)
	slices.SortStableFunc(es, func(a, b gpuwarden.Event) int { return b.Time.Compare(a.Time) })
	if len(es) > maxEvents {
		es = es[:maxEvents]
	}
	rows := make([]eventRow, 0, len(es))
	for _, e := range es {
		sev := e.Severity
		if sev == "" {
			sev = gpuwarden.SeverityInfo
		}
		rows = append(rows, eventRow{Time: fmtWhen(e.Time, now), ISO: e.Time.Format(time.RFC3339), Severity: sev, Kind: e.Kind, Message: e.Message})
	}
	return rows
}

// buildCharts draws GPU utilisation per card and host CPU and I/O wait over
// the last hour, all in percent so that one axis fits every line.
func buildCharts(st gpuwarden.AgentStatus, samples []gpuwarden.NodeSample, now time.Time) []chart {
	start := now.Add(-chartWindow)
	var indices []int
	names := map[int]string{}
	for _, g := range st.GPUs {
		if g.MIG {
			// The ledger keeps numbers only, and a MIG GPU has no device
			// utilization: its history would draw an unknown as 0 %.
			names[g.Index] = ""
			continue
		}
		indices = append(indices, g.Index)
		names[g.Index] = fmt.Sprintf("GPU %d %s", g.Index, modelOf(g))
	}
	for _, s := range samples {
		for _, t := range s.GPUs {
			if _, ok := names[t.Index]; !ok {
				indices = append(indices, t.Index)
				names[t.Index] = fmt.Sprintf("GPU %d", t.Index)
			}
		}
	}
	slices.Sort(indices)
	var charts []chart
	if len(indices) > 0 {
		var series []seriesSpec
		for _, idx := range indices {
			series = append(series, seriesSpec{name: names[idx], value: func(s gpuwarden.NodeSample) (float64, bool) {
				for _, t := range s.GPUs {
					if t.Index == idx {
						return t.UtilPercent, t.Known(gpuwarden.FieldUtil)
					}
				}
				return 0, false
			}})
		}
		charts = append(charts, lineChart("chart-gpu", "GPU utilisation, last hour (%)", start, now, samples, series))
	}
	charts = append(charts, lineChart("chart-cpu", "Host CPU and I/O wait, last hour (%)", start, now, samples, []seriesSpec{
		{name: "CPU", value: func(s gpuwarden.NodeSample) (float64, bool) { return s.Host.CPUPercent, true }},
		{name: "I/O wait", value: func(s gpuwarden.NodeSample) (float64, bool) { return s.Host.IOWaitPercent, true }},
	}))
	return charts
}

type seriesSpec struct {
	name  string
	value func(gpuwarden.NodeSample) (float64, bool)
}

// lineChart averages samples into fixed time buckets so that an hour at
// 1 Hz becomes a few hundred points, and breaks lines across gaps so that a
// stopped agent is not drawn as a flat line.
func lineChart(id, title string, start, end time.Time, samples []gpuwarden.NodeSample, specs []seriesSpec) chart {
	c := chart{ID: id, Title: title, Width: 640, Height: 180, X0: 40, X1: 630, Y0: 10, Y1: 150, Empty: true}
	span := end.Sub(start)
	xOf := func(b int) float64 {
		return float64(c.X0) + (float64(b)+0.5)/chartBuckets*float64(c.X1-c.X0)
	}
	yOf := func(v float64) float64 {
		return float64(c.Y1) - clamp(v, 0, 100)/100*float64(c.Y1-c.Y0)
	}
	for i, spec := range specs {
		var sum [chartBuckets]float64
		var n [chartBuckets]int
		lastVal, haveLast := 0.0, false
		for _, s := range samples {
			if s.Time.Before(start) || s.Time.After(end) || span <= 0 {
				continue
			}
			val, ok := spec.value(s)
			if !ok {
				continue
			}
			b := int(float64(s.Time.Sub(start)) / float64(span) * chartBuckets)
			b = min(max(b, 0), chartBuckets-1)
			sum[b] += val
			n[b]++
			lastVal, haveLast = val, true
		}
		cs := chartSeries{Name: spec.name, Class: "s" + strconv.Itoa(i%8)}
		if haveLast {
			cs.Last = fmtPct(lastVal)
		}
		var line strings.Builder
		prev := -1
		points := 0
		flush := func() {
			if points > 0 {
				cs.Lines = append(cs.Lines, line.String())
			}
			line.Reset()
			points = 0
		}
		for b := range chartBuckets {
			if n[b] == 0 {
				continue
			}
			if prev >= 0 && b-prev > chartGapBuckets {
				flush()
			}
			if points > 0 {
				line.WriteByte(' ')
			}
			fmt.Fprintf(&line, "%.1f,%.1f", xOf(b), yOf(sum[b]/float64(n[b])))
			points++
			prev = b
		}
		flush()
		if len(cs.Lines) > 0 {
			c.Empty = false
		}
		c.Series = append(c.Series, cs)
	}
	for _, p := range []float64{0, 50, 100} {
		c.YTicks = append(c.YTicks, chartTick{Pos: int(yOf(p)), Label: fmt.Sprintf("%.0f%%", p)})
	}
	for _, m := range []int{60, 45, 30, 15, 0} {
		frac := 1 - float64(m)/float64(chartWindow/time.Minute)
		label := fmt.Sprintf("−%d min", m)
		if m == 0 {
			label = "now"
		}
		c.XTicks = append(c.XTicks, chartTick{Pos: c.X0 + int(frac*float64(c.X1-c.X0)), Label: label})
	}
	return c
}

func clamp(v, lo, hi float64) float64 { return min(max(v, lo), hi) }

// fmtNum writes a drawing coordinate or meter value: a tenth is finer than
// any screen shows, and shorter numbers keep the page small.
func fmtNum(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func fmtPct(p float64) string { return fmt.Sprintf("%.0f%%", p) }

// fmtBytes uses binary units because that is how nvidia-smi and free count
// GPU and host memory.
func fmtBytes(b float64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%.0f B", b)
	}
	suffixes := []string{"KiB", "MiB", "GiB", "TiB", "PiB"}
	i := -1
	for b >= unit && i < len(suffixes)-1 {
		b /= unit
		i++
	}
	return fmt.Sprintf("%.1f %s", b, suffixes[i])
}

// fmtDuration keeps two units: "3h 04m" says enough at a glance.
func fmtDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm %02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh %02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	default:
		return fmt.Sprintf("%dd %02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
	}
}

// fmtWhen shows only the clock for today, and the date too for other days,
// in the zone of the agent's clock.
func fmtWhen(t, now time.Time) string {
	t = t.In(now.Location())
	if y, m, d := t.Date(); y == now.Year() && m == now.Month() && d == now.Day() {
		return t.Format("15:04:05")
	}
	return t.Format("Jan 02 15:04")
}
