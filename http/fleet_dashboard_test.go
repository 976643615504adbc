package http

import (
	"context"
	"fmt"
	"io"
	nethttp "net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/report"
	"github.com/gpuwarden/gpuwarden/sqlite"
)

// dashFixture is a fleet server on loopback over a real SQLite file, its
// clock stopped at fixtureNow so that pages render the same every run.
type dashFixture struct {
	t     testing.TB
	srv   *FleetServer
	store gpuwarden.Fleet
	base  string
	// client never follows redirects, so tests see the 303s themselves.
	client *nethttp.Client
	// sessions maps a token to the session cookie its sign-in set.
	sessions map[string]string
}

func newDashFixture(t testing.TB) *dashFixture {
	t.Helper()
	return newDashFixtureAt(t, func() time.Time { return fixtureNow })
}

// newDashFixtureAt is newDashFixture on a clock the test may move.
func newDashFixtureAt(t testing.TB, clock func() time.Time) *dashFixture {
	t.Helper()
	store, err := sqlite.OpenFleet(context.Background(), filepath.Join(t.TempDir(), "server.db"))
	if err != nil {
		t.Fatal(err)
	}
	f := &dashFixture{t: t, store: store, srv: NewFleetServer(store, nil), sessions: map[string]string{}}
	f.srv.Now = clock
	ctx, cancel := context.WithCancel(context.Background())
	addr, err := f.srv.Serve(ctx, "127.0.0.1:0", "", "")
	if err != nil {
		t.Fatal(err)
	}
	f.base = "http://" + addr
	f.client = &nethttp.Client{
		Timeout:       10 * time.Second,
		CheckRedirect: func(*nethttp.Request, []*nethttp.Request) error { return nethttp.ErrUseLastResponse },
	}
	t.Cleanup(func() {
		cancel()
		_ = f.srv.Wait()
		_ = store.Close()
	})
	return f
}

// token creates a token in the ledger and returns its secret.
func (f *dashFixture) token(project, role string) string {
	f.t.Helper()
	tk, secret, err := NewToken(project, role, "test", fixtureNow)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.store.CreateToken(context.Background(), tk); err != nil {
		f.t.Fatal(err)
	}
	return secret
}

