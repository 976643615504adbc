package gpusim

import (
	"context"
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
