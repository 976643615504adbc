package ledgertest

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/report"
)

// stopReport is a full stop report as an agent sends it, its times in
// another zone than UTC: what the ledger stores must read back the same
// from either database.
func stopReport(state string, at time.Time) *gpuwarden.StopReport {
	cet := time.FixedZone("CET", 3600)
	return &gpuwarden.StopReport{Method: gpuwarden.StopAzureDeallocate, StopsBilling: true,
		Why: "azure-deallocate (deallocate) stops compute billing on azure",
		Proof: &gpuwarden.StopProof{Method: gpuwarden.StopAzureDeallocate, Proven: true, At: at.Add(-time.Hour).In(cet),
			Checked: []string{"managed identity token", "Microsoft.Compute/virtualMachines/deallocate/action"}},
		Outcome: &gpuwarden.StopOutcome{Method: gpuwarden.StopAzureDeallocate, HTTPStatus: 202, OperationID: "op-ü-1",
			State: "PowerState/deallocating", Billing: state, At: at.In(cet), Detail: "accepted"},
		StillBillsHourly: 250_000, Currency: "EUR", StillBills: []string{"managed OS and data disks", "static public IP addresses"},
		Fix: "deallocate it (az vm deallocate …)"}
}

// inUTC is r as a ledger reads it back: every time in UTC.
func inUTC(r *gpuwarden.StopReport) *gpuwarden.StopReport {
	c := *r
	p, o := *r.Proof, *r.Outcome
	p.At, o.At = p.At.UTC(), o.At.UTC()
	c.Proof, c.Outcome = &p, &o
	return &c
}

