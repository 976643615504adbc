package http

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	nethttp "net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/sqlite"
)

// fleetFixture is a real fleet server on loopback over a real SQLite file.
type fleetFixture struct {
	t     testing.TB
	srv   *FleetServer
	store gpuwarden.Fleet
	base  string
	dir   string
	now   time.Time
	mu    sync.Mutex
}

func newFleetFixture(t testing.TB, tune func(*FleetServer)) *fleetFixture {
	t.Helper()
	return newFleetFixtureAt(t, t.TempDir(), tune)
}

// newFleetFixtureAt keeps the ledger in dir, a folder the test may fill.
func newFleetFixtureAt(t testing.TB, dir string, tune func(*FleetServer)) *fleetFixture {
	t.Helper()
	store, err := sqlite.OpenFleet(context.Background(), filepath.Join(dir, "server.db"))
	if err != nil {
		t.Fatal(err)
	}
	f := &fleetFixture{t: t, store: store, dir: dir, now: fixtureNow}
	f.srv = NewFleetServer(store, nil)
	f.srv.Now = f.clock
	if tune != nil {
		tune(f.srv)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr, err := f.srv.Serve(ctx, "127.0.0.1:0", "", "")
	if err != nil {
		t.Fatal(err)
	}
	f.base = "http://" + addr
	t.Cleanup(func() {
		cancel()
		_ = f.srv.Wait()
		_ = store.Close()
	})
	return f
}

func (f *fleetFixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fleetFixture) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// token creates a token straight in the ledger and returns its secret.
func (f *fleetFixture) token(project, role string) string {
	f.t.Helper()
	tk, secret, err := NewToken(project, role, "test", f.clock())
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.store.CreateToken(context.Background(), tk); err != nil {
		f.t.Fatal(err)
	}
	return secret
}

// call sends one request and returns the status and body.
func (f *fleetFixture) call(method, path, token string, body any) (int, []byte, nethttp.Header) {
	f.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			f.t.Fatal(err)
		}
		r = bytes.NewReader(raw)
	}
	req, err := nethttp.NewRequest(method, f.base+path, r)
	if err != nil {
		f.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := nethttp.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out, resp.Header
}

func (f *fleetFixture) register(token string, n gpuwarden.Node) {
	f.t.Helper()
	if code, body, _ := f.call("POST", "/api/v1/register", token, n); code != 200 {
		f.t.Fatalf("register %s: %d %s", n.ID, code, body)
	}
}

func node(id, owner string) gpuwarden.Node {
	return gpuwarden.Node{ID: id, Hostname: id + ".example", Labels: gpuwarden.NodeLabels{Owner: owner, Provider: "aws",
		Region: "eu-west-1", HourlyPrice: 3_500_000, Currency: "EUR"}, GPUs: []gpuwarden.GPU{{Index: 0, Model: "H100"}}}
}

func TestFleetAuthRefusals(t *testing.T) {
	f := newFleetFixture(t, nil)
	good := f.token("ml", gpuwarden.RoleViewer)
	revoked := f.token("ml", gpuwarden.RoleViewer)
	id, _, _ := splitToken(revoked)
	if err := f.store.RevokeToken(context.Background(), id, fixtureNow); err != nil {
		t.Fatal(err)
	}
	wrongSecret := good[:len(good)-4] + "0000"
	if wrongSecret == good {
		wrongSecret = good[:len(good)-4] + "1111"
	}
	tests := []struct {
		name, token string
		want        int
	}{
		{"none", "", 401},
		{"not a token", "hunter2", 401},
		{"unknown id", "gw_0123456789abcdef_" + strings.Repeat("ab", 32), 401},
		{"wrong secret", wrongSecret, 401},
		{"revoked", revoked, 401},
		{"good", good, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, body, h := f.call("GET", "/api/v1/nodes", tt.token, nil)
			if got != tt.want {
				t.Fatalf("status = %d, want %d (%s)", got, tt.want, body)
			}
			if got == 401 {
				if h.Get("WWW-Authenticate") == "" || !json.Valid(body) {
					t.Errorf("401 without WWW-Authenticate or JSON body: %q", body)
				}
				if strings.Contains(string(body), "revoked\"") || strings.Contains(string(body), id) {
					t.Errorf("refusal tells which token: %s", body)
				}
			}
		})
	}
	// /healthz is the one route without a token.
	if got, _, _ := f.call("GET", "/healthz", "", nil); got != 200 {
		t.Errorf("/healthz = %d, want 200", got)
	}
}

