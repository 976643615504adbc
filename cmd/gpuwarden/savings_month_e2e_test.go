package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/agent"
	gwhttp "github.com/gpuwarden/gpuwarden/http"
	"github.com/gpuwarden/gpuwarden/report"
	"github.com/gpuwarden/gpuwarden/savings"
	"github.com/gpuwarden/gpuwarden/sqlite"
	"github.com/gpuwarden/gpuwarden/stopper/stoppertest"
)

func nov(day, hour, minute int) time.Time {
	return time.Date(2026, 11, day, hour, minute, 0, 0, time.UTC)
}

// monthBox is one box of the simulated month: its node as it registers,
// what its agent's ledger records (the events billstop.go and `run`
// write, and the agent's starts) and the box as the agent prices it.
type monthBox struct {
	node   gpuwarden.Node
	events []gpuwarden.Event
	starts []time.Time
	box    savings.Box
}

// stopEvents are what the agent records for one stop: the alert that
// called for it, then box-stopped with the provider's answer and the
// rates in force (agent/billstop.go).
func stopEvents(why, key string, out gpuwarden.StopOutcome, rate, stillBills string) []gpuwarden.Event {
	alert := map[string]string{savings.WhyIdle: "idle-stop", savings.WhyBudget: "budget-stop"}[why]
	data := map[string]string{"method": out.Method, "billing": out.Billing, savings.DataWhy: why,
		savings.DataAt: out.At.Format(time.RFC3339Nano), savings.DataRate: rate, savings.DataStillBills: stillBills, savings.DataCurrency: "USD"}
	if out.HTTPStatus != 0 {
		data["http_status"] = strconv.Itoa(out.HTTPStatus)
	}
	if out.State != "" {
		data["state"] = out.State
	}
	return []gpuwarden.Event{
		{Time: out.At.Add(-2 * time.Second), Kind: alert, Severity: gpuwarden.SeverityCritical, Key: key, Message: "stopping"},
		{Time: out.At, Kind: "box-stopped", Severity: gpuwarden.SeverityInfo, Key: "box-stopped-" + out.At.Format(time.RFC3339Nano),
			Message: "stopped", Data: data},
	}
}

// simulatedMonth is November 2026 of testdata/savings-month.md.
func simulatedMonth() []monthBox {
	labels := func(owner, provider, price string, spot bool, extra map[string]string) gpuwarden.NodeLabels {
		m, _ := gpuwarden.ParseMicros(price)
		return gpuwarden.NodeLabels{Owner: owner, Provider: provider, HourlyPrice: m, Currency: "USD", Spot: spot, Extra: extra}
	}
	_, osWhy := gpuwarden.StopsComputeBilling("azure", gpuwarden.StopOSShutdown)
	deallocated := func(at time.Time) gpuwarden.StopOutcome {
		return gpuwarden.StopOutcome{Method: gpuwarden.StopAzureDeallocate, HTTPStatus: 202, State: "PowerState/deallocated",
			Billing: gpuwarden.NodeStopped, At: at}
	}
	run, _ := json.Marshal(gpuwarden.RunReport{Command: []string{"python", "train.py"}, Start: nov(18, 0, 0), End: nov(18, 20, 0),
		Result: gpuwarden.ResultOK, LostSeconds: 4500, Attempts: []gpuwarden.Attempt{
			{Number: 1, Start: nov(18, 0, 0), End: nov(18, 6, 0), Class: gpuwarden.ExitPreempted, LostSeconds: 1800},
			{Number: 2, Start: nov(18, 6, 5), End: nov(18, 13, 0), Class: gpuwarden.ExitPreempted, LostSeconds: 2700},
			{Number: 3, Start: nov(18, 13, 5), End: nov(18, 20, 0), Class: gpuwarden.ExitOK}}})
	boxes := []monthBox{
		{node: gpuwarden.Node{ID: "gpu-a", Project: "ml", Labels: labels("ana", "azure", "3.40", false, nil)},
			events: append(stopEvents(savings.WhyIdle, "idle-stop-2026-11-03T17:30:00Z", deallocated(nov(3, 18, 0)), "3.4", "0.12"),
				stopEvents(savings.WhyIdle, "idle-stop-2026-11-13T19:30:00Z", deallocated(nov(13, 20, 0)), "3.4", "0.12")...),
			starts: []time.Time{nov(1, 0, 0), nov(4, 8, 30), nov(16, 8, 0)}},
		{node: gpuwarden.Node{ID: "gpu-b", Project: "ml", Labels: labels("bo", "azure", "3.40", false, nil)},
			events: stopEvents(savings.WhyIdle, "idle-stop-2026-11-10T18:30:00Z", gpuwarden.StopOutcome{Method: gpuwarden.StopOSShutdown,
				Billing: gpuwarden.NodePoweredOffStillBilling, At: nov(10, 19, 0)}, "3.4", "0"),
			starts: []time.Time{nov(1, 0, 0), nov(12, 9, 0)}, box: savings.Box{Why: osWhy}},
		{node: gpuwarden.Node{ID: "gpu-c", Project: "nlp", Labels: labels("cy", "aws", "32.77", false, nil)},
			events: stopEvents(savings.WhyBudget, "budget-stop-2026-11", gpuwarden.StopOutcome{Method: gpuwarden.StopAWS, HTTPStatus: 200,
				State: "stopped", Billing: gpuwarden.NodeStopped, At: nov(24, 14, 15)}, "32.77", "0.27"),
			starts: []time.Time{nov(1, 0, 0)}},
		{node: gpuwarden.Node{ID: "gpu-s", Project: "nlp", Labels: labels("cy", "aws", "9.83", true, map[string]string{agent.LabelOnDemandPrice: "32.77"})},
			events: []gpuwarden.Event{{Time: nov(18, 20, 0), Kind: "run-report", Severity: gpuwarden.SeverityInfo, Message: "job ended ok",
				Data: map[string]string{"report": string(run)}}}},
	}
	for i := range boxes {
		b := &boxes[i]
		b.node.Hostname = b.node.ID
		c, err := agent.SavingsFromNode(b.node)
		if err != nil {
			panic(err)
		}
		b.box = savings.Box{Node: b.node.ID, Provider: c.Provider, Rate: c.Rate, RateSource: c.RateSource, Currency: c.Currency,
			Spot: c.Spot, OnDemandRate: c.OnDemandRate, OnDemandSource: c.OnDemandSource, Why: b.box.Why}
	}
	return boxes
}

