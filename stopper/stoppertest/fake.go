// Package stoppertest serves, on 127.0.0.1, fakes of the provider APIs the
// stopper package calls: Azure IMDS and Resource Manager, GCP's metadata
// server and Compute Engine, RunPod's REST API, Vast.ai's API and Lambda
// Cloud's API. Each one follows the public documentation it names, checks
// what the real server checks (auth header, method, path, body,
// api-version), answers with the documented status codes and bodies,
// records every call and can be told to refuse (no permission, bad key).
// They are exported so that the agent's and the CLI's end-to-end tests can
// start them too; none of them ever stops anything real.
package stoppertest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// Call is one request a fake received.
type Call struct {
	Method string
	Path   string
	Query  url.Values
	Header http.Header
	Body   string
}

// String is "METHOD /path", what tests compare.
func (c Call) String() string { return c.Method + " " + c.Path }

// Recorder keeps the calls a fake received, in order.
type Recorder struct {
	mu    sync.Mutex
	calls []Call
}

// record reads the request's body (at most 1 MiB) and keeps the call.
func (r *Recorder) record(req *http.Request) Call {
	body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	c := Call{Method: req.Method, Path: req.URL.Path, Query: req.URL.Query(), Header: req.Header.Clone(), Body: string(body)}
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
	return c
}

// Calls returns the calls received so far.
func (r *Recorder) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// Count returns how many calls had the method and a path ending in suffix.
func (r *Recorder) Count(method, suffix string) int {
	n := 0
	for _, c := range r.Calls() {
		if c.Method == method && strings.HasSuffix(c.Path, suffix) {
			n++
		}
	}
	return n
}

// writeJSON answers with a status and a JSON body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// bearer returns the token of an "Authorization: Bearer …" header.
func bearer(h http.Header) (string, bool) {
	v := h.Get("Authorization")
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return strings.TrimSpace(v[7:]), true
	}
	return "", false
}
