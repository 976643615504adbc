package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPlanJSONExclusionSummary: -o json counts exclusions per reason and
// shows a sample; --all-exclusions lists them all.
func TestPlanJSONExclusionSummary(t *testing.T) {
	root := repoRoot(t)
	dir := t.TempDir()
	csvPath := writeOffers(t, dir, 2000)
	type out struct {
		Schema     string `json:"schema"`
		Exclusions struct {
			Total    int            `json:"total"`
			ByReason map[string]int `json:"by_reason"`
			Sample   []struct {
				Reason string `json:"reason"`
			} `json:"sample"`
		} `json:"exclusions"`
		Excluded []struct {
			Reason string `json:"reason"`
		} `json:"excluded"`
	}
	args := []string{"plan", "examples/qlora-7b.yaml", "--data-dir", dir, "--no-embedded", "--catalog", csvPath, "-o", "json"}
	for _, all := range []bool{false, true} {
		a := args
		if all {
			a = append(a, "--all-exclusions")
		}
		r := gw(t, root, a...)
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		var o out
		if err := json.Unmarshal([]byte(r.stdout), &o); err != nil {
			t.Fatal(err)
		}
		sum := 0
		for _, n := range o.Exclusions.ByReason {
			sum += n
		}
		if o.Exclusions.Total < 100 || sum != o.Exclusions.Total {
			t.Errorf("total %d, by reason %v (sum %d): want many, adding up", o.Exclusions.Total, o.Exclusions.ByReason, sum)
		}
		if len(o.Exclusions.Sample) != exclusionSample {
			t.Errorf("sample of %d, want %d", len(o.Exclusions.Sample), exclusionSample)
		}
		// Every reason present has its first exclusion in the sample.
		inSample := map[string]bool{}
		for _, e := range o.Exclusions.Sample {
			inSample[e.Reason] = true
		}
		for reason := range o.Exclusions.ByReason {
			if !inSample[reason] {
				t.Errorf("reason %s has no example in the sample", reason)
			}
		}
		want := 0
		if all {
			want = o.Exclusions.Total
		}
		if len(o.Excluded) != want {
			t.Errorf("--all-exclusions=%v: %d excluded listed, want %d", all, len(o.Excluded), want)
		}
	}
}

// writeOffers writes a gpuwarden prices.csv of n offers over five providers,
// five GPU models, one to eight GPUs and prices from $0.10 to $6 per GPU-hour,
// so that a $500 budget excludes most big boxes.
func writeOffers(tb testing.TB, dir string, n int) string {
	tb.Helper()
	rng := rand.New(rand.NewPCG(11, 12))
	type gpu struct {
		name string
		vram int
	}
	gpus := []gpu{{"T4", 16}, {"L4", 24}, {"RTX-4090", 24}, {"A100-80GB", 80}, {"H100-SXM", 80}}
	places := [][3]string{{"aws", "us-east-1", "US"}, {"aws", "eu-central-1", "DE"}, {"gcp", "europe-west4", "NL"},
		{"lambda", "us-west-1", "US"}, {"runpod", "EU-RO-1", "RO"}, {"vast", "Germany", "DE"}}
	var b bytes.Buffer
	b.WriteString("provider,region,country,instance,gpu,gpu_count,vram_gb_per_gpu,currency,on_demand_hourly,spot_hourly,monthly,as_of,source\n")
	for i := range n {
		g := gpus[rng.IntN(len(gpus))]
		pl := places[rng.IntN(len(places))]
		count := 1 << rng.IntN(4)
		od := float64(count) * (0.1 + rng.Float64()*5.9)
		spot := ""
		if rng.IntN(2) == 0 {
			spot = fmt.Sprintf("%.4f", od*0.4)
		}
		monthly := ""
		if rng.IntN(10) == 0 {
			monthly = fmt.Sprintf("%.2f", od*500)
		}
		fmt.Fprintf(&b, "%s,%s,%s,box-%d,%s,%d,%d,USD,%.4f,%s,%s,2026-11,bench\n",
			pl[0], pl[1], pl[2], i, g.name, count, g.vram, od, spot, monthly)
	}
	name := filepath.Join(dir, "offers.csv")
	if err := os.WriteFile(name, b.Bytes(), 0o644); err != nil {
		tb.Fatal(err)
	}
	return name
}

