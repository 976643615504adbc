// Package burnin runs the burn-in of a node: the GPU checks of every card
// in parallel (memory test, bandwidth, FP32 soak, PCIe) while it watches
// their telemetry and error counters, and a disk and CPU soak of the host
// alongside; every figure is held against a reference and gets a verdict.
package burnin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// Modes of a burn-in.
const (
	// ModeQuick is about a minute per GPU: three patterns, a 15 s soak.
	ModeQuick = "quick"
	// ModeDefault is about five minutes: every pattern, a 2 min soak.
	ModeDefault = "default"
	// ModeSoak repeats every pattern and soaks for Options.Duration.
	ModeSoak = "soak"
)

// DefaultSoak is the soak length when ModeSoak is asked without a duration.
const DefaultSoak = 30 * time.Minute

// allPatterns are the memory test patterns, in the kernels' order.
var allPatterns = []string{"zeros", "ones", "aa", "55", "walking-ones", "address", "random"}

// Options sets up a burn-in.
type Options struct {
	// Mode is quick, default or soak; empty means default.
	Mode string
	// Duration is the soak length in soak mode (--duration).
	Duration time.Duration
	// FailOnWarn is the CLI's: a WARN then exits non-zero; Run does not read it.
	FailOnWarn bool
	// DataDir is where the disk soak writes its file; empty means the temp dir.
	DataDir string
	// DiskBytes is how much the disk soak writes; 0 means 256 MiB in quick
	// mode and 2 GiB otherwise.
	DiskBytes int64
	Seed      uint64
	// InjectFault plants a memory error that the GPU checks must catch.
	InjectFault bool
	Now         func() time.Time
	Log         *slog.Logger
	// Progress, when set, hears how far each phase ("gpu", "disk", "cpu")
	// has come; calls never overlap, so it needs no lock of its own.
	Progress func(phase string, done, total float64)

	// Test hooks: the telemetry interval, the CPU soak length, a corruption
	// of the disk file between write and read, and of CPU results.
	sampleEvery time.Duration
	cpuFor      time.Duration
	afterWrite  func(path string) error
	cpuCorrupt  func(uint64) uint64
	hostname    func() (string, error)
}

// Request returns the burn request a mode asks of each GPU.
func Request(mode string, soak time.Duration) (gpuwarden.BurnRequest, error) {
	switch mode {
	case ModeQuick:
		return gpuwarden.BurnRequest{MemFraction: 0.95, Patterns: []string{"zeros", "ones", "random"}, SoakSeconds: 15, BandwidthRuns: 5}, nil
	case ModeDefault, "":
		return gpuwarden.BurnRequest{MemFraction: 0.95, Patterns: slices.Clone(allPatterns), SoakSeconds: 120, BandwidthRuns: 9}, nil
	case ModeSoak:
		if soak <= 0 {
			soak = DefaultSoak
		}
		// Three passes of every pattern: a weak cell that survives one
		// fill rarely survives the next two at a different temperature.
		p := slices.Concat(allPatterns, allPatterns, allPatterns)
		return gpuwarden.BurnRequest{MemFraction: 0.95, Patterns: p, SoakSeconds: soak.Seconds(), BandwidthRuns: 21}, nil
	}
	return gpuwarden.BurnRequest{}, gpuwarden.Errorf(gpuwarden.EInvalid, "burn-in mode %q is not quick, default or soak", mode)
}

// hostPlan is how long and how much the host checks run in a mode.
func hostPlan(o Options) (disk int64, cpu time.Duration) {
	disk, cpu = 2<<30, 5*time.Second
	switch o.Mode {
	case ModeQuick:
		disk, cpu = 256<<20, 2*time.Second
	case ModeSoak:
		cpu = 30 * time.Second
	}
	if o.DiskBytes > 0 {
		disk = o.DiskBytes
	}
	if o.cpuFor > 0 {
		cpu = o.cpuFor
	}
	return disk, cpu
}

// gpuRun is what one GPU's part of the burn-in collected.
type gpuRun struct {
	gpu    gpuwarden.GPU
	result gpuwarden.BurnResult
	err    error
	// skip, when set, is why the CUDA checks did not run on this GPU.
	skip      string
	before    gpuwarden.Health
	after     gpuwarden.Health
	healthErr error
	samples   []gpuwarden.Telemetry
}