// TestSavingsMonth is issue #29's first two "done when": a month of five
// boxes against a real `gpuwarden server` on SQLite and on PostgreSQL
// gives a savings report equal, to the cent, to the hand-computed table
// of testdata/savings-month.md, the stop that left the bill running
// listed as not saved. A month cannot pass through `up` in a test, whose
// clock is the machine's, so each agent's ledger is written as the agent
// writes it (the stop events of billstop.go, the run report of `run`),
// priced by savings.FromAgent as the agent prices it, and shipped by the
// agent's own Shipper over HTTP; the orphan is ended through the real
// binary (`gpuwarden --now 2026-11-27 node gone`), and the report is the
// real binary's `report savings` against the server.
func TestSavingsMonth(t *testing.T) {
	for _, db := range fleetDBs {
		t.Run(db.name, func(t *testing.T) {
			dir := t.TempDir()
			dsn := db.dsn(t, dir)
			srv := startServer(t, dir, dsn)
			admin := writeFile(t, filepath.Join(dir, "admin.token"), srv.admin)
			remote := []string{"--server", srv.url, "--token-file", admin}
			tokens := map[string]string{}
			for _, p := range []string{"ml", "nlp"} {
				r := gwLive(t, dir, append([]string{"token", "create", "--project", p, "--role", "agent"}, remote...)...)
				if r.code != 0 {
					t.Fatalf("token create: %d %s", r.code, r.stderr)
				}
				tokens[p] = strings.TrimSpace(r.stdout)
			}
			ctx := context.Background()
			for _, b := range simulatedMonth() {
				shipMonthBox(t, ctx, srv.url, tokens[b.node.Project], filepath.Join(dir, b.node.ID), b)
			}
			// The orphan: registered without an owner, then marked gone by
			// hand on the 27th, while the orphan review flags it.
			cl, err := gwhttp.NewClient(srv.url, tokens["ml"], nil)
			if err != nil {
				t.Fatal(err)
			}
			d := gpuwarden.Node{ID: "gpu-d", Project: "ml", Hostname: "gpu-d",
				Labels: gpuwarden.NodeLabels{Provider: "lambda", HourlyPrice: 2_100_000, Currency: "USD"}}
			if _, err := cl.Register(ctx, d); err != nil {
				t.Fatal(err)
			}
			if r := gwLive(t, dir, "--now", "2026-11-27", "node", "gone", "gpu-d", "--db", dsn, "--reason", "nobody claimed it"); r.code != 0 {
				t.Fatalf("node gone: %d %s", r.code, r.stderr)
			}

			r := gwLive(t, dir, append([]string{"report", "savings", "--month", "2026-11", "-o", "json", "--by", "kind"}, remote...)...)
			if r.code != 0 {
				t.Fatalf("report savings: %d %s", r.code, r.stderr)
			}
			var rep report.SavingsReport
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
				t.Fatalf("report savings -o json: %v\n%s", err, r.stdout)
			}
			want, err := os.ReadFile(filepath.Join("testdata", "savings-month.golden"))
			if err != nil {
				t.Fatal(err)
			}
			if got := monthTable(rep); got != string(want) {
				t.Errorf("the month's savings differ from the hand-computed table (testdata/savings-month.md):\n got:\n%s\nwant:\n%s", got, want)
			}
			for _, e := range rep.Events {
				if e.NotSaved == "" && e.Amount != gpuwarden.MulCents(e.Rate, gpuwarden.MicrosFromFloat(e.Hours)) && e.Kind != gpuwarden.SavingSpot {
					t.Errorf("%s %s: amount %s is not hours × rate", e.Kind, e.Node, e.Amount.Decimal())
				}
				if e.Evidence == "" {
					t.Errorf("%s %s has no evidence", e.Kind, e.Node)
				}
			}

			// The CSV: one row per event, and its amounts add up to the total.
			r = gwLive(t, dir, append([]string{"report", "savings", "--month", "2026-11", "-o", "csv"}, remote...)...)
			recs, err := csv.NewReader(strings.NewReader(r.stdout)).ReadAll()
			if err != nil || r.code != 0 {
				t.Fatalf("report savings -o csv: %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
			}
			var sum gpuwarden.Cents
			for _, rec := range recs[1:] {
				var c gpuwarden.Cents
				if err := c.UnmarshalJSON([]byte(rec[10])); err != nil {
					t.Fatalf("amount %q: %v", rec[10], err)
				}
				sum += c
			}
			if len(recs) != 7 || sum != rep.Total.Total || sum != 588935 {
				t.Errorf("the CSV has %d rows adding to %s; want a header and 6 events adding to 5889.35 (the total says %s)",
					len(recs), sum.Decimal(), rep.Total.Total.Decimal())
			}
			// The table says why the unconfirmed stop saved nothing.
			r = gwLive(t, dir, append([]string{"report", "savings", "--month", "2026-11"}, remote...)...)
			if !strings.Contains(r.stdout, "not saved: idle stop gpu-b: provider kept billing: powered-off-still-billing") ||
				!strings.Contains(r.stdout, "$5,889.35 saved") {
				t.Errorf("the table:\n%s", r.stdout)
			}
			// Shipping again changes nothing: the server stores by ID.
			for _, b := range simulatedMonth()[:1] {
				shipMonthBox(t, ctx, srv.url, tokens[b.node.Project], filepath.Join(dir, b.node.ID+"-again"), b)
			}
			r = gwLive(t, dir, append([]string{"report", "savings", "--month", "2026-11", "-o", "json"}, remote...)...)
			var again report.SavingsReport
			if err := json.Unmarshal([]byte(r.stdout), &again); err != nil || again.Total != rep.Total {
				t.Errorf("after a replay: %+v (%v), want %+v", again.Total, err, rep.Total)
			}
		})
	}
}

