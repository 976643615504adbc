package http

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/report"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestFleetMetricsRuntimeAndNodes scrapes a real fleet server: the Go,
// process and build series are there, and each node (lost or orphaned
// ones included) has its own series naming it and its owner.
func TestFleetMetricsRuntimeAndNodes(t *testing.T) {
	f := newFleetFixture(t, nil)
	agent := f.token("vision", "agent")
	f.register(agent, node("n-live", "ana"))
	f.register(agent, node("n-orphan", ""))
	f.advance(2 * time.Hour) // both are past LostAfter now: lost, and so orphans
	viewer := f.token("*", "viewer")
	code, body, _ := f.call("GET", "/metrics", viewer, nil)
	if code != 200 {
		t.Fatalf("/metrics = %d %s", code, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	for _, name := range []string{"go_goroutines", "go_info", "gpuwarden_build_info"} {
		if _, ok := mfs[name]; !ok {
			t.Errorf("%s missing", name)
		}
	}
	if _, ok := mfs["process_resident_memory_bytes"]; !ok && runtime.GOOS == "linux" {
		t.Error("process_resident_memory_bytes missing")
	}
	if b := mfs["gpuwarden_build_info"].GetMetric(); len(b) == 1 {
		got := map[string]string{}
		for _, lp := range b[0].GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		if got["version"] != gpuwarden.Version || got["goversion"] != runtime.Version() || got["revision"] == "" {
			t.Errorf("gpuwarden_build_info labels = %v", got)
		}
	}
	state := func(id string) string {
		for _, m := range mfs["gpuwarden_fleet_node_info"].GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			if got["node"] == id {
				if got["project"] != "vision" || got["provider"] != "aws" || got["region"] != "eu-west-1" {
					t.Errorf("gpuwarden_fleet_node_info{node=%q} = %v", id, got)
				}
				return got["state"]
			}
		}
		return ""
	}
	for _, id := range []string{"n-live", "n-orphan"} {
		if got := state(id); got != gpuwarden.NodeLost {
			t.Errorf("gpuwarden_fleet_node_info{node=%q} state = %q, want %q", id, got, gpuwarden.NodeLost)
		}
	}
	var reasons []string
	for _, m := range mfs["gpuwarden_fleet_orphan"].GetMetric() {
		var id, owner, reason string
		for _, lp := range m.GetLabel() {
			switch lp.GetName() {
			case "node":
				id = lp.GetValue()
			case "owner":
				owner = lp.GetValue()
			case "reason":
				reason = lp.GetValue()
			}
		}
		if id == "n-live" && owner != "ana" {
			t.Errorf("orphan n-live owner = %q, want ana", owner)
		}
		reasons = append(reasons, id+":"+reason)
	}
	joined := strings.Join(reasons, " ")
	for _, want := range []string{"n-orphan:" + report.ReasonNoOwner, "n-orphan:" + report.ReasonHeartbeatLost, "n-live:" + report.ReasonHeartbeatLost} {
		if !strings.Contains(joined, want) {
			t.Errorf("gpuwarden_fleet_orphan = %q, want %s among them", joined, want)
		}
	}
	if strings.Contains(joined, "n-live:"+report.ReasonNoOwner) {
		t.Errorf("gpuwarden_fleet_orphan = %q: n-live has an owner", joined)
	}
}
