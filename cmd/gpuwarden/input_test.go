package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostileInput runs the real binary on the files and flags a hostile
// test found: YAML nested 100,000 and 20,000 deep (which ran the plan
// command out of memory past 6 GB), price files that were silently misread,
// and names that matched nothing without a word. Each must exit 2 with the
// place and the problem on stderr, and nothing on stdout.
func TestHostileInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	const ownHeader = "provider,region,gpu,gpu_count,vram_gb_per_gpu,currency,on_demand_hourly,spot_hourly,as_of,source\n"
	deep := write("deep.yaml", strings.Repeat("[", 100_000))
	deep20k := write("deep20k.yaml", strings.Repeat("[", 20_000))
	typo := write("typo.yaml", "workload:\n  kind: inference\n  params_b: 7\nwork_hours: 100\nproviders:\n  prefer: [lamda]\n")
	comma := write("comma.csv", ownHeader+"aws,us-east-1,T4,1,16,USD,1,50,,2026-11,quote\n")
	noVRAM := write("novram.csv", "provider,region,gpu,gpu_count,currency,on_demand_hourly\naws,us-east-1,H100,8,USD,98.32\n")
	longHeader := write("long.csv", strings.Repeat("x", 5<<20)+"\n1\n")
	tests := []struct {
		name   string
		args   []string
		stderr []string
	}{
		{"plan nested 100000 deep", []string{"plan", deep}, []string{deep + ":1:65: plan file nests deeper than 64 levels"}},
		{"plan nested 20000 deep", []string{"plan", deep20k}, []string{deep20k + ":1:65: plan file nests deeper than 64 levels"}},
		{"plan with a provider typo", []string{"plan", typo},
			[]string{typo + `:6:12: providers.prefer[0]: unknown provider "lamda"; did you mean lambda?`}},
		{"unknown GPU", []string{"offers", "--gpu", "H1OO"}, []string{`--gpu: unknown GPU "H1OO"; did you mean H100?`}},
		{"unknown provider", []string{"offers", "--provider", "awz"}, []string{`--provider: unknown provider "awz"; did you mean aws?`}},
		{"unknown region", []string{"offers", "--provider", "aws", "--region", "us-est-1"},
			[]string{`--region: unknown aws region "us-est-1"; did you mean us-east-1?`}},
		{"unknown egress provider", []string{"egress", "README.md", "--from", "awz:us-east-1", "--to", "internet"},
			[]string{`--from: unknown provider "awz"; did you mean aws?`}},
		{"unknown egress region", []string{"egress", "README.md", "--from", "aws:us-east-1", "--to", "gcp:us-est1"},
			[]string{`--to: unknown gcp region "us-est1"; did you mean us-east1?`}},
		{"unquoted decimal comma", []string{"offers", "--catalog", comma}, []string{comma + ":2:11: row has 11 fields, the header has 10"}},
		{"no vram column", []string{"offers", "--catalog", noVRAM},
			[]string{noVRAM + ":1: header has no column vram_gb_per_gpu, which a gpuwarden prices.csv needs"}},
		{"5 MB header", []string{"offers", "--catalog", longHeader}, []string{longHeader + `:1: unrecognised header "xxxx`, `…"`}},
	}
	root := repoRoot(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := gw(t, root, tt.args...)
			if r.code != 2 {
				t.Errorf("exit %d, want 2; stderr: %.2000s", r.code, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout not empty: %.2000q", r.stdout)
			}
			for _, want := range tt.stderr {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr %.2000q does not contain %q", r.stderr, want)
				}
			}
			if len(r.stderr) > 4000 {
				t.Errorf("stderr is %d bytes, want a few lines", len(r.stderr))
			}
		})
	}
}

// TestKnownNamesMatchingNothing: a GPU, provider or region gpuwarden knows
// that no offer has is still an empty answer, not an error.
func TestKnownNamesMatchingNothing(t *testing.T) {
	root := repoRoot(t)
	for _, args := range [][]string{
		{"offers", "--gpu", "K80"},
		{"offers", "--gpu", "h100", "--provider", "vultr"},
		{"offers", "--provider", "AWS", "--region", "EU-CENTRAL-2"},
	} {
		r := gw(t, root, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "no offers match") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 0 and no offers match", args, r.code, r.stdout, r.stderr)
		}
	}
}
