package http

// The tests of this file hold the fleet server to what a hostile test of
// it found missing: cookie-borne writes from other origins, a cookie that
// was the raw token, and unlimited failed requests each costing a database
// read. They drive the server as a browser and an attacker would, through
// its answers alone.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"html"
	"io"
	nethttp "net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/sqlite"
)

// browser keeps the cookies a server sets and sends them back, as a
// browser does, and follows no redirect, so that tests see the 303s.
type browser struct {
	t      testing.TB
	base   string
	jar    *cookiejar.Jar
	client *nethttp.Client
}

func newBrowser(t testing.TB, base string) *browser {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &browser{t: t, base: base, jar: jar, client: &nethttp.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*nethttp.Request, []*nethttp.Request) error { return nethttp.ErrUseLastResponse }}}
}

// do sends a request to a path of the browser's server, or to a whole URL
// (another replica), with the cookies the browser holds for it.
func (b *browser) do(method, path, body string, header map[string]string) (*nethttp.Response, string) {
	b.t.Helper()
	u := path
	if !strings.HasPrefix(u, "http") {
		u = b.base + path
	}
	req, err := nethttp.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		b.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return resp, string(out)
}

// hiddenInput finds a form's hidden fields, as the templates write them.
var hiddenInput = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// formFields returns the hidden fields of the form that posts to action.
func formFields(page, action string) url.Values {
	v := url.Values{}
	m := regexp.MustCompile(`(?s)<form[^>]*action="` + regexp.QuoteMeta(action) + `"[^>]*>(.*?)</form>`).FindStringSubmatch(page)
	if m == nil {
		return v
	}
	for _, f := range hiddenInput.FindAllStringSubmatch(m[1], -1) {
		v.Set(html.UnescapeString(f[1]), html.UnescapeString(f[2]))
	}
	return v
}

// sameOriginPost is what a browser sends with a form of the page it shows.
func (b *browser) sameOriginPost(path string, form url.Values) (*nethttp.Response, string) {
	b.t.Helper()
	return b.do("POST", path, form.Encode(), map[string]string{"Content-Type": "application/x-www-form-urlencoded",
		"Origin": b.base, "Sec-Fetch-Site": "same-origin"})
}

// signIn loads the sign-in form, types the token and submits the form with
// its hidden fields, as a person does; it returns the answer to the post.
func (b *browser) signIn(token string) *nethttp.Response {
	b.t.Helper()
	_, page := b.do("GET", "/login", "", nil)
	form := formFields(page, "/login")
	form.Set("token", token)
	resp, body := b.sameOriginPost("/login", form)
	if resp.StatusCode != nethttp.StatusSeeOther {
		b.t.Fatalf("sign in = %d, want 303\n%s", resp.StatusCode, body)
	}
	return resp
}

// signOut presses the Sign out button of the overview.
func (b *browser) signOut() {
	b.t.Helper()
	_, page := b.do("GET", "/", "", nil)
	if resp, body := b.sameOriginPost("/logout", formFields(page, "/logout")); resp.StatusCode != nethttp.StatusSeeOther {
		b.t.Fatalf("sign out = %d, want 303\n%s", resp.StatusCode, body)
	}
}

// cookies are the browser's cookies for its server, name to value.
func (b *browser) cookies() map[string]string {
	u, err := url.Parse(b.base)
	if err != nil {
		b.t.Fatal(err)
	}
	out := map[string]string{}
	for _, c := range b.jar.Cookies(u) {
		out[c.Name] = c.Value
	}
	return out
}

// lasting is the cookie a sign-in answer sets for longer than the browser
// session: the one that signs the browser in.
func lasting(t *testing.T, signIn *nethttp.Response) *nethttp.Cookie {
	t.Helper()
	for _, c := range signIn.Cookies() {
		if c.MaxAge > 0 {
			return c
		}
	}
	t.Fatalf("sign-in set no lasting cookie: %q", signIn.Header.Values("Set-Cookie"))
	return nil
}

