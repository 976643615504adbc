package http

import (
	"context"
	nethttp "net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/report"
	"github.com/gpuwarden/gpuwarden/savings"
)

// maxSavingsEvents caps the events one savings answer lists: a month of a
// large fleet has a few thousand, and the totals count them all anyway.
const maxSavingsEvents = 10000

// savingsLedger is the server's savings ledger: the fleet ledger itself
// where it keeps the events (SQLite and PostgreSQL do), else an error that
// says so.
func (s *FleetServer) savingsLedger() (gpuwarden.SavingsLedger, error) {
	if l, ok := s.store.(gpuwarden.SavingsLedger); ok {
		return l, nil
	}
	return nil, gpuwarden.Errorf(gpuwarden.EUnavailable, "this server's ledger keeps no savings").
		WithHint("run the server on SQLite or PostgreSQL")
}

// savingsRequest is a savings query read from a URL: the period (from, to,
// or month; this month by default), the grouping and the filters.
type savingsRequest struct {
	q  gpuwarden.SavingsQuery
	by string
}

// parseSavingsRequest reads ?from=&to=&month=&by=&project=&owner=&node=&kind=
// for a token: a project it may read, all of them for a fleet-wide token.
func parseSavingsRequest(v url.Values, sc scope, now time.Time) (savingsRequest, error) {
	p, err := sc.project(v.Get("project"))
	if err != nil {
		return savingsRequest{}, err
	}
	r, err := parseSavingsQuery(v, now)
	r.q.Project = ""
	if p != gpuwarden.AllProjects {
		r.q.Project = p
	}
	return r, err
}

// parseSavingsQuery reads ?from=&to=&month=&by=&project=&owner=&node=&kind=;
// from and to are RFC 3339 times or dates (YYYY-MM-DD, midnight UTC), the
// month (YYYY-MM) is now's by default.
func parseSavingsQuery(v url.Values, now time.Time) (savingsRequest, error) {
	var r savingsRequest
	var err error
	r.q.Project, r.q.Owner, r.q.Node = v.Get("project"), v.Get("owner"), v.Get("node")
	if k := v.Get("kind"); k != "" {
		if r.q.Kind, err = gpuwarden.ParseSavingKind(k); err != nil {
			return r, gpuwarden.Errorf(gpuwarden.EInvalid, "kind: %v", err)
		}
	}
	r.by = v.Get("by") // empty: by project (report.Savings)
	r.q.From, r.q.To = savings.Month(now)
	if m := v.Get("month"); m != "" {
		if r.q.From, r.q.To, err = savings.ParseMonth(m); err != nil {
			return r, err
		}
	}
	for key, dst := range map[string]*time.Time{"from": &r.q.From, "to": &r.q.To} {
		if s := v.Get(key); s != "" {
			t, err := parseWhen(s)
			if err != nil {
				return r, gpuwarden.Errorf(gpuwarden.EInvalid, "%s %q is not an RFC 3339 time or a YYYY-MM-DD date", key, s)
			}
			*dst = t
		}
	}
	if !r.q.To.After(r.q.From) {
		return r, gpuwarden.Errorf(gpuwarden.EInvalid, "to %s is not after from %s", r.q.To.Format(time.RFC3339), r.q.From.Format(time.RFC3339))
	}
	if !storableTime(r.q.From) || !storableTime(r.q.To) {
		return r, gpuwarden.Errorf(gpuwarden.EInvalid, "from and to must lie in the years 0 to 9999 UTC")
	}
	return r, nil
}

// parseWhen reads an RFC 3339 time or a date.
func parseWhen(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	return time.Parse("2006-01-02", s)
}

// savingsFor reads the events a request selects and adds them up.
func (s *FleetServer) savingsFor(ctx context.Context, r savingsRequest) (report.SavingsReport, error) {
	l, err := s.savingsLedger()
	if err != nil {
		return report.SavingsReport{}, err
	}
	return savingsAnswer(ctx, l, r)
}

// listSavings is GET /api/v1/savings: what gpuwarden saved in a period,
// for the projects the token may read.
func (s *FleetServer) listSavings(w nethttp.ResponseWriter, r *nethttp.Request, sc scope) error {
	req, err := parseSavingsRequest(r.URL.Query(), sc, s.now().UTC())
	if err != nil {
		return err
	}
	a, err := s.savingsFor(r.Context(), req)
	if err != nil {
		return err
	}
	return writeJSON(w, nethttp.StatusOK, a)
}

// --- the dashboard ---

