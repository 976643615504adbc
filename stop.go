package gpuwarden

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Billing states after a stop, next to the node states of fleet.go. A stop
// ends in NodeStopped only when the provider itself reported a state that
// does not bill compute; gpuwarden never guesses its way there.
const (
	// NodeStopRequested is a stop the provider accepted but whose
	// non-billing state was not read back in time: it very likely stops the
	// bill, and the fleet server keeps asking until it knows.
	NodeStopRequested = "stop-requested"
	// NodePoweredOffStillBilling is an OS shutdown on a provider where that
	// leaves the compute bill running (an Azure VM stays allocated, a Lambda
	// instance bills until terminated), or where what it does is unknown.
	NodePoweredOffStillBilling = "powered-off-still-billing"
)

// The stop methods: how a BillStopper stops the box. The API methods are
// each one provider's own stop; os-shutdown and command run on the box.
const (
	// StopOSShutdown runs an OS shutdown (shutdown -h now) on the box.
	StopOSShutdown = "os-shutdown"
	// StopAWS is EC2 StopInstances on this instance.
	StopAWS = "aws-stop"
	// StopGCP is Compute Engine instances.stop on this VM.
	StopGCP = "gcp-stop"
	// StopAzureDeallocate is ARM virtualMachines/deallocate on this VM.
	StopAzureDeallocate = "azure-deallocate"
	// StopRunPod is RunPod's REST POST /pods/{id}/stop on this pod.
	StopRunPod = "runpod-stop"
	// StopVast is Vast.ai's PUT /instances/{id}/ {"state":"stopped"}.
	StopVast = "vast-stop"
	// StopLambdaTerminate is Lambda Cloud's instance-operations/terminate:
	// Lambda has no stop, and terminating loses the instance's local disk.
	StopLambdaTerminate = "lambda-terminate"
	// StopCommand is a command the user gave (--stop-command); gpuwarden
	// cannot tell what it does to the bill.
	StopCommand = "command"
)

// ShutdownEffect is what an OS shutdown from inside the box does to its
// compute bill.
type ShutdownEffect string

// What an OS shutdown does to the compute bill.
const (
	// ShutdownStopsBilling: the provider stops the instance and its compute
	// billing (EC2 EBS-backed, Compute Engine).
	ShutdownStopsBilling ShutdownEffect = "stops-billing"
	// ShutdownKeepsBilling: the box powers off, or reboots, and bills on.
	ShutdownKeepsBilling ShutdownEffect = "keeps-billing"
	// ShutdownTerminates: the provider terminates the instance (billing
	// stops, local data is gone).
	ShutdownTerminates ShutdownEffect = "terminates"
	// ShutdownUnknown: no documentation we could read says; treat it as
	// billing.
	ShutdownUnknown ShutdownEffect = "unknown"
)

// StopsBilling says whether the effect ends compute billing; unknown never does.
func (e ShutdownEffect) StopsBilling() bool {
	return e == ShutdownStopsBilling || e == ShutdownTerminates
}

// StopAction is the provider action that really ends compute billing.
type StopAction string

// The provider actions that end compute billing.
const (
	ActionDeallocate StopAction = "deallocate"
	ActionStop       StopAction = "stop"
	ActionPowerOff   StopAction = "power-off"
	ActionPause      StopAction = "pause"
	ActionShelve     StopAction = "shelve"
	ActionArchive    StopAction = "archive"
	ActionTerminate  StopAction = "terminate"
	ActionDelete     StopAction = "delete"
	// ActionNoneKnown: no documented action we could confirm.
	ActionNoneKnown StopAction = "none-known"
)

// DataLoss says what the provider action does to the data on the box.
type DataLoss string

// What a provider action does to the box's data.
const (
	// DataKept: disks survive; starting the box again finds them.
	DataKept DataLoss = "kept"
	// DataPartial: some local data is lost (a container disk, a local
	// SSD, instance store) while volumes survive.
	DataPartial DataLoss = "partial"
	// DataLost: the box and its local disk are gone (terminate, delete);
	// only separately created volumes or filesystems survive.
	DataLost DataLoss = "lost"
	// DataUnknown: the documentation we read does not say.
	DataUnknown DataLoss = "unknown"
)

// APICall is one provider API request: method and URL template, with
// {placeholders} for what the box must know (instance ID, zone …), and the
// body when one is needed.
type APICall struct {
	Method string `json:"method,omitempty"`
	URL    string `json:"url,omitempty"`
	Body   string `json:"body,omitempty"`
}

