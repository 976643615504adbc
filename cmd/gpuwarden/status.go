package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/report"
	"github.com/spf13/cobra"
)

func (a *app) statusCommand() *cobra.Command {
	var addr, output string
	c := &cobra.Command{
		Use:   "status",
		Short: "Show what the agent on this box sees: GPUs, idle clock, spend, diagnosis, alerts",
		Long: `status asks the running agent (gpuwarden up) for one screen: the GPUs and what
they do, the idle clock, the month's spend against the budget, why the GPUs
sleep, and the last alerts and notices.

` + exitCodes("0  the agent answered", "2  bad usage", "3  no agent answers at --addr", "4  internal error"),
		Example: `  gpuwarden status
  gpuwarden status --addr 127.0.0.1:7070 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := outputFormat(output, "table", "json"); err != nil {
				return err
			}
			st, raw, err := fetchStatus(cmd.Context(), addr)
			if err != nil {
				return err
			}
			if output == "json" {
				return writeJSONBytes(a.stdout, "status", raw)
			}
			return statusScreen(a.stdout, st, fetchSaved(cmd.Context(), addr))
		},
	}
	c.Flags().StringVar(&addr, "addr", "127.0.0.1:7070", "`ADDR` the agent listens on")
	c.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return c
}

func fetchStatus(ctx context.Context, addr string) (gpuwarden.AgentStatus, []byte, error) {
	var st gpuwarden.AgentStatus
	raw, err := agentGet(ctx, addr, "/api/v1/status")
	if err != nil {
		return st, nil, err
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return st, nil, fmt.Errorf("read the agent's status: %w", err)
	}
	return st, raw, nil
}

// agentGet reads one answer of the agent's API at addr, within 3 s and
// 8 MiB; anything but 200 is an error that says what answered.
func agentGet(ctx context.Context, addr, path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "--addr %q: %v", addr, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, gpuwarden.Errorf(gpuwarden.EEnvironment, "no agent answers at %s", addr).
			WithHint("start one with: gpuwarden up (or check --addr)")
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("agent at %s answered %s", addr, resp.Status)
	}
	return raw, nil
}

// fetchSaved asks the agent what it saved this month; nil when it keeps no
// savings ledger or is older than the savings API, so that status still
// shows everything else.
func fetchSaved(ctx context.Context, addr string) *report.SavingsReport {
	raw, err := agentGet(ctx, addr, "/api/v1/savings")
	if err != nil {
		return nil
	}
	var r report.SavingsReport
	if json.Unmarshal(raw, &r) != nil {
		return nil
	}
	return &r
}

// savedLines says what the agent saved this month, one line per currency,
// confirmed and estimated apart: "€126.00 in 2026-12 (€25.20 confirmed,
// €100.80 estimated); 3 events, 1 not saved".
func savedLines(r *report.SavingsReport) []string {
	if r == nil {
		return nil
	}
	month := r.From.UTC().Format("2006-01")
	if len(r.Totals) == 0 {
		return []string{"nothing recorded in " + month + " yet"}
	}
	var out []string
	for _, t := range r.Totals {
		c := t.Currency.Format
		split := c(t.Confirmed) + " confirmed, " + c(t.Estimated) + " estimated"
		if t.Attributed != 0 {
			split += ", " + c(t.Attributed) + " attributed"
		}
		out = append(out, fmt.Sprintf("%s in %s (%s); %d %s, %d not saved",
			c(t.Total), month, split, t.Events, plural(t.Events, "event", "events"), t.NotSaved))
	}
	return out
}

func statusScreen(w io.Writer, st gpuwarden.AgentStatus, saved *report.SavingsReport) error {
	var b strings.Builder
	mode := ""
	switch {
	case st.Simulated:
		mode = " (simulated GPUs)"
	case st.CPUOnly:
		mode = " (CPU only: no NVIDIA driver)"
	}
	fmt.Fprintf(&b, "Node      %s%s, agent up %s\n", st.Node, mode, st.Now.Sub(st.Started).Round(time.Second))
	if len(st.Last.GPUs) > 0 {
		rows := [][]string{{"GPU", "MODEL", "UTIL", "MEMORY", "POWER", "TEMP", "SM CLOCK", "PROCS"}}
		models := map[int]string{}
		for _, g := range st.GPUs {
			models[g.Index] = g.Model
		}
		for _, t := range st.Last.GPUs {
			rows = append(rows, []string{strconv.Itoa(t.Index), models[t.Index],
				known(t.Known(gpuwarden.FieldUtil), "%.0f%%", t.UtilPercent),
				known(t.Known(gpuwarden.FieldMemUsed) && t.Known(gpuwarden.FieldMemTotal), "%.1f/%.0f GiB",
					float64(t.MemUsedBytes)/(1<<30), float64(t.MemTotalBytes)/(1<<30)),
				known(t.Known(gpuwarden.FieldPower), "%.0f W", t.PowerWatts), known(t.Known(gpuwarden.FieldTemp), "%.0f °C", t.TempC),
				known(t.Known(gpuwarden.FieldSMClock), "%d MHz", t.SMClockMHz),
				known(t.Known(gpuwarden.FieldProcesses), "%d", len(t.Processes))})
			// MIG instances follow their GPU: memory and processes are
			// theirs, utilization is GPM's where the card has it.
			for _, m := range t.MIG {
				rows = append(rows, []string{fmt.Sprintf("%d/%d", t.Index, m.Index), "MIG " + m.Profile,
					known(m.Known(gpuwarden.FieldUtil), "%.0f%%", m.UtilPercent),
					known(m.Known(gpuwarden.FieldMemUsed), "%.1f/%.0f GiB", float64(m.MemUsedBytes)/(1<<30), float64(m.MemTotalBytes)/(1<<30)),
					"", "", "", known(m.Known(gpuwarden.FieldProcesses), "%s", migProcs(m.Processes))})
			}
		}
		rightAlign(rows, 2, 3, 4, 5, 6, 7)
		t := newTable(&b)
		for _, r := range rows {
			t.row(r...)
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if len(st.Last.GPUs) == 0 && !st.CPUOnly && st.Telemetry.Failures > 0 {
		fmt.Fprintln(&b, "GPUs      unknown: the driver has not answered")
	}
	if len(st.XIDSources) > 0 {
		fmt.Fprint(&b, wrap(gpuwarden.DescribeXIDSources(st.XIDSources), "Xids      ", pageWidth))
	}
	for _, w := range st.Warnings {
		fmt.Fprint(&b, wrap(w, "Warning   ", pageWidth))
	}
	h := st.Last.Host
	fmt.Fprintf(&b, "Host      CPU %.0f%%, iowait %.0f%%, load %.2f, disk %s/s read %s/s write, %d sessions\n",
		h.CPUPercent, h.IOWaitPercent, h.Load1, bytesIEC(h.DiskReadBps), bytesIEC(h.DiskWriteBps), h.Sessions)
	idle := st.Idle
	window := time.Duration(idle.WindowSeconds * float64(time.Second))
	switch {
	case idle.Idle:
		dry := ""
		if idle.DryRun {
			dry = " (dry run: logs only)"
		}
		fmt.Fprintf(&b, "Idle      for %s of %s; stops at %s%s\n", st.Now.Sub(idle.Since).Round(time.Second), window,
			idle.StopAt.Local().Format("15:04:05"), dry)
	case len(idle.Busy) > 0:
		fmt.Fprint(&b, wrap("busy: "+strings.Join(idle.Busy, ", "), "Idle      ", pageWidth))
	default:
		off := "policy off"
		if idle.OffWhy != "" {
			off += ": " + idle.OffWhy
		}
		fmt.Fprint(&b, wrap(off, "Idle      ", pageWidth))
	}
	if idle.Rule == gpuwarden.IdleRuleHost {
		fmt.Fprint(&b, wrap("no GPU reading here: idle also needs a quiet host (CPU, disk, network)", "          ", pageWidth))
	}
	if r := st.Stop; r != nil && r.Method != "" {
		fmt.Fprint(&b, wrap(stopLine(r, st.Now), "Stop      ", pageWidth))
	}
	bu := st.Budget
	cur := bu.Currency.Format
	if bu.Limit > 0 {
		fmt.Fprintf(&b, "Budget    %s spent in %s, forecast %s, of %s (%d%%); box at %s\n", cur(bu.Spent), bu.Month,
			cur(bu.Forecast), cur(bu.Limit), int64(bu.Spent)*100/int64(bu.Limit), bu.Currency.FormatRate(bu.HourlyRate, "h"))
	} else {
		fmt.Fprintf(&b, "Budget    %s spent in %s, forecast %s; no limit set\n", cur(bu.Spent), bu.Month, cur(bu.Forecast))
	}
	for _, l := range savedLines(saved) {
		fmt.Fprint(&b, wrap(l, "Saved     ", pageWidth))
	}
	fmt.Fprint(&b, wrap(st.Diagnosis.Verdict+": "+st.Diagnosis.Detail, "Diagnosis ", pageWidth))
	for _, n := range st.Notices {
		at := "no time given"
		if !n.At.IsZero() {
			at = n.At.Format(time.RFC3339)
		}
		over := ""
		if n.Canceled {
			over = " (over)"
		}
		fmt.Fprint(&b, wrap(fmt.Sprintf("%s %s%s %s %s", n.Provider, n.Kind, over, at, n.Detail), "Notice    ", pageWidth))
	}
	for _, j := range st.Jobs {
		fmt.Fprint(&b, wrap(fmt.Sprintf("%s %s; %s", j.ID, j.State, gpuwarden.DescribeSync(j.Sync, st.Now)), "Job       ", pageWidth))
	}
	if len(st.Events) > 0 {
		fmt.Fprintln(&b, "Alerts")
		for i, e := range st.Events {
			if i == 5 {
				break
			}
			fmt.Fprint(&b, wrap(e.Message, "  "+e.Time.Local().Format("01-02 15:04")+" "+e.Severity+"  ", pageWidth))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// known formats a value, or says "unknown" for one the driver did not
// give: a 0 there would read like an idle card.
func known(ok bool, format string, args ...any) string {
	if !ok {
		return "unknown"
	}
	return fmt.Sprintf(format, args...)
}

// migProcs counts an instance's processes and names the first.
func migProcs(ps []gpuwarden.GPUProcess) string {
	if len(ps) == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s %d)", len(ps), ps[0].Name, ps[0].PID)
}

// bytesIEC prints a byte rate with a binary unit: "12.3 MiB".
func bytesIEC(v float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + units[i]
}

// stopLine says how the box stops and whether that ends its bill: "idle
// stop: azure-deallocate, proven 2m ago", or loudly that it would not.
func stopLine(r *gpuwarden.StopReport, now time.Time) string {
	if o := r.Outcome; o != nil {
		return fmt.Sprintf("%s ran at %s: %s (%s)", o.Method, o.At.Local().Format("15:04:05"), o.Billing, cmp.Or(o.State, o.Detail))
	}
	if !r.StopsBilling {
		line := "the stop (" + r.Method + ") would NOT stop billing here: " + r.Why
		if r.Fix != "" {
			line += "; fix: " + r.Fix
		}
		return line
	}
	switch p := r.Proof; {
	case p == nil:
		return r.Method + ", not proven yet"
	case p.Proven:
		return fmt.Sprintf("%s, proven %s ago", r.Method, now.Sub(p.At).Round(time.Second))
	default:
		line := r.Method + ", NOT proven: " + p.Reason
		if p.Fix != "" {
			line += "; fix: " + p.Fix
		}
		return line
	}
}
