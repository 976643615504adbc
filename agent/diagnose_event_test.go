package agent

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/gpusim"
)

// loadGPUs is gpusim's GPUs with a utilization and memory use the test
// turns, as a job would that starts, runs hot and goes quiet again.
type loadGPUs struct {
	*gpusim.Sim
	mu        sync.Mutex
	util, mem float64
}

func (g *loadGPUs) set(util, mem float64) {
	g.mu.Lock()
	g.util, g.mem = util, mem
	g.mu.Unlock()
}

func (g *loadGPUs) Sample(ctx context.Context, i int) (gpuwarden.Telemetry, error) {
	t, err := g.Sim.Sample(ctx, i)
	if err != nil {
		return t, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	t.UtilPercent = g.util
	t.MemUsedBytes = uint64(g.mem / 100 * float64(t.MemTotalBytes))
	// A process keeps the idle policy from stopping the box mid-test.
	t.Processes = []gpuwarden.GPUProcess{{PID: 4242 + i, Name: "python", UsedBytes: t.MemUsedBytes}}
	return t, nil
}

// TestOversizedEventOncePerEpisode runs the agent through phases of load
// and checks that a diagnosis-oversized event is recorded once per
// episode, only over a full window, with the figures in its data, and
// that the shipper carries it to the fleet server.
func TestOversizedEventOncePerEpisode(t *testing.T) {
	const window = 20 * time.Second
	type phase struct {
		name       string
		util, mem  float64
		ticks      int
		wantEvents int // diagnosis-oversized events recorded so far
	}
	tests := []struct {
		name   string
		phases []phase
	}{
		{"quiet box, one episode", []phase{
			{"under a full window: no verdict to record", 10, 12, 15, 0},
			{"full window, oversized", 10, 12, 10, 1},
			{"still oversized: no second event", 10, 12, 60, 1},
		}},
		{"two episodes", []phase{
			{"oversized", 8, 20, 25, 1},
			{"busy: the episode ends", 90, 70, 25, 1},
			{"oversized again: a new episode", 8, 20, 25, 2},
		}},
		{"busy box", []phase{
			{"healthy", 85, 60, 40, 0},
		}},
		{"little util but much memory", []phase{
			{"not oversized: memory is used", 10, 60, 40, 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			spec, err := gpusim.ParseSpec("2xH100")
			if err != nil {
				t.Fatal(err)
			}
			g := &loadGPUs{Sim: gpusim.New(spec)}
			a := h.agentOn(g, Config{DiagnosisWindow: window})
			ctx := context.Background()
			for _, p := range tt.phases {
				g.set(p.util, p.mem)
				for range p.ticks {
					h.clock.add(time.Second)
					a.Tick(ctx)
				}
				if got := h.count(gpuwarden.EventDiagnosisOversized); got != p.wantEvents {
					t.Fatalf("%s: %d %s events, want %d (verdict %q: %s)", p.name, got, gpuwarden.EventDiagnosisOversized,
						p.wantEvents, a.Status().Diagnosis.Verdict, a.Status().Diagnosis.Detail)
				}
			}
		})
	}
}

// TestOversizedEventCarriesTheFigures checks the event's data and words,
// and that the shipper sends it to the fleet server as it is.
func TestOversizedEventCarriesTheFigures(t *testing.T) {
	h := newHarness(t)
	spec, err := gpusim.ParseSpec("2xH100")
	if err != nil {
		t.Fatal(err)
	}
	g := &loadGPUs{Sim: gpusim.New(spec)}
	g.set(10, 12.5)
	a := h.agentOn(g, Config{DiagnosisWindow: 20 * time.Second})
	ctx := context.Background()
	var start time.Time
	for range 30 {
		h.clock.add(time.Second)
		a.Tick(ctx)
		if start.IsZero() && h.count(gpuwarden.EventDiagnosisOversized) == 1 {
			start = h.clock.now()
		}
	}
	u := &fakeUplink{}
	if err := h.shipper(u).Ship(ctx, h.clock.now()); err != nil {
		t.Fatal(err)
	}
	var got []gpuwarden.Event
	u.mu.Lock()
	for _, e := range u.events {
		if e.Kind == gpuwarden.EventDiagnosisOversized {
			got = append(got, e)
		}
	}
	u.mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("shipped %d %s events, want 1 (kinds %v)", len(got), gpuwarden.EventDiagnosisOversized, u.kinds())
	}
	e := got[0]
	// The first full window spans 19 s: 20 samples a second apart.
	want := map[string]string{gpuwarden.DataUtilAvg: "10.0", gpuwarden.DataMemAvg: "12.5", gpuwarden.DataGPUModel: "H100-SXM",
		gpuwarden.DataGPUCount: "2", gpuwarden.DataWindowSeconds: "19"}
	for k, v := range want {
		if e.Data[k] != v {
			t.Errorf("data[%s] = %q, want %q (data %v)", k, e.Data[k], v, e.Data)
		}
	}
	if wantKey := "oversized-" + start.UTC().Format(time.RFC3339); e.Key != wantKey {
		t.Errorf("key %q, want %q", e.Key, wantKey)
	}
	if e.Severity != gpuwarden.SeverityInfo {
		t.Errorf("severity %q, want %q", e.Severity, gpuwarden.SeverityInfo)
	}
	for _, w := range []string{"2× H100-SXM", "10.0%", "12.5%", "--label replaces=box-1"} {
		if !strings.Contains(e.Message, w) {
			t.Errorf("message %q lacks %q", e.Message, w)
		}
	}
}

// count is how many events of a kind the agent's ledger holds.
func (h *harness) count(kind string) int {
	n := 0
	for _, k := range h.events() {
		if k == kind {
			n++
		}
	}
	return n
}
