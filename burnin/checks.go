package burnin

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/catalog"
)

// Thresholds of the ratio checks, as shares of the reference.
const (
	// RefFail and RefWarn are the bandwidth and FP32 lines: DCGM's pass line
	// is 0.75 of a measured reference, and 0.85 flags a card that drifts
	// towards it.
	RefFail = 0.75
	RefWarn = 0.85
	// PCIeFail and PCIeWarn are the lines for pinned copies against the
	// link's theoretical rate; a healthy ×16 link reaches about 80 %.
	PCIeFail = 0.50
	PCIeWarn = 0.70
)

// Expectation is what one GPU model should reach in a burn-in.
type Expectation struct {
	Model string
	// BandwidthGBs is the device copy reference, read plus write, GB/s.
	BandwidthGBs float64
	// FP32TFLOPs is the FMA soak reference.
	FP32TFLOPs float64
	// BF16TFLOPs is the cuBLASLt bf16 GEMM reference.
	BF16TFLOPs float64
	// Measured says the references are measured figures, not datasheet shares.
	Measured bool
}

// anchors are references measured on real cards (the project's anchors):
// a measured figure beats any share of a datasheet.
var anchors = map[string]Expectation{
	"H200": {Model: "H200", BandwidthGBs: 4300, FP32TFLOPs: 57.5, BF16TFLOPs: 804, Measured: true},
}

// Expectations returns the reference of every model in the embedded GPU
// table: the measured anchors where there are some, else 0.9 of the
// datasheet bandwidth and 0.86 of the datasheet FP32 (what a plain copy
// and FMA kernel reach on the cards that were measured).
func Expectations() (map[string]Expectation, error) {
	cat, err := catalog.EmbeddedTables()
	if err != nil {
		return nil, fmt.Errorf("burnin: gpu table: %w", err)
	}
	out := make(map[string]Expectation, len(cat.GPUs))
	for _, g := range cat.GPUs {
		e := Expectation{Model: g.Model, BandwidthGBs: 0.9 * g.MemBWTBs * 1000, FP32TFLOPs: 0.86 * g.FP32TFLOPs,
			BF16TFLOPs: 0.8 * g.BF16TFLOPs}
		if a, ok := anchors[g.Model]; ok {
			e = a
		}
		out[g.Model] = e
	}
	return out, nil
}

// worse returns the worse of two verdicts, for the report's.
func worse(a, b string) string {
	// A skipped check proved nothing: a report with one is not a PASS, or
	// a script would take a box whose GPUs were not burnt in for a proven
	// one. It is a WARN (exit 1; --fail-on fail lets it through), and the
	// table says how many checks were skipped and why.
	if b == gpuwarden.VerdictSkip {
		b = gpuwarden.VerdictWarn
	}
	rank := map[string]int{gpuwarden.VerdictPass: 0, "": 0, gpuwarden.VerdictWarn: 1, gpuwarden.VerdictFail: 2}
	if rank[b] > rank[a] {
		return b
	}
	if a == "" {
		return gpuwarden.VerdictPass
	}
	return a
}

// ratioVerdict holds a value against a reference: FAIL below fail, WARN
// below warn, both shares of the reference.
func ratioVerdict(value, ref, fail, warn float64) (verdict, line string) {
	switch r := value / ref; {
	case r < fail:
		return gpuwarden.VerdictFail, fmt.Sprintf("FAIL below %s %%", pct(fail))
	case r < warn:
		return gpuwarden.VerdictWarn, fmt.Sprintf("WARN below %s %%", pct(warn))
	default:
		return gpuwarden.VerdictPass, fmt.Sprintf("WARN below %s %%", pct(warn))
	}
}

// pct shows a share as a whole percentage, rounded down so that 84.9 %
// never reads as the 85 % line it is below.
func pct(share float64) string {
	return fmt.Sprint(int(math.Floor(share*100 + 1e-9)))
}

// refCheck builds the bandwidth or FP32 check of one GPU.
func refCheck(name string, gpu int, value, ref float64, unit, model string) gpuwarden.BurnCheck {
	c := gpuwarden.BurnCheck{Name: name, GPU: &gpu, Value: value, Unit: unit, Expect: ref}
	if ref <= 0 {
		c.Verdict = gpuwarden.VerdictWarn
		c.Reason = fmt.Sprintf("no reference for model %q: %s not judged", model, name)
		return c
	}
	v, line := ratioVerdict(value, ref, RefFail, RefWarn)
	c.Verdict = v
	c.Reason = fmt.Sprintf("%s is %s %% of the %s reference for %s (%s)",
		num(value, unit), pct(value/ref), num(ref, unit), model, line)
	return c
}

