package burnin

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/gpusim"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// quickOptions is a quick burn-in shrunk for tests: a few MiB of disk, a
// short CPU soak and telemetry every few milliseconds.
func quickOptions(t *testing.T) Options {
	return Options{Mode: ModeQuick, DataDir: t.TempDir(), DiskBytes: 3<<20 + 4096, Seed: 42,
		sampleEvery: 2 * time.Millisecond, cpuFor: 50 * time.Millisecond,
		hostname: func() (string, error) { return "node-a", nil }}
}

func sim(t *testing.T, spec string) *gpusim.Sim {
	t.Helper()
	s, err := gpusim.ParseSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	return gpusim.New(s)
}

// check finds the check of a name on a GPU (−1: the host).
func check(r gpuwarden.BurnReport, name string, gpu int) (gpuwarden.BurnCheck, bool) {
	for _, c := range r.Checks {
		if c.Name == name && ((c.GPU == nil && gpu < 0) || (c.GPU != nil && *c.GPU == gpu)) {
			return c, true
		}
	}
	return gpuwarden.BurnCheck{}, false
}

func TestRunSimulated(t *testing.T) {
	tests := []struct {
		spec    string
		inject  bool
		verdict string
		// The check that decides the verdict and words its reason must hold;
		// also names another check allowed to share its verdict.
		check  string
		reason []string
		also   string
	}{
		{spec: "1xH100", verdict: gpuwarden.VerdictPass},
		{spec: "1xH200", verdict: gpuwarden.VerdictPass},
		{spec: "1xH100,fault=badmem", verdict: gpuwarden.VerdictFail, check: "memory",
			reason: []string{"3 wrong words", "0x1f4000, 0x1f4004, 0x3e8000"}},
		{spec: "1xH100", inject: true, verdict: gpuwarden.VerdictFail, check: "memory", reason: []string{"0x100000"}},
		{spec: "1xH100,fault=throttle", verdict: gpuwarden.VerdictWarn, check: "throttle", reason: []string{"hw_thermal_slowdown"}, also: "fp32"},
		{spec: "1xH100,fault=slowbw", verdict: gpuwarden.VerdictWarn, check: "bandwidth",
			reason: []string{"is 80 % of the 3,015 GB/s reference for H100-SXM (WARN below 85 %)"}},
		{spec: "1xH100,fault=xid", verdict: gpuwarden.VerdictFail, check: "health", reason: []string{"Xid 79", "fallen off the bus"}},
		{spec: "1xH100,fault=ecc", verdict: gpuwarden.VerdictFail, check: "health", reason: []string{"uncorrected ECC"}},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			s := sim(t, tt.spec)
			o := quickOptions(t)
			o.InjectFault = tt.inject
			start := time.Now()
			r, err := Run(context.Background(), s, s.Burn, o)
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
			if r.Verdict != tt.verdict {
				t.Errorf("verdict %s, want %s; checks %+v", r.Verdict, tt.verdict, r.Checks)
			}
			for _, c := range r.Checks {
				if tt.check == "" && c.Verdict != gpuwarden.VerdictPass {
					t.Errorf("%s: %s %s", c.Name, c.Verdict, c.Reason)
				}
				if tt.check != "" && c.Name != tt.check && c.Name != tt.also && c.Verdict != gpuwarden.VerdictPass {
					t.Errorf("%s should pass: %s %s", c.Name, c.Verdict, c.Reason)
				}
			}
			if tt.check != "" {
				c, ok := check(r, tt.check, 0)
				if !ok || c.Verdict != tt.verdict {
					t.Fatalf("check %s = %+v", tt.check, c)
				}
				for _, want := range tt.reason {
					if !strings.Contains(c.Reason, want) {
						t.Errorf("reason %q lacks %q", c.Reason, want)
					}
				}
			}
			if len(r.Results) != 1 || len(r.Telemetry) == 0 || r.Node == "" || r.Host != "node-a" || len(r.Checks) != 11 {
				t.Errorf("report: %d results, %d samples, node %q host %q, %d checks", len(r.Results), len(r.Telemetry), r.Node, r.Host, len(r.Checks))
			}
			if left, _ := filepath.Glob(filepath.Join(o.DataDir, "*")); len(left) != 0 {
				t.Errorf("disk soak left %v", left)
			}
		})
	}
}