// status is the answer's status, with a 303 written as where it goes.
func status(resp *nethttp.Response) string {
	if loc := resp.Header.Get("Location"); loc != "" {
		return fmt.Sprintf("%d %s", resp.StatusCode, strings.SplitN(loc, "?", 2)[0])
	}
	return fmt.Sprint(resp.StatusCode)
}

// Problem 1: with only the dashboard's cookie, another origin's page could
// create tokens and register nodes.
func TestFleetCookieWritesNeedThisOrigin(t *testing.T) {
	f := newFleetFixture(t, nil)
	admin := f.token(gpuwarden.AllProjects, gpuwarden.RoleAdmin)
	victim := f.token("ml", gpuwarden.RoleViewer)
	victimID, _, _ := splitToken(victim)
	b := newBrowser(t, f.base)
	b.signIn(admin)

	u, _ := url.Parse(f.base)
	otherPort := "http://" + u.Hostname() + ":1"
	evil := map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"}
	tokenBody := `{"project":"ml","role":"admin","name":"evil"}`
	nodeBody := `{"id":"evil-1","project":"ml","hostname":"evil.example","labels":{"hourly_price":1}}`
	tests := []struct {
		name, method, path, body string
		header                   map[string]string
		bearer                   bool
		want                     int
	}{
		{"create token, cross site", "POST", "/api/v1/tokens", tokenBody, evil, false, 403},
		{"register, cross site", "POST", "/api/v1/register", nodeBody, evil, false, 403},
		{"set budget, cross site", "PUT", "/api/v1/projects/ml", `{"budget":1,"currency":"EUR"}`, evil, false, 403},
		{"revoke, cross site", "DELETE", "/api/v1/tokens/" + victimID, "", evil, false, 403},
		// SameSite=Strict sends the cookie from another port of the host.
		{"create token, another port", "POST", "/api/v1/tokens", tokenBody,
			map[string]string{"Origin": otherPort, "Sec-Fetch-Site": "same-site", "Content-Type": "text/plain"}, false, 403},
		{"create token, another port, Origin alone", "POST", "/api/v1/tokens", tokenBody,
			map[string]string{"Origin": otherPort, "Content-Type": "text/plain"}, false, 403},
		// Reads are safe methods: another site cannot read the answer.
		{"read, cross site", "GET", "/api/v1/nodes", "", evil, false, 200},
		{"create token, this origin", "POST", "/api/v1/tokens", tokenBody,
			map[string]string{"Origin": f.base, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"}, false, 201},
		// A bearer token is no ambient credential: scripts are unaffected.
		{"create token by bearer, cross-site headers", "POST", "/api/v1/tokens", tokenBody, evil, true, 201},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			header := map[string]string{}
			for k, v := range tt.header {
				header[k] = v
			}
			if tt.bearer {
				header["Authorization"] = "Bearer " + admin
			}
			resp, body := b.do(tt.method, tt.path, tt.body, header)
			if resp.StatusCode != tt.want {
				t.Errorf("%s %s = %d, want %d\n%s", tt.method, tt.path, resp.StatusCode, tt.want, body)
			}
		})
	}
	ctx := context.Background()
	if ts, err := f.store.Tokens(ctx, gpuwarden.AllProjects); err != nil || len(ts) != 4 {
		t.Errorf("tokens = %d, %v; want 4 (the two, and one each by this origin and by bearer)", len(ts), err)
	}
	if tk, err := f.store.Token(ctx, victimID); err != nil || !tk.Revoked.IsZero() {
		t.Errorf("the victim token: %+v, %v; want it unrevoked", tk, err)
	}
	if ns, err := f.store.Nodes(ctx, gpuwarden.AllProjects); err != nil || len(ns) != 0 {
		t.Errorf("nodes = %+v, %v; want none", ns, err)
	}
	if ps, err := f.store.Projects(ctx); err != nil || len(ps) != 0 {
		t.Errorf("projects = %+v, %v; want none", ps, err)
	}
}

