package stopper_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/peertest"
	"github.com/gpuwarden/gpuwarden/stopper"
)

// TestAWSAgainstMoto drives the AWS stopper against the real moto server
// with IAM enforced: a user allowed ec2:StopInstances proves (DryRun
// answers DryRunOperation) and stops the instance, confirmed stopped; one
// without it is refused with the fix; a wrong secret is unauthorized.
func TestAWSAgainstMoto(t *testing.T) {
	// Seven set-up actions run before moto starts enforcing IAM (and checking signatures).
	m := peertest.StartMoto(t, "INITIAL_NO_AUTH_ACTION_COUNT=7")
	okKey, okSecret := m.User(t, "gw-allowed", "ec2:StopInstances", "ec2:DescribeInstances")
	noKey, noSecret := m.User(t, "gw-describe-only", "ec2:DescribeInstances")
	id := m.RunInstance(t)

	newStopper := func(key, secret string) *stopper.AWS {
		c := newClock()
		c.t = time.Now().UTC() // SigV4 signatures carry the time; moto checks it
		o := options(c, map[string]string{"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret})
		o.Now = time.Now
		a := stopper.NewAWS(o)
		a.Endpoint, a.Region, a.InstanceID = m.URL, "us-east-1", id
		a.Metadata = "http://127.0.0.1:1" // never read: identity is given
		return a
	}
	ctx := context.Background()

	t.Run("refused without ec2:StopInstances", func(t *testing.T) {
		p, err := newStopper(noKey, noSecret).Prove(ctx)
		wantProof(t, p, err, gpuwarden.StopAWS, false, gpuwarden.EForbidden, "ec2:StopInstances")
		if !strings.Contains(p.Fix, id) {
			t.Errorf("fix %q does not name the instance", p.Fix)
		}
	})
	t.Run("wrong secret", func(t *testing.T) {
		p, err := newStopper(okKey, "not-the-secret").Prove(ctx)
		wantProof(t, p, err, gpuwarden.StopAWS, false, gpuwarden.EUnauthorized, "credentials")
	})
	t.Run("prove then stop", func(t *testing.T) {
		a := newStopper(okKey, okSecret)
		began := time.Now()
		p, err := a.Prove(ctx)
		t.Logf("Prove against moto (two signed EC2 DryRun calls): %s", time.Since(began).Round(time.Microsecond))
		wantProof(t, p, err, gpuwarden.StopAWS, true, "", "")
		if !strings.Contains(strings.Join(p.Checked, "\n"), "DryRunOperation") {
			t.Errorf("checked %q does not record the DryRun answer", p.Checked)
		}
		if got := m.State(t, okKey, okSecret, id); got != "running" {
			t.Fatalf("after Prove the instance is %q, want running", got)
		}
		out, err := a.Stop(ctx)
		wantOutcome(t, out, err, gpuwarden.StopAWS, gpuwarden.NodeStopped, "stopped")
		if out.HTTPStatus != http.StatusOK {
			t.Errorf("HTTP status %d, want 200", out.HTTPStatus)
		}
		if got := m.State(t, okKey, okSecret, id); got != "stopped" {
			t.Errorf("moto says the instance is %q after Stop, want stopped", got)
		}
	})
}

// TestAWSInstanceIdentityFromAEMM reads the instance ID, region and role
// credentials through IMDSv2 from AWS's amazon-ec2-metadata-mock, and
// proves against moto (IAM not enforced) with them.
func TestAWSInstanceIdentityFromAEMM(t *testing.T) {
	aemm := peertest.StartAEMM(t)
	m := peertest.StartMoto(t)
	id := m.RunInstance(t)
	a := stopper.NewAWS(stopper.Options{Client: stopper.MetadataClient(), Getenv: func(string) string { return "" }})
	a.Metadata, a.Endpoint = aemm.URL, m.URL
	p, err := a.Prove(context.Background())
	wantProof(t, p, err, gpuwarden.StopAWS, true, "", "")
	checked := strings.Join(p.Checked, "\n")
	for _, want := range []string{"instance i-1234567890abcdef0 in us-east-1", "credentials: instance role baskinc-role"} {
		if !strings.Contains(checked, want) {
			t.Errorf("checked %q, want %q", p.Checked, want)
		}
	}
	// AEMM's instance is not moto's: stop moto's, with AEMM's region and
	// role credentials (moto, not enforcing IAM, takes any signed request).
	a = stopper.NewAWS(stopper.Options{Client: stopper.MetadataClient(), Getenv: func(string) string { return "" }})
	a.Metadata, a.Endpoint, a.InstanceID = aemm.URL, m.URL, id
	out, err := a.Stop(context.Background())
	wantOutcome(t, out, err, gpuwarden.StopAWS, gpuwarden.NodeStopped, "stopped")
}

// TestAWSUnauthorizedOperation: real EC2 refuses with UnauthorizedOperation
// (moto says AccessDenied); this stand-in answers exactly as EC2's error
// reference shows, for both the DryRun and the stop.
func TestAWSUnauthorizedOperation(t *testing.T) {
	var calls []string
	ec2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		calls = append(calls, r.Form.Get("Action")+" DryRun="+r.Form.Get("DryRun"))
		if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/") {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>UnauthorizedOperation</Code><Message>You are not authorized to perform this operation. Encoded authorization failure message: 4GIOHlTkIaWHQD0Q0m6XSnuUMCm-abcd</Message></Error></Errors><RequestID>5b0c4b4e-7e0f-4c3e-9f0a-1c4f5b8e2d11</RequestID></Response>`)
	}))
	defer ec2.Close()
	o := options(newClock(), map[string]string{"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret"})
	a := stopper.NewAWS(o)
	a.Endpoint, a.Region, a.InstanceID = ec2.URL, "eu-west-1", "i-0abc"
	p, err := a.Prove(context.Background())
	wantProof(t, p, err, gpuwarden.StopAWS, false, gpuwarden.EForbidden, "ec2:StopInstances")
	if !strings.Contains(p.Fix, "arn:aws:ec2:eu-west-1:<account>:instance/i-0abc") {
		t.Errorf("fix %q does not name the instance's ARN", p.Fix)
	}
	out, err := a.Stop(context.Background())
	if gpuwarden.ErrorCodeOf(err) != gpuwarden.EForbidden || out.Billing != gpuwarden.NodeRunning || out.HTTPStatus != http.StatusForbidden {
		t.Errorf("Stop = %+v, %v; want forbidden, still running, 403", out, err)
	}
	want := []string{"StopInstances DryRun=true", "StopInstances DryRun="}
	if strings.Join(calls, "|") != strings.Join(want, "|") {
		t.Errorf("calls = %q, want %q", calls, want)
	}
}

// TestAWSNoCredentials: no environment keys and no instance role.
func TestAWSNoCredentials(t *testing.T) {
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
			fmt.Fprint(w, "tok")
		case r.Header.Get("X-aws-ec2-metadata-token") != "tok":
			w.WriteHeader(http.StatusUnauthorized)
		case r.URL.Path == "/latest/meta-data/instance-id":
			fmt.Fprint(w, "i-0abc")
		case r.URL.Path == "/latest/meta-data/placement/region":
			fmt.Fprint(w, "eu-west-1")
		default: // no role attached: iam/ is absent
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer imds.Close()
	a := stopper.NewAWS(options(newClock(), nil))
	a.Metadata, a.Endpoint = imds.URL, "http://127.0.0.1:1"
	p, err := a.Prove(context.Background())
	wantProof(t, p, err, gpuwarden.StopAWS, false, gpuwarden.EUnauthorized, "attach an IAM role")
}
