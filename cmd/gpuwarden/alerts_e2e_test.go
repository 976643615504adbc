package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden/notify/notifytest"
)

// hookReceiver is a webhook endpoint on 127.0.0.1 that keeps every body
// and tells the test when one arrives.
type hookReceiver struct {
	mu     sync.Mutex
	bodies [][]byte
	more   chan struct{}
}

func newHookReceiver(t *testing.T) (*hookReceiver, *httptest.Server) {
	rec := &hookReceiver{more: make(chan struct{}, 16)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		rec.mu.Lock()
		rec.bodies = append(rec.bodies, b)
		rec.mu.Unlock()
		select {
		case rec.more <- struct{}{}:
		default:
		}
		w.WriteHeader(http.StatusAccepted) // what PagerDuty answers
		_, _ = io.WriteString(w, `{"status":"success"}`)
	}))
	t.Cleanup(srv.Close)
	return rec, srv
}

// waitFor returns the bodies once ok says they are enough, failing after timeout.
func (rec *hookReceiver) waitFor(t *testing.T, p *upProc, timeout time.Duration, ok func([][]byte) bool) [][]byte {
	t.Helper()
	deadline := time.After(timeout)
	for {
		rec.mu.Lock()
		got := slices.Clone(rec.bodies)
		rec.mu.Unlock()
		if ok(got) {
			return got
		}
		select {
		case <-rec.more:
		case <-deadline:
			t.Fatalf("receiver got %d bodies within %s, not what the test waits for:\n%s\nagent log:\n%s",
				len(got), timeout, joinBodies(got), p.text())
		}
	}
}

func joinBodies(bs [][]byte) string {
	var s []string
	for _, b := range bs {
		s = append(s, string(b))
	}
	return strings.Join(s, "\n")
}

// TestUpPagesAndResolvesAnIdleEpisode runs the real agent against a
// PagerDuty-format receiver on loopback: an idle box in a dry run
// triggers (warning, then the would-be stop), a job starting ends the
// episode, and the receiver gets a resolve for the same dedup keys.
func TestUpPagesAndResolvesAnIdleEpisode(t *testing.T) {
	dir := t.TempDir()
	rec, srv := newHookReceiver(t)
	const key = "R0UT1NGKEY0123456789abcdefABCDEF"
	p := startUp(t, dir, "--simulate", "1xH100,load=0", "--idle-window", "2s", "--dry-run", "--ignore-sessions",
		"--rate", "2.50", "--label", "owner=ana,provider=aws,region=eu-west-1", "--instance-id", "i-0abc123",
		"--webhook", srv.URL+"/v2/enqueue?routing_key="+key, "--webhook-format", "pagerduty")

	triggers := map[string]notifytest.PagerDutyEvent{}
	rec.waitFor(t, p, 20*time.Second, func(bs [][]byte) bool {
		for _, b := range bs {
			if e := notifytest.CheckPagerDuty(t, b); e.EventAction == "trigger" {
				triggers[e.Payload.CustomDetails["key"]] = e
			}
		}
		return len(triggers) >= 2
	})
	var stop notifytest.PagerDutyEvent
	for k, e := range triggers {
		if strings.HasPrefix(k, "idle-stop-") {
			stop = e
		}
	}
	if stop.Payload == nil {
		t.Fatalf("no idle-stop trigger among %v", triggers)
	}
	d := stop.Payload.CustomDetails
	for _, want := range []string{"dry run: would have", "i-0abc123", "ana", "aws/eu-west-1", "$2.50/h", "http://127.0.0.1:"} {
		if !strings.Contains(stop.Payload.Summary+" "+d["action"]+" "+d["box"]+" "+d["owner"]+" "+d["provider_region"]+
			" "+d["money"]+" "+d["dashboard"], want) {
			t.Errorf("the stop trigger does not say %q: %+v", want, stop.Payload)
		}
	}

	// A supervised job makes the box busy: the episode is over.
	job := startProc(t, dir, "run", "--data-dir", filepath.Join(dir, "data"), "--checkpoint-dir", filepath.Join(dir, "ckpt"),
		"--", "sleep", "30")
	got := rec.waitFor(t, p, 20*time.Second, func(bs [][]byte) bool {
		n := 0
		for _, b := range bs {
			if notifytest.CheckPagerDuty(t, b).EventAction == "resolve" {
				n++
			}
		}
		return n >= 2
	})
	resolved := map[string]bool{}
	for _, b := range got {
		if e := notifytest.CheckPagerDuty(t, b); e.EventAction == "resolve" {
			resolved[e.DedupKey] = true
		}
	}
	for k, e := range triggers {
		if e.DedupKey != k || !resolved[k] {
			t.Errorf("trigger %s (dedup_key %q) was not resolved; resolves: %v\njob log:\n%s", k, e.DedupKey, resolved, job.text())
		}
	}
}