// TestFleetForeignNodeLooksUnknown: every read and write by node ID answers
// another project's node exactly as an ID nobody holds, status and words;
// registering it is refused with 409, the one answer a fleet-wide ID
// cannot avoid, which names neither the project nor the box (issue #32
// item 6: register said "belongs to another project" while GET said 404,
// and a heartbeat named the other project).
func TestFleetForeignNodeLooksUnknown(t *testing.T) {
	f := newFleetFixture(t, nil)
	agentA := f.token("team-a", gpuwarden.RoleAgent)
	agentB, viewerB, adminB := f.token("team-b", gpuwarden.RoleAgent), f.token("team-b", gpuwarden.RoleViewer), f.token("team-b", gpuwarden.RoleAdmin)
	held := node("a1", "ana")
	held.Hostname, held.InstanceID = "box-of-team-a", "i-0aaa"
	f.register(agentA, held)
	const nobody = "zz"
	minute := gpuwarden.FleetBatch{Minutes: []gpuwarden.NodeMinute{{Minute: fixtureNow.Add(-time.Hour), Samples: 60, GPUUtil: []float64{10}}}}
	for _, tt := range []struct {
		name, method, path, token string
		body                      func(id string) any
	}{
		{"viewer reads", "GET", "/api/v1/nodes/{id}", viewerB, nil},
		{"admin reads", "GET", "/api/v1/nodes/{id}", adminB, nil},
		{"agent beats", "POST", "/api/v1/heartbeat", agentB, func(id string) any {
			return gpuwarden.Heartbeat{Node: id, Time: fixtureNow, State: gpuwarden.NodeRunning}
		}},
		{"admin beats", "POST", "/api/v1/heartbeat", adminB, func(id string) any {
			return gpuwarden.Heartbeat{Node: id, Time: fixtureNow, State: gpuwarden.NodeRunning}
		}},
		{"agent ships", "POST", "/api/v1/nodes/{id}/batch", agentB, func(string) any { return minute }},
		{"admin marks gone", "POST", "/api/v1/nodes/{id}/gone", adminB, func(string) any { return GoneRequest{} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			answer := func(id string) string {
				var body any
				if tt.body != nil {
					body = tt.body(id)
				}
				code, b, _ := f.call(tt.method, strings.ReplaceAll(tt.path, "{id}", id), tt.token, body)
				return fmt.Sprintf("%d %s", code, strings.ReplaceAll(string(b), id, "ID"))
			}
			foreign, unknown := answer("a1"), answer(nobody+"1")
			if foreign != unknown || !strings.HasPrefix(foreign, "404 ") {
				t.Errorf("another project's node:\n  %s\nan ID nobody holds:\n  %s\nwant the same 404", foreign, unknown)
			}
		})
	}
	code, body, _ := f.call("POST", "/api/v1/register", agentB, node("a1", "bo"))
	if code != 409 || !strings.Contains(string(body), "the ID is taken") || !strings.Contains(string(body), "--node-id") {
		t.Errorf("registering A's node ID from B = %d %s; want 409, the ID taken, and --node-id", code, body)
	}
	for _, secret := range []string{"team-a", "project", "box-of-team-a", "i-0aaa", "ana"} {
		if strings.Contains(string(body), secret) {
			t.Errorf("the refusal tells B %q: %s", secret, body)
		}
	}
}

