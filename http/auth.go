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

	// exist holds the IDs of tokens known to be in the ledger (seen valid,
	// created here, or listed from it) and the hashes of sessions seen
	// valid: their reads are never refused for their address's budget
	// (see FleetServer.check). Only real tokens and sessions get in, so
	// nobody can grow it by making credentials up.
	exist    map[string]bool
	sessions map[string]bool
	// listMu serialises listings of the ledger's token IDs; listed is when
	// the last one was taken.
	listMu sync.Mutex
	listed time.Time
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
			delete(a.exist, id)
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
	a.addExisting(id)
	a.mu.Unlock()
}

// tokenListEvery is how often, at most, the server lists the token IDs in
// the ledger, which it does only when an address has spent its budget of
// reads (see FleetServer.check): one read of the tokens table a minute,
// under a flood of made-up IDs, lets every token that existed a minute
// ago through; one created since on another replica waits that long.
const tokenListEvery = time.Minute

// maxKnown bounds each of the sets of known tokens and sessions: they
// spare real credentials the read budget, nothing more, so when one is full
// it starts again empty (sessions that ended by expiring are never told).
const maxKnown = 65536

// addExisting records a token ID as in the ledger; a.mu is held.
func (a *authenticator) addExisting(id string) {
	if a.exist == nil || len(a.exist) >= maxKnown {
		a.exist = map[string]bool{}
	}
	a.exist[id] = true
}

// needsRead reports whether judging cred takes a ledger read: a
// well-formed token that neither cache holds, or a well-formed session
// (sessions are read on every request). No credential, a malformed one and
// a cached token are judged from memory.
func (a *authenticator) needsRead(cred credential) bool {
	if cred.byCookie {
		_, ok := sessionHash(cred.raw)
		return ok
	}
	id, _, ok := splitToken(cred.raw)
	if !ok {
		return false
	}
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.cache[id]; ok && now.Sub(c.read) < tokenCacheTTL && now.Sub(c.read) >= 0 {
		return false
	}
	return !a.unknown.has(id, now)
}

// known reports whether cred names a token known to be in the ledger, or a
// session seen valid.
func (a *authenticator) known(cred credential) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if cred.byCookie {
		hash, ok := sessionHash(cred.raw)
		return ok && a.sessions[string(hash)]
	}
	id, _, ok := splitToken(cred.raw)
	return ok && a.exist[id]
}

// valid records a credential that authenticated: its token exists, and a
// session's hash is one a browser holds.
func (a *authenticator) valid(cred credential, t gpuwarden.Token) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.addExisting(t.ID)
	if hash, ok := sessionHash(cred.raw); ok && cred.byCookie {
		if a.sessions == nil || len(a.sessions) >= maxKnown {
			a.sessions = map[string]bool{}
		}
		a.sessions[string(hash)] = true
	}
}

// endedSession forgets a session hash once the session is gone.
func (a *authenticator) endedSession(hash []byte) {
	a.mu.Lock()
	delete(a.sessions, string(hash))
	a.mu.Unlock()
}

