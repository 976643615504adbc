package report

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// now is the fixture's clock: 252 hours before the end of November 2026.
var now = time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) time.Time { return now.Add(-d) }

func eur(s string) gpuwarden.Micros {
	m, err := gpuwarden.ParseMicros(s)
	if err != nil {
		panic(err)
	}
	return m
}

func hour(node string, at time.Time, minutes int, cost string, cur gpuwarden.Currency, util ...float64) gpuwarden.NodeHour {
	return gpuwarden.NodeHour{Node: node, Hour: at, Minutes: minutes, Cost: eur(cost), Currency: cur, GPUUtil: util}
}

func event(node, kind string, at time.Time, data map[string]string) gpuwarden.NodeEvent {
	return gpuwarden.NodeEvent{Node: node, Event: gpuwarden.Event{Time: at, Kind: kind, Data: data}}
}

func burnin(node, verdict string, at time.Time) gpuwarden.NodeEvent {
	return event(node, KindBurnin, at, map[string]string{"node": node, "verdict": verdict})
}

func runEvent(node, class string, exit int, restarts map[string]int, at time.Time) gpuwarden.NodeEvent {
	b, _ := json.Marshal(gpuwarden.RunReport{JobClass: class, JobExitCode: exit, Restarts: restarts})
	return event(node, KindRunReport, at, map[string]string{"report": string(b)})
}

func progress(node, unit, count string, at time.Time) gpuwarden.NodeEvent {
	return event(node, KindProgress, at, map[string]string{"unit": unit, "count": count})
}

// fixture is a small fleet with every case the reports must handle:
//
//	a  ml/alice/aws       €3.50/h running, 2 GPUs, healthy
//	b  ml/bob/hetzner     €2.00/h running
//	c  ml, no labels      lost two hours ago (no currency: the project's EUR)
//	d  web/carol/aws      $4.00/h stopped
//	e  web/carol/aws      $1.50/h running, idle 6h 10m, TTL 24h ran out 3h ago
//	f  web/dave/lambda    €1.00/h stopping, EUR in a USD project
//	gone                  hours, but the ledger no longer lists it
func fixture() Input {
	reg := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	return Input{
		Now: now,
		Projects: []gpuwarden.Project{
			{Name: "ml", Budget: 500000, Currency: "EUR"},
			{Name: "web", Budget: 100000, Currency: "USD"},
			{Name: "research", Currency: "EUR"},
		},
		Nodes: []gpuwarden.Node{
			{ID: "a", Project: "ml", Hostname: "a.example", Registered: reg, LastSeen: ago(time.Minute),
				Labels: gpuwarden.NodeLabels{Owner: "alice", Provider: "aws", HourlyPrice: eur("3.5"), Currency: "EUR",
					LaunchedAt: reg.Add(-120 * time.Second)},
				GPUs: []gpuwarden.GPU{{Index: 0}, {Index: 1}},
				Live: gpuwarden.Heartbeat{State: gpuwarden.NodeRunning}},
			{ID: "b", Project: "ml", Hostname: "b.example", Registered: reg, LastSeen: ago(2 * time.Minute),
				Labels: gpuwarden.NodeLabels{Owner: "bob", Provider: "hetzner", HourlyPrice: eur("2"), Currency: "EUR",
					LaunchedAt: reg.Add(-300 * time.Second)},
				Live: gpuwarden.Heartbeat{State: gpuwarden.NodeRunning}},
			{ID: "c", Project: "ml", Registered: reg, LastSeen: ago(2 * time.Hour),
				Live: gpuwarden.Heartbeat{State: gpuwarden.NodeRunning}},
			{ID: "d", Project: "web", Registered: reg, LastSeen: ago(48 * time.Hour),
				Labels: gpuwarden.NodeLabels{Owner: "carol", Provider: "aws", HourlyPrice: eur("4"), Currency: "USD",
					LaunchedAt: reg.Add(-100 * time.Second)},
				Live: gpuwarden.Heartbeat{State: gpuwarden.NodeStopped}},
			{ID: "e", Project: "web", Registered: ago(27 * time.Hour), LastSeen: ago(30 * time.Second),
				Labels: gpuwarden.NodeLabels{Owner: "carol", Provider: "aws", HourlyPrice: eur("1.5"), Currency: "USD",
					TTLSeconds: 24 * 3600, LaunchedAt: ago(27*time.Hour + 1000*time.Second)},
				Live: gpuwarden.Heartbeat{State: gpuwarden.NodeRunning, IdleSince: ago(6*time.Hour + 10*time.Minute)}},
			{ID: "f", Project: "web", Registered: reg, LastSeen: ago(time.Minute),
				Labels: gpuwarden.NodeLabels{Owner: "dave", Provider: "lambda", HourlyPrice: eur("1"), Currency: "EUR"},
				Live:   gpuwarden.Heartbeat{State: gpuwarden.NodeStopping}},
		},
		Hours: []gpuwarden.NodeHour{
			hour("a", time.Date(2026, 10, 31, 23, 0, 0, 0, time.UTC), 60, "99", "EUR", 50, 50), // October: not this month
			hour("a", ago(3*time.Hour), 60, "2000", "EUR", 10, 90),
			hour("a", ago(2*time.Hour), 30, "1000", "EUR", 30, math.NaN()),
			hour("b", ago(2*time.Hour), 60, "1200", "EUR"),
			hour("c", ago(2*time.Hour), 0, "0", ""), // zero minutes, no currency
			hour("d", time.Date(2026, 11, 5, 0, 0, 0, 0, time.UTC), 60, "600", "USD", 100),
			hour("e", ago(time.Hour), 60, "1.5", "USD", 0),
			hour("f", ago(time.Hour), 60, "10", "EUR", 80),
			hour("gone", ago(time.Hour), 60, "5", "EUR", 40),
		},
		Events: []gpuwarden.NodeEvent{
			burnin("a", gpuwarden.VerdictPass, ago(100*time.Hour)),
			burnin("b", gpuwarden.VerdictFail, ago(90*time.Hour)),
			burnin("b", gpuwarden.VerdictWarn, ago(80*time.Hour)),
			event("b", KindXid, ago(70*time.Hour), map[string]string{"xid": "79"}),
			event("b", KindXid, ago(69*time.Hour), nil),
			event("b", KindECC, ago(60*time.Hour), nil),
			runEvent("a", gpuwarden.ExitOK, 0, map[string]int{gpuwarden.ExitPreempted: 1}, ago(50*time.Hour)),
			runEvent("b", gpuwarden.ExitCUDAOOM, 1, nil, ago(40*time.Hour)),
			event("a", KindPreemption, ago(52*time.Hour), nil),
			event("e", KindMaintenance, ago(5*time.Hour), nil),
			event("gone", KindRemap, ago(5*time.Hour), nil),
			progress("a", "epoch", "1", ago(3*time.Hour-10*time.Minute)),
			progress("a", "epoch", "1.5", ago(2*time.Hour-5*time.Minute)),
			progress("a", "epoch", "lots", ago(2*time.Hour)),
			progress("f", UnitRequests, "120000", ago(50*time.Minute)),
			progress("f", "", "3", ago(50*time.Minute)),
		},
	}
}