func TestRunThrottleIsWarnEvenWithFP32(t *testing.T) {
	// A throttled card's FP32 drops too; the report must say both, as WARNs.
	s := sim(t, "1xH200,fault=throttle")
	r, err := Run(context.Background(), s, s.Burn, quickOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := check(r, "fp32", 0); c.Verdict != gpuwarden.VerdictWarn || !strings.Contains(c.Reason, "reference for H200") {
		t.Errorf("fp32 = %+v", c)
	}
}

func TestRunBurnError(t *testing.T) {
	s := sim(t, "2xH100")
	burn := func(ctx context.Context, req gpuwarden.BurnRequest) (gpuwarden.BurnResult, error) {
		if req.Index == 1 {
			return gpuwarden.BurnResult{}, errors.New("child exited: signal: killed after 90s")
		}
		return s.Burn(ctx, req)
	}
	r, err := Run(context.Background(), s, burn, quickOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	c, ok := check(r, "burn", 1)
	if !ok || c.Verdict != gpuwarden.VerdictFail || !strings.Contains(c.Reason, "signal: killed") || r.Verdict != gpuwarden.VerdictFail {
		t.Errorf("burn check %+v, verdict %s", c, r.Verdict)
	}
	if c, ok := check(r, "bandwidth", 0); !ok || c.Verdict != gpuwarden.VerdictPass {
		t.Errorf("GPU 0 should still pass: %+v", c)
	}
	if len(r.Results) != 1 || r.Results[0].Index != 0 {
		t.Errorf("results %+v", r.Results)
	}
}

func TestRunParallel(t *testing.T) {
	s := sim(t, "2xA100-80GB")
	// Each burn waits until both have started: run one after the other,
	// they would time out.
	var started sync.WaitGroup
	started.Add(2)
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	burn := func(ctx context.Context, req gpuwarden.BurnRequest) (gpuwarden.BurnResult, error) {
		started.Done()
		select {
		case <-all:
		case <-time.After(3 * time.Second):
			return gpuwarden.BurnResult{}, errors.New("the other GPU never started: burns ran one after the other")
		}
		return s.Burn(ctx, req)
	}
	r, err := Run(context.Background(), s, burn, quickOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != gpuwarden.VerdictPass || len(r.Results) != 2 || r.Results[0].Index != 0 || r.Results[1].Index != 1 {
		t.Errorf("verdict %s, results %+v, checks %+v", r.Verdict, r.Results, r.Checks)
	}
	if r.Node != NodeID("node-a", r.GPUs) || NodeID("node-a", r.GPUs) == NodeID("node-b", r.GPUs) || len(r.Node) != 16 {
		t.Errorf("node %q", r.Node)
	}
}

func TestRunHostFaults(t *testing.T) {
	tests := []struct {
		name   string
		set    func(*Options)
		check  string
		reason string
	}{
		{"disk mismatch", func(o *Options) {
			o.afterWrite = func(path string) error {
				f, err := os.OpenFile(path, os.O_RDWR, 0)
				if err != nil {
					return err
				}
				defer f.Close()
				b := []byte{0}
				if _, err := f.ReadAt(b, 0x123457); err != nil {
					return err
				}
				b[0] ^= 0x10
				_, err = f.WriteAt(b, 0x123457)
				return err
			}
		}, "disk-read", "first at byte offset 0x123457"},
		{"disk unwritable", func(o *Options) { o.DataDir = filepath.Join(o.DataDir, "missing") }, "disk", "no such file"},
		{"cpu wrong", func(o *Options) { o.cpuCorrupt = func(v uint64) uint64 { return v ^ 1 } }, "cpu", "wrong result"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := sim(t, "1xH100")
			o := quickOptions(t)
			tt.set(&o)
			r, err := Run(context.Background(), s, s.Burn, o)
			if err != nil {
				t.Fatal(err)
			}
			c, ok := check(r, tt.check, -1)
			if !ok || c.Verdict != gpuwarden.VerdictFail || !strings.Contains(c.Reason, tt.reason) || r.Verdict != gpuwarden.VerdictFail {
				t.Errorf("check %+v, verdict %s", c, r.Verdict)
			}
		})
	}
}

func TestRunErrors(t *testing.T) {
	s := sim(t, "1xH100")
	o := quickOptions(t)
	o.Mode = "forever"
	if _, err := Run(context.Background(), s, s.Burn, o); gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
		t.Errorf("unknown mode: %v", err)
	}
	nd := sim(t, "nodriver")
	if _, err := Run(context.Background(), nd, nd.Burn, quickOptions(t)); err == nil || !strings.Contains(err.Error(), "burnin: list gpus") {
		t.Errorf("no driver: %v", err)
	}
}

func TestRequest(t *testing.T) {
	q, _ := Request(ModeQuick, 0)
	d, _ := Request(ModeDefault, 0)
	s, _ := Request(ModeSoak, 2*time.Hour)
	if len(q.Patterns) != 3 || q.SoakSeconds != 15 || q.BandwidthRuns != 5 || q.MemFraction != 0.95 {
		t.Errorf("quick %+v", q)
	}
	if len(d.Patterns) != 7 || d.SoakSeconds != 120 || d.BandwidthRuns != 9 {
		t.Errorf("default %+v", d)
	}
	if len(s.Patterns) != 21 || s.SoakSeconds != 7200 {
		t.Errorf("soak %+v", s)
	}
}

func TestThresholds(t *testing.T) {
	tests := []struct {
		name     string
		share    float64
		ref      float64
		unit     string
		verdict  string
		inReason string
	}{
		{"bandwidth", 0.74, 4300, "GB/s", gpuwarden.VerdictFail, "3,182 GB/s is 74 % of the 4,300 GB/s reference for H200 (FAIL below 75 %)"},
		{"bandwidth", 0.76, 4300, "GB/s", gpuwarden.VerdictWarn, "is 76 % of the 4,300 GB/s reference for H200 (WARN below 85 %)"},
		{"bandwidth", 0.84, 4300, "GB/s", gpuwarden.VerdictWarn, "3,612 GB/s is 84 % of the 4,300 GB/s reference for H200 (WARN below 85 %)"},
		{"bandwidth", 0.86, 4300, "GB/s", gpuwarden.VerdictPass, "is 86 % of the 4,300 GB/s reference"},
		{"bandwidth", 0.75, 4300, "GB/s", gpuwarden.VerdictWarn, "is 75 %"},
		{"bandwidth", 0.85, 4300, "GB/s", gpuwarden.VerdictPass, "is 85 %"},
		{"bandwidth", 0.849, 4300, "GB/s", gpuwarden.VerdictWarn, "is 84 %"},
		{"fp32", 0.74, 57.5, "TFLOP/s", gpuwarden.VerdictFail, "42.5 TFLOP/s is 74 % of the 57.5 TFLOP/s reference"},
		{"fp32", 0.76, 57.5, "TFLOP/s", gpuwarden.VerdictWarn, "(WARN below 85 %)"},
		{"fp32", 0.84, 57.5, "TFLOP/s", gpuwarden.VerdictWarn, "is 84 %"},
		{"fp32", 0.86, 57.5, "TFLOP/s", gpuwarden.VerdictPass, "is 86 %"},
	}
	for _, tt := range tests {
		c := refCheck(tt.name, 0, tt.share*tt.ref, tt.ref, tt.unit, "H200")
		if c.Verdict != tt.verdict || !strings.Contains(c.Reason, tt.inReason) {
			t.Errorf("%s at %.3f: %s %q, want %s containing %q", tt.name, tt.share, c.Verdict, c.Reason, tt.verdict, tt.inReason)
		}
	}
	g := gpuwarden.GPU{PCIeGen: 5, PCIeWidth: 16}
	for _, tt := range []struct {
		share   float64
		verdict string
	}{{0.49, gpuwarden.VerdictFail}, {0.51, gpuwarden.VerdictWarn}, {0.69, gpuwarden.VerdictWarn}, {0.71, gpuwarden.VerdictPass}} {
		v := tt.share * 3.938 * 16
		if c := pcieCheck(0, g, gpuwarden.BurnResult{HostToDeviceGBs: v, DeviceToHostGBs: v + 1}); c.Verdict != tt.verdict {
			t.Errorf("pcie at %.2f: %s %q, want %s", tt.share, c.Verdict, c.Reason, tt.verdict)
		}
	}
	e, err := Expectations()
	if err != nil {
		t.Fatal(err)
	}
	if h := e["H200"]; h.BandwidthGBs != 4300 || h.FP32TFLOPs != 57.5 || !h.Measured {
		t.Errorf("H200 expectation %+v", h)
	}
	if h := e["H100-SXM"]; h.BandwidthGBs != 0.9*3350 || h.FP32TFLOPs != 0.86*67 || h.Measured {
		t.Errorf("H100 expectation %+v", h)
	}
}

func TestMemCheckNamesAtMost16Offsets(t *testing.T) {
	offs := make([]uint64, 20)
	for i := range offs {
		offs[i] = uint64(i) * 4
	}
	c := memCheck(0, gpuwarden.MemTestResult{Errors: 1000, BadOffsets: offs})
	if c.Verdict != gpuwarden.VerdictFail || strings.Count(c.Reason, "0x") != 16 || !strings.Contains(c.Reason, "1000 wrong words") ||
		!strings.Contains(c.Reason, "0x3c") || strings.Contains(c.Reason, "0x40") {
		t.Errorf("reason %q", c.Reason)
	}
}

func TestTableGolden(t *testing.T) {
	g0, g1 := 0, 1
	r := gpuwarden.BurnReport{Node: "3f2a9c0d5e6b7a81", Host: "gpu-node-07", Mode: ModeQuick,
		GPUs: []gpuwarden.GPU{{Index: 0}, {Index: 1}}, Verdict: gpuwarden.VerdictFail,
		Checks: []gpuwarden.BurnCheck{
			memCheck(g0, gpuwarden.MemTestResult{Bytes: 133 << 30, Patterns: []string{"zeros", "ones", "random"}, GBs: 3024}),
			refCheck("bandwidth", g0, 3612, 4300, "GB/s", "H200"),
			refCheck("fp32", g0, 57.6, 57.5, "TFLOP/s", "H200"),
			fmaCheck(g0, gpuwarden.BurnResult{SoakSeconds: 15}),
			pcieCheck(g0, gpuwarden.GPU{PCIeGen: 5, PCIeWidth: 16}, gpuwarden.BurnResult{HostToDeviceGBs: 53.5, DeviceToHostGBs: 50.8}),
			throttleCheck(g0, []gpuwarden.Telemetry{{TempC: 91, ThrottleReasons: []string{"hw_thermal_slowdown", "sw_power_cap"}}, {TempC: 88}}),
			memCheck(g1, gpuwarden.MemTestResult{Errors: 3, BadOffsets: []uint64{0x1f4000, 0x1f4004, 0x3e8000}}),
			{Name: "burn", GPU: &g1, Verdict: gpuwarden.VerdictFail, Reason: "the GPU checks did not finish: child exited: signal: killed after the 90 s deadline of the quick mode"},
			cpuCheck(cpuResult{workers: 16, opsPerS: 1.234e9}, 2*time.Second),
			{Name: "disk-write", Value: 812.4, Unit: "MB/s", Verdict: gpuwarden.VerdictPass, Reason: "256 MiB in 1 MiB blocks, fsync every 16 MiB"},
			{Name: "disk-fsync-p99", Value: 4.1, Unit: "ms", Verdict: gpuwarden.VerdictPass, Reason: "99th percentile of 16 fsyncs"},
		}}
	var buf bytes.Buffer
	if err := Table(&buf, r); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "table.golden")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); got != string(want) {
		t.Errorf("table differs from %s (run with -update):\n%s", golden, got)
	}
	for _, l := range strings.Split(buf.String(), "\n") {
		if len([]rune(l)) > 100 {
			t.Errorf("line of %d columns: %q", len([]rune(l)), l)
		}
	}
}