// pcieLaneGBs is the usable rate of one PCIe lane per generation, GB/s,
// after line encoding.
var pcieLaneGBs = map[int]float64{3: 0.985, 4: 1.969, 5: 3.938}

// pcieCheck holds the slower direction of the pinned copies against the
// link's generation and width.
func pcieCheck(gpu int, g gpuwarden.GPU, r gpuwarden.BurnResult) gpuwarden.BurnCheck {
	value := math.Min(r.HostToDeviceGBs, r.DeviceToHostGBs)
	c := gpuwarden.BurnCheck{Name: "pcie", GPU: &gpu, Value: value, Unit: "GB/s"}
	lane, ok := pcieLaneGBs[g.PCIeGen]
	if !ok || g.PCIeWidth <= 0 {
		c.Verdict = gpuwarden.VerdictPass
		c.Reason = fmt.Sprintf("h2d %s, d2h %s; link generation unknown, not judged", num(r.HostToDeviceGBs, "GB/s"), num(r.DeviceToHostGBs, "GB/s"))
		return c
	}
	c.Expect = lane * float64(g.PCIeWidth)
	v, line := ratioVerdict(value, c.Expect, PCIeFail, PCIeWarn)
	c.Verdict = v
	c.Reason = fmt.Sprintf("h2d %.1f, d2h %.1f GB/s: the slower is %s %% of gen%d x%d (%s)",
		r.HostToDeviceGBs, r.DeviceToHostGBs, pct(value/c.Expect), g.PCIeGen, g.PCIeWidth, line)
	return c
}

// memCheck fails on any memory error, naming where.
func memCheck(gpu int, m gpuwarden.MemTestResult) gpuwarden.BurnCheck {
	c := gpuwarden.BurnCheck{Name: "memory", GPU: &gpu, Value: float64(m.Errors), Unit: "errors", Verdict: gpuwarden.VerdictPass}
	if m.Errors == 0 {
		c.Reason = fmt.Sprintf("%s GiB x %d patterns (%s) at %s, no errors",
			fmt.Sprintf("%.1f", float64(m.Bytes)/(1<<30)), len(m.Patterns), strings.Join(m.Patterns, " "), num(m.GBs, "GB/s"))
		return c
	}
	offs := m.BadOffsets
	if len(offs) > 16 {
		offs = offs[:16]
	}
	hex := make([]string, len(offs))
	for i, o := range offs {
		hex[i] = fmt.Sprintf("%#x", o)
	}
	c.Verdict = gpuwarden.VerdictFail
	c.Reason = fmt.Sprintf("%d wrong words, first at byte offsets %s", m.Errors, strings.Join(hex, ", "))
	return c
}

// gemmChecks judge the bf16 cuBLASLt soak, when it ran: any result that
// differs from the first is a FAIL, the rate is held against the reference.
func gemmChecks(gpu int, r gpuwarden.BurnResult, ref float64, model string) []gpuwarden.BurnCheck {
	g := r.GEMM
	if g == nil || !g.Available {
		return nil
	}
	c := gpuwarden.BurnCheck{Name: "bf16-gemm", GPU: &gpu, Value: float64(g.Mismatches), Unit: "mismatches", Verdict: gpuwarden.VerdictPass,
		Reason: fmt.Sprintf("%d GEMMs of %d³ identical to the first, bit for bit", g.Runs, g.Dim)}
	if g.Mismatches > 0 {
		c.Verdict = gpuwarden.VerdictFail
		c.Reason = fmt.Sprintf("%d elements of %d repeated GEMMs differ from the first result: the card computes wrong answers", g.Mismatches, g.Runs)
	}
	rate := refCheck("bf16", gpu, g.TFLOPs, ref, "TFLOP/s", model)
	if g.Algo != "" && g.Algo != "heuristic" {
		// The rate of cuBLASLt's no-workspace default is not the card's.
		rate.Reason += "; algorithm: " + g.Algo
	}
	return []gpuwarden.BurnCheck{c, rate}
}

