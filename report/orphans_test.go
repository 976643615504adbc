package report

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// lostFix is the fix of a lost box with no provider label.
func lostFix(id string) string {
	return "check in the provider's console whether it still runs, stop it there if so, then `gpuwarden node gone " + id + "`"
}

func TestOrphansFixture(t *testing.T) {
	reg := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	want := OrphanReport{
		Now: now, IdleAfterSeconds: 4 * 3600, LostAfterSeconds: 600,
		Orphans: []Orphan{
			{Node: "e", Project: "web", Owner: "carol", Provider: "aws", State: "running", Registered: ago(27 * time.Hour),
				LastSeen: ago(30 * time.Second),
				Reasons: []OrphanReason{
					{Reason: ReasonTTLExceeded, Evidence: "TTL 24h ran out 3h ago"},
					{Reason: ReasonIdle, Evidence: "idle for 6h 10m"},
				},
				HourlyPrice: eur("1.5"), BillsHourly: eur("1.5"), Currency: "USD", CostSoFar: 150, WeeklyCost: 25200},
			{Node: "c", Project: "ml", Owner: None, Provider: None, State: "running", Registered: reg, LastSeen: ago(2 * time.Hour),
				Reasons: []OrphanReason{
					{Reason: ReasonNoOwner, Evidence: "no owner label, registered 19d 12h ago"},
					{Reason: ReasonHeartbeatLost, Evidence: "last heartbeat 2h ago", Fix: lostFix("c")},
				},
				Currency: "EUR"},
		},
		Totals: []OrphanTotal{
			{Currency: "EUR", Orphans: 1},
			{Currency: "USD", Orphans: 1, HourlyPrice: eur("1.5"), CostSoFar: 150, WeeklyCost: 25200},
		},
		Reasons: []ReasonCount{
			{ReasonNoOwner, 1, reasonAdvice[ReasonNoOwner]},
			{ReasonTTLExceeded, 1, reasonAdvice[ReasonTTLExceeded]},
			{ReasonIdle, 1, reasonAdvice[ReasonIdle]},
			{ReasonHeartbeatLost, 1, reasonAdvice[ReasonHeartbeatLost]},
		},
	}
	got := Orphans(fixture(), OrphanOptions{})
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestOrphanReasons(t *testing.T) {
	owned := gpuwarden.NodeLabels{Owner: "alice"}
	up := func(hb gpuwarden.Heartbeat) gpuwarden.Heartbeat {
		if hb.State == "" {
			hb.State = gpuwarden.NodeRunning
		}
		return hb
	}
	tests := []struct {
		name string
		n    gpuwarden.Node
		opt  OrphanOptions
		want []OrphanReason
	}{
		{"healthy", gpuwarden.Node{Labels: owned, Registered: ago(time.Hour), LastSeen: now, Live: up(gpuwarden.Heartbeat{})}, OrphanOptions{}, nil},
		{"a node with no labels and no times", gpuwarden.Node{}, OrphanOptions{},
			[]OrphanReason{{Reason: ReasonNoOwner, Evidence: "no owner label"}, {Reason: ReasonHeartbeatLost, Evidence: "never sent a heartbeat", Fix: lostFix("n")}}},
		{"idle exactly at the threshold", gpuwarden.Node{Labels: owned, LastSeen: now, Live: up(gpuwarden.Heartbeat{IdleSince: ago(4 * time.Hour)})},
			OrphanOptions{}, []OrphanReason{{Reason: ReasonIdle, Evidence: "idle for 4h"}}},
		{"idle a minute short", gpuwarden.Node{Labels: owned, LastSeen: now, Live: up(gpuwarden.Heartbeat{IdleSince: ago(4*time.Hour - time.Minute)})},
			OrphanOptions{}, nil},
		{"idle after a shorter setting", gpuwarden.Node{Labels: owned, LastSeen: now, Live: up(gpuwarden.Heartbeat{IdleSince: ago(90 * time.Minute)})},
			OrphanOptions{IdleAfter: time.Hour}, []OrphanReason{{Reason: ReasonIdle, Evidence: "idle for 1h 30m"}}},
		{"idle since a skewed future", gpuwarden.Node{Labels: owned, LastSeen: now, Live: up(gpuwarden.Heartbeat{IdleSince: now.Add(time.Hour)})},
			OrphanOptions{}, nil},
		{"TTL not yet out", gpuwarden.Node{Labels: gpuwarden.NodeLabels{Owner: "a", TTLSeconds: 7200}, Registered: ago(time.Hour), LastSeen: now,
			Live: up(gpuwarden.Heartbeat{})}, OrphanOptions{}, nil},
		{"TTL out", gpuwarden.Node{Labels: gpuwarden.NodeLabels{Owner: "a", TTLSeconds: 3600}, Registered: ago(75 * time.Hour), LastSeen: now,
			Live: up(gpuwarden.Heartbeat{})}, OrphanOptions{}, []OrphanReason{{Reason: ReasonTTLExceeded, Evidence: "TTL 1h ran out 3d 2h ago"}}},
		// 10¹⁰ s is about 317 years: past what a time.Duration holds, so
		// it must not wrap round to a TTL that ran out long ago.
		{"a TTL longer than a Duration holds has not run out", gpuwarden.Node{Labels: gpuwarden.NodeLabels{Owner: "a", TTLSeconds: 1e10},
			Registered: ago(time.Hour), LastSeen: now, Live: up(gpuwarden.Heartbeat{})}, OrphanOptions{}, nil},
		{"the longest TTL a Duration holds", gpuwarden.Node{Labels: gpuwarden.NodeLabels{Owner: "a", TTLSeconds: math.MaxInt64 / int64(time.Second)},
			Registered: ago(time.Hour), LastSeen: now, Live: up(gpuwarden.Heartbeat{})}, OrphanOptions{}, nil},
		{"TTL with no registration time is not judged", gpuwarden.Node{Labels: gpuwarden.NodeLabels{Owner: "a", TTLSeconds: 3600}, LastSeen: now,
			Live: up(gpuwarden.Heartbeat{})}, OrphanOptions{}, nil},
		{"heartbeat just inside a longer setting", gpuwarden.Node{Labels: owned, LastSeen: ago(29 * time.Minute), Live: up(gpuwarden.Heartbeat{})},
			OrphanOptions{LostAfter: 30 * time.Minute}, nil},
		{"no heartbeat since registering", gpuwarden.Node{Labels: owned, Registered: ago(2 * time.Hour), Live: gpuwarden.Heartbeat{}},
			OrphanOptions{}, []OrphanReason{{Reason: ReasonHeartbeatLost, Evidence: "no heartbeat since it registered 2h ago", Fix: lostFix("n")}}},
		{"marked lost by the server", gpuwarden.Node{Labels: owned, LastSeen: ago(time.Minute), Live: gpuwarden.Heartbeat{State: gpuwarden.NodeLost}},
			OrphanOptions{}, []OrphanReason{{Reason: ReasonHeartbeatLost, Evidence: "marked lost by the server; last heartbeat 1m ago", Fix: lostFix("n")}}},
		{"every reason at once", gpuwarden.Node{Labels: gpuwarden.NodeLabels{TTLSeconds: 86400}, Registered: ago(30 * time.Hour),
			LastSeen: ago(2 * time.Hour), Live: up(gpuwarden.Heartbeat{IdleSince: ago(6*time.Hour + 10*time.Minute)})}, OrphanOptions{},
			[]OrphanReason{{Reason: ReasonNoOwner, Evidence: "no owner label, registered 30h ago"}, {Reason: ReasonTTLExceeded, Evidence: "TTL 24h ran out 6h ago"},
				{Reason: ReasonIdle, Evidence: "idle for 6h 10m"}, {Reason: ReasonHeartbeatLost, Evidence: "last heartbeat 2h ago", Fix: lostFix("n")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.n.ID = "n"
			r := Orphans(Input{Now: now, Nodes: []gpuwarden.Node{tt.n}}, tt.opt)
			var got []OrphanReason
			if len(r.Orphans) > 0 {
				got = r.Orphans[0].Reasons
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("reasons = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestOrphansEdges(t *testing.T) {
	t.Run("no data", func(t *testing.T) {
		got := Orphans(Input{Now: now}, OrphanOptions{IdleAfter: time.Hour, LostAfter: time.Minute})
		want := OrphanReport{Now: now, IdleAfterSeconds: 3600, LostAfterSeconds: 60,
			Orphans: []Orphan{}, Totals: []OrphanTotal{}, Reasons: []ReasonCount{}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
	t.Run("a stopped box is never an orphan", func(t *testing.T) {
		n := gpuwarden.Node{ID: "s", Registered: ago(1000 * time.Hour), Live: gpuwarden.Heartbeat{State: gpuwarden.NodeStopped,
			IdleSince: ago(900 * time.Hour)}, Labels: gpuwarden.NodeLabels{TTLSeconds: 1}}
		if got := Orphans(Input{Now: now, Nodes: []gpuwarden.Node{n}}, OrphanOptions{}).Orphans; len(got) != 0 {
			t.Errorf("orphans = %+v, want none", got)
		}
	})
	t.Run("cost so far takes the node's currency from its hours when labels say none", func(t *testing.T) {
		n := gpuwarden.Node{ID: "x", Live: gpuwarden.Heartbeat{State: gpuwarden.NodeRunning}}
		in := Input{Now: now, Nodes: []gpuwarden.Node{n}, Hours: []gpuwarden.NodeHour{
			hour("x", ago(2*time.Hour), 60, "1.234", "GBP"), hour("x", ago(time.Hour), 0, "0.002", "GBP")}}
		got := Orphans(in, OrphanOptions{}).Orphans
		if len(got) != 1 || got[0].Currency != "GBP" || got[0].CostSoFar != 124 {
			t.Errorf("orphans = %+v, want one in GBP with 1.24 so far", got)
		}
	})
}
