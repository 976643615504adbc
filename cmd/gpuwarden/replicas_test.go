package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/ledgertest"
	"github.com/gpuwarden/gpuwarden/report"
)

// replicaRevocationBound is how long a replica may keep accepting a token
// another replica revoked: http's token cache TTL (5 s, documented in the
// server's --help), plus the time the test's own requests take.
const replicaRevocationBound = 5*time.Second + 1500*time.Millisecond

// TestTwoReplicasOnOnePostgres runs the fleet as Kubernetes does: two
// `gpuwarden server` processes started at once on one fresh PostgreSQL
// database. They migrate it once and create exactly one admin token
// between them, printed by neither; three simulated agents on this one
// host, split between the replicas, are three nodes; both replicas report
// the same spend; and a token revoked through one is refused by the other
// within the token cache TTL.
func TestTwoReplicasOnOnePostgres(t *testing.T) {
	dsn := ledgertest.StartPostgres(t)
	dir := t.TempDir()
	replicas := []*fleetServer{
		launchServer(t, dir, dsn, "--data-dir", filepath.Join(dir, "replica-a")),
		launchServer(t, dir, dsn, "--data-dir", filepath.Join(dir, "replica-b")),
	}
	var admin string
	files := 0
	for _, s := range replicas {
		s.up(t)
		if s.admin != "" {
			admin = s.admin
			files++
		}
	}
	if files != 1 {
		t.Fatalf("%d replicas wrote an admin.token, want exactly 1", files)
	}
	r := gwLive(t, dir, "token", "list", "--db", dsn, "-o", "json")
	var toks struct{ Tokens []gpuwarden.Token }
	if err := json.Unmarshal([]byte(r.stdout), &toks); err != nil || len(toks.Tokens) != 1 {
		t.Fatalf("tokens in the database after two first starts: %v %s, want exactly 1", err, r.stdout)
	}
	checkMigratedOnce(t, dsn)

	a, b := replicas[0], replicas[1]
	adminFile := writeFile(t, filepath.Join(dir, "admin.token"), admin)
	viaA := []string{"--server", a.url, "--token-file", adminFile}
	r = gwLive(t, dir, append([]string{"token", "create", "--project", "ml", "--role", "agent"}, viaA...)...)
	agentToken := writeFile(t, filepath.Join(dir, "agent.token"), strings.TrimSpace(r.stdout))
	r = gwLive(t, dir, append([]string{"token", "create", "--project", "ml", "--role", "viewer", "-o", "json"}, viaA...)...)
	var viewer struct {
		ID     string `json:"id"`
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &viewer); err != nil || viewer.Secret == "" {
		t.Fatalf("viewer token: %v %s %s", err, r.stdout, r.stderr)
	}
	viewerFile := writeFile(t, filepath.Join(dir, "viewer.token"), viewer.Secret)

	// Three simulated agents on this host, without --node-id: their data
	// dirs tell them apart. Two report to replica a, one to b.
	servers := []*fleetServer{a, a, b}
	var agents []*upProc
	for i, s := range servers {
		data := filepath.Join(dir, fmt.Sprintf("agent-%d", i))
		seedLedger(t, data, 80)
		agents = append(agents, startProc(t, dir, "up", "--simulate", "1xH100,load=80", "--data-dir", data, "--listen", "",
			"--cloud", "none", "--dry-run", "--server", s.url, "--token-file", agentToken,
			"--label", fmt.Sprintf("owner=o%d,price=3.50,currency=EUR", i), "--heartbeat", "1s"))
	}
	spend := func(s *fleetServer) report.SpendReport {
		t.Helper()
		r := gwLive(t, dir, "report", "spend", "-o", "json", "--server", s.url, "--token-file", viewerFile)
		var rep report.SpendReport
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil {
			t.Fatalf("report spend from %s: %d %s %s", s.url, r.code, r.stdout, r.stderr)
		}
		return rep
	}
	// Every agent registers and ships its 20 minutes: 3 × 20 × €3.50/60.
	deadline := time.Now().Add(30 * time.Second)
	for {
		rep := spend(b)
		if len(rep.Rows) == 1 && rep.Rows[0].Nodes == 3 && rep.Rows[0].Spent >= 350 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spend never showed three nodes and €3.50: %+v\nagents:\n%s\n%s\n%s", rep.Rows,
				agents[0].text(), agents[1].text(), agents[2].text())
		}
		time.Sleep(300 * time.Millisecond)
	}
	// Stopped agents ship nothing more, so both replicas read one state.
	for _, p := range agents {
		p.kill(syscall.SIGTERM)
	}
	got := []report.SpendReport{spend(a), spend(b)}
	for i := range got {
		got[i].Now, got[i].HoursLeft = time.Time{}, 0 // the moment each answered
	}
	if !reflect.DeepEqual(got[0], got[1]) {
		t.Errorf("report spend differs between the replicas:\na: %+v\nb: %+v", got[0], got[1])
	}
	if row := got[0].Rows; len(row) != 1 || row[0].Nodes != 3 {
		t.Errorf("spend rows = %+v, want ml with 3 nodes", row)
	}
	var ids [2][]string
	for i, s := range replicas {
		var nodes []gpuwarden.Node
		if err := json.Unmarshal([]byte(getWithToken(t, s.url+"/api/v1/nodes", viewer.Secret)), &nodes); err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			ids[i] = append(ids[i], n.ID)
		}
	}
	if len(ids[0]) != 3 || !slices.Equal(ids[0], ids[1]) || !strings.HasPrefix(ids[0][0], "sim-") {
		t.Errorf("nodes on a %v, on b %v; want the same three simulated node IDs", ids[0], ids[1])
	}

	// b has the viewer token cached from the reports above; a revokes it.
	getWithToken(t, b.url+"/api/v1/whoami", viewer.Secret)
	revoked := time.Now()
	if r := gwLive(t, dir, append([]string{"token", "revoke", viewer.ID}, viaA...)...); r.code != 0 {
		t.Fatalf("token revoke: %d %s", r.code, r.stderr)
	}
	if code := statusWithToken(t, a.url+"/api/v1/whoami", viewer.Secret); code != http.StatusUnauthorized {
		t.Errorf("the revoking replica answers %d to the revoked token, want 401 at once", code)
	}
	for statusWithToken(t, b.url+"/api/v1/whoami", viewer.Secret) != http.StatusUnauthorized {
		if time.Since(revoked) > replicaRevocationBound {
			t.Fatalf("replica b still accepts the token revoked through a after %s", time.Since(revoked).Round(time.Millisecond))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("replica b refused the revoked token %s after the revocation", time.Since(revoked).Round(time.Millisecond))

	for i, s := range replicas {
		if out := s.text(); strings.Contains(out, "gw_") {
			t.Errorf("replica %d printed a token:\n%s", i, out)
		}
	}
}

// checkMigratedOnce checks that two servers migrating one database at
// once recorded every migration exactly once.
func checkMigratedOnce(t *testing.T, dsn string) {
	t.Helper()
	files, err := os.ReadDir(filepath.Join("..", "..", "postgres", "migrations"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	var rows, versions int
	if err := conn.QueryRow(ctx, "SELECT COUNT(*), COUNT(DISTINCT version) FROM schema_migrations").Scan(&rows, &versions); err != nil {
		t.Fatal(err)
	}
	if rows != len(files) || versions != len(files) {
		t.Errorf("schema_migrations has %d rows of %d versions, want each of the %d migrations once", rows, versions, len(files))
	}
}

// statusWithToken is the status of a GET with a bearer token.
func statusWithToken(t *testing.T, url, token string) int {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
