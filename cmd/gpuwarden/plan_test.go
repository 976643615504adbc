package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
