// Package preempttest serves fake cloud metadata services on 127.0.0.1 for
// tests of preempt and of the agent: each fake answers in the documented
// format, enforces the documented request headers, and lets a test announce
// a preemption or maintenance event while the code under test runs.
package preempttest

import (
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"sync"
)

// raw is a canned answer that replaces a path's documented one, for tests of
// malformed documents.
type raw struct {
	status int
	body   string
}

// overrides holds the canned answers of one fake.
type overrides struct {
	mu sync.Mutex
	m  map[string]raw
}

// set stores a canned answer for path.
func (o *overrides) set(path string, status int, body string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = make(map[string]raw)
	}
	o.m[path] = raw{status, body}
}

// clear forgets every canned answer.
func (o *overrides) clear() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.m = nil
}

// serve writes the canned answer for path, reporting whether there was one.
func (o *overrides) serve(w http.ResponseWriter, path string) bool {
	o.mu.Lock()
	r, ok := o.m[path]
	o.mu.Unlock()
	if !ok {
		return false
	}
	w.WriteHeader(r.status)
	fmt.Fprint(w, r.body)
	return true
}

// Unreachable returns a loopback URL where nothing listens, for the clouds a
// test wants absent: the port was free a moment ago and is closed now.
func Unreachable() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("preempttest: listen: %v", err))
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// randomID returns a short random hex string for tokens and event IDs.
func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)
}
