package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/canary"
	"github.com/gpuwarden/gpuwarden/catalog"
	"github.com/spf13/cobra"
)

// Canary's own exit codes, as its help documents them. A missing lock and,
// under --strict, a partial pass share canaryDrift: each means "this box is
// not shown to run the stack the job was proven on".
const (
	canaryOK       = 0
	canaryDrift    = 1
	canaryFault    = 2
	canaryNoDriver = 3
	canaryUsage    = 4
)

// The check statuses, mildest first.
const (
	statusOK      = "ok"
	statusSkip    = "skip"
	statusWarn    = "warn"
	statusDrift   = "drift"
	statusMissing = "missing"
	statusFail    = "FAIL"
)

// The verdicts, as -o json spells them; the table shows them in capitals,
// partial as "OK (partial)".
const (
	verdictOK       = "ok"
	verdictPartial  = "partial"
	verdictDrift    = "drift"
	verdictNoLock   = "no-lock"
	verdictFault    = "gpu-fault"
	verdictNoDriver = "no-driver"
)

// Why a locked field was not compared. Each names the flag that caused it,
// so that the reader knows how to get a complete check.
const (
	whyNoGPU        = "no GPU on this box (--cpu-ok)"
	whyNoFrameworks = "framework probes off (--no-frameworks)"
)

// skipRule is a group of locked fields a flag leaves unprobed; kind names
// the group in the lock rows ("8 GPU fields not compared: ...").
type skipRule struct {
	kind, why string
	prefixes  []string
}

var (
	skipGPU        = skipRule{"GPU", whyNoGPU, []string{"gpu.", "driver.", "cuda."}}
	skipFrameworks = skipRule{"framework", whyNoFrameworks, []string{"python."}}
)

func (s skipRule) covers(field string) bool {
	for _, p := range s.prefixes {
		if strings.HasPrefix(field, p) {
			return true
		}
	}
	return false
}