// Problem 3: the cookie was the raw token, and it never expired.
func TestFleetSessionCookieIsNotTheToken(t *testing.T) {
	f := newFleetFixture(t, nil)
	viewer := f.token("ml", gpuwarden.RoleViewer)
	secret := viewer[len(viewer)-64:]
	b := newBrowser(t, f.base)
	resp := b.signIn(viewer)

	for _, c := range resp.Cookies() {
		if strings.Contains(c.Value, secret) {
			t.Errorf("cookie %s holds the token's secret", c.Name)
		}
	}
	session := lasting(t, resp)
	got := fmt.Sprintf("httponly=%v samesite=%v maxage=%d", session.HttpOnly, session.SameSite, session.MaxAge)
	if want := "httponly=true samesite=3 maxage=43200"; got != want {
		t.Errorf("session cookie %s, want %s", got, want)
	}
	// Opaque and random: a second sign-in with the same token gets another.
	again := newBrowser(t, f.base)
	again.signIn(viewer)
	if a, b := again.cookies()[session.Name], b.cookies()[session.Name]; a == b || len(a) < 32 {
		t.Errorf("two sign-ins set %q and %q; want two different random IDs", a, b)
	}

	// A cookie that holds a raw token, as the server once set, opens
	// nothing, whichever name it has.
	for _, name := range []string{"gpuwarden_token", session.Name} {
		raw := newBrowser(t, f.base)
		u, _ := url.Parse(f.base)
		raw.jar.SetCookies(u, []*nethttp.Cookie{{Name: name, Value: viewer}})
		page, _ := raw.do("GET", "/orphans", "", nil)
		api, _ := raw.do("GET", "/api/v1/nodes", "", nil)
		if got, want := status(page)+", "+status(api), "303 /login, 401"; got != want {
			t.Errorf("raw token in cookie %s: page, API = %s; want %s", name, got, want)
		}
	}

	check := func(what string, b *browser, want string) {
		t.Helper()
		page, _ := b.do("GET", "/orphans", "", nil)
		api, _ := b.do("GET", "/api/v1/nodes", "", nil)
		if got := status(page) + ", " + status(api); got != want {
			t.Errorf("%s: page, API = %s; want %s", what, got, want)
		}
	}
	check("signed in", b, "200, 200")

	// Sign-out ends the session on the server: a copy of the cookie taken
	// before is worthless.
	stolen := newBrowser(t, f.base)
	u, _ := url.Parse(f.base)
	stolen.jar.SetCookies(u, []*nethttp.Cookie{{Name: session.Name, Value: b.cookies()[session.Name]}})
	check("copied cookie, before sign-out", stolen, "200, 200")
	b.signOut()
	check("signed out", b, "303 /login, 401")
	check("copied cookie, after sign-out", stolen, "303 /login, 401")

	// A session lasts 12 hours from sign-in, however much it is used.
	check("the other sign-in", again, "200, 200")
	f.advance(12*time.Hour - time.Second)
	check("the other sign-in, a second before it expires", again, "200, 200")
	f.advance(time.Second)
	check("the other sign-in, expired", again, "303 /login, 401")
}

