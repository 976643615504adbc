package launch

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/peertest"
)

// awsAgainstMoto is the environment that points the real aws CLI at moto
// with moto's fake credentials, in a throwaway home.
func awsAgainstMoto(t *testing.T, m *peertest.Moto) []string {
	t.Helper()
	if _, err := exec.LookPath("aws"); err != nil {
		msg := "the aws CLI is not on PATH (the image's Python has v1; scripts/install-peers.sh)"
		if os.Getenv(peertest.RequireEnv) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	home := t.TempDir()
	return []string{"HOME=" + home, "AWS_ENDPOINT_URL=" + m.URL, "AWS_ACCESS_KEY_ID=testing", "AWS_SECRET_ACCESS_KEY=testing",
		"AWS_DEFAULT_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true", "AWS_PAGER=",
		"AWS_CONFIG_FILE=" + filepath.Join(home, "config"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(home, "credentials"),
		// One of the AMIs moto serves by default.
		"AMI=ami-12c6146b"}
}

// TestAWSStopFindsTheBoxByName launches with the built-in AWS template
// through the real aws CLI against moto, then runs the stop that was
// recorded before the launch command ran, when no instance ID was known:
// it must find the box by its Name tag and terminate it (issue 28 item 5;
// today's stop ran terminate-instances with no ID and left the box).
func TestAWSStopFindsTheBoxByName(t *testing.T) {
	m := peertest.StartMoto(t)
	env := awsAgainstMoto(t, m)
	tmpl := Template("aws")
	tests := []struct {
		name   string
		record func(recs []gpuwarden.LaunchAttempt) gpuwarden.LaunchAttempt
		wantID bool // the stop command names the instance
	}{
		// What a launch killed mid-flight leaves: the pending record.
		{"pending record, no id", func(recs []gpuwarden.LaunchAttempt) gpuwarden.LaunchAttempt { return recs[0] }, false},
		// What a finished launch leaves: the ID read from the output.
		{"launched record, id", func(recs []gpuwarden.LaunchAttempt) gpuwarden.LaunchAttempt { return recs[len(recs)-1] }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, time.Second)
			opt := e.options(gpuwarden.Target{Name: "plan-a", Provider: "aws", Region: "us-east-1", Zone: "us-east-1a", Offer: "p3.2xlarge",
				Launch: tmpl.Launch, Stop: tmpl.Stop, InstanceID: tmpl.InstanceID, TimeoutSeconds: 120})
			opt.Env = env
			res, err := Run(context.Background(), opt, e.rec)
			if err != nil || res.Launched == nil {
				t.Fatalf("Run: %v\n%s", err, e.out)
			}
			id := res.Launched.InstanceID
			if !strings.HasPrefix(id, "i-") {
				t.Fatalf("no instance id read from the launch: %+v", res.Launched)
			}
			if got := m.State(t, "testing", "testing", id); got != "running" {
				t.Fatalf("instance %s is %q after the launch, want running", id, got)
			}
			a := tc.record(e.rec.Records())
			if strings.Contains(a.StopCommand, id) != tc.wantID {
				t.Fatalf("stop command %q: names the id %v, want %v", a.StopCommand, !tc.wantID, tc.wantID)
			}
			var out bytes.Buffer
			n, err := Cleanup(context.Background(), []gpuwarden.LaunchAttempt{a}, e.rec, CleanupOptions{IncludeLaunched: true, Out: &out, Env: env, Tries: 1})
			if n != 1 || err != nil {
				t.Fatalf("Cleanup = %d, %v\n%s", n, err, out.String())
			}
			if got := m.State(t, "testing", "testing", id); got != "terminated" {
				t.Errorf("instance %s is %q after cleanup, want terminated\n%s", id, got, out.String())
			}
			if want := "stopped (terminated " + id + ")"; !strings.Contains(out.String(), want) {
				t.Errorf("cleanup output lacks %q:\n%s", want, out.String())
			}
			// Run again, the name finds nothing left, and says so.
			a.InstanceID = ""
			a.StopCommand, err = Render(tmpl.Stop, Vars{Name: a.Name, Region: a.Region})
			if err != nil {
				t.Fatal(err)
			}
			out.Reset()
			if n, err := Cleanup(context.Background(), []gpuwarden.LaunchAttempt{a}, nil, CleanupOptions{IncludeLaunched: true, Out: &out, Env: env, Tries: 1}); n != 1 || err != nil {
				t.Fatalf("second Cleanup = %d, %v\n%s", n, err, out.String())
			}
			if want := "no instance named " + a.Name + " is left in us-east-1"; !strings.Contains(out.String(), want) {
				t.Errorf("second cleanup output lacks %q:\n%s", want, out.String())
			}
		})
	}
}