func TestFleetCrossProjectRefused(t *testing.T) {
	f := newFleetFixture(t, nil)
	agentA, agentA2 := f.token("team-a", gpuwarden.RoleAgent), f.token("team-a", gpuwarden.RoleAgent)
	viewerA, adminA := f.token("team-a", gpuwarden.RoleViewer), f.token("team-a", gpuwarden.RoleAdmin)
	agentB, viewerB, adminB := f.token("team-b", gpuwarden.RoleAgent), f.token("team-b", gpuwarden.RoleViewer), f.token("team-b", gpuwarden.RoleAdmin)
	f.register(agentA, node("a1", "ana"))
	f.register(agentB, node("b1", "bo"))
	tokA, _, _ := splitToken(viewerA)

	beat := func(id string) gpuwarden.Heartbeat {
		return gpuwarden.Heartbeat{Node: id, Time: fixtureNow, State: gpuwarden.NodeRunning}
	}
	minute := gpuwarden.FleetBatch{Minutes: []gpuwarden.NodeMinute{{Minute: fixtureNow.Add(-time.Hour), Samples: 60, GPUUtil: []float64{10}}}}
	tests := []struct {
		name, method, path, token string
		body                      any
		want                      int
	}{
		{"B reads A's node", "GET", "/api/v1/nodes/a1", viewerB, nil, 404},
		{"B lists A's nodes", "GET", "/api/v1/nodes?project=team-a", viewerB, nil, 403},
		{"B reads A's events", "GET", "/api/v1/events?project=team-a", viewerB, nil, 403},
		{"B reads A's spend", "GET", "/api/v1/reports/spend?project=team-a", viewerB, nil, 403},
		// Another project's node answers as one nobody holds (see
		// TestFleetForeignNodeLooksUnknown).
		{"B agent beats for A's node", "POST", "/api/v1/heartbeat", agentB, beat("a1"), 404},
		{"B agent ships to A's node", "POST", "/api/v1/nodes/a1/batch", agentB, minute, 404},
		{"B admin beats for A's node", "POST", "/api/v1/heartbeat", adminB, beat("a1"), 404},
		{"B agent registers into A", "POST", "/api/v1/register", agentB, gpuwarden.Node{ID: "x1", Project: "team-a"}, 403},
		{"B agent takes over A's node", "POST", "/api/v1/register", agentB, node("a1", "bo"), 409},
		{"B admin makes a token for A", "POST", "/api/v1/tokens", adminB, map[string]string{"project": "team-a", "role": "admin"}, 403},
		{"B admin revokes A's token", "DELETE", "/api/v1/tokens/" + tokA, adminB, nil, 403},
		{"B admin sets A's budget", "PUT", "/api/v1/projects/team-a", adminB, gpuwarden.Project{Budget: 1, Currency: "EUR"}, 403},
		{"B admin lists A's tokens", "GET", "/api/v1/tokens?project=team-a", adminB, nil, 403},
		{"A's other agent beats for a1", "POST", "/api/v1/heartbeat", agentA2, beat("a1"), 403},
		{"A viewer beats", "POST", "/api/v1/heartbeat", viewerA, beat("a1"), 403},
		{"A viewer makes a token", "POST", "/api/v1/tokens", viewerA, map[string]string{"role": "viewer"}, 403},
		{"A agent beats for a1", "POST", "/api/v1/heartbeat", agentA, beat("a1"), 204},
		{"A admin beats for a1", "POST", "/api/v1/heartbeat", adminA, beat("a1"), 204},
		{"A agent ships to a1", "POST", "/api/v1/nodes/a1/batch", agentA, minute, 200},
		{"A viewer reads a1", "GET", "/api/v1/nodes/a1", viewerA, nil, 200},
		{"A viewer reads spend", "GET", "/api/v1/reports/spend", viewerA, nil, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, body, _ := f.call(tt.method, tt.path, tt.token, tt.body)
			if got != tt.want {
				t.Errorf("%s %s = %d, want %d (%s)", tt.method, tt.path, got, tt.want, body)
			}
		})
	}
	// A project token lists only its own project's nodes and projects.
	_, body, _ := f.call("GET", "/api/v1/nodes", viewerB, nil)
	var nodes []gpuwarden.Node
	if err := json.Unmarshal(body, &nodes); err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 1 || nodes[0].ID != "b1" {
		t.Errorf("B's node list = %+v, want only b1", nodes)
	}
	_, body, _ = f.call("GET", "/api/v1/reports/spend", viewerB, nil)
	if strings.Contains(string(body), "team-a") {
		t.Errorf("B's spend report shows team-a: %s", body)
	}
}

func TestFleetTokensStoredHashed(t *testing.T) {
	f := newFleetFixture(t, nil)
	admin := f.token(gpuwarden.AllProjects, gpuwarden.RoleAdmin)
	var secrets []string
	for _, role := range []string{"agent", "viewer", "admin"} {
		code, body, _ := f.call("POST", "/api/v1/tokens", admin, map[string]string{"project": "ml", "role": role})
		if code != 201 {
			t.Fatalf("create %s token: %d %s", role, code, body)
		}
		var ct CreatedToken
		if err := json.Unmarshal(body, &ct); err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, ct.Secret)
		if got, _, _ := f.call("GET", "/api/v1/whoami", ct.Secret, nil); got != 200 {
			t.Errorf("new %s token refused: %d", role, got)
		}
	}
	secrets = append(secrets, admin)
	// The listing never carries a secret or a hash.
	_, list, _ := f.call("GET", "/api/v1/tokens", admin, nil)
	var raw []byte
	for _, name := range []string{"server.db", "server.db-wal"} {
		b, _ := os.ReadFile(filepath.Join(f.dir, name))
		raw = append(raw, b...)
	}
	if len(raw) == 0 {
		t.Fatal("no database bytes to inspect")
	}
	for _, s := range secrets {
		_, secret, _ := splitToken(s)
		for what, b := range map[string][]byte{"database": raw, "token list": list} {
			if bytes.Contains(b, []byte(secret)) {
				t.Errorf("a token secret is stored in clear in the %s", what)
			}
		}
	}
	if strings.Contains(string(list), "hash") {
		t.Errorf("token list shows hashes: %s", list)
	}
}

