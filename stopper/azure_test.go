package stopper_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/stopper"
	"github.com/gpuwarden/gpuwarden/stopper/stoppertest"
)

func newAzure(t *testing.T, f *stoppertest.Azure, c *clock) *stopper.Azure {
	t.Helper()
	a := stopper.NewAzure(options(c, nil))
	a.Metadata, a.Management = f.IMDS.URL, f.ARM.URL
	return a
}

func TestAzureProve(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(*stoppertest.Azure)
		proven  bool
		code    gpuwarden.ErrorCode
		fix     string
		checked string
	}{
		{name: "virtual machine contributor", proven: true, checked: `granted by "Microsoft.Compute/virtualMachines/*"`},
		{name: "owner wildcard", setup: func(f *stoppertest.Azure) { f.SetPermissions([]string{"*"}, nil) },
			proven: true, checked: `granted by "*"`},
		{name: "compute wildcard, mixed case", setup: func(f *stoppertest.Azure) {
			f.SetPermissions([]string{"microsoft.compute/*"}, nil)
		}, proven: true, checked: `granted by "microsoft.compute/*"`},
		{name: "exact action, no read", setup: func(f *stoppertest.Azure) {
			f.SetPermissions([]string{"Microsoft.Compute/virtualMachines/deallocate/action"}, nil)
		}, proven: true, checked: "stop-requested, unconfirmed"},
		{name: "reader only", setup: func(f *stoppertest.Azure) {
			f.SetPermissions([]string{"*/read"}, nil)
		}, code: gpuwarden.EForbidden, fix: "Virtual Machine Contributor"},
		{name: "notActions takes deallocate away", setup: func(f *stoppertest.Azure) {
			f.SetPermissions([]string{"*"}, []string{"Microsoft.Compute/virtualMachines/deallocate/action"})
		}, code: gpuwarden.EForbidden, fix: "az role assignment create"},
		{name: "notActions wildcard", setup: func(f *stoppertest.Azure) {
			f.SetPermissions([]string{"Microsoft.Compute/*"}, []string{"Microsoft.Compute/virtualMachines/*/action"})
		}, code: gpuwarden.EForbidden, fix: "deallocate/action"},
		{name: "no managed identity", setup: func(f *stoppertest.Azure) { f.NoIdentity() },
			code: gpuwarden.EUnauthorized, fix: "az vm identity assign"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := stoppertest.NewAzure()
			defer f.Close()
			if tt.setup != nil {
				tt.setup(f)
			}
			a := newAzure(t, f, newClock())
			p, err := a.Prove(context.Background())
			wantProof(t, p, err, gpuwarden.StopAzureDeallocate, tt.proven, tt.code, tt.fix)
			if tt.proven && !strings.Contains(strings.Join(p.Checked, "\n"), tt.checked) {
				t.Errorf("checked = %q, want a line containing %q", p.Checked, tt.checked)
			}
			if f.Deallocations() != 0 || f.PowerState() != "PowerState/running" {
				t.Errorf("Prove changed the VM: %d deallocations, %s", f.Deallocations(), f.PowerState())
			}
			// IMDS saw the header it requires on every call.
			for _, c := range f.IMDSCalls.Calls() {
				if c.Header.Get("Metadata") != "true" || c.Query.Get("api-version") == "" {
					t.Errorf("IMDS call %s without Metadata header or api-version", c)
				}
			}
		})
	}
}

