package launch

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// replay is the launch command that prints a real CLI's captured failure.
func replay(t *testing.T, file string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", "cli", file+".txt"))
	if err != nil {
		t.Fatal(err)
	}
	return script(t, "replay.sh", shellQuote(p))
}

// TestRunOnCapturedFailures runs launches whose commands fail exactly as
// the real CLIs did (issue 28 items 3 and 6): what each failure rules out,
// whether the launch moves on, and how it ends.
func TestRunOnCapturedFailures(t *testing.T) {
	type target struct {
		name, provider, region, zone, launch string
	}
	tests := []struct {
		name     string
		targets  []target
		wantCode gpuwarden.ErrorCode // "" when a target launched
		want     []string            // target:outcome:class
		wantOut  []string
		wantHint string
		mayExist int
	}{
		{
			// GPU machine types exist in few zones: plan A's usual failure.
			name: "gcp machine type not in the zone moves to plan B",
			targets: []target{
				{"plan-a", "gcp", "us-central1", "us-central1-a", "gcloud-machine-type-not-in-zone"},
				{"plan-b", "gcp", "us-central1", "us-central1-b", "ok"},
			},
			want:    []string{"plan-a:failed:capacity", "plan-b:launched:"},
			wantOut: []string{"does not exist in zone — us-central1-a does not offer a3-highgpu-8g → next target"},
		},
		{
			name: "gcp folded stockout moves to plan B",
			targets: []target{
				{"plan-a", "gcp", "us-central1", "us-central1-a", "gcloud-zone-resource-pool-exhausted"},
				{"plan-b", "gcp", "europe-west4", "europe-west4-b", "ok"},
			},
			want: []string{"plan-a:failed:capacity", "plan-b:launched:"},
		},
		{
			name: "aws AuthFailure rules out its region only",
			targets: []target{
				{"plan-a", "aws", "eu-south-2", "eu-south-2a", "aws2-auth-failure"},
				{"plan-a2", "aws", "eu-south-2", "eu-south-2b", "ok"},
				{"plan-b", "aws", "us-east-1", "us-east-1a", "ok"},
			},
			want:    []string{"plan-a:failed:auth", "plan-a2:skipped:", "plan-b:launched:"},
			wantOut: []string{"AWS refused the credentials in eu-south-2: is the region enabled for your account? → next target", "skipped: auth in aws eu-south-2 ruled it out (plan-a)"},
		},
		{
			name: "aws AuthFailure in every region stops on the credentials",
			targets: []target{
				{"plan-a", "aws", "eu-south-2", "eu-south-2a", "aws1-auth-failure"},
				{"plan-b", "aws", "ap-east-1", "ap-east-1a", "aws2-auth-failure"},
			},
			want:     []string{"plan-a:failed:auth", "plan-b:failed:auth"},
			wantCode: gpuwarden.EEnvironment,
			wantHint: "is the region enabled for your account?",
		},
		{
			name: "aws retried 5xx capacity moves on",
			targets: []target{
				{"plan-a", "aws", "us-east-1", "us-east-1a", "aws1-insufficient-instance-capacity"},
				{"plan-b", "aws", "us-east-1", "us-east-1b", "ok"},
			},
			want:    []string{"plan-a:failed:capacity", "plan-b:launched:"},
			wantOut: []string{"capacity: InsufficientInstanceCapacity — AWS has no p5.48xlarge free in us-east-1a now → next target"},
		},
		{
			// An unset $AMI is the command's fault in every region: stop,
			// and nothing may have been created.
			name: "aws v2 usage error is config",
			targets: []target{
				{"plan-a", "aws", "us-east-1", "us-east-1a", "aws2-usage-unset-ami"},
				{"plan-b", "aws", "us-west-2", "us-west-2a", "ok"},
			},
			want:     []string{"plan-a:failed:config"},
			wantCode: gpuwarden.EInvalid,
		},
		{
			name: "aws v1 usage error is config",
			targets: []target{
				{"plan-a", "aws", "us-east-1", "us-east-1a", "aws1-usage-unset-ami"},
				{"plan-b", "aws", "us-west-2", "us-west-2a", "ok"},
			},
			want:     []string{"plan-a:failed:config"},
			wantCode: gpuwarden.EInvalid,
		},
		{
			name: "aws OptInRequired is config for the image",
			targets: []target{
				{"plan-a", "aws", "us-east-1", "us-east-1a", "aws1-opt-in-required"},
				{"plan-b", "aws", "us-west-2", "us-west-2a", "ok"},
			},
			want:     []string{"plan-a:failed:config"},
			wantCode: gpuwarden.EInvalid,
			wantHint: "fix target plan-a's launch command",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, time.Second)
			var targets []gpuwarden.Target
			for _, tg := range tc.targets {
				launch := script(t, "ok.sh")
				if tg.launch != "ok" {
					launch = replay(t, tg.launch)
				}
				offer := "p5.48xlarge"
				if tg.provider == "gcp" {
					offer = "a3-highgpu-8g"
				}
				targets = append(targets, gpuwarden.Target{Name: tg.name, Provider: tg.provider, Region: tg.region, Zone: tg.zone,
					Offer: offer, Launch: launch, InstanceID: awsID})
			}
			res, err := Run(context.Background(), e.options(targets...), e.rec)
			if got := code(err); got != tc.wantCode {
				t.Fatalf("error %v (code %q), want code %q\n%s", err, got, tc.wantCode, e.out)
			}
			if tc.wantHint != "" && !strings.Contains(gpuwarden.ErrorHint(err), tc.wantHint) {
				t.Errorf("hint %q lacks %q", gpuwarden.ErrorHint(err), tc.wantHint)
			}
			var got []string
			mayExist := 0
			for _, a := range res.Attempts {
				got = append(got, a.Target+":"+a.Outcome+":"+a.Class)
				if a.MayExist && a.Outcome != gpuwarden.AttemptLaunched {
					mayExist++
				}
			}
			if !equal(got, tc.want) {
				t.Errorf("attempts %q, want %q\n%s", got, tc.want, e.out)
			}
			if mayExist != tc.mayExist {
				t.Errorf("%d failed attempts may have left a box, want %d", mayExist, tc.mayExist)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(e.out.String(), w) {
					t.Errorf("out lacks %q:\n%s", w, e.out)
				}
			}
		})
	}
}
