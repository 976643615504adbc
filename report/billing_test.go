package report

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

func TestNodeState(t *testing.T) {
	beat := func(state string, seen time.Duration) gpuwarden.Node {
		return gpuwarden.Node{LastSeen: ago(seen), Live: gpuwarden.Heartbeat{State: state}}
	}
	tests := []struct {
		name      string
		n         gpuwarden.Node
		lostAfter time.Duration
		want      string
	}{
		{"fresh heartbeat", beat(gpuwarden.NodeRunning, time.Minute), 0, gpuwarden.NodeRunning},
		{"exactly at the threshold", beat(gpuwarden.NodeRunning, 10*time.Minute), 0, gpuwarden.NodeLost},
		{"inside a longer window", beat(gpuwarden.NodeRunning, 29*time.Minute), 30 * time.Minute, gpuwarden.NodeRunning},
		{"stopping then silent", beat(gpuwarden.NodeStopping, time.Hour), 0, gpuwarden.NodeLost},
		{"stopped long ago", beat(gpuwarden.NodeStopped, 100*time.Hour), 0, gpuwarden.NodeStopped},
		{"stop requested long ago stays so", beat(gpuwarden.NodeStopRequested, 100*time.Hour), 0, gpuwarden.NodeStopRequested},
		{"powered off long ago stays so", beat(gpuwarden.NodePoweredOffStillBilling, 100*time.Hour), 0, gpuwarden.NodePoweredOffStillBilling},
		{"gone stays gone", beat(gpuwarden.NodeGone, 1000*time.Hour), 0, gpuwarden.NodeGone},
		{"an agent stopped long ago stays so", beat(gpuwarden.NodeAgentStopped, 100*time.Hour), 0, gpuwarden.NodeAgentStopped},
		{"marked lost", beat(gpuwarden.NodeLost, time.Minute), 0, gpuwarden.NodeLost},
		{"never a heartbeat, registered recently", gpuwarden.Node{Registered: ago(time.Minute)}, 0, gpuwarden.NodeRunning},
		{"never a heartbeat, registered long ago", gpuwarden.Node{Registered: ago(time.Hour)}, 0, gpuwarden.NodeLost},
		{"no times at all", gpuwarden.Node{}, 0, gpuwarden.NodeLost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NodeState(tt.n, now, tt.lostAfter); got != tt.want {
				t.Errorf("NodeState = %q, want %q", got, tt.want)
			}
		})
	}
}

// stopNode is an azure box in project ml at €3.50/h whose last heartbeat,
// seen ago, said state with stop.
func stopNode(id, state string, seen time.Duration, stop *gpuwarden.StopReport) gpuwarden.Node {
	return gpuwarden.Node{ID: id, Project: "ml", Hostname: id + ".example", Registered: ago(48 * time.Hour), LastSeen: ago(seen),
		Labels: gpuwarden.NodeLabels{Owner: "ana", Provider: "azure", Region: "westeurope", HourlyPrice: eur("3.5"), Currency: "EUR"},
		Live:   gpuwarden.Heartbeat{Node: id, Time: ago(seen), State: state, Stop: stop}}
}

// azureOff is what an agent whose idle stop was an OS shutdown on Azure
// reports: it powered off, the VM stays allocated and billed in full.
func azureOff() *gpuwarden.StopReport {
	return &gpuwarden.StopReport{Method: gpuwarden.StopOSShutdown, StopsBilling: false,
		Why:              "the VM is still allocated and billed in full",
		Outcome:          &gpuwarden.StopOutcome{Method: gpuwarden.StopOSShutdown, Billing: gpuwarden.NodePoweredOffStillBilling, At: ago(2 * time.Hour)},
		StillBillsHourly: eur("3.5"), Currency: "EUR", StillBills: []string{"the whole VM"},
		Fix: "deallocate it (az vm deallocate …) and run `gpuwarden up --stop auto`"}
}

// azureDeallocated is a confirmed deallocation whose disks bill on.
func azureDeallocated(disks string) *gpuwarden.StopReport {
	return &gpuwarden.StopReport{Method: gpuwarden.StopAzureDeallocate, StopsBilling: true,
		Outcome: &gpuwarden.StopOutcome{Method: gpuwarden.StopAzureDeallocate, HTTPStatus: 202, OperationID: "op-1",
			State: "PowerState/deallocated", Billing: gpuwarden.NodeStopped, At: ago(2 * time.Hour)},
		StillBillsHourly: eur(disks), Currency: "EUR", StillBills: []string{"managed OS and data disks"}}
}

