package agent

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// Diagnosis thresholds, in percent; docs/agent.md explains each.
const (
	busyUtil       = 60 // GPUs this busy on average are doing their job
	idleUtil       = 5
	oversizedUtil  = 15
	oversizedMem   = 30
	starvedUtil    = 40 // under this, a saturated CPU or disk is the bottleneck
	cpuSaturated   = 85
	coreSaturated  = 90
	ioWaitBound    = 20
	minDiagSamples = 10
)

// Diagnose says from a window of samples why the GPUs sleep: idle, input-
// bound (CPU cores saturated while GPUs wait), I/O-bound (high iowait),
// oversized (low utilisation and little memory used), or healthy.
func Diagnose(window []gpuwarden.NodeSample, haveGPUs bool) gpuwarden.Diagnosis {
	d := gpuwarden.Diagnosis{Verdict: "unknown"}
	if len(window) > 1 {
		d.WindowSeconds = window[len(window)-1].Time.Sub(window[0].Time).Seconds()
	}
	if !haveGPUs {
		d.Detail = "no GPU on this box: the CPU path samples the host only"
		return d
	}
	if len(window) < minDiagSamples {
		d.Detail = fmt.Sprintf("gathering samples (%d of %d)", len(window), minDiagSamples)
		return d
	}
	var util, mem, cpu, iowait float64
	var gpuN, saturatedTicks int
	unknown := ""
	for _, s := range window {
		for _, g := range s.GPUs {
			// An unknown utilization is left out, not averaged in as 0:
			// a MIG GPU would otherwise read as an idle one.
			if !g.Known(gpuwarden.FieldUtil) {
				unknown = g.Unknown[gpuwarden.FieldUtil]
				continue
			}
			util += g.UtilPercent
			if g.MemTotalBytes > 0 {
				mem += 100 * float64(g.MemUsedBytes) / float64(g.MemTotalBytes)
			}
			gpuN++
		}
		cpu += s.Host.CPUPercent
		iowait += s.Host.IOWaitPercent
		if coresSaturated(s.Host) {
			saturatedTicks++
		}
	}
	if gpuN == 0 && unknown != "" {
		d.Detail = "GPU utilization unknown (" + gpuwarden.UnknownText(unknown) + "): no verdict without it"
		return d
	}
	n := float64(len(window))
	if gpuN > 0 {
		d.GPUUtilAvg, d.GPUMemAvg = util/float64(gpuN), mem/float64(gpuN)
	}
	d.CPUAvg, d.IOWaitAvg = cpu/n, iowait/n
	starvedCPU := d.CPUAvg >= cpuSaturated || float64(saturatedTicks) >= n/2
	switch {
	case d.GPUUtilAvg >= busyUtil:
		d.Verdict, d.Detail = "healthy", fmt.Sprintf("GPUs busy %.0f%% on average", d.GPUUtilAvg)
	case d.GPUUtilAvg < idleUtil:
		d.Verdict, d.Detail = "idle", fmt.Sprintf("GPUs at %.1f%%: nothing runs on them", d.GPUUtilAvg)
	case d.GPUUtilAvg < starvedUtil && starvedCPU:
		d.Verdict, d.Detail = "input-bound", fmt.Sprintf("GPUs at %.0f%% while the CPU is at %.0f%%: the data loader cannot keep up; add workers, pre-process, or pick a box with more cores", d.GPUUtilAvg, d.CPUAvg)
	case d.GPUUtilAvg < starvedUtil && d.IOWaitAvg >= ioWaitBound:
		d.Verdict, d.Detail = "io-bound", fmt.Sprintf("GPUs at %.0f%% with %.0f%% iowait: reading data is the bottleneck; cache it on local NVMe or stream it", d.GPUUtilAvg, d.IOWaitAvg)
	case d.GPUUtilAvg < oversizedUtil && d.GPUMemAvg < oversizedMem:
		d.Verdict, d.Detail = "oversized", fmt.Sprintf("GPUs at %.0f%% using %.0f%% of their memory: a smaller card would do", d.GPUUtilAvg, d.GPUMemAvg)
	default:
		d.Verdict, d.Detail = "healthy", fmt.Sprintf("GPUs at %.0f%%, no CPU or I/O bottleneck seen", d.GPUUtilAvg)
	}
	return d
}

// coresSaturated reports whether at least half the cores are nearly full:
// a Python data loader saturates a few cores while the average stays low.
func coresSaturated(h gpuwarden.HostSample) bool {
	if len(h.CPUPerCore) == 0 {
		return false
	}
	full := 0
	for _, c := range h.CPUPerCore {
		if c >= coreSaturated {
			full++
		}
	}
	return full*2 >= len(h.CPUPerCore)
}

// oversizedPolicy records one diagnosis-oversized event per episode in
// which the verdict is oversized: the evidence that a box started with
// --label replaces=THIS_NODE saves the rate difference (issue #29). Only a
// verdict over a whole diagnosis window counts, so that the first minutes
// of a job (loading data, compiling) are no diagnosis. The key is the
// episode's start, so a restart within an episode would start a new one
// only after a new full window.
func (a *Agent) oversizedPolicy(ctx context.Context, d gpuwarden.Diagnosis, now time.Time) {
	full := d.WindowSeconds >= (a.cfg.DiagnosisWindow - a.cfg.Interval).Seconds()
	a.mu.Lock()
	if d.Verdict != "oversized" {
		a.oversizedSince = time.Time{}
		a.mu.Unlock()
		return
	}
	if !full || !a.oversizedSince.IsZero() {
		a.mu.Unlock()
		return
	}
	a.oversizedSince = now
	gpus := a.status.GPUs
	// The label names the node as the fleet server knows it (--node-id),
	// which may differ from the agent's name for it.
	id := a.savings.Node
	if id == "" {
		id = a.cfg.Node
	}
	a.mu.Unlock()
	model, count := gpuModels(gpus)
	a.alert(ctx, gpuwarden.Event{Kind: gpuwarden.EventDiagnosisOversized, Severity: gpuwarden.SeverityInfo, Time: now,
		Key: "oversized-" + now.UTC().Format(time.RFC3339),
		Message: fmt.Sprintf("%s is oversized: %d× %s at %.1f%% utilization using %.1f%% of their memory over %s; a smaller card would do "+
			"(a box started with --label %s=%s records the saving)", a.cfg.Node, count, model, d.GPUUtilAvg, d.GPUMemAvg,
			time.Duration(d.WindowSeconds*float64(time.Second)).Round(time.Second), gpuwarden.LabelReplaces, id),
		Data: map[string]string{
			gpuwarden.DataUtilAvg:       strconv.FormatFloat(d.GPUUtilAvg, 'f', 1, 64),
			gpuwarden.DataMemAvg:        strconv.FormatFloat(d.GPUMemAvg, 'f', 1, 64),
			gpuwarden.DataGPUModel:      model,
			gpuwarden.DataGPUCount:      strconv.Itoa(count),
			gpuwarden.DataWindowSeconds: strconv.FormatFloat(d.WindowSeconds, 'f', 0, 64),
		}})
}

// gpuModels names the box's cards: one model, or the distinct models
// joined with "+" on a mixed box.
func gpuModels(gpus []gpuwarden.GPU) (string, int) {
	var models []string
	for _, g := range gpus {
		m := g.Model
		if m == "" {
			m = g.Name
		}
		if m == "" {
			m = "unknown GPU"
		}
		if !slices.Contains(models, m) {
			models = append(models, m)
		}
	}
	if len(models) == 0 {
		return "unknown GPU", 0
	}
	return strings.Join(models, "+"), len(gpus)
}
