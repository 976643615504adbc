package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/canary"
	"github.com/gpuwarden/gpuwarden/catalog"
	"github.com/spf13/cobra"
)

// Canary's own exit codes, as its help documents them.
const (
	canaryOK       = 0
	canaryDrift    = 1
	canaryFault    = 2
	canaryNoDriver = 3
	canaryUsage    = 4
)

// The check statuses, mildest first.
const (
	statusOK    = "ok"
	statusSkip  = "skip"
	statusWarn  = "warn"
	statusDrift = "drift"
	statusFail  = "FAIL"
)

// check is one line of the canary's table.
type check struct {
	Name   string `json:"name"`
	GPU    *int   `json:"gpu,omitempty"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

// canaryReport is what `canary -o json` prints.
type canaryReport struct {
	Verdict  string            `json:"verdict"`
	ExitCode int               `json:"exit_code"`
	Seconds  float64           `json:"seconds"`
	Lock     string            `json:"lock,omitempty"`
	Driver   *gpuwarden.Driver `json:"driver,omitempty"`
	GPUs     []gpuwarden.GPU   `json:"gpus"`
	Checks   []check           `json:"checks"`
	Drift    []gpuwarden.Drift `json:"drift"`
	Facts    gpuwarden.Facts   `json:"facts"`
	Notes    []string          `json:"notes"`
}

func (r *canaryReport) add(name string, gpu int, status, format string, args ...any) {
	c := check{Name: name, Status: status, Detail: fmt.Sprintf(format, args...)}
	if gpu >= 0 {
		g := gpu
		c.GPU = &g
	}
	r.Checks = append(r.Checks, c)
}

func usage(err error) error { return &exitError{code: canaryUsage, err: err} }

func (a *app) canaryCommand() *cobra.Command {
	var (
		f        stackFlags
		output   string
		allocGiB float64
	)
	c := &cobra.Command{
		Use:   "canary",
		Short: "Check this box against gpuwarden.lock and prove the GPU runs a kernel",
		Long: `canary checks, in about a second, that this box can run the job: the driver
answers, every GPU is healthy (no uncorrected ECC error, pending or failed row
remap, or Xid), a CUDA context comes up, --alloc GiB allocate, a pattern
fill/verify kernel finds every word right, host↔device copies and a short
device bandwidth run match the model, and the stack matches gpuwarden.lock
field by field (old → new for every drift). The CUDA work runs in a child
process that is killed at --timeout, so a hung driver is reported, not waited on.

Exit codes (canary's own):
  0  ok
  1  drift: the stack differs from the lock
  2  GPU fault: health counters, a failed verify, a hung or failed call
  3  no NVIDIA driver or GPU (--cpu-ok makes this 0 on CPU smoke-test hosts)
  4  usage or internal error`,
		Example: `  gpuwarden canary
  gpuwarden canary --no-frameworks --alloc 4 -o json
  gpuwarden lock --simulate 2xH100 && gpuwarden canary --simulate 2xH100`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usage(gpuwarden.Errorf(gpuwarden.EInvalid, "canary takes no arguments, got %q", args[0]))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := outputFormat(output, "table", "json"); err != nil {
				return usage(err)
			}
			if allocGiB <= 0 || allocGiB > 1024 {
				return usage(gpuwarden.Errorf(gpuwarden.EInvalid, "--alloc: %g GiB is not between 0 and 1024", allocGiB))
			}
			lock, err := readLockIfAny(f.lockFile)
			if err != nil {
				return usage(err)
			}
			gpus, openErr := f.gpu.open(a)
			if openErr != nil && gpuwarden.ErrorCodeOf(openErr) != gpuwarden.EEnvironment {
				return usage(openErr)
			}
			r := a.runCanary(cmd.Context(), &f, lock, uint64(allocGiB*(1<<30)), gpus, openErr)
			if r.ExitCode == canaryNoDriver {
				return &exitError{code: canaryNoDriver, err: errors.New(r.Notes[len(r.Notes)-1])}
			}
			if output == "json" {
				err = writeJSON(a.stdout, r)
			} else {
				err = r.table(a.stdout)
			}
			if err != nil {
				return &exitError{code: canaryUsage, err: err}
			}
			return &exitError{code: r.ExitCode}
		},
	}
	f.register(c, 20*time.Second)
	c.Flags().Float64Var(&allocGiB, "alloc", 1, "GiB to allocate and verify on each GPU")
	c.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	c.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usage(gpuwarden.Errorf(gpuwarden.EInvalid, "%s", err).WithHint("see %s --help", c.CommandPath()))
	})
	return c
}

// readLockIfAny reads the lock; a missing one is not an error (the canary
// still checks the GPU), a malformed one is.
func readLockIfAny(path string) (*gpuwarden.Lock, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &gpuwarden.Error{Code: gpuwarden.EInvalid, Message: "read " + path, Err: err}
	}
	return canary.ReadLock(path, data)
}

// runCanary does the checks, bounded as a whole by --timeout. The stack
// probes (Python imports take seconds) run while the GPUs are probed.
func (a *app) runCanary(parent context.Context, f *stackFlags, lock *gpuwarden.Lock, alloc uint64,
	gpus gpuwarden.GPUs, openErr error) *canaryReport {
	start := time.Now()
	ctx, cancel := context.WithTimeout(parent, f.gpu.timeout)
	defer cancel()
	r := &canaryReport{Lock: f.lockFile, GPUs: []gpuwarden.GPU{}, Checks: []check{}, Drift: []gpuwarden.Drift{}, Notes: []string{}}
	defer func() { r.Seconds = time.Since(start).Seconds() }()

	if openErr != nil {
		if !f.gpu.cpuOK {
			r.verdict(canaryNoDriver, "no-driver")
			r.Notes = append(r.Notes, "no NVIDIA driver on this host ("+strings.TrimPrefix(openErr.Error(), "no NVIDIA driver: ")+
				"): there is no GPU to check; pass --cpu-ok on CPU-only smoke-test hosts")
			return r
		}
		r.add("driver", -1, statusSkip, "no NVIDIA driver; --cpu-ok checks the host stack only")
		gpus = nil
	} else {
		defer gpus.Close()
	}

	var wg sync.WaitGroup
	var facts gpuwarden.Facts
	var notes []string
	wg.Add(1)
	go func() {
		defer wg.Done()
		opts := canary.Options{Pythons: f.interpreters(lock), Timeout: f.gpu.timeout, GPUs: gpus}
		facts, notes, _ = canary.Collect(ctx, opts)
	}()
	if gpus != nil {
		a.checkGPUs(ctx, f, gpus, alloc, r)
	}
	wg.Wait()
	r.Facts, r.Notes = facts, append(r.Notes, notes...)
	if r.Facts == nil {
		r.Facts = gpuwarden.Facts{}
	}
	r.diff(lock, gpus == nil, f.noFrameworks)
	r.decide()
	return r
}

// checkGPUs runs the driver, health and live checks of every GPU.
func (a *app) checkGPUs(ctx context.Context, f *stackFlags, gpus gpuwarden.GPUs, alloc uint64, r *canaryReport) {
	d, err := gpus.Driver(ctx)
	if err == nil {
		r.Driver = &d
		var list []gpuwarden.GPU
		list, err = gpus.List(ctx)
		r.GPUs = list
	}
	if err != nil {
		r.add("driver", -1, statusFail, "%v", err)
		return
	}
	if len(r.GPUs) == 0 {
		r.add("driver", -1, statusFail, "the driver answers but lists no GPU")
		return
	}
	r.add("driver", -1, statusOK, "driver %s, CUDA %s, %d× %s", d.Version, d.CUDAVersion, len(r.GPUs), r.GPUs[0].Model)
	for _, g := range r.GPUs {
		h, err := gpus.Health(ctx, g.Index)
		switch {
		case err != nil:
			r.add("health", g.Index, statusFail, "%v", err)
		case h.Faulty():
			r.add("health", g.Index, statusFail, "%s", describeHealth(h))
		case len(h.XIDs) > 0:
			r.add("health", g.Index, statusWarn, "%s", describeHealth(h))
		default:
			r.add("health", g.Index, statusOK, "no uncorrected ECC, row-remap or Xid errors")
		}
	}
	results := make([]probeOutcome, len(r.GPUs))
	var wg sync.WaitGroup
	seed := uint64(time.Now().UnixNano()) | 1
	for i, g := range r.GPUs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := gpuwarden.ProbeRequest{Index: g.Index, AllocBytes: min(alloc, g.VRAMBytes*9/10), Seed: seed + uint64(i)}
			res, err := a.probeGPU(ctx, f.gpu.simulate, req)
			results[i] = probeOutcome{req, res, err}
		}()
	}
	wg.Wait()
	for i, g := range r.GPUs {
		r.probeChecks(g, results[i])
	}
}

type probeOutcome struct {
	req gpuwarden.ProbeRequest
	res gpuwarden.ProbeResult
	err error
}

func describeHealth(h gpuwarden.Health) string {
	var parts []string
	if h.ECCVolatileUncorrected > 0 {
		parts = append(parts, fmt.Sprintf("%d uncorrected ECC errors since boot", h.ECCVolatileUncorrected))
	}
	if h.RemapFailed {
		parts = append(parts, "a row remap failed (the card needs replacing)")
	}
	if h.RemapPending {
		parts = append(parts, "a row remap is pending (reset the GPU)")
	}
	for _, x := range h.XIDs {
		meaning, app := gpuwarden.XIDMeaning(x.XID)
		if app {
			meaning += ", usually the application's"
		}
		parts = append(parts, fmt.Sprintf("Xid %d (%s) at %s", x.XID, meaning, x.Time.UTC().Format(time.RFC3339)))
	}
	return strings.Join(parts, "; ")
}

// Expected bandwidths: a short device copy reaches about 84 % of the
// datasheet on an H200 (4.03 of 4.8 TB/s in the anchors); below 70 % the card
// or its clocks deserve a burn-in. A ×16 link moves about 2 GB/s per lane
// generation step: 16, 32, 64 GB/s for gen 3, 4, 5 before overheads.
const (
	copyWarnShare = 0.70
	pcieWarnShare = 0.50
)

func pcieTheoreticalGBs(gen, width int) float64 {
	perLane := map[int]float64{1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}[gen]
	return perLane * float64(width)
}

func (r *canaryReport) probeChecks(g gpuwarden.GPU, o probeOutcome) {
	if o.err != nil {
		r.add("cuda", g.Index, statusFail, "%v", o.err)
		return
	}
	res := o.res
	r.add("context+alloc", g.Index, statusOK, "%s allocated; context %.2f s, alloc %.3f s", gib(o.req.AllocBytes), res.InitSeconds, res.AllocSeconds)
	if res.VerifyErrors > 0 {
		r.add("fill/verify", g.Index, statusFail, "%s of %s words wrong, first at byte %d",
			gpuwarden.GroupDigits(int64(res.VerifyErrors)), gpuwarden.GroupDigits(int64(res.VerifiedWords)), res.FirstBadOffset)
	} else {
		r.add("fill/verify", g.Index, statusOK, "%s words written and read back", gpuwarden.GroupDigits(int64(res.VerifiedWords)))
	}
	status, link := statusOK, ""
	if g.PCIeGen > 0 && g.PCIeWidth > 0 {
		peak := pcieTheoreticalGBs(g.PCIeGen, g.PCIeWidth)
		link = fmt.Sprintf(" (gen %d ×%d, %.0f GB/s peak)", g.PCIeGen, g.PCIeWidth, peak)
		if min(res.HostToDeviceGBs, res.DeviceToHostGBs) < pcieWarnShare*peak {
			status = statusWarn
		}
	}
	r.add("host↔device", g.Index, status, "%.1f GB/s up, %.1f GB/s down%s", res.HostToDeviceGBs, res.DeviceToHostGBs, link)
	spec, ok := gpuSpec(g.Model)
	if !ok || spec.MemBWTBs == 0 {
		r.add("device copy", g.Index, statusOK, "%.0f GB/s read+write (no datasheet figure for %s)", res.DeviceCopyGBs, g.Model)
		return
	}
	share := res.DeviceCopyGBs / (spec.MemBWTBs * 1000)
	status = statusOK
	if share < copyWarnShare {
		status = statusWarn
	}
	r.add("device copy", g.Index, status, "%.0f GB/s read+write, %.0f%% of the %s's %g TB/s", res.DeviceCopyGBs, share*100, g.Model, spec.MemBWTBs)
}

func gpuSpec(model string) (gpuwarden.GPUSpec, bool) {
	cat, err := catalog.Embedded()
	if err != nil {
		return gpuwarden.GPUSpec{}, false
	}
	for _, s := range cat.GPUs {
		if s.Model == model {
			return s, true
		}
	}
	return gpuwarden.GPUSpec{}, false
}

func gib(b uint64) string { return strconv.FormatFloat(float64(b)/(1<<30), 'f', -1, 64) + " GiB" }

// diff compares the facts with the lock. On a host without a driver under
// --cpu-ok, the GPU's own fields are not expected to hold; with
// --no-frameworks, neither are the Python ones, which were not probed.
func (r *canaryReport) diff(lock *gpuwarden.Lock, noGPU, noPython bool) {
	if lock == nil {
		r.add("lock", -1, statusSkip, "no %s here: run gpuwarden lock on a box that works", r.Lock)
		return
	}
	for _, d := range lock.Diff(r.Facts) {
		if noGPU && (strings.HasPrefix(d.Field, "gpu.") || strings.HasPrefix(d.Field, "driver.") || strings.HasPrefix(d.Field, "cuda.")) {
			continue
		}
		if noPython && strings.HasPrefix(d.Field, "python.") {
			continue
		}
		r.Drift = append(r.Drift, d)
	}
	if len(r.Drift) == 0 {
		r.add("lock", -1, statusOK, "%d fields match %s", len(lock.Fields), r.Lock)
		return
	}
	r.add("lock", -1, statusDrift, "%d of %d fields differ from %s", len(r.Drift), len(lock.Fields), r.Lock)
}

// decide turns the checks into the verdict: a fault outranks drift.
func (r *canaryReport) decide() {
	code, verdict := canaryOK, "ok"
	for _, c := range r.Checks {
		switch {
		case c.Status == statusFail:
			code, verdict = canaryFault, "gpu-fault"
		case c.Status == statusDrift && code == canaryOK:
			code, verdict = canaryDrift, "drift"
		}
	}
	r.verdict(code, verdict)
}

func (r *canaryReport) verdict(code int, verdict string) { r.ExitCode, r.Verdict = code, verdict }

func (r *canaryReport) table(w io.Writer) error {
	var b strings.Builder
	rows := [][]string{{"CHECK", "GPU", "STATUS", "DETAIL"}}
	for _, c := range r.Checks {
		gpu := "-"
		if c.GPU != nil {
			gpu = strconv.Itoa(*c.GPU)
		}
		rows = append(rows, []string{c.Name, gpu, c.Status, c.Detail})
	}
	fitOfferColumn(rows, 3)
	t := newTable(&b)
	for _, row := range rows {
		t.row(row...)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(r.Drift) > 0 {
		fmt.Fprintln(&b, "\nDrift (locked → here)")
		dt := newTable(&b)
		for _, d := range r.Drift {
			now := d.Now
			if now == "" {
				now = "(missing)"
			}
			dt.row("  "+d.Field, d.Locked+" → "+now, "("+string(d.Match)+")")
		}
		if err := dt.flush(); err != nil {
			return err
		}
	}
	for _, n := range r.Notes {
		fmt.Fprint(&b, wrap(n, "note: ", pageWidth))
	}
	fmt.Fprintf(&b, "\nVerdict   %s (exit %d) in %.2f s\n", strings.ToUpper(r.Verdict), r.ExitCode, r.Seconds)
	_, err := io.WriteString(w, b.String())
	return err
}
