package catalog

import (
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

func TestFilterMatch(t *testing.T) {
	h100 := gpuwarden.Offer{Provider: "aws", Region: "eu-central-1", Country: "DE", GPU: "H100-SXM",
		GPUCount: 8, VRAMGBPerGPU: 80, Currency: "USD", OnDemandHourly: 98_320_000, SpotHourly: 30_000_000}
	a100 := gpuwarden.Offer{Provider: "lambda", Region: "us-east-1", GPU: "A100-80GB",
		GPUCount: 1, VRAMGBPerGPU: 80, Currency: "USD", OnDemandHourly: 1_290_000}
	l40s := gpuwarden.Offer{Provider: "vast", Region: "Taichung", Country: "TW", GPU: "L40S",
		GPUCount: 1, VRAMGBPerGPU: 48, Currency: "USD", OnDemandHourly: 600_000}
	monthly := gpuwarden.Offer{Provider: "hetzner", Region: "fsn1", GPU: "RTX-4090", GPUCount: 1,
		VRAMGBPerGPU: 24, Currency: "EUR", Monthly: 184_000_000}
	tests := []struct {
		name   string
		filter Filter
		offer  gpuwarden.Offer
		want   bool
	}{
		{"zero filter matches all", Filter{}, h100, true},
		{"model alias", Filter{GPU: "h100_sxm5"}, h100, true},
		{"family matches its models", Filter{GPU: "H100"}, h100, true},
		{"family A100", Filter{GPU: "a100"}, a100, true},
		{"other model", Filter{GPU: "A100-40GB"}, a100, false},
		{"memory picks the model", Filter{GPU: "A100-80GB"}, a100, true},
		{"L4 is not L40S", Filter{GPU: "L4"}, l40s, false},
		{"L40S", Filter{GPU: "l40s"}, l40s, true},
		{"box VRAM", Filter{MinVRAMGB: 640}, h100, true},
		{"box VRAM too small", Filter{MinVRAMGB: 641}, h100, false},
		{"provider any case", Filter{Provider: "AWS"}, h100, true},
		{"provider alias", Filter{Provider: "LambdaLabs"}, a100, true},
		{"provider differs", Filter{Provider: "gcp"}, h100, false},
		{"region any case", Filter{Region: "EU-Central-1"}, h100, true},
		{"region differs", Filter{Region: "us-east-1"}, h100, false},
		{"country from the offer", Filter{Country: "de"}, h100, true},
		{"country from the region table", Filter{Country: "US"}, a100, true},
		{"country differs", Filter{Country: "FR"}, l40s, false},
		{"spot is the cheapest hourly", Filter{MaxHourly: 30_000_000}, h100, true},
		{"over the cap", Filter{MaxHourly: 29_999_999}, h100, false},
		{"on-demand only", Filter{MaxHourly: 1_290_000}, a100, true},
		{"monthly over 730 hours", Filter{MaxHourly: 252_055}, monthly, true},
		{"monthly over the cap", Filter{MaxHourly: 252_054}, monthly, false},
		{"all fields", Filter{GPU: "H100", MinVRAMGB: 80, Provider: "aws", Region: "eu-central-1", Country: "DE", MaxHourly: 99_000_000}, h100, true},
	}
	for _, tt := range tests {
		if got := tt.filter.Match(tt.offer); got != tt.want {
			t.Errorf("%s: %+v.Match(%s) = %v, want %v", tt.name, tt.filter, tt.offer.GPU, got, tt.want)
		}
	}
}