// StopSemantics is one provider's answer to "what stops the bill", as its
// own documentation states it; Sources lists the pages each row rests on.
// Fields we could not confirm say unknown (ShutdownUnknown, ActionNoneKnown,
// DataUnknown) rather than guess.
type StopSemantics struct {
	// Provider is the catalog's lower-case provider name (aws, runpod …).
	Provider string `json:"provider"`
	// OSShutdown is what `shutdown -h now` inside the box does to the bill.
	OSShutdown ShutdownEffect `json:"os_shutdown"`
	// Action is the provider action that really stops compute billing.
	Action StopAction `json:"action"`
	// Call is the API request for Action; empty when none was confirmed.
	Call APICall `json:"call,omitzero"`
	// Method is the gpuwarden stop method that performs Action (StopAWS …),
	// empty when gpuwarden has no client for it (use a --stop-command).
	Method string `json:"method,omitempty"`
	// Confirmed is the state the provider reports once compute billing
	// has stopped (PowerState/deallocated, stopped, TERMINATED …).
	Confirmed string `json:"confirmed,omitempty"`
	// LosesData says what Action does to the box's local data.
	LosesData DataLoss `json:"loses_data"`
	// StillBills lists what keeps billing after Action.
	StillBills []string `json:"still_bills,omitempty"`
	// Identity is what the box needs to call Action: an instance role, a
	// managed identity, a service account, an API key's env var.
	Identity string `json:"identity,omitempty"`
	// Notes holds the caveats a row's fields cannot carry.
	Notes string `json:"notes,omitempty"`
	// Sources are the documentation pages the row rests on.
	Sources []string `json:"sources"`
}

// actionStops says whether the row's action ends compute billing: every
// known action does, none-known does not.
func (s StopSemantics) actionStops() bool {
	return s.Action != "" && s.Action != ActionNoneKnown
}

