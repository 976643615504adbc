package http

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// TestRegisterRefusesASecondBox registers one node ID from two boxes
// through the API: while the first is live within the server's LostAfter
// the second gets 409 naming --node-id and the node keeps the first's
// labels; a reboot of the first re-registers; once the first is lost, the
// second takes the ID over.
func TestRegisterRefusesASecondBox(t *testing.T) {
	const lostAfter = 2 * time.Minute
	f := newFleetFixture(t, func(s *FleetServer) { s.LostAfter = lostAfter })
	agent := f.token("ml", gpuwarden.RoleAgent)
	box := func(owner, instance, boot string) gpuwarden.Node {
		n := node("n1", owner)
		n.InstanceID, n.BootID = instance, boot
		return n
	}
	steps := []struct {
		name      string
		advance   time.Duration
		heartbeat bool // the stored holder sends a heartbeat first
		node      gpuwarden.Node
		code      int
		owner     string // the stored node's owner label afterwards
	}{
		{"first box", 0, false, box("ana", "i-A", "boot-1"), 200, "ana"},
		{"second box at once", time.Second, false, box("bo", "i-B", "boot-1"), 409, "ana"},
		{"second box while the first beats", lostAfter - time.Second, true, box("bo", "i-B", "boot-1"), 409, "ana"},
		{"the first box rebooted", time.Minute, false, box("ana", "i-A", "boot-2"), 200, "ana"},
		{"second box once the first is lost", lostAfter + time.Second, false, box("bo", "i-B", "boot-1"), 200, "bo"},
		{"first box back while the second is live", time.Second, true, box("ana", "i-A", "boot-3"), 409, "bo"},
	}
	for _, st := range steps {
		f.advance(st.advance)
		if st.heartbeat {
			hb := gpuwarden.Heartbeat{Node: "n1", Time: f.clock(), State: gpuwarden.NodeRunning}
			if code, body, _ := f.call("POST", "/api/v1/heartbeat", agent, hb); code != 204 {
				t.Fatalf("%s: heartbeat: %d %s", st.name, code, body)
			}
		}
		code, body, _ := f.call("POST", "/api/v1/register", agent, st.node)
		if code != st.code {
			t.Errorf("%s: register = %d %s, want %d", st.name, code, body, st.code)
		}
		if code == 409 {
			var e errorBody
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatal(err)
			}
			if e.Code != string(gpuwarden.EConflict) || !strings.Contains(e.Hint, "--node-id") {
				t.Errorf("%s: 409 body %+v, want code conflict and a hint naming --node-id", st.name, e)
			}
		}
		n, err := f.store.Node(t.Context(), "n1")
		if err != nil {
			t.Fatal(err)
		}
		if n.Labels.Owner != st.owner {
			t.Errorf("%s: stored owner %q, want %q", st.name, n.Labels.Owner, st.owner)
		}
	}
}

func TestRegisterIdentityTooLong(t *testing.T) {
	f := newFleetFixture(t, nil)
	agent := f.token("ml", gpuwarden.RoleAgent)
	tests := []struct {
		name string
		edit func(*gpuwarden.Node)
		code int
	}{
		{"instance id", func(n *gpuwarden.Node) { n.InstanceID = strings.Repeat("i", maxLabelLen+1) }, 400},
		{"boot id", func(n *gpuwarden.Node) { n.BootID = strings.Repeat("b", maxLabelLen+1) }, 400},
		{"both at the limit", func(n *gpuwarden.Node) {
			n.InstanceID, n.BootID = strings.Repeat("i", maxLabelLen), strings.Repeat("b", maxLabelLen)
		}, 200},
	}
	for _, tt := range tests {
		n := node("n1", "ana")
		tt.edit(&n)
		if code, body, _ := f.call("POST", "/api/v1/register", agent, n); code != tt.code {
			t.Errorf("%s: register = %d %s, want %d", tt.name, code, body, tt.code)
		}
	}
}
