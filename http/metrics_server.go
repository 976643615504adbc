package http

import (
	"runtime"
	"runtime/debug"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/report"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// serverRuntime are the fleet server's process series, the ones every Go
// exporter has: go_* (goroutines, GC, heap), process_* (CPU, RSS, open
// files) and gpuwarden_build_info, so that a dashboard can tell which
// release each replica runs and an alert can see a leak.
func serverRuntime() []prometheus.Collector {
	return []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo(),
	}
}

// buildInfo is gpuwarden_build_info, on the agent's /metrics and the
// server's alike: during a rolling upgrade it tells which box or replica
// still runs the old release.
func buildInfo() prometheus.Collector {
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "gpuwarden_build_info",
		Help: "Always 1; labels name the release, the VCS revision and the Go version of the binary.",
		ConstLabels: prometheus.Labels{
			"version": gpuwarden.Version, "revision": vcsRevision(), "goversion": runtime.Version(),
		},
	})
	build.Set(1)
	return build
}

// vcsRevision is the commit the binary was built from, as the Go toolchain
// stamps it; "unknown" for a build outside a checkout (go test, go run of a
// file), rather than an empty label that reads as a missing series.
func vcsRevision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "unknown", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && rev != "unknown" {
		rev += "-dirty"
	}
	return rev
}

// fleetNodeVecs are the per-node fleet series: one per node, so that a rule
// on a lost or orphaned box can name it and who pays for it, where the
// per-project counts can only say how many.
type fleetNodeVecs struct {
	nodes, orphans *prometheus.GaugeVec
}

func newFleetNodeVecs() fleetNodeVecs {
	return fleetNodeVecs{
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpuwarden_fleet_node_info",
			Help: "Always 1 per node the token sees; labels name it, who pays for it, where it runs and its state."},
			[]string{"node", "hostname", "project", "owner", "provider", "region", "instance_type", "state"}),
		orphans: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpuwarden_fleet_orphan",
			Help: "1 per orphan node and reason (no owner, past TTL, idle, no heartbeats)."},
			[]string{"node", "hostname", "project", "owner", "reason"}),
	}
}

func (v fleetNodeVecs) collectors() []prometheus.Collector {
	return []prometheus.Collector{v.nodes, v.orphans}
}

func (v fleetNodeVecs) node(n gpuwarden.Node, state string) {
	v.nodes.WithLabelValues(n.ID, n.Hostname, n.Project, n.Labels.Owner, n.Labels.Provider, n.Labels.Region,
		n.Labels.InstanceType, state).Set(1)
}

func (v fleetNodeVecs) orphan(o report.Orphan, reason string) {
	v.orphans.WithLabelValues(o.Node, o.Hostname, o.Project, o.Owner, reason).Set(1)
}