// stopTable is the provider table; each row cites the pages it rests on.
// Checked against those pages on 2026-12-03.
var stopTable = []StopSemantics{
	{
		Provider:   "aws",
		OSShutdown: ShutdownStopsBilling,
		Action:     ActionStop,
		Call: APICall{Method: "POST", URL: "https://ec2.{region}.amazonaws.com/",
			Body: "Action=StopInstances&Version=2016-11-15&InstanceId.1={instance-id}"},
		Method:     StopAWS,
		Confirmed:  "stopped",
		LosesData:  DataPartial,
		StillBills: []string{"EBS volumes", "EBS snapshots", "Elastic IP and public IPv4 addresses"},
		Identity:   "instance role (IMDS iam/security-credentials) or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY[/AWS_SESSION_TOKEN], allowed ec2:StopInstances and ec2:DescribeInstances on the instance",
		Notes: "an OS shutdown stops an EBS-backed instance, which does not bill while not running; with " +
			"InstanceInitiatedShutdownBehavior=terminate, or an instance-store root, it terminates it; " +
			"a stop keeps EBS volumes but loses instance-store data",
		Sources: []string{
			"https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/Stop_Start.html",
			"https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/TroubleshootingInstancesShuttingDown.html",
			"https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_StopInstances.html",
		},
	},
	{
		Provider:   "gcp",
		OSShutdown: ShutdownStopsBilling,
		Action:     ActionStop,
		Call: APICall{Method: "POST",
			URL: "https://compute.googleapis.com/compute/v1/projects/{project}/zones/{zone}/instances/{instance}/stop"},
		Method:     StopGCP,
		Confirmed:  "TERMINATED",
		LosesData:  DataKept,
		StillBills: []string{"persistent disks", "static IP addresses", "snapshots", "local SSD whose contents a stop keeps"},
		Identity:   "the VM's service account with compute.instances.stop (roles/compute.instanceAdmin.v1) and the cloud-platform or compute access scope",
		Notes: "stopped VMs do not incur VM usage charges; instances.stop keeps local SSD contents unless " +
			"discardLocalSsd=true (kept ones bill); a guest OS shutdown stops the VM too",
		Sources: []string{
			"https://cloud.google.com/compute/docs/instances/stop-start-instance",
			"https://cloud.google.com/compute/docs/reference/rest/v1/instances/stop",
			"https://cloud.google.com/compute/docs/reference/rest/v1/instances/testIamPermissions",
		},
	},
	{
		Provider:   "azure",
		OSShutdown: ShutdownKeepsBilling,
		Action:     ActionDeallocate,
		Call: APICall{Method: "POST",
			URL: "https://management.azure.com/subscriptions/{subscription}/resourceGroups/{group}/providers/Microsoft.Compute/virtualMachines/{vm}/deallocate?api-version=2024-07-01"},
		Method:     StopAzureDeallocate,
		Confirmed:  "PowerState/deallocated",
		LosesData:  DataPartial,
		StillBills: []string{"managed OS and data disks", "static public IP addresses", "snapshots"},
		Identity:   "the VM's managed identity, allowed Microsoft.Compute/virtualMachines/deallocate/action on the VM (e.g. Virtual Machine Contributor)",
		Notes: "a shutdown from inside leaves the VM Stopped but allocated and billed in full; deallocate releases " +
			"the compute (\"you are not billed for the compute resources\"); the temporary disk is lost",
		Sources: []string{
			"https://learn.microsoft.com/en-us/azure/virtual-machines/states-billing",
			"https://learn.microsoft.com/en-us/rest/api/compute/virtual-machines/deallocate",
			"https://learn.microsoft.com/en-us/rest/api/authorization/permissions/list-for-resource",
		},
	},
	{
		Provider:   "lambda",
		OSShutdown: ShutdownKeepsBilling,
		Action:     ActionTerminate,
		Call: APICall{Method: "POST", URL: "https://cloud.lambda.ai/api/v1/instance-operations/terminate",
			Body: `{"instance_ids":["{instance-id}"]}`},
		Method:     StopLambdaTerminate,
		Confirmed:  "terminated",
		LosesData:  DataLost,
		StillBills: []string{"persistent filesystems"},
		Identity:   "LAMBDA_API_KEY (Authorization: Bearer); the instance ID from LAMBDA_INSTANCE_ID, as Lambda documents no in-box way to read it",
		Notes: "there is no stop or pause: billing stops only when the instance is terminated; terminating loses " +
			"the instance's disk, persistent filesystems survive",
		Sources: []string{
			"https://old.docs.lambdalabs.com/cloud/on-demand-instance-invoicing/",
			"https://docs-api.lambda.ai/api/cloud",
			"https://docs.lambda.ai/public-cloud/on-demand/creating-managing-instances/",
		},
	},
	{
		Provider:   "runpod",
		OSShutdown: ShutdownKeepsBilling,
		Action:     ActionStop,
		Call:       APICall{Method: "POST", URL: "https://rest.runpod.io/v1/pods/{podId}/stop"},
		Method:     StopRunPod,
		Confirmed:  "desiredStatus EXITED",
		LosesData:  DataPartial,
		StillBills: []string{"pod volume until the pod is terminated", "network volumes"},
		Identity:   "RUNPOD_API_KEY (Authorization: Bearer; RunPod puts a pod-scoped key in every pod) and RUNPOD_POD_ID",
		Notes: "a pod is a container: a shutdown inside it does not stop the pod; a stop keeps the volume (billed) " +
			"and wipes the container disk",
		Sources: []string{
			"https://docs.runpod.io/api-reference/pods/POST/pods/podId/stop",
			"https://docs.runpod.io/runpodctl/reference/runpodctl-stop-pod",
			"https://docs.runpod.io/runpodctl",
			"https://docs.runpod.io/api-reference-v2/pods/get-a-pod",
		},
	},
	{
		Provider:   "vast",
		OSShutdown: ShutdownKeepsBilling,
		Action:     ActionStop,
		Call: APICall{Method: "PUT", URL: "https://console.vast.ai/api/v0/instances/{id}/",
			Body: `{"state":"stopped"}`},
		Method:     StopVast,
		Confirmed:  "actual_status stopped",
		LosesData:  DataKept,
		StillBills: []string{"instance disk (storage charges) until destroyed"},
		Identity:   "VAST_API_KEY, else the per-instance CONTAINER_API_KEY (Authorization: Bearer); the instance ID from CONTAINER_ID",
		Notes: "an instance is a container: a shutdown inside it does not stop it; stopped means \"disk charges " +
			"continue; no GPU charges\"; frozen keeps GPU charges",
		Sources: []string{
			"https://docs.vast.ai/api/stop-instance",
			"https://docs.vast.ai/cli/reference/show-instance",
			"https://docs.vast.ai/billing-help",
			"https://docs.vast.ai/guides/instances/docker-environment",
		},
	},
	{
		Provider:   "hetzner",
		OSShutdown: ShutdownKeepsBilling,
		Action:     ActionDelete,
		Call:       APICall{Method: "DELETE", URL: "https://api.hetzner.cloud/v1/servers/{id}"},
		LosesData:  DataLost,
		StillBills: []string{"volumes", "primary and floating IPs", "snapshots and backups"},
		Identity:   "a Hetzner Cloud API token (Authorization: Bearer)",
		Notes:      "servers bill regardless of their power state until deleted",
		Sources:    []string{"https://docs.hetzner.com/cloud/billing/faq/"},
	},
	{
		Provider:   "ovh",
		OSShutdown: ShutdownKeepsBilling,
		Action:     ActionDelete,
		Call:       APICall{Method: "DELETE", URL: "https://eu.api.ovh.com/1.0/cloud/project/{serviceName}/instance/{instanceId}"},
		LosesData:  DataLost,
		StillBills: []string{"volumes", "snapshots", "object storage"},
		Identity:   "an OVHcloud API application key, secret and consumer key",
		Notes: "every Public Cloud instance bills until it is deleted; OpenStack shelve (keeping a snapshot) may " +
			"also stop instance billing but we could not confirm it on OVHcloud's own pages",
		Sources: []string{
			"https://www.ovh.com/ca/fr/cloud-public/faq/",
			"https://support.us.ovhcloud.com/hc/en-us/articles/22179651508115-Public-Cloud-Billing",
		},
	},
	{
		Provider:   "scaleway",
		OSShutdown: ShutdownKeepsBilling,
		Action:     ActionPowerOff,
		Call: APICall{Method: "POST", URL: "https://api.scaleway.com/instance/v1/zones/{zone}/servers/{server_id}/action",
			Body: `{"action":"poweroff"}`},
		LosesData:  DataUnknown,
		StillBills: []string{"Block Storage volumes", "flexible IPs"},
		Identity:   "a Scaleway secret key (X-Auth-Token: $SCW_SECRET_KEY)",
		Notes: "poweroff typed in the Instance puts it in standby mode, which is still billed; powering it off " +
			"through Scaleway stops compute billing",
		Sources: []string{
			"https://www.scaleway.com/en/docs/instances/how-to/use-standby-mode/",
			"https://www.scaleway.com/en/docs/instances/faq/",
		},
	},
	{
		Provider:   "nebius",
		OSShutdown: ShutdownKeepsBilling,
		Action:     ActionStop,
		LosesData:  DataKept,
		StillBills: []string{"disks", "shared filesystems"},
		Identity:   "a Nebius service account allowed to stop the VM",
		Notes: "a shutdown or halt inside the VM counts as a failure: Compute reboots it and keeps charging; a " +
			"stop through Nebius interfaces is not charged; disks bill whether or not the VM runs",
		Sources: []string{
			"https://docs.nebius.com/compute/virtual-machines/stopped-with-linux-commands",
			"https://docs.nebius.com/compute/virtual-machines/lifecycle",
			"https://docs.nebius.com/legal/specific-terms/compute",
		},
	},
	{
		Provider:   "oci",
		OSShutdown: ShutdownKeepsBilling,
		Action:     ActionTerminate,
		Call:       APICall{Method: "DELETE", URL: "https://iaas.{region}.oraclecloud.com/20160918/instances/{instanceId}"},
		LosesData:  DataLost,
		StillBills: []string{"block volumes", "a preserved boot volume", "reserved public IPs"},
		Identity:   "an instance principal (dynamic group) allowed to manage the instance",
		Notes: "a stopped instance of any GPU shape but VM.GPU.A10 keeps billing (its GPUs stay reserved) until " +
			"terminated, so no shutdown or stop ends a GPU box's bill; standard and A10 shapes stop billing when stopped",
		Sources: []string{"https://docs.oracle.com/en-us/iaas/Content/Compute/Tasks/resource-billing-stopped-instances.htm"},
	},
	{
		Provider:   "do",
		OSShutdown: ShutdownKeepsBilling,
		Action:     ActionDelete,
		Call:       APICall{Method: "DELETE", URL: "https://api.digitalocean.com/v2/droplets/{droplet_id}"},
		LosesData:  DataLost,
		StillBills: []string{"volumes", "snapshots", "reserved IPs"},
		Identity:   "a DigitalOcean API token (DIGITALOCEAN_TOKEN)",
		Notes:      "powered-off Droplets are still billable; destroy stops the charges",
		Sources: []string{
			"https://docs.digitalocean.com/reference/doctl/reference/compute/droplet-action/shutdown",
			"https://docs.digitalocean.com/reference/doctl/reference/compute/droplet-action/power-off",
		},
	},
	{
		Provider:   "vultr",
		OSShutdown: ShutdownKeepsBilling,
		Action:     ActionDelete,
		Call:       APICall{Method: "DELETE", URL: "https://api.vultr.com/v2/instances/{instance-id}"},
		LosesData:  DataLost,
		StillBills: []string{"block storage", "snapshots", "reserved IPs"},
		Identity:   "a Vultr API key (Authorization: Bearer $VULTR_API_KEY)",
		Notes:      "a stopped instance keeps billing unless it is deleted",
		Sources:    []string{"https://docs.vultr.com/products/compute/cloud-compute/management/stop-instance"},
	},
	{
		Provider:   "crusoe",
		OSShutdown: ShutdownUnknown,
		Action:     ActionStop,
		LosesData:  DataKept,
		StillBills: []string{"disks", "VMs under an instance commitment (billed while stopped)"},
		Identity:   "a Crusoe API key",
		Notes:      "on demand, only RUNNING VMs bill and STOPPED ones do not; committed VMs bill while stopped",
		Sources: []string{
			"https://support.crusoecloud.com/hc/en-us/articles/48176498638235-FAQ-Billing-for-VMs-in-ERROR-States",
			"https://docs.crusoecloud.com/virtual-machines/instance-commitments/index.html",
		},
	},
	{
		Provider:   "jarvislabs",
		OSShutdown: ShutdownUnknown,
		Action:     ActionPause,
		LosesData:  DataKept,
		StillBills: []string{"instance storage while paused"},
		Identity:   "a JarvisLabs API key (JL_API_KEY)",
		Notes:      "pause stops compute billing and keeps the data; no REST call is documented besides the SDK/CLI (jl pause)",
		Sources:    []string{"https://pypi.org/project/jarvislabs/", "https://docs.jarvislabs.ai/api"},
	},
	{
		Provider:   "paperspace",
		OSShutdown: ShutdownUnknown,
		Action:     ActionStop,
		LosesData:  DataKept,
		StillBills: []string{"the monthly storage and access fee until the machine is deactivated", "public IPs", "snapshots"},
		Identity:   "a Paperspace API key",
		Notes:      "an hourly machine bills usage only while not Off; we found no confirmed REST call for the stop",
		Sources: []string{
			"https://support.paperspace.com/hc/en-us/articles/236360668-VM-Machine-States-Provisioning-Ready-Inaccessible-and-more-",
			"https://support.paperspace.com/hc/en-us/articles/360057895553-Virtual-Machine-Billing-Overview",
		},
	},
}

