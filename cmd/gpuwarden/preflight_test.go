package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden/config"
)

// TestPreflightFixesTheOversizedPlan is the scenario on the real
// binary: no plan B, no budget alert and a 141 GB card for a 7B int4
// inference exit 1 naming the three items; --fix --yes writes the edits it
// showed, and then the plan-file items pass.
func TestPreflightFixesTheOversizedPlan(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "examples", "preflight-h200.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	plan := filepath.Join(dir, "gpuwarden.yaml")
	if err := os.WriteFile(plan, src, 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"preflight", plan, "--offline", "--data-dir", filepath.Join(dir, "data")}
	r := gw(t, dir, args...)
	if r.code != 1 {
		t.Fatalf("preflight exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
	failed := regexp.MustCompile(`(?m)^✗ (\S+)`).FindAllStringSubmatch(r.stdout, -1)
	var names []string
	for _, m := range failed {
		names = append(names, m[1])
	}
	if got := strings.Join(names, ","); got != "plan-b,budget-alerts,card-size" {
		t.Errorf("failed items = %s, want plan-b,budget-alerts,card-size\n%s", got, r.stdout)
	}
	if n := strings.Count(r.stdout, "fix: "); n < 3 {
		t.Errorf("%d fixes shown, want one per failing item\n%s", n, r.stdout)
	}

	r = gw(t, dir, append(args, "--fix", "--yes")...)
	if !strings.Contains(r.stderr, "wrote "+plan) {
		t.Fatalf("--fix --yes did not write the plan:\n%s", r.stderr)
	}
	r = gw(t, dir, args...)
	if r.code != 0 || strings.Contains(r.stdout, "✗") {
		t.Errorf("after the fixes: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	fixed, _ := os.ReadFile(plan)
	if !strings.Contains(string(fixed), "# A 7B chat model") {
		t.Error("--fix lost the plan's comments")
	}
	// The card-size fix moves plan A to the smaller card, and plan B must
	// not land in that same place.
	cfg, err := config.Parse(plan, fixed)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Targets) != 2 {
		t.Fatalf("fixed plan has %d targets, want 2", len(cfg.Targets))
	}
	a, b := cfg.Targets[0], cfg.Targets[1]
	if a.Offer != cfg.Box.Instance || a.Provider != cfg.Box.Provider {
		t.Errorf("plan A launches %s %s, the box is %s %s", a.Provider, a.Offer, cfg.Box.Provider, cfg.Box.Instance)
	}
	if a.Provider == b.Provider && a.Region == b.Region {
		t.Errorf("plan A and plan B are both %s %s", a.Provider, a.Region)
	}
	if r = gw(t, dir, append(args, "--strict")...); r.code != 1 {
		t.Errorf("--strict with warnings: exit %d, want 1", r.code)
	}
}

func TestPreflightQuestions(t *testing.T) {
	r := gw(t, t.TempDir(), "preflight", "--questions", "lambda")
	if r.code != 0 || !strings.Contains(r.stdout, "## Questions for lambda") || !strings.Contains(r.stdout, "- [ ] ") {
		t.Fatalf("questions: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = gw(t, t.TempDir(), "preflight", "--questions", "nosuchcloud"); r.code != 2 {
		t.Errorf("unknown provider: exit %d, want 2", r.code)
	}
}
