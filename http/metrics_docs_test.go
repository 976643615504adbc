package http

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// docTableSeries is the first cell of a docs/metrics.md table row.
var docTableSeries = regexp.MustCompile("(?m)^\\| `(gpuwarden_[a-z0-9_]+)` \\|")

// TestMetricsDocumented: every gpuwarden_ series the agent and the fleet
// server expose has its row in docs/metrics.md, and every row names a
// series one of them exposes.
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range docTableSeries.FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = true
	}

	exposed := map[string]bool{}
	// The agent, with every optional family present: counters, retired
	// pages (a pre-Ampere card), a budget limit.
	st := healthStatus()
	st.Health[1].Counters.RetiredPages = u64(2)
	st.Last.Host.Counters = &gpuwarden.HostCounters{HasDisk: true, HasNet: true}
	// An unread field and the Xid sources.
	st.Last.GPUs[0].Unknown = map[string]string{"util_percent": gpuwarden.UnknownMIG}
	st.XIDSources = []gpuwarden.XIDSource{{Name: gpuwarden.XIDSourceKmsg, Live: true}}
	// An idle stop, proven.
	st.Stop = &gpuwarden.StopReport{Method: gpuwarden.StopAzureDeallocate, StopsBilling: true,
		Proof: &gpuwarden.StopProof{Method: gpuwarden.StopAzureDeallocate, Proven: true, At: fixtureNow}}
	// A cloud notice source the agent polls.
	st.NoticeSource = &gpuwarden.NoticeSourceState{Cloud: "azure", Up: true}
	// A GPU the kubelet allocated to a container.
	st.GPUs[0].Pods = []gpuwarden.PodRef{{Namespace: "ml", Pod: "train-0", Container: "trainer"}}
	// A MIG instance, read in full.
	st.Last.GPUs[0].MIG = []gpuwarden.MIGSample{{MIGInstance: gpuwarden.MIGInstance{Index: 0, UUID: "MIG-0", Profile: "3g.40gb", MemTotalBytes: 40 << 30}, UtilPercent: 50, MemUsedBytes: 1 << 30}}
	mfs, err := newRegistry(func() gpuwarden.AgentStatus { return st }, func() gpuwarden.Node { return healthNode }).Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		exposed[mf.GetName()] = true
	}
	// The agent's savings ledger, with one event.
	ledger := agentLedger(t, agentSaving(gpuwarden.SavingIdleStop, 2520, ""))
	reg := prometheus.NewRegistry()
	reg.MustRegister(savingsCollector{ledger: func() gpuwarden.SavingsLedger { return ledger }})
	mfs, err = reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		exposed[mf.GetName()] = true
	}
	// The fleet server, with a node and an orphan.
	f := newFleetFixture(t, nil)
	if err := f.store.PutProject(context.Background(), gpuwarden.Project{Name: "vision", Budget: 500000, Currency: "EUR", Created: fixtureNow}); err != nil {
		t.Fatal(err)
	}
	agent := f.token("vision", "agent")
	f.register(agent, node("n-1", ""))
	// A box powered off where that bills: the after-stop series show.
	f.register(agent, node("n-off", "ana"))
	off := gpuwarden.Heartbeat{Node: "n-off", Time: fixtureNow, State: gpuwarden.NodePoweredOffStillBilling,
		Stop: &gpuwarden.StopReport{Method: gpuwarden.StopOSShutdown, StillBillsHourly: 3_500_000, Currency: "EUR"}}
	if code, body, _ := f.call("POST", "/api/v1/heartbeat", agent, off); code != 204 {
		t.Fatalf("heartbeat: %d %s", code, body)
	}
	f.advance(time.Minute)
	code, body, _ := f.call("GET", "/metrics", f.token("*", "viewer"), nil)
	if code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fleet, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for name := range fleet {
		exposed[name] = true
	}

	for name := range exposed {
		if strings.HasPrefix(name, "gpuwarden_") && !documented[name] {
			t.Errorf("%s is exposed but has no row in docs/metrics.md", name)
		}
	}
	for name := range documented {
		if !exposed[name] {
			t.Errorf("docs/metrics.md documents %s, which neither the agent nor the server exposes", name)
		}
	}
	if n := len(documented); n < 50 {
		t.Errorf("docs/metrics.md has %d series rows; the parse is likely broken", n)
	}
}