// BenchmarkPlanJSON100kBudget runs `plan -o json` in process on 100,000
// offers with the example's $500 budget: read the CSV, rank, write JSON.
// "first" parses the file and stores its parse in DATA_DIR/cache, as the
// first run on a file does; "cached" reads that parse back. out-bytes is
// the size of the JSON.
func BenchmarkPlanJSON100kBudget(b *testing.B) {
	dir := b.TempDir()
	csvPath := writeOffers(b, dir, 100_000)
	planPath := filepath.Join("..", "..", "examples", "qlora-7b.yaml")
	for _, first := range []bool{true, false} {
		b.Run(map[bool]string{true: "first", false: "cached"}[first], func(b *testing.B) {
			var size int
			b.ReportAllocs()
			for b.Loop() {
				if first {
					if err := os.RemoveAll(filepath.Join(dir, "cache")); err != nil {
						b.Fatal(err)
					}
				}
				var out countingDiscard
				code := run([]string{"plan", planPath, "--data-dir", dir, "--no-embedded", "--catalog", csvPath, "-o", "json"},
					strings.NewReader(""), &out, io.Discard)
				if code != 0 {
					b.Fatalf("exit %d", code)
				}
				size = out.n
			}
			b.ReportMetric(float64(size), "out-bytes")
		})
	}
}

type countingDiscard struct{ n int }

func (c *countingDiscard) Write(p []byte) (int, error) { c.n += len(p); return len(p), nil }