// stopAliases maps other names for a provider to the table's.
var stopAliases = map[string]string{
	"verda": "datacrunch", "lambdalabs": "lambda", "vastai": "vast", "google": "gcp",
	"amazon": "aws", "ovhcloud": "ovh", "digitalocean": "do", "oracle": "oci",
}

// UnknownStopProviders are the catalog's providers for which we found no
// documentation of what stops the bill: their StopSemanticsOf answer is all
// unknown, and nothing is ever reported as stopping their bill.
var UnknownStopProviders = []string{
	"cloudrift", "cudo", "datacrunch", "fluidstack", "hivenet", "hotaisle", "hyperbolic", "ibm",
	"lium", "mithril", "primeintellect", "scp", "seeweb", "shadeform", "simplepod", "tensordock",
}

// StopSemanticsOf returns the table row for a provider (aliases such as
// verda or digitalocean resolve). For a provider without a row it returns
// ok=false and a row that says unknown throughout, so that callers can show
// it without special cases.
func StopSemanticsOf(provider string) (StopSemantics, bool) {
	p := normalizeStopProvider(provider)
	for _, s := range stopTable {
		if s.Provider == p {
			s.StillBills = slices.Clone(s.StillBills)
			s.Sources = slices.Clone(s.Sources)
			return s, true
		}
	}
	return StopSemantics{Provider: p, OSShutdown: ShutdownUnknown, Action: ActionNoneKnown, LosesData: DataUnknown}, false
}

