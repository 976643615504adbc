package launch

import "github.com/gpuwarden/gpuwarden"

// templates are starting points for each provider's own CLI: the
// command, the one that undoes it, and where the new ID is in the output.
// They name the box {{.Name}} so that a box can be found by name even when
// the launch died before it printed an ID: every stop uses the ID when it
// is known and else looks the box up by that name, and exits 0 only when a
// describe or list afterwards shows the box gone (or that none by that
// name is left), since Cleanup counts exit 0 as "gone".
var templates = map[string]gpuwarden.Target{
	"aws": {
		Launch: "aws ec2 run-instances --region {{.Region}} --instance-type {{.Offer}} --image-id $AMI --count 1" +
			" {{if .Zone}}--placement AvailabilityZone={{.Zone}} {{end}}" +
			"--tag-specifications 'ResourceType=instance,Tags=[{Key=Name,Value={{.Name}}}]' --output json",
		Stop:       awsStop,
		InstanceID: `"InstanceId": "(i-[0-9a-f]+)"`,
	},
	"gcp": {
		Launch: "gcloud compute instances create {{.Name}} --zone {{.Zone}} --machine-type {{.Offer}}" +
			" --image-family $IMAGE_FAMILY --image-project $IMAGE_PROJECT --maintenance-policy TERMINATE",
		Stop: gcpStop,
	},
	"azure": {
		Launch: "az vm create --resource-group $RESOURCE_GROUP --name {{.Name}} --location {{.Region}}" +
			" --size {{.Offer}} --image $IMAGE {{if .Zone}}--zone {{.Zone}} {{end}}--output json",
		Stop: azureStop,
	},
	"lambda": {
		Launch: `curl -fsS -u "$LAMBDA_API_KEY:" "${LAMBDA_API:-https://cloud.lambdalabs.com/api/v1}/instance-operations/launch"` +
			` -H 'Content-Type: application/json' -d '{"region_name":"{{.Region}}","instance_type_name":"{{.Offer}}",` +
			`"ssh_key_names":["'"$SSH_KEY"'"],"name":"{{.Name}}"}'`,
		Stop:       lambdaStop,
		InstanceID: `"instance_ids":\s*\["([^"]+)"`,
	},
	"runpod": {
		Launch:     "runpodctl create pod --name {{.Name}} --gpuType '{{.Offer}}' --imageName $IMAGE",
		Stop:       runpodStop,
		InstanceID: `pod "([a-z0-9]+)" created`,
	},
}

// awsStop terminates by ID, or else finds the box by the Name tag the
// launch gave it (describe-instances with a tag:Name filter, live states
// only), then waits until describe shows it terminated (aws ec2 wait
// instance-terminated polls describe-instances). Sources: the AWS CLI
// reference for describe-instances, terminate-instances and wait
// instance-terminated.
const awsStop = `{{if .InstanceID}}ids={{.InstanceID}}{{else}}` +
	`ids=$(aws ec2 describe-instances --region {{.Region}} --filters Name=tag:Name,Values={{.Name}}` +
	` Name=instance-state-name,Values=pending,running,shutting-down,stopping,stopped` +
	` --query 'Reservations[].Instances[].InstanceId' --output text) || exit{{end}}; ` +
	`if [ -z "$ids" ]; then echo "no instance named {{.Name}} is left in {{.Region}}"; exit 0; fi; ` +
	`aws ec2 terminate-instances --region {{.Region}} --instance-ids $ids --output text >/dev/null || exit; ` +
	`aws ec2 wait instance-terminated --region {{.Region}} --instance-ids $ids || exit; ` +
	`echo "terminated $ids"`

// gcpStop deletes the instance by name (gcloud waits for the operation),
// then asks for it: only "was not found" counts as gone. Sources: the
// gcloud reference for compute instances delete and describe.
const gcpStop = `gcloud compute instances delete {{.Name}} --zone {{.Zone}} --quiet; ` +
	`out=$(gcloud compute instances describe {{.Name}} --zone {{.Zone}} --format 'value(status)' 2>&1); ` +
	`if printf '%s' "$out" | grep -q 'was not found'; then echo "{{.Name}} is gone"; ` +
	`else echo "{{.Name}} is still there: $out" >&2; exit 1; fi`