// do sends a request as a browser signed in with a token would, and
// returns the answer with its body read: a token (gw_…) is signed in
// through the form once and its session cookie sent, any other cookie
// value sent as the session cookie as it is.
func (f *dashFixture) do(method, path, cookie string, form url.Values, header map[string]string) (*nethttp.Response, string) {
	f.t.Helper()
	if strings.HasPrefix(cookie, tokenPrefix) {
		cookie = f.session(cookie)
	}
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := nethttp.NewRequest(method, f.base+path, body)
	if err != nil {
		f.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if cookie != "" {
		req.AddCookie(&nethttp.Cookie{Name: sessionCookie, Value: cookie})
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp, string(b)
}

// loginForm loads the sign-in form and returns the double-submit value its
// cookie and its hidden field share.
func (f *dashFixture) loginForm() string {
	f.t.Helper()
	resp, body := f.do("GET", "/login", "", nil, nil)
	var cookie string
	for _, c := range resp.Cookies() {
		if c.Name == loginCookie {
			cookie = c.Value
		}
	}
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(body)
	if cookie == "" || m == nil || m[1] != cookie {
		f.t.Fatalf("GET /login: login cookie %q, form field %q; want one value in both", cookie, m)
	}
	return cookie
}

// session signs a token in through the form, once, and returns the
// session cookie it set; a token the form refuses comes back as it is, so
// that a test sends it as a cookie and sees it refused.
func (f *dashFixture) session(token string) string {
	f.t.Helper()
	if v, ok := f.sessions[token]; ok {
		return v
	}
	csrf := f.loginForm()
	resp, _ := f.do("POST", "/login", "", url.Values{"token": {token}, csrfField: {csrf}},
		map[string]string{"Cookie": loginCookie + "=" + csrf})
	v := token
	for _, c := range resp.Cookies() {
		if c.Name == sessionCookie && c.MaxAge > 0 {
			v = c.Value
		}
	}
	f.sessions[token] = v
	return v
}

// seedFleet fills the ledger with a small fleet: two projects with budgets,
// a busy node, an idle one and a lost one without an owner (an orphan),
// with 20 hours of minutes and a few events each. It returns the node IDs.
func seedFleet(t testing.TB, store gpuwarden.Fleet, now time.Time) []string {
	t.Helper()
	ctx := context.Background()
	for _, p := range []gpuwarden.Project{
		{Name: "ml", Budget: 250000, Currency: "EUR", Created: now.Add(-30 * 24 * time.Hour)},
		{Name: "vision", Budget: 30000, Currency: "USD", Created: now.Add(-30 * 24 * time.Hour)},
	} {
		if err := store.PutProject(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	h100 := func(i int) gpuwarden.GPU {
		return gpuwarden.GPU{Index: i, UUID: fmt.Sprintf("GPU-%08d", i), Name: "NVIDIA H100 80GB HBM3", Model: "H100",
			VRAMBytes: 80 * gib, ComputeCapability: "9.0", PowerLimitWatts: 700}
	}
	type seed struct {
		node      gpuwarden.Node
		seen      time.Time
		beat      gpuwarden.Heartbeat
		util      func(hour, gpu int) float64
		hoursBack int
	}
	seeds := []seed{
		{
			node: gpuwarden.Node{ID: "ml-train-1", Project: "ml", Hostname: "train-1.ml.example", AgentVersion: "0.9.0",
				Labels: gpuwarden.NodeLabels{Owner: "ana", Provider: "aws", Region: "eu-west-1", InstanceType: "p5.4xlarge",
					HourlyPrice: 4_200_000, Currency: "EUR", TTLSeconds: 7 * 24 * 3600, Extra: map[string]string{"team": "llm"}},
				GPUs: []gpuwarden.GPU{h100(0), h100(1)}, Registered: now.Add(-3 * 24 * time.Hour)},
			seen:      now.Add(-20 * time.Second),
			beat:      gpuwarden.Heartbeat{Time: now.Add(-20 * time.Second), State: gpuwarden.NodeRunning, GPUUtil: 87, Diagnosis: "healthy"},
			util:      func(h, g int) float64 { return float64(40 + (h*7+g*13)%60) },
			hoursBack: 20,
		},
		{
			node: gpuwarden.Node{ID: "ml-idle-2", Project: "ml", Hostname: "idle-2.ml.example",
				Labels: gpuwarden.NodeLabels{Owner: "bo", Provider: "gcp", Region: "europe-west4", HourlyPrice: 2_100_000, Currency: "EUR", Spot: true},
				GPUs:   []gpuwarden.GPU{h100(0)}, Registered: now.Add(-30 * time.Hour)},
			seen:      now.Add(-40 * time.Second),
			beat:      gpuwarden.Heartbeat{Time: now.Add(-40 * time.Second), State: gpuwarden.NodeRunning, GPUUtil: 0, IdleSince: now.Add(-6 * time.Hour), Diagnosis: "idle"},
			util:      func(h, g int) float64 { return map[bool]float64{true: 0, false: 55}[h < 6] },
			hoursBack: 20,
		},
		{
			node: gpuwarden.Node{ID: "vision-x", Project: "vision", Hostname: "vision-x.example",
				Labels: gpuwarden.NodeLabels{Provider: "lambda", Region: "us-east-1", HourlyPrice: 1_290_000, Currency: "USD"},
				GPUs:   []gpuwarden.GPU{{Index: 0, Name: "NVIDIA A100-SXM4-80GB", Model: "A100", VRAMBytes: 80 * gib}}, Registered: now.Add(-26 * time.Hour)},
			seen:      now.Add(-2 * time.Hour),
			beat:      gpuwarden.Heartbeat{Time: now.Add(-2 * time.Hour), State: gpuwarden.NodeRunning, GPUUtil: 12},
			util:      func(h, g int) float64 { return 12 },
			hoursBack: 20,
		},
	}
	var ids []string
	for _, s := range seeds {
		if _, err := store.RegisterNode(ctx, s.node); err != nil {
			t.Fatal(err)
		}
		s.beat.Node = s.node.ID
		if err := store.RecordHeartbeats(ctx, s.seen, []gpuwarden.Heartbeat{s.beat}); err != nil {
			t.Fatal(err)
		}
		var b gpuwarden.FleetBatch
		last := s.seen.Truncate(time.Minute)
		for m := last.Add(-time.Duration(s.hoursBack) * time.Hour); !m.After(last); m = m.Add(time.Minute) {
			back := int(now.Sub(m) / time.Hour) // hours before now, for the pattern
			nm := gpuwarden.NodeMinute{Minute: m, Samples: 60, CPUPercent: 20}
			for g := range s.node.GPUs {
				nm.GPUUtil = append(nm.GPUUtil, s.util(back, g))
				nm.GPUMemPercent = append(nm.GPUMemPercent, 40)
			}
			b.Minutes = append(b.Minutes, nm)
		}
		b.Events = []gpuwarden.Event{
			{Seq: 1, Time: s.node.Registered, Kind: "agent-start", Severity: gpuwarden.SeverityInfo, Message: "agent started on " + s.node.Hostname},
			{Seq: 2, Time: s.node.Registered.Add(10 * time.Minute), Kind: report.KindBurnin, Severity: gpuwarden.SeverityInfo,
				Message: "burn-in PASS: memory 3.9 TB/s, FP32 58 TFLOP/s", Data: map[string]string{"verdict": gpuwarden.VerdictPass}},
		}
		if s.node.ID == "vision-x" {
			b.Events = append(b.Events, gpuwarden.Event{Seq: 3, Time: s.seen.Add(-time.Minute), Kind: report.KindXid, Severity: gpuwarden.SeverityCritical,
				Message: "Xid 79: GPU has fallen off the bus", Data: map[string]string{"xid": "79"}})
		}
		if _, err := store.Ingest(ctx, s.node.ID, b); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.node.ID)
	}
	return ids
}

func TestFleetLogin(t *testing.T) {
	f := newDashFixture(t)
	good := f.token("ml", gpuwarden.RoleViewer)
	// Each case posts the form it loaded: FORM is the form's double-submit
	// value, in the hidden field and the login cookie alike.
	withForm := func(v url.Values) url.Values { v.Set(csrfField, "FORM"); return v }
	other := strings.Repeat("ab", 32)
	tests := []struct {
		name         string
		form         url.Values
		header       map[string]string
		wantStatus   int
		wantLocation string
		wantCookie   bool
		wantBody     string
	}{
		{"bad token", withForm(url.Values{"token": {"gw_0123456789abcdef_" + strings.Repeat("ab", 32)}}), nil, 401, "", false, "unknown, revoked or mistyped"},
		{"not a token", withForm(url.Values{"token": {"hunter2"}}), nil, 401, "", false, `name="token" type="password"`},
		{"empty", withForm(url.Values{}), nil, 401, "", false, "unknown, revoked or mistyped"},
		{"good token", withForm(url.Values{"token": {good}}), nil, 303, "/", true, ""},
		{"good token with blanks", withForm(url.Values{"token": {"  " + good + "\n"}}), nil, 303, "/", true, ""},
		{"back to the page asked for", withForm(url.Values{"token": {good}, "next": {"/orphans?x=1"}}), nil, 303, "/orphans?x=1", true, ""},
		{"never to another site", withForm(url.Values{"token": {good}, "next": {"//evil.example/"}}), nil, 303, "/", true, ""},
		{"never to another site, backslash", withForm(url.Values{"token": {good}, "next": {"/\\evil.example/"}}), nil, 303, "/", true, ""},
		{"same origin", withForm(url.Values{"token": {good}}), map[string]string{"Origin": "ORIGIN"}, 303, "/", true, ""},
		{"cross origin", withForm(url.Values{"token": {good}}), map[string]string{"Origin": "http://evil.example"}, 403, "", false, "cross-origin"},
		{"cross site fetch", withForm(url.Values{"token": {good}}), map[string]string{"Sec-Fetch-Site": "cross-site"}, 403, "", false, "cross-origin"},
		{"no form value", url.Values{"token": {good}}, nil, 403, "", false, "sign in again"},
		{"another form's value", url.Values{"token": {good}, csrfField: {other}}, nil, 403, "", false, "sign in again"},
		{"no login cookie", withForm(url.Values{"token": {good}}), map[string]string{"Cookie": ""}, 403, "", false, "sign in again"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			csrf := f.loginForm()
			header := map[string]string{"Cookie": loginCookie + "=" + csrf}
			for k, v := range tt.header {
				if v == "ORIGIN" {
					v = f.base
				}
				header[k] = v
			}
			form := url.Values{}
			for k, v := range tt.form {
				if k == csrfField && v[0] == "FORM" {
					v = []string{csrf}
				}
				form[k] = v
			}
			resp, body := f.do("POST", "/login", "", form, header)
			if got := resp.StatusCode; got != tt.wantStatus {
				t.Fatalf("status = %d, want %d\n%s", got, tt.wantStatus, body)
			}
			if got := resp.Header.Get("Location"); got != tt.wantLocation {
				t.Errorf("Location = %q, want %q", got, tt.wantLocation)
			}
			if !strings.Contains(body, tt.wantBody) {
				t.Errorf("body lacks %q:\n%s", tt.wantBody, body)
			}
			var c *nethttp.Cookie
			for _, rc := range resp.Cookies() {
				if rc.Name == sessionCookie {
					c = rc
				}
				if strings.Contains(rc.Value, good[len(good)-64:]) {
					t.Errorf("cookie %s holds the token's secret", rc.Name)
				}
			}
			if got := c != nil; got != tt.wantCookie {
				t.Fatalf("session cookie set = %v, want %v", got, tt.wantCookie)
			}
			if c == nil {
				return
			}
			_, isSession := sessionHash(c.Value)
			got := fmt.Sprintf("session=%v path=%s httponly=%v secure=%v samesite=%v maxage=%d",
				isSession, c.Path, c.HttpOnly, c.Secure, c.SameSite, c.MaxAge)
			want := "session=true path=/ httponly=true secure=false samesite=3 maxage=43200"
			if got != want {
				t.Errorf("cookie %s, want %s (raw %q)", got, want, resp.Header.Get("Set-Cookie"))
			}
			// The cookie opens the pages.
			if resp, _ := f.do("GET", "/", c.Value, nil, nil); resp.StatusCode != 200 {
				t.Errorf("GET / with the new cookie = %d, want 200", resp.StatusCode)
			}
		})
	}
	t.Run("form", func(t *testing.T) {
		resp, body := f.do("GET", "/login?next=%2Fheatmap", "", nil, map[string]string{"Cookie": legacyCookie + "=" + good})
		if resp.StatusCode != 200 {
			t.Fatalf("GET /login = %d", resp.StatusCode)
		}
		for _, want := range []string{`<form method="post" action="/login">`, `type="password"`, `name="next" value="/heatmap"`,
			`name="csrf" value="`, "signed in for 12 hours"} {
			if !strings.Contains(body, want) {
				t.Errorf("login form lacks %q", want)
			}
		}
		if strings.Contains(body, `id="page"`) || strings.Contains(body, scriptURL) {
			t.Error("the login form refreshes itself; typing a token would be wiped")
		}
		// The cookie that held a raw token before sessions is deleted.
		deleted := false
		for _, c := range resp.Cookies() {
			deleted = deleted || c.Name == legacyCookie && c.MaxAge < 0
		}
		if !deleted {
			t.Errorf("the form leaves the old token cookie in place (Set-Cookie %q)", resp.Header.Values("Set-Cookie"))
		}
		checkHTMLHeaders(t, resp)
	})
}

func TestFleetPagesNeedASignedInToken(t *testing.T) {
	f := newDashFixture(t)
	seedFleet(t, f.store, fixtureNow)
	revoked := f.token("ml", gpuwarden.RoleViewer)
	id, _, _ := splitToken(revoked)
	if err := f.store.RevokeToken(context.Background(), id, fixtureNow); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/", "/nodes/ml-train-1", "/projects/ml", "/orphans", "/scorecards", "/heatmap?hours=48"} {
		for _, cookie := range []string{"", "gw_nonsense", revoked} {
			resp, _ := f.do("GET", path, cookie, nil, nil)
			want := "/login?next=" + url.QueryEscape(path)
			if resp.StatusCode != 303 || resp.Header.Get("Location") != want {
				t.Errorf("GET %s (cookie %.12q) = %d to %q, want 303 to %q", path, cookie, resp.StatusCode, resp.Header.Get("Location"), want)
			}
		}
	}
	// The API's bearer header opens the pages too, for scripts and curl.
	admin := f.token(gpuwarden.AllProjects, gpuwarden.RoleAdmin)
	if resp, _ := f.do("GET", "/orphans", "", nil, map[string]string{"Authorization": "Bearer " + admin}); resp.StatusCode != 200 {
		t.Errorf("GET /orphans with a bearer header = %d, want 200", resp.StatusCode)
	}
}

func TestFleetPages(t *testing.T) {
	f := newDashFixture(t)
	seedFleet(t, f.store, fixtureNow)
	admin := f.token(gpuwarden.AllProjects, gpuwarden.RoleAdmin)
	viewer := f.token("ml", gpuwarden.RoleViewer)
	tests := []struct {
		name, token, path string
		want              int
		contains          []string
		lacks             []string
	}{
		{"admin overview", admin, "/", 200,
			[]string{"train-1.ml.example", "idle-2.ml.example", "vision-x.example", `href="/projects/vision"`, `href="/orphans"`,
				`<span class="badge bad">lost</span>`, "€2,500.00", "$300.00", "€4.20/h", `class="bar-forecast`, "no owner", "6h 00m",
				`<span class="stat-n bad">2</span> orphans`, "admin of all projects"},
			[]string{"No agents yet"}},
		{"viewer overview", viewer, "/", 200,
			[]string{"train-1.ml.example", "idle-2.ml.example", `href="/projects/ml"`, "Project ml", "viewer of project ml"},
			[]string{"vision", "$"}},
		{"admin lost only", admin, "/?state=lost", 200, []string{"vision-x.example", "lost only, 1 of 3"}, []string{"train-1.ml.example"}},
		{"admin node", admin, "/nodes/ml-train-1", 200,
			[]string{"train-1.ml.example", "p5.4xlarge", "team", "llm", "GPU 0", "GPU 1", "80.0 GiB", `<svg class="hm"`,
				"<title>train-1.ml.example gpu1, ", "burn-in PASS", `<span class="badge ok">PASS</span>`, "agent started on train-1.ml.example",
				"healthy", "87%"},
			nil},
		{"admin lost node", admin, "/nodes/vision-x", 200, []string{"vision-x.example", "Xid 79", `<span class="badge bad">lost</span>`, "no owner"}, nil},
		{"viewer node", viewer, "/nodes/ml-idle-2", 200, []string{"idle-2.ml.example", "idle since"}, nil},
		{"viewer, other project's node", viewer, "/nodes/vision-x", 404, []string{"no node vision-x"}, []string{"vision-x.example", "lambda"}},
		{"unknown node", admin, "/nodes/nope", 404, []string{"no node nope"}, nil},
		{"admin project", admin, "/projects/ml", 200,
			[]string{"Project ml", "By owner", "ana", "bo", "By provider", "aws", "gcp", "train-1.ml.example", "€2,500.00"}, []string{"vision-x"}},
		{"viewer project", viewer, "/projects/ml", 200, []string{"By owner", "ana"}, nil},
		{"viewer, other project", viewer, "/projects/vision", 404, []string{"no project vision"}, []string{"lambda"}},
		{"unknown project", admin, "/projects/nope", 404, []string{"no project nope"}, nil},
		{"admin orphans", admin, "/orphans", 200,
			[]string{"vision-x.example", "no-owner", "heartbeat-lost", "last heartbeat 2h ago", "$216.72", "What to do"}, []string{"train-1"}},
		{"viewer orphans", viewer, "/orphans", 200, []string{"idle-2.ml.example", "idle for 6h"}, []string{"vision-x"}},
		{"admin scorecards", admin, "/scorecards", 200,
			[]string{"train-1.ml.example", "vision-x.example", "Xid 79", "aws", "lambda", "PASS 2026-"}, nil},
		{"viewer scorecards", viewer, "/scorecards", 200, []string{"train-1.ml.example"}, []string{"vision-x", "lambda"}},
		{"admin heatmap", admin, "/heatmap", 200,
			[]string{`<svg class="hm"`, "train-1.ml.example gpu0", "train-1.ml.example gpu1", "vision-x.example gpu0",
				`<rect class="u0"`, `<rect class="nd"`, "no data", "90–100 %", `href="/nodes/ml-idle-2"`}, nil},
		{"admin heatmap, a week", admin, "/heatmap?hours=168", 200, []string{`<svg class="hm"`, `aria-current="page">7 days`}, nil},
		{"heatmap, bad span", admin, "/heatmap?hours=9999", 400, []string{"hours"}, nil},
		{"viewer heatmap", viewer, "/heatmap", 200, []string{"idle-2.ml.example gpu0"}, []string{"vision-x"}},
		{"no such page", admin, "/nodes", 404, []string{`"code":"not_found"`}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := f.do("GET", tt.path, tt.token, nil, nil)
			if resp.StatusCode != tt.want {
				t.Fatalf("GET %s = %d, want %d\n%s", tt.path, resp.StatusCode, tt.want, body)
			}
			for _, s := range tt.contains {
				if !strings.Contains(body, s) {
					t.Errorf("GET %s lacks %q", tt.path, s)
				}
			}
			for _, s := range tt.lacks {
				if strings.Contains(body, s) {
					t.Errorf("GET %s shows %q", tt.path, s)
				}
			}
			if tt.path == "/nodes" {
				return // the JSON catch-all, not a page
			}
			checkHTMLHeaders(t, resp)
			if tt.want == 200 {
				for _, s := range []string{`id="page" data-refresh=`, `href="/orphans"`, `href="/scorecards"`, `href="/heatmap"`,
					`action="/logout"`, `refreshed <time datetime="2026-11-29T12:00:00Z">`} {
					if !strings.Contains(body, s) {
						t.Errorf("GET %s lacks the layout's %q", tt.path, s)
					}
				}
			}
			// CSP style-src 'self' blocks style attributes; no page may rely on one.
			if strings.Contains(body, "style=") || strings.Contains(body, "<style") || inlineHandler.MatchString(body) {
				t.Errorf("GET %s has inline style or script attributes", tt.path)
			}
		})
	}
}