// StopSemanticsAll returns every row of the table, in its order.
func StopSemanticsAll() []StopSemantics {
	out := make([]StopSemantics, 0, len(stopTable))
	for _, s := range stopTable {
		s.StillBills = slices.Clone(s.StillBills)
		s.Sources = slices.Clone(s.Sources)
		out = append(out, s)
	}
	return out
}

// normalizeStopProvider lower-cases a provider name and resolves aliases.
func normalizeStopProvider(p string) string {
	p = strings.ToLower(strings.TrimSpace(p))
	if a, ok := stopAliases[p]; ok {
		return a
	}
	return p
}

// StopsComputeBilling says whether a stop method ends compute billing on a
// provider, and why or why not, in words fit for a log line or a preflight
// check. Only what the provider's documentation confirms counts: an unknown
// provider, an unknown shutdown effect, another provider's API method and a
// custom command (whose effect gpuwarden cannot know) all answer false.
func StopsComputeBilling(provider, method string) (bool, string) {
	s, ok := StopSemanticsOf(provider)
	name := s.Provider
	if name == "" {
		name = "this provider"
	}
	switch {
	case method == StopCommand:
		return false, "gpuwarden cannot tell what a custom stop command does to the bill"
	case !ok:
		return false, "what stops the bill on " + name + " is not documented anywhere gpuwarden could check"
	case method == StopOSShutdown:
		switch s.OSShutdown {
		case ShutdownStopsBilling:
			return true, "an OS shutdown stops the instance and its compute billing on " + name
		case ShutdownTerminates:
			return true, "an OS shutdown terminates the instance on " + name + " (its local data is lost)"
		case ShutdownKeepsBilling:
			return false, "an OS shutdown keeps " + name + " billing: " + s.Notes
		}
		return false, "what an OS shutdown does to the bill on " + name + " is unknown"
	case method == "":
		return false, "no stop method"
	case s.Method == method && s.actionStops():
		return true, method + " (" + string(s.Action) + ") stops compute billing on " + name
	case s.Method == "":
		return false, "gpuwarden has no API client for " + name
	}
	return false, method + " is not " + name + "'s stop (" + s.Method + " is)"
}

