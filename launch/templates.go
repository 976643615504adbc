package launch

import "github.com/gpuwarden/gpuwarden"

// templates are starting points for each provider's own CLI: the
// command, the one that undoes it, and where the new ID is in the output.
// They name the box {{.Name}} so that a box can be found by name even when
// the launch died before it printed an ID.
var templates = map[string]gpuwarden.Target{
	"aws": {
		Launch: "aws ec2 run-instances --region {{.Region}} --instance-type {{.Offer}} --image-id $AMI --count 1" +
			" {{if .Zone}}--placement AvailabilityZone={{.Zone}} {{end}}" +
			"--tag-specifications 'ResourceType=instance,Tags=[{Key=Name,Value={{.Name}}}]' --output json",
		Stop:       "aws ec2 terminate-instances --region {{.Region}} --instance-ids {{.InstanceID}}",
		InstanceID: `"InstanceId": "(i-[0-9a-f]+)"`,
	},
	"gcp": {
		Launch: "gcloud compute instances create {{.Name}} --zone {{.Zone}} --machine-type {{.Offer}}" +
			" --image-family $IMAGE_FAMILY --image-project $IMAGE_PROJECT --maintenance-policy TERMINATE",
		Stop: "gcloud compute instances delete {{.Name}} --zone {{.Zone}} --quiet",
	},
	"azure": {
		Launch: "az vm create --resource-group $RESOURCE_GROUP --name {{.Name}} --location {{.Region}}" +
			" --size {{.Offer}} --image $IMAGE {{if .Zone}}--zone {{.Zone}} {{end}}--output json",
		Stop: "az vm delete --resource-group $RESOURCE_GROUP --name {{.Name}} --yes",
	},
	"lambda": {
		Launch: `curl -fsS -u "$LAMBDA_API_KEY:" https://cloud.lambdalabs.com/api/v1/instance-operations/launch` +
			` -H 'Content-Type: application/json' -d '{"region_name":"{{.Region}}","instance_type_name":"{{.Offer}}",` +
			`"ssh_key_names":["'"$SSH_KEY"'"],"name":"{{.Name}}"}'`,
		Stop: `curl -fsS -u "$LAMBDA_API_KEY:" https://cloud.lambdalabs.com/api/v1/instance-operations/terminate` +
			` -H 'Content-Type: application/json' -d '{"instance_ids":["{{.InstanceID}}"]}'`,
		InstanceID: `"instance_ids":\s*\["([^"]+)"`,
	},
	"runpod": {
		Launch:     "runpodctl create pod --name {{.Name}} --gpuType '{{.Offer}}' --imageName $IMAGE",
		Stop:       "runpodctl remove pod {{.InstanceID}}",
		InstanceID: `pod "([a-z0-9]+)" created`,
	},
}

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
