package report

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

func TestNodeScoresFixture(t *testing.T) {
	want := []NodeScore{
		// b: 1 FAIL + 1 failed run + 2 Xids + 1 ECC in one up hour.
		{Node: "b", Hostname: "b.example", Project: "ml", Provider: "hetzner", BurnIns: 2, BurnInWarn: 1, BurnInFail: 1,
			LastBurnIn: "WARN", LastBurnInAt: ago(80 * time.Hour), Xids: 2, XidCodes: []uint64{79}, ECC: 1, Runs: 1, FailedRuns: 1,
			UpHours: 1, Errors: 5, ErrorRate: 500},
		// gone: the ledger no longer lists it, but its remap still counts.
		{Node: "gone", Provider: Unknown, ECC: 1, UpHours: 1, Errors: 1, ErrorRate: 100},
		// a: October's hour counts too: the report takes the period it is given.
		{Node: "a", Hostname: "a.example", Project: "ml", Provider: "aws", BurnIns: 1, BurnInPass: 1, LastBurnIn: "PASS",
			LastBurnInAt: ago(100 * time.Hour), Runs: 1, Preemptions: 1, PreemptedRestarts: 1, UpHours: 2.5},
		{Node: "c", Project: "ml", Provider: None},
		{Node: "d", Project: "web", Provider: "aws", UpHours: 1},
		{Node: "e", Project: "web", Provider: "aws", Notices: 1, UpHours: 1},
		{Node: "f", Project: "web", Provider: "lambda", UpHours: 1},
	}
	got := NodeScores(fixture())
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got:\n%+v\nwant:\n%+v", got, want)
	}
}

