package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/peertest"
	"github.com/gpuwarden/gpuwarden/launch"
	"github.com/gpuwarden/gpuwarden/launch/launchtest"
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

// peerCLI finds a real CLI for an end-to-end test: it skips without one,
// unless GPUWARDEN_PEER_TESTS=1 says CI must run the test.
func peerCLI(t *testing.T, name, why string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		msg := name + " is not on PATH (" + why + "): scripts/install-peers.sh"
		if os.Getenv(peertest.RequireEnv) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// yamlTargets writes a plan whose targets' commands are literal blocks, so
// that any quoting in them reaches launch as written.
func yamlTargets(t *testing.T, dir string, targets ...gpuwarden.Target) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("workload:\n  kind: inference\n  params_b: 7\nwork_hours: 100\nbudget:\n  monthly_limit: 1000\ntargets:\n")
	for _, tg := range targets {
		fmt.Fprintf(&b, "  - name: %s\n    provider: %s\n    region: %s\n    zone: %s\n    offer: %s\n", tg.Name, tg.Provider, tg.Region, tg.Zone, tg.Offer)
		fmt.Fprintf(&b, "    launch: |-\n      %s\n    stop: |-\n      %s\n", tg.Launch, tg.Stop)
		if tg.InstanceID != "" {
			fmt.Fprintf(&b, "    instance_id: '%s'\n", strings.ReplaceAll(tg.InstanceID, "'", "''"))
		}
		if tg.TimeoutSeconds > 0 {
			fmt.Fprintf(&b, "    timeout_seconds: %g\n", tg.TimeoutSeconds)
		}
	}
	return writeFile(t, filepath.Join(dir, "gpuwarden.yaml"), b.String())
}

