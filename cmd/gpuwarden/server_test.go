package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
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

// fleetServer is a running `gpuwarden server`, its data dir and the admin
// token its first start wrote there.
type fleetServer struct {
	*upProc
	url, admin, dataDir string
}

// tokenPattern matches a token's secret wherever it is printed.
var tokenPattern = regexp.MustCompile(`gw_[0-9a-f]{16}_[0-9a-f]{64}`)

// startServer starts a server on a free loopback port with its data dir
// under dir, its stdout and stderr in one log, and waits until it serves.
func startServer(t *testing.T, dir, db string, flags ...string) *fleetServer {
	t.Helper()
	s := launchServer(t, dir, db, flags...)
	s.up(t)
	return s
}

// launchServer starts a server without waiting for it: replicas start at
// once.
func launchServer(t *testing.T, dir, db string, flags ...string) *fleetServer {
	t.Helper()
	data := filepath.Join(dir, "server-data")
	for i, f := range flags {
		if f == "--data-dir" && i+1 < len(flags) {
			data = flags[i+1]
		}
	}
	args := append([]string{"server", "--db", db, "--addr", "127.0.0.1:0", "--data-dir", data}, flags...)
	return &fleetServer{upProc: startMerged(t, dir, args...), dataDir: data}
}

// up waits for the server to serve and reads its admin token, if its data
// dir has one.
func (s *fleetServer) up(t *testing.T) {
	t.Helper()
	line := s.wait(t, `fleet server up`, 20*time.Second)
	m := regexp.MustCompile(`url=(http://\S+)/`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no url in %q", line)
	}
	s.url = m[1]
	if b, err := os.ReadFile(filepath.Join(s.dataDir, "admin.token")); err == nil {
		s.admin = strings.TrimSpace(string(b))
	}
}

