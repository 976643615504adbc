package http

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/report"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// azureNode is an azure box of the fixture's fleet at €3.50/h.
func azureNode(id string) gpuwarden.Node {
	n := node(id, "ana")
	n.Labels.Provider, n.Labels.Region = "azure", "westeurope"
	return n
}

// poweredOff is the last heartbeat of an azure box whose idle stop was an
// OS shutdown: powered off, allocated, billed in full.
func poweredOff(id string, at time.Time) gpuwarden.Heartbeat {
	return gpuwarden.Heartbeat{Node: id, Time: at, State: gpuwarden.NodePoweredOffStillBilling, Stop: &gpuwarden.StopReport{
		Method: gpuwarden.StopOSShutdown, Why: "the VM is still allocated and billed in full",
		Outcome:          &gpuwarden.StopOutcome{Method: gpuwarden.StopOSShutdown, Billing: gpuwarden.NodePoweredOffStillBilling, At: at},
		StillBillsHourly: 3_500_000, Currency: "EUR", StillBills: []string{"the whole VM"},
		Fix: "deallocate it (az vm deallocate …) and run `gpuwarden up --stop auto`"}}
}

// deallocated is the last heartbeat of an azure box the provider confirmed
// deallocated; nothing priced bills on.
func deallocated(id string, at time.Time) gpuwarden.Heartbeat {
	return gpuwarden.Heartbeat{Node: id, Time: at, State: gpuwarden.NodeStopped, Stop: &gpuwarden.StopReport{
		Method: gpuwarden.StopAzureDeallocate, StopsBilling: true,
		Outcome: &gpuwarden.StopOutcome{Method: gpuwarden.StopAzureDeallocate, HTTPStatus: 202, OperationID: "op-1",
			State: "PowerState/deallocated", Billing: gpuwarden.NodeStopped, At: at}}}
}

func (f *fleetFixture) beat(token string, hb gpuwarden.Heartbeat) {
	f.t.Helper()
	if code, body, _ := f.call("POST", "/api/v1/heartbeat", token, hb); code != 204 {
		f.t.Fatalf("heartbeat %s %s: %d %s", hb.Node, hb.State, code, body)
	}
}

// spendRow reads the spend report's row of project ml through the API.
func (f *fleetFixture) spendRow(token string) report.SpendRow {
	f.t.Helper()
	code, body, _ := f.call("GET", "/api/v1/reports/spend?project=ml", token, nil)
	if code != 200 {
		f.t.Fatalf("spend: %d %s", code, body)
	}
	var r report.SpendReport
	if err := json.Unmarshal(body, &r); err != nil {
		f.t.Fatal(err)
	}
	for _, row := range r.Rows {
		if row.Key == "ml" {
			return row
		}
	}
	f.t.Fatalf("no ml row in %s", body)
	return report.SpendRow{}
}

func (f *fleetFixture) orphans(token string) map[string]report.Orphan {
	f.t.Helper()
	code, body, _ := f.call("GET", "/api/v1/reports/orphans?project=ml", token, nil)
	if code != 200 {
		f.t.Fatalf("orphans: %d %s", code, body)
	}
	var r report.OrphanReport
	if err := json.Unmarshal(body, &r); err != nil {
		f.t.Fatal(err)
	}
	out := map[string]report.Orphan{}
	for _, o := range r.Orphans {
		out[o.Node] = o
	}
	return out
}

