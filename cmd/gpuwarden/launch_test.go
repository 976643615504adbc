package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/report"
)

// launchPlan is a plan whose targets run the fake launchers of
// launch/testdata, which print the providers' documented errors.
func launchPlan(t *testing.T, dir string, scripts ...string) string {
	t.Helper()
	fakes := filepath.Join(repoRoot(t), "launch", "testdata")
	places := []struct{ provider, region, zone, offer string }{
		{"aws", "us-east-1", "us-east-1a", "p5.48xlarge"},
		{"gcp", "us-central1", "us-central1-a", "a3-highgpu-8g"},
		{"lambda", "us-east-1", "", "gpu_8x_h100_sxm5"},
	}
	var b strings.Builder
	b.WriteString("workload:\n  kind: inference\n  params_b: 7\nwork_hours: 100\nbudget:\n  monthly_limit: 1000\ntargets:\n")
	for i, s := range scripts {
		p := places[i]
		fmt.Fprintf(&b, "  - name: plan-%c\n    provider: %s\n    region: %s\n", 'a'+i, p.provider, p.region)
		if p.zone != "" {
			fmt.Fprintf(&b, "    zone: %s\n", p.zone)
		}
		fmt.Fprintf(&b, "    offer: %s\n    launch: sh %s\n    stop: echo stop {{.Name}} {{.InstanceID}}\n", p.offer, filepath.Join(fakes, s))
		b.WriteString("    instance_id: '\"InstanceId\": \"(i-[0-9a-f]+)\"'\n")
	}
	path := filepath.Join(dir, "gpuwarden.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLaunchFallsBackToPlanC(t *testing.T) {
	dir := t.TempDir()
	plan := launchPlan(t, dir, "aws-capacity.sh", "gcp-quota.sh", "ok.sh")
	data := filepath.Join(dir, "data")
	r := gwLive(t, dir, "launch", plan, "--data-dir", data, "--backoff", "10ms")
	if r.code != 0 {
		t.Fatalf("launch exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"plan-a", "capacity", "plan-b", "quota", "plan-c", "i-0abc123def4567890"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("launch output lacks %q:\n%s", want, r.stdout)
		}
	}

	r = gwLive(t, dir, "launch", "--list", "-o", "json", "--data-dir", data)
	var list struct{ Attempts []gpuwarden.LaunchAttempt }
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("launch --list: %v\n%s", err, r.stdout)
	}
	attempts := list.Attempts
	type row struct{ target, outcome, class string }
	var got []row
	for _, a := range attempts {
		got = append(got, row{a.Target, a.Outcome, a.Class})
	}
	want := []row{{"plan-a", "failed", "capacity"}, {"plan-b", "failed", "quota"}, {"plan-c", "launched", ""}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("recorded attempts = %v, want %v", got, want)
	}
	if last := attempts[len(attempts)-1]; last.InstanceID != "i-0abc123def4567890" || !strings.Contains(last.StopCommand, "i-0abc123def4567890") {
		t.Errorf("launched attempt: instance %q, stop %q", last.InstanceID, last.StopCommand)
	}

	// A second launch makes two samples for lambda; the report shows both.
	if r = gwLive(t, dir, "launch", plan, "--data-dir", data, "--backoff", "10ms"); r.code != 0 {
		t.Fatalf("second launch: %d %s", r.code, r.stderr)
	}
	r = gwLive(t, dir, "report", "provisioning", "-o", "json", "--data-dir", data)
	var prov report.ProvisioningReport
	if err := json.Unmarshal([]byte(r.stdout), &prov); err != nil {
		t.Fatalf("report provisioning: %v\n%s%s", err, r.stdout, r.stderr)
	}
	byProvider := map[string]report.ProvisioningRow{}
	for _, row := range prov.Rows {
		byProvider[row.Provider] = row
	}
	if l := byProvider["lambda"]; l.Launched != 2 || l.Provisioning.Samples != 2 || l.Provisioning.MeanSeconds < 0 {
		t.Errorf("lambda row = %+v, want 2 launches with times", l)
	}
	if a := byProvider["aws"]; a.Failures["capacity"] != 2 || a.Launched != 0 {
		t.Errorf("aws row = %+v, want 2 capacity failures", a)
	}
	if g := byProvider["gcp"]; g.Failures["quota"] != 2 {
		t.Errorf("gcp row = %+v, want 2 quota failures", g)
	}
	if table := gwLive(t, dir, "report", "provisioning", "--data-dir", data); !strings.Contains(table.stdout, "P95") {
		t.Errorf("provisioning table:\n%s", table.stdout)
	}
}

func TestLaunchAuthStopsAndCleanupRuns(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	plan := launchPlan(t, dir, "unknown-fail.sh", "auth-fail.sh", "ok.sh")
	r := gwLive(t, dir, "launch", plan, "--data-dir", data, "--backoff", "10ms")
	if r.code != 3 {
		t.Fatalf("launch after an auth error: exit %d, want 3\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout, "i-0abc123def4567890") {
		t.Errorf("plan-c ran after an auth error:\n%s", r.stdout)
	}
	// plan-a failed in a way no rule explains: it may have left a box, and
	// --cleanup runs its stop command.
	r = gwLive(t, dir, "launch", "--cleanup", "--data-dir", data)
	if r.code != 0 || !strings.Contains(r.stdout+r.stderr, "1 stop command") {
		t.Fatalf("cleanup: %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = gwLive(t, dir, "launch", "--cleanup", "--data-dir", data)
	if !strings.Contains(r.stderr, "0 stop command") {
		t.Errorf("a second cleanup ran stop commands again:\n%s", r.stderr)
	}
}

// TestLaunchBadInputLeavesNothing checks that an invocation refused for
// its input exits 2 and writes no ledger.
func TestLaunchBadInputLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("targets:\n  - name: a\n    provider: aws\n    lanch: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	noTargets := filepath.Join(dir, "empty.yaml")
	if err := os.WriteFile(noTargets, []byte("workload:\n  kind: inference\n  params_b: 7\nwork_hours: 10\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, want string
		args       []string
	}{
		{"missing plan", "nope.yaml", []string{filepath.Join(dir, "nope.yaml")}},
		{"unknown field", "bad.yaml:4:5: targets[0].lanch", []string{bad}},
		{"no targets", "has no targets", []string{noTargets}},
		{"unknown target", "--target [zz]", []string{launchPlan(t, dir, "ok.sh"), "--target", "zz"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := filepath.Join(dir, "data")
			r := gwLive(t, dir, append([]string{"launch", "--data-dir", data}, tt.args...)...)
			if r.code != 2 || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", r.code, r.stderr, tt.want)
			}
			if _, err := os.Stat(data); !os.IsNotExist(err) {
				t.Errorf("the refused launch left %s behind (%v)", data, err)
			}
		})
	}
	t.Run("no plan here", func(t *testing.T) {
		empty := t.TempDir()
		r := gwLive(t, empty, "launch", "--data-dir", filepath.Join(empty, "data"))
		if r.code != 2 || !strings.Contains(r.stderr, "no gpuwarden.yaml here") || !strings.Contains(r.stderr, "gpuwarden init") {
			t.Errorf("exit %d, stderr %q; want 2, the missing file and gpuwarden init", r.code, r.stderr)
		}
	})
}