func TestGEMMChecks(t *testing.T) {
	tests := []struct {
		name     string
		gemm     *gpuwarden.GEMMResult
		verdicts string
	}{
		{"no library", &gpuwarden.GEMMResult{Available: false, Reason: "libcublasLt not found"}, ""},
		{"not run", nil, ""},
		{"clean and fast", &gpuwarden.GEMMResult{Available: true, TFLOPs: 800, Runs: 40, Dim: 8192}, "PASS PASS"},
		{"mismatch", &gpuwarden.GEMMResult{Available: true, TFLOPs: 800, Runs: 40, Dim: 8192, Mismatches: 3}, "FAIL PASS"},
		{"slow", &gpuwarden.GEMMResult{Available: true, TFLOPs: 650, Runs: 40, Dim: 8192}, "PASS WARN"},
	}
	for _, tt := range tests {
		var got []string
		for _, c := range gemmChecks(0, gpuwarden.BurnResult{GEMM: tt.gemm}, 804, "H200") {
			got = append(got, c.Verdict)
		}
		if strings.Join(got, " ") != tt.verdicts {
			t.Errorf("%s: verdicts %v, want %q", tt.name, got, tt.verdicts)
		}
	}
	// A soak that ran without the heuristic's algorithm says so by its rate.
	fallback := &gpuwarden.GEMMResult{Available: true, TFLOPs: 700, Runs: 40, Dim: 8192,
		Algo: "default, no workspace: cublasLtMatmulAlgoGetHeuristic returned no algorithm"}
	cs := gemmChecks(0, gpuwarden.BurnResult{GEMM: fallback}, 804, "H200")
	if len(cs) != 2 || !strings.HasSuffix(cs[1].Reason, "; algorithm: default, no workspace: cublasLtMatmulAlgoGetHeuristic returned no algorithm") {
		t.Errorf("fallback checks %+v", cs)
	}
	cs = gemmChecks(0, gpuwarden.BurnResult{GEMM: &gpuwarden.GEMMResult{Available: true, TFLOPs: 800, Runs: 1, Dim: 8, Algo: "heuristic"}}, 804, "H200")
	if strings.Contains(cs[1].Reason, "algorithm") {
		t.Errorf("the heuristic's algorithm is the normal case, not worth a word: %q", cs[1].Reason)
	}
}