// exists reports whether a token ID is in the ledger as far as this server
// knows, listing the ledger's token IDs first when the last listing is
// older than tokenListEvery. A listing that fails answers no: the caller
// then refuses the request as over its budget, as it would have.
func (a *authenticator) exists(ctx context.Context, id string) bool {
	a.mu.Lock()
	known := a.exist[id]
	a.mu.Unlock()
	if known {
		return true
	}
	a.listMu.Lock()
	defer a.listMu.Unlock()
	now := a.now()
	a.mu.Lock()
	known, fresh := a.exist[id], !a.listed.IsZero() && now.Sub(a.listed) < tokenListEvery && now.Sub(a.listed) >= 0
	a.mu.Unlock()
	if known || fresh {
		return known
	}
	ts, err := a.store.Tokens(ctx, gpuwarden.AllProjects)
	if err != nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, t := range ts {
		a.addExisting(t.ID)
	}
	a.listed = now
	return a.exist[id]
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
// of failed authentications per client address: generous for people
// mistyping a token and agents retrying; past it, failures answer 429.
// Only failures count, so that a flood of bad tokens from a shared address
// (a NAT, a proxy) does not lock its valid tokens out.
const (
	DefaultFailRatePerSec = 20
	DefaultFailBurst      = 60
)

// DefaultLookupRatePerSec and DefaultLookupBurst are the fleet server's
// limit, per client address, of ledger reads for credentials it does not
// know to exist (a token ID it has not seen, a session it has not seen
// valid): larger than the failure limit, since every valid agent behind an
// address starts there, and they hold a client making IDs up to 100 reads
// a second. A read that finds a valid credential is given back.
const (
	DefaultLookupRatePerSec = 100
	DefaultLookupBurst      = 300
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
// client sends costs the database more than its address's budgets allow:
//
//  1. A cookie request of an unsafe method from another origin is refused
//     (EForbidden), as /login does: a browser attaches the cookie to a
//     cross-site request, and SameSite=Strict does not cover another port
//     or a sibling host. Bearer requests carry no ambient credential, so
//     they skip this; a browser cannot send a header cross-site without a
//     CORS preflight this server never grants.
//  2. A bearer token the cache holds as valid passes at once.
//  3. Anything else is checked (see check).
func (s *FleetServer) identify(r *nethttp.Request) (caller, error) {
	cred := credentialOf(r)
	if cred.byCookie {
		if err := sameOrigin(r); err != nil {
			return caller{}, err
		}
	} else if t, ok := s.auth.cached(cred.raw); ok {
		return caller{token: t}, nil
	}
	return s.check(r.Context(), clientOf(r), cred)
}

// check authenticates a credential from a client address with two budgets
// per address, so that a flood of bad tokens from an address that many
// clients share (a NAT, a proxy) holds the database reads down without
// refusing the valid tokens behind it:
//
//  1. A credential that takes a ledger read to judge (see needsRead) takes
//     one from the address's lookup budget, unless the server knows it
//     exists: a token ID in the ledger (seen valid, created here, or in a
//     listing of the ledger's IDs, taken at most once a minute once the
//     budget is spent) or a session seen valid. With the budget spent, an
//     unknown one is refused with 429 before the read. A valid credential
//     gives its read back.
//  2. A credential that fails takes one from the address's failure
//     budget; once that is spent, failures answer 429 instead of 401. A
//     valid credential never counts there, and a request with a valid
//     credential is never refused for the failures of others.
func (s *FleetServer) check(ctx context.Context, client string, cred credential) (caller, error) {
	charged := false
	if s.auth.needsRead(cred) && !s.auth.known(cred) {
		wait, ok := s.lookups.take(client, s.LookupRatePerSec, s.LookupBurst)
		charged = ok
		if !ok {
			id, _, isToken := splitToken(cred.raw)
			if cred.byCookie || !isToken || !s.auth.exists(ctx, id) {
				return caller{}, &tooManyError{client: client, wait: wait, what: "requests with credentials to check"}
			}
		}
	}
	var c caller
	var err error
	if cred.byCookie {
		c.token, err = s.auth.session(ctx, cred.raw)
		c.session = cred.raw
	} else {
		c.token, err = s.auth.authenticate(ctx, cred.raw)
	}
	if err == nil {
		if charged {
			s.lookups.refund(client, s.LookupBurst)
		}
		s.auth.valid(cred, c.token)
		return c, nil
	}
	if gpuwarden.ErrorCodeOf(err) != gpuwarden.EUnauthorized {
		return caller{}, err
	}
	if cred.byCookie {
		if hash, ok := sessionHash(cred.raw); ok {
			s.auth.endedSession(hash)
		}
	}
	if wait, ok := s.fails.take(client, s.FailRatePerSec, s.FailBurst); !ok {
		return caller{}, &tooManyError{client: client, wait: wait, what: "failed or unauthenticated requests"}
	}
	return caller{}, err
}

// tooManyError is a client address over one of its budgets: 429.
type tooManyError struct {
	client string
	wait   time.Duration
	what   string
}

func (e *tooManyError) Error() string {
	return fmt.Sprintf("too many %s from %s", e.what, e.client)
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

// maxClients bounds the buckets a clientLimiter keeps: past it, the full ones
// go, then others at random, so that addresses an attacker makes up cannot
// exhaust memory (they can only reset buckets, their own among them).
const maxClients = 65536

// clientLimiter is a token bucket per client address: one for the failed
// authentications, one for the ledger reads of unknown credentials.
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

// refund gives back a read that turned out to be for a valid credential.
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