// soakLength writes how long a soak ran, to the precision that matters:
// whole seconds from 10 s, tenths below, milliseconds under a second.
func soakLength(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d >= 10*time.Second:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// fmaCheck fails on any FMA result that differs from the recomputed one.
func fmaCheck(gpu int, r gpuwarden.BurnResult) gpuwarden.BurnCheck {
	c := gpuwarden.BurnCheck{Name: "fma", GPU: &gpu, Value: float64(r.FMAErrors), Unit: "errors", Verdict: gpuwarden.VerdictPass,
		Reason: fmt.Sprintf("every FMA result verified over a %s soak", soakLength(r.SoakSeconds))}
	if r.FMAErrors > 0 {
		c.Verdict = gpuwarden.VerdictFail
		c.Reason = fmt.Sprintf("%d FMA results differ from the recomputed ones: the card computes wrong answers", r.FMAErrors)
	}
	return c
}

// throttleReasons are the reasons that mean a loaded card was slowed down;
// gpu_idle, applications clocks and the like are not throttling.
var throttleReasons = map[string]bool{
	"hw_thermal_slowdown": true, "sw_thermal_slowdown": true, "hw_slowdown": true,
	"sw_power_cap": true, "hw_power_brake_slowdown": true,
}

// throttleCheck warns when any sample taken under load names a throttle reason.
func throttleCheck(gpu int, samples []gpuwarden.Telemetry) gpuwarden.BurnCheck {
	seen := map[string]bool{}
	n, hottest := 0, 0.0
	for _, s := range samples {
		hit := false
		for _, r := range s.ThrottleReasons {
			if throttleReasons[r] {
				seen[r], hit = true, true
			}
		}
		if hit {
			n++
		}
		hottest = math.Max(hottest, s.TempC)
	}
	c := gpuwarden.BurnCheck{Name: "throttle", GPU: &gpu, Value: float64(n), Unit: "samples", Verdict: gpuwarden.VerdictPass,
		Reason: fmt.Sprintf("no throttling in %d samples under load, hottest %.0f C", len(samples), hottest)}
	if n > 0 {
		reasons := make([]string, 0, len(seen))
		for r := range seen {
			reasons = append(reasons, r)
		}
		sort.Strings(reasons)
		c.Verdict = gpuwarden.VerdictWarn
		c.Reason = fmt.Sprintf("throttled under load (%s) in %d of %d samples, hottest %.0f C",
			strings.Join(reasons, ", "), n, len(samples), hottest)
	}
	return c
}

// healthCheck fails when ECC errors or Xids appeared during the burn-in, or
// when the card's counters say it must not be trusted at all.
func healthCheck(gpu int, before, after gpuwarden.Health, err error) gpuwarden.BurnCheck {
	c := gpuwarden.BurnCheck{Name: "health", GPU: &gpu, Unit: "events", Verdict: gpuwarden.VerdictPass}
	if err != nil {
		c.Verdict = gpuwarden.VerdictWarn
		c.Reason = fmt.Sprintf("could not read the error counters: %v", err)
		return c
	}
	var why []string
	ecc := int64(after.ECCVolatileUncorrected) - int64(before.ECCVolatileUncorrected)
	if ecc > 0 {
		why = append(why, fmt.Sprintf("%d new uncorrected ECC errors", ecc))
	}
	newXIDs := after.XIDs
	if len(before.XIDs) <= len(newXIDs) {
		newXIDs = newXIDs[len(before.XIDs):]
	}
	for _, x := range newXIDs {
		m, _ := gpuwarden.XIDMeaning(x.XID)
		why = append(why, fmt.Sprintf("new Xid %d (%s)", x.XID, m))
	}
	c.Value = float64(max(ecc, 0) + int64(len(newXIDs)))
	if len(why) == 0 && after.Faulty() {
		// Errors from before the burn-in still disqualify the card.
		for _, x := range after.XIDs {
			m, _ := gpuwarden.XIDMeaning(x.XID)
			why = append(why, fmt.Sprintf("Xid %d (%s) since the driver loaded", x.XID, m))
		}
		if after.ECCVolatileUncorrected > 0 {
			why = append(why, fmt.Sprintf("%d uncorrected ECC errors since the driver loaded", after.ECCVolatileUncorrected))
		}
		if after.RemapPending || after.RemapFailed {
			why = append(why, "a row remap is pending or failed")
		}
		c.Value = float64(len(why))
	}
	if len(why) > 0 {
		c.Verdict = gpuwarden.VerdictFail
		c.Reason = strings.Join(why, "; ")
		return c
	}
	c.Reason = "no ECC errors or Xids before or during the burn-in"
	return c
}

// num writes a figure with its unit: thousands grouped at 1,000 and up,
// one decimal below.
func num(v float64, unit string) string {
	if math.Abs(v) >= 1000 {
		return group(int64(math.Round(v))) + " " + unit
	}
	if v == math.Trunc(v) && (unit == "errors" || unit == "samples" || unit == "events") {
		return fmt.Sprintf("%d %s", int64(v), unit)
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}

// group writes an integer with comma thousands separators.
func group(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