// TestAzureProveCaches: a second Prove within the TTL asks nobody; a
// refusal is asked again only after a minute.
func TestAzureProveCaches(t *testing.T) {
	f := stoppertest.NewAzure()
	defer f.Close()
	c := newClock()
	a := newAzure(t, f, c)
	ctx := context.Background()
	if _, err := a.Prove(ctx); err != nil {
		t.Fatal(err)
	}
	n := len(f.ARMCalls.Calls())
	c.Advance(9 * time.Minute)
	if _, err := a.Prove(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(f.ARMCalls.Calls()); got != n {
		t.Errorf("ARM calls after a cached prove = %d, want %d", got, n)
	}
	c.Advance(2 * time.Minute)
	f.SetPermissions([]string{"*/read"}, nil)
	if _, err := a.Prove(ctx); err == nil {
		t.Fatal("prove after the TTL did not see the lost permission")
	}
	n = len(f.ARMCalls.Calls())
	c.Advance(30 * time.Second)
	if _, err := a.Prove(ctx); err == nil || len(f.ARMCalls.Calls()) != n {
		t.Errorf("a refusal was not reused for a minute (err %v, calls %d → %d)", err, n, len(f.ARMCalls.Calls()))
	}
	c.Advance(31 * time.Second)
	f.SetPermissions([]string{"*"}, nil)
	if _, err := a.Prove(ctx); err != nil {
		t.Errorf("a fixed role was not seen a minute later: %v", err)
	}
}

func TestAzureStop(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(*stoppertest.Azure)
		billing string
		state   string
		detail  string
	}{
		{name: "deallocated after polling", setup: func(f *stoppertest.Azure) { f.SettleAfter(3) },
			billing: gpuwarden.NodeStopped, state: "PowerState/deallocated", detail: "disks"},
		{name: "never settles", setup: func(f *stoppertest.Azure) { f.Stuck() },
			billing: gpuwarden.NodeStopRequested, state: "PowerState/deallocating", detail: "not yet deallocated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := stoppertest.NewAzure()
			defer f.Close()
			tt.setup(f)
			c := newClock()
			a := newAzure(t, f, c)
			out, err := a.Stop(context.Background())
			wantOutcome(t, out, err, gpuwarden.StopAzureDeallocate, tt.billing, tt.state)
			if out.HTTPStatus != http.StatusAccepted || out.OperationID == "" {
				t.Errorf("outcome status %d operation %q, want 202 and the operation's ID", out.HTTPStatus, out.OperationID)
			}
			if !strings.Contains(out.Detail, tt.detail) {
				t.Errorf("detail %q, want %q", out.Detail, tt.detail)
			}
			if f.Deallocations() != 1 {
				t.Errorf("deallocations = %d, want 1", f.Deallocations())
			}
			if tt.billing == gpuwarden.NodeStopRequested {
				if waited := out.At.Sub(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)); waited > stopper.DefaultConfirmWithin {
					t.Errorf("waited %s, beyond ConfirmWithin %s", waited, stopper.DefaultConfirmWithin)
				}
			}
			for _, call := range f.ARMCalls.Calls() {
				if call.Method == http.MethodPost && !strings.HasSuffix(call.Path, "/deallocate") {
					t.Errorf("unexpected POST %s", call.Path)
				}
			}
		})
	}
}

func TestAzureStopRefused(t *testing.T) {
	tests := []struct {
		name  string
		setup func(*stoppertest.Azure)
		code  gpuwarden.ErrorCode
		hint  string
	}{
		{"no permission", func(f *stoppertest.Azure) { f.SetPermissions([]string{"*/read"}, nil) },
			gpuwarden.EForbidden, "Virtual Machine Contributor"},
		{"operation failed", func(f *stoppertest.Azure) { f.FailOperation() }, gpuwarden.EUnavailable, "activity log"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := stoppertest.NewAzure()
			defer f.Close()
			tt.setup(f)
			a := newAzure(t, f, newClock())
			out, err := a.Stop(context.Background())
			if errCode(err) != tt.code || !strings.Contains(gpuwarden.ErrorHint(err), tt.hint) {
				t.Errorf("err = %v (code %s, hint %q), want %s with a hint containing %q",
					err, errCode(err), gpuwarden.ErrorHint(err), tt.code, tt.hint)
			}
			if out.Billing != gpuwarden.NodeRunning {
				t.Errorf("billing = %q after a refused stop, want %q", out.Billing, gpuwarden.NodeRunning)
			}
		})
	}
}

// TestAzureBadToken: ARM refusing the token is unauthorized, and the token
// is never sent to a host other than --azure-management.
func TestAzureBadToken(t *testing.T) {
	f := stoppertest.NewAzure()
	defer f.Close()
	other := stoppertest.NewAzure() // its IMDS hands out a token f's ARM refuses
	defer other.Close()
	a := stopper.NewAzure(options(newClock(), nil))
	a.Metadata, a.Management = other.IMDS.URL, f.ARM.URL
	a.ResourceID = f.ResourceID()
	p, err := a.Prove(context.Background())
	wantProof(t, p, err, gpuwarden.StopAzureDeallocate, false, gpuwarden.EUnauthorized, "managed identity")
}