func TestFleetRevokeAppliesAtOnce(t *testing.T) {
	f := newFleetFixture(t, nil)
	admin, viewer := f.token("ml", gpuwarden.RoleAdmin), f.token("ml", gpuwarden.RoleViewer)
	if got, _, _ := f.call("GET", "/api/v1/nodes", viewer, nil); got != 200 {
		t.Fatalf("viewer before revoke = %d", got)
	}
	id, _, _ := splitToken(viewer)
	if got, body, _ := f.call("DELETE", "/api/v1/tokens/"+id, admin, nil); got != 204 {
		t.Fatalf("revoke = %d %s", got, body)
	}
	if got, _, _ := f.call("GET", "/api/v1/nodes", viewer, nil); got != 401 {
		t.Errorf("viewer after revoke = %d, want 401", got)
	}
}

func TestFleetBatchReplayIgnored(t *testing.T) {
	f := newFleetFixture(t, nil)
	agent := f.token("ml", gpuwarden.RoleAgent)
	f.register(agent, node("n1", "ana"))
	b := gpuwarden.FleetBatch{
		Minutes: []gpuwarden.NodeMinute{{Minute: fixtureNow.Add(-2 * time.Minute), Samples: 60, GPUUtil: []float64{90}},
			{Minute: fixtureNow.Add(-time.Minute), Samples: 60, GPUUtil: []float64{80}}},
		Events: []gpuwarden.Event{{Seq: 7, Time: fixtureNow, Kind: "xid", Severity: "critical", Message: "Xid 79"}},
	}
	tests := []struct {
		name string
		want gpuwarden.BatchResult
	}{
		{"first", gpuwarden.BatchResult{Minutes: 2, Events: 1}},
		{"replay", gpuwarden.BatchResult{Duplicates: 3}},
	}
	for _, tt := range tests {
		code, body, _ := f.call("POST", "/api/v1/nodes/n1/batch", agent, b)
		var got gpuwarden.BatchResult
		if err := json.Unmarshal(body, &got); code != 200 || err != nil {
			t.Fatalf("%s: %d %s", tt.name, code, body)
		}
		if got != tt.want {
			t.Errorf("%s: result = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestFleetBadRequests(t *testing.T) {
	f := newFleetFixture(t, func(s *FleetServer) { s.MaxBody = 4096; s.RatePerSec = 1; s.RateBurst = 200 })
	agent := f.token("ml", gpuwarden.RoleAgent)
	f.register(agent, node("n1", "ana"))
	tests := []struct {
		name, method, path string
		body               any
		want               int
	}{
		{"not JSON", "POST", "/api/v1/heartbeat", "{", 400},
		{"empty body", "POST", "/api/v1/heartbeat", "", 400},
		{"two values", "POST", "/api/v1/heartbeat", `{"node":"n1","state":"running"} {}`, 400},
		{"wrong type", "POST", "/api/v1/heartbeat", `{"node":7}`, 400},
		{"bad state", "POST", "/api/v1/heartbeat", gpuwarden.Heartbeat{Node: "n1", State: "dancing"}, 400},
		{"util over 100", "POST", "/api/v1/heartbeat", gpuwarden.Heartbeat{Node: "n1", State: "running", GPUUtil: 101}, 400},
		{"unknown node", "POST", "/api/v1/heartbeat", gpuwarden.Heartbeat{Node: "zz", State: "running", Time: fixtureNow}, 404},
		{"heartbeat without a time", "POST", "/api/v1/heartbeat", gpuwarden.Heartbeat{Node: "n1", State: "running"}, 400},
		{"too big", "POST", "/api/v1/nodes/n1/batch", `{"events":[` + strings.Repeat(`{"seq":1},`, 1000) + `{}]}`, 413},
		{"minute off the minute", "POST", "/api/v1/nodes/n1/batch", gpuwarden.FleetBatch{Minutes: []gpuwarden.NodeMinute{{Minute: fixtureNow.Add(time.Second), Samples: 1}}}, 400},
		{"minute in the future", "POST", "/api/v1/nodes/n1/batch", gpuwarden.FleetBatch{Minutes: []gpuwarden.NodeMinute{{Minute: fixtureNow.Add(time.Hour), Samples: 1}}}, 400},
		{"event without seq", "POST", "/api/v1/nodes/n1/batch", gpuwarden.FleetBatch{Events: []gpuwarden.Event{{Time: fixtureNow, Kind: "x"}}}, 400},
		{"bad node id", "POST", "/api/v1/register", gpuwarden.Node{ID: "../etc"}, 400},
		{"negative price", "POST", "/api/v1/register", gpuwarden.Node{ID: "n2", Labels: gpuwarden.NodeLabels{HourlyPrice: -1}}, 400},
		{"wrong method", "DELETE", "/api/v1/nodes", nil, 405},
		{"no such route", "GET", "/api/v1/nope", nil, 404},
		{"no such report", "GET", "/api/v1/reports/nope", nil, 400},
		{"bad month", "GET", "/api/v1/reports/spend?month=11-2026", nil, 400},
		{"month ending past year 9999", "GET", "/api/v1/reports/spend?month=9999-12", nil, 400},
		{"too many kinds", "GET", "/api/v1/events?kind=" + strings.Repeat("a,", maxEventKinds) + "a", nil, 400},
		{"heartbeat time past year 9999", "POST", "/api/v1/heartbeat", `{"node":"n1","state":"running","time":"9999-12-31T23:30:00-01:00"}`, 400},
		{"idle since before year 0", "POST", "/api/v1/heartbeat", `{"node":"n1","state":"running","idle_since":"0000-01-01T00:00:00+01:00"}`, 400},
		{"event time past year 9999", "POST", "/api/v1/nodes/n1/batch", `{"events":[{"seq":1,"kind":"x","time":"9999-12-31T23:30:00-01:00"}]}`, 400},
		{"minute before year 0", "POST", "/api/v1/nodes/n1/batch", `{"minutes":[{"minute":"0000-01-01T00:00:00+01:00","samples":1}]}`, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, body, h := f.call(tt.method, tt.path, agent, tt.body)
			if got != tt.want {
				t.Errorf("status = %d, want %d (%s)", got, tt.want, body)
			}
			if !json.Valid(body) || !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
				t.Errorf("answer is not JSON: %q", body)
			}
		})
	}
	// What was refused left nothing behind that breaks a later read.
	if got, body, _ := f.call("GET", "/api/v1/events", agent, nil); got != 200 {
		t.Errorf("events after the bad requests = %d, want 200 (%s)", got, body)
	}
}

// TestFleetOneTimeWindow: every time an agent reports as happening lies
// within 35 days before and 5 minutes after the server's clock, whatever
// its kind; a start time (idle_since) only not in the future.
func TestFleetOneTimeWindow(t *testing.T) {
	f := newFleetFixture(t, func(s *FleetServer) { s.RatePerSec = 0 })
	agent := f.token("ml", gpuwarden.RoleAgent)
	f.register(agent, node("n1", "ana"))
	now := fixtureNow
	beat := func(at, idle time.Time) gpuwarden.Heartbeat {
		return gpuwarden.Heartbeat{Node: "n1", State: "running", Time: at, IdleSince: idle}
	}
	minute := func(at time.Time) gpuwarden.FleetBatch {
		return gpuwarden.FleetBatch{Minutes: []gpuwarden.NodeMinute{{Minute: at.Truncate(time.Minute), Samples: 1}}}
	}
	seq := int64(0)
	event := func(at time.Time) gpuwarden.FleetBatch {
		seq++
		return gpuwarden.FleetBatch{Events: []gpuwarden.Event{{Seq: seq, Time: at, Kind: "x"}}}
	}
	year9999 := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	launched := func(id string, at time.Time) gpuwarden.Node {
		n := node(id, "ana")
		n.Labels.LaunchedAt = at
		return n
	}
	tests := []struct {
		name, path string
		body       any
		want       int
	}{
		{"heartbeat now", "/api/v1/heartbeat", beat(now, time.Time{}), 204},
		{"heartbeat 4 min ahead", "/api/v1/heartbeat", beat(now.Add(4*time.Minute), time.Time{}), 204},
		{"heartbeat 10 min ahead", "/api/v1/heartbeat", beat(now.Add(10*time.Minute), time.Time{}), 400},
		{"heartbeat in year 9999", "/api/v1/heartbeat", beat(year9999, time.Time{}), 400},
		{"heartbeat 36 days old", "/api/v1/heartbeat", beat(now.Add(-36*24*time.Hour), time.Time{}), 400},
		{"idle for 60 days", "/api/v1/heartbeat", beat(now, now.Add(-60*24*time.Hour)), 204},
		{"idle from the future", "/api/v1/heartbeat", beat(now, now.Add(time.Hour)), 400},
		{"minute 34 days old", "/api/v1/nodes/n1/batch", minute(now.Add(-34 * 24 * time.Hour)), 200},
		{"minute 36 days old", "/api/v1/nodes/n1/batch", minute(now.Add(-36 * 24 * time.Hour)), 400},
		{"minute 10 min ahead", "/api/v1/nodes/n1/batch", minute(now.Add(10 * time.Minute)), 400},
		{"event now", "/api/v1/nodes/n1/batch", event(now), 200},
		{"event 10 min ahead", "/api/v1/nodes/n1/batch", event(now.Add(10 * time.Minute)), 400},
		{"event in year 9999", "/api/v1/nodes/n1/batch", event(year9999), 400},
		{"event 36 days old", "/api/v1/nodes/n1/batch", event(now.Add(-36 * 24 * time.Hour)), 400},
		{"launched a year ago", "/api/v1/register", launched("n2", now.Add(-365*24*time.Hour)), 200},
		{"launched in the future", "/api/v1/register", launched("n3", now.Add(time.Hour)), 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, body, _ := f.call("POST", tt.path, agent, tt.body); got != tt.want {
				t.Errorf("status = %d, want %d (%s)", got, tt.want, body)
			}
		})
	}
}

