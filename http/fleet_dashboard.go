package http

import (
	"bytes"
	"cmp"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"math"
	nethttp "net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/report"
)

// fleetRefreshSeconds is how often the pages refresh themselves. They read
// a month of node hours for the spend bars, so less often than the agent's
// page; a variable so that the browser test need not wait half a minute.
var fleetRefreshSeconds = 30

// Fleet dashboard tuning.
const (
	maxNodeEvents       = 50
	maxBurnins          = 20
	maxHeatmapPageHours = 168
	// heatmapWidth is the cells' share of a heatmap in SVG units: with the
	// labels it fits a 1366-pixel laptop screen without scrolling.
	heatmapWidth = 840
)

// fleetTemplates holds one template set per page: each page file defines
// "main" and shares the layout and parts, so that pages cannot clash. They
// are parsed on the first page served, not at package init: every process
// of the one binary links this package, and parsing them cost each agent
// (which serves no fleet page) 1.1 MB of heap and 21,000 allocations at
// start (GODEBUG=inittrace=1).
var fleetTemplates = sync.OnceValue(func() map[string]*template.Template {
	return parseFleetTemplates("overview", "node", "project", "orphans", "scorecards", "heatmap", "savings", "login", "error")
})

func parseFleetTemplates(pages ...string) map[string]*template.Template {
	base := template.Must(template.New("layout.html").ParseFS(assets, "assets/fleet/layout.html", "assets/fleet/parts.html"))
	out := make(map[string]*template.Template, len(pages))
	for _, p := range pages {
		out[p] = template.Must(template.Must(base.Clone()).ParseFS(assets, "assets/fleet/"+p+".html"))
	}
	return out
}

// dashboardRoutes adds the server-rendered dashboard. Pages are registered
// without a method so that a POST answers 405 rather than falling through
// to the JSON catch-all's 404; "/{$}" is the overview alone, leaving every
// other path to that catch-all.
func (s *FleetServer) dashboardRoutes(m *nethttp.ServeMux) {
	m.HandleFunc("GET /assets/"+styleCSS, serveAsset(styleCSS, "text/css; charset=utf-8"))
	m.HandleFunc("GET /assets/"+scriptJS, serveAsset(scriptJS, "text/javascript; charset=utf-8"))
	m.HandleFunc("/login", s.login)
	m.HandleFunc("/logout", s.logout)
	m.Handle("/{$}", s.page(s.overviewPage))
	m.Handle("/nodes/{id}", s.page(s.nodePage))
	m.Handle("/projects/{name}", s.page(s.projectPage))
	m.Handle("/orphans", s.page(s.orphansPage))
	m.Handle("/scorecards", s.page(s.scorecardsPage))
	m.Handle("/heatmap", s.page(s.heatmapPage))
	m.Handle("/savings", s.page(s.savingsPage))
}

// fleetView is what the layout shows around every page.
type fleetView struct {
	Title               string
	Nav                 []navLink
	SignedIn            bool
	Who                 string
	Now, NowISO         string
	StyleURL, ScriptURL string
	Refresh             int
	CSRF                string // the sign-out form's CSRF token, bound to the session
	Body                any
}

type navLink struct {
	Href, Label string
	Current     bool
}

// page is what a page handler hands the layout.
type page struct {
	tmpl, title, nav string
	refresh          int
	body             any
}

type pageFunc func(r *nethttp.Request, sc scope, now time.Time) (page, error)

// page wraps a dashboard page: GET and HEAD only, a signed-in session or a
// bearer token (else the login form; see identify for the limits before
// it), the token's rate limit, then an HTML answer.
func (s *FleetServer) page(f pageFunc) nethttp.Handler {
	return nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		if r.Method != nethttp.MethodGet && r.Method != nethttp.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			s.renderError(w, nil, nethttp.StatusMethodNotAllowed,
				gpuwarden.Errorf(gpuwarden.EInvalid, "method %s is not allowed on %s", r.Method, r.URL.Path).WithHint("dashboard pages are read with GET"))
			return
		}
		c, err := s.identify(r)
		var tm *tooManyError
		switch {
		case errors.As(err, &tm):
			s.renderTooMany(w, tm)
			return
		case gpuwarden.ErrorCodeOf(err) == gpuwarden.EUnauthorized:
			nethttp.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), nethttp.StatusSeeOther)
			return
		case err != nil:
			s.renderError(w, nil, 0, err)
			return
		}
		t, sc := c.token, c.scope()
		if wait, ok := s.limits.allow(t.ID, s.RatePerSec, s.RateBurst); !ok {
			w.Header().Set("Retry-After", fmt.Sprint(int(wait.Seconds())+1))
			s.renderError(w, &sc, nethttp.StatusTooManyRequests, gpuwarden.Errorf(gpuwarden.EInvalid, "too many requests for this token").
				WithHint("retry after %s", wait.Round(time.Second)))
			return
		}
		now := s.now().UTC()
		p, err := f(r, sc, now)
		if err != nil {
			s.renderError(w, &sc, 0, err)
			return
		}
		s.render(w, nethttp.StatusOK, p, &sc, now)
	})
}

