package agent

import (
	"context"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

// TestHealthReachesStatus: each tick's error-counter reading is in the
// status that /metrics exports, one entry per GPU with its counters.
func TestHealthReachesStatus(t *testing.T) {
	h := newHarness(t)
	a := h.agent("2xH100,fault=xid:48@1,fault=ecc@0", Config{Idle: IdleConfig{Off: true}}, gpuwarden.HostSample{})
	if got := a.Status().Health; len(got) != 0 {
		t.Fatalf("health before the first tick = %+v, want none", got)
	}
	a.Tick(context.Background())
	got := a.Status().Health
	if len(got) != 2 {
		t.Fatalf("health has %d entries, want one per GPU", len(got))
	}
	if c := got[0].Counters.ECCUncorrectedVolatile; c == nil || *c != 1 {
		t.Errorf("GPU 0 uncorrected volatile ECC = %v, want 1", c)
	}
	if x := got[1].XIDs; len(x) != 1 || x[0].XID != 48 {
		t.Errorf("GPU 1 Xids = %+v, want one Xid 48", x)
	}
	got[0].Index = 99
	if a.Status().Health[0].Index != 0 {
		t.Error("Status shares the health slice with its caller")
	}
}
