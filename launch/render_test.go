package launch

import (
	"math"
	"os/exec"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

func TestRender(t *testing.T) {
	v := Vars{Name: "gw-0123abcd-2", Provider: "gcp", Region: "us-central1", Zone: "us-central1-a", Offer: "a3-highgpu-8g", LaunchID: "L", InstanceID: "it's"}
	tests := []struct {
		tmpl    string
		want    string
		wantErr string
	}{
		{"gcloud compute instances create {{.Name}} --zone {{.Zone}} --machine-type {{.Offer}}",
			"gcloud compute instances create gw-0123abcd-2 --zone us-central1-a --machine-type a3-highgpu-8g", ""},
		{"{{.Provider}}/{{.Region}}/{{.LaunchID}}", "gcp/us-central1/L", ""},
		{"stop {{quote .InstanceID}}", `stop 'it'\''s'`, ""},
		{"{{with .Zone}}--zone {{.}}{{end}}", "--zone us-central1-a", ""},
		{"no template", "no template", ""},
		{"{{.Regoin}}", "", `map has no entry for key "Regoin"`},
		{"{{.Name", "", "render: template:"},
		{"{{nosuch .Name}}", "", `function "nosuch" not defined`},
	}
	for _, tc := range tests {
		got, err := Render(tc.tmpl, v)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Render(%q) error %v, want %q", tc.tmpl, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Render(%q) = %q, %v; want %q", tc.tmpl, got, err, tc.want)
		}
	}
}

// TestShellQuote runs the quoted words through a real sh: the word must
// come back as it went in, whatever it holds.
func TestShellQuote(t *testing.T) {
	words := []string{"", "plain", "i-0abc", "a b", "it's", `"$(reboot)"`, "`id`", "a;b|c&d", "new\nline", "back\\slash", "ünï"}
	for _, w := range words {
		out, err := exec.Command("sh", "-c", "printf %s "+shellQuote(w)).Output()
		if err != nil || string(out) != w {
			t.Errorf("sh printf %s = %q, %v; want %q", shellQuote(w), out, err, w)
		}
	}
}

func TestValidateTarget(t *testing.T) {
	ok := gpuwarden.Target{Name: "plan-a", Provider: "aws", Launch: "aws ec2 run-instances --tag-specifications 'ResourceType=instance,Tags=[{Key=Name,Value={{.Name}}}]'",
		Stop: "aws ec2 terminate-instances --instance-ids {{.InstanceID}}", Ready: "ssh {{.InstanceID}} true", InstanceID: `"InstanceId": "(i-[0-9a-f]+)"`, TimeoutSeconds: 300}
	with := func(f func(*gpuwarden.Target)) gpuwarden.Target {
		t := ok
		f(&t)
		return t
	}
	tests := []struct {
		name   string
		target gpuwarden.Target
		field  string
	}{
		{"valid", ok, ""},
		{"minimal", gpuwarden.Target{Name: "a", Provider: "x", Launch: "./up.sh"}, ""},
		{"no name", with(func(t *gpuwarden.Target) { t.Name = "" }), "name"},
		{"name with a space", with(func(t *gpuwarden.Target) { t.Name = "plan a" }), "name"},
		{"no provider", with(func(t *gpuwarden.Target) { t.Provider = "" }), "provider"},
		{"no launch", with(func(t *gpuwarden.Target) { t.Launch = "  " }), "launch"},
		{"launch does not parse", with(func(t *gpuwarden.Target) { t.Launch = "up {{.Name" }), "launch"},
		{"launch names an unknown value", with(func(t *gpuwarden.Target) { t.Launch = "up {{.Instance}}" }), "launch"},
		{"bad stop", with(func(t *gpuwarden.Target) { t.Stop = "{{if}}" }), "stop"},
		{"bad ready", with(func(t *gpuwarden.Target) { t.Ready = "{{.zone}}" }), "ready"},
		{"instance_id does not compile", with(func(t *gpuwarden.Target) { t.InstanceID = "(i-" }), "instance_id"},
		{"instance_id without a group", with(func(t *gpuwarden.Target) { t.InstanceID = "i-[0-9a-f]+" }), "instance_id"},
		{"negative timeout", with(func(t *gpuwarden.Target) { t.TimeoutSeconds = -1 }), "timeout_seconds"},
		{"NaN timeout", with(func(t *gpuwarden.Target) { t.TimeoutSeconds = math.NaN() }), "timeout_seconds"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkFieldError(t, ValidateTarget(tc.target), tc.field)
		})
	}
}