// inlineHandler finds event handler attributes, which the CSP blocks.
var inlineHandler = regexp.MustCompile(`<[^>]*\son[a-z]+=`)

// checkHTMLHeaders checks what every dashboard answer carries.
func checkHTMLHeaders(t *testing.T, resp *nethttp.Response) {
	t.Helper()
	for k, want := range map[string]string{
		"Content-Type":            "text/html; charset=utf-8",
		"Cache-Control":           "no-store",
		"Content-Security-Policy": fleetContentSecurityPolicy,
		"X-Frame-Options":         "DENY",
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}

func TestFleetPagesEscapeEverything(t *testing.T) {
	f := newDashFixture(t)
	admin := f.token(gpuwarden.AllProjects, gpuwarden.RoleAdmin)
	evil := `<script>alert(1)</script>`
	n := gpuwarden.Node{ID: "evil-1", Project: "ml", Hostname: evil, Registered: fixtureNow.Add(-time.Hour),
		Labels: gpuwarden.NodeLabels{InstanceType: `"><img src=x onerror=alert(2)>`, Provider: evil, Region: "javascript:alert(3)",
			Extra: map[string]string{evil: evil}, HourlyPrice: 1_000_000, Currency: "EUR"},
		GPUs: []gpuwarden.GPU{{Index: 0, Model: evil, UUID: evil}}}
	if _, err := f.store.RegisterNode(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	hb := gpuwarden.Heartbeat{Node: n.ID, Time: fixtureNow, State: gpuwarden.NodeRunning, GPUUtil: 50, Diagnosis: evil}
	if err := f.store.RecordHeartbeats(context.Background(), fixtureNow, []gpuwarden.Heartbeat{hb}); err != nil {
		t.Fatal(err)
	}
	batch := gpuwarden.FleetBatch{
		Minutes: []gpuwarden.NodeMinute{{Minute: fixtureNow.Add(-time.Minute), Samples: 60, GPUUtil: []float64{50}}},
		Events:  []gpuwarden.Event{{Seq: 1, Time: fixtureNow, Kind: evil, Severity: evil, Message: evil}},
	}
	if _, err := f.store.Ingest(context.Background(), n.ID, batch); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/", "/nodes/evil-1", "/projects/ml", "/orphans", "/scorecards", "/heatmap"} {
		t.Run(path, func(t *testing.T) {
			resp, body := f.do("GET", path, admin, nil, nil)
			if resp.StatusCode != 200 {
				t.Fatalf("GET %s = %d\n%s", path, resp.StatusCode, body)
			}
			if strings.Contains(body, evil) || strings.Contains(body, "<img") {
				t.Errorf("GET %s shows markup from a label unescaped", path)
			}
			if !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
				t.Errorf("GET %s lacks the escaped hostname", path)
			}
		})
	}
}

