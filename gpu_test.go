package gpuwarden

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// migTelemetry is a MIG GPU as the driver gives it: no device utilization,
// no device process list, one instance with a process.
func migTelemetry() Telemetry {
	t := Telemetry{Index: 0, Time: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC), MemUsedBytes: 30 << 30, MemTotalBytes: 80 << 30,
		PowerWatts: 400, TempC: 55, SMClockMHz: 1980, MemClockMHz: 2619}
	t.SetUnknown(FieldUtil, UnknownMIG)
	t.SetUnknown(FieldMemUtil, UnknownMIG)
	t.SetUnknown(FieldProcesses, UnknownNoPermission)
	m := MIGSample{MIGInstance: MIGInstance{Index: 0, UUID: "MIG-0", GPUInstanceID: 1, Profile: "3g.40gb", MemTotalBytes: 40 << 30},
		MemUsedBytes: 30 << 30, Processes: []GPUProcess{{PID: 42, Name: "python", UsedBytes: 29 << 30}}}
	m.SetUnknown(FieldUtil, UnknownNotSupported)
	t.MIG = []MIGSample{m}
	return t
}

// TestUnknownIsNullInJSON: an unknown field is written as null, never as a
// 0 that reads like an idle card, and the JSON reads back to the same value.
func TestUnknownIsNullInJSON(t *testing.T) {
	in := migTelemetry()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"util_percent":null`, `"mem_util_percent":null`, `"processes":null`, `"unknown":{`, `"mig":[{`, `"profile":"3g.40gb"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s:\n%s", want, b)
		}
	}
	if strings.Count(string(b), `"util_percent":null`) != 2 {
		t.Errorf("the instance's unknown utilization is not null:\n%s", b)
	}
	var out Telemetry
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out, in) {
		t.Errorf("round trip:\n%+v\nwant\n%+v", out, in)
	}
	known := Telemetry{Index: 1, UtilPercent: 0}
	b, _ = json.Marshal(known)
	if !strings.Contains(string(b), `"util_percent":0`) || strings.Contains(string(b), "unknown") {
		t.Errorf("a known 0 must stay 0: %s", b)
	}
}

func TestUnreadTelemetry(t *testing.T) {
	u := UnreadTelemetry(2, time.Time{}, UnknownTimeout)
	if !u.Unread() || u.Known(FieldUtil) || u.Unknown[FieldProcesses] != UnknownTimeout {
		t.Errorf("UnreadTelemetry = %+v", u)
	}
	if migTelemetry().Unread() {
		t.Error("a partly read sample counts as unread")
	}
}

func TestXIDSources(t *testing.T) {
	tests := []struct {
		sources []XIDSource
		blind   bool
		text    string
	}{
		{nil, true, "no Xid source reported"},
		{[]XIDSource{{Name: "kmsg", Live: true}, {Name: "nvml-events", Reason: "not supported"}}, false, "kmsg live, nvml-events unavailable (not supported)"},
		{[]XIDSource{{Name: "kmsg"}, {Name: "nvml-events"}}, true, "kmsg unavailable, nvml-events unavailable"},
	}
	for _, tt := range tests {
		if got := XIDBlind(tt.sources); got != tt.blind {
			t.Errorf("XIDBlind(%v) = %v, want %v", tt.sources, got, tt.blind)
		}
		if got := DescribeXIDSources(tt.sources); got != tt.text {
			t.Errorf("DescribeXIDSources = %q, want %q", got, tt.text)
		}
	}
}

func TestMIGLayout(t *testing.T) {
	got := MIGLayout([]MIGInstance{{GPUInstanceID: 2, Profile: "3g.40gb"}, {GPUInstanceID: 1, Profile: "3g.40gb"}})
	if want := "GI 1/CI 0 3g.40gb; GI 2/CI 0 3g.40gb"; got != want {
		t.Errorf("MIGLayout = %q, want %q", got, want)
	}
}

// BenchmarkTelemetryJSON is the status's cost per GPU: a fully read sample
// marshals as before, a MIG sample pays for rewriting unknown fields as null.
func BenchmarkTelemetryJSON(b *testing.B) {
	full := Telemetry{Index: 0, UtilPercent: 97, MemUsedBytes: 120 << 30, MemTotalBytes: 141 << 30, PowerWatts: 612, TempC: 61,
		SMClockMHz: 1980, MemClockMHz: 3201, Processes: []GPUProcess{{PID: 4242, Name: "python3", UsedBytes: 118 << 30}}}
	for _, c := range []struct {
		name string
		t    Telemetry
	}{{"known", full}, {"mig-unknown", migTelemetry()}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := json.Marshal(c.t); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