// Run burns in the node: burn on every GPU at once, with telemetry sampled
// each second and the error counters read before and after, and the disk
// and CPU soaks of the host alongside. A GPU whose burn fails is a FAIL in
// the report, not an error; Run errs only when it cannot start (an unknown
// mode, no GPU list) or the context ends.
func Run(ctx context.Context, gpus gpuwarden.GPUs, burn func(context.Context, gpuwarden.BurnRequest) (gpuwarden.BurnResult, error), o Options) (gpuwarden.BurnReport, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.sampleEvery <= 0 {
		o.sampleEvery = time.Second
	}
	if o.hostname == nil {
		o.hostname = os.Hostname
	}
	if o.DataDir == "" {
		o.DataDir = os.TempDir()
	}
	if o.Mode == "" {
		o.Mode = ModeDefault
	}
	req, err := Request(o.Mode, o.Duration)
	if err != nil {
		return gpuwarden.BurnReport{}, err
	}
	expect, err := Expectations()
	if err != nil {
		return gpuwarden.BurnReport{}, err
	}
	var progressMu sync.Mutex
	progress := func(phase string) func(done, total float64) {
		return func(done, total float64) {
			if o.Progress == nil {
				return
			}
			progressMu.Lock()
			defer progressMu.Unlock()
			o.Progress(phase, done, total)
		}
	}

	host, err := o.hostname()
	if err != nil {
		return gpuwarden.BurnReport{}, fmt.Errorf("burnin: host name: %w", err)
	}
	rep := gpuwarden.BurnReport{Host: host, Start: o.Now(), Mode: o.Mode}
	list, err := gpus.List(ctx)
	if err != nil {
		return rep, fmt.Errorf("burnin: list gpus: %w", err)
	}
	rep.GPUs = list
	rep.Node = NodeID(host, list)
	o.Log.Info("burn-in start", "node", rep.Node, "mode", o.Mode, "gpus", len(list))

	diskBytes, cpuFor := hostPlan(o)
	runs := make([]gpuRun, len(list))
	var (
		wg       sync.WaitGroup
		disk     diskResult
		diskErr  error
		cpu      cpuResult
		doneMu   sync.Mutex
		gpusDone int
	)
	gpuProgress := progress("gpu")
	gpuProgress(0, float64(len(list)))
	for i, g := range list {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := req
			r.Index, r.UUID, r.Seed, r.InjectFault = g.Index, g.UUID, o.Seed+uint64(g.Index), o.InjectFault
			if g.MIG {
				// Only the health counters are read: NVML still sees the
				// whole card, CUDA only its MIG instances.
				runs[i] = burnOne(ctx, gpus, noBurn, g, r, o)
				runs[i].skip = migSkip
			} else {
				runs[i] = burnOne(ctx, gpus, burn, g, r, o)
			}
			doneMu.Lock()
			gpusDone++
			n := gpusDone
			doneMu.Unlock()
			gpuProgress(float64(n), float64(len(list)))
		}()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		disk, diskErr = diskSoak(ctx, o.DataDir, diskBytes, o.Seed, o.afterWrite, progress("disk"))
	}()
	go func() {
		defer wg.Done()
		cpu = cpuSoak(ctx, cpuFor, o.Seed, o.cpuCorrupt, progress("cpu"))
	}()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("burnin: %w", err)
	}

	for _, run := range runs {
		rep.Checks = append(rep.Checks, gpuChecks(run, expect)...)
		if run.err == nil && run.skip == "" {
			rep.Results = append(rep.Results, run.result)
		}
		rep.Telemetry = append(rep.Telemetry, run.samples...)
	}
	rep.Checks = append(rep.Checks, cpuCheck(cpu, cpuFor))
	rep.Checks = append(rep.Checks, diskChecks(disk, diskErr)...)
	rep.Verdict = gpuwarden.VerdictPass
	for _, c := range rep.Checks {
		rep.Verdict = worse(rep.Verdict, c.Verdict)
		if c.Verdict != gpuwarden.VerdictPass {
			// c.GPU is a pointer (nil for the host's checks): log the index,
			// not the pointer's address.
			gpu := "-"
			if c.GPU != nil {
				gpu = fmt.Sprint(*c.GPU)
			}
			o.Log.Warn("burn-in check", "check", c.Name, "gpu", gpu, "verdict", c.Verdict, "reason", c.Reason)
		}
	}
	rep.End = o.Now()
	o.Log.Info("burn-in done", "node", rep.Node, "verdict", rep.Verdict)
	return rep, nil
}

