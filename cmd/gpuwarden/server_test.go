package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	gwhttp "github.com/gpuwarden/gpuwarden/http"
	"github.com/gpuwarden/gpuwarden/ledgertest"
	"github.com/gpuwarden/gpuwarden/report"
	"github.com/gpuwarden/gpuwarden/sqlite"
)

// fleetServer is a running `gpuwarden server` with the admin token it
// printed on its first start.
type fleetServer struct {
	*upProc
	url, admin string
}

func startServer(t *testing.T, dir, db string, flags ...string) *fleetServer {
	t.Helper()
	p := startProc(t, dir, append([]string{"server", "--db", db, "--addr", "127.0.0.1:0"}, flags...)...)
	line := p.wait(t, `fleet server up`, 20*time.Second)
	m := regexp.MustCompile(`url=(http://\S+)/`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no url in %q", line)
	}
	s := &fleetServer{upProc: p, url: m[1]}
	if tok := regexp.MustCompile(`gw_[0-9a-f]{16}_[0-9a-f]{64}`).FindString(p.text()); tok != "" {
		s.admin = tok
	}
	return s
}

// gwLive runs the binary on the real clock: fleet reports are about now.
func gwLive(t *testing.T, dir string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{out.String(), errb.String(), code}
}

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// seedLedger puts the last 20 minutes of samples in an agent's ledger, as
// a box that ran before it could reach the server would have.
func seedLedger(t *testing.T, dataDir string, util float64) {
	t.Helper()
	l, err := sqlite.Open(context.Background(), filepath.Join(dataDir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	end := time.Now().UTC().Truncate(time.Minute)
	for ts := end.Add(-20 * time.Minute); ts.Before(end); ts = ts.Add(10 * time.Second) {
		s := gpuwarden.NodeSample{Time: ts, Host: gpuwarden.HostSample{Time: ts, CPUPercent: 30},
			GPUs: []gpuwarden.Telemetry{{Index: 0, Time: ts, UtilPercent: util, MemUsedBytes: 40 << 30, MemTotalBytes: 80 << 30}}}
		if err := l.RecordSample(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFleetThreeAgentsEndToEnd(t *testing.T) {
	dir := t.TempDir()
	srv := startServer(t, dir, "sqlite:"+filepath.Join(dir, "server.db"))
	if srv.admin == "" {
		t.Fatalf("the first start printed no admin token:\n%s", srv.text())
	}
	admin := writeFile(t, filepath.Join(dir, "admin.token"), srv.admin)
	remote := []string{"--server", srv.url, "--token-file", admin}

	r := gwLive(t, dir, append([]string{"token", "create", "--project", "ml", "--role", "agent"}, remote...)...)
	if r.code != 0 {
		t.Fatalf("token create: %d %s", r.code, r.stderr)
	}
	agentToken := writeFile(t, filepath.Join(dir, "agent.token"), strings.TrimSpace(r.stdout))
	r = gwLive(t, dir, append([]string{"token", "create", "--project", "ml", "--role", "viewer"}, remote...)...)
	viewer := writeFile(t, filepath.Join(dir, "viewer.token"), strings.TrimSpace(r.stdout))
	if r = gwLive(t, dir, append([]string{"project", "set", "ml", "--budget", "5000", "--currency", "EUR"}, remote...)...); r.code != 0 {
		t.Fatalf("project set: %d %s", r.code, r.stderr)
	}

	agents := map[string]string{"node-a": "owner=ana,provider=aws", "node-b": "owner=bo,provider=gcp", "node-c": "provider=aws"}
	procs := map[string]*upProc{}
	for id, labels := range agents {
		data := filepath.Join(dir, id)
		seedLedger(t, data, 80)
		procs[id] = startProc(t, dir, "up", "--simulate", "1xH100,load=80", "--data-dir", data, "--listen", "",
			"--cloud", "none", "--dry-run", "--server", srv.url, "--token-file", agentToken, "--node-id", id,
			"--label", labels+",price=3.50,currency=EUR,region=eu-west-1", "--heartbeat", "1s")
	}

	// Every agent registers and ships its 20 minutes: 3 × 20 × €3.50/60 = €3.50.
	var spend report.SpendReport
	deadline := time.Now().Add(30 * time.Second)
	for {
		r = gwLive(t, dir, "report", "spend", "-o", "json", "--server", srv.url, "--token-file", viewer)
		if r.code != 0 {
			t.Fatalf("report spend: %d %s", r.code, r.stderr)
		}
		if err := json.Unmarshal([]byte(r.stdout), &spend); err != nil {
			t.Fatal(err)
		}
		if len(spend.Rows) == 1 && spend.Rows[0].Nodes == 3 && spend.Rows[0].Spent >= 350 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spend never showed three nodes and €3.50:\n%s\nserver:\n%s", r.stdout, srv.text())
		}
		time.Sleep(300 * time.Millisecond)
	}
	row := spend.Rows[0]
	if row.Key != "ml" || row.Currency != "EUR" || row.Budget == nil || row.Budget.Limit != 500000 {
		t.Errorf("spend row = %+v, want ml in EUR against a €5,000 budget", row)
	}
	if table := gwLive(t, dir, "report", "spend", "--server", srv.url, "--token-file", viewer); !strings.Contains(table.stdout, "ml") {
		t.Errorf("spend table:\n%s", table.stdout)
	}

	r = gwLive(t, dir, "report", "orphans", "-o", "json", "--server", srv.url, "--token-file", viewer)
	var orphans report.OrphanReport
	if err := json.Unmarshal([]byte(r.stdout), &orphans); err != nil {
		t.Fatalf("orphans: %v\n%s", err, r.stdout)
	}
	if len(orphans.Orphans) != 1 || orphans.Orphans[0].Node != "node-c" || orphans.Orphans[0].Reasons[0].Reason != "no-owner" {
		t.Errorf("orphans = %+v, want node-c for no-owner only", orphans.Orphans)
	}
	if md := gwLive(t, dir, "report", "orphans", "-o", "md", "--server", srv.url, "--token-file", viewer); !strings.Contains(md.stdout, "node-c") {
		t.Errorf("orphan markdown lacks node-c:\n%s", md.stdout)
	}

	// The dashboard shows all three.
	page := getWithToken(t, srv.url+"/", strings.TrimSpace(readFile(t, viewer)))
	for id := range agents {
		if !strings.Contains(page, id) {
			t.Errorf("dashboard lacks %s", id)
		}
	}

	// A stopped agent says goodbye: its node is stopped, not lost.
	procs["node-b"].kill(syscall.SIGTERM)
	cl, err := gwhttp.NewClient(srv.url, strings.TrimSpace(readFile(t, viewer)), nil)
	if err != nil {
		t.Fatal(err)
	}
	var n gpuwarden.Node
	if err := cl.Do(context.Background(), "GET", "/api/v1/nodes/node-b", nil, nil, &n); err != nil {
		t.Fatal(err)
	}
	if n.Live.State != gpuwarden.NodeStopped {
		t.Errorf("node-b after SIGTERM: state %q, want stopped", n.Live.State)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func getWithToken(t *testing.T, url, token string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

// TestServerKill9KeepsAckedWrites kills the server while four agents ship
// batches: every batch it acknowledged is there after a restart, which a
// replay proves by coming back as all duplicates.
func TestServerKill9KeepsAckedWrites(t *testing.T) {
	dbs := map[string]func(t *testing.T, dir string) string{
		"sqlite":   func(t *testing.T, dir string) string { return "sqlite:" + filepath.Join(dir, "server.db") },
		"postgres": func(t *testing.T, _ string) string { return ledgertest.StartPostgres(t) },
	}
	for name, dsn := range dbs {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			db := dsn(t, dir)
			// No rate limit: the agents and the replay send as fast as the
			// server answers, and what is tested is what survives the kill.
			srv := startServer(t, dir, db, "--rate-limit", "0")
			admin := writeFile(t, filepath.Join(dir, "admin.token"), srv.admin)
			r := gwLive(t, dir, "token", "create", "--project", "ml", "--role", "agent", "--server", srv.url, "--token-file", admin)
			token := strings.TrimSpace(r.stdout)

			type acked struct {
				node  string
				batch gpuwarden.FleetBatch
			}
			var (
				mu   sync.Mutex
				done []acked
				wg   sync.WaitGroup
			)
			ctx, cancel := context.WithCancel(context.Background())
			start := time.Now().UTC().Truncate(time.Minute).Add(-30 * 24 * time.Hour)
			for i := range 4 {
				id := fmt.Sprintf("n%d", i)
				cl, err := gwhttp.NewClient(srv.url, token, &http.Client{Timeout: 5 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := cl.Register(ctx, gpuwarden.Node{ID: id, Labels: gpuwarden.NodeLabels{Owner: "o", HourlyPrice: 1_000_000}}); err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := 0; ctx.Err() == nil; k++ {
						b := gpuwarden.FleetBatch{Events: []gpuwarden.Event{{Seq: int64(k + 1), Time: start, Kind: "k", Message: "m"}}}
						for j := range 20 {
							b.Minutes = append(b.Minutes, gpuwarden.NodeMinute{Minute: start.Add(time.Duration(k*20+j) * time.Minute),
								Samples: 60, GPUUtil: []float64{50}})
						}
						if _, err := cl.Ship(ctx, id, b); err != nil {
							return // the server is gone
						}
						mu.Lock()
						done = append(done, acked{id, b})
						mu.Unlock()
					}
				}()
			}
			time.Sleep(1500 * time.Millisecond)
			srv.kill(syscall.SIGKILL)
			cancel()
			wg.Wait()
			if len(done) < 10 {
				t.Fatalf("only %d batches acknowledged before the kill", len(done))
			}

			srv2 := startServer(t, dir, db, "--rate-limit", "0")
			cl, err := gwhttp.NewClient(srv2.url, token, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range done {
				res, err := cl.Ship(context.Background(), a.node, a.batch)
				if err != nil {
					t.Fatal(err)
				}
				if want := len(a.batch.Minutes) + len(a.batch.Events); res.Duplicates != want {
					t.Fatalf("acknowledged batch of %s (event %d) lost after kill -9: replay stored %+v, want %d duplicates",
						a.node, a.batch.Events[0].Seq, res, want)
				}
			}
			t.Logf("%d acknowledged batches all survived kill -9", len(done))
		})
	}
}