// golden compares got with testdata/NAME, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./report -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test ./report -update rewrites it)\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestHuman(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "under a minute"},
		{59 * time.Second, "under a minute"},
		{time.Minute, "1m"},
		{45*time.Minute + 59*time.Second, "45m"},
		{time.Hour, "1h"},
		{6*time.Hour + 10*time.Minute, "6h 10m"},
		{24 * time.Hour, "24h"},
		{47*time.Hour + 59*time.Minute, "47h 59m"},
		{48 * time.Hour, "2d"},
		{74*time.Hour + 30*time.Minute, "3d 2h"},
		{-2 * time.Hour, "2h"},
	}
	for _, tt := range tests {
		if got := human(tt.d); got != tt.want {
			t.Errorf("human(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestDivRound(t *testing.T) {
	tests := []struct {
		name    string
		a, m, b int64
		want    int64
	}{
		{"exact", 10, 1, 2, 5},
		{"half up", 5, 1, 2, 3},
		{"half away from zero", -5, 1, 2, -3},
		{"below half", 4, 1, 3, 1},
		{"past int64 in the middle", 1 << 62, 1000, 1000, 1 << 62},
		{"saturates", math.MaxInt64, 10, 1, math.MaxInt64},
		{"by zero", 7, 1, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := divRound(tt.a, tt.m, tt.b); got != tt.want {
				t.Errorf("divRound(%d, %d, %d) = %d, want %d", tt.a, tt.m, tt.b, got, tt.want)
			}
		})
	}
}

// TestJSONNeverNaN encodes every report of hostile inputs: NaN and infinite
// utilisation, zero-minute hours, empty input. JSON cannot carry NaN, so an
// encoding error here is a report the API could not serve.
func TestJSONNeverNaN(t *testing.T) {
	hostile := fixture()
	hostile.Hours = append(hostile.Hours,
		hour("a", ago(time.Hour), 0, "0", "EUR", math.NaN(), math.Inf(1)),
		hour("b", ago(time.Hour), 60, "1", "EUR", math.Inf(-1), 250, -5))
	for name, in := range map[string]Input{"empty": {Now: now}, "fixture": fixture(), "hostile": hostile} {
		t.Run(name, func(t *testing.T) {
			spend, err := Spend(in, ByProject, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			for what, v := range map[string]any{
				"spend":     spend,
				"orphans":   Orphans(in, OrphanOptions{}),
				"nodes":     NodeScores(in),
				"providers": ProviderScores(in),
				"heatmap":   Heatmap(in, ago(4*time.Hour), now),
				"results":   CostPerResult(in),
			} {
				b, err := json.Marshal(v)
				if err != nil {
					t.Errorf("%s: %v", what, err)
				}
				if bytes.Contains(b, []byte("null")) {
					t.Errorf("%s has a null list; the API returns [] for none: %s", what, b)
				}
			}
		})
	}
}
