package http

import (
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

// TestMetricsUnknownIsAbsent: a field the driver did not give exports no
// sample (the old exporter wrote 0, an idle-looking MIG GPU), a
// gpuwarden_gpu_field_unknown series says which and why, MIG instances
// have their own series, and telemetry loss and Xid sources are gauges.
func TestMetricsUnknownIsAbsent(t *testing.T) {
	st := fixtureStatus()
	g := &st.Last.GPUs[0]
	g.UtilPercent, g.Processes = 0, nil
	g.SetUnknown(gpuwarden.FieldUtil, gpuwarden.UnknownMIG)
	g.SetUnknown(gpuwarden.FieldProcesses, gpuwarden.UnknownNoPermission)
	inst := gpuwarden.MIGSample{MIGInstance: gpuwarden.MIGInstance{Index: 1, UUID: "MIG-1", GPUInstanceID: 2, Profile: "3g.71gb",
		MemTotalBytes: 71 << 30}, MemUsedBytes: 20 << 30, Processes: []gpuwarden.GPUProcess{{PID: 7}}}
	inst.SetUnknown(gpuwarden.FieldUtil, gpuwarden.UnknownNotSupported)
	g.MIG = []gpuwarden.MIGSample{inst}
	st.Telemetry = gpuwarden.TelemetryState{Lost: true, Failures: 4}
	st.XIDSources = []gpuwarden.XIDSource{{Name: "kmsg"}, {Name: "nvml-events", Live: true}}
	_, base := startServer(t, newFakeAgent(st))
	mfs := scrape(t, base)

	g0 := map[string]string{"gpu": "0", "uuid": "GPU-0000aaaa", "model": "H200"}
	g1 := map[string]string{"gpu": "1", "uuid": "GPU-1111bbbb", "model": "H200"}
	if _, ok := series(mfs["gpuwarden_gpu_utilization_ratio"], g0); ok {
		t.Error("GPU 0 exports a utilization the driver did not give")
	}
	if _, ok := series(mfs["gpuwarden_gpu_utilization_ratio"], g1); !ok {
		t.Error("GPU 1 lost its known utilization")
	}
	if _, ok := series(mfs["gpuwarden_gpu_processes"], g0); ok {
		t.Error("GPU 0 exports a process count it could not read")
	}
	tests := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"gpuwarden_gpu_field_unknown", map[string]string{"gpu": "0", "uuid": "GPU-0000aaaa", "model": "H200", "field": "util_percent", "reason": "mig"}, 1},
		{"gpuwarden_gpu_field_unknown", map[string]string{"gpu": "0", "uuid": "GPU-0000aaaa", "model": "H200", "field": "processes", "reason": "no-permission"}, 1},
		{"gpuwarden_mig_memory_used_bytes", map[string]string{"gpu": "0", "uuid": "MIG-1", "mig": "1", "profile": "3g.71gb"}, 20 << 30},
		{"gpuwarden_mig_processes", map[string]string{"gpu": "0", "uuid": "MIG-1", "mig": "1", "profile": "3g.71gb"}, 1},
		{"gpuwarden_telemetry_lost", map[string]string{}, 1},
		{"gpuwarden_telemetry_failed_samples", map[string]string{}, 4},
		{"gpuwarden_xid_source_live", map[string]string{"source": "kmsg"}, 0},
		{"gpuwarden_xid_source_live", map[string]string{"source": "nvml-events"}, 1},
	}
	for _, tt := range tests {
		m, ok := series(mfs[tt.name], tt.labels)
		if !ok {
			t.Errorf("%s%v missing", tt.name, tt.labels)
			continue
		}
		if got := valueOf(mfs[tt.name], m); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
	if _, ok := mfs["gpuwarden_mig_utilization_ratio"]; ok {
		t.Error("a MIG utilization without GPM is exported")
	}
}
