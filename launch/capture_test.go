package launch

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/peertest"
	"github.com/gpuwarden/gpuwarden/launch/launchtest"
)

// update rewrites testdata/cli from the real CLIs (with GPUWARDEN_PEER_TESTS=1).
var update = flag.Bool("update", false, "capture testdata/cli again from the real CLIs")

// cliCase is one failure as a real CLI prints it: the stand-in's answer,
// the command, and the class and scope the rules must give the captured
// stderr and exit status.
type cliCase struct {
	file     string // testdata/cli/<file>.txt
	cli      string // aws1, aws2, gcloud, az
	provider string
	reply    launchtest.Reply // the stand-in's answer to the launch call
	creds    string           // "": good; "none": no credentials; "bad": refused ones
	args     []string         // instead of the provider's launch command
	class    string
	scope    string // checked for a target with a zone
}

// awsRun is the launch template's command as it runs, with $AMI set.
var awsRun = []string{"ec2", "run-instances", "--region", "us-east-1", "--instance-type", "p5.48xlarge", "--image-id", "ami-0123456789abcdef0",
	"--count", "1", "--placement", "AvailabilityZone=us-east-1a", "--output", "json"}

// gcloudCreate is the gcp launch template's command as it runs.
var gcloudCreate = []string{"compute", "instances", "create", "gw-0123abcd-1", "--zone", "us-central1-a", "--machine-type", "a3-highgpu-8g",
	"--image-family", "common-cu124", "--image-project", "deeplearning-platform-release", "--maintenance-policy", "TERMINATE", "--project", "acme-train"}

// awsCases are EC2's documented errors ("Error codes for the Amazon EC2
// API": code, message, and the HTTP status of client and server errors),
// each captured from both AWS CLI versions.
var awsCases = []cliCase{
	// Server errors (5xx) are retried by the CLI: the message then reads
	// "(reached max retries: 4)" in v1 (legacy mode) and 2 in v2.
	{file: "insufficient-instance-capacity", reply: launchtest.Reply{Status: 500, Code: "InsufficientInstanceCapacity", Message: "We currently do not have sufficient p5.48xlarge capacity in the Availability Zone you requested (us-east-1a). Our system will be working on provisioning additional capacity. You can currently get p5.48xlarge capacity by not specifying an Availability Zone in your request or choosing us-east-1b, us-east-1c."}, class: "capacity", scope: "zone"},
	{file: "insufficient-host-capacity", reply: launchtest.Reply{Status: 500, Code: "InsufficientHostCapacity", Message: "There is not enough capacity to fulfill your Dedicated Host request."}, class: "capacity", scope: "zone"},
	{file: "unsupported", reply: launchtest.Reply{Status: 400, Code: "Unsupported", Message: "Your requested instance type (p5.48xlarge) is not supported in your requested Availability Zone (us-east-1a). Please retry your request by not specifying an Availability Zone or choosing us-east-1b, us-east-1c."}, class: "capacity", scope: "zone"},
	{file: "spot-max-price-too-low", reply: launchtest.Reply{Status: 400, Code: "SpotMaxPriceTooLow", Message: "Your Spot request price of 0.5 is lower than the minimum required Spot request fulfillment price of 1.2."}, class: "capacity", scope: "zone"},
	{file: "request-limit-exceeded", reply: launchtest.Reply{Status: 503, Code: "RequestLimitExceeded", Message: "Request limit exceeded."}, class: "unknown"},
	{file: "vcpu-limit-exceeded", reply: launchtest.Reply{Status: 400, Code: "VcpuLimitExceeded", Message: "You have requested more vCPU capacity than your current vCPU limit of 0 allows for the instance bucket that the specified instance type belongs to. Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit."}, class: "quota", scope: "region"},
	{file: "instance-limit-exceeded", reply: launchtest.Reply{Status: 400, Code: "InstanceLimitExceeded", Message: "You have requested more instances (2) than your current instance limit of 1 allows for the specified instance type."}, class: "quota", scope: "region"},
	{file: "max-spot-instance-count-exceeded", reply: launchtest.Reply{Status: 400, Code: "MaxSpotInstanceCountExceeded", Message: "Max spot instance count exceeded"}, class: "quota", scope: "region"},
	{file: "pending-verification", reply: launchtest.Reply{Status: 400, Code: "PendingVerification", Message: "Your request for accessing resources in this region is being validated, and you will not be able to launch additional resources in this region until the validation is complete."}, class: "quota", scope: "region"},
	{file: "unauthorized-operation", reply: launchtest.Reply{Status: 403, Code: "UnauthorizedOperation", Message: "You are not authorized to perform this operation. User: arn:aws:iam::123456789012:user/ci is not authorized to perform: ec2:RunInstances"}, class: "auth"},
	// A region the account has not enabled: rules out that region only.
	{file: "auth-failure", reply: launchtest.Reply{Status: 401, Code: "AuthFailure", Message: "AWS was not able to validate the provided access credentials"}, class: "auth", scope: "region"},
	{file: "invalid-client-token-id", reply: launchtest.Reply{Status: 403, Code: "InvalidClientTokenId", Message: "The security token included in the request is invalid."}, class: "auth"},
	{file: "expired-token", reply: launchtest.Reply{Status: 400, Code: "ExpiredToken", Message: "The security token included in the request is expired"}, class: "auth"},
	{file: "no-credentials", creds: "none", class: "auth"},
	{file: "opt-in-required", reply: launchtest.Reply{Status: 401, Code: "OptInRequired", Message: "In order to use this AWS Marketplace product you need to accept terms and subscribe. To do so please visit https://aws.amazon.com/marketplace/pp?sku=0123456789abcdefghijklmno"}, class: "config"},
	{file: "invalid-ami", reply: launchtest.Reply{Status: 400, Code: "InvalidAMIID.NotFound", Message: "The image id '[ami-0123456789abcdef0]' does not exist"}, class: "config"},
	{file: "invalid-key-pair", reply: launchtest.Reply{Status: 400, Code: "InvalidKeyPair.NotFound", Message: "The key pair 'train' does not exist"}, class: "config"},
	{file: "invalid-parameter-value", reply: launchtest.Reply{Status: 400, Code: "InvalidParameterValue", Message: "Invalid value 'p5.48xlarg' for InstanceType."}, class: "config"},
	// $AMI unset: --image-id takes no value, a usage error; nothing is sent.
	{file: "usage-unset-ami", args: []string{"ec2", "run-instances", "--region", "us-east-1", "--instance-type", "p5.48xlarge", "--image-id", "--count", "1", "--output", "json"}, class: "config"},
}