// StopProof is what a BillStopper found when it checked, without stopping
// anything, that its stop would work and end the bill.
type StopProof struct {
	// Method is the stop method proven (StopAzureDeallocate …).
	Method string `json:"method"`
	// Proven is true when everything checked says the stop would go
	// through and stop compute billing.
	Proven bool `json:"proven"`
	// At is when the checks ran (a cached proof keeps its first time).
	At time.Time `json:"at"`
	// Checked lists what was verified, one item per check, in order.
	Checked []string `json:"checked,omitempty"`
	// Reason says why the stop is not proven.
	Reason string `json:"reason,omitempty"`
	// Fix says what would make it proven.
	Fix string `json:"fix,omitempty"`
}

// StopOutcome is what a stop did, as the provider answered it.
type StopOutcome struct {
	// Method is the stop method that ran.
	Method string `json:"method"`
	// HTTPStatus is the provider's answer to the stop request (0 for
	// stops that run on the box).
	HTTPStatus int `json:"http_status,omitempty"`
	// OperationID is the provider's ID for the stop, when it gives one.
	OperationID string `json:"operation_id,omitempty"`
	// State is the instance state read back after the stop.
	State string `json:"state,omitempty"`
	// Billing is NodeStopped, NodeStopRequested or
	// NodePoweredOffStillBilling; NodeRunning when the stop was refused.
	Billing string `json:"billing"`
	// At is when the outcome was settled: the last state read back.
	At time.Time `json:"at"`
	// Detail says in words what happened and what still bills.
	Detail string `json:"detail,omitempty"`
}

// Answer is the provider's answer to a stop in words: "HTTP 202, operation
// op-1, state read back PowerState/deallocated" and the detail; empty when
// the provider said nothing (a stop run on the box).
func (o StopOutcome) Answer() string {
	var parts []string
	if o.HTTPStatus != 0 {
		parts = append(parts, "HTTP "+strconv.Itoa(o.HTTPStatus))
	}
	if o.OperationID != "" {
		parts = append(parts, "operation "+o.OperationID)
	}
	if o.State != "" {
		parts = append(parts, "state read back "+o.State)
	}
	if o.Detail != "" {
		parts = append(parts, o.Detail)
	}
	return strings.Join(parts, ", ")
}

