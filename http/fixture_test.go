package http

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	nethttp "net/http"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// fixtureNow is the agent's clock in every fixture.
var fixtureNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

const gib = 1 << 30

// fixtureStatus is a busy-looking H200 pair: one card working and power
// capped, one idle, an idle clock running in dry-run, spend in euros.
func fixtureStatus() gpuwarden.AgentStatus {
	return gpuwarden.AgentStatus{
		Node:    "gpu-node-1",
		Started: fixtureNow.Add(-3 * time.Hour),
		Now:     fixtureNow,
		Driver:  &gpuwarden.Driver{Version: "580.159.04", CUDAVersion: "13.0"},
		GPUs: []gpuwarden.GPU{
			{Index: 0, UUID: "GPU-0000aaaa", Name: "NVIDIA H200", Model: "H200", VRAMBytes: 141 * gib, ComputeCapability: "9.0", PowerLimitWatts: 700},
			{Index: 1, UUID: "GPU-1111bbbb", Name: "NVIDIA H200", Model: "H200", VRAMBytes: 141 * gib, ComputeCapability: "9.0", PowerLimitWatts: 700},
		},
		Last: gpuwarden.NodeSample{
			Time: fixtureNow,
			Host: gpuwarden.HostSample{
				Time: fixtureNow, CPUPercent: 12.5, IOWaitPercent: 1.5, Load1: 3.25,
				MemUsedBytes: 32 * gib, MemTotalBytes: 64 * gib,
				DiskReadBps: 1 << 20, DiskWriteBps: 2 << 20, NetRxBps: 125000, NetTxBps: 250000,
				Sessions: 1,
			},
			GPUs: []gpuwarden.Telemetry{
				{
					Index: 0, Time: fixtureNow, UtilPercent: 37, MemUtilPercent: 20,
					MemUsedBytes: 64 * gib, MemTotalBytes: 141 * gib, PowerWatts: 412.5, TempC: 61,
					SMClockMHz: 1980, MemClockMHz: 3201, ThrottleReasons: []string{"sw_power_cap"},
					Processes: []gpuwarden.GPUProcess{{PID: 4242, Name: "python", UsedBytes: 60 * gib}, {PID: 4243, Name: "nccl-worker", UsedBytes: 4 * gib}},
				},
				{
					Index: 1, Time: fixtureNow, UtilPercent: 0, MemUtilPercent: 0,
					MemUsedBytes: 0, MemTotalBytes: 141 * gib, PowerWatts: 75, TempC: 33,
					SMClockMHz: 345, MemClockMHz: 3201, ThrottleReasons: []string{"gpu_idle"},
				},
			},
		},
		Idle: gpuwarden.IdleState{
			Idle: true, Since: fixtureNow.Add(-10 * time.Minute), WindowSeconds: 1800,
			StopAt: fixtureNow.Add(20 * time.Minute), DryRun: true,
		},
		Budget: gpuwarden.BudgetState{
			Month: "2026-11", Currency: "EUR", Limit: 252000, Spent: 123456, Forecast: 280010, HourlyRate: 3790142,
		},
		Diagnosis: gpuwarden.Diagnosis{
			Verdict: "oversized", Detail: "GPU memory stayed under 50% for 2h: a smaller card fits this job",
			WindowSeconds: 7200, GPUUtilAvg: 18.5, GPUMemAvg: 22, CPUAvg: 12, IOWaitAvg: 1,
		},
		Events: []gpuwarden.Event{
			{Time: fixtureNow.Add(-50 * time.Minute), Kind: "agent-start", Severity: gpuwarden.SeverityInfo, Message: "agent started"},
			{Time: fixtureNow.Add(-10 * time.Minute), Kind: "idle", Severity: gpuwarden.SeverityWarning, Message: "box idle; stop in 30m (dry run)"},
			{Time: fixtureNow.Add(-5 * time.Minute), Kind: "budget", Severity: gpuwarden.SeverityCritical, Message: "forecast €2,800.10 is over the €2,520.00 limit", Key: "budget-forecast-100-2026-11"},
		},
		Notices: []gpuwarden.Notice{
			{Provider: "gcp", Kind: gpuwarden.NoticeMaintenance, At: fixtureNow.Add(2 * time.Hour), Detail: "MIGRATE_ON_HOST_MAINTENANCE", ID: "gcp-maint-1"},
		},
		Jobs: []gpuwarden.SupervisedJob{{ID: "run-4242", State: "running", Seen: fixtureNow,
			Sync: &gpuwarden.SyncReport{Target: "s3://ckpts/job", Uploaded: 6, Failed: 1, NewestCommitted: "000007-step-000140",
				NewestDurable: &gpuwarden.DurableCheckpoint{Name: "000006-step-000120", Step: 120, Committed: fixtureNow.Add(-12 * time.Minute),
					URL: "s3://ckpts/job/000006-step-000120"},
				Failures: []gpuwarden.SyncFailure{{Checkpoint: "000007-step-000140", Error: "503 Service Unavailable"}}}}},
		IdleSecondsTotal: 4321.5,
	}
}