// gcloudCases are Compute Engine's documented error bodies, as gcloud
// prints them: a synchronous error (one line per error) and one found in
// the insert operation (YAML, folded at about 80 columns).
var gcloudCases = []cliCase{
	{file: "gcloud-zone-resource-pool-exhausted", reply: launchtest.Reply{Status: 503, InOperation: true, Code: "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", Message: "A a3-highgpu-8g VM instance with 8 nvidia-h100-80gb accelerator(s) is currently unavailable in the us-central1-a zone. Alternatively, you can try your request again with a different VM hardware configuration or at a later time. For more information, see the troubleshooting documentation."}, class: "capacity", scope: "zone"},
	{file: "gcloud-zone-does-not-have-enough-resources", reply: launchtest.Reply{Status: 503, InOperation: true, Code: "ZONE_RESOURCE_POOL_EXHAUSTED", Message: "The zone 'projects/acme-train/zones/us-central1-a' does not have enough resources available to fulfill the request.  Try a different zone, or try again later."}, class: "capacity", scope: "zone"},
	{file: "gcloud-machine-type-not-in-zone", reply: launchtest.Reply{Status: 400, Code: "invalid", Message: "Invalid value for field 'resource.machineType': 'zones/us-central1-a/machineTypes/a3-highgpu-8g'. Machine type with name 'a3-highgpu-8g' does not exist in zone 'us-central1-a'."}, class: "capacity", scope: "zone"},
	{file: "gcloud-accelerator-not-found", reply: launchtest.Reply{Status: 404, Code: "notFound", Message: "The resource 'projects/acme-train/zones/us-central1-a/acceleratorTypes/nvidia-h100-80gb' was not found"}, class: "capacity", scope: "zone"},
	{file: "gcloud-api-rate-limit", reply: launchtest.Reply{Status: 403, Code: "rateLimitExceeded", Message: "Quota exceeded for quota metric 'Queries' and limit 'Queries per minute' of service 'compute.googleapis.com' for consumer 'project_number:123456789012'."}, class: "unknown"},
	{file: "gcloud-gpus-all-regions", reply: launchtest.Reply{Status: 403, Code: "quotaExceeded", Message: "Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 0.0 globally."}, class: "quota", scope: "provider"},
	{file: "gcloud-region-quota", reply: launchtest.Reply{Status: 403, Code: "quotaExceeded", Message: "Quota 'NVIDIA_H100_GPUS' exceeded.  Limit: 0.0 in region us-central1."}, class: "quota", scope: "region"},
	{file: "gcloud-quota-exceeded-operation", reply: launchtest.Reply{Status: 403, InOperation: true, Code: "QUOTA_EXCEEDED", Message: "Quota 'NVIDIA_H100_GPUS' exceeded.  Limit: 0.0 in region us-central1."}, class: "quota", scope: "region"},
	{file: "gcloud-permission-denied", reply: launchtest.Reply{Status: 403, Code: "forbidden", Message: "Required 'compute.instances.create' permission for 'projects/acme-train/zones/us-central1-a/instances/gw-0123abcd-1'"}, class: "auth"},
	{file: "gcloud-invalid-credentials", creds: "bad", class: "auth"},
	{file: "gcloud-no-account", creds: "none", class: "auth"},
	{file: "gcloud-image-not-found", reply: launchtest.Reply{Status: 404, Code: "notFound", Message: "The resource 'projects/deeplearning-platform-release/global/images/family/common-cu999' was not found"}, class: "config"},
	{file: "gcloud-invalid-name", reply: launchtest.Reply{Status: 400, Code: "invalid", Message: "Invalid value for field 'resource.name': 'GW_0123'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'"}, class: "config"},
}

