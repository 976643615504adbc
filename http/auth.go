package http

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	nethttp "net/http"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// A token reads gw_<id>_<secret>: the ID is public (listed, logged, used to
// look the record up) and the secret is 32 random bytes whose SHA-256 alone
// is stored. The prefix lets secret scanners recognise a leaked token.
const tokenPrefix = "gw_"

// The patterns are compiled on first use, by the fleet server: their
// bounded repeats compile to large programs, which the agent, linked into
// the same binary, paid for at start (issue #19).
var (
	tokenIDPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{16}$`) })
	secretPattern  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{64}$`) })
	projectPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`) })
)

// NewToken makes a token record for a project and role and returns it with
// the secret to hand to its user once; the record holds only the hash.
func NewToken(project, role, name string, now time.Time) (gpuwarden.Token, string, error) {
	if err := ValidProject(project, true); err != nil {
		return gpuwarden.Token{}, "", err
	}
	switch role {
	case gpuwarden.RoleAgent:
		if project == gpuwarden.AllProjects {
			return gpuwarden.Token{}, "", gpuwarden.Errorf(gpuwarden.EInvalid, "an agent token belongs to one project, not %q", project).
				WithHint("name the project with --project")
		}
	case gpuwarden.RoleViewer, gpuwarden.RoleAdmin:
		// A fleet-wide viewer is what Prometheus and a finance dashboard need:
		// every project, read only.
	default:
		return gpuwarden.Token{}, "", gpuwarden.Errorf(gpuwarden.EInvalid, "role %q is not agent, viewer or admin", role)
	}
	var b [40]byte
	if _, err := rand.Read(b[:]); err != nil {
		return gpuwarden.Token{}, "", fmt.Errorf("new token: %w", err)
	}
	id, secret := hex.EncodeToString(b[:8]), hex.EncodeToString(b[8:])
	t := gpuwarden.Token{ID: id, Project: project, Role: role, Name: name, Created: now.UTC(), Hash: hashSecret(secret)}
	return t, tokenPrefix + id + "_" + secret, nil
}

// ValidProject checks a project name: lowercase words that are safe in a
// URL, a label and a file name; "*" only where allowAll says so.
func ValidProject(name string, allowAll bool) error {
	if allowAll && name == gpuwarden.AllProjects {
		return nil
	}
	if !projectPattern().MatchString(name) {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "project %q: use 1 to 63 lowercase letters, digits, '.', '_' or '-'", name)
	}
	return nil
}

func hashSecret(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}

// splitToken parses gw_<id>_<secret>; any other shape is unauthorized
// without a database lookup.
func splitToken(raw string) (id, secret string, ok bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(raw), tokenPrefix)
	if !ok {
		return "", "", false
	}
	id, secret, ok = strings.Cut(rest, "_")
	if !ok || !tokenIDPattern().MatchString(id) || !secretPattern().MatchString(secret) {
		return "", "", false
	}
	return id, secret, true
}

// tokenCacheTTL bounds how long a token read from the database is trusted
// without reading it again: a revocation through this server applies at
// once, one written to the database by another process within this time.
// A session is only as good as its token, checked through this cache on
// every request, so a revoked token's sessions end with the same delays.
const tokenCacheTTL = 5 * time.Second

// The negative cache of token IDs the database does not hold: a flood of
// requests with one unknown ID (a fleet of agents left with a deleted
// token, a script retrying) costs one database read per ID and 30 seconds,
// not one per request. An ID is random, so no token can be created under
// an ID that is cached here except by chance; one created through this
// server is cleared at once regardless, one created elsewhere waits out
// the 30 seconds only if its ID was tried before it existed.
const (
	unknownTokenTTL  = 30 * time.Second
	maxUnknownTokens = 10_000
)

// authenticator checks request tokens and sessions against the fleet
// ledger, keeping recently read token records, and the IDs found missing,
// so that a heartbeat costs no database read.
type authenticator struct {
	store gpuwarden.Fleet
	now   func() time.Time

	mu    sync.Mutex
	cache map[string]cachedToken
	// forgets counts forget calls: a record read while one happened may
	// predate a revocation and is not cached.
	forgets uint64
	// unknown holds token IDs the ledger lacked until a time; creates
	// counts created calls: a miss read while one happened may predate the
	// creation and is not cached.
	unknown unknownIDs
	creates uint64
}

type cachedToken struct {
	token gpuwarden.Token
	read  time.Time
}

// refused is the one answer to every bad credential, so that an attacker
// learns nothing about which IDs or sessions exist.
func refused() error {
	return gpuwarden.Errorf(gpuwarden.EUnauthorized, "missing, unknown or revoked token, or an ended session").
		WithHint("send Authorization: Bearer gw_…, or sign in again at /login; create a token with `gpuwarden token create`")
}

// authenticate returns the token a raw bearer value stands for, or
// EUnauthorized with the same message for every failure.
func (a *authenticator) authenticate(ctx context.Context, raw string) (gpuwarden.Token, error) {
	id, secret, ok := splitToken(raw)
	if !ok {
		return gpuwarden.Token{}, refused()
	}
	t, err := a.lookup(ctx, id)
	if gpuwarden.ErrorCodeOf(err) == gpuwarden.ENotFound {
		return gpuwarden.Token{}, refused()
	}
	if err != nil {
		return gpuwarden.Token{}, err
	}
	if subtle.ConstantTimeCompare(hashSecret(secret), t.Hash) != 1 || !t.Revoked.IsZero() {
		return gpuwarden.Token{}, refused()
	}
	return t, nil
}

// cached returns the token a raw bearer value stands for when the cache
// alone can say it is valid: such a request costs no database read, so it
// passes even a client whose limit failed requests used up.
func (a *authenticator) cached(raw string) (gpuwarden.Token, bool) {
	id, secret, ok := splitToken(raw)
	if !ok {
		return gpuwarden.Token{}, false
	}
	now := a.now()
	a.mu.Lock()
	c, ok := a.cache[id]
	a.mu.Unlock()
	if !ok || now.Sub(c.read) >= tokenCacheTTL || now.Sub(c.read) < 0 ||
		subtle.ConstantTimeCompare(hashSecret(secret), c.token.Hash) != 1 || !c.token.Revoked.IsZero() {
		return gpuwarden.Token{}, false
	}
	return c.token, true
}

// session returns the token a session cookie stands for: the session must
// be stored, unexpired by this server's clock, and its token valid. The
// session is read from the ledger on every request, so that a sign-out on
// any replica ends it everywhere at once; its token through the cache, so
// that a revoked token's sessions are refused at once on the replica that
// revoked it and within tokenCacheTTL (5 s) on any other.
func (a *authenticator) session(ctx context.Context, raw string) (gpuwarden.Token, error) {
	hash, ok := sessionHash(raw)
	if !ok {
		return gpuwarden.Token{}, refused()
	}
	sess, err := a.store.Session(ctx, hash)
	if gpuwarden.ErrorCodeOf(err) == gpuwarden.ENotFound {
		return gpuwarden.Token{}, refused()
	}
	if err != nil {
		return gpuwarden.Token{}, err
	}
	if !a.now().Before(sess.Expires) {
		return gpuwarden.Token{}, refused()
	}
	t, err := a.lookup(ctx, sess.TokenID)
	if gpuwarden.ErrorCodeOf(err) == gpuwarden.ENotFound {
		return gpuwarden.Token{}, refused()
	}
	if err != nil {
		return gpuwarden.Token{}, err
	}
	if !t.Revoked.IsZero() {
		return gpuwarden.Token{}, refused()
	}
	return t, nil
}

func (a *authenticator) lookup(ctx context.Context, id string) (gpuwarden.Token, error) {
	now := a.now()
	a.mu.Lock()
	c, ok := a.cache[id]
	forgets, creates := a.forgets, a.creates
	missing := a.unknown.has(id, now)
	a.mu.Unlock()
	if ok && now.Sub(c.read) < tokenCacheTTL && now.Sub(c.read) >= 0 {
		return c.token, nil
	}
	if missing {
		return gpuwarden.Token{}, gpuwarden.Errorf(gpuwarden.ENotFound, "token %s not found", id)
	}
	t, err := a.store.Token(ctx, id)
	if gpuwarden.ErrorCodeOf(err) == gpuwarden.ENotFound {
		a.mu.Lock()
		if a.creates == creates {
			a.unknown.add(id, now)
		}
		a.mu.Unlock()
	}
	if err != nil {
		return gpuwarden.Token{}, err
	}
	a.mu.Lock()
	if a.cache == nil {
		a.cache = map[string]cachedToken{}
	}
	if a.forgets == forgets {
		a.cache[id] = cachedToken{token: t, read: now}
	}
	a.mu.Unlock()
	return t, nil
}

// forget drops a token from the cache, after this server revoked it.
func (a *authenticator) forget(id string) {
	a.mu.Lock()
	delete(a.cache, id)
	a.forgets++
	a.mu.Unlock()
}

// created drops a token ID from the negative cache, after this server
// created the token, so that it works at once.
func (a *authenticator) created(id string) {
	a.mu.Lock()
	a.unknown.remove(id)
	a.creates++
	a.mu.Unlock()
}

// unknownIDs is a bounded set of IDs with an expiry each. Every entry has
// the same lifetime, so listing order is expiry order: the oldest go first,
// when expired or to make room, and no add costs more than the entries it
// drops.
type unknownIDs struct {
	until map[string]unknownEntry
	order []unknownListing // oldest first; a removed or renewed ID leaves a stale listing
	n     uint64
}

type unknownEntry struct {
	until time.Time
	n     uint64
}

type unknownListing struct {
	id string
	n  uint64
}

func (u *unknownIDs) has(id string, now time.Time) bool {
	e, ok := u.until[id]
	return ok && now.Before(e.until)
}

func (u *unknownIDs) add(id string, now time.Time) {
	if u.has(id, now) {
		return
	}
	if u.until == nil {
		u.until = map[string]unknownEntry{}
	}
	for len(u.order) > 0 {
		l := u.order[0]
		e, ok := u.until[l.id]
		live := ok && e.n == l.n
		if live && now.Before(e.until) && len(u.order) < maxUnknownTokens {
			break
		}
		u.order = u.order[1:]
		if live {
			delete(u.until, l.id)
		}
	}
	u.n++
	u.until[id] = unknownEntry{until: now.Add(unknownTokenTTL), n: u.n}
	u.order = append(u.order, unknownListing{id: id, n: u.n})
}

func (u *unknownIDs) remove(id string) { delete(u.until, id) }

// Browser sign-in. The session cookie holds "gws_" and 32 random bytes in
// hex, the session ID; the ledger keeps its SHA-256, the token it stands
// for and its absolute expiry. HttpOnly so that no script can read it,
// SameSite=Strict so that no other site's page sends it, Secure when the
// server speaks TLS (behind a TLS proxy it cannot tell, and leaves it off).
const (
	sessionCookie = "gpuwarden_session"
	sessionPrefix = "gws_"
	// legacyCookie held the raw token before sessions existed. Nothing
	// reads it; sign-in, sign-out and the sign-in form delete it, so that
	// the token leaves the browser.
	legacyCookie = "gpuwarden_token"
	// loginCookie is the sign-in form's double-submit CSRF value: the form
	// repeats it in a hidden field, which another site cannot read.
	loginCookie = "gpuwarden_login"
	loginMaxAge = time.Hour
	// csrfField is the hidden form field that carries a CSRF token.
	csrfField = "csrf"
)

// DefaultFailRatePerSec and DefaultFailBurst are the fleet server's limit
// of failed requests per client: generous for people mistyping a token and
// agents retrying, and they hold a client guessing tokens to 20 database
// reads a second.
const (
	DefaultFailRatePerSec = 20
	DefaultFailBurst      = 60
)

// DefaultSessionLifetime is how long a sign-in lasts, from sign-in: a
// working day, after which the browser asks for the token again.
const DefaultSessionLifetime = 12 * time.Hour

// newSecret returns 32 random bytes in hex.
func newSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("new secret: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// newSession makes a session for token t from now, and returns it with the
// ID for the cookie; the record holds only the ID's hash.
func newSession(t gpuwarden.Token, now time.Time, lifetime time.Duration) (gpuwarden.Session, string, error) {
	secret, err := newSecret()
	if err != nil {
		return gpuwarden.Session{}, "", fmt.Errorf("new session: %w", err)
	}
	id := sessionPrefix + secret
	hash, _ := sessionHash(id)
	now = now.UTC()
	return gpuwarden.Session{IDHash: hash, TokenID: t.ID, Created: now, Expires: now.Add(lifetime)}, id, nil
}

// sessionHash returns the ledger key of a session ID; any other shape (a
// raw token from an old cookie, say) is refused without a database read.
func sessionHash(raw string) ([]byte, bool) {
	secret, ok := strings.CutPrefix(raw, sessionPrefix)
	if !ok || !secretPattern().MatchString(secret) {
		return nil, false
	}
	sum := sha256.Sum256([]byte(raw))
	return sum[:], true
}

// csrfToken is the CSRF token of the forms shown to a session: an HMAC of
// a fixed label keyed with the session ID. It is a per-session secret that
// needs no storage and is the same on every replica, another site cannot
// compute it without the HttpOnly cookie, and it tells nothing about the
// ID. A form posted without it, or with another session's, is refused.
func csrfToken(sessionID string) string {
	m := hmac.New(sha256.New, []byte(sessionID))
	m.Write([]byte("gpuwarden csrf v1"))
	return hex.EncodeToString(m.Sum(nil))
}

// validCSRF reports whether got is the CSRF token of sessionID.
func validCSRF(sessionID, got string) bool {
	return sessionID != "" && hmac.Equal([]byte(csrfToken(sessionID)), []byte(got))
}

// cookieFor builds one of the server's cookies; a negative maxAge deletes it.
func cookieFor(r *nethttp.Request, name, value string, maxAge time.Duration) *nethttp.Cookie {
	c := &nethttp.Cookie{Name: name, Value: value, Path: "/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: nethttp.SameSiteStrictMode, MaxAge: int(maxAge / time.Second)}
	if maxAge < 0 {
		c.Value, c.MaxAge = "", -1
	}
	return c
}

// credential is what a request authenticates with: the Authorization
// header (agents, scripts, curl), else the session cookie (browsers).
type credential struct {
	raw      string
	byCookie bool
}

func credentialOf(r *nethttp.Request) credential {
	if h := r.Header.Get("Authorization"); h != "" {
		if v, ok := strings.CutPrefix(h, "Bearer "); ok {
			return credential{raw: v}
		}
		return credential{raw: h}
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		return credential{raw: c.Value, byCookie: true}
	}
	return credential{}
}

// caller is who sent a request: a token, and for a browser the session ID
// its cookie holds.
type caller struct {
	token   gpuwarden.Token
	session string
}

// scope is what the caller may do, with the CSRF token of its session.
func (c caller) scope() scope {
	sc := scope{Token: c.token}
	if c.session != "" {
		sc.csrf = csrfToken(c.session)
	}
	return sc
}

// identify authenticates a request, in this order, so that nothing a
// client without a credential sends reaches the database unchecked:
//
//  1. A cookie request of an unsafe method from another origin is refused
//     (EForbidden), as /login does: a browser attaches the cookie to a
//     cross-site request, and SameSite=Strict does not cover another port
//     or a sibling host. Bearer requests carry no ambient credential, so
//     they skip this; a browser cannot send a header cross-site without a
//     CORS preflight this server never grants.
//  2. A bearer token the cache holds as valid passes at once.
//  3. Anything else takes one request from its client's limit of failed
//     requests (a *tooManyError, 429, once it is used up) before it is
//     checked against the ledger; a valid credential gives it back.
func (s *FleetServer) identify(r *nethttp.Request) (caller, error) {
	cred := credentialOf(r)
	if cred.byCookie {
		if err := sameOrigin(r); err != nil {
			return caller{}, err
		}
	} else if t, ok := s.auth.cached(cred.raw); ok {
		return caller{token: t}, nil
	}
	client := clientOf(r)
	if tm := s.admit(client); tm != nil {
		return caller{}, tm
	}
	var c caller
	var err error
	if cred.byCookie {
		c.token, err = s.auth.session(r.Context(), cred.raw)
		c.session = cred.raw
	} else {
		c.token, err = s.auth.authenticate(r.Context(), cred.raw)
	}
	if err != nil {
		return caller{}, err
	}
	s.fails.refund(client, s.FailBurst)
	return c, nil
}

// admit takes one request from client's limit of failed requests; nil
// when the client is within it.
func (s *FleetServer) admit(client string) *tooManyError {
	if wait, ok := s.fails.take(client, s.FailRatePerSec, s.FailBurst); !ok {
		return &tooManyError{client: client, wait: wait}
	}
	return nil
}

// tooManyError is a client over its limit of failed requests: 429.
type tooManyError struct {
	client string
	wait   time.Duration
}

func (e *tooManyError) Error() string {
	return fmt.Sprintf("too many unauthenticated or failed requests from %s", e.client)
}

// retryAfterSeconds is the Retry-After header for a wait: whole seconds,
// at least 1, so that a client never retries before the bucket refilled.
func retryAfterSeconds(wait time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(wait.Seconds()))))
}

// appError is the application error a 429 answer shows.
func (e *tooManyError) appError() *gpuwarden.Error {
	return gpuwarden.Errorf(gpuwarden.EInvalid, "%s", e.Error()).
		WithHint("retry after %s; check the token or sign in again", e.wait.Round(time.Millisecond))
}

// writeAuthError answers a failed identify as JSON.
func (s *FleetServer) writeAuthError(w nethttp.ResponseWriter, err error) {
	var tm *tooManyError
	if errors.As(err, &tm) {
		w.Header().Set("Retry-After", retryAfterSeconds(tm.wait))
		writeJSONError(w, nethttp.StatusTooManyRequests, tm.appError())
		return
	}
	if gpuwarden.ErrorCodeOf(err) == gpuwarden.EUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="gpuwarden"`)
	}
	s.writeError(w, err)
}