func TestFleetEmptyState(t *testing.T) {
	f := newDashFixture(t)
	admin := f.token(gpuwarden.AllProjects, gpuwarden.RoleAdmin)
	resp, body := f.do("GET", "/", admin, nil, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("GET / = %d\n%s", resp.StatusCode, body)
	}
	for _, want := range []string{"No agents yet: run <code>gpuwarden up --server " + f.base + " --token-file F</code>",
		"gpuwarden token create", "No projects and no spend yet"} {
		if !strings.Contains(body, want) {
			t.Errorf("empty overview lacks %q", want)
		}
	}
	if strings.Contains(body, `id="h-nodes"`) {
		t.Error("empty overview shows an empty nodes table")
	}
	for path, want := range map[string]string{"/orphans": "No orphans", "/scorecards": "No nodes yet", "/heatmap": "No utilisation recorded"} {
		if _, body := f.do("GET", path, admin, nil, nil); !strings.Contains(body, want) {
			t.Errorf("empty %s lacks %q", path, want)
		}
	}
}

func TestFleetPagesAnswerGetAndHeadOnly(t *testing.T) {
	f := newDashFixture(t)
	seedFleet(t, f.store, fixtureNow)
	admin := f.token(gpuwarden.AllProjects, gpuwarden.RoleAdmin)
	for _, path := range []string{"/", "/nodes/ml-train-1", "/projects/ml", "/orphans", "/scorecards", "/heatmap"} {
		tests := []struct {
			method    string
			want      int
			wantAllow string
			wantBody  bool
		}{
			{"GET", 200, "", true},
			{"HEAD", 200, "", false},
			{"POST", 405, "GET, HEAD", true},
			{"PUT", 405, "GET, HEAD", true},
			{"DELETE", 405, "GET, HEAD", true},
		}
		for _, tt := range tests {
			t.Run(tt.method+" "+path, func(t *testing.T) {
				resp, body := f.do(tt.method, path, admin, nil, nil)
				if resp.StatusCode != tt.want {
					t.Fatalf("%s %s = %d, want %d", tt.method, path, resp.StatusCode, tt.want)
				}
				if got := resp.Header.Get("Allow"); got != tt.wantAllow {
					t.Errorf("Allow = %q, want %q", got, tt.wantAllow)
				}
				if got := body != ""; got != tt.wantBody {
					t.Errorf("body present = %v, want %v", got, tt.wantBody)
				}
			})
		}
	}
}

