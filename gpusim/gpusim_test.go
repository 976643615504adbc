package gpusim

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

func TestParseSpec(t *testing.T) {
	tests := []struct {
		in      string
		count   int
		model   string
		faults  string
		wantErr string
	}{
		{in: "2xH100", count: 2, model: "H100-SXM"},
		{in: "8xh200,load=80", count: 8, model: "H200"},
		{in: "1xH100,fault=xid", count: 1, model: "H100-SXM", faults: "xid:79@-1"},
		{in: "2xA100-80GB,fault=ecc@1,fault=xid:48@0", count: 2, model: "A100-80GB", faults: "ecc:0@1 xid:48@0"},
		{in: "nodriver", count: 1, model: "H100-SXM", faults: "nodriver:0@-1"},
		{in: "1xRTX4090", count: 1, model: "RTX-4090"},
		{in: "0xH100", wantErr: "1 to 64 GPUs"},
		{in: "2xB300", wantErr: `unknown GPU model "B300"`},
		{in: "2xH100,fault=melt", wantErr: `unknown fault "melt"`},
		{in: "2xH100,fault=xid@2", wantErr: "fault on GPU 2, but there are only 2"},
		{in: "2xH100,load=120", wantErr: "not a percentage"},
		{in: "2xH100,colour=red", wantErr: `unknown part "colour=red"`},
		{in: "1xH100,load=80,mig=2", count: 1, model: "H100-SXM"},
		{in: "1xH100,fault=nvml-hang:5s,fault=no-kmsg", count: 1, model: "H100-SXM", faults: "nvml-hang:0@-1 no-kmsg:0@-1"},
		{in: "1xH100,mig=8", wantErr: "from 1 to 7"},
		{in: "1xH100,mig=two", wantErr: "not a number of MIG instances"},
		{in: "1xH100,fault=nvml-hang:soon", wantErr: "not a positive duration"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSpec(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
					t.Fatalf("err = %v, want invalid containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Count != tt.count || got.Model != tt.model || describeFaults(got) != tt.faults {
				t.Errorf("got %d× %s faults %q, want %d× %s %q", got.Count, got.Model, describeFaults(got), tt.count, tt.model, tt.faults)
			}
		})
	}
}

func describeFaults(s Spec) string {
	var parts []string
	for _, f := range s.Faults {
		gpu := "-1"
		if f.GPU >= 0 {
			gpu = itoa(uint64(f.GPU))
		}
		parts = append(parts, f.Kind+":"+itoa(f.Value)+"@"+gpu)
	}
	return strings.Join(parts, " ")
}

func itoa(v uint64) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for ; v > 0; v /= 10 {
		b = append([]byte{byte('0' + v%10)}, b...)
	}
	return string(b)
}

func mustSim(t *testing.T, spec string) *Sim {
	t.Helper()
	s, err := ParseSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	return New(s)
}

func TestInventoryAndTelemetry(t *testing.T) {
	ctx := context.Background()
	s := mustSim(t, "2xH200,load=50")
	gpus, err := s.List(ctx)
	if err != nil || len(gpus) != 2 {
		t.Fatalf("List = %d GPUs, %v", len(gpus), err)
	}
	if g := gpus[1]; g.Model != "H200" || g.ComputeCapability != "9.0" || g.VRAMBytes != 141<<30 || g.UUID == gpus[0].UUID {
		t.Errorf("gpu 1 = %+v", g)
	}
	tel, err := s.Sample(ctx, 1)
	if err != nil || tel.UtilPercent != 50 || tel.PowerWatts != 385 || len(tel.Processes) != 1 {
		t.Errorf("Sample = %+v, %v", tel, err)
	}
	if _, err := s.Sample(ctx, 2); gpuwarden.ErrorCodeOf(err) != gpuwarden.ENotFound {
		t.Errorf("Sample(2) err = %v, want not found", err)
	}
	d, _ := s.Driver(ctx)
	if d.Version != DriverVersion || d.CUDAVersion != "13.0" {
		t.Errorf("driver = %+v", d)
	}
}

func TestFaults(t *testing.T) {
	ctx := context.Background()
	h, _ := mustSim(t, "2xH100,fault=xid@1").Health(ctx, 1)
	if len(h.XIDs) != 1 || h.XIDs[0].XID != 79 || !h.Faulty() {
		t.Errorf("xid health = %+v", h)
	}
	h, _ = mustSim(t, "2xH100,fault=xid@1").Health(ctx, 0)
	if h.Faulty() {
		t.Errorf("GPU 0 should be healthy: %+v", h)
	}
	h, _ = mustSim(t, "1xA100-80GB,fault=ecc").Health(ctx, 0)
	if h.ECCVolatileUncorrected != 1 || !h.Faulty() {
		t.Errorf("ecc health = %+v", h)
	}
	if _, err := mustSim(t, "nodriver").List(ctx); gpuwarden.ErrorCodeOf(err) != gpuwarden.EEnvironment {
		t.Errorf("nodriver err = %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := mustSim(t, "1xH100,fault=nvml-hang").List(short); err == nil || time.Since(start) > 2*time.Second {
		t.Errorf("nvml-hang: err %v after %v", err, time.Since(start))
	}
}

func TestHangParsesItsDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"1xH100,fault=nvml-hang", 0},
		{"1xH100,fault=nvml-hang:5s", 5 * time.Second},
		{"1xH100,fault=nvml-hang:3", 3 * time.Second},
		{"1xH100,fault=nvml-hang:250ms", 250 * time.Millisecond},
	}
	for _, tt := range tests {
		spec, err := ParseSpec(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := spec.Faults[0].For; got != tt.want {
			t.Errorf("%s: hang for %v, want %v", tt.in, got, tt.want)
		}
	}
}

