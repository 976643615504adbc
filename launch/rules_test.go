package launch

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

// sample is a real failure message, as the provider's CLI or API prints it.
type sample struct {
	provider string
	exit     int
	msg      string
	class    string // "" when no rule should match
	scope    string // for a target with a zone; checked when set
}

// samples hold at least one message for every built-in rule; the messages
// are the providers' documented ones (see the sources in rules.yaml).
var samples = []sample{
	// AWS, as the AWS CLI prints EC2 errors.
	{"aws", 254, "An error occurred (InsufficientInstanceCapacity) when calling the RunInstances operation: We currently do not have sufficient p5.48xlarge capacity in the Availability Zone you requested (us-east-1a). Our system will be working on provisioning additional capacity. You can currently get p5.48xlarge capacity by not specifying an Availability Zone in your request or choosing us-east-1b, us-east-1c.", "capacity", "zone"},
	{"aws", 1, "Error: creating EC2 Instance: UnfulfillableCapacity: At this time there isn't enough spare capacity to fulfill your request for Spot Instances.", "capacity", ""},
	{"aws", 254, "An error occurred (InsufficientHostCapacity) when calling the AllocateHosts operation: There is not enough capacity to fulfill your Dedicated Host request.", "capacity", ""},
	{"aws", 254, "An error occurred (Unsupported) when calling the RunInstances operation: Your requested instance type (p5.48xlarge) is not supported in your requested Availability Zone (us-east-1e). Please retry your request by not specifying an Availability Zone or choosing us-east-1a, us-east-1b, us-east-1c, us-east-1d, us-east-1f.", "capacity", "zone"},
	{"aws", 254, "An error occurred (SpotMaxPriceTooLow) when calling the RequestSpotInstances operation: Your Spot request price of 0.5 is lower than the minimum required Spot request fulfillment price of 1.2.", "capacity", ""},
	{"aws", 254, "An error occurred (VcpuLimitExceeded) when calling the RunInstances operation: You have requested more vCPU capacity than your current vCPU limit of 0 allows for the instance bucket that the specified instance type belongs to. Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit.", "quota", "region"},
	{"aws", 254, "An error occurred (InstanceLimitExceeded) when calling the RunInstances operation: You have requested more instances (2) than your current instance limit of 1 allows for the specified instance type. Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit.", "quota", ""},
	{"aws", 254, "An error occurred (MaxSpotInstanceCountExceeded) when calling the RunInstances operation: Max spot instance count exceeded", "quota", ""},
	{"aws", 254, "An error occurred (PendingVerification) when calling the RunInstances operation: Your request for accessing resources in this region is being validated, and you will not be able to launch additional resources in this region until the validation is complete.", "quota", ""},
	{"aws", 254, "An error occurred (UnauthorizedOperation) when calling the RunInstances operation: You are not authorized to perform this operation. Encoded authorization failure message: 4Nq2b0", "auth", ""},
	{"aws", 254, "An error occurred (AuthFailure) when calling the RunInstances operation: AWS was not able to validate the provided access credentials", "auth", "region"},
	{"aws", 254, "An error occurred (InvalidClientTokenId) when calling the RunInstances operation: The security token included in the request is invalid.", "auth", ""},
	{"aws", 252, "usage: aws [options] <command> <subcommand> [<subcommand> ...] [parameters]\nTo see help text, you can run:\n\n  aws help\n\naws: error: the following arguments are required: --image-id", "config", ""},
	{"aws", 254, "An error occurred (OptInRequired) when calling the RunInstances operation: In order to use this AWS Marketplace product you need to accept terms and subscribe.", "config", ""},
	{"aws", 253, "Unable to locate credentials. You can configure credentials by running \"aws configure\".", "auth", ""},
	{"aws", 254, "An error occurred (ExpiredToken) when calling the RunInstances operation: The security token included in the request is expired", "auth", ""},
	{"aws", 255, "Error when retrieving token from sso: Token has expired and refresh failed", "auth", ""},
	{"aws", 254, "An error occurred (InvalidAMIID.NotFound) when calling the RunInstances operation: The image id '[ami-0123456789abcdef0]' does not exist", "config", ""},
	{"aws", 254, "An error occurred (InvalidKeyPair.NotFound) when calling the RunInstances operation: The key pair 'train' does not exist", "config", ""},
	{"aws", 254, "An error occurred (InvalidParameterValue) when calling the RunInstances operation: Invalid value 'p5.48xlarg' for InstanceType.", "config", ""},
	// Throttling is the API's rate limit, not the account's quota: it rules
	// nothing out for the rest of the launch.
	{"aws", 254, "An error occurred (RequestLimitExceeded) when calling the RunInstances operation (reached max retries: 2): Request limit exceeded.", "unknown", ""},

	// Google Cloud, as gcloud prints them.
	{"gcp", 1, "ERROR: (gcloud.compute.instances.create) Could not fetch resource:\n - The zone 'projects/acme-train/zones/us-central1-a' does not have enough resources available to fulfill the request.  Try a different zone, or try again later.", "capacity", "zone"},
	{"gcp", 1, "ERROR: (gcloud.compute.instances.create) Could not fetch resource:\n - code: ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS\n   message: A a3-highgpu-8g VM instance is currently unavailable in the us-central1-a zone.", "capacity", ""},
	{"gcp", 1, "ERROR: (gcloud.compute.instances.create) Could not fetch resource:\n - The resource 'projects/acme-train/zones/europe-west2-c/acceleratorTypes/nvidia-tesla-v100' was not found", "capacity", ""},
	{"gcp", 1, "ERROR: (gcloud.compute.instances.create) Could not fetch resource:\n - Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 0.0 globally.", "quota", "provider"},
	{"gcp", 1, "ERROR: (gcloud.compute.instances.create) Could not fetch resource:\n - Quota 'NVIDIA_H100_GPUS' exceeded.  Limit: 0.0 in region us-central1.", "quota", "region"},
	{"gcp", 1, "ERROR: (gcloud.compute.instances.create) Could not fetch resource:\n - Quota exceeded for quota metric 'Queries' and limit 'Queries per minute' of service 'compute.googleapis.com' for consumer 'project_number:123456789012'.", "unknown", ""},
	{"gcp", 1, "ERROR: (gcloud.compute.instances.create) You do not currently have an active account selected.\nPlease run:\n\n  $ gcloud auth login\n\nto obtain new credentials.", "auth", ""},
	{"gcp", 1, "ERROR: (gcloud.compute.instances.create) There was a problem refreshing your current auth tokens: ('invalid_grant: Bad Request', {'error': 'invalid_grant', 'error_description': 'Bad Request'})", "auth", ""},
	{"gcp", 1, "ERROR: (gcloud.compute.instances.create) Could not fetch resource:\n - Required 'compute.instances.create' permission for 'projects/acme-train/zones/us-central1-a/instances/gw-0123abcd-1'", "auth", ""},
	// A machine type the zone does not carry is plan A's usual failure:
	// capacity for the zone (issue 28 item 3), also when gcloud folds it.
	{"gcp", 1, "ERROR: (gcloud.compute.instances.create) Could not fetch resource:\n - Invalid value for field 'resource.machineType': 'zones/us-central1-a/machineTypes/a3-highgpu-8g'. Machine type with name 'a3-highgpu-8g' does not exist in zone 'us-central1-a'.", "capacity", "zone"},
	{"gcp", 1, "ERROR: (gcloud.compute.instances.create) Could not fetch resource:\n---\ncode: ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS\nmessage: A a3-highgpu-8g VM instance with 8 nvidia-h100-80gb accelerator(s) is\n  currently unavailable in the us-central1-a zone.", "capacity", "zone"},
	{"gcp", 1, "ERROR: (gcloud.compute.instances.create) Could not fetch resource:\n - Invalid value for field 'resource.name': 'GW_0123'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'", "config", ""},

	// Azure, as az prints them.
	{"azure", 1, "(SkuNotAvailable) The requested VM size for resource 'Following SKUs have failed for Capacity Restrictions: Standard_ND96isr_H100_v5' is currently not available in location 'eastus'. Please try another size or deploy to a different location or zones.", "capacity", "zone"},
	{"azure", 1, "(ZonalAllocationFailed) Allocation failed. We do not have sufficient capacity for the requested VM size in this zone. Read more about improving likelihood of allocation success at http://aka.ms/allocation-guidance", "capacity", "zone"},
	{"azure", 1, "(AllocationFailed) Allocation failed. We do not have sufficient capacity for the requested VM size in this region. Read more about improving likelihood of allocation success at http://aka.ms/allocation-guidance", "capacity", "region"},
	{"azure", 1, "(OperationNotAllowed) Operation could not be completed as it results in exceeding approved standardNCADSH100v5Family Cores quota. Additional details - Deployment Model: Resource Manager, Location: eastus, Current Limit: 0, Current Usage: 0, Additional Required: 40, (Minimum) New Limit Required: 40.", "quota", "region"},
	{"azure", 1, "(AuthorizationFailed) The client 'ci@acme.com' with object id '00000000-0000-0000-0000-000000000000' does not have authorization to perform action 'Microsoft.Compute/virtualMachines/write' over scope '/subscriptions/0000/resourceGroups/train' or the scope is invalid.", "auth", ""},
	{"azure", 1, "(ExpiredAuthenticationToken) The access token expiry UTC time '11/29/2026 9:00:00 AM' is earlier than current UTC time '11/29/2026 10:00:00 AM'.", "auth", ""},
	{"azure", 1, "ERROR: Please run 'az login' to setup account.", "auth", ""},
	{"azure", 1, "(ResourceGroupNotFound) Resource group 'train-rg' could not be found.", "config", ""},

	// RunPod; the balance wording is illustrative, RunPod documents none.
	{"runpod", 1, "Error: There are no longer any instances available with the requested specifications. Please refresh and try again.", "capacity", "zone"},
	{"runpod", 1, "Error: not enough funds in your account to deploy this pod", "quota", "provider"},

	// Lambda Cloud API error bodies.
	{"lambda", 1, `{"error": {"code": "instance-operations/launch/insufficient-capacity", "message": "Not enough capacity to fulfill launch request.", "suggestion": "Choose an instance type with more availability, or try again later."}}`, "capacity", "zone"},
	{"lambda", 1, `{"error": {"code": "global/quota-exceeded", "message": "Quota exceeded.", "suggestion": "Contact Support to increase your quota."}}`, "quota", "provider"},
	{"lambda", 1, `{"error": {"code": "global/invalid-api-key", "message": "API key was invalid, expired, or deleted.", "suggestion": "Check your API key or create a new one, then try again."}}`, "auth", ""},
	{"lambda", 1, `{"error": {"code": "instance-operations/launch/file-system-in-wrong-region", "message": "File system is in a different region than the instance."}}`, "config", ""},

	// SkyPilot, whatever cloud it launched on.
	{"skypilot", 1, "sky.exceptions.ResourcesUnavailableError: Catalog does not contain any instances satisfying the request:\n1x AWS(p5.48xlarg)", "config", ""},
	{"skypilot", 1, "sky.exceptions.NoCloudAccessError: No cloud access credentials found. Run `sky check` to set up credentials.", "auth", ""},
	{"gcp", 1, "sky.exceptions.ResourcesUnavailableError: Failed to provision all possible launchable resources. Relax the task's resource requirements: 1x GCP({'H100': 8})", "capacity", "region"},

	// Fallbacks, for any provider.
	{"vast", 127, "sh: 1: vastai: not found", "config", ""},
	{"vast", 126, "sh: 1: ./launch.sh: Permission denied", "config", ""},
	{"vast", 1, "Error: 403 Forbidden: access denied", "auth", ""},
	{"vast", 1, "Error: 429 Too Many Requests: rate limit exceeded, retry later", "unknown", ""},
	{"vast", 1, "Error: quota exceeded for GPUs in this account", "quota", "region"},
	{"vast", 1, "Error: no capacity for 8x H100 right now", "capacity", "zone"},

	// What no rule explains.
	{"aws", 1, "Error: read tcp 10.0.0.2:51234->52.94.0.1:443: read: connection reset by peer", "", ""},
	{"aws", 0, "", "", ""},
}