// azCases need no server: az refuses before it calls Azure when nobody is
// logged in. (A stand-in for Azure Resource Manager would need az to trust
// a registered cloud's login endpoint, which this suite does not fake.)
var azCases = []cliCase{
	{file: "az-not-logged-in", cli: "az", provider: "azure", args: []string{"vm", "create", "--resource-group", "train", "--name", "gw-0123abcd-1", "--location", "eastus",
		"--size", "Standard_ND96isr_H100_v5", "--image", "Ubuntu2204", "--output", "json"}, class: "auth"},
}

// cliCases are every captured case: the AWS ones once per CLI version.
func cliCases() []cliCase {
	var out []cliCase
	for _, v := range []string{"aws1", "aws2"} {
		for _, c := range awsCases {
			c.cli, c.provider = v, "aws"
			c.file = v + "-" + c.file
			out = append(out, c)
		}
	}
	for _, c := range gcloudCases {
		c.cli, c.provider = "gcloud", "gcp"
		out = append(out, c)
	}
	return append(out, azCases...)
}

// captured is one file of testdata/cli: how it was made and what came out.
type captured struct {
	cli, command string
	exit         int
	stderr       string
}

func readCaptured(t *testing.T, file string) captured {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "cli", file+".txt"))
	if err != nil {
		t.Fatalf("%v (capture it: GPUWARDEN_PEER_TESTS=1 go test ./launch -run TestCLICaptures -update)", err)
	}
	var c captured
	rest := string(b)
	for _, key := range []string{"# cli: ", "# command: ", "# exit: "} {
		line, after, ok := strings.Cut(rest, "\n")
		if !ok || !strings.HasPrefix(line, key) {
			t.Fatalf("testdata/cli/%s.txt: want a %q line, got %q", file, key, line)
		}
		rest = after
		v := strings.TrimPrefix(line, key)
		switch key {
		case "# cli: ":
			c.cli = v
		case "# command: ":
			c.command = v
		default:
			if c.exit, err = strconv.Atoi(v); err != nil {
				t.Fatalf("testdata/cli/%s.txt: exit: %v", file, err)
			}
		}
	}
	c.stderr = rest
	return c
}

func (c captured) String() string {
	return fmt.Sprintf("# cli: %s\n# command: %s\n# exit: %d\n%s", c.cli, c.command, c.exit, c.stderr)
}

