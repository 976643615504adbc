package ledgertest

import (
	"context"
	"crypto/sha256"
	"reflect"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// SessionHash is the ledger key of a made-up session ID.
func SessionHash(id string) []byte {
	sum := sha256.Sum256([]byte(id))
	return sum[:]
}

func testSessions(t *testing.T, s *fleetStore) {
	ctx := context.Background()
	// Milliseconds survive; the ledgers keep no finer.
	created := FleetStart.Add(1500 * time.Millisecond)
	one := gpuwarden.Session{IDHash: SessionHash("one"), TokenID: "t1", Created: created, Expires: created.Add(12 * time.Hour)}
	two := gpuwarden.Session{IDHash: SessionHash("two"), TokenID: "t1", Created: created, Expires: created.Add(time.Hour)}
	for _, sess := range []gpuwarden.Session{one, two} {
		if err := s.f.CreateSession(ctx, sess); err != nil {
			t.Fatalf("CreateSession(%x): %v", sess.IDHash[:4], err)
		}
	}
	taken := two
	taken.TokenID = "t2"
	wantCode(t, "CreateSession(taken hash)", s.f.CreateSession(ctx, taken), gpuwarden.EConflict)
	for _, tt := range []struct {
		name string
		edit func(*gpuwarden.Session)
	}{
		{"no hash", func(x *gpuwarden.Session) { x.IDHash = nil }},
		{"short hash", func(x *gpuwarden.Session) { x.IDHash = x.IDHash[:16] }},
		{"no token", func(x *gpuwarden.Session) { x.TokenID = "" }},
		{"token with NUL", func(x *gpuwarden.Session) { x.TokenID = "t\x00" }},
		{"token not UTF-8", func(x *gpuwarden.Session) { x.TokenID = "t\xff" }},
		{"no creation time", func(x *gpuwarden.Session) { x.Created = time.Time{} }},
		{"no expiry", func(x *gpuwarden.Session) { x.Expires = time.Time{} }},
		{"expires when created", func(x *gpuwarden.Session) { x.Expires = x.Created }},
	} {
		bad := gpuwarden.Session{IDHash: SessionHash("bad " + tt.name), TokenID: "t1", Created: created, Expires: created.Add(time.Hour)}
		tt.edit(&bad)
		wantCode(t, "CreateSession("+tt.name+")", s.f.CreateSession(ctx, bad), gpuwarden.EInvalid)
	}

	if err := s.f.DeleteSession(ctx, two.IDHash); err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	// Deleting what is not there is no error: a second sign-out does no harm.
	for _, h := range [][]byte{two.IDHash, SessionHash("never"), nil, {1, 2, 3}} {
		if err := s.f.DeleteSession(ctx, h); err != nil {
			t.Errorf("DeleteSession(%x) = %v, want nil", h, err)
		}
	}
	for _, reopen := range []bool{false, true} {
		if reopen {
			s.restart()
		}
		for _, tt := range []struct {
			name string
			hash []byte
			want gpuwarden.Session
			code gpuwarden.ErrorCode
		}{
			{"stored", one.IDHash, one, ""},
			{"deleted", two.IDHash, gpuwarden.Session{}, gpuwarden.ENotFound},
			{"never stored", SessionHash("never"), gpuwarden.Session{}, gpuwarden.ENotFound},
			{"not a hash", []byte("one"), gpuwarden.Session{}, gpuwarden.ENotFound},
			{"nil", nil, gpuwarden.Session{}, gpuwarden.ENotFound},
		} {
			got, err := s.f.Session(ctx, tt.hash)
			if code := gpuwarden.ErrorCodeOf(err); code != tt.code || (tt.code == "" && err != nil) {
				t.Errorf("reopen %v, %s: Session = %v (code %q), want code %q", reopen, tt.name, err, code, tt.code)
				continue
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("reopen %v, %s: Session =\n%+v\nwant\n%+v", reopen, tt.name, got, tt.want)
			}
		}
	}
	// A session is not a token: the token list is untouched.
	if ts, err := s.f.Tokens(ctx, gpuwarden.AllProjects); err != nil || ts != nil {
		t.Errorf("Tokens = %+v, %v; want none", ts, err)
	}
}

func testSessionsRetain(t *testing.T, s *fleetStore) {
	ctx := context.Background()
	now := FleetStart.Add(24 * time.Hour)
	for _, tok := range []gpuwarden.Token{
		{ID: "live", Project: "vision", Role: gpuwarden.RoleViewer, Created: FleetStart, Hash: []byte{1}},
		{ID: "gone", Project: "vision", Role: gpuwarden.RoleViewer, Created: FleetStart, Hash: []byte{2}},
	} {
		if err := s.f.CreateToken(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.f.RevokeToken(ctx, "gone", FleetStart.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		id, token string
		expires   time.Time
		kept      bool
	}{
		{"expired", "live", now.Add(-time.Hour), false},
		// The server refuses a session at its expiry, so Retain drops it then.
		{"expires now", "live", now, false},
		{"valid", "live", now.Add(time.Millisecond), true},
		{"revoked token", "gone", now.Add(time.Hour), false},
		// An unknown token's session is refused and goes when it expires.
		{"unknown token", "nobody", now.Add(time.Hour), true},
	}
	for _, tt := range tests {
		sess := gpuwarden.Session{IDHash: SessionHash(tt.id), TokenID: tt.token, Created: FleetStart, Expires: tt.expires}
		if err := s.f.CreateSession(ctx, sess); err != nil {
			t.Fatalf("CreateSession(%s): %v", tt.id, err)
		}
	}
	for range 2 { // a second Retain finds nothing more to drop
		if err := s.f.Retain(ctx, now); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range tests {
		_, err := s.f.Session(ctx, SessionHash(tt.id))
		if err != nil && gpuwarden.ErrorCodeOf(err) != gpuwarden.ENotFound {
			t.Fatalf("Session(%s): %v", tt.id, err)
		}
		if got := err == nil; got != tt.kept {
			t.Errorf("session %s kept = %v, want %v", tt.id, got, tt.kept)
		}
	}
	// Retain drops sessions, never the tokens they stood for.
	if ts, err := s.f.Tokens(ctx, gpuwarden.AllProjects); err != nil || len(ts) != 2 {
		t.Errorf("Tokens after Retain = %+v, %v; want both", ts, err)
	}
}

// testSessionsShared opens the store a second time beside the first, as a
// second server replica on the same database does: a sign-in on one opens
// the other, and a sign-out on either ends it on both.
func testSessionsShared(t *testing.T, s *fleetStore) {
	ctx := context.Background()
	replica := s.reopen()
	defer replica.Close()
	sess := gpuwarden.Session{IDHash: SessionHash("shared"), TokenID: "t1", Created: FleetStart, Expires: FleetStart.Add(time.Hour)}
	if err := s.f.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	if got, err := replica.Session(ctx, sess.IDHash); err != nil || !reflect.DeepEqual(got, sess) {
		t.Errorf("the replica's Session = %+v, %v; want %+v", got, err, sess)
	}
	if err := replica.DeleteSession(ctx, sess.IDHash); err != nil {
		t.Fatal(err)
	}
	_, err := s.f.Session(ctx, sess.IDHash)
	wantCode(t, "Session after the replica's DeleteSession", err, gpuwarden.ENotFound)
}
