package launch

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
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
		{"stop {{.InstanceID}}", `stop 'it'\''s'`, ""},
		{"stop '{{.InstanceID}}'", `stop 'it'\''s'`, ""},
		{`stop "{{.InstanceID}}"`, `stop "it's"`, ""},
		{"--zone={{.LaunchID}}{{.InstanceID}}", `--zone=L'it'\''s'`, ""},
		{"# {{.InstanceID}}", `# it's`, ""},
		{"echo `{{.Name}}`", "", "inside `…`"},
		{"echo ${X:-{{.Name}}}", "", "inside ${…}"},
		{"cat <<EOF\n{{.Name}}\nEOF", "", "here-document"},
		{`echo \{{.Name}}`, "", "after a backslash"},
		{`echo ${{.Name}}`, "", "after $"},
		{`echo "${{.Name}}"`, "", "after $"},
		{`echo $$ {{.Name}}`, "echo $$ gw-0123abcd-2", ""},
		{"echo '{{.Name}}", "", "ends inside '…'"},
		{`{{if .Zone}}"{{end}}x`, "", "in one branch"},
		{`{{template "x"}}`, "", "cannot call other templates"},
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

// TestRenderKeepsValuesData renders hostile values into each quoting a
// command template may use and runs the command with a real sh: the value
// must arrive as written, and nothing in it may run (issue #32: a catalog
// cell became a shell command).
func TestRenderKeepsValuesData(t *testing.T) {
	values := []string{
		"us-east-1'$(touch${IFS}PWNED)'", `"$(touch PWNED)"`, "`touch PWNED`", "x;touch PWNED", "a b",
		"back\\slash'\"", "$HOME", "new\nline", "--help", "",
	}
	templates := []string{
		`printf '%s\n' {{.Region}}`,
		`printf '%s\n' --x={{.Region}}`,
		`printf '%s\n' '{{.Region}}'`,
		`printf '%s\n' "{{.Region}}"`,
		`printf '%s\n' "$(printf '%s' {{.Region}})"`,
		`printf '%s\n' "$(printf '%s' "{{.Region}}")"`,
		`printf '%s\n' '{"region_name":"{{.Region}}"}'`,
		`{{if .Region}}printf '%s\n' {{.Region}}{{else}}printf '%s\n' ''{{end}}`,
	}
	for _, tmpl := range templates {
		for _, v := range values {
			line, err := Render(tmpl, Vars{Region: v})
			if err != nil {
				t.Fatalf("Render(%q, %q): %v", tmpl, v, err)
			}
			dir := t.TempDir()
			cmd := exec.Command("sh", "-c", line)
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("sh -c %q: %v: %s", line, err, out)
			}
			want := v
			if strings.Contains(tmpl, "region_name") {
				want = `{"region_name":"` + v + `"}`
			}
			if strings.Contains(tmpl, "--x=") {
				want = "--x=" + v
			}
			if got := strings.TrimSuffix(string(out), "\n"); got != want && !(v == "" && got == "") {
				t.Errorf("sh -c %q printed %q, want %q", line, got, want)
			}
			if _, err := os.Stat(filepath.Join(dir, "PWNED")); err == nil {
				t.Errorf("sh -c %q ran part of the value %q", line, v)
			}
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
		{"shell syntax in the region", with(func(t *gpuwarden.Target) { t.Region = "us-east-1'$(touch${IFS}PWNED)'" }), "region"},
		{"a zone that reads as an option", with(func(t *gpuwarden.Target) { t.Zone = "--zone=x" }), "zone"},
		{"a control character in the offer", with(func(t *gpuwarden.Target) { t.Offer = "p5\x1b[2J" }), "offer"},
		{"a provider with a pipe", with(func(t *gpuwarden.Target) { t.Provider = "aws|sh" }), "provider"},
		{"a value inside backticks", with(func(t *gpuwarden.Target) { t.Launch = "echo `{{.Region}}`" }), "launch"},
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