// TestUpPostsAnAdaptiveCard runs the real agent against a Teams-format
// receiver: the warning arrives as a Workflows message with an Adaptive Card.
func TestUpPostsAnAdaptiveCard(t *testing.T) {
	dir := t.TempDir()
	rec, srv := newHookReceiver(t)
	p := startUp(t, dir, "--simulate", "1xH100,load=0", "--idle-window", "2s", "--dry-run", "--ignore-sessions",
		"--webhook", srv.URL+"/workflows/abc/triggers/manual/paths/invoke", "--webhook-format", "teams")
	got := rec.waitFor(t, p, 20*time.Second, func(bs [][]byte) bool { return len(bs) > 0 })
	// The receiver takes it: a Workflows message with one valid Adaptive Card.
	m := notifytest.CheckTeams(t, got[0])
	if body := m.Attachments[0].Content.Body; body[0].Type != "TextBlock" || !strings.Contains(body[0].Text, "DRY RUN") {
		t.Errorf("the card's first block does not mark the dry run: %s", got[0])
	}
	host, _ := os.Hostname()
	if !strings.Contains(string(got[0]), host) {
		t.Errorf("the card does not name the host %q: %s", host, got[0])
	}
}

// TestUpAlertLinksToItsFleetNode runs an agent that reports to a real fleet
// server: its alerts name the node ID the server registered and link to
// that node's page on the fleet dashboard.
func TestUpAlertLinksToItsFleetNode(t *testing.T) {
	dir := t.TempDir()
	srv := startServer(t, dir, "sqlite:"+filepath.Join(dir, "server.db"))
	admin := writeFile(t, filepath.Join(dir, "admin.token"), srv.admin)
	r := gwLive(t, dir, "token", "create", "--project", "ml", "--role", "agent", "--server", srv.url, "--token-file", admin)
	if r.code != 0 {
		t.Fatalf("token create: %d %s", r.code, r.stderr)
	}
	agentToken := writeFile(t, filepath.Join(dir, "agent.token"), strings.TrimSpace(r.stdout))
	rec, hook := newHookReceiver(t)
	p := startUp(t, dir, "--simulate", "1xH100,load=0", "--idle-window", "2s", "--dry-run", "--ignore-sessions", "--cloud", "none",
		"--server", srv.url, "--token-file", agentToken, "--heartbeat", "1s", "--webhook", hook.URL+"/hook", "--webhook-format", "json")
	got := rec.waitFor(t, p, 20*time.Second, func(bs [][]byte) bool { return len(bs) > 0 })
	var alert struct {
		Box struct {
			NodeID string `json:"node_id"`
		} `json:"box"`
		Link string `json:"link"`
	}
	if err := json.Unmarshal(got[0], &alert); err != nil {
		t.Fatal(err)
	}
	if alert.Box.NodeID == "" || alert.Link != srv.url+"/nodes/"+alert.Box.NodeID {
		t.Fatalf("alert names node %q and links to %q, want the node's page under %s", alert.Box.NodeID, alert.Link, srv.url)
	}
	// The server knows the node by that ID once the agent registered.
	deadline := time.Now().Add(20 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodGet, srv.url+"/api/v1/nodes/"+alert.Box.NodeID, nil)
		req.Header.Set("Authorization", "Bearer "+srv.admin)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server has no node %s (last: %v %v)\nagent log:\n%s", alert.Box.NodeID, resp, err, p.text())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
