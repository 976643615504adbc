package http

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	nethttp "net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// A token reads gw_<id>_<secret>: the ID is public (listed, logged, used to
// look the record up) and the secret is 32 random bytes whose SHA-256 alone
// is stored. The prefix lets secret scanners recognise a leaked token.
const tokenPrefix = "gw_"

var (
	tokenIDPattern = regexp.MustCompile(`^[0-9a-f]{16}$`)
	secretPattern  = regexp.MustCompile(`^[0-9a-f]{64}$`)
	projectPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
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
	if !projectPattern.MatchString(name) {
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
	if !ok || !tokenIDPattern.MatchString(id) || !secretPattern.MatchString(secret) {
		return "", "", false
	}
	return id, secret, true
}

// tokenCacheTTL bounds how long a token read from the database is trusted
// without reading it again: a revocation through this server applies at
// once, one written to the database by another process within this time.
const tokenCacheTTL = 5 * time.Second

// authenticator checks request tokens against the fleet ledger, keeping
// recently read records so that a heartbeat costs no database read.
type authenticator struct {
	store gpuwarden.Fleet
	now   func() time.Time

	mu    sync.Mutex
	cache map[string]cachedToken
	// forgets counts forget calls: a record read while one happened may
	// predate a revocation and is not cached.
	forgets uint64
}

type cachedToken struct {
	token gpuwarden.Token
	read  time.Time
}

// authenticate returns the token a raw bearer value stands for, or
// EUnauthorized with the same message for every failure, so that an
// attacker learns nothing about which IDs exist.
func (a *authenticator) authenticate(ctx context.Context, raw string) (gpuwarden.Token, error) {
	refused := gpuwarden.Errorf(gpuwarden.EUnauthorized, "missing, unknown or revoked token").
		WithHint("send Authorization: Bearer gw_…; create one with `gpuwarden token create`")
	id, secret, ok := splitToken(raw)
	if !ok {
		return gpuwarden.Token{}, refused
	}
	t, err := a.lookup(ctx, id)
	if gpuwarden.ErrorCodeOf(err) == gpuwarden.ENotFound {
		return gpuwarden.Token{}, refused
	}
	if err != nil {
		return gpuwarden.Token{}, err
	}
	if subtle.ConstantTimeCompare(hashSecret(secret), t.Hash) != 1 || !t.Revoked.IsZero() {
		return gpuwarden.Token{}, refused
	}
	return t, nil
}

func (a *authenticator) lookup(ctx context.Context, id string) (gpuwarden.Token, error) {
	now := a.now()
	a.mu.Lock()
	c, ok := a.cache[id]
	forgets := a.forgets
	a.mu.Unlock()
	if ok && now.Sub(c.read) < tokenCacheTTL && now.Sub(c.read) >= 0 {
		return c.token, nil
	}
	t, err := a.store.Token(ctx, id)
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

// bearer reads the token from the Authorization header, or for browsers
// from the session cookie the login page sets.
func bearer(r *nethttp.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		if v, ok := strings.CutPrefix(h, "Bearer "); ok {
			return v
		}
		return h
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		return c.Value
	}
	return ""
}

// sessionCookie carries a browser's token: HttpOnly so that no script can
// read it, SameSite=Strict so that no other site can send it.
const sessionCookie = "gpuwarden_token"

// scope says what a token may do: read or write a project, manage tokens.
type scope struct{ gpuwarden.Token }

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