// startMerged starts the binary with args, its stdout and stderr in one
// log, so that a test sees everything it printed; the test's end kills it.
func startMerged(t *testing.T, dir string, args ...string) *upProc {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	_ = w.Close()
	if err != nil {
		_ = r.Close()
		t.Fatal(err)
	}
	p := &upProc{cmd: cmd, more: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer r.Close()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.mu.Lock()
			p.log = append(p.log, sc.Text())
			p.mu.Unlock()
			select {
			case p.more <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() { p.kill(syscall.SIGKILL) })
	return p
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
		t.Fatalf("the first start wrote no admin token to %s:\n%s", srv.dataDir, srv.text())
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

	// A stopped agent says goodbye, and that it did not stop the box: the
	// box may well run on (issue #27), so the node is not "stopped".
	procs["node-b"].kill(syscall.SIGTERM)
	cl, err := gwhttp.NewClient(srv.url, strings.TrimSpace(readFile(t, viewer)), nil)
	if err != nil {
		t.Fatal(err)
	}
	var n gpuwarden.Node
	if err := cl.Do(context.Background(), "GET", "/api/v1/nodes/node-b", nil, nil, &n); err != nil {
		t.Fatal(err)
	}
	if n.Live.State != gpuwarden.NodeAgentStopped {
		t.Errorf("node-b after SIGTERM: state %q, want %s", n.Live.State, gpuwarden.NodeAgentStopped)
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

// fleetDBs are the databases the server's end-to-end tests run on; the
// PostgreSQL one skips where PostgreSQL is missing, unless
// GPUWARDEN_POSTGRES_TESTS=1 makes that a failure.
var fleetDBs = []struct {
	name string
	dsn  func(t *testing.T, dir string) string
}{
	{"sqlite", func(t *testing.T, dir string) string { return "sqlite:" + filepath.Join(dir, "server.db") }},
	{"postgres", func(t *testing.T, _ string) string { return ledgertest.StartPostgres(t) }},
}

// TestServerFirstStartKeepsTokenOutOfLogs starts a server on an empty
// database: the admin token goes to DATA_DIR/admin.token (0600) and works,
// and nothing the process prints, on either stream, holds it; a restart
// creates no second token and overwrites nothing.
func TestServerFirstStartKeepsTokenOutOfLogs(t *testing.T) {
	for _, db := range fleetDBs {
		t.Run(db.name, func(t *testing.T) {
			dir := t.TempDir()
			dsn := db.dsn(t, dir)
			srv := startServer(t, dir, dsn)
			path := filepath.Join(srv.dataDir, "admin.token")
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatalf("no admin token file: %v\n%s", err, srv.text())
			}
			if mode := fi.Mode().Perm(); mode != 0o600 {
				t.Errorf("%s has mode %o, want 600", path, mode)
			}
			if !tokenPattern.MatchString(srv.admin) {
				t.Fatalf("%s holds %q, want a token", path, srv.admin)
			}
			if out := srv.text(); strings.Contains(out, "gw_") || !strings.Contains(out, path) {
				t.Errorf("server output holds a token or does not name %s:\n%s", path, out)
			}
			who := getWithToken(t, srv.url+"/api/v1/whoami", srv.admin)
			if !strings.Contains(who, `"role":"admin"`) {
				t.Errorf("whoami with the file's token = %s, want a fleet admin", who)
			}
			srv.kill(syscall.SIGTERM)

			again := startServer(t, dir, dsn)
			if out := again.text(); strings.Contains(out, "gw_") || strings.Contains(out, "token created") {
				t.Errorf("second start printed a token or created one:\n%s", out)
			}
			if again.admin != srv.admin {
				t.Errorf("admin.token changed on the second start")
			}
			r := gwLive(t, dir, "token", "list", "--db", dsn, "-o", "json")
			var ts struct{ Tokens []gpuwarden.Token }
			if err := json.Unmarshal([]byte(r.stdout), &ts); err != nil || len(ts.Tokens) != 1 {
				t.Errorf("token list = %v %s, want one token", err, r.stdout)
			}
		})
	}
}

// TestServerBusyPortCreatesNothing starts a server on a port in use: it
// fails (exit 2) with a hint naming --addr before it creates the database
// or a token, so that the retry on a free port is the first start.
func TestServerBusyPortCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	data := filepath.Join(dir, "data")
	db := "sqlite:" + filepath.Join(data, "server.db")
	r := gwLive(t, dir, "server", "--addr", ln.Addr().String(), "--db", db, "--data-dir", data)
	if r.code != 2 || !strings.Contains(r.stderr, "hint:") || !strings.Contains(r.stderr, "--addr") {
		t.Errorf("server on a busy port: exit %d\n%s\nwant 2 with a hint naming --addr", r.code, r.stderr)
	}
	if strings.Contains(r.stdout+r.stderr, "gw_") {
		t.Errorf("server on a busy port printed a token:\n%s%s", r.stdout, r.stderr)
	}
	if entries, _ := os.ReadDir(data); len(entries) > 0 {
		t.Errorf("server on a busy port left %v in its data dir, want nothing", entries)
	}

	srv := startServer(t, dir, db, "--data-dir", data)
	if srv.admin == "" {
		t.Errorf("the retry on a free port wrote no admin token:\n%s", srv.text())
	}
}

// TestServerBootstrapRefusals checks the ways a first token is not made:
// an admin.token of another database in the data dir stops the server
// rather than be overwritten, and --no-bootstrap makes none and says how.
func TestServerBootstrapRefusals(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	old := writeFile(t, filepath.Join(data, "admin.token"), "gw_of_another_database\n")
	db := "sqlite:" + filepath.Join(dir, "server.db")
	r := gwLive(t, dir, "server", "--addr", "127.0.0.1:0", "--db", db, "--data-dir", data)
	if r.code != 2 || !strings.Contains(r.stderr, "admin.token exists") || !strings.Contains(r.stderr, "--bootstrap") {
		t.Errorf("server with a stale admin.token: exit %d\n%s\nwant 2, naming the file and token create --bootstrap", r.code, r.stderr)
	}
	if got := readFile(t, old); got != "gw_of_another_database\n" {
		t.Errorf("admin.token was overwritten: %q", got)
	}
	if r := gwLive(t, dir, "token", "list", "--db", db); strings.Count(r.stdout, "\n") > 1 {
		t.Errorf("tokens after the refusal:\n%s", r.stdout)
	}

	srv := startServer(t, dir, db, "--data-dir", filepath.Join(dir, "other"), "--no-bootstrap")
	srv.wait(t, `no token.*token create --bootstrap`, 5*time.Second)
	if _, err := os.Stat(filepath.Join(dir, "other", "admin.token")); err == nil {
		t.Errorf("--no-bootstrap wrote an admin token")
	}
}

// TestTokenCreateBootstrap creates the first admin token straight in the
// database, as Kubernetes does: printed once to stdout and nowhere else,
// refused (exit 2) once the database holds a token, and accepted by a
// server that does not bootstrap.
func TestTokenCreateBootstrap(t *testing.T) {
	for _, db := range fleetDBs {
		t.Run(db.name, func(t *testing.T) {
			dir := t.TempDir()
			dsn := db.dsn(t, dir)
			srv := startServer(t, dir, dsn, "--no-bootstrap")
			r := gwLive(t, dir, "token", "create", "--bootstrap", "--db", dsn)
			secret := strings.TrimSpace(r.stdout)
			if r.code != 0 || !tokenPattern.MatchString(secret) || strings.Contains(r.stderr, "gw_") {
				t.Fatalf("token create --bootstrap: exit %d, stdout %q, stderr %q; want 0 and the token on stdout only", r.code, r.stdout, r.stderr)
			}
			if who := getWithToken(t, srv.url+"/api/v1/whoami", secret); !strings.Contains(who, `"project":"*"`) {
				t.Errorf("whoami = %s, want a fleet admin", who)
			}
			tests := []struct {
				name string
				args []string
				want string // in stderr
			}{
				{"a second bootstrap", []string{"--bootstrap", "--db", dsn}, "--bootstrap creates only the first"},
				{"a project token", []string{"--bootstrap", "--db", dsn, "--project", "ml"}, "fleet admin"},
				{"through a server", []string{"--bootstrap", "--server", srv.url}, "--db"},
			}
			for _, tt := range tests {
				r := gwLive(t, dir, append([]string{"token", "create"}, tt.args...)...)
				if r.code != 2 || !strings.Contains(r.stderr, tt.want) || r.stdout != "" {
					t.Errorf("%s: exit %d, stdout %q, stderr %q; want 2 and %q", tt.name, r.code, r.stdout, r.stderr, tt.want)
				}
			}
			if out := srv.text(); strings.Contains(out, "gw_") {
				t.Errorf("server output holds a token:\n%s", out)
			}
		})
	}
}

// TestServerShowsTokenOnATerminal starts the first server under a pseudo
// terminal (util-linux script): a person at it sees the token once, beside
// the file's name. Skipped where script is missing.
func TestServerShowsTokenOnATerminal(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	p := startOnTerminal(t, dir, "server", "--addr", "127.0.0.1:0", "--db", "sqlite:"+filepath.Join(dir, "server.db"), "--data-dir", data)
	p.waitFor(t, "fleet server up", 20*time.Second)
	token := strings.TrimSpace(readFile(t, filepath.Join(data, "admin.token")))
	if got := p.out.String(); strings.Count(got, token) != 1 || !strings.Contains(got, filepath.Join(data, "admin.token")) {
		t.Errorf("terminal shows the token %d times, want once beside the file's name:\n%s", strings.Count(got, token), got)
	}
}

// TestAgentsOnOneHostAreDistinctNodes runs three agents on this host: two
// simulated ones without --node-id, which their data dirs make two nodes,
// and a third given the first one's ID, which the server refuses (409)
// while the first is live, saying so in both logs and leaving the first's
// labels alone.
func TestAgentsOnOneHostAreDistinctNodes(t *testing.T) {
	dir := t.TempDir()
	srv := startServer(t, dir, "sqlite:"+filepath.Join(dir, "server.db"))
	admin := writeFile(t, filepath.Join(dir, "admin.token"), srv.admin)
	r := gwLive(t, dir, "token", "create", "--project", "ml", "--role", "agent", "--server", srv.url, "--token-file", admin)
	agentToken := writeFile(t, filepath.Join(dir, "agent.token"), strings.TrimSpace(r.stdout))
	up := func(name, owner string, more ...string) *upProc {
		return startProc(t, dir, append([]string{"up", "--simulate", "1xH100", "--data-dir", filepath.Join(dir, name),
			"--listen", "", "--cloud", "none", "--dry-run", "--server", srv.url, "--token-file", agentToken,
			"--label", "owner=" + owner, "--heartbeat", "1s"}, more...)...)
	}
	nodes := func() []gpuwarden.Node {
		var ns []gpuwarden.Node
		if err := json.Unmarshal([]byte(getWithToken(t, srv.url+"/api/v1/nodes", srv.admin)), &ns); err != nil {
			t.Fatal(err)
		}
		return ns
	}
	first := up("a", "ana")
	first.wait(t, "registered with the fleet server", 20*time.Second)
	up("b", "bo").wait(t, "registered with the fleet server", 20*time.Second)
	ns := nodes()
	if len(ns) != 2 || ns[0].ID == ns[1].ID {
		t.Fatalf("two simulated agents on one host = nodes %+v, want two", ns)
	}
	id := ns[0].ID
	owner := ns[0].Labels.Owner

	third := up("c", "cy", "--node-id", id)
	line := third.wait(t, "report to the fleet server", 20*time.Second)
	for _, want := range []string{"level=ERROR", "another box", "--node-id"} {
		if !strings.Contains(line, want) {
			t.Errorf("the refused agent logs %q, want %q in it", line, want)
		}
	}
	srv.wait(t, `node registration refused.*node=`+regexp.QuoteMeta(id), 5*time.Second)
	ns = nodes()
	if len(ns) != 2 || ns[0].ID != id || ns[0].Labels.Owner != owner {
		t.Errorf("after the refused registration nodes = %+v, want the two, %s still owned by %s", ns, id, owner)
	}
	if strings.Contains(first.text(), "ERROR") {
		t.Errorf("the first agent logged an error:\n%s", first.text())
	}
}