// A revoked token's sessions end at once on the replica that revoked it,
// and within the token cache's TTL on one that shares its ledger; sessions
// and sign-outs are shared at once.
func TestFleetSessionsAcrossReplicas(t *testing.T) {
	f := newFleetFixture(t, nil)
	replica := NewFleetServer(f.store, nil)
	replica.Now = f.clock
	ctx, cancel := context.WithCancel(context.Background())
	addr, err := replica.Serve(ctx, "127.0.0.1:0", "", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = replica.Wait() })
	other := "http://" + addr

	admin, viewer, second := f.token("ml", gpuwarden.RoleAdmin), f.token("ml", gpuwarden.RoleViewer), f.token("ml", gpuwarden.RoleViewer)
	// Cookies are per host, not per port: one browser signs in on the
	// first replica and sends its cookie to both, as behind a balancer.
	b, c := newBrowser(t, f.base), newBrowser(t, f.base)
	b.signIn(viewer)
	kept := lasting(t, c.signIn(second))
	check := func(what string, br *browser, want string) {
		t.Helper()
		here, _ := br.do("GET", "/api/v1/nodes", "", nil)
		there, _ := br.do("GET", other+"/api/v1/nodes", "", nil)
		if got := status(here) + ", " + status(there); got != want {
			t.Errorf("%s: this replica, the other = %s; want %s", what, got, want)
		}
	}
	check("signed in on this replica", b, "200, 200")

	id, _, _ := splitToken(viewer)
	if code, body, _ := f.call("DELETE", "/api/v1/tokens/"+id, admin, nil); code != 204 {
		t.Fatalf("revoke = %d %s", code, body)
	}
	here, _ := b.do("GET", "/api/v1/nodes", "", nil)
	if here.StatusCode != 401 {
		t.Errorf("revoked here: this replica = %d, want 401 at once", here.StatusCode)
	}
	f.advance(5 * time.Second) // tokenCacheTTL
	check("revoked, after the token cache's TTL", b, "401, 401")

	check("another sign-in", c, "200, 200")
	c.signOut()
	check("signed out on this replica", c, "401, 401")
	for _, at := range []string{f.base, other} {
		// A copy of the cookie taken before the sign-out, on either replica.
		copied := newBrowser(t, at)
		u, _ := url.Parse(at)
		copied.jar.SetCookies(u, []*nethttp.Cookie{{Name: kept.Name, Value: kept.Value}})
		if resp, _ := copied.do("GET", "/orphans", "", nil); status(resp) != "303 /login" {
			t.Errorf("signed out: a copy of the cookie on %s = %s, want 303 /login", at, status(resp))
		}
	}
}

// countingFleet counts the token reads and listings of the ledger.
type countingFleet struct {
	gpuwarden.Fleet
	tokens, lists atomic.Int64
}

func (c *countingFleet) Token(ctx context.Context, id string) (gpuwarden.Token, error) {
	c.tokens.Add(1)
	return c.Fleet.Token(ctx, id)
}

func (c *countingFleet) Tokens(ctx context.Context, project string) ([]gpuwarden.Token, error) {
	c.lists.Add(1)
	return c.Fleet.Tokens(ctx, project)
}