// shipMonthBox registers a box, writes its agent's ledger as the agent
// would, prices it as the agent does and ships the savings with the
// agent's Shipper.
func shipMonthBox(t *testing.T, ctx context.Context, server, token, dataDir string, b monthBox) {
	t.Helper()
	cl, err := gwhttp.NewClient(server, token, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Register(ctx, b.node); err != nil {
		t.Fatalf("register %s: %v", b.node.ID, err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := sqlite.Open(ctx, filepath.Join(dataDir, "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, e := range b.events {
		if _, err := l.RecordEvent(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	var recorded []gpuwarden.Event
	for _, k := range []string{"idle-stop", "budget-stop", "box-stopped", "run-report"} {
		evs, err := l.EventsOfKind(ctx, k, 100)
		if err != nil {
			t.Fatal(err)
		}
		recorded = append(recorded, evs...)
	}
	events := savings.FromAgent(b.box, recorded, b.starts, nil, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	if err := l.RecordSavings(ctx, events); err != nil {
		t.Fatal(err)
	}
	s := &agent.Shipper{Uplink: cl, Ledger: l, Node: b.node, Log: slog.New(slog.DiscardHandler)}
	if err := s.ShipSavings(ctx); err != nil {
		t.Fatalf("ship %s: %v", b.node.ID, err)
	}
}

// monthTable is the report as the golden file writes it: one line per
// event, then the total.
func monthTable(r report.SavingsReport) string {
	var b strings.Builder
	b.WriteString("kind | node | project | owner | hours | rate | amount | basis | not saved\n")
	for _, e := range r.Events {
		notSaved, _, _ := strings.Cut(e.NotSaved, " (")
		line := fmt.Sprintf("%s | %s | %s | %s | %s | %s | %s | %s | %s", e.Kind, e.Node, e.Project, e.Owner,
			strconv.FormatFloat(e.Hours, 'f', -1, 64), e.Rate, e.Amount.Decimal(), e.Basis, notSaved)
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	t := r.Total
	fmt.Fprintf(&b, "total %s: confirmed %s, estimated %s, attributed %s, total %s; %d events, %d not saved\n", t.Currency,
		t.Confirmed.Decimal(), t.Estimated.Decimal(), t.Attributed.Decimal(), t.Total.Decimal(), t.Events, t.NotSaved)
	return b.String()
}

// TestIdleStopSavingReachesTheServer drives the agent's own flow through
// the real binary, in real time: `up --simulate` on Azure (the fake IMDS
// and ARM of stoppertest) stops the idle box, the provider confirms the
// deallocation, the agent records the saving and ships it, and the server
// lists it, confirmed, with the provider's answer as evidence, under the
// node's project and owner. The same box stopped by an OS shutdown, which
// leaves an Azure VM billing, ships a saving of 0 that says why.
func TestIdleStopSavingReachesTheServer(t *testing.T) {
	dir := t.TempDir()
	fleet := newStopFleet(t, dir)
	tests := []struct {
		name, node string
		stop       []string
		notSaved   string
		basis      gpuwarden.SavingBasis
		inEvidence string
	}{
		{"deallocated", "vm-saved", nil, "", gpuwarden.SavingConfirmed, "state PowerState/deallocated"},
		{"os shutdown", "vm-billing", []string{"--stop-command", "shutdown -h now"}, "provider kept billing: powered-off-still-billing",
			gpuwarden.SavingConfirmed, "powered-off-still-billing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			az := stoppertest.NewAzure()
			defer az.Close()
			bin := filepath.Join(dir, tt.node+"-bin")
			if err := os.Mkdir(bin, 0o755); err != nil {
				t.Fatal(err)
			}
			writeExec(t, filepath.Join(bin, "shutdown"), "#!/bin/sh\nexit 0\n")
			args := append([]string{"up", "--data-dir", filepath.Join(dir, tt.node), "--listen", "", "--simulate", "1xH100,load=0",
				"--cloud", "azure", "--azure-metadata", az.IMDS.URL, "--azure-management", az.ARM.URL, "--idle-window", "3s",
				"--ignore-sessions", "--node-id", tt.node, "--server", fleet.srv.url, "--token-file", fleet.agentToken, "--heartbeat", "1s",
				"--label", "owner=ana,provider=azure,region=westeurope,price=3.40,currency=USD"}, tt.stop...)
			cmd := gwCmd(dir, args...)
			cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
			p := startCmd(t, cmd)
			p.wait(t, `saving recorded.*kind=idle-stop`, 40*time.Second)
			var e gpuwarden.Saving
			deadline := time.Now().Add(30 * time.Second)
			for {
				r := gwLive(t, dir, "report", "savings", "-o", "json", "--server", fleet.srv.url, "--token-file", fleet.viewer)
				var rep report.SavingsReport
				if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
					t.Fatalf("report savings: %v\n%s%s", err, r.stdout, r.stderr)
				}
				found := false
				for _, x := range rep.Events {
					if x.Node == tt.node {
						e, found = x, true
					}
				}
				if found {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the server lists no saving of %s:\n%s\n%s", tt.node, r.stdout, p.text())
				}
				time.Sleep(500 * time.Millisecond)
			}
			if e.Kind != gpuwarden.SavingIdleStop || e.Project != "ml" || e.Owner != "ana" || e.Basis != tt.basis ||
				!strings.Contains(e.NotSaved, tt.notSaved) || (tt.notSaved == "") != (e.NotSaved == "") ||
				!strings.Contains(e.Evidence, tt.inEvidence) || e.Rate != 3_400_000 {
				t.Errorf("the server's event: %+v", e)
			}
			if tt.notSaved == "" {
				_, monthEnd := savings.Month(e.From)
				if !e.To.Equal(monthEnd) || e.Amount != gpuwarden.MulCents(e.Rate, gpuwarden.MicrosFromFloat(e.Hours)) || e.Amount <= 0 {
					t.Errorf("a confirmed stop not started again saves to the month's end at its rate: %+v", e)
				}
			} else if e.Amount != 0 {
				t.Errorf("a stop that left the bill running saved %s", e.Amount.Decimal())
			}
		})
	}
}
