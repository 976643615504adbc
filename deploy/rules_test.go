package deploy_test

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden/internal/peertest"
	"sigs.k8s.io/yaml"
)

const (
	rulesTestFile  = "prometheus/rules.test.yaml"
	dcgmCompatFile = "prometheus/dcgm-compat.rules.yaml"
)

// TestPromtoolRules runs rules.test.yaml with Prometheus' own rule engine:
// every alert fires on its input with the labels and summary expected, and
// every DCGM recording rule gives DCGM's value.
func TestPromtoolRules(t *testing.T) {
	promtool := peertest.Promtool(t)
	for _, f := range []string{rulesFile, dcgmCompatFile} {
		if out, err := exec.Command(promtool, "check", "rules", f).CombinedOutput(); err != nil {
			t.Fatalf("promtool check rules %s: %v\n%s", f, err, out)
		}
	}
	cmd := exec.Command(promtool, "test", "rules", "rules.test.yaml")
	cmd.Dir = "prometheus"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// TestEveryRuleIsTested: an alert or recording rule with no case in
// rules.test.yaml fails here, so that a new rule cannot ship untested.
func TestEveryRuleIsTested(t *testing.T) {
	var tests struct {
		RuleFiles []string `json:"rule_files"`
		Tests     []struct {
			Alerts []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
			Exprs []struct {
				Expr string `json:"expr"`
			} `json:"promql_expr_test"`
		} `json:"tests"`
	}
	data, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &tests); err != nil {
		t.Fatalf("%s: %v", rulesTestFile, err)
	}
	fired, exprs := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.Alerts {
			fired[a.Alertname] = fired[a.Alertname] || len(a.ExpAlerts) > 0
		}
		for _, e := range tc.Exprs {
			exprs[strings.TrimSpace(e.Expr)] = true
		}
	}
	for _, f := range []string{"rules.yaml", "dcgm-compat.rules.yaml"} {
		if !slices.Contains(tests.RuleFiles, f) {
			t.Errorf("%s does not load %s", rulesTestFile, f)
		}
	}
	for _, f := range []string{rulesFile, dcgmCompatFile} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rf ruleFile
		if err := yaml.UnmarshalStrict(data, &rf); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				switch {
				case r.Alert != "" && !fired[r.Alert]:
					t.Errorf("%s: alert %s has no test case that fires it", f, r.Alert)
				case r.Record != "" && !exprs[r.Record]:
					t.Errorf("%s: recording rule %s has no promql_expr_test", f, r.Record)
				}
			}
		}
	}
}