// check is one line of the canary's table.
type check struct {
	Name   string `json:"name"`
	GPU    *int   `json:"gpu,omitempty"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

// canaryReport is what `canary -o json` prints. Complete, Compared, Ignored
// and Skipped say what the verdict rests on, so that a script can tell a
// full pass from one that left out what the lock pins.
type canaryReport struct {
	Verdict  string  `json:"verdict"`
	ExitCode int     `json:"exit_code"`
	Seconds  float64 `json:"seconds"`
	// Lock is the lock file's path; absent under --no-lock.
	Lock string `json:"lock,omitempty"`
	// Complete is false when a check or a locked field was skipped, or the
	// lock is missing: the verdict is then partial at best.
	Complete bool              `json:"complete"`
	Compared []string          `json:"compared"`
	Ignored  []string          `json:"ignored"`
	Skipped  []canary.Skipped  `json:"skipped"`
	Driver   *gpuwarden.Driver `json:"driver,omitempty"`
	GPUs     []gpuwarden.GPU   `json:"gpus"`
	Checks   []check           `json:"checks"`
	Drift    []gpuwarden.Drift `json:"drift"`
	Facts    gpuwarden.Facts   `json:"facts"`
	Notes    []string          `json:"notes"`

	// gpuSkipped is set when --cpu-ok let a host without a driver through,
	// so that no GPU check ran; lockRead when a lock was compared, and
	// lockMissing when there was none to compare.
	gpuSkipped, lockRead, lockMissing bool
}

// newCanaryReport starts a report against the lock at path ("" under
// --no-lock), its lists empty rather than nil so that JSON shows [].
func newCanaryReport(path string) *canaryReport {
	return &canaryReport{Lock: path, Compared: []string{}, Ignored: []string{}, Skipped: []canary.Skipped{},
		GPUs: []gpuwarden.GPU{}, Checks: []check{}, Drift: []gpuwarden.Drift{}, Facts: gpuwarden.Facts{}, Notes: []string{}}
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

// canaryFlags are the canary's own flags beside the stack flags it shares
// with lock.
type canaryFlags struct {
	stackFlags
	// noLock checks the box alone; without it a missing lock is a finding.
	noLock bool
	// strict makes a partial pass exit canaryDrift.
	strict bool
	alloc  uint64
}

func (a *app) canaryCommand() *cobra.Command {
	var (
		f        canaryFlags
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
Each GPU NVML lists is probed, found in CUDA by its UUID: an inherited
CUDA_VISIBLE_DEVICES is ignored for the probe (and said so in the log). A GPU
in MIG mode is not probed (CUDA sees only its MIG instances): its cuda check
is a skip and the verdict partial.

A missing lock (--lock, default ./gpuwarden.lock) is a finding, so that a
mistyped path or a CI job that never made a lock does not pass: create one
with ` + "`gpuwarden lock`" + ` on a box where the job works, or pass --no-lock to check
the box alone. Every verdict says which locked fields were compared, which
the lock's own ignore rule leaves out, and which were skipped and why. A
field the lock pins but this run could not check (the GPU's under --cpu-ok
on a host without a driver, the frameworks' under --no-frameworks), or GPU
checks skipped under --cpu-ok, make a pass partial: "OK (partial)" in the
table, "verdict": "partial" and "complete": false in -o json.

Exit codes (canary's own):
  0  ok, or a partial pass (OK (partial)) unless --strict
  1  drift: the stack differs from the lock; no lock (unless --no-lock);
     with --strict, a partial pass
  2  GPU fault: health counters, a failed verify, a hung or failed call
  3  no NVIDIA driver or GPU (--cpu-ok checks the host alone instead: then
     0 partial, or 1 on drift or a missing lock)
  4  usage or internal error (a malformed lock, a bad flag)`,
		Example: `  gpuwarden canary
  gpuwarden canary --no-frameworks --alloc 4 -o json
  gpuwarden lock --simulate 2xH100 && gpuwarden canary --simulate 2xH100
  gpuwarden canary --lock ci/gpuwarden.lock --cpu-ok --strict   # exit 1 unless every locked field was checked
  gpuwarden canary --no-lock --simulate 1xH100                  # the GPU alone, no stack check`,
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
			f.alloc = uint64(allocGiB * (1 << 30))
			var lock *gpuwarden.Lock
			if f.noLock {
				if cmd.Flags().Changed("lock") {
					return usage(gpuwarden.Errorf(gpuwarden.EInvalid, "--lock %s and --no-lock contradict each other", f.lockFile).
						WithHint("give --lock to check the box against that file, or --no-lock to check the box alone"))
				}
				f.lockFile = ""
			} else {
				var err error
				if lock, err = readLockIfAny(f.lockFile); err != nil {
					return usage(err)
				}
			}
			gpus, openErr := f.gpu.open(a)
			if openErr != nil && gpuwarden.ErrorCodeOf(openErr) != gpuwarden.EEnvironment {
				return usage(openErr)
			}
			r := a.runCanary(cmd.Context(), &f, lock, gpus, openErr)
			var err error
			if r.ExitCode == canaryNoDriver {
				return &exitError{code: canaryNoDriver, err: errors.New(r.Notes[len(r.Notes)-1])}
			}
			if output == "json" {
				err = writeJSON(a.stdout, "canary", r)
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
	c.Flags().BoolVar(&f.noLock, "no-lock", false, "check the box alone: do not compare the stack with a lock (without it a missing lock is a finding)")
	c.Flags().BoolVar(&f.strict, "strict", false, "exit 1 on a partial pass: a locked field or the GPU checks skipped")
	c.Flags().Float64Var(&allocGiB, "alloc", 1, "GiB to allocate and verify on each GPU")
	c.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	c.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usage(gpuwarden.Errorf(gpuwarden.EInvalid, "%s", err).WithHint("see %s --help", c.CommandPath()))
	})
	return c
}