// TestCapturedCLIOutput classifies the real CLIs' captured output: the
// exact stderr and exit status each printed for a documented failure.
func TestCapturedCLIOutput(t *testing.T) {
	rules := DefaultRules()
	for _, tc := range cliCases() {
		t.Run(tc.file, func(t *testing.T) {
			c := readCaptured(t, tc.file)
			if c.exit == 0 {
				t.Fatalf("captured exit 0: not a failure")
			}
			got := ""
			r, ok := Classify(rules, tc.provider, c.exit, c.stderr)
			if ok {
				got = r.Class
			}
			if got != tc.class {
				t.Fatalf("class %q (rule %q), want %q for:\n%s", got, r.Pattern, tc.class, c.stderr)
			}
			if tc.scope != "" {
				if s := scopeOf(r, gpuwarden.Target{Zone: "z"}); s != tc.scope {
					t.Errorf("scope %q, want %q", s, tc.scope)
				}
			}
		})
	}
	// Every AWS and Google Cloud rule is met by a real CLI's output; the
	// other providers' rules are checked against their documented messages
	// in rules_test.go, since their CLIs do not run here (az does, but
	// only refuses before it calls Azure without a login).
	covered := map[int]bool{}
	for _, tc := range cliCases() {
		c := readCaptured(t, tc.file)
		for i, r := range rules {
			if got, ok := Classify(rules[i:i+1], tc.provider, c.exit, c.stderr); ok && got.Pattern == r.Pattern {
				if first, _ := Classify(rules, tc.provider, c.exit, c.stderr); first.Pattern == r.Pattern {
					covered[i] = true
				}
			}
		}
	}
	for i, r := range rules {
		if (r.Provider == "aws" || r.Provider == "gcp") && !covered[i] {
			t.Errorf("built-in rule %d (%s %q) decides no captured CLI output", i+1, r.Provider, r.Pattern)
		}
	}
	// The retried-5xx wording has its own check: the rules must still find
	// the code after "(reached max retries: N)".
	for file, want := range map[string]string{"aws1-insufficient-instance-capacity": "(reached max retries: 4)", "aws2-insufficient-instance-capacity": "(reached max retries: 2)"} {
		if c := readCaptured(t, file); !strings.Contains(c.stderr, want) {
			t.Errorf("%s lacks %q:\n%s", file, want, c.stderr)
		}
	}
}

// TestFoldedGcloudOutput checks that the rules read gcloud's folded text:
// gcloud prints ZONE_RESOURCE_POOL_EXHAUSTED errors as YAML folded at about
// 80 columns (api_lib/compute/utils.py ShouldUseYaml), so a documented
// sentence arrives split over lines. Without the code line, which a
// wrapper or log shipper may drop, only the sentence is left to match.
func TestFoldedGcloudOutput(t *testing.T) {
	tests := []struct {
		file, sentence string
	}{
		{"gcloud-zone-resource-pool-exhausted", "is currently unavailable in the us-central1-a zone"},
		{"gcloud-zone-does-not-have-enough-resources", "does not have enough resources available to fulfill the request"},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			c := readCaptured(t, tc.file)
			if strings.Contains(c.stderr, tc.sentence) {
				t.Fatalf("the capture is not folded, so it tests nothing:\n%s", c.stderr)
			}
			var kept []string
			for _, l := range strings.Split(c.stderr, "\n") {
				if !strings.HasPrefix(l, "code: ") {
					kept = append(kept, l)
				}
			}
			msg := strings.Join(kept, "\n")
			r, ok := Classify(DefaultRules(), "gcp", c.exit, msg)
			if !ok || r.Class != gpuwarden.FailCapacity {
				t.Errorf("class %q (ok %v), want capacity for:\n%s", r.Class, ok, msg)
			}
		})
	}
}