// render executes a page into a buffer first, so that a template error
// becomes a clean 500 rather than half a page under a 200.
func (s *FleetServer) render(w nethttp.ResponseWriter, code int, p page, sc *scope, now time.Time) {
	v := fleetView{Title: p.title, Now: now.Format("2006-01-02 15:04:05 MST"), NowISO: now.Format(time.RFC3339),
		StyleURL: styleURL, ScriptURL: scriptURL, Body: p.body}
	if sc != nil {
		v.SignedIn = true
		v.Who = who(*sc)
		v.CSRF = sc.csrf
		v.Nav = navLinks(*sc, p.nav)
		v.Refresh = cmp.Or(p.refresh, fleetRefreshSeconds)
		if p.refresh < 0 {
			v.Refresh = 0
		}
	}
	var buf bytes.Buffer
	t := fleetTemplates()[p.tmpl]
	if t == nil {
		s.log.Error("render page", "page", p.tmpl, "error", "no such template")
		nethttp.Error(w, "internal error", nethttp.StatusInternalServerError)
		return
	}
	if err := t.ExecuteTemplate(&buf, "layout", v); err != nil {
		s.log.Error("render page", "page", p.tmpl, "error", err)
		nethttp.Error(w, "internal error", nethttp.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// errorBodyView is the error page: what went wrong and what to do.
type errorBodyView struct {
	Status           int
	Message, Hint    string
	StatusText, Back string
}

// renderError shows an error as a page; code zero takes the status from
// the error. Internal errors are logged and shown without their detail.
func (s *FleetServer) renderError(w nethttp.ResponseWriter, sc *scope, code int, err error) {
	if code == 0 {
		code = statusOf(gpuwarden.ErrorCodeOf(err))
	}
	v := errorBodyView{Status: code, StatusText: nethttp.StatusText(code), Back: "/"}
	var appErr *gpuwarden.Error
	if code >= 500 || !errors.As(err, &appErr) {
		s.log.Error("dashboard page failed", "error", err)
		v.Message, v.Hint = "internal error", "the server's log has the details"
	} else {
		v.Message, v.Hint = err.Error(), gpuwarden.ErrorHint(err)
	}
	s.render(w, code, page{tmpl: "error", title: v.StatusText, refresh: -1, body: v}, sc, s.now().UTC())
}

// who says in words whose token is signed in.
func who(sc scope) string {
	p := "project " + sc.Project
	if sc.Project == gpuwarden.AllProjects {
		p = "all projects"
	}
	name := ""
	if sc.Name != "" {
		name = sc.Name + ": "
	}
	return fmt.Sprintf("%s%s of %s", name, sc.Role, p)
}

func navLinks(sc scope, current string) []navLink {
	links := []navLink{{Href: "/", Label: "Overview"}}
	if sc.Project != gpuwarden.AllProjects {
		links = append(links, navLink{Href: projectURL(sc.Project), Label: "Project " + sc.Project})
	}
	links = append(links, navLink{Href: "/orphans", Label: "Orphans"}, navLink{Href: "/scorecards", Label: "Scorecards"},
		navLink{Href: "/heatmap", Label: "Heatmap"}, navLink{Href: "/savings", Label: "Savings"})
	for i := range links {
		links[i].Current = links[i].Href == current
	}
	return links
}

// loginView is the sign-in form. CSRF is its double-submit value, which the
// login cookie holds too; Lifetime says how long a sign-in lasts.
type loginView struct {
	Error, Next, CSRF, Lifetime string
}

// login shows the form (GET) and exchanges a token for a session (POST):
// the token is checked once, stored nowhere in the browser, and the cookie
// holds only a random session ID the ledger maps to it. The form has no
// session to bind a CSRF token to, so it carries a double-submit value
// (the login cookie's, which another site can neither read nor, with
// SameSite=Strict, send) on top of the origin check: otherwise a
// cross-site form could sign a victim in with the attacker's token and
// watch what they do. Failed attempts count against the client's limit.
func (s *FleetServer) login(w nethttp.ResponseWriter, r *nethttp.Request) {
	switch r.Method {
	case nethttp.MethodGet, nethttp.MethodHead:
		s.renderLogin(w, r, nethttp.StatusOK, "", safeNext(r.URL.Query().Get("next")))
		return
	case nethttp.MethodPost:
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		s.renderError(w, nil, nethttp.StatusMethodNotAllowed, gpuwarden.Errorf(gpuwarden.EInvalid, "method %s is not allowed on /login", r.Method))
		return
	}
	if err := sameOrigin(r); err != nil {
		s.renderError(w, nil, nethttp.StatusForbidden, err)
		return
	}
	r.Body = nethttp.MaxBytesReader(w, r.Body, s.MaxBody)
	if err := r.ParseForm(); err != nil {
		s.renderError(w, nil, nethttp.StatusBadRequest, gpuwarden.Errorf(gpuwarden.EInvalid, "the sign-in form did not parse").WithHint("send it again"))
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	if c, err := r.Cookie(loginCookie); err != nil || !secretPattern().MatchString(c.Value) ||
		subtle.ConstantTimeCompare([]byte(c.Value), []byte(r.PostForm.Get(csrfField))) != 1 {
		s.renderLogin(w, r, nethttp.StatusForbidden, "This sign-in form expired or was not this server's: sign in again.", next)
		return
	}
	c, err := s.check(r.Context(), clientOf(r), credential{raw: strings.TrimSpace(r.PostForm.Get("token"))})
	var tm *tooManyError
	switch {
	case errors.As(err, &tm):
		s.renderTooMany(w, tm)
		return
	case gpuwarden.ErrorCodeOf(err) == gpuwarden.EUnauthorized:
		s.renderLogin(w, r, nethttp.StatusUnauthorized, "That token is unknown, revoked or mistyped.", next)
		return
	case err != nil:
		s.renderError(w, nil, 0, err)
		return
	}
	t := c.token
	lifetime := s.sessionLifetime()
	sess, id, err := newSession(t, s.now(), lifetime)
	if err == nil {
		err = s.store.CreateSession(r.Context(), sess)
	}
	if err != nil {
		s.renderError(w, nil, 0, err)
		return
	}
	s.log.Info("signed in", "token", t.ID, "project", t.Project, "role", t.Role)
	nethttp.SetCookie(w, cookieFor(r, sessionCookie, id, lifetime))
	nethttp.SetCookie(w, cookieFor(r, loginCookie, "", -1))
	nethttp.SetCookie(w, cookieFor(r, legacyCookie, "", -1))
	nethttp.Redirect(w, r, next, nethttp.StatusSeeOther)
}

// renderLogin shows the sign-in form with its CSRF value: the one the
// browser's login cookie holds, else a new one, and (re)sets the cookie.
// It deletes an old cookie that held a raw token.
func (s *FleetServer) renderLogin(w nethttp.ResponseWriter, r *nethttp.Request, code int, msg, next string) {
	var csrf string
	if c, err := r.Cookie(loginCookie); err == nil && secretPattern().MatchString(c.Value) {
		csrf = c.Value
	} else if csrf, err = newSecret(); err != nil {
		s.renderError(w, nil, 0, err)
		return
	}
	nethttp.SetCookie(w, cookieFor(r, loginCookie, csrf, loginMaxAge))
	if _, err := r.Cookie(legacyCookie); err == nil {
		nethttp.SetCookie(w, cookieFor(r, legacyCookie, "", -1))
	}
	s.render(w, code, page{tmpl: "login", title: "Sign in",
		body: loginView{Error: msg, Next: next, CSRF: csrf, Lifetime: fmtLifetime(s.sessionLifetime())}}, nil, s.now().UTC())
}

// renderTooMany answers a client over its limit of failed requests.
func (s *FleetServer) renderTooMany(w nethttp.ResponseWriter, tm *tooManyError) {
	w.Header().Set("Retry-After", retryAfterSeconds(tm.wait))
	s.renderError(w, nil, nethttp.StatusTooManyRequests, tm.appError())
}

// sessionLifetime is SessionLifetime, or the default when unset.
func (s *FleetServer) sessionLifetime() time.Duration {
	if s.SessionLifetime <= 0 {
		return DefaultSessionLifetime
	}
	return s.SessionLifetime
}

// fmtLifetime says how long a sign-in lasts, in words.
func fmtLifetime(d time.Duration) string {
	switch {
	case d == time.Hour:
		return "1 hour"
	case d%time.Hour == 0:
		return strconv.Itoa(int(d/time.Hour)) + " hours"
	case d%time.Minute == 0:
		return strconv.Itoa(int(d/time.Minute)) + " minutes"
	}
	return d.String()
}

// logout ends the session: it deletes it from the ledger, so that the
// cookie is worthless on every replica even if copied, and clears the
// cookies. Only this server's own form may do it, by the origin check and
// the session's CSRF token, so that another site cannot sign people out
// at will; the delete counts against the client's limit, since a made-up
// cookie with its matching token costs a database write.
func (s *FleetServer) logout(w nethttp.ResponseWriter, r *nethttp.Request) {
	if r.Method != nethttp.MethodPost {
		w.Header().Set("Allow", "POST")
		s.renderError(w, nil, nethttp.StatusMethodNotAllowed, gpuwarden.Errorf(gpuwarden.EInvalid, "sign out with POST /logout").
			WithHint("use the Sign out button"))
		return
	}
	if err := sameOrigin(r); err != nil {
		s.renderError(w, nil, nethttp.StatusForbidden, err)
		return
	}
	r.Body = nethttp.MaxBytesReader(w, r.Body, s.MaxBody)
	if err := r.ParseForm(); err != nil {
		s.renderError(w, nil, nethttp.StatusBadRequest, gpuwarden.Errorf(gpuwarden.EInvalid, "the sign-out form did not parse").WithHint("send it again"))
		return
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		if hash, ok := sessionHash(c.Value); ok {
			if !validCSRF(c.Value, r.PostForm.Get(csrfField)) {
				s.renderError(w, nil, nethttp.StatusForbidden, gpuwarden.Errorf(gpuwarden.EForbidden, "the sign-out form lacks this session's CSRF token").
					WithHint("reload the page and use its Sign out button"))
				return
			}
			// A made-up session's CSRF token is made up with it: the
			// delete of one the server has not seen valid takes a read
			// from the address's budget.
			if !s.auth.known(credential{raw: c.Value, byCookie: true}) {
				if wait, ok := s.lookups.take(clientOf(r), s.LookupRatePerSec, s.LookupBurst); !ok {
					s.renderTooMany(w, &tooManyError{client: clientOf(r), wait: wait, what: "requests with credentials to check"})
					return
				}
			}
			if err := s.store.DeleteSession(r.Context(), hash); err != nil {
				s.renderError(w, nil, 0, err)
				return
			}
			s.auth.endedSession(hash)
		}
	}
	nethttp.SetCookie(w, cookieFor(r, sessionCookie, "", -1))
	nethttp.SetCookie(w, cookieFor(r, legacyCookie, "", -1))
	nethttp.Redirect(w, r, "/login", nethttp.StatusSeeOther)
}

// crossOrigin refuses browser requests sent from another origin: it trusts
// Sec-Fetch-Site, and without it compares Origin with the Host. Origin
// alone would not do: under Referrer-Policy no-referrer, which every answer
// carries, a browser's own same-origin form posts "Origin: null". A request
// with neither header is no browser's, and passes.
var crossOrigin = nethttp.NewCrossOriginProtection()

// sameOrigin refuses an unsafe request from another origin (safe methods
// pass): the check of /login, /logout and every request authenticated by
// the session cookie, which a browser attaches to cross-site requests too.
func sameOrigin(r *nethttp.Request) error {
	if err := crossOrigin.Check(r); err != nil {
		return gpuwarden.Errorf(gpuwarden.EForbidden, "cross-origin request refused").
			WithHint("use this server's own pages, or send the token in an Authorization header")
	}
	return nil
}

// safeNext keeps a post-login redirect on this server: a path, never
// "//host" or "/\host", which browsers read as another site.
func safeNext(next string) string {
	if next == "" || next[0] != '/' || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") ||
		strings.ContainsAny(next, "\r\n\t\x00") || strings.HasPrefix(next, "/login") || strings.HasPrefix(next, "/logout") {
		return "/"
	}
	return next
}

// --- overview ---

type overviewBody struct {
	Empty     bool
	ServerURL string
	Filter    string
	Counts    []stateCount
	GPUs      int
	Burn      string
	// Saved is the "saved this month" tile beside Burn, with its rows.
	Saved savedTile
	// StillBilling is what boxes bill after they stopped reporting: the
	// rate now and the month's sum, per currency.
	StillBilling string
	Orphans      int
	Month        string
	Budgets      []budgetRow
	Findings     []string
	Nodes        []nodeRow
	AllNodes     int
}

type stateCount struct {
	Label, Class, Href string
	N                  int
	Current            bool
}

func (s *FleetServer) overviewPage(r *nethttp.Request, sc scope, now time.Time) (page, error) {
	ctx := r.Context()
	nodes, err := s.store.Nodes(ctx, sc.Project)
	if err != nil {
		return page{}, err
	}
	projects, err := s.readableProjects(r, sc)
	if err != nil {
		return page{}, err
	}
	spend, err := s.buildReport(r, sc.Project, now, report.Request{Name: "spend", By: report.ByProject})
	if err != nil {
		return page{}, err
	}
	orphans, err := s.buildReport(r, sc.Project, now, report.Request{Name: "orphans"})
	if err != nil {
		return page{}, err
	}
	sr, or := spend.(report.SpendReport), orphans.(report.OrphanReport)
	b := overviewBody{Empty: len(nodes) == 0, ServerURL: serverURL(r), Orphans: len(or.Orphans), Month: sr.Month,
		Budgets: budgetRows(sr.Rows), Findings: sr.Findings, AllNodes: len(nodes)}
	filter := r.URL.Query().Get("state")
	counts := map[string]int{}
	curOf := currencies(projects)
	for _, n := range nodes {
		st := NodeState(n, now, s.LostAfter)
		counts[st]++
		if up(st) {
			b.GPUs += len(n.GPUs)
		}
	}
	for _, st := range report.States {
		// The states of a stop that did not end the bill, and gone, show
		// when a node is in them: most fleets never see them.
		always := st == gpuwarden.NodeRunning || st == gpuwarden.NodeStopping || st == gpuwarden.NodeStopped || st == gpuwarden.NodeLost
		if !always && counts[st] == 0 && filter != st {
			continue
		}
		b.Counts = append(b.Counts, stateCount{Label: st, Class: stateClass(st), N: counts[st], Href: "/?state=" + url.QueryEscape(st), Current: filter == st})
		if filter == st {
			b.Filter = st
		}
	}
	// Burning now is the spend report's burn: running boxes and those that
	// still bill after a stop, so that the tile and the forecast agree.
	var rates, still []string
	for _, t := range sr.Totals {
		if t.HourlyBurn > 0 {
			rates = append(rates, fmtRate(t.Currency, t.HourlyBurn))
		}
		if t.AfterStopHourly > 0 || t.AfterStop > 0 {
			still = append(still, fmt.Sprintf("%s (%s this month)", fmtRate(t.Currency, t.AfterStopHourly), fmtMoney(t.Currency, t.AfterStop)))
		}
	}
	b.Burn = strings.Join(rates, " + ")
	b.Saved = s.savingsTile(ctx, sc, now)
	b.StillBilling = strings.Join(still, " + ")
	if b.Filter != "" {
		nodes = slices.DeleteFunc(nodes, func(n gpuwarden.Node) bool { return NodeState(n, now, s.LostAfter) != b.Filter })
	}
	b.Nodes = s.nodeRows(nodes, now, curOf)
	return page{tmpl: "overview", title: "Fleet overview", nav: "/", body: b}, nil
}

// serverURL is this server's address as the browser used it, for the
// command the empty state suggests.
func serverURL(r *nethttp.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

func (s *FleetServer) readableProjects(r *nethttp.Request, sc scope) ([]gpuwarden.Project, error) {
	all, err := s.store.Projects(r.Context())
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(p gpuwarden.Project) bool { return !sc.canRead(p.Name) }), nil
}

// up says whether a node in state has its GPUs up: it reports, or nobody
// knows that it stopped.
func up(state string) bool {
	switch state {
	case gpuwarden.NodeRunning, gpuwarden.NodeStopping, gpuwarden.NodeLost, gpuwarden.NodeAgentStopped:
		return true
	}
	return false
}

func (s *FleetServer) buildReport(r *nethttp.Request, project string, now time.Time, req report.Request) (any, error) {
	req.Project = project
	req.IdleAfter, req.LostAfter = s.IdleAfter, s.LostAfter
	return report.Build(r.Context(), s.store, now, req)
}

// currencies returns what a node bills in: its own label, else its
// project's currency, as the reports decide.
func currencies(projects []gpuwarden.Project) func(gpuwarden.Node) gpuwarden.Currency {
	byName := make(map[string]gpuwarden.Currency, len(projects))
	for _, p := range projects {
		byName[p.Name] = p.Currency
	}
	return func(n gpuwarden.Node) gpuwarden.Currency {
		return cmp.Or(n.Labels.Currency, byName[n.Project])
	}
}

// budgetRow is one project's month against its budget, drawn as a bar:
// spent filled, the forecast as a marker, the budget as a line. The bar's
// scale is the largest of the three so that an overrun stays visible.
type budgetRow struct {
	Key, Href, Currency           string
	Spent, Forecast, Budget, Burn string
	// AfterStop says which part of Spent was billed after a stop.
	AfterStop                     string
	Nodes, Running                int
	HasBudget, Over, ForecastOver bool
	SpentPct, ForecastPct         string
	SpentW, ForecastX, BudgetX    string
	Label                         string
	HasForecastMark               bool
}

func budgetRows(rows []report.SpendRow) []budgetRow {
	out := make([]budgetRow, 0, len(rows))
	for _, row := range rows {
		b := budgetRow{Key: row.Key, Currency: string(row.Currency), Spent: fmtMoney(row.Currency, row.Spent),
			Forecast: fmtMoney(row.Currency, row.Forecast), Burn: fmtRate(row.Currency, row.HourlyBurn),
			Nodes: row.Nodes, Running: row.Running}
		if row.Key != report.None && row.Key != report.Unknown {
			b.Href = projectURL(row.Key)
		}
		b.AfterStop = afterStopCell(row.Currency, row.AfterStop, row.AfterStopHourly)
		scale := max(row.Spent, row.Forecast)
		if row.Budget != nil {
			b.HasBudget = true
			b.Budget = fmtMoney(row.Currency, row.Budget.Limit)
			b.Over = row.Spent > row.Budget.Limit
			b.ForecastOver = row.Forecast > row.Budget.Limit
			b.SpentPct = fmt.Sprintf("%.0f %%", math.Floor(row.Budget.SpentPercent))
			b.ForecastPct = fmt.Sprintf("%.0f %%", math.Floor(row.Budget.ForecastPercent))
			scale = max(scale, row.Budget.Limit)
		}
		if scale > 0 {
			frac := func(c gpuwarden.Cents) string { return fmtNum(clamp(100*float64(c)/float64(scale), 0, 100)) }
			b.SpentW, b.ForecastX = frac(row.Spent), frac(row.Forecast)
			b.HasForecastMark = row.Forecast > 0
			if row.Budget != nil {
				b.BudgetX = frac(row.Budget.Limit)
			}
		} else {
			b.SpentW, b.ForecastX = "0", "0"
		}
		b.Label = fmt.Sprintf("%s: spent %s, forecast %s", row.Key, b.Spent, b.Forecast)
		if b.HasBudget {
			b.Label += ", budget " + b.Budget
		}
		out = append(out, b)
	}
	return out
}

// afterStopCell says which part of a spend row was billed after a stop,
// and what still bills so; empty when nothing was.
func afterStopCell(cur gpuwarden.Currency, spent gpuwarden.Cents, hourly gpuwarden.Micros) string {
	switch {
	case hourly > 0:
		return fmt.Sprintf("incl. %s still billing after stop, %s now", fmtMoney(cur, spent), fmtRate(cur, hourly))
	case spent > 0:
		return fmt.Sprintf("incl. %s billed after stop", fmtMoney(cur, spent))
	}
	return ""
}

// --- node rows ---

// nodeRow is one node in a table, every value formatted for display.
type nodeRow struct {
	ID, Href, Host             string
	Project, ProjectHref       string
	Owner                      string
	Provider, Region, Instance string
	GPUs                       string
	State, StateClass          string
	Util, UtilValue            string
	HasUtil                    bool
	IdleFor, IdleSince         string
	Price                      string
	LastSeen, LastSeenISO      string
	Diagnosis                  string
	Spot, Simulated            bool
	// Stop is the idle stop in one line; AfterStop what the box bills
	// after it stopped reporting, and Billing whether it still does.
	Stop      stopView
	AfterStop string
	Billing   bool
}

func (s *FleetServer) nodeRows(nodes []gpuwarden.Node, now time.Time, curOf func(gpuwarden.Node) gpuwarden.Currency) []nodeRow {
	slices.SortFunc(nodes, func(a, b gpuwarden.Node) int {
		return cmp.Or(cmp.Compare(a.Project, b.Project), cmp.Compare(a.Hostname, b.Hostname), cmp.Compare(a.ID, b.ID))
	})
	rows := make([]nodeRow, 0, len(nodes))
	for _, n := range nodes {
		rows = append(rows, s.nodeRow(n, now, curOf(n)))
	}
	return rows
}

func (s *FleetServer) nodeRow(n gpuwarden.Node, now time.Time, cur gpuwarden.Currency) nodeRow {
	st := NodeState(n, now, s.LostAfter)
	row := nodeRow{ID: n.ID, Href: nodeURL(n.ID), Host: cmp.Or(n.Hostname, n.ID), Project: n.Project, ProjectHref: projectURL(n.Project),
		Owner: n.Labels.Owner, Provider: n.Labels.Provider, Region: n.Labels.Region, Instance: n.Labels.InstanceType,
		GPUs: gpuSummary(n.GPUs), State: st, StateClass: stateClass(st), Diagnosis: n.Live.Diagnosis, Spot: n.Labels.Spot, Simulated: n.Labels.Simulated,
		Price: "—", LastSeen: "never", Stop: stopSummary(n, now)}
	if st == gpuwarden.NodeGone {
		row.Stop = stopView{Text: cmp.Or(n.Live.Diagnosis, "marked gone"), Class: "muted"}
	}
	row.AfterStop = afterStopText(n, cur, now, s.LostAfter)
	if a, ok := report.StillBilling(n, cur, now, s.LostAfter); ok {
		row.Billing = a.Accruing()
	}
	if !n.Live.Time.IsZero() && up(st) {
		row.HasUtil = true
		row.Util, row.UtilValue = fmtPct(n.Live.GPUUtil), fmtNum(clamp(n.Live.GPUUtil, 0, 100))
	}
	if !n.Live.IdleSince.IsZero() && up(st) {
		row.IdleFor = fmtDuration(now.Sub(n.Live.IdleSince))
		row.IdleSince = stampUTC(n.Live.IdleSince)
	}
	if n.Labels.HourlyPrice > 0 {
		row.Price = fmtRate(cur, n.Labels.HourlyPrice)
	}
	if !n.LastSeen.IsZero() {
		row.LastSeen = fmtDuration(now.Sub(n.LastSeen)) + " ago"
		row.LastSeenISO = n.LastSeen.UTC().Format(time.RFC3339)
	}
	return row
}

// gpuSummary groups a node's GPUs by model: "8 × H200".
func gpuSummary(gpus []gpuwarden.GPU) string {
	if len(gpus) == 0 {
		return "none"
	}
	count := map[string]int{}
	var order []string
	for _, g := range gpus {
		m := cmp.Or(modelOf(g), "GPU")
		if count[m] == 0 {
			order = append(order, m)
		}
		count[m]++
	}
	parts := make([]string, len(order))
	for i, m := range order {
		parts[i] = fmt.Sprintf("%d × %s", count[m], m)
	}
	return strings.Join(parts, ", ")
}

func stateClass(state string) string {
	switch state {
	case gpuwarden.NodeRunning:
		return "ok"
	case gpuwarden.NodeStopping, gpuwarden.NodeStopRequested:
		return "warn"
	case gpuwarden.NodeLost, gpuwarden.NodePoweredOffStillBilling, gpuwarden.NodeAgentStopped:
		return "bad"
	}
	return "muted"
}

func nodeURL(id string) string      { return "/nodes/" + url.PathEscape(id) }
func projectURL(name string) string { return "/projects/" + url.PathEscape(name) }
func stampUTC(t time.Time) string   { return t.UTC().Format("2006-01-02 15:04 UTC") }
func fmtMoney(cur gpuwarden.Currency, c gpuwarden.Cents) string {
	if cur == "" {
		return c.Decimal()
	}
	return cur.Format(c)
}

func fmtRate(cur gpuwarden.Currency, m gpuwarden.Micros) string {
	if cur == "" {
		return m.String() + "/h"
	}
	return cur.FormatRate(m, "h")
}

// --- one node ---

type nodeBody struct {
	Row      nodeRow
	Labels   []keyValue
	GPUs     []gpuInventoryRow
	Live     []keyValue
	Stop     []keyValue
	Heatmap  heatmapView
	Events   []fleetEventRow
	Burnins  []burninRow
	EventMax int
}

type keyValue struct{ Key, Value string }

type gpuInventoryRow struct {
	Index                   int
	Model, UUID, VRAM, Info string
}

type fleetEventRow struct {
	Time, ISO, Severity, Kind, Message string
}

type burninRow struct {
	Time, ISO, Verdict, Class, Message string
}

func (s *FleetServer) nodePage(r *nethttp.Request, sc scope, now time.Time) (page, error) {
	ctx := r.Context()
	id := r.PathValue("id")
	n, err := s.store.Node(ctx, id)
	if gpuwarden.ErrorCodeOf(err) == gpuwarden.ENotFound || (err == nil && !sc.canRead(n.Project)) {
		// Not found rather than forbidden, as in the API: another
		// project's node IDs are not this token's business.
		return page{}, gpuwarden.Errorf(gpuwarden.ENotFound, "no node %s", id).WithHint("the overview lists the nodes you can see")
	}
	if err != nil {
		return page{}, err
	}
	projects, err := s.readableProjects(r, sc)
	if err != nil {
		return page{}, err
	}
	cur := currencies(projects)(n)
	b := nodeBody{Row: s.nodeRow(n, now, cur), EventMax: maxNodeEvents}
	l := n.Labels
	add := func(k, v string) {
		if v != "" {
			b.Labels = append(b.Labels, keyValue{k, v})
		}
	}
	add("node ID", n.ID)
	add("hostname", n.Hostname)
	add("project", n.Project)
	add("owner", cmp.Or(l.Owner, "(none)"))
	add("provider", l.Provider)
	add("region", l.Region)
	add("instance type", l.InstanceType)
	add("price", b.Row.Price)
	if l.Spot {
		add("spot", "yes")
	}
	if l.TTLSeconds > 0 {
		ttl := time.Duration(l.TTLSeconds) * time.Second
		add("TTL", fmtDuration(ttl)+", until "+stampUTC(n.Registered.Add(ttl)))
	}
	if !l.LaunchedAt.IsZero() {
		add("launched", stampUTC(l.LaunchedAt))
	}
	if !n.Registered.IsZero() {
		add("registered", stampUTC(n.Registered))
	}
	add("agent version", n.AgentVersion)
	for _, k := range sortedStrings(l.Extra) {
		add(k, l.Extra[k])
	}
	for _, g := range n.GPUs {
		row := gpuInventoryRow{Index: g.Index, Model: cmp.Or(modelOf(g), "GPU"), UUID: g.UUID}
		if g.VRAMBytes > 0 {
			row.VRAM = fmtBytes(float64(g.VRAMBytes))
		}
		var info []string
		if g.ComputeCapability != "" {
			info = append(info, "CC "+g.ComputeCapability)
		}
		if g.PCIeGen > 0 {
			info = append(info, fmt.Sprintf("PCIe gen %d ×%d", g.PCIeGen, g.PCIeWidth))
		}
		if g.MIG {
			info = append(info, "MIG")
		}
		if g.PowerLimitWatts > 0 {
			info = append(info, fmt.Sprintf("%.0f W", g.PowerLimitWatts))
		}
		row.Info = strings.Join(info, " · ")
		b.GPUs = append(b.GPUs, row)
	}
	hb := n.Live
	b.Stop = stopDetails(hb.Stop, now)
	if hb.State == gpuwarden.NodeGone {
		b.Live = append(b.Live, keyValue{"state", "gone"}, keyValue{"marked gone", stampUTC(n.LastSeen)})
		if hb.Diagnosis != "" {
			b.Live = append(b.Live, keyValue{"note", hb.Diagnosis})
		}
	} else if !hb.Time.IsZero() {
		b.Live = append(b.Live, keyValue{"reported state", cmp.Or(hb.State, "(none)")},
			keyValue{"GPU utilisation", fmtPct(hb.GPUUtil)}, keyValue{"agent clock", stampUTC(hb.Time)})
		if !hb.IdleSince.IsZero() {
			b.Live = append(b.Live, keyValue{"idle since", stampUTC(hb.IdleSince) + " (" + fmtDuration(now.Sub(hb.IdleSince)) + ")"})
		}
		if hb.Diagnosis != "" {
			b.Live = append(b.Live, keyValue{"diagnosis", hb.Diagnosis})
		}
	}
	if !n.LastSeen.IsZero() && hb.State != gpuwarden.NodeGone {
		b.Live = append(b.Live, keyValue{"last heartbeat", stampUTC(n.LastSeen) + " (" + b.Row.LastSeen + ")"})
	}

	to := now.Truncate(time.Hour).Add(time.Hour)
	from := to.Add(-24 * time.Hour)
	hours, err := s.store.Hours(ctx, n.Project, from, to)
	if err != nil {
		return page{}, err
	}
	hours = slices.DeleteFunc(hours, func(h gpuwarden.NodeHour) bool { return h.Node != n.ID })
	hm := report.Heatmap(report.Input{Now: now, Nodes: []gpuwarden.Node{n}, Hours: hours}, from, to)
	b.Heatmap = heatmapSVG(hm, true)

	events, err := s.store.Events(ctx, gpuwarden.EventQuery{Project: n.Project, Node: n.ID, Limit: maxNodeEvents})
	if err != nil {
		return page{}, err
	}
	for _, e := range events {
		b.Events = append(b.Events, fleetEventRow{Time: fmtWhen(e.Time.UTC(), now), ISO: e.Time.UTC().Format(time.RFC3339),
			Severity: cmp.Or(e.Severity, gpuwarden.SeverityInfo), Kind: e.Kind, Message: e.Message})
	}
	burnins, err := s.store.Events(ctx, gpuwarden.EventQuery{Project: n.Project, Node: n.ID, Kinds: []string{report.KindBurnin}, Limit: maxBurnins})
	if err != nil {
		return page{}, err
	}
	for _, e := range burnins {
		v := burninVerdict(e.Event)
		b.Burnins = append(b.Burnins, burninRow{Time: fmtWhen(e.Time.UTC(), now), ISO: e.Time.UTC().Format(time.RFC3339),
			Verdict: cmp.Or(v, "unknown"), Class: verdictClass(v), Message: e.Message})
	}
	return page{tmpl: "node", title: "Node " + b.Row.Host, body: b}, nil
}

// burninVerdict reads a burn-in event's verdict as the scorecards do: the
// Data field, else the report inside.
func burninVerdict(e gpuwarden.Event) string {
	if v := e.Data["verdict"]; v != "" {
		return v
	}
	var r struct {
		Verdict string `json:"verdict"`
	}
	if json.Unmarshal([]byte(e.Data["report"]), &r) == nil {
		return r.Verdict
	}
	return ""
}

func verdictClass(v string) string {
	switch v {
	case gpuwarden.VerdictPass:
		return "ok"
	case gpuwarden.VerdictWarn:
		return "warn"
	case gpuwarden.VerdictFail:
		return "bad"
	}
	return "muted"
}

func sortedStrings(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// --- one project ---

type projectBody struct {
	Name       string
	Month      string
	Budgets    []budgetRow
	ByOwner    spendTable
	ByProvider spendTable
	Findings   []string
	Nodes      []nodeRow
}

// spendTable is one grouping of a project's spend, titled by its key.
type spendTable struct {
	Title string
	Rows  []spendRowView
}

type spendRowView struct {
	Key, Currency, Spent, Burn, Forecast string
	AfterStop                            string
	Nodes, Running                       int
	None, Total                          bool
}

func (s *FleetServer) projectPage(r *nethttp.Request, sc scope, now time.Time) (page, error) {
	name := r.PathValue("name")
	missing := gpuwarden.Errorf(gpuwarden.ENotFound, "no project %s", name).WithHint("the overview lists the projects you can see")
	if ValidProject(name, false) != nil || !sc.canRead(name) {
		return page{}, missing
	}
	projects, err := s.readableProjects(r, sc)
	if err != nil {
		return page{}, err
	}
	nodes, err := s.store.Nodes(r.Context(), name)
	if err != nil {
		return page{}, err
	}
	if len(nodes) == 0 && !slices.ContainsFunc(projects, func(p gpuwarden.Project) bool { return p.Name == name }) {
		return page{}, missing
	}
	b := projectBody{Name: name}
	for _, by := range []string{report.ByProject, report.ByOwner, report.ByProvider} {
		v, err := s.buildReport(r, name, now, report.Request{Name: "spend", By: by})
		if err != nil {
			return page{}, err
		}
		sr := v.(report.SpendReport)
		b.Month = sr.Month
		switch by {
		case report.ByProject:
			b.Budgets = budgetRows(slices.DeleteFunc(sr.Rows, func(row report.SpendRow) bool { return row.Key != name }))
			b.Findings = sr.Findings
		case report.ByOwner:
			b.ByOwner = spendTable{Title: "Owner", Rows: spendRows(sr)}
		case report.ByProvider:
			b.ByProvider = spendTable{Title: "Provider", Rows: spendRows(sr)}
		}
	}
	b.Nodes = s.nodeRows(nodes, now, currencies(projects))
	return page{tmpl: "project", title: "Project " + name, nav: projectURL(name), body: b}, nil
}

func spendRows(r report.SpendReport) []spendRowView {
	out := make([]spendRowView, 0, len(r.Rows)+len(r.Totals))
	for _, row := range r.Rows {
		out = append(out, spendRowView{Key: row.Key, Currency: string(cmp.Or(row.Currency, "?")), Spent: fmtMoney(row.Currency, row.Spent),
			Burn: fmtRate(row.Currency, row.HourlyBurn), Forecast: fmtMoney(row.Currency, row.Forecast), Nodes: row.Nodes, Running: row.Running,
			None: row.Key == report.None || row.Key == report.Unknown, AfterStop: afterStopCell(row.Currency, row.AfterStop, row.AfterStopHourly)})
	}
	if len(r.Rows) > 1 {
		for _, t := range r.Totals {
			out = append(out, spendRowView{Key: "total", Currency: string(cmp.Or(t.Currency, "?")), Spent: fmtMoney(t.Currency, t.Spent),
				Burn: fmtRate(t.Currency, t.HourlyBurn), Forecast: fmtMoney(t.Currency, t.Forecast), Nodes: t.Nodes, Running: t.Running, Total: true,
				AfterStop: afterStopCell(t.Currency, t.AfterStop, t.AfterStopHourly)})
		}
	}
	return out
}

// --- orphans ---

type orphansBody struct {
	IdleAfter, LostAfter string
	Summary              []string
	Rows                 []orphanRow
	Advice               []report.ReasonCount
}

type orphanRow struct {
	Node, Href, Host, Project, Owner, Provider, State, StateClass string
	Reasons                                                       []orphanReasonView
	Price, SoFar, Weekly, AfterStop                               string
}

// orphanReasonView is one reason with its evidence and fix, coloured: a
// stop that did not end the bill in the warning colour of a lost box.
type orphanReasonView struct {
	report.OrphanReason
	Class string
}

func (s *FleetServer) orphansPage(r *nethttp.Request, sc scope, now time.Time) (page, error) {
	v, err := s.buildReport(r, sc.Project, now, report.Request{Name: "orphans"})
	if err != nil {
		return page{}, err
	}
	or := v.(report.OrphanReport)
	b := orphansBody{IdleAfter: fmtDuration(time.Duration(or.IdleAfterSeconds) * time.Second),
		LostAfter: fmtDuration(time.Duration(or.LostAfterSeconds) * time.Second), Advice: or.Reasons}
	for _, t := range or.Totals {
		noun := "orphans bill"
		if t.Orphans == 1 {
			noun = "orphan bills"
		}
		line := fmt.Sprintf("%d %s %s: %s a week if left on, %s in the last 7 days", t.Orphans, noun,
			fmtRate(t.Currency, t.HourlyPrice), fmtMoney(t.Currency, t.WeeklyCost), fmtMoney(t.Currency, t.CostSoFar))
		if t.AfterStop > 0 {
			line += fmt.Sprintf(", %s of it still billing after stop", fmtMoney(t.Currency, t.AfterStop))
		}
		b.Summary = append(b.Summary, line+".")
	}
	for _, o := range or.Orphans {
		st := o.State
		if slices.ContainsFunc(o.Reasons, func(r report.OrphanReason) bool { return r.Reason == report.ReasonHeartbeatLost }) {
			st = gpuwarden.NodeLost
		}
		reasons := make([]orphanReasonView, len(o.Reasons))
		for i, rs := range o.Reasons {
			reasons[i] = orphanReasonView{OrphanReason: rs, Class: "warn"}
			if rs.Reason == report.ReasonPoweredOff || rs.Reason == report.ReasonStopRequested {
				reasons[i].Class = "bad"
			}
		}
		row := orphanRow{Node: o.Node, Href: nodeURL(o.Node), Host: cmp.Or(o.Hostname, o.Node), Project: o.Project,
			Owner: o.Owner, Provider: o.Provider, State: st, StateClass: stateClass(st), Reasons: reasons,
			Price: fmtRate(o.Currency, o.BillsHourly), SoFar: fmtMoney(o.Currency, o.CostSoFar), Weekly: fmtMoney(o.Currency, o.WeeklyCost)}
		if o.AfterStop > 0 {
			row.AfterStop = "incl. " + fmtMoney(o.Currency, o.AfterStop) + " after stop"
		}
		b.Rows = append(b.Rows, row)
	}
	return page{tmpl: "orphans", title: "Orphan review", nav: "/orphans", body: b}, nil
}

// --- scorecards ---

type scorecardsBody struct {
	Days      int
	Nodes     []nodeScoreRow
	Providers []providerRow
}

type nodeScoreRow struct {
	Node, Href, Host, Provider string
	BurnIns, LastBurnIn        string
	LastClass                  string
	Xids, ECC, Runs            string
	Preemptions, UpHours       string
	Errors                     int
	ErrorRate                  string
}

type providerRow struct {
	Provider                         string
	Nodes                            int
	UpHours, Provisioning, Outliers  string
	Preemptions, BurnIns, Runs, Fail string
}

func (s *FleetServer) scorecardsPage(r *nethttp.Request, sc scope, now time.Time) (page, error) {
	const days = 30
	nv, err := s.buildReport(r, sc.Project, now, report.Request{Name: "nodes", Days: days})
	if err != nil {
		return page{}, err
	}
	pv, err := s.buildReport(r, sc.Project, now, report.Request{Name: "providers", Days: days})
	if err != nil {
		return page{}, err
	}
	b := scorecardsBody{Days: days}
	for _, n := range nv.([]report.NodeScore) {
		row := nodeScoreRow{Node: n.Node, Href: nodeURL(n.Node), Host: cmp.Or(n.Hostname, n.Node), Provider: n.Provider,
			BurnIns:    fmt.Sprintf("%d (%d pass, %d warn, %d fail)", n.BurnIns, n.BurnInPass, n.BurnInWarn, n.BurnInFail),
			LastBurnIn: "—", LastClass: "muted", Xids: strconv.Itoa(n.Xids), ECC: strconv.Itoa(n.ECC),
			Runs:        fmt.Sprintf("%d (%d failed)", n.Runs, n.FailedRuns),
			Preemptions: strconv.Itoa(n.Preemptions),
			UpHours:     strconv.FormatFloat(n.UpHours, 'f', 1, 64), Errors: n.Errors,
			ErrorRate: strconv.FormatFloat(n.ErrorRate, 'f', 2, 64)}
		if n.BurnIns == 0 {
			row.BurnIns = "0"
		}
		if n.Notices > 0 {
			row.Preemptions += fmt.Sprintf(" (+%d notices)", n.Notices)
		}
		if n.Runs == 0 {
			row.Runs = "0"
		}
		if n.LastBurnIn != "" {
			row.LastBurnIn, row.LastClass = n.LastBurnIn+" "+stampUTC(n.LastBurnInAt), verdictClass(n.LastBurnIn)
		}
		if len(n.XidCodes) > 0 {
			codes := make([]string, len(n.XidCodes))
			for i, c := range n.XidCodes {
				codes[i] = strconv.FormatUint(c, 10)
			}
			row.Xids += " (Xid " + strings.Join(codes, ", ") + ")"
		}
		if n.Provider == report.Unknown {
			row.Href = "" // the ledger no longer lists it: no page to link
		}
		b.Nodes = append(b.Nodes, row)
	}
	for _, p := range pv.([]report.ProviderScore) {
		row := providerRow{Provider: p.Provider, Nodes: p.Nodes, UpHours: strconv.FormatFloat(p.UpHours, 'f', 1, 64),
			Provisioning: "—", Outliers: "—",
			Preemptions: fmt.Sprintf("%d (%.2f per 100 h)", p.Preemptions, p.PreemptionsPer100Hours),
			BurnIns:     fmt.Sprintf("%d (%d failed)", p.BurnIns, p.FailedBurnIns),
			Runs:        fmt.Sprintf("%d (%d failed)", p.Runs, p.FailedRuns),
			Fail:        fmt.Sprintf("%.1f %%", 100*p.FailureRate)}
		if pr := p.Provisioning; pr.Samples > 0 {
			row.Provisioning = fmt.Sprintf("p50 %s, p95 %s (%d)", fmtDuration(secondsOf(pr.P50Seconds)), fmtDuration(secondsOf(pr.P95Seconds)), pr.Samples)
			if len(pr.Outliers) > 0 {
				var names []string
				for _, o := range pr.Outliers {
					names = append(names, o.Node+" "+fmtDuration(secondsOf(o.Seconds)))
				}
				row.Outliers = strings.Join(names, ", ")
			} else {
				row.Outliers = "none"
			}
		}
		b.Providers = append(b.Providers, row)
	}
	return page{tmpl: "scorecards", title: "Scorecards", nav: "/scorecards", body: b}, nil
}

func secondsOf(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// --- heatmap ---

type heatmapBody struct {
	Hours   int
	Choices []navLink
	Map     heatmapView
}

// heatmapView is an SVG grid: hours across, GPUs down, one rect per
// GPU-hour coloured in ten steps of utilisation, its <title> the tooltip.
type heatmapView struct {
	Width, Height int
	LabelW, TopH  int
	MeanX         int
	Rows          []heatmapRowView
	Ticks         []chartTick
	Legend        []heatmapLegend
	Empty         bool
	From, To      string
	Label         string
}

type heatmapRowView struct {
	Y, TextY      int
	Label, Href   string
	Mean, MeanCls string
	Cells         []heatmapCell
}

type heatmapCell struct {
	X, W, H int
	Class   string
	Tip     string
}

type heatmapLegend struct {
	Class, Label string
}

func (s *FleetServer) heatmapPage(r *nethttp.Request, sc scope, now time.Time) (page, error) {
	hours := 24
	if v := r.URL.Query().Get("hours"); v != "" {
		h, err := strconv.Atoi(v)
		if err != nil || h < 1 || h > maxHeatmapPageHours {
			return page{}, gpuwarden.Errorf(gpuwarden.EInvalid, "hours %q: use 1 to %d", v, maxHeatmapPageHours)
		}
		hours = h
	}
	v, err := s.buildReport(r, sc.Project, now, report.Request{Name: "heatmap", Hours: hours})
	if err != nil {
		return page{}, err
	}
	b := heatmapBody{Hours: hours, Map: heatmapSVG(v.(report.HeatmapReport), false)}
	for _, c := range []struct {
		hours int
		label string
	}{{24, "24 hours"}, {72, "3 days"}, {168, "7 days"}} {
		b.Choices = append(b.Choices, navLink{Href: "/heatmap?hours=" + strconv.Itoa(c.hours), Label: c.label, Current: c.hours == hours})
	}
	return page{tmpl: "heatmap", title: "Utilisation heatmap", nav: "/heatmap", refresh: 4 * fleetRefreshSeconds, body: b}, nil
}

// heatmapSVG lays the report out in SVG units; oneNode labels rows by GPU
// alone, for the node page.
func heatmapSVG(hm report.HeatmapReport, oneNode bool) heatmapView {
	const rowH, labelW, meanW, topH = 18, 220, 64, 18
	v := heatmapView{LabelW: labelW, TopH: topH, From: stampUTC(hm.From), To: stampUTC(hm.To), Empty: len(hm.Rows) == 0 || len(hm.Hours) == 0}
	if oneNode {
		v.LabelW = 64
	}
	for i := range 10 {
		v.Legend = append(v.Legend, heatmapLegend{Class: "u" + strconv.Itoa(i), Label: fmt.Sprintf("%d–%d %%", 10*i, 10*i+10)})
	}
	v.Legend = append(v.Legend, heatmapLegend{Class: "nd", Label: "no data"})
	if v.Empty {
		return v
	}
	cols := len(hm.Hours)
	cellW := max(heatmapWidth/cols, 4)
	v.MeanX = v.LabelW + cellW*cols + 6
	v.Width = v.LabelW + cellW*cols + meanW
	v.Height = topH + rowH*len(hm.Rows) + 2
	v.Label = fmt.Sprintf("GPU utilisation per hour, %s to %s", v.From, v.To)
	every := 6
	if cols > 72 {
		every = 24
	}
	for i, h := range hm.Hours {
		if h.Hour()%every != 0 {
			continue
		}
		label := h.Format("15:04")
		if h.Hour() == 0 {
			label = h.Format("Jan 02")
		}
		v.Ticks = append(v.Ticks, chartTick{Pos: v.LabelW + i*cellW, Label: label})
	}
	for i, row := range hm.Rows {
		name := cmp.Or(row.Hostname, row.Node)
		label := fmt.Sprintf("%s gpu%d", truncateRunes(name, 24), row.GPU)
		if oneNode {
			label = fmt.Sprintf("GPU %d", row.GPU)
		}
		rv := heatmapRowView{Y: topH + i*rowH, TextY: topH + i*rowH + rowH - 4, Label: label, Mean: "—", MeanCls: "nd"}
		if !oneNode {
			rv.Href = nodeURL(row.Node)
		}
		if row.Mean >= 0 {
			rv.Mean, rv.MeanCls = fmtPct(row.Mean), utilClass(row.Mean)
		}
		for c, u := range row.Cells {
			at := hm.Hours[c]
			tip := fmt.Sprintf("%s gpu%d, %s–%s UTC: ", name, row.GPU, at.Format("Jan 02 15:04"), at.Add(time.Hour).Format("15:04"))
			if u < 0 {
				tip += "no data"
			} else {
				tip += fmtPct(u)
			}
			rv.Cells = append(rv.Cells, heatmapCell{X: v.LabelW + c*cellW, W: cellW - 1, H: rowH - 2, Class: utilClass(u), Tip: tip})
		}
		v.Rows = append(v.Rows, rv)
	}
	return v
}

// utilClass buckets utilisation into ten CSS classes, u0 to u9, and nd
// for no data: classes rather than inline colours, which the CSP forbids.
func utilClass(u float64) string {
	if u < 0 {
		return "nd"
	}
	return "u" + strconv.Itoa(min(int(u/10), 9))
}

func truncateRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