// testStopHeartbeats holds both ledgers to one reading of the states and
// stop reports of issue #27: every state a heartbeat may carry, with the
// stop report whole (times in UTC), across a restart.
func testStopHeartbeats(t *testing.T, s *fleetStore) {
	ctx := context.Background()
	states := []string{gpuwarden.NodeRunning, gpuwarden.NodeStopped, gpuwarden.NodeStopRequested,
		gpuwarden.NodePoweredOffStillBilling, gpuwarden.NodeAgentStopped, gpuwarden.NodeGone}
	at := FleetStart.Add(time.Hour)
	want := map[string]gpuwarden.Heartbeat{}
	var hbs []gpuwarden.Heartbeat
	for _, st := range states {
		register(t, s.f, FleetNode("n-"+st, "vision", "a", 3_500_000, 1))
		hb := gpuwarden.Heartbeat{Node: "n-" + st, Time: at, State: st, Stop: stopReport(st, at)}
		hbs = append(hbs, hb)
		hb.Stop = inUTC(hb.Stop)
		want[hb.Node] = hb
	}
	if err := s.f.RecordHeartbeats(ctx, at, hbs); err != nil {
		t.Fatal(err)
	}
	if hbs[0].Stop.Outcome.At.Location() == time.UTC {
		t.Error("RecordHeartbeats changed the caller's stop report")
	}
	s.restart()
	for id, hb := range want {
		n, err := s.f.Node(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(n.Live, hb) {
			t.Errorf("%s: Live %+v (stop %+v)\nwant %+v (stop %+v)", id, n.Live, n.Live.Stop, hb, hb.Stop)
		}
	}
}

// testStopHandsTheIDOn: a box whose agent said it stopped, however the
// stop went, and a node a person marked gone, hand the node ID to another
// instance at once; a box that still reports does not.
func testStopHandsTheIDOn(t *testing.T, s *fleetStore) {
	ctx := context.Background()
	if err := s.f.CreateToken(ctx, gpuwarden.Token{ID: "a1", Project: "vision", Role: gpuwarden.RoleAgent, Created: FleetStart}); err != nil {
		t.Fatal(err)
	}
	const lost = 10 * time.Minute
	tests := []struct {
		state string
		code  gpuwarden.ErrorCode
	}{
		{gpuwarden.NodeRunning, gpuwarden.EConflict},
		{gpuwarden.NodeStopping, gpuwarden.EConflict},
		{gpuwarden.NodeStopped, ""},
		{gpuwarden.NodeStopRequested, ""},
		{gpuwarden.NodePoweredOffStillBilling, ""},
		{gpuwarden.NodeAgentStopped, ""},
		{gpuwarden.NodeGone, ""},
	}
	for _, tt := range tests {
		t.Run(tt.state, func(t *testing.T) {
			first := identityNode("a1", "i-A", "boot-1", FleetStart, lost)
			first.ID = "n-" + tt.state
			register(t, s.f, first)
			at := FleetStart.Add(time.Minute)
			if err := s.f.RecordHeartbeats(ctx, at, []gpuwarden.Heartbeat{{Node: first.ID, Time: at, State: tt.state}}); err != nil {
				t.Fatal(err)
			}
			second := identityNode("a1", "i-B", "boot-1", at.Add(time.Second), lost)
			second.ID = first.ID
			_, err := s.f.RegisterNode(ctx, second)
			wantCode(t, "RegisterNode of another instance", err, tt.code)
		})
	}
}

// testSpendAfterStop runs the reports over each ledger: a box powered off
// where that bills keeps adding to the spend at the rate its stop report
// gives, one the provider deallocated adds nothing, until the first is
// marked gone; the orphan review lists it with its fix until then.
func testSpendAfterStop(t *testing.T, s *fleetStore) {
	ctx := context.Background()
	if err := s.f.PutProject(ctx, gpuwarden.Project{Name: "vision", Budget: 100_000, Currency: "EUR", Created: FleetStart}); err != nil {
		t.Fatal(err)
	}
	azure := func(id string) gpuwarden.Node {
		n := FleetNode(id, "vision", "a", 3_500_000, 1)
		n.Labels.Provider, n.Labels.Currency, n.Labels.TTLSeconds = "azure", "EUR", 0
		return n
	}
	register(t, s.f, azure("off"), azure("dealloc"))
	// An hour of minutes each, then the stop at 11:00.
	var b gpuwarden.FleetBatch
	for m := range 60 {
		b.Minutes = append(b.Minutes, FleetMinute(time.Duration(m)*time.Minute, 50))
	}
	for _, id := range []string{"off", "dealloc"} {
		if _, err := s.f.Ingest(ctx, id, b); err != nil {
			t.Fatal(err)
		}
	}
	stop := FleetStart.Add(time.Hour)
	off := gpuwarden.Heartbeat{Node: "off", Time: stop, State: gpuwarden.NodePoweredOffStillBilling,
		Stop: &gpuwarden.StopReport{Method: gpuwarden.StopOSShutdown, Why: "the VM is still allocated and billed in full",
			StillBillsHourly: 3_500_000, Currency: "EUR", Fix: "deallocate it (az vm deallocate …)"}}
	dealloc := gpuwarden.Heartbeat{Node: "dealloc", Time: stop, State: gpuwarden.NodeStopped, Stop: stopReport(gpuwarden.NodeStopped, stop)}
	dealloc.Stop.StillBillsHourly = 0
	if err := s.f.RecordHeartbeats(ctx, stop, []gpuwarden.Heartbeat{off, dealloc}); err != nil {
		t.Fatal(err)
	}
	spend := func(now time.Time) report.SpendRow {
		t.Helper()
		v, err := report.Build(ctx, s.f, now, report.Request{Name: "spend", Project: "vision"})
		if err != nil {
			t.Fatal(err)
		}
		rows := v.(report.SpendReport).Rows
		if len(rows) != 1 {
			t.Fatalf("spend rows = %+v", rows)
		}
		return rows[0]
	}
	orphans := func(now time.Time) []report.Orphan {
		t.Helper()
		v, err := report.Build(ctx, s.f, now, report.Request{Name: "orphans", Project: "vision"})
		if err != nil {
			t.Fatal(err)
		}
		return v.(report.OrphanReport).Orphans
	}
	// Shipped: 2 × €3.50. After the stop: €3.50 an hour of off.
	for _, tt := range []struct {
		after           time.Duration
		spent, afterEnd gpuwarden.Cents
	}{{time.Hour, 1050, 350}, {3 * time.Hour, 1750, 1050}} {
		row := spend(stop.Add(tt.after))
		if row.Spent != tt.spent || row.AfterStop != tt.afterEnd || row.StillBilling != 1 || row.HourlyBurn != 3_500_000 {
			t.Errorf("%s after the stop: %+v, want spent %s, %s of it after stop, €3.50/h burning",
				tt.after, row, tt.spent.Decimal(), tt.afterEnd.Decimal())
		}
	}
	listed := orphans(stop.Add(3 * time.Hour))
	if len(listed) != 1 || listed[0].Node != "off" || len(listed[0].Reasons) != 1 || listed[0].Reasons[0].Reason != report.ReasonPoweredOff ||
		listed[0].Reasons[0].Fix != "deallocate it (az vm deallocate …)" || !strings.Contains(listed[0].Reasons[0].Evidence, "powered off on azure 3h ago") {
		t.Errorf("orphans = %+v", listed)
	}

	// Marked gone three hours after the stop: €10.50 stays, nothing more.
	gone := stop.Add(3 * time.Hour)
	n, err := s.f.Node(ctx, "off")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.f.RecordHeartbeats(ctx, gone, []gpuwarden.Heartbeat{report.GoneHeartbeat(n, "EUR", gone, 0, "marked gone by test")}); err != nil {
		t.Fatal(err)
	}
	s.restart()
	for _, later := range []time.Duration{0, 5 * time.Hour} {
		row := spend(gone.Add(later))
		if row.Spent != 1750 || row.AfterStop != 1050 || row.StillBilling != 0 || row.HourlyBurn != 0 {
			t.Errorf("%s after gone: %+v, want €17.50 spent, €10.50 after stop, nothing burning", later, row)
		}
	}
	if listed := orphans(gone.Add(time.Hour)); len(listed) != 0 {
		t.Errorf("orphans after gone = %+v, want none", listed)
	}
}
