package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// TestIdleStopRecordsItsSaving: an idle stop the provider confirmed is
// recorded as a saving up to the month's end; the agent's next start
// re-prices the same event up to that start. A stop the provider only
// accepted is recorded as not saved, with why.
func TestIdleStopRecordsItsSaving(t *testing.T) {
	tests := []struct {
		name     string
		out      gpuwarden.StopOutcome
		notSaved string
		basis    gpuwarden.SavingBasis
	}{
		{"deallocated", gpuwarden.StopOutcome{Method: gpuwarden.StopAzureDeallocate, HTTPStatus: 202, State: "PowerState/deallocated", Billing: gpuwarden.NodeStopped},
			"", gpuwarden.SavingConfirmed},
		{"accepted, not confirmed", gpuwarden.StopOutcome{Method: gpuwarden.StopRunPod, HTTPStatus: 200, State: "RUNNING", Billing: gpuwarden.NodeStopRequested},
			"never confirmed", gpuwarden.SavingConfirmed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			h := newHarness(t) // 2026-11-30 10:00 UTC
			cfg := idleConfig()
			cfg.Budget = BudgetConfig{Currency: "USD", HourlyRate: 3_400_000}
			cfg.Stop = StopConfig{Stopper: &scriptedStopper{out: tt.out}, Report: gpuwarden.StopReport{Method: tt.out.Method, StopsBilling: true,
				StillBillsHourly: 120_000}}
			a := h.agent("1xH100", cfg, gpuwarden.HostSample{})
			for range 5 {
				a.Tick(ctx)
				h.clock.add(time.Second)
			}
			got, err := h.ledger.Savings(ctx, gpuwarden.SavingsQuery{})
			if err != nil || len(got) != 1 {
				t.Fatalf("savings %+v, %v; want one", got, err)
			}
			s := got[0]
			monthEnd := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			if s.Kind != gpuwarden.SavingIdleStop || s.Node != "box-1" || s.Basis != tt.basis || !strings.Contains(s.NotSaved, tt.notSaved) ||
				(tt.notSaved == "") != (s.NotSaved == "") || !s.To.Equal(monthEnd) || s.Rate != 3_280_000 {
				t.Fatalf("saving %+v", s)
			}
			if tt.notSaved != "" {
				if s.Amount != 0 {
					t.Errorf("a not-saved stop saved %d", s.Amount)
				}
				return
			}
			if want := gpuwarden.MulCents(s.Rate, gpuwarden.MicrosFromFloat(s.Hours)); s.Amount != want || s.Hours < 13.99 {
				t.Errorf("amount %d for %v h, want %d", s.Amount, s.Hours, want)
			}
			// The box starts again two hours later: the agent's start ends
			// the counterfactual there, and the same event is re-priced.
			h.clock.add(2 * time.Hour)
			restart := cfg
			restart.Stop = StopConfig{Stopper: &scriptedStopper{out: tt.out}, Report: cfg.Stop.Report}
			h.agent("1xH100", restart, gpuwarden.HostSample{})
			again, err := h.ledger.Savings(ctx, gpuwarden.SavingsQuery{})
			if err != nil || len(again) != 1 || again[0].ID != s.ID {
				t.Fatalf("after the restart: %+v, %v; want the same one event", again, err)
			}
			r := again[0]
			if !r.To.Equal(h.clock.now().Truncate(time.Millisecond)) || r.Hours < 1.99 || r.Hours > 2.01 ||
				r.Amount != gpuwarden.MulCents(r.Rate, gpuwarden.MicrosFromFloat(r.Hours)) || !strings.Contains(r.Evidence, "next start") {
				t.Errorf("re-priced saving %+v", r)
			}
		})
	}
}

func TestSavingsFromNode(t *testing.T) {
	tests := []struct {
		name    string
		labels  gpuwarden.NodeLabels
		want    SavingsConfig
		wantErr bool
	}{
		{"on demand", gpuwarden.NodeLabels{Provider: "aws", HourlyPrice: 32_770_000, Currency: "USD"},
			SavingsConfig{Node: "n1", Provider: "aws", Rate: 32_770_000, RateSource: "box rate (price label)", Currency: "USD"}, false},
		{"spot with its on-demand price", gpuwarden.NodeLabels{Provider: "aws", HourlyPrice: 9_830_000, Currency: "USD", Spot: true,
			Extra: map[string]string{LabelOnDemandPrice: "32.77"}},
			SavingsConfig{Node: "n1", Provider: "aws", Rate: 9_830_000, RateSource: "box rate (price label)", Currency: "USD", Spot: true,
				OnDemandRate: 32_770_000, OnDemandSource: "label on_demand_price"}, false},
		{"bad on-demand price", gpuwarden.NodeLabels{Extra: map[string]string{LabelOnDemandPrice: "lots"}}, SavingsConfig{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SavingsFromNode(gpuwarden.Node{ID: "n1", Labels: tt.labels})
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want error %v", err, tt.wantErr)
			}
			if !tt.wantErr && got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