// migGPUs reports the simulated GPUs with MIG mode on for those in mig.
type migGPUs struct {
	*gpusim.Sim
	mig map[int]bool
}

func (m migGPUs) List(ctx context.Context) ([]gpuwarden.GPU, error) {
	list, err := m.Sim.List(ctx)
	for i := range list {
		list[i].MIG = m.mig[list[i].Index]
	}
	return list, err
}

// TestRunMIG: a GPU in MIG mode gets no CUDA burn; its CUDA checks are
// SKIP with the reason, not PASS, its health is still read, and the
// other GPU is burnt in as usual.
func TestRunMIG(t *testing.T) {
	s := sim(t, "2xH100")
	var burned sync.Map
	burn := func(ctx context.Context, req gpuwarden.BurnRequest) (gpuwarden.BurnResult, error) {
		burned.Store(req.Index, true)
		return s.Burn(ctx, req)
	}
	r, err := Run(context.Background(), migGPUs{s, map[int]bool{1: true}}, burn, quickOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := burned.Load(1); ok {
		t.Error("the MIG GPU was burnt in")
	}
	if _, ok := burned.Load(0); !ok {
		t.Error("the whole GPU was not burnt in")
	}
	for _, name := range []string{"memory", "bandwidth", "fp32", "fma", "pcie", "throttle"} {
		c, ok := check(r, name, 1)
		if !ok || c.Verdict != gpuwarden.VerdictSkip || !strings.HasPrefix(c.Reason, "skipped: MIG enabled") {
			t.Errorf("GPU 1 %s = %+v, want SKIP with the MIG reason", name, c)
		}
		if c, ok := check(r, name, 0); !ok || c.Verdict != gpuwarden.VerdictPass {
			t.Errorf("GPU 0 %s = %+v, want PASS", name, c)
		}
	}
	if c, ok := check(r, "health", 1); !ok || c.Verdict != gpuwarden.VerdictPass {
		t.Errorf("GPU 1 health = %+v, want it read and PASS", c)
	}
	if len(r.Results) != 1 || r.Results[0].Index != 0 {
		t.Errorf("results %+v, want GPU 0's only", r.Results)
	}
	if r.Verdict != gpuwarden.VerdictWarn {
		t.Errorf("verdict %s, want WARN: the checks that ran passed, but GPU 1 was not burnt in", r.Verdict)
	}
	var b strings.Builder
	if err := Table(&b, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "6 skipped: not proven") || !strings.Contains(b.String(), "SKIP") {
		t.Errorf("table does not say what was skipped:\n%s", b.String())
	}
}

func TestRunMIGWithFaultyHealth(t *testing.T) {
	// Skipping the CUDA checks must not hide an Xid NVML reports.
	s := sim(t, "1xH100,fault=xid")
	r, err := Run(context.Background(), migGPUs{s, map[int]bool{0: true}}, s.Burn, quickOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := check(r, "health", 0); c.Verdict != gpuwarden.VerdictFail || r.Verdict != gpuwarden.VerdictFail {
		t.Errorf("health %+v, verdict %s; want FAIL", c, r.Verdict)
	}
}
