package agent

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// lostAfter is how many failed samples in a row make telemetry lost: one
// slow read is noise, three in a row at 1 Hz is a driver that stopped
// answering.
const lostAfter = 3

// telemetryWatch counts failed samples and raises telemetry-lost once per
// run of failures, and its all-clear once the GPUs answer again.
type telemetryWatch struct {
	state gpuwarden.TelemetryState
}

// observe updates the state with one tick's outcome (err nil: every GPU
// answered) and alerts on the transitions.
func (a *Agent) observeTelemetry(ctx context.Context, err error, now time.Time) gpuwarden.TelemetryState {
	w := &a.telemetry
	if err == nil {
		if w.state.Lost {
			a.alert(ctx, gpuwarden.Event{Kind: "telemetry-restored", Severity: gpuwarden.SeverityInfo,
				Key: "telemetry-restored-" + a.cfg.Node + "-" + w.state.Since.UTC().Format(time.RFC3339Nano),
				Message: fmt.Sprintf("%s: GPU telemetry is back after %s without it; idle and budget stops apply again",
					a.cfg.Node, now.Sub(w.state.Since).Round(time.Second)),
				// The all-clear ends the telemetry-lost alert of the same run
				// (a PagerDuty resolve on its dedup key).
				Data: map[string]string{"since": w.state.Since.UTC().Format(time.RFC3339),
					gpuwarden.DataResolves: "telemetry-lost-" + a.cfg.Node + "-" + w.state.Since.UTC().Format(time.RFC3339Nano)}})
		}
		w.state = gpuwarden.TelemetryState{}
		return w.state
	}
	if w.state.Failures == 0 {
		w.state.Since = now
	}
	w.state.Failures++
	w.state.LastError = err.Error()
	if !w.state.Lost && w.state.Failures >= lostAfter {
		w.state.Lost = true
		a.alert(ctx, gpuwarden.Event{Kind: "telemetry-lost", Severity: gpuwarden.SeverityCritical,
			Key: "telemetry-lost-" + a.cfg.Node + "-" + w.state.Since.UTC().Format(time.RFC3339Nano),
			Message: fmt.Sprintf("%s: GPU telemetry lost, %d samples in a row failed since %s (%v); idle and budget stops are suspended until it is back",
				a.cfg.Node, w.state.Failures, w.state.Since.UTC().Format(time.RFC3339), err),
			Data: map[string]string{"since": w.state.Since.UTC().Format(time.RFC3339), "error": err.Error()}})
	}
	return w.state
}

// telemetryLost reports whether the stops that read the GPUs must wait.
func (a *Agent) telemetryLost() bool { return a.telemetry.state.Lost }

// migBusyShare is the share of an instance's memory in use that makes it
// busy: a MIG instance holds a few MiB for itself when empty, and a model
// loaded into it is far above this.
const migBusyShare = 0.01

// gpuBusy says why one GPU keeps the box busy, or why its state is unknown
// (which keeps the box up just the same: the idle clock never runs on a
// GPU it cannot read). Empty means the GPU is known to be idle.
func gpuBusy(g gpuwarden.Telemetry, inv gpuwarden.GPU, threshold float64) []string {
	if g.Unread() {
		return []string{fmt.Sprintf("GPU %d: telemetry unknown (%s); idle needs a reading", g.Index, unknownWhy(g.Unknown))}
	}
	if len(g.MIG) > 0 || inv.MIG {
		return migBusy(g, inv, threshold)
	}
	var busy []string
	switch {
	case !g.Known(gpuwarden.FieldUtil):
		busy = append(busy, fmt.Sprintf("GPU %d: utilization unknown (%s); idle needs a utilization reading",
			g.Index, gpuwarden.UnknownText(g.Unknown[gpuwarden.FieldUtil])))
	case g.UtilPercent >= threshold:
		busy = append(busy, fmt.Sprintf("GPU %d at %.0f%%", g.Index, g.UtilPercent))
	}
	switch {
	case !g.Known(gpuwarden.FieldProcesses):
		busy = append(busy, fmt.Sprintf("GPU %d: processes unknown (%s); idle needs the process list",
			g.Index, gpuwarden.UnknownText(g.Unknown[gpuwarden.FieldProcesses])))
	case len(g.Processes) > 0:
		busy = append(busy, fmt.Sprintf("GPU %d runs PID %d", g.Index, g.Processes[0].PID))
	}
	return busy
}

// migBusy decides a MIG GPU per instance: device utilization is not
// reported under MIG, so an instance is busy when it has a process or
// memory in use, or a GPM utilization over the threshold where the card
// has GPM; it is idle only when its processes and memory are known.
func migBusy(g gpuwarden.Telemetry, inv gpuwarden.GPU, threshold float64) []string {
	if len(g.MIG) == 0 {
		return []string{fmt.Sprintf("GPU %d: utilization unknown under MIG and no MIG instance could be read; idle needs the instances' processes and memory", g.Index)}
	}
	var busy []string
	for _, m := range g.MIG {
		name := fmt.Sprintf("GPU %d MIG %d (%s)", g.Index, m.Index, m.Profile)
		switch {
		case m.Known(gpuwarden.FieldProcesses) && len(m.Processes) > 0:
			busy = append(busy, fmt.Sprintf("%s runs PID %d", name, m.Processes[0].PID))
		case m.Known(gpuwarden.FieldMemUsed) && m.MemTotalBytes > 0 && float64(m.MemUsedBytes) >= migBusyShare*float64(m.MemTotalBytes):
			busy = append(busy, fmt.Sprintf("%s holds %.1f GiB", name, float64(m.MemUsedBytes)/(1<<30)))
		case m.Known(gpuwarden.FieldUtil) && m.UtilPercent >= threshold:
			busy = append(busy, fmt.Sprintf("%s at %.0f%%", name, m.UtilPercent))
		case !m.Known(gpuwarden.FieldProcesses) || !m.Known(gpuwarden.FieldMemUsed):
			busy = append(busy, fmt.Sprintf("%s: processes or memory unknown (%s); idle needs both", name, unknownWhy(m.Unknown)))
		}
	}
	return busy
}

// unknownWhy names the distinct reasons of an Unknown map, in words.
func unknownWhy(unknown map[string]string) string {
	seen := map[string]bool{}
	var why []string
	for _, f := range gpuwarden.TelemetryFields {
		if r, ok := unknown[f]; ok && !seen[r] {
			seen[r] = true
			why = append(why, gpuwarden.UnknownText(r))
		}
	}
	return strings.Join(why, ", ")
}
