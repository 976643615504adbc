package ledgertest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// identityNode is node n1 of project vision, registered by token at the
// server's clock now, from instance and boot, with the holder live if it
// was heard from within lostAfter of now.
func identityNode(token, instance, boot string, now time.Time, lostAfter time.Duration) gpuwarden.Node {
	n := FleetNode("n1", "vision", token, 1_000_000, 1)
	n.InstanceID, n.BootID, n.Registered = instance, boot, now
	if lostAfter > 0 {
		n.LiveSince = now.Add(-lostAfter)
	}
	return n
}

// testRegisterIdentity holds both ledgers to one rule for two boxes that
// send one node ID: while the first is live (heard from within the window,
// not stopped, its token valid) another instance is refused, naming
// --node-id; a reboot of the same instance, an agent that sends no
// identity, and a new box once the first is lost or stopped all register.
func testRegisterIdentity(t *testing.T, s *fleetStore) {
	ctx := context.Background()
	for _, id := range []string{"a1", "a2"} {
		if err := s.f.CreateToken(ctx, gpuwarden.Token{ID: id, Project: "vision", Role: gpuwarden.RoleAgent, Created: FleetStart}); err != nil {
			t.Fatal(err)
		}
	}
	const lost = 10 * time.Minute
	t0 := FleetStart
	beat := func(at time.Time, state string) {
		t.Helper()
		if err := s.f.RecordHeartbeats(ctx, at, []gpuwarden.Heartbeat{{Node: "n1", Time: at, State: state}}); err != nil {
			t.Fatal(err)
		}
	}
	revoke := func(id string) {
		t.Helper()
		if err := s.f.RevokeToken(ctx, id, t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name   string
		before func() // what happens to the stored node first
		node   gpuwarden.Node
		code   gpuwarden.ErrorCode
		// want is the stored instance and boot after the step.
		wantInstance, wantBoot string
	}{
		{"first box", nil, identityNode("a1", "i-A", "boot-1", t0, lost), "", "i-A", "boot-1"},
		{"second box while the first just registered", nil, identityNode("a1", "i-B", "boot-9", t0.Add(time.Second), lost), gpuwarden.EConflict, "i-A", "boot-1"},
		{"the same box after a reboot", nil, identityNode("a1", "i-A", "boot-2", t0.Add(2*time.Minute), lost), "", "i-A", "boot-2"},
		{"the same box, agent restarted", nil, identityNode("a1", "i-A", "boot-2", t0.Add(3*time.Minute), lost), "", "i-A", "boot-2"},
		{"second box while the first sends heartbeats", func() { beat(t0.Add(4*time.Minute), gpuwarden.NodeRunning) },
			identityNode("a1", "i-B", "boot-9", t0.Add(13*time.Minute), lost), gpuwarden.EConflict, "i-A", "boot-2"},
		{"second box once the first is lost", nil, identityNode("a1", "i-B", "boot-9", t0.Add(14*time.Minute+time.Second), lost), "", "i-B", "boot-9"},
		// The heartbeat row is the node's: the new holder is heard from
		// when it sends, so the old box is refused while it is live.
		{"the first box back while the second is live", func() { beat(t0.Add(15*time.Minute), gpuwarden.NodeRunning) },
			identityNode("a1", "i-A", "boot-3", t0.Add(16*time.Minute), lost), gpuwarden.EConflict, "i-B", "boot-9"},
		{"a box that stopped on purpose hands the ID on", func() { beat(t0.Add(17*time.Minute), gpuwarden.NodeStopped) },
			identityNode("a1", "i-A", "boot-3", t0.Add(17*time.Minute+time.Second), lost), "", "i-A", "boot-3"},
		{"an agent that sends no identity is not compared", func() { beat(t0.Add(18*time.Minute), gpuwarden.NodeRunning) },
			identityNode("a1", "", "", t0.Add(18*time.Minute+time.Second), lost), "", "", ""},
		{"nor is a holder without one", nil, identityNode("a1", "i-C", "boot-1", t0.Add(18*time.Minute+2*time.Second), lost), "", "i-C", "boot-1"},
		{"no window: every holder is live", nil, identityNode("a1", "i-D", "boot-1", t0.Add(48*time.Hour), 0), gpuwarden.EConflict, "i-C", "boot-1"},
		{"another token while the holder's is valid", nil, identityNode("a2", "i-C", "boot-1", t0.Add(19*time.Minute), lost), gpuwarden.EConflict, "i-C", "boot-1"},
		{"another instance, another token, the holder's revoked", func() { revoke("a1") },
			identityNode("a2", "i-D", "boot-1", t0.Add(19*time.Minute), 0), "", "i-D", "boot-1"},
	}
	for _, st := range steps {
		if st.before != nil {
			st.before()
		}
		got, err := s.f.RegisterNode(ctx, st.node)
		wantCode(t, st.name+": RegisterNode", err, st.code)
		if st.code == gpuwarden.EConflict && st.node.TokenID == "a1" {
			if h := gpuwarden.ErrorHint(err); !strings.Contains(h, "--node-id") {
				t.Errorf("%s: hint %q does not name --node-id", st.name, h)
			}
		}
		if err == nil && (got.InstanceID != st.wantInstance || got.BootID != st.wantBoot || !got.Registered.Equal(t0)) {
			t.Errorf("%s: RegisterNode stored instance %q boot %q registered %v, want %q %q %v",
				st.name, got.InstanceID, got.BootID, got.Registered, st.wantInstance, st.wantBoot, t0)
		}
		n, err := s.f.Node(ctx, "n1")
		if err != nil {
			t.Fatal(err)
		}
		if n.InstanceID != st.wantInstance || n.BootID != st.wantBoot {
			t.Errorf("%s: Node(n1) instance %q boot %q, want %q %q", st.name, n.InstanceID, n.BootID, st.wantInstance, st.wantBoot)
		}
	}
	s.restart()
	if n, err := s.f.Node(ctx, "n1"); err != nil || n.InstanceID != "i-D" || n.BootID != "boot-1" || n.TokenID != "a2" {
		t.Errorf("after reopen Node(n1) = instance %q boot %q token %q, %v; want i-D boot-1 a2", n.InstanceID, n.BootID, n.TokenID, err)
	}
}

// testRegisterIdentityRace registers one new node ID from many instances
// at once, through two handles on the store (two servers on one
// database): exactly one box gets it, every other is refused.
func testRegisterIdentityRace(t *testing.T, s *fleetStore) {
	ctx := context.Background()
	other := s.reopen()
	defer other.Close()
	const boxes = 8
	var wg sync.WaitGroup
	errs := make([]error, boxes)
	for i := range boxes {
		f := s.f
		if i%2 == 1 {
			f = other
		}
		wg.Go(func() {
			n := identityNode("a1", fmt.Sprintf("i-%d", i), "boot", FleetStart, 10*time.Minute)
			_, errs[i] = f.RegisterNode(ctx, n)
		})
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch gpuwarden.ErrorCodeOf(err) {
		case "":
			won++
		case gpuwarden.EConflict:
		default:
			t.Errorf("box %d: RegisterNode = %v, want nil or a conflict", i, err)
		}
	}
	if won != 1 {
		t.Errorf("%d of %d boxes registered node n1 at once, want exactly 1: %v", won, boxes, errs)
	}
}

// testCreateFirstToken holds both ledgers to one bootstrap: of many
// callers at once, through two handles on the store, exactly one creates
// the first token, and none is created once any token exists.
func testCreateFirstToken(t *testing.T, s *fleetStore) {
	ctx := context.Background()
	other := s.reopen()
	defer other.Close()
	const callers = 8
	var wg sync.WaitGroup
	created := make([]bool, callers)
	errs := make([]error, callers)
	for i := range callers {
		f := s.f
		if i%2 == 1 {
			f = other
		}
		wg.Go(func() {
			tok := gpuwarden.Token{ID: fmt.Sprintf("boot%d", i), Project: gpuwarden.AllProjects, Role: gpuwarden.RoleAdmin,
				Name: "bootstrap", Created: FleetStart, Hash: []byte{byte(i + 1)}}
			created[i], errs[i] = f.CreateFirstToken(ctx, tok)
		})
	}
	wg.Wait()
	winners := 0
	for i := range callers {
		if errs[i] != nil {
			t.Errorf("caller %d: CreateFirstToken: %v", i, errs[i])
		}
		if created[i] {
			winners++
		}
	}
	ts, err := s.f.Tokens(ctx, gpuwarden.AllProjects)
	if err != nil {
		t.Fatal(err)
	}
	if winners != 1 || len(ts) != 1 {
		t.Fatalf("%d callers created a first token and the ledger holds %d, want exactly 1 of each: %+v", winners, len(ts), ts)
	}

	// A revoked token is still a token: the ledger is not empty.
	if err := s.f.RevokeToken(ctx, ts[0].ID, FleetStart.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		tok  gpuwarden.Token
		ok   bool
		code gpuwarden.ErrorCode
	}{
		{"once one exists, even revoked", gpuwarden.Token{ID: "late", Project: gpuwarden.AllProjects, Role: gpuwarden.RoleAdmin, Created: FleetStart}, false, ""},
		{"invalid", gpuwarden.Token{Project: gpuwarden.AllProjects}, false, gpuwarden.EInvalid},
	}
	for _, tt := range tests {
		got, err := s.f.CreateFirstToken(ctx, tt.tok)
		wantCode(t, tt.name+": CreateFirstToken", err, tt.code)
		if got != tt.ok {
			t.Errorf("%s: CreateFirstToken = %v, want %v", tt.name, got, tt.ok)
		}
	}
	if ts, err := s.f.Tokens(ctx, gpuwarden.AllProjects); err != nil || len(ts) != 1 {
		t.Errorf("Tokens = %+v, %v; want the first one alone", ts, err)
	}
}
