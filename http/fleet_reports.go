package http

import (
	"bytes"
	nethttp "net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/report"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// reportRequest reads a report's query: ?project=&by=&month=2026-11&days=
// &hours=&idle_after=4h&lost_after=10m&format=json|md.
func (s *FleetServer) reportRequest(q url.Values, sc scope, name string) (report.Request, error) {
	req := report.Request{Name: name, By: q.Get("by"), IdleAfter: s.IdleAfter, LostAfter: s.LostAfter}
	var err error
	if req.Project, err = sc.project(q.Get("project")); err != nil {
		return req, err
	}
	if v := q.Get("month"); v != "" {
		if req.Month, err = time.Parse("2006-01", v); err != nil {
			return req, gpuwarden.Errorf(gpuwarden.EInvalid, "month %q is not YYYY-MM", v)
		}
		// The report ends where the next month begins, which must still
		// have a four-digit year for the answer to encode.
		if req.Month.AddDate(0, 1, 0).Year() > 9999 {
			return req, gpuwarden.Errorf(gpuwarden.EInvalid, "month %q: use a month before 9999-12", v)
		}
	}
	for key, dst := range map[string]*int{"days": &req.Days, "hours": &req.Hours} {
		if v := q.Get(key); v != "" {
			if *dst, err = strconv.Atoi(v); err != nil || *dst < 1 {
				return req, gpuwarden.Errorf(gpuwarden.EInvalid, "%s %q is not a positive whole number", key, v)
			}
		}
	}
	for key, dst := range map[string]*time.Duration{"idle_after": &req.IdleAfter, "lost_after": &req.LostAfter} {
		if v := q.Get(key); v != "" {
			if *dst, err = time.ParseDuration(v); err != nil || *dst <= 0 {
				return req, gpuwarden.Errorf(gpuwarden.EInvalid, "%s %q is not a duration such as 4h", key, v)
			}
		}
	}
	return req, nil
}

func (s *FleetServer) report(w nethttp.ResponseWriter, r *nethttp.Request, sc scope) error {
	q := r.URL.Query()
	req, err := s.reportRequest(q, sc, r.PathValue("name"))
	if err != nil {
		return err
	}
	v, err := report.Build(r.Context(), s.store, s.now(), req)
	if err != nil {
		return err
	}
	switch q.Get("format") {
	case "", "json":
		return writeJSON(w, nethttp.StatusOK, v)
	case "md":
		var b bytes.Buffer
		if err := report.Write(&b, v, true, q.Get("title")); err != nil {
			return err
		}
		w.Header().Set("Content-Type", "text/markdown; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(b.Bytes())
		return nil
	}
	return gpuwarden.Errorf(gpuwarden.EInvalid, "format %q is not json or md", q.Get("format"))
}

// serveMetrics exposes the server's counters and, read at each scrape, the
// fleet as far as the token may see it: nodes by state, orphans by reason,
// the month's spend, forecast and budget per project.
func (s *FleetServer) serveMetrics(w nethttp.ResponseWriter, r *nethttp.Request, sc scope) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.metrics.heartbeats, s.metrics.ingest, s.metrics.beatBatch)
	reg.MustRegister(serverRuntime()...)
	g := fleetGauges{
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpuwarden_fleet_nodes", Help: "Nodes by project and state."}, []string{"project", "state"}),
		stillBilling: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpuwarden_fleet_still_billing_after_stop",
			Help: "What nodes that stopped reporting still bill an hour, by the state that bills (stop-requested, powered-off-still-billing, lost, stopped disks)."},
			[]string{"project", "state", "currency"}),
		afterStop: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpuwarden_fleet_after_stop_month",
			Help: "The part of the month-to-date spend billed after nodes stopped reporting."}, []string{"project", "currency"}),
		burn: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpuwarden_fleet_burn_hourly",
			Help: "What the project bills an hour now: running nodes and those still billing after a stop."}, []string{"project", "currency"}),
		orphans:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpuwarden_fleet_orphans", Help: "Orphan nodes by project and reason."}, []string{"project", "reason"}),
		spend:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpuwarden_fleet_spend_month", Help: "Month-to-date spend."}, []string{"project", "currency"}),
		forecast: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpuwarden_fleet_forecast_month", Help: "Spend forecast for the month."}, []string{"project", "currency"}),
		budget:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpuwarden_fleet_budget", Help: "Monthly budget."}, []string{"project", "currency"}),
		perNode:  newFleetNodeVecs(),
	}
	reg.MustRegister(g.nodes, g.orphans, g.spend, g.forecast, g.budget, g.stillBilling, g.afterStop, g.burn)
	reg.MustRegister(g.perNode.collectors()...)
	if err := s.fillGauges(r, sc, g); err != nil {
		return err
	}
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: promLogger{s.log}}).ServeHTTP(w, r)
	return nil
}

type fleetGauges struct {
	nodes, orphans, spend, forecast, budget *prometheus.GaugeVec
	stillBilling, afterStop, burn           *prometheus.GaugeVec
	perNode                                 fleetNodeVecs
}

func (s *FleetServer) fillGauges(r *nethttp.Request, sc scope, g fleetGauges) error {
	now := s.now()
	nodes, err := s.store.Nodes(r.Context(), sc.Project)
	if err != nil {
		return err
	}
	projects, err := s.store.Projects(r.Context())
	if err != nil {
		return err
	}
	curOf := currencies(projects)
	for _, n := range nodes {
		state := NodeState(n, now, s.LostAfter)
		g.nodes.WithLabelValues(n.Project, state).Inc()
		g.perNode.node(n, state)
		if a, ok := report.StillBilling(n, curOf(n), now, s.LostAfter); ok && a.Accruing() {
			g.stillBilling.WithLabelValues(n.Project, a.State, string(a.Currency)).Add(a.Hourly.Float())
		}
	}
	v, err := report.Build(r.Context(), s.store, now, report.Request{Name: "orphans", Project: sc.Project, IdleAfter: s.IdleAfter, LostAfter: s.LostAfter})
	if err != nil {
		return err
	}
	for _, o := range v.(report.OrphanReport).Orphans {
		for _, reason := range o.Reasons {
			g.orphans.WithLabelValues(o.Project, reason.Reason).Inc()
			g.perNode.orphan(o, reason.Reason)
		}
	}
	v, err = report.Build(r.Context(), s.store, now, report.Request{Name: "spend", Project: sc.Project, By: "project", LostAfter: s.LostAfter})
	if err != nil {
		return err
	}
	for _, row := range v.(report.SpendReport).Rows {
		g.spend.WithLabelValues(row.Key, string(row.Currency)).Set(row.Spent.Micros().Float())
		g.forecast.WithLabelValues(row.Key, string(row.Currency)).Set(row.Forecast.Micros().Float())
		g.afterStop.WithLabelValues(row.Key, string(row.Currency)).Set(row.AfterStop.Micros().Float())
		g.burn.WithLabelValues(row.Key, string(row.Currency)).Set(row.HourlyBurn.Float())
		if row.Budget != nil {
			g.budget.WithLabelValues(row.Key, string(row.Currency)).Set(row.Budget.Limit.Micros().Float())
		}
	}
	return nil
}

// NodeState is a node's state as the fleet sees it (report.NodeState):
// what its last heartbeat said, lost when heartbeats stopped without saying
// how the box stopped, gone once a person marked it so.
func NodeState(n gpuwarden.Node, now time.Time, lostAfter time.Duration) string {
	return report.NodeState(n, now, lostAfter)
}