// clientOf is the address a client's limit of failed requests counts
// under: the host of r.RemoteAddr, an IPv6 address by its /64 (what one
// subscriber gets). Behind a reverse proxy that is the proxy's address, so
// that all its clients share one limit; X-Forwarded-For is not read, since
// any client can send it.
func clientOf(r *nethttp.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		if p, err := ip.Prefix(64); err == nil {
			return p.String()
		}
	}
	return ip.String()
}

// maxClients bounds the buckets clientLimiter keeps: past it, the full ones
// go, then others at random, so that addresses an attacker makes up cannot
// exhaust memory (they can only reset buckets, their own among them).
const maxClients = 65536

// clientLimiter is a token bucket per client address for the requests
// that carry no valid credential.
type clientLimiter struct {
	rateLimiter
}

// take takes one request from client's bucket, or says how long to wait.
func (l *clientLimiter) take(client string, rate, burst float64) (time.Duration, bool) {
	if rate <= 0 {
		return 0, true
	}
	l.mu.Lock()
	if len(l.buckets) >= maxClients {
		l.prune(rate, burst)
	}
	l.mu.Unlock()
	return l.allow(client, rate, burst)
}

// refund gives back a request that turned out to carry a valid credential.
func (l *clientLimiter) refund(client string, burst float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b, ok := l.buckets[client]; ok {
		b.tokens = math.Min(math.Max(burst, 1), b.tokens+1)
	}
}

