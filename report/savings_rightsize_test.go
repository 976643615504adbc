package report

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// TestRightSized checks the period, the amount to the cent and the
// reasons a right-size event saves nothing or is no event at all.
func TestRightSized(t *testing.T) {
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	mk := func(id, project string, price gpuwarden.Micros) gpuwarden.Node {
		return gpuwarden.Node{ID: id, Project: project, Registered: now.Add(-10 * time.Hour), LastSeen: now,
			Labels: gpuwarden.NodeLabels{Owner: "ana", HourlyPrice: price, Currency: "EUR"},
			Live:   gpuwarden.Heartbeat{Node: id, Time: now, State: gpuwarden.NodeRunning}}
	}
	diag := gpuwarden.NodeEvent{Node: "a", Event: gpuwarden.Event{Kind: gpuwarden.EventDiagnosisOversized, Time: now.Add(-20 * time.Hour),
		Key: "oversized-x", Data: map[string]string{gpuwarden.DataGPUCount: "8", gpuwarden.DataGPUModel: "H100-SXM"}}}
	base := func() RightSize {
		return RightSize{B: mk("b", "ml", 1_050_000), A: mk("a", "ml", 4_200_000), CurA: "EUR", CurB: "EUR", Diagnosis: diag, Now: now}
	}
	tests := []struct {
		name      string
		tune      func(*RightSize)
		wantOK    bool
		wantCents gpuwarden.Cents
		wantFrom  time.Time
		wantTo    time.Time
		notSaved  string
	}{
		{"ten hours", func(*RightSize) {}, true, 3150, now.Add(-10 * time.Hour), now, ""},
		{"registered last month: from the month's start", func(r *RightSize) { r.B.Registered = time.Date(2026, 10, 30, 0, 0, 0, 0, time.UTC) },
			true, 3150 * 468 / 10, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), now, ""},
		{"stopped: to its last heartbeat", func(r *RightSize) {
			r.B.Live.State, r.B.LastSeen = gpuwarden.NodeStopped, now.Add(-6*time.Hour)
		}, true, 1260, now.Add(-10 * time.Hour), now.Add(-6 * time.Hour), ""},
		{"stopped before this month: no event", func(r *RightSize) {
			r.B.Registered, r.B.Live.State, r.B.LastSeen = now.AddDate(0, -1, 0), gpuwarden.NodeStopped, now.AddDate(0, -1, 1)
		}, false, 0, time.Time{}, time.Time{}, ""},
		{"another project", func(r *RightSize) { r.A.Project = "vision" }, false, 0, time.Time{}, time.Time{}, ""},
		{"another node's diagnosis", func(r *RightSize) { r.Diagnosis.Node = "c" }, false, 0, time.Time{}, time.Time{}, ""},
		{"replaces itself", func(r *RightSize) { r.A = r.B }, false, 0, time.Time{}, time.Time{}, ""},
		{"B has no price", func(r *RightSize) { r.B.Labels.HourlyPrice = 0 }, true, 0, now.Add(-10 * time.Hour), now, "this box has no price label"},
		{"two currencies", func(r *RightSize) { r.CurA = "USD" }, true, 0, now.Add(-10 * time.Hour), now, "different currencies"},
		{"B costs more", func(r *RightSize) { r.B.Labels.HourlyPrice = 5_000_000 }, true, 0, now.Add(-10 * time.Hour), now, "no less than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base()
			tt.tune(&r)
			got, ok := RightSized(r)
			if ok != tt.wantOK {
				t.Fatalf("ok = %v, want %v (%+v)", ok, tt.wantOK, got)
			}
			if !ok {
				return
			}
			if got.Amount != tt.wantCents || !got.From.Equal(tt.wantFrom) || !got.To.Equal(tt.wantTo) || !strings.Contains(got.NotSaved, tt.notSaved) ||
				(tt.notSaved == "") != (got.NotSaved == "") {
				t.Errorf("got %s from %s to %s, not saved %q; want %s from %s to %s, not saved %q", got.Amount.Decimal(),
					got.From, got.To, got.NotSaved, tt.wantCents.Decimal(), tt.wantFrom, tt.wantTo, tt.notSaved)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("the event is not one the ledger stores: %v", err)
			}
		})
	}
}
