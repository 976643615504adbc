package gpuwarden

import "testing"

func TestOfferVRAMGBRounds(t *testing.T) {
	tests := []struct {
		count, perGPU, want float64
	}{
		{7, 79.65, 557.55}, // the float product is 557.5500000000001
		{0.125, 22.35, 2.79},
		{8, 80, 640},
	}
	for _, tt := range tests {
		o := Offer{GPUCount: tt.count, VRAMGBPerGPU: tt.perGPU}
		if got := o.VRAMGB(); got != tt.want {
			t.Errorf("%v × %v GB = %v, want %v", tt.count, tt.perGPU, got, tt.want)
		}
	}
}
