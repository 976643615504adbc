package gpusim

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

func TestParseSpecBurnFaults(t *testing.T) {
	tests := []struct{ in, faults string }{
		{"1xH100,fault=badmem", "badmem:3@-1"},
		{"2xH100,fault=badmem:20@1", "badmem:20@1"},
		{"1xH100,fault=throttle", "throttle:0@-1"},
		{"1xH100,fault=slowbw", "slowbw:0@-1"},
	}
	for _, tt := range tests {
		s, err := ParseSpec(tt.in)
		if err != nil || describeFaults(s) != tt.faults {
			t.Errorf("ParseSpec(%q) = %q, %v; want %q", tt.in, describeFaults(s), err, tt.faults)
		}
	}
}

func TestBurn(t *testing.T) {
	quick := gpuwarden.BurnRequest{MemFraction: 0.95, Patterns: []string{"zeros", "ones", "random"}, SoakSeconds: 15, BandwidthRuns: 5, Seed: 1}
	inject := quick
	inject.InjectFault = true
	tests := []struct {
		spec          string
		req           gpuwarden.BurnRequest
		errors        uint64
		offsets       []uint64
		bwLo, bwHi    float64 // share of the datasheet
		fp32Lo, fp32H float64
	}{
		{spec: "1xH100", req: quick, bwLo: 0.83, bwHi: 0.85, fp32Lo: 0.85, fp32H: 0.87},
		{spec: "1xH200", req: quick, bwLo: 0.83, bwHi: 0.85, fp32Lo: 0.85, fp32H: 0.87},
		{spec: "1xH100,fault=badmem", req: quick, errors: 3, offsets: []uint64{0x1f4000, 0x1f4004, 0x3e8000}, bwLo: 0.83, bwHi: 0.85, fp32Lo: 0.85, fp32H: 0.87},
		{spec: "1xH100,fault=badmem:5", req: inject, errors: 6, offsets: []uint64{InjectedFaultOffset, 0x1f4000, 0x1f4004, 0x3e8000, 0x5dc000, 0x7d0000}, bwLo: 0.83, bwHi: 0.85, fp32Lo: 0.85, fp32H: 0.87},
		{spec: "1xH100", req: inject, errors: 1, offsets: []uint64{InjectedFaultOffset}, bwLo: 0.83, bwHi: 0.85, fp32Lo: 0.85, fp32H: 0.87},
		{spec: "1xH100,fault=slowbw", req: quick, bwLo: 0.71, bwHi: 0.73, fp32Lo: 0.85, fp32H: 0.87},
		{spec: "1xH100,fault=throttle", req: quick, bwLo: 0.83, bwHi: 0.85, fp32Lo: 0.68, fp32H: 0.70},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			s := mustSim(t, tt.spec)
			r, err := s.Burn(context.Background(), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if r.Mem.Errors != tt.errors || !slices.Equal(r.Mem.BadOffsets, tt.offsets) {
				t.Errorf("mem errors %d at %#x, want %d at %#x", r.Mem.Errors, r.Mem.BadOffsets, tt.errors, tt.offsets)
			}
			spec := s.gpu.MemBWTBs * 1000
			if got := r.BandwidthGBs / spec; got < tt.bwLo || got > tt.bwHi || len(r.BandwidthRuns) != 5 {
				t.Errorf("bandwidth %.1f GB/s is %.3f of spec (runs %v), want %.2f–%.2f", r.BandwidthGBs, got, r.BandwidthRuns, tt.bwLo, tt.bwHi)
			}
			if got := r.FP32TFLOPs / s.gpu.FP32TFLOPs; got < tt.fp32Lo || got > tt.fp32H {
				t.Errorf("fp32 %.1f is %.3f of spec, want %.2f–%.2f", r.FP32TFLOPs, got, tt.fp32Lo, tt.fp32H)
			}
			if r.Mem.GBs < r.BandwidthGBs*0.7 || r.Mem.GBs > r.BandwidthGBs*0.8 || r.HostToDeviceGBs != 53.5 || r.Mem.Bytes == 0 {
				t.Errorf("result = %+v", r)
			}
			// The soak the result claims is one the simulated burn ran,
			// not the 15 s asked for (issue #32: "15s soak" for a 3 s run).
			if r.SoakSeconds <= 0 || r.SoakSeconds > r.Seconds {
				t.Errorf("soak %gs in a burn of %gs; the simulated soak must be part of the burn", r.SoakSeconds, r.Seconds)
			}
		})
	}
}

func TestBurnLoadsTelemetry(t *testing.T) {
	ctx := context.Background()
	s := mustSim(t, "1xH100,fault=throttle")
	if tel, _ := s.Sample(ctx, 0); !slices.Equal(tel.ThrottleReasons, []string{"gpu_idle"}) {
		t.Errorf("idle throttled card reports %v, want gpu_idle", tel.ThrottleReasons)
	}
	if _, err := s.Burn(ctx, gpuwarden.BurnRequest{}); err != nil {
		t.Fatal(err)
	}
	// Right after a burn the card is still hot.
	if tel, _ := s.Sample(ctx, 0); !slices.Equal(tel.ThrottleReasons, []string{"hw_thermal_slowdown"}) || tel.TempC < 85 {
		t.Errorf("after a burn: %+v", tel)
	}
	plain := mustSim(t, "1xH100")
	if _, err := plain.Burn(ctx, gpuwarden.BurnRequest{}); err != nil {
		t.Fatal(err)
	}
	if tel, _ := plain.Sample(ctx, 0); len(tel.ThrottleReasons) != 0 {
		t.Errorf("healthy card after a burn reports %v", tel.ThrottleReasons)
	}
}

func TestBurnErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := mustSim(t, "1xH100,fault=hang").Burn(ctx, gpuwarden.BurnRequest{}); err == nil {
		t.Error("hang fault returned no error")
	}
	if _, err := mustSim(t, "1xH100").Burn(context.Background(), gpuwarden.BurnRequest{Index: 3}); gpuwarden.ErrorCodeOf(err) != gpuwarden.ENotFound {
		t.Errorf("GPU 3 of 1: err = %v", err)
	}
}