func TestStillBilling(t *testing.T) {
	seen := 2*time.Hour + 30*time.Second
	first := ago(seen)
	requested := &gpuwarden.StopReport{Method: gpuwarden.StopAzureDeallocate, StopsBilling: true,
		Outcome: &gpuwarden.StopOutcome{HTTPStatus: 202, OperationID: "op-9", State: "PowerState/deallocating", Billing: gpuwarden.NodeStopRequested}}
	proven := &gpuwarden.StopReport{Method: gpuwarden.StopAzureDeallocate, StopsBilling: true, StillBillsHourly: eur("0.2"), Currency: "EUR"}
	gone := stopNode("g", gpuwarden.NodeGone, 30*time.Minute, &gpuwarden.StopReport{StillBillsHourly: eur("3.5"), Currency: "EUR"})
	gone.Live.Time = ago(seen)
	tests := []struct {
		name string
		n    gpuwarden.Node
		want AfterStop
		ok   bool
	}{
		{"powered off at its stated rate", stopNode("p", gpuwarden.NodePoweredOffStillBilling, seen, azureOff()),
			AfterStop{State: gpuwarden.NodePoweredOffStillBilling, From: first, Hourly: eur("3.5"), Currency: "EUR"}, true},
		{"stop requested, no rate given: the full price", stopNode("r", gpuwarden.NodeStopRequested, seen, requested),
			AfterStop{State: gpuwarden.NodeStopRequested, From: first, Hourly: eur("3.5"), Currency: "EUR"}, true},
		{"stopped with disks that bill", stopNode("s", gpuwarden.NodeStopped, seen, azureDeallocated("0.25")),
			AfterStop{State: gpuwarden.NodeStopped, From: first, Hourly: eur("0.25"), Currency: "EUR"}, true},
		{"stopped with nothing that bills", stopNode("s", gpuwarden.NodeStopped, seen, nil), AfterStop{}, false},
		// A lost box may never have stopped: its stop's rate does not apply.
		{"lost bills the full price", stopNode("l", gpuwarden.NodeRunning, seen, proven),
			AfterStop{State: gpuwarden.NodeLost, From: first, Hourly: eur("3.5"), Currency: "EUR"}, true},
		{"an agent stopped alone: the box bills in full", stopNode("a", gpuwarden.NodeAgentStopped, seen, proven),
			AfterStop{State: gpuwarden.NodeAgentStopped, From: first, Hourly: eur("3.5"), Currency: "EUR"}, true},
		{"running accrues nothing: its minutes are its spend", stopNode("u", gpuwarden.NodeRunning, time.Minute, proven), AfterStop{}, false},
		{"gone keeps what accrued until marked", gone,
			AfterStop{State: gpuwarden.NodeGone, From: first, Until: ago(30 * time.Minute), Hourly: eur("3.5"), Currency: "EUR"}, true},
		{"gone with nothing accrued", stopNode("g", gpuwarden.NodeGone, time.Minute, nil), AfterStop{}, false},
		{"no price anywhere", func() gpuwarden.Node {
			n := stopNode("z", gpuwarden.NodePoweredOffStillBilling, seen, nil)
			n.Labels.HourlyPrice = 0
			return n
		}(), AfterStop{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := StillBilling(tt.n, "EUR", now, 0)
			if ok != tt.ok || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("StillBilling = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestAfterStopWithin(t *testing.T) {
	a := AfterStop{From: ago(2 * time.Hour), Hourly: eur("3.5")}
	ended := a
	ended.Until = ago(time.Hour)
	tests := []struct {
		name     string
		a        AfterStop
		from, to time.Time
		want     gpuwarden.Micros
	}{
		{"two hours", a, ago(24 * time.Hour), now, eur("7")},
		{"clipped to the window", a, ago(time.Hour), now, eur("3.5")},
		{"a window before it", a, ago(5 * time.Hour), ago(3 * time.Hour), 0},
		{"ended when marked gone", ended, ago(24 * time.Hour), now, eur("3.5")},
		// 1 ms at €3.50/h is 0.97 micro: rounded once, half away from zero.
		{"one millisecond", a, ago(2 * time.Hour), ago(2*time.Hour - time.Millisecond), 1},
		{"seven minutes", a, ago(2 * time.Hour), ago(2*time.Hour - 7*time.Minute), eur("0.408333")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.a.Within(tt.from, tt.to); got != tt.want {
				t.Errorf("Within = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestGoneHeartbeat(t *testing.T) {
	off := stopNode("p", gpuwarden.NodePoweredOffStillBilling, 2*time.Hour, azureOff())
	hb := GoneHeartbeat(off, "EUR", now, 0, "marked gone by admin")
	if hb.State != gpuwarden.NodeGone || !hb.Time.Equal(ago(2*time.Hour)) || hb.Stop == nil ||
		hb.Stop.StillBillsHourly != eur("3.5") || hb.Stop.Outcome == nil || hb.Stop.Outcome.Billing != gpuwarden.NodePoweredOffStillBilling {
		t.Fatalf("gone heartbeat = %+v (stop %+v)", hb, hb.Stop)
	}
	if hb.Stop == off.Live.Stop || hb.Stop.Outcome == off.Live.Stop.Outcome {
		t.Error("the gone heartbeat shares its stop report with the node")
	}
	// Stored, the node then bills from its last heartbeat until marked.
	gone := off
	gone.Live, gone.LastSeen = hb, now
	for _, at := range []time.Time{now, now.Add(24 * time.Hour)} {
		a, ok := StillBilling(gone, "EUR", at, 0)
		if !ok || a.Accruing() || a.Within(ago(24*time.Hour), at) != eur("7") {
			t.Errorf("at %s: after gone = %+v, %v; want €7.00 that no longer grows", at, a, ok)
		}
	}

	running := stopNode("u", gpuwarden.NodeRunning, time.Minute, nil)
	hb = GoneHeartbeat(running, "EUR", now, 0, "")
	if hb.Stop != nil || !hb.Time.Equal(now) {
		t.Errorf("a reporting node marked gone = %+v, want no accrual", hb)
	}
	if _, ok := StillBilling(gpuwarden.Node{Live: hb, LastSeen: now}, "EUR", now, 0); ok {
		t.Error("a reporting node marked gone accrues")
	}
}

// stopsFixture is a fleet where stops went every way issue #27 names, all
// in ml (EUR, budget €5,000.00), seen at now:
//
//	run   running, proven azure-deallocate, 60 minutes shipped
//	off   powered off 2 h ago on azure, still bills €3.50/h (its stated rate)
//	req   deallocate requested 3 h ago, never confirmed: €3.50/h
//	lost  silent for 1 h, never said how it stopped: €3.50/h
//	dealloc  deallocated 5 h ago, its disks bill €0.25/h
//	done  stopped 5 h ago, nothing bills
//	gone  powered off 6 h ago, marked gone 2 h ago at €3.50/h
func stopsFixture() Input {
	run := stopNode("run", gpuwarden.NodeRunning, 30*time.Second, &gpuwarden.StopReport{Method: gpuwarden.StopAzureDeallocate, StopsBilling: true,
		Proof: &gpuwarden.StopProof{Method: gpuwarden.StopAzureDeallocate, Proven: true, At: ago(2 * time.Minute)}})
	req := stopNode("req", gpuwarden.NodeStopRequested, 3*time.Hour, &gpuwarden.StopReport{Method: gpuwarden.StopAzureDeallocate, StopsBilling: true,
		Outcome: &gpuwarden.StopOutcome{Method: gpuwarden.StopAzureDeallocate, HTTPStatus: 202, OperationID: "op-7",
			State: "PowerState/deallocating", Billing: gpuwarden.NodeStopRequested, At: ago(3 * time.Hour)}})
	gone := stopNode("gone", gpuwarden.NodeGone, 2*time.Hour, &gpuwarden.StopReport{Method: gpuwarden.StopOSShutdown,
		StillBillsHourly: eur("3.5"), Currency: "EUR"})
	gone.Live.Time = ago(6 * time.Hour)
	return Input{Now: now,
		Projects: []gpuwarden.Project{{Name: "ml", Budget: 500000, Currency: "EUR"}},
		Nodes: []gpuwarden.Node{run, stopNode("off", gpuwarden.NodePoweredOffStillBilling, 2*time.Hour, azureOff()), req,
			stopNode("lost", gpuwarden.NodeRunning, time.Hour, nil), stopNode("dealloc", gpuwarden.NodeStopped, 5*time.Hour, azureDeallocated("0.25")),
			stopNode("done", gpuwarden.NodeStopped, 5*time.Hour, nil), gone},
		Hours: []gpuwarden.NodeHour{hour("run", ago(time.Hour), 60, "3.5", "EUR", 90)},
	}
}

func TestSpendAfterStop(t *testing.T) {
	in := stopsFixture()
	r, err := Spend(in, ByProject, now)
	if err != nil {
		t.Fatal(err)
	}
	// Shipped: €3.50. After stop: off 2 h + req 3 h + lost 1 h at €3.50,
	// dealloc 5 h at €0.25, gone 4 h at €3.50 = €7 + €10.50 + €3.50 +
	// €1.25 + €14 = €36.25. Billing now: run, off, req, lost at €3.50 and
	// dealloc's €0.25 = €14.25/h, €10.75 of it after stop.
	want := SpendRow{Key: "ml", Currency: "EUR", Spent: 3975, Nodes: 6, Running: 1, HourlyBurn: eur("14.25"),
		AfterStop: 3625, StillBilling: 4, AfterStopHourly: eur("10.75"),
		Forecast: gpuwarden.MonthForecast(3975, eur("14.25"), now)}
	want.Budget = &BudgetUse{Limit: 500000, SpentPercent: 0.8, ForecastPercent: percentOf(want.Forecast, 500000)}
	if len(r.Rows) != 1 || !reflect.DeepEqual(r.Rows[0], want) {
		t.Fatalf("rows = %+v\nwant  %+v", r.Rows, want)
	}
	if len(r.Findings) != 1 || !strings.Contains(r.Findings[0], "€36.25 of the €39.75 spent was billed after boxes stopped reporting") ||
		!strings.Contains(r.Findings[0], "4 boxes still bill €10.75/h") {
		t.Errorf("findings = %q", r.Findings)
	}

	// An hour later the silent boxes billed another €10.75, the gone one nothing.
	in.Now = now.Add(time.Hour)
	in.Nodes[0].LastSeen = in.Now.Add(-30 * time.Second) // run still reports
	later, err := Spend(in, ByProject, in.Now)
	if err != nil {
		t.Fatal(err)
	}
	if got := later.Rows[0].AfterStop - r.Rows[0].AfterStop; got != 1075 {
		t.Errorf("after stop grew by %s in an hour, want 10.75", got.Decimal())
	}

	// Last month saw none of it: the boxes stopped this month.
	past, err := Spend(in, ByProject, now.AddDate(0, -1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(past.Rows) != 1 || past.Rows[0].Spent != 0 || past.Rows[0].AfterStop != 0 {
		t.Errorf("October = %+v, want nothing spent", past.Rows)
	}
}

func TestOrphansAfterStop(t *testing.T) {
	r := Orphans(stopsFixture(), OrphanOptions{})
	got := map[string]Orphan{}
	for _, o := range r.Orphans {
		got[o.Node] = o
	}
	for _, id := range []string{"run", "dealloc", "done", "gone"} {
		if _, ok := got[id]; ok {
			t.Errorf("%s is listed as an orphan", id)
		}
	}
	tests := []struct {
		node, reason, evidence, fix string
		afterStop                   gpuwarden.Cents
	}{
		{"off", ReasonPoweredOff, "powered off on azure 2h ago: the VM is still allocated and billed in full; still bills €3.50/h",
			"deallocate it (az vm deallocate …) and run `gpuwarden up --stop auto`", 700},
		{"req", ReasonStopRequested, "the stop was requested 3h ago but azure never confirmed a state that ends the bill " +
			"(HTTP 202, operation op-7, state read back PowerState/deallocating); still bills €3.50/h",
			"check in the provider's console that it reached PowerState/deallocated (stop it there if not), then `gpuwarden node gone req`", 1050},
		{"lost", ReasonHeartbeatLost, "last heartbeat 1h ago",
			"check in azure's console whether it still runs, stop it there if so, then `gpuwarden node gone lost`", 350},
	}
	for _, tt := range tests {
		o, ok := got[tt.node]
		if !ok {
			t.Errorf("%s is not an orphan", tt.node)
			continue
		}
		want := []OrphanReason{{Reason: tt.reason, Evidence: tt.evidence, Fix: tt.fix}}
		if !reflect.DeepEqual(o.Reasons, want) || o.AfterStop != tt.afterStop || o.CostSoFar != tt.afterStop ||
			o.BillsHourly != eur("3.5") || o.WeeklyCost != 58800 {
			t.Errorf("%s = %+v\nwant reasons %+v, after stop %s", tt.node, o, want, tt.afterStop.Decimal())
		}
	}
	if len(r.Totals) != 1 || r.Totals[0].AfterStop != 2100 || r.Totals[0].HourlyPrice != eur("10.5") {
		t.Errorf("totals = %+v", r.Totals)
	}
}

// TestOrphansAgentStopped: a box whose agent alone was stopped is an orphan
// once it stayed silent for the lost window, not while an agent restarts.
func TestOrphansAgentStopped(t *testing.T) {
	tests := []struct {
		name string
		seen time.Duration
		want []OrphanReason
	}{
		{"restarting", time.Minute, nil},
		{"silent for the lost window", time.Hour, []OrphanReason{{Reason: ReasonAgentStopped,
			Evidence: "its agent was stopped 1h ago, not the box, which may run on; bills €3.50/h in full until someone looks",
			Fix:      "start the agent again (`gpuwarden up`), or stop the box through azure, then `gpuwarden node gone a`"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Orphans(Input{Now: now, Nodes: []gpuwarden.Node{stopNode("a", gpuwarden.NodeAgentStopped, tt.seen, nil)}}, OrphanOptions{})
			var got []OrphanReason
			if len(r.Orphans) == 1 {
				got = r.Orphans[0].Reasons
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("reasons = %+v, want %+v", got, tt.want)
			}
		})
	}
}