// TestDefaultRulesSamples checks the rule table against real messages: each
// message gets its class, and no rule is dead (shadowed or never matching).
func TestDefaultRulesSamples(t *testing.T) {
	rules := DefaultRules()
	hit := make([]bool, len(rules))
	for _, s := range samples {
		r, ok := Classify(rules, s.provider, s.exit, s.msg)
		got := ""
		if ok {
			got = r.Class
		}
		if got != s.class {
			t.Errorf("%s exit %d %.70q: class %q, want %q (rule %q)", s.provider, s.exit, s.msg, got, s.class, r.Pattern)
			continue
		}
		if !ok {
			continue
		}
		if s.scope != "" {
			// A target with a zone, so that a zone scope is not widened.
			if got := scopeOf(r, gpuwarden.Target{Zone: "z"}); got != s.scope {
				t.Errorf("%s %.50q: scope %q, want %q", s.provider, s.msg, got, s.scope)
			}
		}
		for i := range rules {
			if rules[i].Pattern == r.Pattern && rules[i].Provider == r.Provider && rules[i].Class == r.Class {
				hit[i] = true
				break
			}
		}
		if r.Why == "" {
			t.Errorf("rule %q has no why", r.Pattern)
		}
	}
	for i, h := range hit {
		if !h {
			t.Errorf("built-in rule %d (%s %q) matches no sample message", i+1, rules[i].Provider, rules[i].Pattern)
		}
	}
}

