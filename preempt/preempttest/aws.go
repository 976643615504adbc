package preempttest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"time"
)

// AWSEvent is one entry of events/maintenance/scheduled, field names as the
// EC2 user guide's example shows them.
type AWSEvent struct {
	NotBefore   string `json:"NotBefore"`
	Code        string `json:"Code"`
	Description string `json:"Description"`
	EventID     string `json:"EventId"`
	NotAfter    string `json:"NotAfter"`
	State       string `json:"State"`
}

// AWSTimeLayout is how the scheduled-events document writes NotBefore and
// NotAfter ("21 Jan 2019 09:00:43 GMT").
const AWSTimeLayout = "2 Jan 2006 15:04:05 GMT"

// AWS is a fake EC2 instance metadata service that speaks only IMDSv2: a GET
// without a live token gets 401, as on an instance with HttpTokens=required.
type AWS struct {
	*httptest.Server
	raw overrides

	mu           sync.Mutex
	tokens       map[string]time.Time
	spot         []byte
	rebalance    []byte
	scheduled    []AWSEvent
	tokenPuts    int
	unauthorized int
}

// NewAWS starts the fake on 127.0.0.1; the caller closes it.
func NewAWS() *AWS {
	f := &AWS{tokens: make(map[string]time.Time)}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

// Interrupt publishes spot/instance-action: action is terminate, stop or
// hibernate, at the interruption time (RFC 3339, UTC, whole seconds).
func (f *AWS) Interrupt(action string, at time.Time) {
	b, _ := json.Marshal(map[string]string{"action": action, "time": at.UTC().Format("2006-01-02T15:04:05Z")})
	f.mu.Lock()
	defer f.mu.Unlock()
	f.spot = b
}

// Rebalance publishes events/recommendations/rebalance with its noticeTime.
func (f *AWS) Rebalance(noticeTime time.Time) {
	b, _ := json.Marshal(map[string]string{"noticeTime": noticeTime.UTC().Format("2006-01-02T15:04:05Z")})
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rebalance = b
}

// Schedule adds a scheduled event (Code system-reboot, instance-reboot,
// system-maintenance, instance-retirement or instance-stop) and returns its
// EventId; an empty EventId or State gets a fresh ID and "active".
func (f *AWS) Schedule(ev AWSEvent) string {
	if ev.EventID == "" {
		ev.EventID = "instance-event-" + randomID(9)[:17]
	}
	if ev.State == "" {
		ev.State = "active"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scheduled = append(f.scheduled, ev)
	return ev.EventID
}

// SetState changes the State of the scheduled event id (active, completed
// or canceled), as EC2 does before it drops the event from the list.
func (f *AWS) SetState(id, state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.scheduled {
		if f.scheduled[i].EventID == id {
			f.scheduled[i].State = state
		}
	}
}

// Unschedule withdraws the scheduled event id, as EC2 does some time after
// an event completes or is canceled.
func (f *AWS) Unschedule(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scheduled = slices.DeleteFunc(f.scheduled, func(e AWSEvent) bool { return e.EventID == id })
}

// Clear withdraws every notice and canned answer.
func (f *AWS) Clear() {
	f.mu.Lock()
	f.spot, f.rebalance, f.scheduled = nil, nil, nil
	f.mu.Unlock()
	f.raw.clear()
}

// Respond replaces the answer for path (e.g. "/latest/meta-data/spot/instance-action")
// with status and body, for tests of malformed documents; the token check
// still applies to every path but the token's own.
func (f *AWS) Respond(path string, status int, body string) { f.raw.set(path, status, body) }

// ExpireTokens makes every issued token stale, as a token past its TTL or an
// IMDS restart does.
func (f *AWS) ExpireTokens() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.tokens)
}

// TokenRequests counts successful token PUTs.
func (f *AWS) TokenRequests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tokenPuts
}

// Unauthorized counts GETs refused with 401.
func (f *AWS) Unauthorized() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.unauthorized
}

// serve routes one request.
func (f *AWS) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/latest/api/token" {
		if !f.raw.serve(w, r.URL.Path) {
			f.serveToken(w, r)
		}
		return
	}
	if r.Method != http.MethodGet {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	f.mu.Lock()
	exp, ok := f.tokens[r.Header.Get("X-aws-ec2-metadata-token")]
	if !ok || !time.Now().Before(exp) {
		f.unauthorized++
		f.mu.Unlock()
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	f.mu.Unlock()
	if f.raw.serve(w, r.URL.Path) {
		return
	}

	f.mu.Lock()
	var body []byte
	switch r.URL.Path {
	case "/latest/meta-data/spot/instance-action":
		body = f.spot
	case "/latest/meta-data/events/recommendations/rebalance":
		body = f.rebalance
	case "/latest/meta-data/events/maintenance/scheduled":
		if len(f.scheduled) > 0 {
			body, _ = json.MarshalIndent(f.scheduled, "", "  ")
		}
	case "/latest/meta-data/instance-id":
		body = []byte("i-0123456789abcdef0")
	}
	f.mu.Unlock()
	if body == nil {
		notFound(w)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Write(body)
}

// serveToken issues a session token for a PUT with a TTL of 1 to 21600 seconds.
func (f *AWS) serveToken(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	// IMDSv2 refuses token requests that went through a proxy.
	if r.Header.Get("X-Forwarded-For") != "" {
		http.Error(w, "Forbidden", http.StatusForbidden)
		return
	}
	ttl, err := strconv.Atoi(r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds"))
	if err != nil || ttl < 1 || ttl > 21600 {
		http.Error(w, "Bad Request", http.StatusBadRequest)
		return
	}
	token := "AQAEA" + randomID(24)
	f.mu.Lock()
	f.tokens[token] = time.Now().Add(time.Duration(ttl) * time.Second)
	f.tokenPuts++
	f.mu.Unlock()
	w.Header().Set("X-aws-ec2-metadata-token-ttl-seconds", strconv.Itoa(ttl))
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprint(w, token)
}

// notFound answers like IMDS does for a category that is not there.
func notFound(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/html")
	w.WriteHeader(http.StatusNotFound)
	fmt.Fprint(w, `<?xml version="1.0" encoding="iso-8859-1"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"
	"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">
<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">
 <head>
  <title>404 - Not Found</title>
 </head>
 <body>
  <h1>404 - Not Found</h1>
 </body>
</html>
`)
}