func TestFleetLogout(t *testing.T) {
	f := newDashFixture(t)
	admin := f.token(gpuwarden.AllProjects, gpuwarden.RoleAdmin)
	other := f.token(gpuwarden.AllProjects, gpuwarden.RoleViewer)
	const form, otherForm, noSession = "FORM", "OTHER", "NONE"
	tests := []struct {
		name, method, csrf string
		header             map[string]string
		want               int
		wantEnded          bool
	}{
		{"post", "POST", form, nil, 303, true},
		{"same origin", "POST", form, map[string]string{"Origin": "ORIGIN"}, 303, true},
		{"same origin fetch", "POST", form, map[string]string{"Sec-Fetch-Site": "same-origin"}, 303, true},
		{"cross origin", "POST", form, map[string]string{"Origin": "http://evil.example"}, 403, false},
		{"null origin", "POST", form, map[string]string{"Origin": "null"}, 403, false},
		{"null origin from this site's own form", "POST", form, map[string]string{"Origin": "null", "Sec-Fetch-Site": "same-origin"}, 303, true},
		{"cross site fetch", "POST", form, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"}, 403, false},
		{"no CSRF token", "POST", "", nil, 403, false},
		{"another session's CSRF token", "POST", otherForm, nil, 403, false},
		{"not signed in", "POST", "", map[string]string{"Cookie": ""}, 303, false},
		{"get", "GET", form, nil, 405, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			delete(f.sessions, admin) // a new session for each case
			sess := f.session(admin)
			page, body := f.do("GET", "/", sess, nil, nil)
			m := regexp.MustCompile(`action="/logout"><input type="hidden" name="csrf" value="([0-9a-f]+)">`).FindStringSubmatch(body)
			if page.StatusCode != 200 || m == nil {
				t.Fatalf("GET / = %d without the sign-out form's CSRF token:\n%s", page.StatusCode, body)
			}
			values := url.Values{}
			switch tt.csrf {
			case form:
				values.Set(csrfField, m[1])
			case otherForm:
				values.Set(csrfField, csrfToken(f.session(other)))
			}
			header := map[string]string{}
			for k, v := range tt.header {
				if v == "ORIGIN" {
					v = f.base
				}
				header[k] = v
			}
			resp, body := f.do(tt.method, "/logout", sess, values, header)
			if resp.StatusCode != tt.want {
				t.Fatalf("%s /logout = %d, want %d\n%s", tt.method, resp.StatusCode, tt.want, body)
			}
			cleared := false
			for _, c := range resp.Cookies() {
				if c.Name == sessionCookie && c.Value == "" && c.MaxAge < 0 && c.HttpOnly && c.Path == "/" {
					cleared = true
				}
			}
			if want := tt.want == 303; cleared != want {
				t.Errorf("cookie cleared = %v, want %v (Set-Cookie %q)", cleared, want, resp.Header.Values("Set-Cookie"))
			}
			if tt.want == 303 && resp.Header.Get("Location") != "/login" {
				t.Errorf("Location = %q, want /login", resp.Header.Get("Location"))
			}
			// Sign-out ends the session on the server: a copy of the cookie
			// opens nothing any more.
			after, _ := f.do("GET", "/", sess, nil, nil)
			if ended := after.StatusCode == 303; ended != tt.wantEnded {
				t.Errorf("after the sign-out, GET / with the old cookie = %d; session ended = %v, want %v", after.StatusCode, ended, tt.wantEnded)
			}
		})
	}
}