func TestDefaultRulesValid(t *testing.T) {
	rules := DefaultRules()
	if len(rules) < 30 {
		t.Fatalf("%d built-in rules, want the whole table", len(rules))
	}
	for i, r := range rules {
		if err := ValidateRule(r); err != nil {
			t.Errorf("rule %d: %v", i+1, err)
		}
		if _, err := RenderText(r.Why, sampleVars); err != nil {
			t.Errorf("rule %d why: %v", i+1, err)
		}
	}
	// A copy each call: appending must not reach the table.
	rules[0].Class = "changed"
	if DefaultRules()[0].Class == "changed" {
		t.Error("DefaultRules returned the table itself")
	}
}

func TestClassify(t *testing.T) {
	exit3 := 3
	user := []gpuwarden.LaunchRule{
		{Provider: "aws", Pattern: `InsufficientInstanceCapacity`, Class: "quota", Why: "our own reading"},
		{Pattern: `(`, Class: "capacity"}, // a broken rule is skipped, not fatal
		{Pattern: `flaky network`, ExitCode: &exit3, Class: "unknown"},
	}
	rules := append(user, DefaultRules()...)
	tests := []struct {
		name, provider string
		exit           int
		out            string
		wantOK         bool
		wantClass      string
		wantProvider   string
		wantWhy        string
	}{
		{"the plan's rule comes first", "aws", 254, "An error occurred (InsufficientInstanceCapacity)", true, "quota", "aws", "our own reading"},
		{"provider matches in any case", "AWS", 254, "(InsufficientInstanceCapacity)", true, "quota", "aws", ""},
		{"another provider's rule does not apply", "gcp", 1, "InsufficientInstanceCapacity", true, "capacity", "", ""},
		{"exit code must match", "x", 1, "flaky network", false, "", "", ""},
		{"exit code matches", "x", 3, "flaky network", true, "unknown", "", ""},
		{"nothing matches", "aws", 1, "segmentation fault", false, "", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, ok := Classify(rules, tc.provider, tc.exit, tc.out)
			if ok != tc.wantOK || r.Class != tc.wantClass || r.Provider != tc.wantProvider {
				t.Errorf("Classify = %+v, %v; want class %q provider %q, %v", r, ok, tc.wantClass, tc.wantProvider, tc.wantOK)
			}
			if tc.wantWhy != "" && r.Why != tc.wantWhy {
				t.Errorf("why %q, want %q", r.Why, tc.wantWhy)
			}
		})
	}
}