func TestNodeScoresEdges(t *testing.T) {
	report, _ := json.Marshal(gpuwarden.BurnReport{Node: "n", Verdict: gpuwarden.VerdictFail})
	tests := []struct {
		name string
		in   Input
		want []NodeScore
	}{
		{"no data", Input{Now: now}, []NodeScore{}},
		{"errors with no up hours use one hour", Input{Now: now, Events: []gpuwarden.NodeEvent{event("n", KindXid, now, nil)}},
			[]NodeScore{{Node: "n", Provider: Unknown, Xids: 1, Errors: 1, ErrorRate: 100}}},
		{"zero-minute hours are no up time", Input{Now: now, Hours: []gpuwarden.NodeHour{hour("n", now, 0, "1", "EUR")},
			Events: []gpuwarden.NodeEvent{event("n", KindECC, now, nil)}},
			[]NodeScore{{Node: "n", Provider: Unknown, ECC: 1, Errors: 1, ErrorRate: 100}}},
		{"rate over many hours", Input{Now: now, Hours: []gpuwarden.NodeHour{hour("n", now, 60*300, "1", "EUR")},
			Events: []gpuwarden.NodeEvent{event("n", KindXid, now, map[string]string{"xid": "48"}), event("n", KindXid, now, map[string]string{"xid": "x"})}},
			[]NodeScore{{Node: "n", Provider: Unknown, Xids: 2, XidCodes: []uint64{48}, UpHours: 300, Errors: 2, ErrorRate: 0.67}}},
		{"verdict from the report when Data has none; junk skipped", Input{Now: now, Events: []gpuwarden.NodeEvent{
			event("n", KindBurnin, ago(time.Hour), map[string]string{"report": string(report)}),
			event("n", KindBurnin, now, map[string]string{"verdict": "MAYBE"}),
			event("n", KindBurnin, now, map[string]string{"report": "{"}),
		}}, []NodeScore{{Node: "n", Provider: Unknown, BurnIns: 1, BurnInFail: 1, LastBurnIn: "FAIL", LastBurnInAt: ago(time.Hour),
			Errors: 1, ErrorRate: 100}}},
		{"same-time burn-ins: the worse verdict is the last", Input{Now: now, Events: []gpuwarden.NodeEvent{
			burnin("n", gpuwarden.VerdictWarn, now), burnin("n", gpuwarden.VerdictPass, now)}},
			[]NodeScore{{Node: "n", Provider: Unknown, BurnIns: 2, BurnInPass: 1, BurnInWarn: 1, LastBurnIn: "WARN", LastBurnInAt: now}}},
		{"undecodable run report skipped", Input{Now: now, Events: []gpuwarden.NodeEvent{
			event("n", KindRunReport, now, map[string]string{"report": "nope"})}},
			[]NodeScore{}},
		{"burn-in shipped with no node takes Data's", Input{Now: now, Events: []gpuwarden.NodeEvent{
			{Event: gpuwarden.Event{Kind: KindBurnin, Time: now, Data: map[string]string{"node": "m", "verdict": "PASS"}}}}},
			[]NodeScore{{Node: "m", Provider: Unknown, BurnIns: 1, BurnInPass: 1, LastBurnIn: "PASS", LastBurnInAt: now}}},
		{"unrelated kinds add no node", Input{Now: now, Events: []gpuwarden.NodeEvent{event("n", "budget-actual", now, nil)}},
			[]NodeScore{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NodeScores(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestRunFailed(t *testing.T) {
	tests := []struct {
		class string
		exit  int
		want  bool
	}{
		{gpuwarden.ExitOK, 0, false},
		{"success", 0, false},
		{"", 0, false},
		{"", 1, true},
		{gpuwarden.ExitPreempted, 143, true},
		{gpuwarden.ExitUser, 1, true},
		{gpuwarden.ExitGPUFault, 1, true},
	}
	for _, tt := range tests {
		if got := runFailed(gpuwarden.RunReport{JobClass: tt.class, JobExitCode: tt.exit}); got != tt.want {
			t.Errorf("runFailed(%q, exit %d) = %v, want %v", tt.class, tt.exit, got, tt.want)
		}
	}
}

// TestRunReportReadsBothVersions: a ledger keeps the run reports written
// before the job's exit code and class were named job_exit_code and
// job_class (run/v1's exit_code and class); both read as the job's.
func TestRunReportReadsBothVersions(t *testing.T) {
	tests := []struct {
		name, json string
		class      string
		exit       int
		failed     bool
	}{
		{"v1 ok", `{"exit_code":0,"class":"ok","result":"ok"}`, gpuwarden.ExitOK, 0, false},
		{"v1 failed", `{"exit_code":3,"class":"user-error","result":"user-error"}`, gpuwarden.ExitUser, 3, true},
		{"v2 not durable", `{"job_exit_code":0,"job_class":"ok","exit_code":74,"result":"not-durable"}`, gpuwarden.ExitOK, 0, false},
		{"v2 failed", `{"job_exit_code":2,"job_class":"user-error","exit_code":2,"result":"user-error"}`, gpuwarden.ExitUser, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ok := runReport(gpuwarden.Event{Kind: KindRunReport, Data: map[string]string{"report": tt.json}})
			if !ok || r.JobClass != tt.class || r.JobExitCode != tt.exit || runFailed(r) != tt.failed {
				t.Errorf("runReport(%s) = class %q exit %d failed %v, want %q %d %v", tt.json, r.JobClass, r.JobExitCode, runFailed(r), tt.class, tt.exit, tt.failed)
			}
		})
	}
}

func TestProviderScoresFixture(t *testing.T) {
	want := []ProviderScore{
		{Provider: None, Nodes: 1, Provisioning: Provisioning{Outliers: []ProvisioningOutlier{}}},
		// aws: a 120 s, d 100 s, e 1,000 s. p50 120, MAD 20, threshold 180.
		{Provider: "aws", Nodes: 3, UpHours: 4.5, Preemptions: 1, PreemptionsPer100Hours: 22.22, BurnIns: 1, Runs: 1,
			Provisioning: Provisioning{Samples: 3, MeanSeconds: 406.7, P50Seconds: 120, P95Seconds: 1000, OutlierAboveSeconds: 180,
				Outliers: []ProvisioningOutlier{{Node: "e", Seconds: 1000}}}},
		// hetzner: a FAIL and a WARN burn-in and one failed run: 2 of 3.
		{Provider: "hetzner", Nodes: 1, UpHours: 1, BurnIns: 2, FailedBurnIns: 1, Runs: 1, FailedRuns: 1, FailureRate: 0.6667,
			Provisioning: Provisioning{Samples: 1, MeanSeconds: 300, P50Seconds: 300, P95Seconds: 300, Outliers: []ProvisioningOutlier{}}},
		{Provider: "lambda", Nodes: 1, UpHours: 1, Provisioning: Provisioning{Outliers: []ProvisioningOutlier{}}},
	}
	got := ProviderScores(fixture())
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got:\n%+v\nwant:\n%+v", got, want)
	}
}

func TestProvisioning(t *testing.T) {
	samples := func(secs ...float64) []ProvisioningOutlier {
		out := make([]ProvisioningOutlier, len(secs))
		for i, s := range secs {
			out[i] = ProvisioningOutlier{Node: string(rune('a' + i)), Seconds: s}
		}
		return out
	}
	none := []ProvisioningOutlier{}
	tests := []struct {
		name string
		in   []ProvisioningOutlier
		want Provisioning
	}{
		{"none", nil, Provisioning{Outliers: none}},
		{"two samples are not judged", samples(60, 6000),
			Provisioning{Samples: 2, MeanSeconds: 3030, P50Seconds: 60, P95Seconds: 6000, Outliers: none}},
		// MAD is 0 here; the 10 % floor keeps seconds of noise from counting.
		{"near-equal boots have no outlier", samples(60, 61, 62, 60),
			Provisioning{Samples: 4, MeanSeconds: 60.8, P50Seconds: 60, P95Seconds: 62, OutlierAboveSeconds: 78, Outliers: none}},
		{"one slow boot among equals", samples(60, 60, 600, 60),
			Provisioning{Samples: 4, MeanSeconds: 195, P50Seconds: 60, P95Seconds: 600, OutlierAboveSeconds: 78,
				Outliers: []ProvisioningOutlier{{Node: "c", Seconds: 600}}}},
		// p50 110, deviations 0 10 10 20 30 290 390 → MAD 20, threshold 170.
		{"spread", samples(100, 90, 110, 80, 120, 400, 500),
			Provisioning{Samples: 7, MeanSeconds: 200, P50Seconds: 110, P95Seconds: 500, OutlierAboveSeconds: 170,
				Outliers: []ProvisioningOutlier{{Node: "g", Seconds: 500}, {Node: "f", Seconds: 400}}}},
		{"at the threshold is not above it", samples(100, 100, 130),
			Provisioning{Samples: 3, MeanSeconds: 110, P50Seconds: 100, P95Seconds: 130, OutlierAboveSeconds: 130, Outliers: none}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := provisioning(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestNearestRank(t *testing.T) {
	ten := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	tests := []struct {
		name string
		in   []float64
		p    float64
		want float64
	}{
		{"empty", nil, 50, 0},
		{"one", []float64{7}, 95, 7},
		{"p50 of ten", ten, 50, 5},
		{"p95 of ten is the largest", ten, 95, 10},
		{"p90 of ten", ten, 90, 9},
		{"p0 is the smallest", ten, 0, 1},
		{"p100", ten, 100, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nearestRank(tt.in, tt.p); got != tt.want {
				t.Errorf("nearestRank(p%v) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
}

func TestProviderScoresEdges(t *testing.T) {
	reg := ago(time.Hour)
	tests := []struct {
		name string
		in   Input
		want []ProviderScore
	}{
		{"no data", Input{Now: now}, []ProviderScore{}},
		{"launch after registration is left out", Input{Now: now, Nodes: []gpuwarden.Node{
			{ID: "n", Registered: reg, Labels: gpuwarden.NodeLabels{Provider: "x", LaunchedAt: reg.Add(time.Second)}},
			{ID: "m", Registered: reg, Labels: gpuwarden.NodeLabels{Provider: "x", LaunchedAt: reg}},
		}}, []ProviderScore{{Provider: "x", Nodes: 2, Provisioning: Provisioning{Samples: 1, Outliers: []ProvisioningOutlier{}}}}},
		{"preemptions with no up hours use one hour", Input{Now: now,
			Nodes:  []gpuwarden.Node{{ID: "n", Labels: gpuwarden.NodeLabels{Provider: "x"}}},
			Events: []gpuwarden.NodeEvent{event("n", KindPreemption, now, nil), event("gone", KindPreemption, now, nil)}},
			[]ProviderScore{{Provider: "x", Nodes: 1, Preemptions: 1, PreemptionsPer100Hours: 100,
				Provisioning: Provisioning{Outliers: []ProvisioningOutlier{}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ProviderScores(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}