func TestFleetAssets(t *testing.T) {
	f := newDashFixture(t)
	tests := []struct{ path, contentType, contains string }{
		{styleURL, "text/css; charset=utf-8", ".fleet-nav"},
		{scriptURL, "text/javascript; charset=utf-8", "data-refresh"},
	}
	for _, tt := range tests {
		resp, body := f.do("GET", tt.path, "", nil, nil)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != tt.contentType || !strings.Contains(body, tt.contains) {
			t.Errorf("GET %s = %d %q, want 200 %q with %q", tt.path, resp.StatusCode, resp.Header.Get("Content-Type"), tt.contentType, tt.contains)
		}
	}
}

func TestSafeNext(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "/"},
		{"/", "/"},
		{"/nodes/a?x=1", "/nodes/a?x=1"},
		{"//evil.example", "/"},
		{"/\\evil.example", "/"},
		{"https://evil.example/", "/"},
		{"javascript:alert(1)", "/"},
		{"/login", "/"},
		{"/logout", "/"},
		{"/a\r\nSet-Cookie: x", "/"},
	}
	for _, tt := range tests {
		if got := safeNext(tt.in); got != tt.want {
			t.Errorf("safeNext(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestHeatmapSVG(t *testing.T) {
	from := time.Date(2026, 11, 28, 22, 0, 0, 0, time.UTC)
	hm := report.HeatmapReport{From: from, To: from.Add(3 * time.Hour),
		Hours: []time.Time{from, from.Add(time.Hour), from.Add(2 * time.Hour)},
		Rows: []report.HeatmapRow{
			{Node: "n1", Hostname: "box-1", GPU: 0, Cells: []float64{report.NoData, 0, 100}, Mean: 50},
			{Node: "n1", Hostname: "box-1", GPU: 1, Cells: []float64{9.9, 10, 55.5}, Mean: 25.1},
		}}
	v := heatmapSVG(hm, false)
	var classes []string
	for _, r := range v.Rows {
		for _, c := range r.Cells {
			classes = append(classes, c.Class)
		}
	}
	if got, want := strings.Join(classes, " "), "nd u0 u9 u0 u1 u5"; got != want {
		t.Errorf("cell classes = %q, want %q", got, want)
	}
	if got, want := v.Rows[0].Cells[0].Tip, "box-1 gpu0, Nov 28 22:00–23:00 UTC: no data"; got != want {
		t.Errorf("tooltip = %q, want %q", got, want)
	}
	if got, want := v.Rows[1].Cells[2].Tip, "box-1 gpu1, Nov 29 00:00–01:00 UTC: 56%"; got != want {
		t.Errorf("tooltip = %q, want %q", got, want)
	}
	if len(v.Ticks) != 1 || v.Ticks[0].Label != "Nov 29" {
		t.Errorf("ticks = %+v, want one at midnight labelled with the date", v.Ticks)
	}
	if v.Rows[0].Href != "/nodes/n1" || v.Rows[0].Label != "box-1 gpu0" || v.Rows[1].Mean != "25%" {
		t.Errorf("rows = %+v", v.Rows)
	}
	if one := heatmapSVG(hm, true); one.Rows[1].Label != "GPU 1" || one.Rows[1].Href != "" {
		t.Errorf("node page row = %+v, want labelled by GPU alone, no link", one.Rows[1])
	}
	if v.Width > 1366-48 {
		t.Errorf("heatmap %d units wide: wider than a laptop screen", v.Width)
	}
	if e := heatmapSVG(report.HeatmapReport{From: from, To: from}, false); !e.Empty || len(e.Legend) != 11 {
		t.Errorf("empty heatmap = %+v", e)
	}
}

// TestFleetOverviewGolden pins the whole overview page, so that a change to
// the layout is a reviewed diff; refresh with -update.
func TestFleetOverviewGolden(t *testing.T) {
	f := newDashFixture(t)
	seedFleet(t, f.store, fixtureNow)
	admin := f.token(gpuwarden.AllProjects, gpuwarden.RoleAdmin)
	for _, tt := range []struct{ path, golden string }{
		{"/", "fleet-overview.golden"},
		{"/heatmap", "fleet-heatmap.golden"},
	} {
		t.Run(tt.golden, func(t *testing.T) {
			_, body := f.do("GET", tt.path, admin, nil, nil)
			// Asset versions change with every edit of style.css.
			got := regexp.MustCompile(`\?v=[0-9a-f]+`).ReplaceAllString(body, "?v=VERSION")
			// So do sessions, and with them the sign-out form's CSRF token.
			got = regexp.MustCompile(`name="csrf" value="[0-9a-f]+"`).ReplaceAllString(got, `name="csrf" value="CSRF"`)
			path := filepath.Join("testdata", tt.golden)
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -run TestFleetOverviewGolden -update)", err)
			}
			if got != string(want) {
				t.Errorf("GET %s differs from %s (go test -run TestFleetOverviewGolden -update rewrites it):\n%s", tt.path, path, lineDiff(string(want), got))
			}
		})
	}
}

// A box running on simulated GPUs is badged as such on the overview and on
// its own page, so its figures are never read as a real box's.
func TestFleetBadgesSimulatedNodes(t *testing.T) {
	f := newDashFixture(t)
	admin := f.token(gpuwarden.AllProjects, gpuwarden.RoleAdmin)
	sim := gpuwarden.Node{ID: "sim-1", Project: "ml", Hostname: "laptop", TokenID: "x", Registered: fixtureNow,
		Labels: gpuwarden.NodeLabels{Owner: "ana", Simulated: true}}
	if _, err := f.store.RegisterNode(context.Background(), sim); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"/": `<span class="badge warn">simulated</span>`, "/nodes/sim-1": "simulated GPUs"} {
		if _, body := f.do("GET", path, admin, nil, nil); !strings.Contains(body, want) {
			t.Errorf("%s lacks the simulated badge %q", path, want)
		}
	}
}