// readLockIfAny reads the lock. A missing one is not an error here, because
// the canary still checks the GPU and reports the missing lock as a finding;
// a malformed or unreadable one is a usage error.
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
func (a *app) runCanary(parent context.Context, f *canaryFlags, lock *gpuwarden.Lock,
	gpus gpuwarden.GPUs, openErr error) *canaryReport {
	start := time.Now()
	ctx, cancel := context.WithTimeout(parent, f.gpu.timeout)
	defer cancel()
	r := newCanaryReport(f.lockFile)
	defer func() { r.Seconds = time.Since(start).Seconds() }()

	if openErr != nil {
		if !f.gpu.cpuOK {
			r.verdict(canaryNoDriver, verdictNoDriver)
			r.Notes = append(r.Notes, "no NVIDIA driver on this host ("+strings.TrimPrefix(openErr.Error(), "no NVIDIA driver: ")+
				"): there is no GPU to check; pass --cpu-ok on CPU-only smoke-test hosts")
			return r
		}
		r.add("driver", -1, statusSkip, "no NVIDIA driver; --cpu-ok checks the host stack only")
		r.gpuSkipped = true
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
		a.checkGPUs(ctx, &f.stackFlags, gpus, f.alloc, r)
	}
	wg.Wait()
	r.Facts, r.Notes = facts, append(r.Notes, notes...)
	if r.Facts == nil {
		r.Facts = gpuwarden.Facts{}
	}
	r.compare(lock, f.noLock, gpus == nil, f.noFrameworks)
	r.decide(f.strict)
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
		case len(h.XIDSources) > 0 && !allLive(h.XIDSources):
			// No Xid from a source that cannot be read is not a clean card.
			r.add("health", g.Index, statusWarn, "%s; Xid source unavailable: %s",
				cleanHealth(h, false), gpuwarden.DescribeXIDSources(h.XIDSources))
		default:
			r.add("health", g.Index, statusOK, "%s", cleanHealth(h, true))
		}
	}
	results := make([]probeOutcome, len(r.GPUs))
	var wg sync.WaitGroup
	seed := uint64(time.Now().UnixNano()) | 1
	for i, g := range r.GPUs {
		if g.MIG {
			// CUDA sees only the MIG instances, and the probe finds the GPU by its own UUID.
			results[i] = probeOutcome{skip: "skipped: MIG enabled: CUDA sees only the MIG instances; the live probe needs the whole device"}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := gpuwarden.ProbeRequest{Index: g.Index, UUID: g.UUID, AllocBytes: min(alloc, g.VRAMBytes*9/10), Seed: seed + uint64(i)}
			res, err := a.probeGPU(ctx, f.gpu.simulate, req)
			results[i] = probeOutcome{req: req, res: res, err: err}
		}()
	}
	wg.Wait()
	for i, g := range r.GPUs {
		r.probeChecks(g, results[i])
	}
}

type probeOutcome struct {
	req  gpuwarden.ProbeRequest
	res  gpuwarden.ProbeResult
	err  error
	skip string
}

// cleanHealth says what a clean read covered: under MIG row remapping is
// not reported, and "no row-remap errors" would claim what nobody read.
func cleanHealth(h gpuwarden.Health, xids bool) string {
	checked := []string{"uncorrected ECC"}
	if _, unknown := h.Unknown["remap_pending"]; !unknown {
		checked = append(checked, "row-remap")
	}
	if xids {
		checked = append(checked, "Xid")
	}
	list := checked[0]
	if n := len(checked); n > 1 {
		list = strings.Join(checked[:n-1], ", ") + " or " + checked[n-1]
	}
	text := "no " + list + " errors"
	var unknown []string
	for _, k := range slices.Sorted(maps.Keys(h.Unknown)) {
		unknown = append(unknown, k+" "+gpuwarden.UnknownText(h.Unknown[k]))
	}
	if len(unknown) > 0 {
		text += "; unknown: " + strings.Join(unknown, ", ")
	}
	return text
}