// azureStop deletes the VM by name (az waits for it), then asks for it:
// only ResourceNotFound counts as gone. Sources: the az reference for vm
// delete and vm show.
const azureStop = `az vm delete --resource-group "$RESOURCE_GROUP" --name {{.Name}} --yes; ` +
	`out=$(az vm show --resource-group "$RESOURCE_GROUP" --name {{.Name}} --query provisioningState --output tsv 2>&1); ` +
	`if printf '%s' "$out" | grep -q 'ResourceNotFound'; then echo "{{.Name}} is gone"; ` +
	`else echo "{{.Name}} is still there: $out" >&2; exit 1; fi`

// lambdaStop terminates by ID, or else finds the instances named
// {{.Name}} in the instance list, then lists again until none of them is
// left but terminated. Source: the Lambda Cloud API reference (GET
// /instances, POST /instance-operations/terminate). curl's answer is read
// before jq reads it, because a pipeline's status is its last command's: a
// refused key must fail the stop, not read as "none left".
const lambdaStop = `api=${LAMBDA_API:-https://cloud.lambdalabs.com/api/v1}; ` +
	`{{if .InstanceID}}key=id; n={{.InstanceID}}{{else}}key=name; n={{.Name}}{{end}}; ` +
	`list() { body=$(curl -fsS -u "$LAMBDA_API_KEY:" "$api/instances") || return; ` +
	`printf '%s' "$body" | jq -r --arg k "$key" --arg n "$n" '.data[] | select(.[$k] == $n and .status != "terminated") | .id'; }; ` +
	`ids=$(list) || exit; ` +
	`if [ -z "$ids" ]; then echo "no instance $key $n is left"; exit 0; fi; ` +
	`for id in $ids; do curl -fsS -u "$LAMBDA_API_KEY:" "$api/instance-operations/terminate" -H 'Content-Type: application/json'` +
	` -d "{\"instance_ids\":[\"$id\"]}" >/dev/null || exit; done; ` +
	`for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30; do ` +
	`left=$(list) || exit; if [ -z "$left" ]; then echo "terminated $ids"; exit 0; fi; sleep "${LAMBDA_POLL:-10}"; done; ` +
	`echo "instance $key $n is still terminating: $left" >&2; exit 1`

// runpodStop removes the pod by ID, or else finds the pods named
// {{.Name}} through RunPod's GraphQL API (myself { pods { id name } }),
// removes them with runpodctl, then lists again: only pods no longer
// listed count as gone. Sources: the RunPod GraphQL API's pod queries and
// runpodctl remove pod.
const runpodStop = `api=${RUNPOD_GRAPHQL:-https://api.runpod.io/graphql}; ` +
	`pods() { body=$(curl -fsS "$api?api_key=$RUNPOD_API_KEY" -H 'Content-Type: application/json'` +
	` -d '{"query":"query { myself { pods { id name } } }"}') || return; ` +
	`printf '%s' "$body" | jq -r '.data.myself.pods[] | .id + " " + .name'; }; ` +
	`{{if .InstanceID}}ids={{.InstanceID}}{{else}}all=$(pods) || exit; ids=$(printf '%s\n' "$all" | awk -v n={{.Name}} '$2 == n { print $1 }'){{end}}; ` +
	`if [ -z "$ids" ]; then echo "no pod named {{.Name}} is left"; exit 0; fi; ` +
	`for id in $ids; do runpodctl remove pod "$id" || exit; done; ` +
	`live=$(pods) || exit; ` +
	`for id in $ids; do if printf '%s\n' "$live" | grep -q "^$id "; then echo "pod $id is still there" >&2; exit 1; fi; done; ` +
	`echo "removed $ids"`

// Template returns a target with the provider's launch, stop and ID
// templates filled in, to adapt; a provider without its own gets SkyPilot's
// `sky launch`, which speaks to most clouds.
func Template(provider string) gpuwarden.Target {
	if t, ok := templates[provider]; ok {
		return t
	}
	return gpuwarden.Target{Launch: "sky launch --cloud {{.Provider}} --region {{.Region}} --instance-type {{.Offer}} -c {{.Name}} --yes",
		Stop: "sky down {{.Name}} --yes"}
}