func TestValidateRule(t *testing.T) {
	zero := 0
	tests := []struct {
		name  string
		rule  gpuwarden.LaunchRule
		field string
	}{
		{"valid", gpuwarden.LaunchRule{Pattern: "x", Class: "capacity", Scope: "region", Why: "{{.Offer}} gone"}, ""},
		{"no pattern", gpuwarden.LaunchRule{Class: "capacity"}, "pattern"},
		{"bad pattern", gpuwarden.LaunchRule{Pattern: "a(", Class: "capacity"}, "pattern"},
		{"no class", gpuwarden.LaunchRule{Pattern: "x"}, "class"},
		{"unknown class", gpuwarden.LaunchRule{Pattern: "x", Class: "capacty"}, "class"},
		{"unknown scope", gpuwarden.LaunchRule{Pattern: "x", Class: "quota", Scope: "continent"}, "scope"},
		{"scope on config", gpuwarden.LaunchRule{Pattern: "x", Class: "config", Scope: "region"}, "scope"},
		{"exit code 0", gpuwarden.LaunchRule{Pattern: "x", Class: "quota", ExitCode: &zero}, "exit_code"},
		{"bad why", gpuwarden.LaunchRule{Pattern: "x", Class: "quota", Why: "{{.Regoin}}"}, "why"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkFieldError(t, ValidateRule(tc.rule), tc.field)
		})
	}
}

// checkFieldError wants err to be an EInvalid FieldError for field, or nil
// when field is "".
func checkFieldError(t *testing.T, err error, field string) {
	t.Helper()
	if field == "" {
		if err != nil {
			t.Errorf("error %v, want none", err)
		}
		return
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != field {
		t.Fatalf("error %v, want a FieldError for %q", err, field)
	}
	if code(err) != gpuwarden.EInvalid || !strings.HasPrefix(err.Error(), field+": ") {
		t.Errorf("error %q (code %q), want EInvalid starting %q", err, code(err), field+": ")
	}
}
