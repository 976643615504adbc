package stopper_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/stopper"
	"github.com/gpuwarden/gpuwarden/stopper/stoppertest"
)

func newGCP(f *stoppertest.GCP, c *clock) *stopper.GCP {
	g := stopper.NewGCP(options(c, nil))
	g.Metadata, g.Compute = f.Metadata.URL, f.Compute.URL
	return g
}

func TestGCPProve(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(*stoppertest.GCP)
		proven bool
		code   gpuwarden.ErrorCode
		fix    string
	}{
		{name: "allowed", proven: true},
		{name: "compute scope", setup: func(f *stoppertest.GCP) { f.SetScopes("https://www.googleapis.com/auth/compute") }, proven: true},
		{name: "default scopes only", setup: func(f *stoppertest.GCP) {
			f.SetScopes("https://www.googleapis.com/auth/devstorage.read_only", "https://www.googleapis.com/auth/logging.write")
		}, code: gpuwarden.EForbidden, fix: "--scopes cloud-platform"},
		{name: "no stop permission", setup: func(f *stoppertest.GCP) { f.SetGranted("compute.instances.get") },
			code: gpuwarden.EForbidden, fix: "roles/compute.instanceAdmin.v1"},
		{name: "no permission at all", setup: func(f *stoppertest.GCP) { f.SetGranted() },
			code: gpuwarden.EForbidden, fix: "compute.instances.stop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := stoppertest.NewGCP()
			defer f.Close()
			if tt.setup != nil {
				tt.setup(f)
			}
			p, err := newGCP(f, newClock()).Prove(context.Background())
			wantProof(t, p, err, gpuwarden.StopGCP, tt.proven, tt.code, tt.fix)
			if f.Stops() != 0 || f.Status() != "RUNNING" {
				t.Errorf("Prove stopped the VM: %d stops, %s", f.Stops(), f.Status())
			}
			for _, c := range f.MetadataCalls.Calls() {
				if c.Header.Get("Metadata-Flavor") != "Google" {
					t.Errorf("metadata call %s without Metadata-Flavor", c)
				}
			}
		})
	}
}

// TestGCPNotGCP: a server that is not GCP's metadata server (no
// Metadata-Flavor in its answers) is not taken for one.
func TestGCPNotGCP(t *testing.T) {
	f := stoppertest.NewAzure() // some other metadata service
	defer f.Close()
	g := stopper.NewGCP(options(newClock(), nil))
	g.Metadata = f.IMDS.URL
	p, err := g.Prove(context.Background())
	wantProof(t, p, err, gpuwarden.StopGCP, false, gpuwarden.EEnvironment, "--gcp-metadata")
}

func TestGCPStop(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(*stoppertest.GCP)
		billing string
		state   string
	}{
		{"terminated", func(f *stoppertest.GCP) { f.SettleAfter(2) }, gpuwarden.NodeStopped, "TERMINATED"},
		{"still stopping", func(f *stoppertest.GCP) { f.Stuck() }, gpuwarden.NodeStopRequested, "STOPPING"},
		{"no get permission", func(f *stoppertest.GCP) { f.SetGranted("compute.instances.stop") }, gpuwarden.NodeStopRequested, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := stoppertest.NewGCP()
			defer f.Close()
			tt.setup(f)
			out, err := newGCP(f, newClock()).Stop(context.Background())
			wantOutcome(t, out, err, gpuwarden.StopGCP, tt.billing, tt.state)
			if out.HTTPStatus != http.StatusOK || !strings.HasPrefix(out.OperationID, "operation-") {
				t.Errorf("status %d operation %q", out.HTTPStatus, out.OperationID)
			}
			if f.Stops() != 1 {
				t.Errorf("stops = %d, want 1", f.Stops())
			}
		})
	}
}

func TestGCPStopRefused(t *testing.T) {
	f := stoppertest.NewGCP()
	defer f.Close()
	f.SetGranted()
	out, err := newGCP(f, newClock()).Stop(context.Background())
	if errCode(err) != gpuwarden.EForbidden || out.Billing != gpuwarden.NodeRunning || out.HTTPStatus != http.StatusForbidden {
		t.Errorf("Stop = %+v, %v; want forbidden, running, 403", out, err)
	}
}
