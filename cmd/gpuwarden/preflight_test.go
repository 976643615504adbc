package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden/config"
)

// TestPreflightFixesTheOversizedPlan is the scenario on the real
// binary: no plan B, no budget alert and a 141 GB card for a 7B int4
// inference exit 1 naming the three items. --fix shows the unified diff of
// the plan file before writing, with --yes too; the fixes add or edit only
// the fields they name, keep comments in place and never replace the
// user's own launch command (issue #32 item 8), so plan A, still on the
// H200, fails card-size until the user moves it.
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

	// Without --yes and no terminal to ask: the diff, and nothing written.
	r = gw(t, dir, append(args, "--fix")...)
	if r.code != 2 || !strings.Contains(r.stderr, "--- "+plan+"\n+++ "+plan+" (fixed)\n@@ ") || readFile(t, plan) != string(src) {
		t.Fatalf("--fix without --yes off a terminal: exit %d, want 2, the diff and the file as it was:\n%s", r.code, r.stderr)
	}

	r = gw(t, dir, append(args, "--fix", "--yes")...)
	if !strings.Contains(r.stderr, "wrote "+plan) {
		t.Fatalf("--fix --yes did not write the plan:\n%s", r.stderr)
	}
	// --yes still shows the unified diff of the file, before it is written;
	// it removes only the lines of the fields the fixes name, and the
	// comment after the budget stays in its column.
	diff := r.stderr[strings.Index(r.stderr, "--- "+plan):strings.Index(r.stderr, "wrote "+plan)]
	var removed, added []string
	for _, l := range strings.Split(diff, "\n")[2:] {
		switch {
		case strings.HasPrefix(l, "-"):
			removed = append(removed, l)
		case strings.HasPrefix(l, "+"):
			added = append(added, l)
		}
	}
	wantRemoved := []string{"-  monthly_limit: 0           # per month; 0 is no limit, and no alert can fire",
		"-  provider: vast", "-  region: France", "-  instance: 1x-H200-32-65536"}
	if strings.Join(removed, "\n") != strings.Join(wantRemoved, "\n") {
		t.Errorf("the diff removes\n%s\nwant only\n%s\n--- the diff:\n%s", strings.Join(removed, "\n"), strings.Join(wantRemoved, "\n"), diff)
	}
	if len(added) == 0 || added[0] != "+  monthly_limit: 50          # per month; 0 is no limit, and no alert can fire" {
		t.Errorf("the diff adds\n%s", strings.Join(added, "\n"))
	}
	fixed := readFile(t, plan)
	for _, l := range strings.SplitAfter(string(src), "\n") {
		if !slices.Contains(wantRemoved, "-"+strings.TrimSuffix(l, "\n")) && !strings.Contains(fixed, l) {
			t.Errorf("--fix lost the user's line %q", l)
		}
	}

	// The fixes leave the user's launch command as written, so plan A still
	// rents the H200: card-size says so, and names what to change by hand.
	r = gw(t, dir, args...)
	if r.code != 1 || !regexp.MustCompile(`(?m)^✗ card-size +target plan-a still rents vast France 1x-H200-32-65536`).MatchString(r.stdout) ||
		!strings.Contains(r.stdout, "fix: point target plan-a at the box, aws us-west-2 g4dn.xlarge") {
		t.Errorf("after the fixes: exit %d, want 1 and card-size naming plan-a\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, ok := range []string{"plan-b", "budget-alerts"} {
		if !regexp.MustCompile(`(?m)^✓ ` + ok + ` `).MatchString(r.stdout) {
			t.Errorf("after the fixes %s does not pass:\n%s", ok, r.stdout)
		}
	}
	cfg, err := config.Parse(plan, []byte(fixed))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Targets) != 2 {
		t.Fatalf("fixed plan has %d targets, want 2", len(cfg.Targets))
	}
	// Plan B stands apart from where plan A goes once the user moves it.
	if b := cfg.Targets[1]; b.Provider == cfg.Box.Provider && b.Region == cfg.Box.Region {
		t.Errorf("plan B is %s %s, where the box is", b.Provider, b.Region)
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