// TestLaunchGCPZoneWithoutTheMachineTypeMovesToPlanB runs the built-in GCP
// templates through the real gcloud against a Compute Engine stand-in:
// plan A's zone answers "Machine type ... does not exist in zone", which
// is capacity for that zone, so launch moves to plan B, which launches;
// --cleanup then deletes plan B's box by name and gcloud's describe
// confirms it gone (issue 28 item 3 and done-when 3).
func TestLaunchGCPZoneWithoutTheMachineTypeMovesToPlanB(t *testing.T) {
	peerCLI(t, "gcloud", "the Google Cloud SDK, in the image")
	gce := launchtest.StartGCE(t, "ya29.gw-test-token", map[string]launchtest.Reply{
		"us-central1-a": {Status: 400, Code: "invalid", Message: "Invalid value for field 'resource.machineType': 'zones/us-central1-a/machineTypes/a3-highgpu-8g'. Machine type with name 'a3-highgpu-8g' does not exist in zone 'us-central1-a'."},
	})
	dir := t.TempDir()
	token := writeFile(t, filepath.Join(dir, "token"), gce.Token)
	for k, v := range map[string]string{
		"CLOUDSDK_CONFIG": filepath.Join(dir, "gcloud"), "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
		"CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE": gce.Endpoint(), "CLOUDSDK_AUTH_ACCESS_TOKEN_FILE": token,
		"CLOUDSDK_CORE_PROJECT": "acme-train", "IMAGE_FAMILY": "common-cu124", "IMAGE_PROJECT": "deeplearning-platform-release",
	} {
		t.Setenv(k, v)
	}
	tmpl := launch.Template("gcp")
	plan := yamlTargets(t, dir,
		gpuwarden.Target{Name: "plan-a", Provider: "gcp", Region: "us-central1", Zone: "us-central1-a", Offer: "a3-highgpu-8g", Launch: tmpl.Launch, Stop: tmpl.Stop},
		gpuwarden.Target{Name: "plan-b", Provider: "gcp", Region: "us-central1", Zone: "us-central1-b", Offer: "a3-highgpu-8g", Launch: tmpl.Launch, Stop: tmpl.Stop})
	data := filepath.Join(dir, "data")
	r := gwLive(t, dir, "launch", plan, "--data-dir", data, "--backoff", "10ms")
	if r.code != 0 {
		t.Fatalf("launch: exit %d, want 0 (plan B launched)\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{
		"plan-a  gcp us-central1-a a3-highgpu-8g  capacity: Machine type with name 'a3-highgpu-8g' does not exist in zone — us-central1-a does not offer a3-highgpu-8g → next target",
		"launched plan-b as gw-",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("launch output lacks %q:\n%s", want, r.stdout)
		}
	}
	name := regexp.MustCompile(`launched plan-b as (gw-[0-9a-f]+-2)`).FindStringSubmatch(r.stdout)
	if name == nil || !gce.Exists("us-central1-b", name[1]) {
		t.Fatalf("plan B's box is not in the stand-in (%v); calls: %v", name, gce.Calls())
	}
	r = gwLive(t, dir, "launch", "--cleanup", "--include-launched", "--data-dir", data)
	if r.code != 0 || !strings.Contains(r.stdout, name[1]+" is gone") {
		t.Fatalf("cleanup: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if gce.Exists("us-central1-b", name[1]) {
		t.Errorf("cleanup left %s in us-central1-b", name[1])
	}
}

// TestLaunchCleanupAfterAKilledLaunch kills gpuwarden launch after the
// real aws CLI created the box in moto but before the launch command
// ended, so the ledger holds only the pending record, without an instance
// ID. --cleanup must find the box by its Name tag and terminate it, and
// moto's describe must show it terminated (issue 28 item 5, done-when 3).
func TestLaunchCleanupAfterAKilledLaunch(t *testing.T) {
	peerCLI(t, "aws", "v1 comes with the image's Python")
	m := peertest.StartMoto(t)
	dir := t.TempDir()
	pidfile := filepath.Join(dir, "launch.pid")
	for k, v := range map[string]string{
		"AWS_ENDPOINT_URL": m.URL, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_PAGER": "", "AWS_CONFIG_FILE": filepath.Join(dir, "aws-config"),
		"AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "aws-credentials"), "AMI": "ami-12c6146b", "GW_PIDFILE": pidfile,
	} {
		t.Setenv(k, v)
	}
	tmpl := launch.Template("aws")
	// The launch command goes on after creating the box (as one that waits
	// for it to boot would), and says where its process group is.
	plan := yamlTargets(t, dir, gpuwarden.Target{Name: "plan-a", Provider: "aws", Region: "us-east-1", Zone: "us-east-1a", Offer: "p3.2xlarge",
		Launch: `echo $$ > "$GW_PIDFILE"; ` + tmpl.Launch + ` >/dev/null && sleep 300`, Stop: tmpl.Stop, InstanceID: tmpl.InstanceID})
	data := filepath.Join(dir, "data")
	cmd := exec.Command(binary, "launch", plan, "--data-dir", data)
	cmd.Dir = dir
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	kill := func() {
		if killed {
			return
		}
		killed = true
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		// The launch command runs in its own process group, which outlives
		// a killed gpuwarden: stop it too, so no process is left behind.
		if b, err := os.ReadFile(pidfile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
	}
	t.Cleanup(kill)
	idRE := regexp.MustCompile(`<instanceId>(i-[0-9a-f]+)</instanceId>`)
	var id string
	for deadline := time.Now().Add(2 * time.Minute); id == "" && time.Now().Before(deadline); {
		body := m.Query(t, "ec2", "testing", "testing", url.Values{"Action": {"DescribeInstances"}, "Version": {"2016-11-15"}})
		if got := idRE.FindSubmatch(body); got != nil {
			id = string(got[1])
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if id == "" {
		kill()
		t.Fatalf("the launch created no instance in moto within 2 minutes:\n%s", out.String())
	}
	kill()

	r := gwLive(t, dir, "launch", "--list", "-o", "json", "--data-dir", data)
	var list struct{ Attempts []gpuwarden.LaunchAttempt }
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Attempts) != 1 {
		t.Fatalf("launch --list: %v\n%s", err, r.stdout)
	}
	if a := list.Attempts[0]; a.Outcome != "" || !a.MayExist || a.InstanceID != "" {
		t.Fatalf("the killed launch left %+v, want a pending attempt without an instance ID", a)
	}
	r = gwLive(t, dir, "launch", "--cleanup", "--data-dir", data)
	if r.code != 0 {
		t.Fatalf("cleanup: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if got := m.State(t, "testing", "testing", id); got != "terminated" {
		t.Errorf("instance %s is %q after cleanup, want terminated\n%s", id, got, r.stdout)
	}
	if !strings.Contains(r.stdout, "stopped (terminated "+id+")") {
		t.Errorf("cleanup output does not name the terminated instance:\n%s", r.stdout)
	}
	if r = gwLive(t, dir, "launch", "--cleanup", "--data-dir", data); !strings.Contains(r.stderr, "ran 0 stop commands") {
		t.Errorf("a second cleanup ran stop commands again:\n%s%s", r.stdout, r.stderr)
	}
}
