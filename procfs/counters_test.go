package procfs

import (
	"math"
	"testing"
	"time"
)

// TestSampleCounters: the cumulative figures move between the two
// snapshots by what the rates in TestSampleSnapshots are made of, and a
// sandbox without diskstats or net/dev reports them unknown, not zero.
func TestSampleCounters(t *testing.T) {
	s := &Sampler{Root: snap1, Now: stepClock(t1, t1.Add(2*time.Second))}
	defer s.Close()
	first, err := s.Sample()
	if err != nil {
		t.Fatal(err)
	}
	s.Root = snap2
	second, err := s.Sample()
	if err != nil {
		t.Fatal(err)
	}
	a, b := first.Counters, second.Counters
	if a == nil || b == nil {
		t.Fatalf("counters missing: %v %v", a, b)
	}
	near := func(x, y float64) bool { return math.Abs(x-y) < 1e-9 }
	tests := []struct {
		name      string
		got, want float64
	}{
		// 220 busy, 160 idle and 20 iowait ticks of USER_HZ = 100.
		{"cpu busy seconds", b.CPUBusySeconds - a.CPUBusySeconds, 2.2},
		{"cpu idle seconds", b.CPUIdleSeconds - a.CPUIdleSeconds, 1.6},
		{"cpu iowait seconds", b.CPUIOWaitSeconds - a.CPUIOWaitSeconds, 0.2},
		{"disk read bytes", float64(b.DiskReadBytes - a.DiskReadBytes), 8192 * 512},
		{"disk written bytes", float64(b.DiskWrittenBytes - a.DiskWrittenBytes), 4096 * 512},
		{"net receive bytes", float64(b.NetReceiveBytes - a.NetReceiveBytes), 2400000},
		{"net transmit bytes", float64(b.NetTransmitBytes - a.NetTransmitBytes), 1000000},
	}
	for _, tt := range tests {
		if !near(tt.got, tt.want) {
			t.Errorf("%s moved by %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	if !b.HasDisk || !b.HasNet {
		t.Errorf("HasDisk %v HasNet %v, want both", b.HasDisk, b.HasNet)
	}

	dir := t.TempDir()
	writeRoot(t, dir, minimalRoot(nil)) // no diskstats, no net/dev
	sandbox := &Sampler{Root: dir}
	defer sandbox.Close()
	got, err := sandbox.Sample()
	if err != nil {
		t.Fatal(err)
	}
	if got.Counters == nil || got.Counters.HasDisk || got.Counters.HasNet {
		t.Errorf("sandbox counters = %+v, want CPU only", got.Counters)
	}
}