// allLive reports whether every Xid source is read.
func allLive(sources []gpuwarden.XIDSource) bool {
	for _, s := range sources {
		if !s.Live {
			return false
		}
	}
	return true
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
	if o.skip != "" {
		// Not proven is not OK: the verdict becomes partial.
		r.add("cuda", g.Index, statusSkip, "%s", o.skip)
		r.gpuSkipped = true
		return
	}
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
	cat, err := catalog.EmbeddedTables()
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

// compare checks the facts against the lock and adds the lock rows. On a
// host without a driver under --cpu-ok the GPU's own fields were not probed,
// nor were the Python ones under --no-frameworks: they are skipped, and
// said to be, rather than dropped from the count. A missing lock is a
// finding unless --no-lock asked to check the box alone.
func (r *canaryReport) compare(lock *gpuwarden.Lock, noLock, noGPU, noPython bool) {
	if noLock {
		r.add("lock", -1, statusSkip, "--no-lock: the stack is not compared with a lock")
		return
	}
	if lock == nil {
		r.lockMissing = true
		r.add("lock", -1, statusMissing, "no %s here", r.Lock)
		record := "gpuwarden lock"
		if r.Lock != defaultLockFile {
			record += " --lock " + shellWord(r.Lock)
		}
		r.Notes = append(r.Notes, fmt.Sprintf("no lock at %s, so nothing says which stack this box should run: "+
			"record one with `%s` on a box where the job works, or pass --no-lock to check this box alone", r.Lock, record))
		return
	}
	var rules []skipRule
	if noGPU {
		rules = append(rules, skipGPU)
	}
	if noPython {
		rules = append(rules, skipFrameworks)
	}
	c := canary.Compare(lock, r.Facts, func(field string) string {
		for _, s := range rules {
			if s.covers(field) {
				return s.why
			}
		}
		return ""
	})
	r.Compared, r.Ignored, r.Skipped, r.Drift = c.Compared, c.Ignored, c.Skipped, c.Drift
	r.lockRead = true

	n := len(c.Compared)
	switch {
	case len(c.Drift) > 0:
		r.add("lock", -1, statusDrift, "%d of %d compared %s differ from %s", len(c.Drift), n, plural(n, "field", "fields"), r.Lock)
	case n == 0 && len(c.Skipped) > 0:
		r.add("lock", -1, statusSkip, "no field of %s compared here", r.Lock)
	default:
		r.add("lock", -1, statusOK, "%d %s match %s", n, plural(n, "field", "fields"), r.Lock)
	}
	for _, s := range rules {
		k := 0
		for _, sk := range c.Skipped {
			if sk.Why == s.why {
				k++
			}
		}
		if k > 0 {
			r.add("lock", -1, statusSkip, "%d %s %s not compared: %s", k, s.kind, plural(k, "field", "fields"), s.why)
		}
	}
}

// shellWord quotes path for a command line the user may paste, when it
// needs quoting.
func shellWord(path string) string {
	if path != "" && !strings.ContainsAny(path, " \t\n'\"\\$`*?[]{}()<>|&;#~!") {
		return path
	}
	return "'" + strings.ReplaceAll(path, "'", `'\''`) + "'"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// decide turns the checks into the verdict: a fault outranks drift or a
// missing lock, which outrank a partial pass. A pass is partial when a
// locked field or the GPU checks were skipped; it exits 0 unless strict, so
// that --cpu-ok smoke tests keep passing while -o json says
// "complete": false. Complete is false with a missing lock too.
func (r *canaryReport) decide(strict bool) {
	code, verdict := canaryOK, verdictOK
	for _, c := range r.Checks {
		switch {
		case c.Status == statusFail:
			code, verdict = canaryFault, verdictFault
		case c.Status == statusMissing && code == canaryOK:
			code, verdict = canaryDrift, verdictNoLock
		case c.Status == statusDrift && code == canaryOK:
			code, verdict = canaryDrift, verdictDrift
		}
	}
	r.Complete = !r.gpuSkipped && len(r.Skipped) == 0 && !r.lockMissing
	if !r.Complete && code == canaryOK {
		verdict = verdictPartial
		if strict {
			code = canaryDrift
		}
	}
	r.verdict(code, verdict)
}

func (r *canaryReport) verdict(code int, verdict string) { r.ExitCode, r.Verdict = code, verdict }

// verdictLabel is the verdict as the table's last line shows it.
func (r *canaryReport) verdictLabel() string {
	if r.Verdict == verdictPartial {
		return "OK (partial)"
	}
	return strings.ToUpper(r.Verdict)
}

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
	r.fieldLists(&b)
	for _, n := range r.Notes {
		fmt.Fprint(&b, wrap(n, "note: ", pageWidth))
	}
	fmt.Fprintf(&b, "\nVerdict   %s (exit %d) in %.2f s\n", r.verdictLabel(), r.ExitCode, r.Seconds)
	_, err := io.WriteString(w, b.String())
	return err
}

// fieldLists names the locked fields the verdict rests on: those compared,
// those the lock ignores, and those skipped, grouped by why. A lock that was
// read always gets its Compared line, even when it is "(none)".
func (r *canaryReport) fieldLists(b *strings.Builder) {
	if !r.lockRead {
		return
	}
	list := func(lead, text string, fields []string, tail string) {
		text += strings.Join(fields, ", ")
		if len(fields) == 0 {
			text += "(none)"
		}
		fmt.Fprint(b, wrapHanging(text+tail, lead, strings.Repeat(" ", len("Compared  ")), pageWidth))
	}
	fmt.Fprintln(b)
	list("Compared  ", "", r.Compared, "")
	if len(r.Ignored) > 0 {
		list("Ignored   ", "", r.Ignored, " (match: ignore)")
	}
	var whys []string
	byWhy := map[string][]string{}
	for _, s := range r.Skipped {
		if _, ok := byWhy[s.Why]; !ok {
			whys = append(whys, s.Why)
		}
		byWhy[s.Why] = append(byWhy[s.Why], s.Field)
	}
	for _, why := range whys {
		list("Skipped   ", why+": ", byWhy[why], "")
	}
}
