package http

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	nethttp "net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

func TestStatusJSONRoundTrip(t *testing.T) {
	want := fixtureStatus()
	_, base := startServer(t, newFakeAgent(want))

	resp, body := get(t, "GET", base+"/api/v1/status")
	if resp.StatusCode != nethttp.StatusOK {
		t.Fatalf("status %d, want 200: %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", got)
	}
	checkSecurityHeaders(t, resp)

	// Money types marshal as exact decimals but do not unmarshal, so the
	// whole document is compared as generic JSON ...
	wantJSON, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var gotDoc, wantDoc any
	if err := json.Unmarshal(body, &gotDoc); err != nil {
		t.Fatalf("body is not JSON: %v", err)
	}
	if err := json.Unmarshal(wantJSON, &wantDoc); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotDoc, wantDoc) {
		t.Errorf("status JSON differs:\ngot  %s\nwant %s", body, wantJSON)
	}
	// ... and the typed parts round-trip into the domain types.
	var typed struct {
		Node      string               `json:"node"`
		Started   time.Time            `json:"started"`
		GPUs      []gpuwarden.GPU      `json:"gpus"`
		Last      gpuwarden.NodeSample `json:"last"`
		Idle      gpuwarden.IdleState  `json:"idle"`
		Diagnosis gpuwarden.Diagnosis  `json:"diagnosis"`
		Events    []gpuwarden.Event    `json:"events"`
		Notices   []gpuwarden.Notice   `json:"notices"`
	}
	if err := json.Unmarshal(body, &typed); err != nil {
		t.Fatalf("decode typed: %v", err)
	}
	if typed.Node != want.Node || !typed.Started.Equal(want.Started) {
		t.Errorf("node, started = %q, %v; want %q, %v", typed.Node, typed.Started, want.Node, want.Started)
	}
	for name, pair := range map[string][2]any{
		"gpus":      {typed.GPUs, want.GPUs},
		"last":      {typed.Last, want.Last},
		"idle":      {typed.Idle, want.Idle},
		"diagnosis": {typed.Diagnosis, want.Diagnosis},
		"events":    {typed.Events, want.Events},
		"notices":   {typed.Notices, want.Notices},
	} {
		if !reflect.DeepEqual(pair[0], pair[1]) {
			t.Errorf("%s:\ngot  %+v\nwant %+v", name, pair[0], pair[1])
		}
	}
	if !strings.Contains(string(body), `"spent":1234.56`) || !strings.Contains(string(body), `"hourly_rate":3.790142`) {
		t.Errorf("money is not exact decimals: %s", body)
	}
}

func TestHistory(t *testing.T) {
	agent := newFakeAgent(fixtureStatus())
	_, base := startServer(t, agent)

	for _, tc := range []struct {
		query   string
		minutes int
	}{
		{"", 60},
		{"?minutes=5", 5},
		{"?minutes=1", 1},
		{"?minutes=43200", 43200},
	} {
		t.Run("ok"+tc.query, func(t *testing.T) {
			resp, body := get(t, "GET", base+"/api/v1/history"+tc.query)
			if resp.StatusCode != nethttp.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if got, want := agent.lastSince(), fixtureNow.Add(-time.Duration(tc.minutes)*time.Minute); !got.Equal(want) {
				t.Errorf("since = %v, want %v", got, want)
			}
			var samples []gpuwarden.NodeSample
			if err := json.Unmarshal(body, &samples); err != nil {
				t.Fatalf("decode: %v", err)
			}
			wantN := 0
			for _, s := range agent.samples {
				if !s.Time.Before(agent.lastSince()) {
					wantN++
				}
			}
			if len(samples) != wantN {
				t.Errorf("got %d samples, want %d", len(samples), wantN)
			}
		})
	}

	for _, q := range []string{"0", "-1", "43201", "abc", "1.5", "1e3", "%20"} {
		t.Run("bad="+q, func(t *testing.T) {
			resp, body := get(t, "GET", base+"/api/v1/history?minutes="+q)
			if resp.StatusCode != nethttp.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", resp.StatusCode, body)
			}
			if e := errorOf(t, body); e.Code != "invalid" || !strings.Contains(e.Error, "minutes") {
				t.Errorf("error = %+v, want an invalid-minutes error", e)
			}
		})
	}

	t.Run("empty is an array", func(t *testing.T) {
		agent.mu.Lock()
		saved := agent.samples
		agent.samples = nil
		agent.mu.Unlock()
		defer func() { agent.mu.Lock(); agent.samples = saved; agent.mu.Unlock() }()
		_, body := get(t, "GET", base+"/api/v1/history")
		if got := strings.TrimSpace(string(body)); got != "[]" {
			t.Errorf("body = %s, want []", got)
		}
	})

	t.Run("ledger failure", func(t *testing.T) {
		agent.mu.Lock()
		agent.historyErr = errors.New("database is locked")
		agent.mu.Unlock()
		defer func() { agent.mu.Lock(); agent.historyErr = nil; agent.mu.Unlock() }()
		resp, body := get(t, "GET", base+"/api/v1/history")
		if resp.StatusCode != nethttp.StatusInternalServerError {
			t.Fatalf("status %d, want 500", resp.StatusCode)
		}
		if e := errorOf(t, body); e.Error != "read history: database is locked" {
			t.Errorf("error = %q", e.Error)
		}
	})
}