// fixtureStatusN is the fixture with n identical working GPUs, for the
// benchmark.
func fixtureStatusN(n int) gpuwarden.AgentStatus {
	st := fixtureStatus()
	g, t := st.GPUs[0], st.Last.GPUs[0]
	st.GPUs, st.Last.GPUs = nil, nil
	for i := range n {
		g.Index, t.Index = i, i
		g.UUID = fmt.Sprintf("GPU-%08d", i)
		st.GPUs = append(st.GPUs, g)
		st.Last.GPUs = append(st.Last.GPUs, t)
	}
	return st
}

// fixtureHistory is an hour of 10-second samples with a five-minute hole
// in the middle, as after an agent restart.
func fixtureHistory(now time.Time) []gpuwarden.NodeSample {
	var out []gpuwarden.NodeSample
	for t := now.Add(-time.Hour).Add(10 * time.Second); !t.After(now); t = t.Add(10 * time.Second) {
		if t.After(now.Add(-32*time.Minute)) && t.Before(now.Add(-27*time.Minute)) {
			continue
		}
		m := t.Sub(now.Add(-time.Hour)).Minutes()
		out = append(out, gpuwarden.NodeSample{
			Time: t,
			Host: gpuwarden.HostSample{Time: t, CPUPercent: 10 + m/6, IOWaitPercent: 1},
			GPUs: []gpuwarden.Telemetry{
				{Index: 0, Time: t, UtilPercent: m * 100 / 60},
				{Index: 1, Time: t, UtilPercent: 0},
			},
		})
	}
	return out
}

// fakeAgent stands in for the agent: a status that tests may change and a
// history that remembers what it was asked.
type fakeAgent struct {
	mu         sync.Mutex
	st         gpuwarden.AgentStatus
	samples    []gpuwarden.NodeSample
	historyErr error
	since      time.Time
	// block, when set, holds history calls until it is closed; entered
	// tells the test a call is waiting.
	block   chan struct{}
	entered chan struct{}
}

func newFakeAgent(st gpuwarden.AgentStatus) *fakeAgent {
	return &fakeAgent{st: st, samples: fixtureHistory(fixtureNow)}
}

func (f *fakeAgent) status() gpuwarden.AgentStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}

func (f *fakeAgent) setStatus(st gpuwarden.AgentStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st = st
}

func (f *fakeAgent) history(ctx context.Context, since time.Time) ([]gpuwarden.NodeSample, error) {
	f.mu.Lock()
	f.since = since
	block, entered := f.block, f.entered
	err := f.historyErr
	var out []gpuwarden.NodeSample
	for _, s := range f.samples {
		if !s.Time.Before(since) {
			out = append(out, s)
		}
	}
	f.mu.Unlock()
	if entered != nil {
		entered <- struct{}{}
	}
	if block != nil {
		<-block
	}
	return out, err
}

func (f *fakeAgent) lastSince() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.since
}

// startServer serves a fake agent on a free loopback port until the test
// ends, and fails the test if the server does not stop cleanly.
func startServer(t testing.TB, agent *fakeAgent) (*Server, string) {
	t.Helper()
	srv := NewServer(agent.status, agent.history, nil)
	srv.Now = func() time.Time { return fixtureNow }
	ctx, cancel := context.WithCancel(context.Background())
	addr, err := srv.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		cancel()
		t.Fatalf("Serve: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := srv.Wait(); err != nil {
			t.Errorf("Wait: %v", err)
		}
	})
	return srv, "http://" + addr
}

// get fetches a URL and returns the response with its body read.
func get(t testing.TB, method, url string) (*nethttp.Response, []byte) {
	t.Helper()
	req, err := nethttp.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := nethttp.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return resp, body
}

// errorOf decodes the JSON error body every failure answers with.
func errorOf(t testing.TB, body []byte) errorBody {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("error body is not JSON: %v\n%s", err, body)
	}
	if e.Error == "" {
		t.Fatalf("error body has no message: %s", body)
	}
	return e
}
