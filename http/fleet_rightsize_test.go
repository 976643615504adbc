package http

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// TestFleetRightSize drives the real server: node A ships the diagnosis
// its agent recorded, node B registers with --label replaces=A and ships
// batches, and the right-size saving the server records is checked to the
// cent. Prices: A €4.20/h, B €1.05/h, so €3.15/h saved.
func TestFleetRightSize(t *testing.T) {
	const (
		priceA = 4_200_000
		priceB = 1_050_000
	)
	diagnosis := gpuwarden.Event{Seq: 1, Time: fixtureNow.Add(-time.Hour), Kind: gpuwarden.EventDiagnosisOversized,
		Severity: gpuwarden.SeverityInfo, Key: "oversized-2026-11-29T11:00:00Z", Message: "gpu-a is oversized",
		Data: map[string]string{gpuwarden.DataUtilAvg: "8.0", gpuwarden.DataMemAvg: "12.5", gpuwarden.DataGPUModel: "H100-SXM",
			gpuwarden.DataGPUCount: "8", gpuwarden.DataWindowSeconds: "599"}}
	type step struct {
		advance time.Duration
		savings []gpuwarden.Saving // B's own savings shipped in the batch
	}
	tests := []struct {
		name        string
		projectA    string
		priceA      gpuwarden.Micros
		diagnose    bool
		replaces    string
		steps       []step
		wantEvents  int
		wantCents   gpuwarden.Cents
		wantHours   float64
		wantNotSave string
	}{
		{name: "no diagnosis, no event", projectA: "ml", priceA: priceA, replaces: "gpu-a",
			steps: []step{{advance: 10 * time.Hour}}},
		{name: "no label, no event", projectA: "ml", priceA: priceA, diagnose: true,
			steps: []step{{advance: 10 * time.Hour}}},
		{name: "diagnosis and label", projectA: "ml", priceA: priceA, diagnose: true, replaces: "gpu-a",
			// 3.15 × 10 h 20 min = 3.15 × 31/3 = 32.55
			steps: []step{{advance: 10*time.Hour + 20*time.Minute}}, wantEvents: 1, wantCents: 3255, wantHours: 10.333333},
		{name: "another project's box", projectA: "vision", priceA: priceA, diagnose: true, replaces: "gpu-a",
			steps: []step{{advance: 10 * time.Hour}}},
		{name: "replayed and re-priced: one event", projectA: "ml", priceA: priceA, diagnose: true, replaces: "gpu-a",
			steps: []step{{advance: time.Hour}, {}, {advance: 3 * time.Hour}}, wantEvents: 1, wantCents: 1260, wantHours: 4},
		{name: "B's own idle stop is not right-sized", projectA: "ml", priceA: priceA, diagnose: true, replaces: "gpu-a",
			steps: []step{{advance: 10 * time.Hour, savings: []gpuwarden.Saving{{Kind: gpuwarden.SavingIdleStop,
				From: fixtureNow.Add(2 * time.Hour), To: fixtureNow.Add(4 * time.Hour), Hours: 2, Rate: priceB, Amount: 210,
				Currency: "EUR", Basis: gpuwarden.SavingConfirmed, Evidence: "idle episode; provider answer: stopped"}}}},
			// 3.15 × (10 − 2) h
			wantEvents: 1, wantCents: 2520, wantHours: 8},
		{name: "A has no price", projectA: "ml", priceA: 0, diagnose: true, replaces: "gpu-a",
			steps: []step{{advance: 10 * time.Hour}}, wantEvents: 1, wantNotSave: "gpu-a has no price label"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFleetFixture(t, nil)
			ctx := context.Background()
			tokA, tokB := f.token(tt.projectA, gpuwarden.RoleAgent), f.token("ml", gpuwarden.RoleAgent)
			a := node("gpu-a", "ana")
			a.Labels.HourlyPrice = tt.priceA
			f.register(tokA, a)
			if tt.diagnose {
				if code, body, _ := f.call("POST", "/api/v1/nodes/gpu-a/batch", tokA, gpuwarden.FleetBatch{Events: []gpuwarden.Event{diagnosis}}); code != 200 {
					t.Fatalf("ship A's diagnosis: %d %s", code, body)
				}
			}
			b := node("gpu-b", "ana")
			b.Labels.HourlyPrice = priceB
			if tt.replaces != "" {
				b.Labels.Extra = map[string]string{gpuwarden.LabelReplaces: tt.replaces}
			}
			f.register(tokB, b)
			for i, s := range tt.steps {
				f.advance(s.advance)
				for j := range s.savings {
					s.savings[j].Node = "gpu-b"
					s.savings[j].ID = gpuwarden.SavingID(s.savings[j].Kind, "gpu-b", s.savings[j].Evidence)
					s.savings[j].At = f.clock()
				}
				batch := gpuwarden.FleetBatch{Savings: s.savings,
					Minutes: []gpuwarden.NodeMinute{{Minute: f.clock().Add(-time.Minute).Truncate(time.Minute), Samples: 60, GPUUtil: []float64{70}}}}
				if code, body, _ := f.call("POST", "/api/v1/nodes/gpu-b/batch", tokB, batch); code != 200 {
					t.Fatalf("step %d: B's batch: %d %s", i, code, body)
				}
			}
			got, err := f.store.(gpuwarden.SavingsLedger).Savings(ctx, gpuwarden.SavingsQuery{Kind: gpuwarden.SavingRightSize})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tt.wantEvents {
				t.Fatalf("%d right-size events, want %d: %+v", len(got), tt.wantEvents, got)
			}
			if tt.wantEvents == 0 {
				return
			}
			s := got[0]
			if s.Amount != tt.wantCents || s.Hours != tt.wantHours || s.NotSaved != "" != (tt.wantNotSave != "") ||
				!strings.Contains(s.NotSaved, tt.wantNotSave) {
				t.Errorf("amount %s, hours %v, not saved %q; want %s, %v, %q", s.Amount.Decimal(), s.Hours, s.NotSaved,
					tt.wantCents.Decimal(), tt.wantHours, tt.wantNotSave)
			}
			month, _ := time.Parse("2006-01", "2026-11")
			wantID := gpuwarden.SavingID(gpuwarden.SavingRightSize, "gpu-b", fixtureNow.Format(time.RFC3339Nano))
			if s.ID != wantID || s.Node != "gpu-b" || s.Project != "ml" || s.Owner != "ana" || s.Currency != "EUR" ||
				s.Basis != gpuwarden.SavingEstimated || !s.From.Equal(fixtureNow) || s.From.Before(month) {
				t.Errorf("event %+v: want id %s, node gpu-b of ml, owner ana, EUR, estimated, from %s", s, wantID, fixtureNow)
			}
			for _, w := range []string{gpuwarden.EventDiagnosisOversized + " of gpu-a at 2026-11-29T11:00:00Z",
				"8× H100-SXM at 8.0% utilization using 12.5%", "--label replaces=gpu-a"} {
				if !strings.Contains(s.Evidence, w) {
					t.Errorf("evidence %q lacks %q", s.Evidence, w)
				}
			}
			if tt.wantNotSave == "" && !strings.Contains(s.RateSource, "gpu-a's price label") {
				t.Errorf("rate source %q does not name A's price label", s.RateSource)
			}
		})
	}
}