// TestCLICaptures runs the real CLIs again against the stand-ins and
// checks that they still print what testdata/cli holds (-update rewrites
// it). It needs the peers, so it runs under GPUWARDEN_PEER_TESTS=1 only,
// where a missing CLI fails it.
func TestCLICaptures(t *testing.T) {
	if os.Getenv(peertest.RequireEnv) != "1" {
		t.Skip("re-captures the real aws (v1 and v2), gcloud and az output: set GPUWARDEN_PEER_TESTS=1 (scripts/install-peers.sh installs them)")
	}
	clis := findCLIs(t)
	for _, tc := range cliCases() {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			bin := clis[tc.cli]
			got := capture(t, bin.path, bin.version, tc)
			if *update {
				if err := os.WriteFile(filepath.Join("testdata", "cli", tc.file+".txt"), []byte(got.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want := readCaptured(t, tc.file)
			if got.exit != want.exit || got.stderr != want.stderr {
				if want.cli != got.cli {
					t.Fatalf("%s printed differently than %s did (exit %d, want %d); capture again with -update:\n%s", got.cli, want.cli, got.exit, want.exit, got.stderr)
				}
				t.Fatalf("exit %d, want %d; stderr:\n%s\nwant:\n%s", got.exit, want.exit, got.stderr, want.stderr)
			}
		})
	}
}

type cli struct{ path, version string }

// findCLIs finds aws v1 (the image's pyenv shim), aws v2 (Debian's awscli,
// /usr/bin/aws), gcloud and az, by asking each aws on PATH its version.
func findCLIs(t *testing.T) map[string]cli {
	t.Helper()
	out := map[string]cli{}
	version := func(path string, args ...string) string {
		b, err := exec.Command(path, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", path, strings.Join(args, " "), err, b)
		}
		line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		return line
	}
	seen := map[string]bool{}
	for _, dir := range append(filepath.SplitList(os.Getenv("PATH")), "/usr/bin") {
		p := filepath.Join(dir, "aws")
		if seen[p] {
			continue
		}
		seen[p] = true
		if fi, err := os.Stat(p); err != nil || fi.IsDir() {
			continue
		}
		v, _, _ := strings.Cut(version(p, "--version"), " ")
		for _, k := range []string{"aws1", "aws2"} {
			if _, ok := out[k]; !ok && strings.HasPrefix(v, "aws-cli/"+k[3:]+".") {
				out[k] = cli{p, v}
			}
		}
	}
	if p, err := exec.LookPath("gcloud"); err == nil {
		out["gcloud"] = cli{p, version(p, "version")}
	}
	if p, err := exec.LookPath("az"); err == nil {
		out["az"] = cli{p, version(p, "--version")}
	}
	if v, ok := out["gcloud"]; ok {
		v.version = strings.TrimPrefix(v.version, "Google Cloud SDK ")
		v.version = "gcloud " + v.version
		out["gcloud"] = v
	}
	if v, ok := out["az"]; ok {
		v.version = strings.Join(strings.Fields(v.version), " ")
		out["az"] = v
	}
	for _, k := range []string{"aws1", "aws2", "gcloud", "az"} {
		if _, ok := out[k]; !ok {
			t.Fatalf("%s not found: scripts/install-peers.sh installs the CLIs", k)
		}
	}
	return out
}

// capture runs tc's command against a fresh stand-in with a throwaway
// home, so that nothing of this machine's configuration changes it.
func capture(t *testing.T, bin, version string, tc cliCase) captured {
	home := t.TempDir()
	env := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8"}
	args := tc.args
	var url string
	switch tc.provider {
	case "aws":
		ec2 := launchtest.StartEC2(t, map[string]launchtest.Reply{"RunInstances": tc.reply})
		url = ec2.URL
		env = append(env, "AWS_ENDPOINT_URL="+ec2.URL, "AWS_EC2_METADATA_DISABLED=true", "AWS_PAGER=",
			"AWS_CONFIG_FILE="+filepath.Join(home, "config"), "AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(home, "credentials"))
		if tc.cli == "aws2" && tc.args == nil {
			// Debian's v2 (2.9) predates AWS_ENDPOINT_URL (2.13).
			args = append([]string{"--endpoint-url", ec2.URL}, awsRun...)
		}
		if tc.creds != "none" {
			env = append(env, "AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE", "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
		}
		if args == nil {
			args = awsRun
		}
	case "gcp":
		gce := launchtest.StartGCE(t, "ya29.gw-test-token", map[string]launchtest.Reply{"us-central1-a": tc.reply})
		url = gce.URL
		env = append(env, "CLOUDSDK_CONFIG="+filepath.Join(home, "gcloud"), "CLOUDSDK_CORE_DISABLE_PROMPTS=1",
			"CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE="+gce.Endpoint())
		if args == nil {
			args = gcloudCreate
		}
		if tc.creds != "none" {
			token := gce.Token
			if tc.creds == "bad" {
				token = "ya29.expired"
			}
			tokenFile := filepath.Join(home, "token")
			if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
				t.Fatal(err)
			}
			args = append(append([]string{}, args...), "--access-token-file", tokenFile)
		}
	case "azure":
		env = append(env, "AZURE_CONFIG_DIR="+filepath.Join(home, "azure"), "AZURE_CORE_COLLECT_TELEMETRY=false")
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Dir = home
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%s: %v", bin, err)
	}
	c := captured{cli: version, command: filepath.Base(bin) + " " + strings.Join(args, " "), exit: cmd.ProcessState.ExitCode(), stderr: stderr.String()}
	if tc.cli == "aws1" {
		c.command = "AWS_ENDPOINT_URL=" + url + " " + c.command
	}
	c.command = strings.ReplaceAll(c.command, home, "$HOME")
	if url != "" {
		c.command = strings.ReplaceAll(c.command, url, "http://127.0.0.1:PORT")
		c.stderr = strings.ReplaceAll(c.stderr, url, "http://127.0.0.1:PORT")
	}
	c.stderr = strings.ReplaceAll(c.stderr, home, "$HOME")
	return c
}
