package plan

import (
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

func TestStoppedHourly(t *testing.T) {
	cat := &gpuwarden.Catalog{Storage: []gpuwarden.StorageRate{
		{Provider: "azure", Kind: "block (managed disk)", Currency: "USD", PerGBMonth: gpuwarden.MicrosFromFloat(0.073)},
	}}
	p := func(gb float64, provider string) *gpuwarden.Plan {
		return &gpuwarden.Plan{HoursPerMonth: 730, Budget: gpuwarden.Budget{Currency: "USD"},
			Box: &gpuwarden.Box{Provider: provider}, Data: gpuwarden.Data{StorageGB: gb, StorageKind: "block"}}
	}
	tests := []struct {
		name string
		plan *gpuwarden.Plan
		want gpuwarden.Micros
		ok   bool
	}{
		// 500 GB × $0.073 = $36.50 a month, over 730 h = $0.05/h.
		{"azure disk", p(500, "azure"), gpuwarden.MicrosFromFloat(0.05), true},
		{"no storage", p(0, "azure"), 0, false},
		{"no rate in the catalog", p(500, "hetzner"), 0, false},
		{"no provider", p(500, ""), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, ok := StoppedHourly(tt.plan, cat)
			if got != tt.want || ok != tt.ok {
				t.Errorf("StoppedHourly = %s, %v; want %s, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}
