package agent

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/gpusim"
)

// TestUnknownIsNeverIdle: a GPU whose utilization the driver does not give
// keeps the box up, with a reason that says so. The old policy read the
// missing utilization as 0 % and stopped a busy MIG box.
func TestUnknownIsNeverIdle(t *testing.T) {
	tests := []struct {
		name, spec string
		busy       string // a busy reason that must be there
		stops      bool
	}{
		{name: "busy MIG instances", spec: "1xH100,load=80,mig=2", busy: "GPU 0 MIG 1 (3g.40gb) runs PID"},
		{name: "empty MIG instances", spec: "1xH100,mig=2", stops: true},
		{name: "utilization unknown", spec: "1xH100,blind=util", busy: "GPU 0: utilization unknown (not supported); idle needs"},
		{name: "instance memory unknown", spec: "1xH100,mig=2,blind=migmem", busy: "processes or memory unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			a := h.agentOn(blindSim(t, tt.spec), idleConfig())
			for range 6 {
				a.Tick(context.Background())
				h.clock.add(time.Second)
			}
			st := a.Status()
			if got := h.stops > 0; got != tt.stops {
				t.Fatalf("stopped = %v, want %v; busy %q, events %v", got, tt.stops, st.Idle.Busy, h.events())
			}
			if tt.busy != "" && !strings.Contains(strings.Join(st.Idle.Busy, "; "), tt.busy) {
				t.Errorf("busy reasons %q, want one with %q", st.Idle.Busy, tt.busy)
			}
			if tt.busy != "" && st.Diagnosis.Verdict == "idle" {
				t.Errorf("diagnosis says idle on a GPU it cannot read: %+v", st.Diagnosis)
			}
		})
	}
}

// TestTelemetryLost: a driver that stops answering raises telemetry-lost
// once after three failed samples, keeps the idle clock and the budget stop
// still while it lasts, and gives an all-clear when the GPUs answer again.
// The old agent did not start at all on a hung driver, and once running it
// logged the failures and let the idle clock run.
func TestTelemetryLost(t *testing.T) {
	h := newHarness(t)
	cfg := idleConfig()
	cfg.Interval = 50 * time.Millisecond
	cfg.Budget = BudgetConfig{Currency: "USD", Limit: 3_00, StopAtLimit: true,
		HourlyRate: 3600 * gpuwarden.MicrosPerUnit} // $1 a second: at the limit by the fourth tick, after telemetry is lost
	s, err := gpusim.ParseSpec("1xH100,fault=nvml-hang:2s")
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	a := h.agentOn(gpusim.New(s), cfg)
	ctx := context.Background()
	for i := range 6 {
		a.Tick(ctx)
		h.clock.add(time.Second)
		st := a.Status()
		if i < lostAfter-1 && st.Telemetry.Lost {
			t.Fatalf("tick %d: telemetry lost after %d failures, want %d", i, st.Telemetry.Failures, lostAfter)
		}
		if st.Idle.Idle {
			t.Fatalf("tick %d: the idle clock runs on GPUs nobody can read: %+v", i, st.Idle)
		}
	}
	st := a.Status()
	if !st.Telemetry.Lost || st.Telemetry.Failures != 6 || !slices.ContainsFunc(st.Warnings, func(w string) bool { return strings.Contains(w, "telemetry lost") }) {
		t.Fatalf("status telemetry %+v, warnings %q", st.Telemetry, st.Warnings)
	}
	if got, want := h.events(), []string{"telemetry-lost"}; !slices.Equal(got, want) {
		t.Fatalf("events while blind %v, want %v (no budget-stop, no idle stop)", got, want)
	}
	// Past the hang, the simulated driver answers: the inventory is read,
	// the all-clear goes out once, and the policies apply again.
	time.Sleep(time.Until(started.Add(2100 * time.Millisecond)))
	for range 3 {
		a.Tick(ctx)
		h.clock.add(time.Second)
	}
	st = a.Status()
	if st.Telemetry.Lost || st.Telemetry.Failures != 0 || len(st.GPUs) != 1 || len(st.Last.GPUs) != 1 || st.Last.GPUs[0].Unread() {
		t.Errorf("after recovery: telemetry %+v, %d GPUs, last %+v", st.Telemetry, len(st.GPUs), st.Last.GPUs)
	}
	got := h.events()
	if n := strings.Count(strings.Join(got, ","), "telemetry-lost"); n != 1 {
		t.Errorf("telemetry-lost raised %d times: %v", n, got)
	}
	if !slices.Contains(got, "telemetry-restored") || !slices.Contains(got, "budget-stop") {
		t.Errorf("events after recovery %v, want telemetry-restored and the budget stop that waited", got)
	}
	// The all-clear resolves the lost alert by its key (a PagerDuty
	// resolve on the same dedup_key).
	evs, err := h.ledger.Events(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]gpuwarden.Event{}
	for _, e := range evs {
		keys[e.Kind] = e
	}
	if lost, back := keys["telemetry-lost"], keys["telemetry-restored"]; back.Data[gpuwarden.DataResolves] != lost.Key {
		t.Errorf("telemetry-restored resolves %q, want the lost alert's key %q", back.Data[gpuwarden.DataResolves], lost.Key)
	}
}

func TestXIDSourceWarnings(t *testing.T) {
	tests := []struct {
		spec, want string
	}{
		{"1xH100", ""},
		{"1xH100,fault=no-kmsg", "Xid source unavailable: kmsg unavailable (open /dev/kmsg: permission denied (simulated))"},
		{"1xH100,fault=no-kmsg,fault=no-nvml-events", "Xid source unavailable: no Xid would be seen"},
	}
	for _, tt := range tests {
		h := newHarness(t)
		s, _ := gpusim.ParseSpec(tt.spec)
		a := h.agentOn(gpusim.New(s), idleConfig())
		a.Tick(context.Background())
		st := a.Status()
		got := strings.Join(st.Warnings, "; ")
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("%s: warnings %q, want %q", tt.spec, got, tt.want)
		}
		if len(st.XIDSources) != 2 {
			t.Errorf("%s: xid sources %+v", tt.spec, st.XIDSources)
		}
	}
}

// blind wraps a simulation and hides fields, as drivers do: "blind=util"
// makes the device utilization unknown, "blind=migmem" the instances'
// memory and processes.
type blind struct {
	*gpusim.Sim
	what string
}

func blindSim(t *testing.T, spec string) gpuwarden.GPUs {
	t.Helper()
	spec, what, _ := strings.Cut(spec, ",blind=")
	s, err := gpusim.ParseSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	return &blind{gpusim.New(s), what}
}

func (b *blind) Sample(ctx context.Context, i int) (gpuwarden.Telemetry, error) {
	t, err := b.Sim.Sample(ctx, i)
	switch b.what {
	case "util":
		t.UtilPercent = 0
		t.SetUnknown(gpuwarden.FieldUtil, gpuwarden.UnknownNotSupported)
	case "migmem":
		for m := range t.MIG {
			t.MIG[m].SetUnknown(gpuwarden.FieldMemUsed, gpuwarden.UnknownError)
			t.MIG[m].SetUnknown(gpuwarden.FieldProcesses, gpuwarden.UnknownError)
		}
	}
	return t, err
}
