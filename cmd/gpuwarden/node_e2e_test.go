package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	gwhttp "github.com/gpuwarden/gpuwarden/http"
	"github.com/gpuwarden/gpuwarden/report"
	"github.com/gpuwarden/gpuwarden/sqlite"
)

// seedFleetNode registers node id in project ml of the fleet database at
// path, as an agent's registration would.
func seedFleetNode(t *testing.T, path, id string) {
	t.Helper()
	store, err := sqlite.OpenFleet(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	n := gpuwarden.Node{ID: id, Project: "ml", Hostname: id + ".example", TokenID: "seed", Registered: time.Now().UTC(),
		Labels: gpuwarden.NodeLabels{Owner: "ana", Provider: "azure", HourlyPrice: 3_500_000, Currency: "EUR"}}
	if _, err := store.RegisterNode(context.Background(), n); err != nil {
		t.Fatal(err)
	}
}

// postAs sends v as JSON with a bearer token and wants the status want.
func postAs(t *testing.T, url, token string, v any, want int) {
	t.Helper()
	body, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("POST %s: %d %s, want %d", url, resp.StatusCode, b, want)
	}
}

// TestStopThatStillBillsEndToEnd runs issue #27 on the real binary: an
// Azure box whose last heartbeat says it powered off but still bills keeps
// adding to the spend, one the provider deallocated does not; the orphan
// review lists the first with its fix until `node gone` says it is gone.
func TestStopThatStillBillsEndToEnd(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "server.db")
	srv := startServer(t, dir, "sqlite:"+dbPath) // killed when the test ends
	if srv.admin == "" {
		t.Fatalf("no admin token in %s:\n%s", srv.dataDir, srv.text())
	}
	admin := writeFile(t, filepath.Join(dir, "admin.token"), srv.admin)
	remote := []string{"--server", srv.url, "--token-file", admin}
	token := func(role string) string {
		t.Helper()
		r := gwLive(t, dir, append([]string{"token", "create", "--project", "ml", "--role", role}, remote...)...)
		if r.code != 0 {
			t.Fatalf("token create %s: %d %s", role, r.code, r.stderr)
		}
		return strings.TrimSpace(r.stdout)
	}
	agent, viewer := token("agent"), token("viewer")
	viewerFile := writeFile(t, filepath.Join(dir, "viewer.token"), viewer)
	if r := gwLive(t, dir, append([]string{"project", "set", "ml", "--budget", "5000", "--currency", "EUR"}, remote...)...); r.code != 0 {
		t.Fatalf("project set: %d %s", r.code, r.stderr)
	}

	// Two Azure boxes at €3.50/h: one powered off from inside (allocated,
	// billed in full), one the provider deallocated.
	now := time.Now().UTC()
	for id, owner := range map[string]string{"az-off": "ana", "az-dealloc": "bo"} {
		postAs(t, srv.url+"/api/v1/register", agent, gpuwarden.Node{ID: id, Hostname: id + ".example",
			Labels: gpuwarden.NodeLabels{Owner: owner, Provider: "azure", Region: "westeurope", HourlyPrice: 3_500_000, Currency: "EUR"}}, 200)
	}
	fix := "deallocate it (az vm deallocate …) and run `gpuwarden up --stop auto`"
	postAs(t, srv.url+"/api/v1/heartbeat", agent, gpuwarden.Heartbeat{Node: "az-off", Time: now, State: gpuwarden.NodePoweredOffStillBilling,
		Stop: &gpuwarden.StopReport{Method: gpuwarden.StopOSShutdown, Why: "the VM is still allocated and billed in full",
			Outcome:          &gpuwarden.StopOutcome{Method: gpuwarden.StopOSShutdown, Billing: gpuwarden.NodePoweredOffStillBilling, At: now},
			StillBillsHourly: 3_500_000, Currency: "EUR", Fix: fix}}, 204)
	postAs(t, srv.url+"/api/v1/heartbeat", agent, gpuwarden.Heartbeat{Node: "az-dealloc", Time: now, State: gpuwarden.NodeStopped,
		Stop: &gpuwarden.StopReport{Method: gpuwarden.StopAzureDeallocate, StopsBilling: true,
			Outcome: &gpuwarden.StopOutcome{Method: gpuwarden.StopAzureDeallocate, HTTPStatus: 202, OperationID: "op-1",
				State: "PowerState/deallocated", Billing: gpuwarden.NodeStopped, At: now}}}, 204)

	// The spend of next month's 2nd and 3rd, by owner, read from the
	// server's database on a fixed clock (--now): ana's box bills a day
	// more on the 3rd, bo's nothing.
	next := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	spend := func(day time.Time) map[string]report.SpendRow {
		t.Helper()
		r := gwLive(t, dir, "report", "spend", "--by", "owner", "-o", "json", "--db", "sqlite:"+dbPath, "--now", day.Format("2006-01-02"))
		var sr report.SpendReport
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &sr) != nil {
			t.Fatalf("report spend --now %s: %d %s %s", day.Format("2006-01-02"), r.code, r.stdout, r.stderr)
		}
		rows := map[string]report.SpendRow{}
		for _, row := range sr.Rows {
			rows[row.Key] = row
		}
		return rows
	}
	d1, d2 := spend(next.AddDate(0, 0, 1)), spend(next.AddDate(0, 0, 2))
	if got := d2["ana"].Spent - d1["ana"].Spent; got != 8400 || d2["ana"].AfterStop != 16800 || d2["ana"].StillBilling != 1 {
		t.Errorf("ana's box grew by %s in a day, want 84.00 (24 h at €3.50): %+v then %+v", got.Decimal(), d1["ana"], d2["ana"])
	}
	if d1["bo"].Spent != 0 || d2["bo"].Spent != 0 {
		t.Errorf("the deallocated box billed: %+v then %+v", d1["bo"], d2["bo"])
	}

	orphans := func() (report.OrphanReport, string) {
		t.Helper()
		r := gwLive(t, dir, "report", "orphans", "-o", "json", "--server", srv.url, "--token-file", viewerFile)
		var or report.OrphanReport
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &or) != nil {
			t.Fatalf("report orphans: %d %s %s", r.code, r.stdout, r.stderr)
		}
		return or, gwLive(t, dir, "report", "orphans", "--server", srv.url, "--token-file", viewerFile).stdout
	}
	or, table := orphans()
	if len(or.Orphans) != 1 || or.Orphans[0].Node != "az-off" || or.Orphans[0].Reasons[0].Reason != report.ReasonPoweredOff ||
		or.Orphans[0].Reasons[0].Fix != fix || !strings.Contains(or.Orphans[0].Reasons[0].Evidence, "powered off on azure") {
		t.Errorf("orphans = %+v, want az-off alone, powered off with its fix", or.Orphans)
	}
	if !strings.Contains(table, "az-off") || !strings.Contains(table, "fix: deallocate it (az vm deallocate …)") {
		t.Errorf("the orphan table lacks az-off and its fix:\n%s", table)
	}

	// Only an admin marks a box gone.
	r := gwLive(t, dir, "node", "gone", "az-off", "--server", srv.url, "--token-file", viewerFile)
	if r.code != 2 || !strings.Contains(r.stderr, "only an admin") {
		t.Errorf("node gone with a viewer token: %d %s", r.code, r.stderr)
	}
	r = gwLive(t, dir, append([]string{"node", "gone", "az-off", "-o", "json", "--reason", "deallocated in the portal"}, remote...)...)
	var g gwhttp.GoneNode
	if r.code != 0 || !strings.HasPrefix(r.stdout, "{\n  \"schema\": \"gpuwarden.node-gone/v1\"") || json.Unmarshal([]byte(r.stdout), &g) != nil {
		t.Fatalf("node gone: %d %s %s", r.code, r.stdout, r.stderr)
	}
	// It billed €3.50/h from its last heartbeat until now: well under a cent.
	if g.Was != gpuwarden.NodePoweredOffStillBilling || g.Node.Live.State != gpuwarden.NodeGone ||
		g.AfterStop == nil || g.AfterStop.Hourly != 3_500_000 || g.Billed > 1 {
		t.Errorf("node gone answered %+v", g)
	}
	if or, table = orphans(); len(or.Orphans) != 0 || strings.Contains(table, "az-off") {
		t.Errorf("after node gone the orphans are %+v:\n%s", or.Orphans, table)
	}
	// Gone before next month: nothing of it bills then.
	d1, d2 = spend(next.AddDate(0, 0, 1)), spend(next.AddDate(0, 0, 2))
	if d1["ana"].Spent != 0 || d2["ana"].Spent != 0 {
		t.Errorf("a gone box still accrues: %+v then %+v", d1["ana"], d2["ana"])
	}
	if r := gwLive(t, dir, append([]string{"node", "gone", "nope"}, remote...)...); r.code != 2 || !strings.Contains(r.stderr, "no node nope") {
		t.Errorf("node gone of an unknown node: %d %s", r.code, r.stderr)
	}
}