// savedTile is the overview's "saved this month" tile: the total per
// currency, and confirmed, estimated and attributed apart.
type savedTile struct {
	Present bool
	// Total is "€693.45" (several currencies joined by " + ").
	Total string
	// Split is "€500.00 confirmed · €123.45 estimated · €70.00 attributed".
	Split string
	// NotSaved counts the events that saved nothing and say why.
	NotSaved int
	// Error says why the tile has no figure.
	Error string
	Href  string
	// ByProject and ByKind are the rows that drill down to the events.
	ByProject, ByKind savedTable
}

// savedTable is one grouping of the savings, titled by what it groups.
type savedTable struct {
	Title string
	Rows  []savedRow
}

// savedRow is one row of a grouping, linked to its events.
type savedRow struct {
	Key, Href, Total, Confirmed, Estimated, Attributed string
	Events, NotSaved                                   int
}

// joinTotals formats one amount per currency.
func joinTotals(ts []gpuwarden.SavingsTotal, f func(gpuwarden.SavingsTotal) gpuwarden.Cents) string {
	parts := make([]string, 0, len(ts))
	for _, t := range ts {
		parts = append(parts, fmtMoney(t.Currency, f(t)))
	}
	if len(parts) == 0 {
		return fmtMoney("", 0)
	}
	return strings.Join(parts, " + ")
}

func totalOf(t gpuwarden.SavingsTotal) gpuwarden.Cents      { return t.Total }
func confirmedOf(t gpuwarden.SavingsTotal) gpuwarden.Cents  { return t.Confirmed }
func estimatedOf(t gpuwarden.SavingsTotal) gpuwarden.Cents  { return t.Estimated }
func attributedOf(t gpuwarden.SavingsTotal) gpuwarden.Cents { return t.Attributed }

// savingsHref links a drill-down: the savings page with the month and
// one filter.
func savingsHref(month, key, value string) string {
	v := url.Values{}
	if month != "" {
		v.Set("month", month)
	}
	if key != "" {
		v.Set(key, value)
	}
	if len(v) == 0 {
		return "/savings"
	}
	return "/savings?" + v.Encode()
}

// savingsTile builds the overview's tile and rows for this month; a ledger
// that fails leaves the tile saying so rather than failing the page.
func (s *FleetServer) savingsTile(ctx context.Context, sc scope, now time.Time) savedTile {
	req := savingsRequest{by: report.ByProject}
	if sc.Project != gpuwarden.AllProjects {
		req.q.Project = sc.Project
	}
	req.q.From, req.q.To = savings.Month(now)
	month := req.q.From.Format("2006-01")
	a, err := s.savingsFor(ctx, req)
	if err != nil {
		s.log.Warn("savings tile", "err", err)
		return savedTile{Error: "unknown: " + err.Error(), Href: savingsHref(month, "", "")}
	}
	t := savedTile{Present: true, Href: savingsHref(month, "", ""), Total: joinTotals(a.Totals, totalOf),
		NotSaved: a.Total.NotSaved}
	t.Split = joinTotals(a.Totals, confirmedOf) + " confirmed · " + joinTotals(a.Totals, estimatedOf) + " estimated"
	if a.Total.Attributed != 0 || len(a.Totals) > 1 {
		t.Split += " · " + joinTotals(a.Totals, attributedOf) + " attributed"
	}
	if len(a.Totals) == 0 {
		// No event yet: a bare 0.00 would have no currency to be in.
		t.Total, t.Split = "—", "no saving recorded yet"
	}
	t.ByProject = savedTable{"Project", savedRows(a.Rows, month, "project")}
	if kinds, err := report.SavingsSummary(a.Events, "kind"); err == nil {
		t.ByKind = savedTable{"Kind", savedRows(kinds, month, "kind")}
	}
	return t
}

// savedRows formats a grouping's rows, each linked to its events.
func savedRows(rows []report.SavingsRow, month, filter string) []savedRow {
	out := make([]savedRow, 0, len(rows))
	for _, r := range rows {
		t := r.Total
		key := r.Key
		if filter == "kind" {
			key = gpuwarden.SavingKind(r.Key).Info().Title
		}
		out = append(out, savedRow{Key: key, Href: savingsHref(month, filter, r.Key), Total: fmtMoney(t.Currency, t.Total),
			Confirmed: fmtMoney(t.Currency, t.Confirmed), Estimated: fmtMoney(t.Currency, t.Estimated),
			Attributed: fmtMoney(t.Currency, t.Attributed), Events: t.Events, NotSaved: t.NotSaved})
	}
	return out
}

