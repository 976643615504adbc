package preflight

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/catalog"
	"github.com/gpuwarden/gpuwarden/config"
	"github.com/gpuwarden/gpuwarden/plan"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// goodPlan passes every plan-file item: plan B elsewhere, a budget with
// alerts, idle shutdown, owner and TTL, priced data, a checkpoint store in
// the box's region, a right-sized card, a webhook.
const goodPlan = `
name: qlora
workload:
  kind: finetune-qlora
  params_b: 7
work_hours: 120
on_hours:
  auto_shutdown_idle_minutes: 30
data:
  egress_gb:
    internet: 20
  storage_gb: 100
  checkpoint_gb: 1
  checkpoint_store: s3://ckpt/qlora?region=us-east-1
budget:
  monthly_limit: 500
  currency: USD
  alerts_percent: [50, 80, 100]
box:
  provider: aws
  region: us-east-1
  instance: g6.xlarge
labels:
  owner: ana
  ttl: 72h
webhooks: [https://hooks.example.com/services/T0/B0/X]
targets:
  - {name: plan-a, provider: aws, region: us-east-1, offer: g6.xlarge, launch: "true"}
  - {name: plan-b, provider: gcp, region: us-central1, offer: g2-standard-4, launch: "true"}
`

// facts builds the checks' input from a plan file text, on the embedded
// catalog, with this box a GPU box whose ledger shows a PASS burn-in and
// drill and whose agent answers.
func facts(t *testing.T, yaml string, tweak func(*Facts)) Facts {
	t.Helper()
	p, err := config.Parse("gpuwarden.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.Load(nil, true)
	if err != nil {
		t.Fatal(err)
	}
	r, err := plan.Rank(p, cat)
	if err != nil {
		t.Fatal(err)
	}
	up := true
	f := Facts{Now: now, Plan: p, PlanPath: "gpuwarden.yaml", Catalog: cat, Report: r, LockPath: "gpuwarden.lock",
		LockFound: true, OnGPUBox: true, Canary: &CanaryRun{}, NodeID: "n1", WeekGPUMemPercent: -1, AgentRunning: &up,
		Webhooks: map[string]error{"https://hooks.example.com/services/T0/B0/X": nil},
		Events: []gpuwarden.Event{
			{Time: now.Add(-24 * time.Hour), Kind: "burnin", Data: map[string]string{"node": "n1", "verdict": "PASS"}},
			{Time: now.Add(-48 * time.Hour), Kind: "drill", Data: map[string]string{"verdict": "PASS", "command": "python train.py"}},
		}}
	if tweak != nil {
		tweak(&f)
	}
	return f
}

func statusOf(items []Item, id string) (Item, bool) {
	for _, it := range items {
		if it.ID == id {
			return it, true
		}
	}
	return Item{}, false
}

func TestEveryItemPassesAndFails(t *testing.T) {
	noTargetB := strings.Replace(goodPlan, "  - {name: plan-b, provider: gcp, region: us-central1, offer: g2-standard-4, launch: \"true\"}\n", "", 1)
	tests := []struct {
		id    string
		yaml  string
		tweak func(*Facts)
		want  Status
		in    string // a word the evidence must hold
	}{
		{"plan-b", goodPlan, nil, OK, "plan-b"},
		{"plan-b", noTargetB, nil, Fail, "only plan-a"},
		{"plan-b", strings.Replace(goodPlan, "provider: gcp, region: us-central1", "provider: aws, region: us-east-1", 1), nil, Fail, "all 2 targets"},
		{"budget-alerts", goodPlan, nil, OK, "alerts at 50/80/100"},
		{"budget-alerts", strings.Replace(goodPlan, "monthly_limit: 500", "monthly_limit: 0", 1), nil, Fail, "no monthly limit"},
		{"budget-alerts", strings.Replace(goodPlan, "alerts_percent: [50, 80, 100]", "alerts_percent: []", 1), nil, Fail, "nobody hears"},
		{"idle-shutdown", goodPlan, nil, OK, "30 idle minutes"},
		{"idle-shutdown", strings.Replace(goodPlan, "auto_shutdown_idle_minutes: 30", "auto_shutdown_idle_minutes: 0", 1), nil, Fail, "every hour"},
		{"labels", goodPlan, nil, OK, "owner ana"},
		{"labels", strings.Replace(goodPlan, "  owner: ana\n", "", 1), nil, Fail, "no owner"},
		{"pricing", goodPlan, nil, OK, "GB egress"},
		{"pricing", strings.Replace(strings.Replace(goodPlan, "    internet: 20\n", "    internet: 0\n", 1), "storage_gb: 100", "storage_gb: 0", 1), nil, Warn, "no egress"},
		{"checkpoint", goodPlan, nil, OK, "us-east-1"},
		{"checkpoint", strings.Replace(goodPlan, "  checkpoint_store: s3://ckpt/qlora?region=us-east-1\n", "", 1), nil, Fail, "reclaimed box"},
		{"checkpoint", strings.Replace(goodPlan, "region=us-east-1", "region=eu-west-1", 1), nil, Warn, "inter-region"},
		{"checkpoint", strings.Replace(goodPlan, "s3://ckpt/qlora", "az://acct1/ckpt/qlora", 1), nil, OK, "az://acct1/ckpt/qlora"},
		{"card-size", goodPlan, nil, OK, "needs"},
		{"card-size", goodPlan, func(f *Facts) { f.WeekGPUMemPercent = 9 }, Warn, "9 %"},
		{"webhook", goodPlan, nil, OK, "answered"},
		{"webhook", goodPlan, func(f *Facts) {
			f.Webhooks = map[string]error{"https://hooks.example.com/services/T0/B0/X": errors.New("connection refused")}
		}, Fail, "connection refused"},
		{"webhook", strings.Replace(goodPlan, "webhooks: [https://hooks.example.com/services/T0/B0/X]\n", "", 1), nil, Warn, "no webhooks"},
		{"prices", goodPlan, nil, OK, "30 days"},
		{"prices", goodPlan, func(f *Facts) { f.Now = now.AddDate(1, 0, 0) }, Warn, "days old"},
		{"lock", goodPlan, nil, OK, "matches"},
		{"lock", goodPlan, func(f *Facts) { f.LockFound = false }, Fail, "no gpuwarden.lock"},
		{"lock", goodPlan, func(f *Facts) { f.Canary = &CanaryRun{ExitCode: 1, Detail: "driver 570 ≠ 580"} }, Fail, "exits 1"},
		{"lock", goodPlan, func(f *Facts) { f.OnGPUBox = false }, Warn, "no NVIDIA driver"},
		{"lock", goodPlan, func(f *Facts) { f.OnGPUBox, f.LockFound = false, false }, Warn, "yet"},
		{"burnin", goodPlan, nil, OK, "PASS"},
		{"burnin", goodPlan, func(f *Facts) { f.Events = nil }, Fail, "no burn-in"},
		{"burnin", goodPlan, func(f *Facts) { f.Events[0].Data["verdict"] = "FAIL" }, Fail, "FAIL"},
		{"burnin", goodPlan, func(f *Facts) { f.Events[0].Time = now.AddDate(0, -2, 0) }, Warn, "over 30 days"},
		{"drill", goodPlan, nil, OK, "python train.py"},
		{"drill", goodPlan, func(f *Facts) { f.Events = f.Events[:1] }, Warn, "no resume drill"},
		{"drill", goodPlan, func(f *Facts) { f.Events[1].Data["verdict"] = "FAIL" }, Fail, ""},
		{"agent", goodPlan, nil, OK, "answers"},
		{"agent", goodPlan, func(f *Facts) { no := false; f.AgentRunning = &no }, Fail, "no agent"},
	}
	for _, tt := range tests {
		t.Run(tt.id+"/"+string(tt.want), func(t *testing.T) {
			it, ok := statusOf(Check(facts(t, tt.yaml, tt.tweak)), tt.id)
			if !ok {
				t.Fatalf("no item %s", tt.id)
			}
			if it.Status != tt.want || !strings.Contains(it.Evidence, tt.in) {
				t.Errorf("%s = %s %q, want %s containing %q", tt.id, it.Status, it.Evidence, tt.want, tt.in)
			}
			if it.Status != OK && it.Fix == "" {
				t.Errorf("%s is %s without a fix", tt.id, it.Status)
			}
		})
	}
}

// repoExample reads a file of examples/.
func repoExample(t *testing.T, name string) []byte {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOversizedPlanThenFixed is the scenario: no plan B, no budget
// alert and a 141 GB card for a 7B int4 inference fail with their fixes.
// The fixes add and edit only the fields they name: the user's own vast
// launch command stays as written (issue #32 item 8), so card-size then
// fails on the target that still rents the H200, saying what to change by
// hand; once the user points it at the box, every plan-file item passes.
func TestOversizedPlanThenFixed(t *testing.T) {
	src := repoExample(t, "preflight-h200.yaml")
	offline := func(f *Facts) { f.Webhooks = nil }
	items := Check(facts(t, string(src), offline))
	var failed []string
	var edits []config.Edit
	for _, it := range items {
		if it.Status == Fail && it.PlanFile {
			failed = append(failed, it.ID)
			if len(it.Edits) == 0 {
				t.Errorf("%s fails with no plan-file edit: %s", it.ID, it.Fix)
			}
			edits = append(edits, it.Edits...)
		}
	}
	if got, want := strings.Join(failed, ","), "plan-b,budget-alerts,card-size"; got != want {
		t.Fatalf("failed plan-file items = %s, want %s", got, want)
	}
	card, _ := statusOf(items, "card-size")
	for _, want := range []string{"H200", "141 GB", "1g.18gb", "a month less"} {
		if !strings.Contains(card.Evidence, want) {
			t.Errorf("card-size evidence lacks %q: %s", want, card.Evidence)
		}
	}
	if !strings.Contains(card.Fix, "then point target plan-a at it") {
		t.Errorf("card-size fix does not say that plan-a's own command is the user's to move: %s", card.Fix)
	}
	for _, e := range edits {
		if strings.HasPrefix(e.Path, "targets[") {
			t.Errorf("a fix edits the user's target: %s = %v", e.Path, e.Value)
		}
	}
	if !Failed(items, false) {
		t.Error("Failed = false with three failures")
	}

	fixed, err := config.ApplyEdits(src, edits)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"    launch: vastai create instance $OFFER_ID --image vllm/vllm-openai --disk 40 --label {{.Name}}\n",
		"    stop: vastai destroy instance {{.InstanceID}}\n",
		"  monthly_limit: 50          # per month; 0 is no limit, and no alert can fire\n",
		"# A 7B chat model",
	} {
		if !strings.Contains(string(fixed), line) {
			t.Errorf("the fixed file lacks %q:\n%s", line, fixed)
		}
	}
	again := Check(facts(t, string(fixed), offline))
	for _, it := range again {
		switch {
		case it.ID == "card-size":
			if it.Status != Fail || !strings.Contains(it.Evidence, "target plan-a still rents vast France 1x-H200-32-65536") || !strings.Contains(it.Fix, "aws us-west-2 g4dn.xlarge") {
				t.Errorf("after the fixes card-size = %s: %s (fix: %s); want a failure naming plan-a and the box", it.Status, it.Evidence, it.Fix)
			}
		case it.PlanFile && it.Status == Fail:
			t.Errorf("after the fixes %s still fails: %s", it.ID, it.Evidence)
		}
	}

	// The user points plan A at the box with a command of their own.
	byHand, err := config.ApplyEdits(fixed, []config.Edit{{Path: "targets[0].provider", Value: "aws"}, {Path: "targets[0].region", Value: "us-east-1"},
		{Path: "targets[0].offer", Value: "g4dn.xlarge"}, {Path: "targets[0].launch", Value: "aws ec2 run-instances --instance-type g4dn.xlarge"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range Check(facts(t, string(byHand), offline)) {
		if it.PlanFile && it.Status == Fail {
			t.Errorf("with plan A moved by hand %s fails: %s", it.ID, it.Evidence)
		}
	}
}

// TestCardSizeFixEditsOnlyWhatTheTargetReads: a target on the smaller
// card's provider whose command reads {{.Offer}} (and {{.Region}} when the
// region moves) is moved by editing those fields alone; one whose command
// names its own instance, pins a zone, or is on another provider is left
// as written, and the fix says to move it.
func TestCardSizeFixEditsOnlyWhatTheTargetReads(t *testing.T) {
	const oversized = `
name: big
workload: {kind: inference, params_b: 7, precision: int4}
work_hours: 100
budget: {monthly_limit: 1000, currency: USD, alerts_percent: [50]}
box: {provider: aws, region: us-east-1, instance: p4de.24xlarge}
residency: {regions: ["aws:us-east-1"]}
targets:
  - {name: plan-a, provider: aws, region: us-east-1, offer: p4de.24xlarge, launch: LAUNCH}
`
	tests := []struct {
		name, launch string
		edits        []string // the targets' edit paths
		kept         bool
	}{
		{"reads the offer", "aws ec2 run-instances --instance-type {{.Offer}} --region {{.Region}}", []string{"targets[0].offer"}, false},
		{"spaced template", "aws ec2 run-instances --instance-type {{ .Offer }}", []string{"targets[0].offer"}, false},
		{"names its own instance", "aws ec2 run-instances --instance-type p4de.24xlarge", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			yaml := strings.Replace(oversized, "LAUNCH", strconvQuote(tt.launch), 1)
			card, _ := statusOf(Check(facts(t, yaml, nil)), "card-size")
			if card.Status != Fail {
				t.Fatalf("card-size = %s: %s", card.Status, card.Evidence)
			}
			var paths []string
			for _, e := range card.Edits {
				if strings.HasPrefix(e.Path, "targets") {
					paths = append(paths, e.Path)
				}
			}
			if strings.Join(paths, ",") != strings.Join(tt.edits, ",") {
				t.Errorf("target edits %v, want %v", paths, tt.edits)
			}
			if got := strings.Contains(card.Fix, "then point target plan-a"); got != tt.kept {
				t.Errorf("fix %q: tells to move plan-a by hand = %v, want %v", card.Fix, got, tt.kept)
			}
		})
	}
}

func strconvQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func TestQuestions(t *testing.T) {
	cat, err := catalog.Load(nil, true)
	if err != nil {
		t.Fatal(err)
	}
	md, err := Questions(cat, "aws")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Questions for aws", "Billing granularity", "Dedicated or shared VRAM", "two-minute",
		"egress", "CUDA image", "Quota", "sub-processors", "VAT", "- [ ]", "us-east-1"} {
		if !strings.Contains(md, want) {
			t.Errorf("questions lack %q", want)
		}
	}
	if _, err := Questions(cat, "nosuchcloud"); gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
		t.Errorf("unknown provider: %v, want EInvalid", err)
	}
}