// migSkip is why a GPU in MIG mode gets no CUDA checks.
const migSkip = "MIG enabled: CUDA sees only the MIG instances, and this check needs the whole device"

// noBurn stands in for the burn of a GPU whose CUDA checks are skipped.
func noBurn(context.Context, gpuwarden.BurnRequest) (gpuwarden.BurnResult, error) {
	return gpuwarden.BurnResult{}, nil
}

// burnOne runs one GPU's burn with its telemetry sampler and health reads.
func burnOne(ctx context.Context, gpus gpuwarden.GPUs, burn func(context.Context, gpuwarden.BurnRequest) (gpuwarden.BurnResult, error),
	g gpuwarden.GPU, req gpuwarden.BurnRequest, o Options) gpuRun {
	run := gpuRun{gpu: g}
	// A hung driver must not hang the burn-in: each read gets its own deadline.
	read := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 10*time.Second) }
	hctx, cancel := read()
	run.before, run.healthErr = gpus.Health(hctx, g.Index)
	cancel()

	sample := func() {
		sctx, cancel := read()
		defer cancel()
		t, err := gpus.Sample(sctx, g.Index)
		if err != nil {
			o.Log.Debug("telemetry sample", "gpu", g.Index, "err", err)
			return
		}
		run.samples = append(run.samples, t)
	}
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(o.sampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				sample()
			}
		}
	}()
	run.result, run.err = burn(ctx, req)
	close(stop)
	<-sampled
	// The last sample, right after the load ends, still sees the card as
	// hot as the load left it.
	sample()

	hctx, cancel = read()
	after, err := gpus.Health(hctx, g.Index)
	cancel()
	if run.healthErr == nil {
		run.after, run.healthErr = after, err
	}
	if run.err != nil {
		o.Log.Warn("gpu burn failed", "gpu", g.Index, "err", run.err)
	}
	return run
}

// gpuChecks judges one GPU's run against its model's expectation.
func gpuChecks(run gpuRun, expect map[string]Expectation) []gpuwarden.BurnCheck {
	i := run.gpu.Index
	var out []gpuwarden.BurnCheck
	if run.skip != "" {
		for _, name := range []string{"memory", "bandwidth", "fp32", "fma", "pcie", "throttle"} {
			out = append(out, gpuwarden.BurnCheck{Name: name, GPU: &i, Verdict: gpuwarden.VerdictSkip, Reason: "skipped: " + run.skip})
		}
		return append(out, healthCheck(i, run.before, run.after, run.healthErr))
	}
	if run.err != nil {
		out = append(out, gpuwarden.BurnCheck{Name: "burn", GPU: &i, Verdict: gpuwarden.VerdictFail,
			Reason: fmt.Sprintf("the GPU checks did not finish: %v", run.err)})
	} else {
		e := expect[run.gpu.Model]
		r := run.result
		out = append(out, memCheck(i, r.Mem),
			refCheck("bandwidth", i, r.BandwidthGBs, e.BandwidthGBs, "GB/s", run.gpu.Model),
			refCheck("fp32", i, r.FP32TFLOPs, e.FP32TFLOPs, "TFLOP/s", run.gpu.Model),
			fmaCheck(i, r), pcieCheck(i, run.gpu, r))
		out = append(out, gemmChecks(i, r, e.BF16TFLOPs, run.gpu.Model)...)
	}
	return append(out, throttleCheck(i, run.samples), healthCheck(i, run.before, run.after, run.healthErr))
}

// NodeID identifies a box by its host name and its GPUs' UUIDs and serials,
// so a re-imaged host with the same cards keeps its history and a host
// whose cards were swapped does not: the first 16 hex digits of a SHA-256.
func NodeID(host string, gpus []gpuwarden.GPU) string {
	ids := make([]string, 0, 2*len(gpus))
	for _, g := range gpus {
		ids = append(ids, "uuid:"+g.UUID, "serial:"+g.Serial)
	}
	sort.Strings(ids)
	sum := sha256.Sum256([]byte(host + "\n" + strings.Join(ids, "\n")))
	return hex.EncodeToString(sum[:])[:16]
}
