package http

import (
	"context"
	"fmt"
	nethttp "net/http"
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

func TestClientOf(t *testing.T) {
	tests := []struct{ remote, want string }{
		{"192.0.2.1:1234", "192.0.2.1"},
		{"192.0.2.1:9", "192.0.2.1"},
		// One IPv6 subscriber gets a /64: its addresses share a limit.
		{"[2001:db8:1:2:3:4:5:6]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2::9]:80", "2001:db8:1:2::/64"},
		{"[2001:db8:1:3::9]:80", "2001:db8:1:3::/64"},
		{"[::ffff:192.0.2.1]:1", "192.0.2.1"},
		{"[fe80::1%eth0]:1", "fe80::/64"},
		{"[::1]:1", "::/64"},
		{"not an address", "not an address"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tt.remote
		if got := clientOf(r); got != tt.want {
			t.Errorf("clientOf(%q) = %q, want %q", tt.remote, got, tt.want)
		}
	}
}

func TestCSRFTokenIsBoundToTheSession(t *testing.T) {
	a, b := sessionPrefix+strings.Repeat("a", 64), sessionPrefix+strings.Repeat("b", 64)
	tests := []struct {
		name, session, token string
		want                 bool
	}{
		{"its own", a, csrfToken(a), true},
		{"another session's", a, csrfToken(b), false},
		{"none", a, "", false},
		{"the session ID itself", a, a, false},
		{"no session", "", csrfToken(""), false},
	}
	for _, tt := range tests {
		if got := validCSRF(tt.session, tt.token); got != tt.want {
			t.Errorf("%s: validCSRF = %v, want %v", tt.name, got, tt.want)
		}
	}
	if strings.Contains(csrfToken(a), strings.Repeat("a", 16)) {
		t.Error("the CSRF token shows the session ID")
	}
}

func TestSessionHash(t *testing.T) {
	_, id, err := newSession(gpuwarden.Token{ID: "t"}, fixtureNow, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		raw  string
		want bool
	}{
		{id, true},
		{"gw_0123456789abcdef_" + strings.Repeat("ab", 32), false}, // a raw token, as old cookies held
		{sessionPrefix + strings.Repeat("A", 64), false},
		{sessionPrefix + strings.Repeat("a", 63), false},
		{strings.Repeat("a", 64), false},
		{"", false},
	}
	for _, tt := range tests {
		if _, got := sessionHash(tt.raw); got != tt.want {
			t.Errorf("sessionHash(%.24q…) ok = %v, want %v", tt.raw, got, tt.want)
		}
	}
}

func TestUnknownIDsBounded(t *testing.T) {
	var u unknownIDs
	for i := range maxUnknownTokens + 100 {
		u.add(fmt.Sprintf("id-%d", i), fixtureNow)
	}
	got := fmt.Sprintf("entries=%d listings=%d oldest=%v newest=%v", len(u.until), len(u.order),
		u.has("id-0", fixtureNow), u.has(fmt.Sprintf("id-%d", maxUnknownTokens+99), fixtureNow))
	if want := fmt.Sprintf("entries=%d listings=%d oldest=false newest=true", maxUnknownTokens, maxUnknownTokens); got != want {
		t.Errorf("after %d adds: %s, want %s", maxUnknownTokens+100, got, want)
	}
	// Expired entries go with the next add.
	later := fixtureNow.Add(unknownTokenTTL)
	u.add("fresh", later)
	if got := len(u.until); got != 1 || !u.has("fresh", later) {
		t.Errorf("after the TTL: %d entries, want the fresh one alone", got)
	}
	// A removed, then re-added ID keeps its new expiry when its old listing goes.
	var v unknownIDs
	v.add("a", fixtureNow)
	v.remove("a")
	v.add("a", fixtureNow.Add(time.Second))
	v.add("b", fixtureNow.Add(unknownTokenTTL))
	if !v.has("a", fixtureNow.Add(unknownTokenTTL)) {
		t.Error("a re-added ID was dropped with its stale listing")
	}
}

func TestClientLimiterBounded(t *testing.T) {
	l := &clientLimiter{rateLimiter{now: func() time.Time { return fixtureNow }}}
	for i := range maxClients + 1 {
		if _, ok := l.take(fmt.Sprintf("c%d", i), 1, 2); !ok {
			t.Fatalf("client %d refused its first request", i)
		}
	}
	if got := len(l.buckets); got > maxClients {
		t.Errorf("%d buckets kept, want at most %d", got, maxClients)
	}
	// A refund gives back what a valid credential took, up to the burst.
	tests := []struct {
		name    string
		takes   int
		refunds int
		want    []bool
	}{
		{"spent", 2, 0, []bool{false}},
		{"refunded", 2, 1, []bool{true, false}},
		{"refunds stop at the burst", 0, 5, []bool{true, true, false}},
	}
	for _, tt := range tests {
		l := &clientLimiter{rateLimiter{now: func() time.Time { return fixtureNow }}}
		for range tt.takes {
			l.take("c", 1, 2)
		}
		for range tt.refunds {
			l.refund("c", 2)
		}
		var got []bool
		for range tt.want {
			_, ok := l.take("c", 1, 2)
			got = append(got, ok)
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s: takes = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// A token created through this server works at once, though its ID was
// tried and found missing a moment before.
func TestCreatedTokenNotHiddenByTheNegativeCache(t *testing.T) {
	store, err := sqlite.OpenFleet(context.Background(), filepath.Join(t.TempDir(), "server.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	a := &authenticator{store: store, now: func() time.Time { return fixtureNow }}
	tk, raw, err := NewToken("ml", gpuwarden.RoleViewer, "", fixtureNow)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	steps := []struct {
		name string
		do   func()
		want gpuwarden.ErrorCode
	}{
		{"before it exists", func() {}, gpuwarden.EUnauthorized},
		{"stored elsewhere: the miss is cached", func() {
			if err := store.CreateToken(ctx, tk); err != nil {
				t.Fatal(err)
			}
		}, gpuwarden.EUnauthorized},
		{"created here", func() { a.created(tk.ID) }, ""},
	}
	for _, st := range steps {
		st.do()
		_, err := a.authenticate(ctx, raw)
		if got := gpuwarden.ErrorCodeOf(err); got != st.want {
			t.Errorf("%s: authenticate = %v (code %q), want code %q", st.name, err, got, st.want)
		}
	}
}

// sessionCountingFleet counts the session reads of the ledger.
type sessionCountingFleet struct {
	gpuwarden.Fleet
	sessions atomic.Int64
}

func (c *sessionCountingFleet) Session(ctx context.Context, h []byte) (gpuwarden.Session, error) {
	c.sessions.Add(1)
	return c.Fleet.Session(ctx, h)
}

// Made-up session cookies are limited like made-up tokens: their reads to
// the address's lookup budget, their failures past the failure budget to
// 429; a real session goes on from another address.
func TestFleetMadeUpSessionsLimited(t *testing.T) {
	store, err := sqlite.OpenFleet(context.Background(), filepath.Join(t.TempDir(), "server.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	c := &sessionCountingFleet{Fleet: store}
	srv := NewFleetServer(c, nil)
	srv.Now = func() time.Time { return fixtureNow }
	tk, _, err := NewToken("ml", gpuwarden.RoleViewer, "", fixtureNow)
	if err != nil {
		t.Fatal(err)
	}
	sess, id, err := newSession(tk, fixtureNow, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreateToken(context.Background(), tk); err != nil {
		t.Fatal(err)
	}
	if err := store.CreateSession(context.Background(), sess); err != nil {
		t.Fatal(err)
	}
	const attacker, n = "203.0.113.5:5555", 1000
	codes := map[int]int{}
	for range n {
		rec := from(srv, attacker, "/orphans", "", sessionCookie+"="+sessionPrefix+randomHex(t, 32))
		codes[rec.Code]++
	}
	if got := c.sessions.Load(); got > DefaultLookupBurst {
		t.Errorf("%d made-up sessions read the ledger %d times, want at most %d", n, got, DefaultLookupBurst)
	}
	if codes[303] != DefaultFailBurst || codes[429] != n-DefaultFailBurst {
		t.Errorf("answers %v, want %d redirects to the sign-in form and 429s after", codes, DefaultFailBurst)
	}
	// The limit is the attacker's address's: a real session elsewhere goes on.
	if rec := from(srv, "203.0.113.6:5555", "/orphans", "", sessionCookie+"="+id); rec.Code != 200 {
		t.Errorf("a real session from another address = %d, want 200", rec.Code)
	}
}

// SessionLifetime sets how long a sign-in lasts, in the cookie and on the
// server; over TLS the cookies are Secure.
func TestFleetSessionLifetimeAndTLS(t *testing.T) {
	store, err := sqlite.OpenFleet(context.Background(), filepath.Join(t.TempDir(), "server.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var mu sync.Mutex
	now := fixtureNow
	srv := NewFleetServer(store, nil)
	srv.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	srv.SessionLifetime = time.Hour
	tk, raw, err := NewToken("ml", gpuwarden.RoleViewer, "", fixtureNow)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreateToken(context.Background(), tk); err != nil {
		t.Fatal(err)
	}
	send := func(method, target, cookie string, form url.Values) *httptest.ResponseRecorder {
		var req *nethttp.Request
		if form != nil {
			req = httptest.NewRequest(method, target, strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		} else {
			req = httptest.NewRequest(method, target, nil)
		}
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		return rec
	}
	cookieOf := func(rec *httptest.ResponseRecorder, name string) *nethttp.Cookie {
		for _, c := range rec.Result().Cookies() {
			if c.Name == name {
				return c
			}
		}
		t.Fatalf("no %s cookie in %q", name, rec.Header().Values("Set-Cookie"))
		return nil
	}
	form := send("GET", "https://127.0.0.1/login", "", nil)
	if !strings.Contains(form.Body.String(), "signed in for 1 hour") {
		t.Errorf("the sign-in form does not say the session lasts 1 hour")
	}
	login := cookieOf(form, loginCookie)
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(form.Body.String())
	if m == nil || m[1] != login.Value {
		t.Fatalf("the form's CSRF field %q differs from its cookie %q", m, login.Value)
	}
	signIn := send("POST", "https://127.0.0.1/login", loginCookie+"="+login.Value, url.Values{"token": {raw}, csrfField: {m[1]}})
	if signIn.Code != 303 {
		t.Fatalf("sign in = %d\n%s", signIn.Code, signIn.Body)
	}
	sess := cookieOf(signIn, sessionCookie)
	got := fmt.Sprintf("login secure=%v; session secure=%v maxage=%d", login.Secure, sess.Secure, sess.MaxAge)
	if want := "login secure=true; session secure=true maxage=3600"; got != want {
		t.Errorf("cookies: %s, want %s", got, want)
	}
	steps := []struct {
		after time.Duration
		want  int
	}{{0, 200}, {time.Hour - time.Millisecond, 200}, {time.Millisecond, 303}}
	for _, st := range steps {
		mu.Lock()
		now = now.Add(st.after)
		mu.Unlock()
		if rec := send("GET", "https://127.0.0.1/orphans", sessionCookie+"="+sess.Value, nil); rec.Code != st.want {
			t.Errorf("%s after sign-in: GET /orphans = %d, want %d", now.Sub(fixtureNow), rec.Code, st.want)
		}
	}
}