func TestFleetHeartbeatStates(t *testing.T) {
	f := newFleetFixture(t, nil)
	agent := f.token("ml", gpuwarden.RoleAgent)
	f.register(agent, azureNode("n1"))
	future := fixtureNow.Add(time.Hour)
	withStop := func(edit func(*gpuwarden.StopReport)) gpuwarden.Heartbeat {
		hb := poweredOff("n1", fixtureNow)
		edit(hb.Stop)
		return hb
	}
	tests := []struct {
		name string
		hb   gpuwarden.Heartbeat
		want int
		msg  string
	}{
		{"running", gpuwarden.Heartbeat{Node: "n1", Time: fixtureNow, State: gpuwarden.NodeRunning}, 204, ""},
		{"stopping", gpuwarden.Heartbeat{Node: "n1", Time: fixtureNow, State: gpuwarden.NodeStopping}, 204, ""},
		{"stopped with the provider's answer", deallocated("n1", fixtureNow), 204, ""},
		{"stop requested", gpuwarden.Heartbeat{Node: "n1", Time: fixtureNow, State: gpuwarden.NodeStopRequested}, 204, ""},
		{"powered off, still billing", poweredOff("n1", fixtureNow), 204, ""},
		{"the agent stopped, not the box", gpuwarden.Heartbeat{Node: "n1", Time: fixtureNow, State: gpuwarden.NodeAgentStopped}, 204, ""},
		{"gone is a person's to say", gpuwarden.Heartbeat{Node: "n1", Time: fixtureNow, State: gpuwarden.NodeGone}, 400, "not one an agent reports"},
		{"lost is the server's to say", gpuwarden.Heartbeat{Node: "n1", Time: fixtureNow, State: gpuwarden.NodeLost}, 400, "not one an agent reports"},
		{"an unknown state", gpuwarden.Heartbeat{Node: "n1", Time: fixtureNow, State: "asleep"}, 400, "not one an agent reports"},
		{"a negative rate", withStop(func(s *gpuwarden.StopReport) { s.StillBillsHourly = -1 }), 400, "cannot be negative"},
		{"an unknown billing state", withStop(func(s *gpuwarden.StopReport) { s.Outcome.Billing = "cheap" }), 400, "billing"},
		{"a proof from the future", withStop(func(s *gpuwarden.StopReport) { s.Proof = &gpuwarden.StopProof{At: future} }), 400, "in the future"},
		{"a why too long", withStop(func(s *gpuwarden.StopReport) { s.Why = strings.Repeat("x", maxStopText+1) }), 400, "at most"},
		{"too many still bills", withStop(func(s *gpuwarden.StopReport) { s.StillBills = make([]string, maxStopItems+1) }), 400, "still_bills"},
		{"a status no HTTP has", withStop(func(s *gpuwarden.StopReport) { s.Outcome.HTTPStatus = 1000 }), 400, "http_status"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body, _ := f.call("POST", "/api/v1/heartbeat", agent, tt.hb)
			if code != tt.want || !strings.Contains(string(body), tt.msg) {
				t.Fatalf("POST = %d %s, want %d with %q", code, body, tt.want, tt.msg)
			}
			if code != 204 {
				return
			}
			code, body, _ = f.call("GET", "/api/v1/nodes/n1", agent, nil)
			var n gpuwarden.Node
			if code != 200 || json.Unmarshal(body, &n) != nil {
				t.Fatalf("GET node = %d %s", code, body)
			}
			want, _ := json.Marshal(tt.hb)
			got, _ := json.Marshal(n.Live)
			if !bytes.Equal(got, want) {
				t.Errorf("stored heartbeat\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// TestFleetSpendAfterStop: an azure box powered off where that bills keeps
// adding to the spend, the forecast and the burn until it is marked gone;
// a deallocated one adds nothing; the orphan review lists the first with
// its fix, and no longer once it is gone.
func TestFleetSpendAfterStop(t *testing.T) {
	f := newFleetFixture(t, nil)
	agent := f.token("ml", gpuwarden.RoleAgent)
	viewer := f.token("ml", gpuwarden.RoleViewer)
	admin := f.token("ml", gpuwarden.RoleAdmin)
	if err := f.store.PutProject(context.Background(), gpuwarden.Project{Name: "ml", Budget: 500000, Currency: "EUR", Created: fixtureNow}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"off", "dealloc"} {
		f.register(agent, azureNode(id))
	}
	f.beat(agent, poweredOff("off", fixtureNow))
	f.beat(agent, deallocated("dealloc", fixtureNow))

	f.advance(2 * time.Hour)
	row := f.spendRow(viewer)
	// Two hours at €3.50 of the powered-off box; nothing of the other.
	if row.Spent != 700 || row.AfterStop != 700 || row.StillBilling != 1 || row.AfterStopHourly != 3_500_000 || row.HourlyBurn != 3_500_000 {
		t.Fatalf("after 2 h: %+v", row)
	}
	if want := gpuwarden.MonthForecast(700, 3_500_000, f.clock()); row.Forecast != want {
		t.Errorf("forecast %s, want %s", row.Forecast.Decimal(), want.Decimal())
	}
	orphans := f.orphans(viewer)
	o, ok := orphans["off"]
	if !ok || len(o.Reasons) != 1 || o.Reasons[0].Reason != report.ReasonPoweredOff ||
		!strings.Contains(o.Reasons[0].Evidence, "powered off on azure 2h ago: the VM is still allocated and billed in full") ||
		o.Reasons[0].Fix != "deallocate it (az vm deallocate …) and run `gpuwarden up --stop auto`" {
		t.Errorf("orphan off = %+v", o)
	}
	if _, ok := orphans["dealloc"]; ok {
		t.Error("a deallocated box is an orphan")
	}

	f.advance(time.Hour)
	if got := f.spendRow(viewer).Spent; got != 1050 {
		t.Errorf("after 3 h spent %s, want 10.50", got.Decimal())
	}

	// Marked gone: what accrued stays, nothing more accrues.
	code, body, _ := f.call("POST", "/api/v1/nodes/off/gone", admin, GoneRequest{Reason: "deallocated in the portal"})
	var g GoneNode
	if code != 200 || json.Unmarshal(body, &g) != nil {
		t.Fatalf("gone = %d %s", code, body)
	}
	if g.Was != gpuwarden.NodePoweredOffStillBilling || g.Billed != 1050 || g.Node.Live.State != gpuwarden.NodeGone ||
		!strings.Contains(g.Node.Live.Diagnosis, "deallocated in the portal") {
		t.Errorf("gone answer = %+v", g)
	}
	f.advance(5 * time.Hour)
	if row := f.spendRow(viewer); row.Spent != 1050 || row.StillBilling != 0 || row.HourlyBurn != 0 {
		t.Errorf("5 h after gone: %+v, want €10.50 spent and nothing burning", row)
	}
	if _, ok := f.orphans(viewer)["off"]; ok {
		t.Error("a gone box is still an orphan")
	}
	// Marking it again changes nothing.
	code, body, _ = f.call("POST", "/api/v1/nodes/off/gone", admin, nil)
	if err := json.Unmarshal(body, &g); code != 200 || err != nil || !g.AlreadyGone || g.Billed != 1050 {
		t.Errorf("gone again = %d %s", code, body)
	}

	// It reports again: live again, and its minutes are its spend.
	f.beat(agent, gpuwarden.Heartbeat{Node: "off", Time: f.clock(), State: gpuwarden.NodeRunning})
	code, body, _ = f.call("GET", "/api/v1/nodes/off", viewer, nil)
	var n gpuwarden.Node
	if code != 200 || json.Unmarshal(body, &n) != nil || NodeState(n, f.clock(), f.srv.LostAfter) != gpuwarden.NodeRunning {
		t.Errorf("after a new heartbeat: %d %s", code, body)
	}
	if row := f.spendRow(viewer); row.Running != 1 || row.HourlyBurn != 3_500_000 {
		t.Errorf("back: %+v, want it running and burning €3.50/h", row)
	}
}

func TestFleetMarkGoneAuth(t *testing.T) {
	f := newFleetFixture(t, nil)
	agent := f.token("ml", gpuwarden.RoleAgent)
	f.register(agent, azureNode("n1"))
	tests := []struct {
		name, token, method, path string
		want                      int
		msg                       string
	}{
		{"the node's agent", agent, "POST", "/api/v1/nodes/n1/gone", 403, "only an admin"},
		{"a viewer", f.token("ml", gpuwarden.RoleViewer), "POST", "/api/v1/nodes/n1/gone", 403, "only an admin"},
		{"a fleet viewer", f.token("*", gpuwarden.RoleViewer), "POST", "/api/v1/nodes/n1/gone", 403, "only an admin"},
		{"another project's admin", f.token("vision", gpuwarden.RoleAdmin), "POST", "/api/v1/nodes/n1/gone", 404, "no node n1"},
		{"no token", "", "POST", "/api/v1/nodes/n1/gone", 401, ""},
		{"GET", f.token("ml", gpuwarden.RoleAdmin), "GET", "/api/v1/nodes/n1/gone", 405, "not allowed"},
		{"an unknown node", f.token("ml", gpuwarden.RoleAdmin), "POST", "/api/v1/nodes/nope/gone", 404, "no node nope"},
		{"a reason too long", f.token("ml", gpuwarden.RoleAdmin), "POST", "/api/v1/nodes/n1/gone", 400, "reason"},
		{"the project's admin", f.token("ml", gpuwarden.RoleAdmin), "POST", "/api/v1/nodes/n1/gone", 200, `"was":"running"`},
		{"a fleet admin", f.token("*", gpuwarden.RoleAdmin), "POST", "/api/v1/nodes/n1/gone", 200, `"already_gone":true`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body any
			if tt.name == "a reason too long" {
				body = GoneRequest{Reason: strings.Repeat("x", maxLabelLen+1)}
			}
			code, got, _ := f.call(tt.method, tt.path, tt.token, body)
			if code != tt.want || !strings.Contains(string(got), tt.msg) {
				t.Errorf("%s %s = %d %s, want %d with %q", tt.method, tt.path, code, got, tt.want, tt.msg)
			}
		})
	}
}

func TestFleetMetricsAfterStop(t *testing.T) {
	f := newFleetFixture(t, nil)
	agent := f.token("ml", gpuwarden.RoleAgent)
	for _, id := range []string{"off", "dealloc", "req", "gone"} {
		f.register(agent, azureNode(id))
	}
	f.beat(agent, poweredOff("off", fixtureNow))
	f.beat(agent, deallocated("dealloc", fixtureNow))
	f.beat(agent, gpuwarden.Heartbeat{Node: "req", Time: fixtureNow, State: gpuwarden.NodeStopRequested})
	f.beat(agent, poweredOff("gone", fixtureNow))
	f.advance(time.Hour)
	if code, body, _ := f.call("POST", "/api/v1/nodes/gone/gone", f.token("ml", gpuwarden.RoleAdmin), nil); code != 200 {
		t.Fatalf("gone: %d %s", code, body)
	}
	f.advance(time.Hour)
	code, body, _ := f.call("GET", "/metrics", f.token("*", gpuwarden.RoleViewer), nil)
	if code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	value := func(name string, labels map[string]string) (float64, bool) {
		m, ok := series(mfs[name], labels)
		return m.GetGauge().GetValue(), ok
	}
	tests := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"gpuwarden_fleet_nodes", map[string]string{"project": "ml", "state": gpuwarden.NodePoweredOffStillBilling}, 1},
		{"gpuwarden_fleet_nodes", map[string]string{"project": "ml", "state": gpuwarden.NodeStopRequested}, 1},
		{"gpuwarden_fleet_nodes", map[string]string{"project": "ml", "state": gpuwarden.NodeStopped}, 1},
		{"gpuwarden_fleet_nodes", map[string]string{"project": "ml", "state": gpuwarden.NodeGone}, 1},
		{"gpuwarden_fleet_still_billing_after_stop", map[string]string{"project": "ml", "state": gpuwarden.NodePoweredOffStillBilling, "currency": "EUR"}, 3.5},
		{"gpuwarden_fleet_still_billing_after_stop", map[string]string{"project": "ml", "state": gpuwarden.NodeStopRequested, "currency": "EUR"}, 3.5},
		// Two hours of off and req, one of gone until it was marked.
		{"gpuwarden_fleet_after_stop_month", map[string]string{"project": "ml", "currency": "EUR"}, 17.5},
		{"gpuwarden_fleet_spend_month", map[string]string{"project": "ml", "currency": "EUR"}, 17.5},
		{"gpuwarden_fleet_burn_hourly", map[string]string{"project": "ml", "currency": "EUR"}, 7},
		{"gpuwarden_fleet_orphans", map[string]string{"project": "ml", "reason": report.ReasonPoweredOff}, 1},
		{"gpuwarden_fleet_orphans", map[string]string{"project": "ml", "reason": report.ReasonStopRequested}, 1},
	}
	for _, tt := range tests {
		if got, ok := value(tt.name, tt.labels); !ok || got != tt.want {
			t.Errorf("%s%v = %v (present %v), want %v", tt.name, tt.labels, got, ok, tt.want)
		}
	}
	// Two states bill after stop here: the deallocated and the gone box do not.
	if n := len(mfs["gpuwarden_fleet_still_billing_after_stop"].GetMetric()); n != 2 {
		t.Errorf("gpuwarden_fleet_still_billing_after_stop has %d series, want 2", n)
	}
}

// TestFleetPagesShowTheIdleStop: the node list and the node page say how
// each box would stop, loudly where that would not end the bill, and
// after a stop what the provider answered; the orphan page gives the fix.
func TestFleetPagesShowTheIdleStop(t *testing.T) {
	f := newDashFixture(t)
	ctx := context.Background()
	beats := map[string]gpuwarden.Heartbeat{
		"proven": {Time: fixtureNow, State: gpuwarden.NodeRunning, Stop: &gpuwarden.StopReport{Method: gpuwarden.StopAzureDeallocate,
			StopsBilling: true, Proof: &gpuwarden.StopProof{Method: gpuwarden.StopAzureDeallocate, Proven: true, At: fixtureNow.Add(-2 * time.Minute),
				Checked: []string{"managed identity token", "deallocate permission on the VM"}}}},
		"shutdown": {Time: fixtureNow, State: gpuwarden.NodeRunning, Stop: &gpuwarden.StopReport{Method: gpuwarden.StopOSShutdown,
			Why: "an OS shutdown keeps azure billing", Fix: "give the VM a managed identity allowed to deallocate it"}},
		"off":     poweredOff("off", fixtureNow.Add(-2*time.Hour)),
		"dealloc": deallocated("dealloc", fixtureNow.Add(-time.Hour)),
	}
	for id, hb := range beats {
		n := azureNode(id)
		n.Project, n.TokenID, n.Registered = "ml", "t", fixtureNow.Add(-24*time.Hour)
		if _, err := f.store.RegisterNode(ctx, n); err != nil {
			t.Fatal(err)
		}
		hb.Node = id
		if err := f.store.RecordHeartbeats(ctx, hb.Time, []gpuwarden.Heartbeat{hb}); err != nil {
			t.Fatal(err)
		}
	}
	admin := f.token("ml", gpuwarden.RoleAdmin)
	loud := "idle stop would NOT stop billing here: an OS shutdown keeps azure billing, give the VM a managed identity allowed to deallocate it"
	tests := []struct {
		path           string
		contains, lack []string
	}{
		{"/", []string{
			`<span class="ok">idle stop: azure-deallocate, proven 2m 00s ago</span>`,
			`<span class="bad"><strong>` + loud + `</strong></span>`,
			"powered off by os-shutdown 2h 00m ago but STILL BILLING: the VM is still allocated and billed in full",
			"still billing after stop: €3.50/h since 2026-11-29 10:00 UTC, €7.00 so far",
			"stopped by azure-deallocate 1h 00m ago: the provider confirmed it (HTTP 202, operation op-1, state read back PowerState/deallocated)",
			`<span class="badge bad">powered-off-still-billing</span>`,
			"€3.50/h (€7.00 this month)</span> still billing after stop",
			"incl. €7.00 still billing after stop, €3.50/h now",
		}, nil},
		{"/?state=powered-off-still-billing", []string{"off.example", "powered-off-still-billing only, 1 of 4"}, []string{"proven.example"}},
		{"/nodes/shutdown", []string{`<p class="big bad" role="alert">` + loud + `</p>`, "<dt>ends the bill</dt><dd>no: an OS shutdown keeps azure billing</dd>"}, nil},
		{"/nodes/proven", []string{"idle stop: azure-deallocate, proven 2m 00s ago",
			"<dt>checked</dt><dd>managed identity token; deallocate permission on the VM</dd>"}, []string{`role="alert"`}},
		{"/nodes/dealloc", []string{"<dt>provider&#39;s HTTP status</dt><dd>202</dd>", "<dt>operation ID</dt><dd>op-1</dd>",
			"<dt>state read back</dt><dd>PowerState/deallocated</dd>"}, []string{`role="alert"`, "still billing"}},
		{"/nodes/off", []string{`role="alert">powered off by os-shutdown`, "still billing after stop: €3.50/h"}, nil},
		{"/orphans", []string{`<span class="badge bad">powered-off-still-billing</span> powered off on azure 2h ago`,
			"<strong>fix:</strong> deallocate it (az vm deallocate …) and run `gpuwarden up --stop auto`", "incl. €7.00 after stop"},
			[]string{"dealloc.example", "proven.example"}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			resp, body := f.do("GET", tt.path, admin, nil, nil)
			if resp.StatusCode != 200 {
				t.Fatalf("GET %s = %d\n%s", tt.path, resp.StatusCode, body)
			}
			for _, s := range tt.contains {
				if !strings.Contains(body, s) {
					t.Errorf("GET %s lacks %q", tt.path, s)
				}
			}
			for _, s := range tt.lack {
				if strings.Contains(body, s) {
					t.Errorf("GET %s shows %q", tt.path, s)
				}
			}
		})
	}
}
