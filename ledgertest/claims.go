package ledgertest

import (
	"context"
	"sync"
	"testing"
)

// ClaimStore is a fleet ledger that keeps one-time claims (the monthly
// summary's record of what was sent) and can be closed.
type ClaimStore interface {
	Claim(ctx context.Context, key string) (bool, error)
	Release(ctx context.Context, key string) error
	Close() error
}

// RunClaims holds a fleet ledger's claims to what replicas sharing it rely
// on: a key is claimed once across handles and reopens, whoever races for
// it; a released key can be claimed again; keys do not collide. open makes
// a new, empty store and a func that opens another handle on it.
func RunClaims(t *testing.T, open func(t *testing.T) (ClaimStore, func() ClaimStore)) {
	ctx := context.Background()
	s, another := open(t)
	defer s.Close()
	claim := func(c ClaimStore, key string) bool {
		t.Helper()
		ok, err := c.Claim(ctx, key)
		if err != nil {
			t.Fatalf("Claim(%q): %v", key, err)
		}
		return ok
	}
	if !claim(s, "summary/2026-11/abc") {
		t.Fatal("the first claim of a key: false, want true")
	}
	if claim(s, "summary/2026-11/abc") {
		t.Error("a second claim of the same key: true, want false")
	}
	if !claim(s, "summary/2026-11/def") {
		t.Error("a claim of another key: false, want true")
	}
	if err := s.Release(ctx, "summary/2026-11/abc"); err != nil {
		t.Fatal(err)
	}
	if !claim(s, "summary/2026-11/abc") {
		t.Error("a claim after Release: false, want true")
	}

	// Replicas: two handles race for one key; exactly one wins, and the
	// claim holds across a reopen.
	other := another()
	defer other.Close()
	var wins int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range []ClaimStore{s, other, s, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := c.Claim(ctx, "summary/2026-12/race")
			if err != nil {
				t.Errorf("Claim: %v", err)
				return
			}
			if ok {
				mu.Lock()
				wins++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		t.Errorf("%d of 4 racing claims won, want exactly 1", wins)
	}
	if claim(other, "summary/2026-11/def") {
		t.Error("another handle claimed a key already claimed: true, want false")
	}
}