// TestHangClears: a hang with a duration blocks every call until its
// deadline, then the simulated driver answers again.
func TestHangClears(t *testing.T) {
	s := mustSim(t, "1xH100,fault=nvml-hang:300ms")
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := s.Sample(short, 0)
	if !errors.Is(err, gpuwarden.ErrNoAnswer) || gpuwarden.UnknownReasonOf(err) != gpuwarden.UnknownTimeout {
		t.Fatalf("hung Sample err = %v, want ErrNoAnswer", err)
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := s.Sample(context.Background(), 0); err != nil {
		t.Errorf("Sample after the hang cleared: %v", err)
	}
}

// TestMIG: under MIG the device's utilization and process list are
// unknown, never 0, and each instance has its memory and processes.
func TestMIG(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		spec      string
		procs     int
		usedAbove uint64
	}{{"1xH100,load=80,mig=2", 1, 25 << 30}, {"1xH100,mig=2", 0, 0}} {
		s := mustSim(t, tt.spec)
		gpus, _ := s.List(ctx)
		if !gpus[0].MIG || len(gpus[0].MIGInstances) != 2 || gpus[0].MIGInstances[1].Profile != "3g.40gb" {
			t.Fatalf("%s: inventory %+v", tt.spec, gpus[0])
		}
		tel, err := s.Sample(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if tel.Known(gpuwarden.FieldUtil) || tel.Known(gpuwarden.FieldProcesses) || tel.Unknown[gpuwarden.FieldUtil] != gpuwarden.UnknownMIG {
			t.Errorf("%s: device util/processes known under MIG: %+v", tt.spec, tel.Unknown)
		}
		if len(tel.MIG) != 2 {
			t.Fatalf("%s: %d MIG samples, want 2", tt.spec, len(tel.MIG))
		}
		for _, m := range tel.MIG {
			if len(m.Processes) != tt.procs || (tt.usedAbove > 0 && m.MemUsedBytes < tt.usedAbove) || m.Known(gpuwarden.FieldUtil) {
				t.Errorf("%s: instance %+v", tt.spec, m)
			}
		}
		b, _ := json.Marshal(tel)
		if !strings.Contains(string(b), `"util_percent":null`) {
			t.Errorf("%s: JSON writes unknown utilization as a number: %s", tt.spec, b)
		}
		h, _ := s.Health(ctx, 0)
		if _, unknown := h.Unknown["remap_pending"]; !unknown {
			t.Errorf("%s: row remap known under MIG: %+v", tt.spec, h)
		}
	}
}

func TestXIDSources(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		spec  string
		blind bool
		kmsg  bool
	}{
		{"1xH100", false, true},
		{"1xH100,fault=no-kmsg", false, false},
		{"1xH100,fault=no-kmsg,fault=no-nvml-events", true, false},
	}
	for _, tt := range tests {
		h, err := mustSim(t, tt.spec).Health(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := gpuwarden.XIDBlind(h.XIDSources); got != tt.blind || h.XIDSources[0].Live != tt.kmsg {
			t.Errorf("%s: sources %+v, blind %v, want blind %v kmsg %v", tt.spec, h.XIDSources, got, tt.blind, tt.kmsg)
		}
	}
}

func TestProbe(t *testing.T) {
	ctx := context.Background()
	s := mustSim(t, "1xH200")
	req := gpuwarden.ProbeRequest{AllocBytes: 1 << 30, Seed: 7}
	r, err := s.Probe(ctx, req)
	if err != nil || r.VerifyErrors != 0 || r.VerifiedWords != 1<<28 || r.DeviceCopyGBs < 4000 {
		t.Errorf("probe = %+v, %v", r, err)
	}
	req.VerifySeed = 8
	if r, _ := s.Probe(ctx, req); r.VerifyErrors != r.VerifiedWords {
		t.Errorf("wrong seed: %d errors of %d words, want all", r.VerifyErrors, r.VerifiedWords)
	}
	if r, _ := mustSim(t, "1xH200,fault=verify").Probe(ctx, gpuwarden.ProbeRequest{AllocBytes: 1 << 20, Seed: 1}); r.VerifyErrors == 0 {
		t.Error("planted verify fault found no errors")
	}
	if _, err := s.Probe(ctx, gpuwarden.ProbeRequest{AllocBytes: 200 << 30}); err == nil {
		t.Error("allocating 200 GiB on a 141 GB card succeeded")
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := mustSim(t, "1xH100,fault=hang").Probe(short, req); err == nil {
		t.Error("hang fault returned no error")
	}
}

// FuzzParseSpec: any text either parses into a spec the simulation can
// build, or is an invalid-input error; it never panics.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{"2xH100", "1xH100,load=80,mig=2", "1xH100,fault=nvml-hang:5s,fault=no-kmsg", "nodriver",
		"2xA100-80GB,fault=ecc@1,fault=xid:48@0", "1xH100,mig=0", "1xH100,fault=nvml-hang:-1s", "x,,=", "1xH100,fault=xid:@"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := ParseSpec(s)
		if err != nil {
			if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
				t.Fatalf("ParseSpec(%q) = %v, not an invalid-input error", s, err)
			}
			return
		}
		if spec.Count < 1 || spec.MIG < 0 || spec.MIG > maxMIG {
			t.Fatalf("ParseSpec(%q) = %+v out of range", s, spec)
		}
		for _, f := range spec.Faults {
			if f.For < 0 || f.GPU >= spec.Count {
				t.Fatalf("ParseSpec(%q) fault %+v out of range", s, f)
			}
		}
	})
}