func TestNotFoundAndMethodNotAllowed(t *testing.T) {
	_, base := startServer(t, newFakeAgent(fixtureStatus()))
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/nope", 404},
		{"GET", "/api/v1/status/", 404},
		{"GET", "/api/v2/status", 404},
		{"GET", "/favicon.ico", 404},
		{"POST", "/nope", 404},
		{"POST", "/api/v1/status", 405},
		{"PUT", "/api/v1/history", 405},
		{"DELETE", "/metrics", 405},
		{"POST", "/", 405},
		{"HEAD", "/api/v1/status", 200},
	} {
		t.Run(tc.method+tc.path, func(t *testing.T) {
			resp, body := get(t, tc.method, base+tc.path)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if tc.status == 200 {
				return
			}
			if got := resp.Header.Get("Content-Type"); got != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", got)
			}
			errorOf(t, body)
			if tc.status == 405 && resp.Header.Get("Allow") != "GET, HEAD" {
				t.Errorf("Allow = %q, want GET, HEAD", resp.Header.Get("Allow"))
			}
			checkSecurityHeaders(t, resp)
		})
	}
}

func TestHostHeaderGuardsAgainstDNSRebinding(t *testing.T) {
	srv, base := startServer(t, newFakeAgent(fixtureStatus()))
	do := func(host string) int {
		req, _ := nethttp.NewRequest("GET", base+"/api/v1/status", nil)
		req.Host = host
		resp, err := nethttp.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for host, want := range map[string]int{
		"127.0.0.1:7070":         200,
		"[::1]:7070":             200,
		"localhost:7070":         200,
		"LOCALHOST":              200,
		"10.1.2.3":               200,
		"attacker.example:7070":  421,
		"gpu-node-1.internal":    421,
		"localhost.attacker.com": 421,
	} {
		if got := do(host); got != want {
			t.Errorf("Host %q: status %d, want %d", host, got, want)
		}
	}
	if srv.AllowedHosts != nil {
		t.Fatalf("AllowedHosts = %v by default, want none", srv.AllowedHosts)
	}

	// A name the operator allows passes; set before serving, as the agent does.
	named := NewServer(fixtureStatus, nil, nil)
	named.AllowedHosts = []string{"gpu-node-1.internal"}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "http://gpu-node-1.internal:7070/api/v1/status", nil)
	named.Handler().ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Errorf("allowed host: status %d, want 200", rec.Code)
	}
}

func TestAssets(t *testing.T) {
	_, base := startServer(t, newFakeAgent(fixtureStatus()))
	for url, ctype := range map[string]string{styleURL: "text/css", scriptURL: "text/javascript"} {
		resp, body := get(t, "GET", base+url)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), ctype) || len(body) == 0 {
			t.Errorf("%s: status %d, type %q, %d bytes", url, resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
		}
	}
}

func TestServeRefusesASecondStartAndABusyPort(t *testing.T) {
	srv, base := startServer(t, newFakeAgent(fixtureStatus()))
	if _, err := srv.Serve(context.Background(), "127.0.0.1:0"); err == nil {
		t.Error("second Serve succeeded, want an error")
	}
	other := NewServer(fixtureStatus, nil, nil)
	if _, err := other.Serve(context.Background(), strings.TrimPrefix(base, "http://")); err == nil {
		t.Error("Serve on a busy port succeeded, want an error")
	}
	if err := other.Wait(); err != nil {
		t.Errorf("Wait on a server that never started = %v, want nil", err)
	}
}

func TestGracefulShutdown(t *testing.T) {
	agent := newFakeAgent(fixtureStatus())
	agent.block = make(chan struct{})
	agent.entered = make(chan struct{}, 1)
	srv := NewServer(agent.status, agent.history, nil)
	ctx, cancel := context.WithCancel(context.Background())
	addr, err := srv.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	type result struct {
		status int
		err    error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := nethttp.Get("http://" + addr + "/api/v1/history")
		if err != nil {
			done <- result{err: err}
			return
		}
		resp.Body.Close()
		done <- result{status: resp.StatusCode}
	}()
	<-agent.entered // the request is in flight
	cancel()

	// A new connection is refused soon after the context ends ...
	deadline := time.Now().Add(time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("server still accepts connections a second after shutdown began")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// ... while the request in flight still gets its answer.
	time.Sleep(100 * time.Millisecond)
	close(agent.block)
	if r := <-done; r.err != nil || r.status != 200 {
		t.Fatalf("in-flight request: status %d, err %v; want 200", r.status, r.err)
	}
	if err := srv.Wait(); err != nil {
		t.Errorf("Wait = %v, want nil after a clean shutdown", err)
	}
}

func TestShutdownCutsHungRequestsAfterTimeout(t *testing.T) {
	agent := newFakeAgent(fixtureStatus())
	agent.block = make(chan struct{})
	agent.entered = make(chan struct{}, 1)
	defer close(agent.block) // lets the abandoned handler return when the test ends
	srv := NewServer(agent.status, agent.history, nil)
	ctx, cancel := context.WithCancel(context.Background())
	addr, err := srv.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if resp, err := nethttp.Get("http://" + addr + "/api/v1/history"); err == nil {
			resp.Body.Close()
		}
	}()
	<-agent.entered
	start := time.Now()
	cancel()
	err = srv.Wait()
	took := time.Since(start)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait = %v, want a shutdown deadline error", err)
	}
	if took < ShutdownTimeout-100*time.Millisecond || took > ShutdownTimeout+time.Second {
		t.Errorf("shutdown took %v, want about %v", took, ShutdownTimeout)
	}
}

func checkSecurityHeaders(t *testing.T, resp *nethttp.Response) {
	t.Helper()
	csp := resp.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("Content-Security-Policy = %q, want scripts from self only", csp)
	}
	if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("X-Content-Type-Options = %q, want nosniff", got)
	}
}