// prune drops the buckets that have refilled, which hold nothing a new one
// would not, and then as many others as it takes to leave a tenth free, so
// that the next prune is thousands of requests away.
func (l *clientLimiter) prune(rate, burst float64) {
	now := l.now()
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*rate >= burst {
			delete(l.buckets, k)
		}
	}
	for k := range l.buckets {
		if len(l.buckets) < maxClients*9/10 {
			break
		}
		delete(l.buckets, k)
	}
}

// scope says what a token may do: read or write a project, manage tokens.
// csrf is the CSRF token the forms of its pages carry, for a browser
// signed in with a session; empty for a bearer token.
type scope struct {
	gpuwarden.Token
	csrf string
}

// canRead reports whether the token may read project p.
func (s scope) canRead(p string) bool {
	return s.Project == gpuwarden.AllProjects || s.Project == p
}

// canAdmin reports whether the token may manage project p's tokens and budget.
func (s scope) canAdmin(p string) bool {
	return s.Role == gpuwarden.RoleAdmin && s.canRead(p)
}

// canWriteNodes reports whether the token may register and feed nodes.
func (s scope) canWriteNodes() bool {
	return s.Role == gpuwarden.RoleAgent || s.Role == gpuwarden.RoleAdmin
}

// project picks the project a read is about: the token's own, or for a
// fleet-wide token the one asked for (all when none).
func (s scope) project(asked string) (string, error) {
	if asked == "" {
		return s.Project, nil
	}
	if !s.canRead(asked) {
		return "", forbidden(asked)
	}
	return asked, nil
}

func forbidden(project string) error {
	return gpuwarden.Errorf(gpuwarden.EForbidden, "this token may not use project %q", project).
		WithHint("use a token of that project, or a fleet admin token")
}