// TestPlanMeasuredThroughput: progress recorded with --gpu on a box
// replaces the model's estimate for that card in plan, which says so and
// when, and scales the other cards by the model's ratio.
func TestPlanMeasuredThroughput(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	planFile := filepath.Join(dir, "gpuwarden.yaml")
	if err := os.WriteFile(planFile, []byte("name: measured\nworkload:\n  kind: pretrain\n  params_b: 7\n  tokens_b: 20\n"+
		"budget:\n  monthly_limit: 0\n  currency: USD\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	offers := filepath.Join(dir, "offers.csv")
	if err := os.WriteFile(offers, []byte("provider,region,country,instance,gpu,gpu_count,vram_gb_per_gpu,currency,on_demand_hourly,spot_hourly,monthly,as_of,source\n"+
		"lambda,us-east-1,US,gpu_8x_h100,H100-SXM,8,80,USD,24.00,,,2026-11,test\n"+
		"lambda,us-east-1,US,gpu_8x_a100,A100-80GB,8,80,USD,14.00,,,2026-11,test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"plan", planFile, "--data-dir", data, "--no-embedded", "--catalog", offers, "--explain"}

	before := gw(t, dir, args...)
	if before.code != 0 || !strings.Contains(before.stdout, "8× H100-SXM: ") || strings.Contains(before.stdout, "measured:") {
		t.Fatalf("before any progress: exit %d, want the model's figures only\n%s%s", before.code, before.stdout, before.stderr)
	}
	// 4.8 B tokens in the 24 h after the first report: 200 M tokens an hour
	// on 8× H100, so 20 B tokens take 100 h there.
	for _, p := range []struct{ day, count string }{{"2026-11-27", "1000"}, {"2026-11-28", "4800000000"}} {
		if r := gwEnv(t, "", nil, "--now", p.day, "progress", "tokens", p.count, "--gpu", "H100_SXM5", "--gpus", "8", "--data-dir", data); r.code != 0 {
			t.Fatalf("progress: exit %d: %s", r.code, r.stderr)
		}
	}
	if r := gw(t, dir, "progress", "tokens", "5", "--gpu", "H100-SXM", "--data-dir", data); r.code != 2 {
		t.Errorf("--gpu without --gpus: exit %d, want 2", r.code)
	}
	after := gw(t, dir, append(args, "-o", "json")...)
	if after.code != 0 {
		t.Fatalf("plan: exit %d\n%s", after.code, after.stderr)
	}
	var out struct {
		Ranked []struct {
			Offer struct{ GPU string }   `json:"offer"`
			Hours struct{ Work float64 } `json:"hours"`
			Speed struct {
				Basis      string     `json:"basis"`
				MeasuredAt *time.Time `json:"measured_at"`
			} `json:"speed"`
			TimeToFinish float64 `json:"time_to_finish_h"`
		} `json:"ranked"`
	}
	if err := json.Unmarshal([]byte(after.stdout), &out); err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		basis string
		hours float64
	}{
		"H100-SXM":  {"measured", 100},
		"A100-80GB": {"measured-scaled", 100 * 989 / 312.0},
	}
	if len(out.Ranked) != 2 {
		t.Fatalf("ranked %d, want 2", len(out.Ranked))
	}
	for _, c := range out.Ranked {
		w := want[c.Offer.GPU]
		if c.Speed.Basis != w.basis || math.Abs(c.Hours.Work-w.hours) > 0.01 || c.Speed.MeasuredAt == nil ||
			c.Speed.MeasuredAt.Format("2006-01-02") != "2026-11-28" {
			t.Errorf("%s: %s, %v h, measured at %v; want %s, %.2f h, 2026-11-28", c.Offer.GPU, c.Speed.Basis, c.Hours.Work, c.Speed.MeasuredAt, w.basis, w.hours)
		}
	}
	table := gw(t, dir, args...)
	flat := strings.Join(strings.Fields(table.stdout), " ") // --explain wraps its lines
	if !strings.Contains(flat, "8× H100-SXM: 4.2 d; measured: 200,000,000 tokens per box hour on 8× H100-SXM, recorded 2026-11-28 00:00 UTC") ||
		!strings.Contains(flat, "time to finish 4.2 d (measured)") || !strings.Contains(flat, "plan A's 100 h come from a run's measured progress") {
		t.Errorf("plan does not say the figure was measured, and when:\n%s", table.stdout)
	}
}

// TestPlanDeadlineFlag: --deadline leaves out boxes that cannot finish in
// time, names the reason, and is refused without an amount of work.
func TestPlanDeadlineFlag(t *testing.T) {
	root := repoRoot(t)
	r := gw(t, root, "plan", "examples/pretrain-7b.yaml", "--deadline", "48h", "-o", "json", "--data-dir", t.TempDir())
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var out struct {
		DeadlineH  float64 `json:"deadline_h"`
		Exclusions struct {
			ByReason map[string]int `json:"by_reason"`
		} `json:"exclusions"`
		Ranked []struct {
			TimeToFinish float64 `json:"time_to_finish_h"`
		} `json:"ranked"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatal(err)
	}
	if out.DeadlineH != 48 || out.Exclusions.ByReason["too-slow"] == 0 || len(out.Ranked) == 0 {
		t.Errorf("deadline %v h, %d too-slow, %d ranked: want 48 h, some left out, some ranked", out.DeadlineH, out.Exclusions.ByReason["too-slow"], len(out.Ranked))
	}
	for _, c := range out.Ranked {
		if c.TimeToFinish > 48+24 { // on demand within 48 h; spot adds its rework
			t.Errorf("ranked a box that needs %v h", c.TimeToFinish)
		}
	}
	for _, tt := range []struct{ args []string }{
		{[]string{"plan", "examples/pretrain-7b.yaml", "--deadline", "soon"}},
		{[]string{"plan", "examples/notebook-a100.yaml", "--deadline", "72h"}},
	} {
		if r := gw(t, root, tt.args...); r.code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", tt.args, r.code, r.stderr)
		}
	}
}