// BillStopper stops this box in a way that ends its compute bill, and can
// prove beforehand, without stopping anything, that it would.
type BillStopper interface {
	// Method is one of the Stop* method names.
	Method() string
	// Prove checks credentials, permissions and identity without stopping
	// anything. Its error is nil exactly when the proof is Proven; it is a
	// *Error whose hint is the proof's Fix otherwise. Answers are cached,
	// so calling it often costs at most one provider request a minute.
	Prove(ctx context.Context) (StopProof, error)
	// Stop stops the box. A stop the provider accepted returns a nil
	// error, with Billing NodeStopped once the provider reported a
	// non-billing state, NodeStopRequested while it had not yet.
	Stop(ctx context.Context) (StopOutcome, error)
}

// Words are a row of the table in words, for `up --help`, the README and
// the fleet server: what an OS shutdown does to the bill, what ends it with
// gpuwarden, and what bills on after that.
func (s StopSemantics) Words() (shutdown, endsBill, stillBills string) {
	switch s.OSShutdown {
	case ShutdownStopsBilling:
		shutdown = "stops compute billing"
	case ShutdownKeepsBilling:
		shutdown = "keeps billing"
	case ShutdownTerminates:
		shutdown = "terminates the box"
	default:
		shutdown = "unknown"
	}
	switch {
	case s.Method == StopLambdaTerminate:
		endsBill = "terminate (`--stop terminate`; the disk is lost)"
	case s.OSShutdown.StopsBilling() && s.Method != "":
		endsBill = "OS shutdown (`--stop auto`), or " + s.Method + " (`--stop api`)"
	case s.Method != "":
		endsBill = s.Method + " (`--stop auto`)"
	case s.Action != "" && s.Action != ActionNoneKnown:
		endsBill = string(s.Action) + " through its API: a `--stop-command`"
	default:
		endsBill = "none known"
	}
	stillBills = strings.Join(s.StillBills, ", ")
	if stillBills == "" {
		stillBills = "unknown"
	}
	return shutdown, endsBill, stillBills
}

// StopModes are the ways a plan (on_hours.stop) or `up --stop` may ask the
// box to be stopped: auto, what ends this provider's bill; os, an OS
// shutdown whatever it does to the bill; api, the provider's API stop;
// terminate, for Lambda, which has no stop; command, the user's own
// stop_command. stopper.ParseMode reads the same words.
var StopModes = []string{"auto", "os", "api", "terminate", "command"}

// StopEndsBill reports whether the agent's stop in mode (one of StopModes;
// empty is auto) ends the compute bill on provider, and why: what `plan`
// prices the idle hours after an auto-shutdown with, and what preflight
// checks. A stop_command of the user's own is taken at its word.
func StopEndsBill(provider, mode string) (bool, string) {
	if mode == "command" {
		return true, "taken at its word: your stop_command"
	}
	sem, known := StopSemanticsOf(provider)
	if !known {
		return false, "what ends " + provider + "'s bill is unknown"
	}
	lambda := sem.Method == StopLambdaTerminate
	switch mode {
	case "", "auto":
		switch {
		case sem.OSShutdown.StopsBilling():
			return true, "an OS shutdown ends " + provider + "'s compute bill"
		case sem.Method != "" && !lambda:
			return true, sem.Method + " ends " + provider + "'s compute bill"
		case lambda:
			return false, "lambda has no stop: only on_hours.stop: terminate ends the bill (and the disk)"
		}
		return false, "nothing gpuwarden runs ends " + provider + "'s bill (" + string(sem.Action) + " through its API: a stop_command)"
	case "os":
		if sem.OSShutdown.StopsBilling() {
			return true, "an OS shutdown ends " + provider + "'s compute bill"
		}
		return false, "an OS shutdown does not end " + provider + "'s bill"
	case "api":
		if sem.Method != "" && !lambda {
			return true, sem.Method + " ends " + provider + "'s compute bill"
		}
		return false, "gpuwarden has no API stop for " + provider
	case "terminate":
		if lambda {
			return true, "terminating ends lambda's bill, with the instance's disk"
		}
		return false, "terminate is for lambda"
	}
	return false, "unknown stop mode " + mode
}