// newCountingServer is a fleet server over a counting SQLite ledger, for
// requests sent straight to its handler, its clock stopped at *now.
func newCountingServer(t *testing.T, now *time.Time, mu *sync.Mutex) (*FleetServer, *countingFleet) {
	t.Helper()
	store, err := sqlite.OpenFleet(context.Background(), filepath.Join(t.TempDir(), "server.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	c := &countingFleet{Fleet: store}
	srv := NewFleetServer(c, nil)
	srv.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return *now }
	return srv, c
}

// from sends one request from a client address to the handler.
func from(srv *FleetServer, client, path, bearer, cookie string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("GET", path, nil)
	req.Host = "127.0.0.1"
	req.RemoteAddr = client
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	return rec
}

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// Problem 4: 3,000 requests with random token IDs were all answered 401,
// each after a database read. The reads of made-up IDs are held to the
// address's lookup budget, the failures past the failure budget answer
// 429, and the agent behind the same address goes on.
func TestFleetFailedRequestsLimitedBeforeTheLedger(t *testing.T) {
	now, mu := fixtureNow, &sync.Mutex{}
	srv, store := newCountingServer(t, &now, mu)
	tk, agent, err := NewToken("ml", gpuwarden.RoleAgent, "agent", fixtureNow)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Fleet.CreateToken(context.Background(), tk); err != nil {
		t.Fatal(err)
	}
	const attacker, neighbour = "198.51.100.7:40000", "198.51.100.8:40000"
	// The agent behind the attacker's address was seen a moment ago.
	if rec := from(srv, attacker, "/api/v1/whoami", agent, ""); rec.Code != 200 {
		t.Fatalf("agent before the flood = %d %s", rec.Code, rec.Body)
	}
	store.tokens.Store(0)

	const n, burst, reads = 3000, DefaultFailBurst, DefaultLookupBurst // the clock stands still
	codes := map[int]int{}
	retry := ""
	for i := range n {
		rec := from(srv, attacker, "/api/v1/nodes", "gw_"+randomHex(t, 8)+"_"+randomHex(t, 32), "")
		codes[rec.Code]++
		if rec.Code == 429 {
			retry = rec.Header().Get("Retry-After")
		}
		if i == n/2 { // the agent goes on, from the attacker's own address
			if rec := from(srv, attacker, "/api/v1/whoami", agent, ""); rec.Code != 200 {
				t.Errorf("agent during the flood = %d %s", rec.Code, rec.Body)
			}
		}
	}
	if got := codes[401] + codes[429]; got != n || codes[429] < n-burst {
		t.Errorf("answers %v; want all 401 or 429, at least %d of them 429", codes, n-burst)
	}
	if got := store.tokens.Load(); got > reads {
		t.Errorf("%d random-ID requests read %d tokens from the ledger; want at most %d", n, got, reads)
	}
	if got := store.lists.Load(); got > 1 {
		t.Errorf("the flood listed the ledger's tokens %d times; want at most once", got)
	}
	if retry != "1" {
		t.Errorf("429 Retry-After = %q, want 1 (a second buys the next try)", retry)
	}
	// The limit is the attacker's, not its neighbour's.
	if rec := from(srv, neighbour, "/api/v1/nodes", "gw_"+randomHex(t, 8)+"_"+randomHex(t, 32), ""); rec.Code != 401 {
		t.Errorf("another client = %d, want 401", rec.Code)
	}
	// Time refills the bucket: 20 requests a second.
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	codes = map[int]int{}
	for range 30 {
		codes[from(srv, attacker, "/api/v1/nodes", "", "").Code]++
	}
	if codes[401] != 20 || codes[429] != 10 {
		t.Errorf("a second later, answers %v; want 20 × 401 and 10 × 429", codes)
	}
}

// One unknown token ID, from many clients (a fleet left with a deleted
// token), costs one ledger read per 30 seconds, not one per request.
func TestFleetUnknownTokenIDsCached(t *testing.T) {
	now, mu := fixtureNow, &sync.Mutex{}
	srv, store := newCountingServer(t, &now, mu)
	lost := "gw_0123456789abcdef_" + strings.Repeat("ab", 32)
	for i := range 500 {
		if rec := from(srv, fmt.Sprintf("10.0.%d.%d:1234", i/250, i%250), "/api/v1/nodes", lost, ""); rec.Code != 401 {
			t.Fatalf("request %d = %d, want 401", i, rec.Code)
		}
	}
	if got := store.tokens.Load(); got != 1 {
		t.Errorf("500 requests with one unknown ID read the ledger %d times, want 1", got)
	}
	mu.Lock()
	now = now.Add(30 * time.Second)
	mu.Unlock()
	from(srv, "10.1.0.1:1234", "/api/v1/nodes", lost, "")
	if got := store.tokens.Load(); got != 2 {
		t.Errorf("after 30 s the ledger was read %d times in all, want 2", got)
	}
}

// TestFleetFloodFromASharedAddressLetsValidTokensThrough: one address many
// clients share (a NAT, a proxy) floods the server with bad tokens of every
// kind; the valid tokens behind it, none of them cached, still get in
// (issue #32 item 6: they got 429), and the flood's ledger reads stay
// within the address's lookup budget, plus one listing of the token IDs a
// minute.
func TestFleetFloodFromASharedAddressLetsValidTokensThrough(t *testing.T) {
	now, mu := fixtureNow, &sync.Mutex{}
	srv, store := newCountingServer(t, &now, mu)
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	ctx := context.Background()
	// Tokens made straight in the ledger, as another replica or the
	// bootstrap makes them: this server has not seen them.
	mint := func(name string) (gpuwarden.Token, string) {
		tk, secret, err := NewToken("ml", gpuwarden.RoleAgent, name, fixtureNow)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Fleet.CreateToken(ctx, tk); err != nil {
			t.Fatal(err)
		}
		return tk, secret
	}
	seenTok, seen := mint("seen")
	_, fresh := mint("fresh")
	revokedTok, revoked := mint("revoked")
	if err := store.Fleet.RevokeToken(ctx, revokedTok.ID, fixtureNow); err != nil {
		t.Fatal(err)
	}
	const shared = "192.0.2.10:40000"
	if rec := from(srv, shared, "/api/v1/whoami", seen, ""); rec.Code != 200 {
		t.Fatalf("seen before the flood = %d %s", rec.Code, rec.Body)
	}
	random := func() string { return "gw_" + randomHex(t, 8) + "_" + randomHex(t, 32) }
	unknown := random()
	floods := []struct {
		name string
		tok  func() string
	}{
		{"made-up IDs", random},
		{"malformed", func() string { return "gw_" + randomHex(t, 5) }},
		{"one unknown ID", func() string { return unknown }},
		{"a real ID, wrong secrets", func() string { return "gw_" + seenTok.ID + "_" + randomHex(t, 32) }},
		{"a revoked token", func() string { return revoked }},
		{"no token", func() string { return "" }},
	}
	flood := func(tok func() string) map[int]int {
		codes := map[int]int{}
		for range 2000 {
			codes[from(srv, shared, "/api/v1/nodes", tok(), "").Code]++
		}
		return codes
	}
	for _, fl := range floods {
		t.Run(fl.name, func(t *testing.T) {
			// Past the token cache's 5 s: no valid token of the address is
			// cached, and the budgets have refilled.
			advance(6 * time.Second)
			reads := store.tokens.Load()
			codes := flood(fl.tok)
			if codes[200] != 0 || codes[429] < 2000-DefaultFailBurst-6*DefaultFailRatePerSec {
				t.Errorf("flood answers %v; want every one refused, the most 429", codes)
			}
			if got := store.tokens.Load() - reads; got > DefaultLookupBurst {
				t.Errorf("the flood read %d tokens from the ledger; want at most %d", got, DefaultLookupBurst)
			}
			for _, valid := range []struct{ name, token string }{{"a token never seen", fresh}, {"a token seen before", seen}} {
				if rec := from(srv, shared, "/api/v1/whoami", valid.token, ""); rec.Code != 200 {
					t.Errorf("%s, behind the flooding address = %d %s", valid.name, rec.Code, rec.Body)
				}
			}
			// Fresh is known now; forget it, as a restarted server would.
			id := mustID(t, fresh)
			srv.auth.mu.Lock()
			delete(srv.auth.exist, id)
			delete(srv.auth.cache, id)
			srv.auth.mu.Unlock()
		})
	}
	if got := store.lists.Load(); got > 1 {
		t.Errorf("the floods listed the ledger's token IDs %d times within a minute; want at most once", got)
	}

	// A token made elsewhere after the listing waits for the next one, a
	// minute on: a flood of made-up IDs may hold it back until then.
	_, late := mint("late")
	flood(random)
	if rec := from(srv, shared, "/api/v1/whoami", late, ""); rec.Code != 429 {
		t.Errorf("a token newer than the listing, in a flood = %d; want 429 until the next listing", rec.Code)
	}
	advance(tokenListEvery)
	flood(random)
	if rec := from(srv, shared, "/api/v1/whoami", late, ""); rec.Code != 200 {
		t.Errorf("a minute later, in a flood = %d %s; want 200", rec.Code, rec.Body)
	}
}

func mustID(t *testing.T, token string) string {
	t.Helper()
	id, _, ok := splitToken(token)
	if !ok {
		t.Fatalf("%q is not a token", token)
	}
	return id
}