func TestFleetRateLimit(t *testing.T) {
	f := newFleetFixture(t, func(s *FleetServer) { s.RatePerSec = 1; s.RateBurst = 3 })
	viewer := f.token("ml", gpuwarden.RoleViewer)
	var got []int
	for range 4 {
		code, _, h := f.call("GET", "/api/v1/nodes", viewer, nil)
		got = append(got, code)
		if code == 429 && h.Get("Retry-After") != "1" {
			t.Errorf("Retry-After = %q, want 1", h.Get("Retry-After"))
		}
	}
	if want := []int{200, 200, 200, 429}; !equalInts(got, want) {
		t.Errorf("statuses = %v, want %v", got, want)
	}
	f.advance(time.Second)
	if code, _, _ := f.call("GET", "/api/v1/nodes", viewer, nil); code != 200 {
		t.Errorf("after a second: %d, want 200", code)
	}
	// Another token has its own bucket.
	if code, _, _ := f.call("GET", "/api/v1/nodes", f.token("ml", gpuwarden.RoleViewer), nil); code != 200 {
		t.Errorf("second token: %d, want 200", code)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestFleetConcurrentHeartbeatsGroupCommit(t *testing.T) {
	f := newFleetFixture(t, nil)
	agent := f.token("ml", gpuwarden.RoleAgent)
	const n = 40
	for i := range n {
		f.register(agent, node(nodeName(i), "ana"))
	}
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, body, _ := f.call("POST", "/api/v1/heartbeat", agent,
				gpuwarden.Heartbeat{Node: nodeName(i), Time: fixtureNow, State: gpuwarden.NodeRunning, GPUUtil: float64(i)})
			if code != 204 {
				errs <- string(body)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	nodes, err := f.store.Nodes(context.Background(), "ml")
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range nodes {
		if !nd.LastSeen.Equal(fixtureNow) || nd.Live.State != gpuwarden.NodeRunning {
			t.Errorf("%s: last seen %v state %q, want %v running", nd.ID, nd.LastSeen, nd.Live.State, fixtureNow)
		}
	}
}

func nodeName(i int) string { return "node-" + string(rune('a'+i/26)) + string(rune('a'+i%26)) }

// FuzzFleetAPI sends arbitrary bodies to every write route: the server
// answers 4xx with a JSON error, never 5xx, never a crash.
func FuzzFleetAPI(f *testing.F) {
	for _, seed := range []string{`{}`, `{"node":"n1","state":"running"}`, `{"minutes":[{"minute":"2026-11-29T11:00:00Z","samples":1}]}`,
		`{"events":[{"seq":1,"time":"2026-11-29T11:00:00Z","kind":"x"}]}`, `{"id":"n1","labels":{"hourly_price":"1e400"}}`, `[`, "\x00", `{"gpu_util":1e309}`} {
		for route := range 4 {
			f.Add(uint8(route), []byte(seed))
		}
	}
	fx := newFleetFixture(f, func(s *FleetServer) { s.RatePerSec = 0 })
	agent := fx.token("ml", gpuwarden.RoleAgent)
	admin := fx.token("ml", gpuwarden.RoleAdmin)
	fx.register(agent, node("n1", "ana"))
	routes := []struct{ method, path, token string }{
		{"POST", "/api/v1/heartbeat", agent}, {"POST", "/api/v1/nodes/n1/batch", agent},
		{"POST", "/api/v1/register", agent}, {"POST", "/api/v1/tokens", admin},
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		r := routes[int(route)%len(routes)]
		fx.t = t
		code, out, h := fx.call(r.method, r.path, r.token, body)
		if code >= 500 {
			t.Fatalf("%s %s with %q: %d %s", r.method, r.path, body, code, out)
		}
		if code >= 400 && (!json.Valid(out) || !strings.HasPrefix(h.Get("Content-Type"), "application/json")) {
			t.Fatalf("%s %s: %d answer is not JSON: %q", r.method, r.path, code, out)
		}
	})
}

// gatedFleet is a real ledger whose heartbeat commits and token reads can
// be held, so that tests can line requests up against the group commit and
// the token cache.
type gatedFleet struct {
	gpuwarden.Fleet
	// beatEntered hears of each commit that begins; the commit then waits
	// until beatRelease is closed.
	beatEntered chan struct{}
	beatRelease chan struct{}

	mu sync.Mutex
	// tokenGate holds the next read of a token ID, after the read, until
	// the channel is closed; tokenEntered hears that it is held.
	tokenGate    map[string]chan struct{}
	tokenEntered chan struct{}
}

func (g *gatedFleet) RecordHeartbeats(ctx context.Context, at time.Time, hbs []gpuwarden.Heartbeat) error {
	if g.beatRelease != nil {
		g.beatEntered <- struct{}{}
		<-g.beatRelease
	}
	return g.Fleet.RecordHeartbeats(ctx, at, hbs)
}

func (g *gatedFleet) Token(ctx context.Context, id string) (gpuwarden.Token, error) {
	t, err := g.Fleet.Token(ctx, id)
	g.mu.Lock()
	gate := g.tokenGate[id]
	delete(g.tokenGate, id)
	g.mu.Unlock()
	if gate != nil {
		g.tokenEntered <- struct{}{}
		<-gate
	}
	return t, err
}

// newGatedServer builds a fleet server over a gated SQLite ledger, for
// requests sent straight to its handler; the heartbeat writer is started
// by the test.
func newGatedServer(t *testing.T) (*FleetServer, *gatedFleet) {
	t.Helper()
	store, err := sqlite.OpenFleet(context.Background(), filepath.Join(t.TempDir(), "server.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	g := &gatedFleet{Fleet: store, tokenGate: map[string]chan struct{}{}, tokenEntered: make(chan struct{}, 1)}
	srv := NewFleetServer(g, nil)
	srv.RatePerSec = 0
	return srv, g
}

// gatedToken stores a token and returns its secret.
func gatedToken(t *testing.T, g *gatedFleet, project, role string) string {
	t.Helper()
	tk, secret, err := NewToken(project, role, "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Fleet.CreateToken(context.Background(), tk); err != nil {
		t.Fatal(err)
	}
	return secret
}

type answer struct {
	code int
	body string
}

// serve sends one request to the handler in this process and gives up
// after a few seconds, so that a request that would hang fails the test.
func serve(srv *FleetServer, method, path, token, body string) answer {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(body))
	req.Host = "127.0.0.1"
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	return answer{rec.Code, rec.Body.String()}
}

// waitFor polls cond for up to five seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// holdBeats makes each heartbeat commit announce itself on g.beatEntered
// and wait until g.beatRelease is closed, and starts the heartbeat writer;
// cancel stops it.
func holdBeats(t *testing.T, srv *FleetServer, g *gatedFleet) (cancel context.CancelFunc) {
	g.beatEntered, g.beatRelease = make(chan struct{}, 8), make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv.Start(ctx)
	return cancel
}

// registerNode registers node id with token through the handler.
func registerNode(t *testing.T, srv *FleetServer, token, id string) {
	t.Helper()
	raw, _ := json.Marshal(node(id, "ana"))
	if a := serve(srv, "POST", "/api/v1/register", token, string(raw)); a.code != 200 {
		t.Fatalf("register %s: %+v", id, a)
	}
}

func beatBody(id, at string) string {
	return `{"node":"` + id + `","state":"running","time":"` + at + `"}`
}

// One agent's heartbeat that the ledger cannot store must not fail the
// other heartbeats committed with it.
func TestFleetBadHeartbeatSparesItsGroup(t *testing.T) {
	srv, g := newGatedServer(t)
	holdBeats(t, srv, g)
	agentA, agentB := gatedToken(t, g, "team-a", gpuwarden.RoleAgent), gatedToken(t, g, "team-b", gpuwarden.RoleAgent)
	registerNode(t, srv, agentA, "a1")
	registerNode(t, srv, agentB, "b1")
	registerNode(t, srv, agentA, "a2")
	tests := []struct {
		name, token, body string
		want              int
	}{
		{"first, holding the writer", agentA, beatBody("a1", "2026-11-29T12:00:00Z"), 204},
		{"another project's bad time", agentB, beatBody("b1", "9999-12-31T23:30:00-01:00"), 400},
		{"good, committed after", agentA, beatBody("a2", "2026-11-29T12:00:00Z"), 204},
	}
	got := make([]chan answer, len(tests))
	for i, tt := range tests {
		got[i] = make(chan answer, 1)
		queued := len(srv.beats.in)
		go func() { got[i] <- serve(srv, "POST", "/api/v1/heartbeat", tt.token, tt.body) }()
		if i == 0 {
			<-g.beatEntered // the writer holds the first one in its commit
			continue
		}
		// Either queued behind the first commit or answered at once.
		waitFor(t, tt.name, func() bool { return len(srv.beats.in) > queued || len(got[i]) > 0 })
	}
	close(g.beatRelease)
	for i, tt := range tests {
		if a := <-got[i]; a.code != tt.want {
			t.Errorf("%s: status = %d, want %d (%s)", tt.name, a.code, tt.want, a.body)
		}
	}
}

// A heartbeat is answered when the writer stops: what was queued is
// committed, what comes later is refused, and nothing waits for ever.
func TestFleetHeartbeatWriterStops(t *testing.T) {
	srv, g := newGatedServer(t)
	cancel := holdBeats(t, srv, g)
	agent := gatedToken(t, g, "ml", gpuwarden.RoleAgent)
	for _, id := range []string{"n1", "n2", "n3"} {
		registerNode(t, srv, agent, id)
	}
	first, queued := make(chan answer, 1), make(chan answer, 1)
	go func() {
		first <- serve(srv, "POST", "/api/v1/heartbeat", agent, beatBody("n1", "2026-11-29T12:00:00Z"))
	}()
	<-g.beatEntered
	go func() {
		queued <- serve(srv, "POST", "/api/v1/heartbeat", agent, beatBody("n2", "2026-11-29T12:00:00Z"))
	}()
	waitFor(t, "the second heartbeat to queue", func() bool { return len(srv.beats.in) == 1 })
	cancel()
	close(g.beatRelease)
	waitFor(t, "the writer to stop", func() bool {
		buf := make([]byte, 1<<20)
		return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "(*beatWriter).run")
	})
	tests := []struct {
		name string
		got  func() answer
		want int
	}{
		{"in the commit when stopped", func() answer { return <-first }, 204},
		{"queued when stopped", func() answer { return <-queued }, 204},
		{"sent after the stop", func() answer {
			return serve(srv, "POST", "/api/v1/heartbeat", agent, beatBody("n3", "2026-11-29T12:00:00Z"))
		}, 503},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if a := tt.got(); a.code != tt.want {
				t.Errorf("status = %d, want %d (%s)", a.code, tt.want, a.body)
			}
		})
	}
}