// savingsBody is the savings page: a period's events with the arithmetic
// and the evidence of each, so that every amount traces to what happened.
type savingsBody struct {
	Month, Filter           string
	From, To                string
	Total, Split            string
	Events, NotSaved        int
	ByProject, ByKind       savedTable
	Rows                    []savingEventRow
	Truncated               bool
	PrevHref, NextHref, API string
}

// savingEventRow is one event of the ledger as the page shows it.
type savingEventRow struct {
	ID, Kind, Node, NodeHref, Project   string
	Period, PeriodISO                   string
	Arithmetic, RateSource              string
	Amount, Basis, BasisClass, Evidence string
	NotSaved                            string
	Negative                            bool
}

// savingsPage is /savings?month=&project=&kind=&node=: the drill-down.
func (s *FleetServer) savingsPage(r *nethttp.Request, sc scope, now time.Time) (page, error) {
	v := r.URL.Query()
	req, err := parseSavingsRequest(v, sc, now)
	if err != nil {
		return page{}, err
	}
	req.by = report.ByProject
	a, err := s.savingsFor(r.Context(), req)
	if err != nil {
		return page{}, err
	}
	month := req.q.From.Format("2006-01")
	b := savingsBody{Month: month, From: stampUTC(req.q.From), To: stampUTC(req.q.To),
		Total: joinTotals(a.Totals, totalOf), Events: a.Total.Events, NotSaved: a.Total.NotSaved, Truncated: a.Truncated,
		ByProject: savedTable{"Project", savedRows(a.Rows, month, "project")}}
	b.Split = joinTotals(a.Totals, confirmedOf) + " confirmed · " + joinTotals(a.Totals, estimatedOf) + " estimated · " +
		joinTotals(a.Totals, attributedOf) + " attributed"
	if kinds, err := report.SavingsSummary(a.Events, "kind"); err == nil {
		b.ByKind = savedTable{"Kind", savedRows(kinds, month, "kind")}
	}
	var filters []string
	for _, k := range []string{"project", "owner", "node", "kind"} {
		if x := v.Get(k); x != "" {
			filters = append(filters, k+" "+x)
		}
	}
	b.Filter = strings.Join(filters, ", ")
	prev, next := req.q.From.AddDate(0, -1, 0).Format("2006-01"), req.q.From.AddDate(0, 1, 0).Format("2006-01")
	b.PrevHref, b.NextHref = withMonth(v, prev), withMonth(v, next)
	api := url.Values{"from": {req.q.From.Format(time.RFC3339)}, "to": {req.q.To.Format(time.RFC3339)}}
	for _, k := range []string{"project", "owner", "node", "kind"} {
		if x := v.Get(k); x != "" {
			api.Set(k, x)
		}
	}
	b.API = "/api/v1/savings?" + api.Encode()
	for _, e := range a.Events {
		b.Rows = append(b.Rows, savingEventView(e))
	}
	return page{tmpl: "savings", title: "Savings " + month, nav: "/savings", body: b}, nil
}

// withMonth is the page's own query with another month.
func withMonth(v url.Values, month string) string {
	w := url.Values{}
	for k, x := range v {
		w[k] = x
	}
	w.Set("month", month)
	w.Del("from")
	w.Del("to")
	return "/savings?" + w.Encode()
}

// savingEventView shows an event with its arithmetic: hours × rate, where
// the rate came from, the amount and how sure it is.
func savingEventView(e gpuwarden.Saving) savingEventRow {
	row := savingEventRow{ID: e.ID, Kind: e.Kind.Info().Title, Node: e.Node, NodeHref: nodeURL(e.Node), Project: e.Project,
		Period:     stampUTC(e.From) + " – " + stampUTC(e.To),
		PeriodISO:  e.From.UTC().Format(time.RFC3339) + "/" + e.To.UTC().Format(time.RFC3339),
		Arithmetic: strconv.FormatFloat(e.Hours, 'f', -1, 64) + " h × " + fmtRate(e.Currency, e.Rate),
		RateSource: e.RateSource, Amount: fmtMoney(e.Currency, e.Amount), Basis: string(e.Basis),
		Evidence: e.Evidence, NotSaved: e.NotSaved, Negative: e.Amount < 0}
	switch {
	case e.NotSaved != "":
		row.BasisClass = "muted"
	case e.Basis == gpuwarden.SavingConfirmed:
		row.BasisClass = "ok"
	default:
		row.BasisClass = "warn"
	}
	return row
}