// A revocation through this server applies at once, even to a token whose
// record was being read when it was revoked.
func TestFleetRevokeDuringTokenRead(t *testing.T) {
	srv, g := newGatedServer(t)
	admin, viewer := gatedToken(t, g, "ml", gpuwarden.RoleAdmin), gatedToken(t, g, "ml", gpuwarden.RoleViewer)
	id, _, _ := splitToken(viewer)
	gate := make(chan struct{})
	g.mu.Lock()
	g.tokenGate[id] = gate
	g.mu.Unlock()
	before := make(chan answer, 1)
	go func() { before <- serve(srv, "GET", "/api/v1/nodes", viewer, "") }()
	<-g.tokenEntered // the viewer's record is read, not yet cached
	if a := serve(srv, "DELETE", "/api/v1/tokens/"+id, admin, ""); a.code != 204 {
		t.Fatalf("revoke: %+v", a)
	}
	close(gate)
	<-before // sent before the revocation: either answer will do
	tests := []struct {
		name, token string
		want        int
	}{
		{"revoked viewer", viewer, 401},
		{"admin", admin, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if a := serve(srv, "GET", "/api/v1/nodes", tt.token, ""); a.code != tt.want {
				t.Errorf("status = %d, want %d (%s)", a.code, tt.want, a.body)
			}
		})
	}
}
