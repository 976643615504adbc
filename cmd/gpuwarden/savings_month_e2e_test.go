package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	gwhttp "github.com/gpuwarden/gpuwarden/http"
	"github.com/gpuwarden/gpuwarden/internal/peertest"
	"github.com/gpuwarden/gpuwarden/internal/syncbuf"
	"github.com/gpuwarden/gpuwarden/preempt/preempttest"
	"github.com/gpuwarden/gpuwarden/report"
	"github.com/gpuwarden/gpuwarden/savings"
	"github.com/gpuwarden/gpuwarden/simclock"
	"github.com/gpuwarden/gpuwarden/stopper/stoppertest"
)

func nov(day, hour, minute int) time.Time {
	return time.Date(2026, 11, day, hour, minute, 0, 0, time.UTC)
}

// monthSim drives `gpuwarden up --simulate` agents and `gpuwarden run`
// through a month on one stepped clock (package simclock): it writes each
// time to the clock file and waits until every live agent has ticked at it
// (its acknowledgement), so that idle windows, budgets and preemptions
// land on exact minutes. Between the steps it does what happens at that
// time: boxes start and stop, jobs checkpoint, the provider preempts.
type monthSim struct {
	t          *testing.T
	dir, clock string
	server     string
	tokens     map[string]string // token file by project
	idle       *httptest.Server
	mu         sync.Mutex
	now        time.Time
	busyUntil  map[string]time.Time
	agents     map[string]*upProc
}

func newMonthSim(t *testing.T, dir, server string, tokens map[string]string, start time.Time) *monthSim {
	m := &monthSim{t: t, dir: dir, clock: filepath.Join(dir, "clock"), server: server, tokens: tokens, now: start,
		busyUntil: map[string]time.Time{}, agents: map[string]*upProc{}}
	if err := simclock.Set(m.clock, start); err != nil {
		t.Fatal(err)
	}
	// The box's own idle check (--idle-url): busy until the scenario's
	// time for it, as a notebook server or a job queue would answer.
	m.idle = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		idle := !m.now.Before(m.busyUntil[strings.TrimPrefix(r.URL.Path, "/")])
		m.mu.Unlock()
		fmt.Fprintf(w, `{"idle": %t}`, idle)
	}))
	t.Cleanup(m.idle.Close)
	return m
}

// step moves the clock to at and waits for every live agent's tick there.
func (m *monthSim) step(at time.Time) {
	m.t.Helper()
	m.mu.Lock()
	m.now = at
	m.mu.Unlock()
	if err := simclock.Set(m.clock, at); err != nil {
		m.t.Fatal(err)
	}
	for node := range m.agents {
		m.acked(node, at)
	}
}

// stepEvery steps from the clock's time to until, every d.
func (m *monthSim) stepEvery(until time.Time, d time.Duration) {
	m.t.Helper()
	for at := m.now.Add(d); !at.After(until); at = at.Add(d) {
		m.step(at)
	}
}

func (m *monthSim) acked(node string, at time.Time) {
	m.t.Helper()
	p := m.agents[node]
	deadline := time.Now().Add(30 * time.Second)
	for !simclock.Acked(m.clock, node, at) {
		if p.exited() || time.Now().After(deadline) {
			m.t.Fatalf("%s did not tick at %s:\n%s", node, at.Format(time.RFC3339), p.text())
		}
		time.Sleep(time.Millisecond)
	}
}

// boot starts the agent of node at the clock's time, busy until busyUntil,
// and waits for its first tick.
func (m *monthSim) boot(node, project, labels string, busyUntil time.Time, env []string, args ...string) *upProc {
	m.t.Helper()
	m.mu.Lock()
	m.busyUntil[node] = busyUntil
	at := m.now
	m.mu.Unlock()
	argv := append([]string{"--clock-file", m.clock, "up", "--simulate", "1xH100,load=0", "--interval", "5m",
		"--idle-window", "30m", "--warn-before", "10m", "--listen", "", "--node-id", node, "--hostname", node, "--data-dir", filepath.Join(m.dir, node),
		"--server", m.server, "--token-file", m.tokens[project], "--heartbeat", "1s", "--idle-url", m.idle.URL + "/" + node,
		"--label", labels}, args...)
	cmd := gwCmd(m.dir, argv...)
	cmd.Env = append(os.Environ(), env...)
	p := startCmd(m.t, cmd)
	m.agents[node] = p
	m.acked(node, at)
	return p
}

// halt ends node's agent as the box goes away (SIGTERM: it ships what it
// has left and says goodbye).
func (m *monthSim) halt(node string) {
	m.t.Helper()
	p := m.agents[node]
	delete(m.agents, node)
	p.kill(syscall.SIGTERM)
	if !strings.Contains(p.text(), "agent stopped") {
		m.t.Fatalf("%s did not stop cleanly:\n%s", node, p.text())
	}
}

// idleStop runs one idle episode of node to its stop: steps every 5
// minutes to stopAt, checks the provider's answer in the log, and halts
// the box.
func (m *monthSim) idleStop(node string, stopAt time.Time, want string) {
	m.t.Helper()
	m.stepEvery(stopAt, 5*time.Minute)
	p := m.agents[node]
	p.wait(m.t, want, 10*time.Second)
	p.wait(m.t, `saving recorded.*kind=idle-stop`, 10*time.Second)
	m.halt(node)
}

// monthJob is the training job of the spot box, driven by the test: a
// file "checkpoint" in $CTL asks for a checkpoint named by its content,
// a file "done" ends the job. It saves nothing on the checkpoint signal,
// so a preemption loses the work since its last checkpoint.
const monthJob = `#!/bin/sh
trap 'exit 143' TERM
while :; do
  if [ -e "$CTL/checkpoint" ]; then
    d="$GPUWARDEN_CHECKPOINT_DIR/$(cat "$CTL/checkpoint")"
    rm -f "$CTL/checkpoint"
    mkdir -p "$d" && date > "$d/state" && : > "$d/.complete"
  fi
  [ -e "$CTL/done" ] && exit 0
  sleep 0.01
done
`

// TestSavingsMonth is issue #29's first two "done when": a simulated
// month of `gpuwarden up --simulate` agents and `gpuwarden run`, stepped
// by a test clock, against a real `gpuwarden server` on SQLite and on
// PostgreSQL, gives a savings report equal, to the cent, to the
// hand-computed table of testdata/savings-month.md. The idle stops end on
// the Azure fakes (deallocated, or an OS shutdown that keeps billing, which
// is listed as not saved), the budget stop on moto (the real AWS API
// server) found through amazon-ec2-metadata-mock, the spot job is
// preempted twice through the AWS metadata fake, and the orphan is ended
// by hand through the real binary.
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
				tokens[p] = writeFile(t, filepath.Join(dir, p+".token"), strings.TrimSpace(r.stdout))
			}
			runSavingsMonth(t, newMonthSim(t, dir, srv.url, tokens, nov(3, 16, 0)))

			// The orphan: registered without an owner, then marked gone by
			// hand on the 27th, while the orphan review flags it.
			ctx := context.Background()
			secret, err := os.ReadFile(tokens["ml"])
			if err != nil {
				t.Fatal(err)
			}
			cl, err := gwhttp.NewClient(srv.url, strings.TrimSpace(string(secret)), nil)
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
			if len(recs) != len(rep.Events)+1 || sum != rep.Total.Total {
				t.Errorf("the CSV has %d rows adding to %s; want a header and %d events adding to the total %s",
					len(recs), sum.Decimal(), len(rep.Events), rep.Total.Total.Decimal())
			}
			// The table says why the unconfirmed stop saved nothing.
			r = gwLive(t, dir, append([]string{"report", "savings", "--month", "2026-11"}, remote...)...)
			if !strings.Contains(r.stdout, "not saved: idle stop gpu-b: provider kept billing: powered-off-still-billing") ||
				!strings.Contains(r.stdout, gpuwarden.Currency("USD").Format(rep.Total.Total)+" saved") {
				t.Errorf("the table:\n%s", r.stdout)
			}
		})
	}
}

// runSavingsMonth is November 2026 of testdata/savings-month.md, from the
// first box's start on the 3rd to the spot job's end on the 24th.
func runSavingsMonth(t *testing.T, m *monthSim) {
	never := nov(30, 0, 0).AddDate(1, 0, 0)
	azure := func() (*stoppertest.Azure, []string) {
		az := stoppertest.NewAzure()
		t.Cleanup(az.Close)
		// The month is not about ARM's polling: the deallocate settles at
		// the first poll, without the 10 s Retry-After.
		az.RetryAfter(0)
		az.SettleAfter(0)
		return az, []string{"--cloud", "azure", "--azure-metadata", az.IMDS.URL, "--azure-management", az.ARM.URL}
	}
	aLabels := "owner=ana,provider=azure,region=westeurope,price=3.40,currency=USD"

	// gpu-a: a notebook box on Azure, deallocated by two idle stops.
	_, az := azure()
	m.boot("gpu-a", "ml", aLabels, nov(3, 17, 30), nil, az...)
	m.idleStop("gpu-a", nov(3, 18, 0), `stopped \(idle, azure-deallocate\): the provider says .*PowerState/deallocated`)
	m.step(nov(4, 8, 30))
	_, az = azure()
	m.boot("gpu-a", "ml", aLabels, nov(13, 19, 30), nil, az...)
	m.step(nov(4, 8, 35))

	// gpu-b: stopped by an OS shutdown, which leaves an Azure VM billing.
	m.step(nov(10, 18, 0))
	bin := filepath.Join(m.dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	writeExec(t, filepath.Join(bin, "shutdown"), "#!/bin/sh\nexit 0\n")
	_, bz := azure()
	bEnv := []string{"PATH=" + bin + ":" + os.Getenv("PATH")}
	bLabels := "owner=bo,provider=azure,region=westeurope,price=3.40,currency=USD"
	m.boot("gpu-b", "ml", bLabels, nov(10, 18, 30), bEnv, append(bz, "--stop-command", "shutdown -h now")...)
	m.idleStop("gpu-b", nov(10, 19, 0), `powered off \(idle, os-shutdown\) but STILL BILLING`)
	m.step(nov(12, 9, 0))
	m.boot("gpu-b", "ml", bLabels, never, bEnv, append(bz, "--stop-command", "shutdown -h now")...)
	m.step(nov(12, 9, 5))
	m.halt("gpu-b")

	// gpu-a's second idle episode, then its start on Monday the 16th.
	m.step(nov(13, 19, 0))
	m.idleStop("gpu-a", nov(13, 20, 0), `stopped \(idle, azure-deallocate\)`)
	m.step(nov(16, 8, 0))
	_, az = azure()
	m.boot("gpu-a", "ml", aLabels, never, nil, az...)
	m.step(nov(16, 8, 5))
	m.halt("gpu-a")

	// gpu-s: a spot box (its interruption behaviour is stop, so it comes
	// back with its disk) running one job under `gpuwarden run`.
	aws := preempttest.NewAWS()
	t.Cleanup(aws.Close)
	ctl := filepath.Join(m.dir, "ctl")
	if err := os.MkdirAll(ctl, 0o755); err != nil {
		t.Fatal(err)
	}
	job := filepath.Join(m.dir, "train.sh")
	writeExec(t, job, monthJob)
	sLabels := "owner=cy,provider=aws,region=us-east-1,price=9.83,currency=USD,spot=true,on_demand_price=32.77"
	boot := func() *upProc {
		aws.Clear()
		return m.boot("gpu-s", "nlp", sLabels, never, nil, "--cloud", "aws", "--aws-metadata", aws.URL, "--no-idle-stop")
	}
	startJob := func() (func(time.Duration) result, *syncbuf.Buffer) {
		wait, stderr, _ := startRunWatched(t, m.dir, []string{"CTL=" + ctl}, "--clock-file", m.clock, "run",
			"--data-dir", filepath.Join(m.dir, "gpu-s"), "--checkpoint-dir", filepath.Join(m.dir, "gpu-s-ckpt"), "--grace", "2s",
			"-o", "json", "--", job)
		waitFor(t, stderr, "job started", 20*time.Second)
		return wait, stderr
	}
	checkpoint := func(stderr *syncbuf.Buffer, name string) {
		if err := os.WriteFile(filepath.Join(ctl, "checkpoint"), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		waitFor(t, stderr, name+" step=", 20*time.Second)
	}
	preempt := func(p *upProc, wait func(time.Duration) result) {
		aws.Interrupt("terminate", m.now)
		if r := wait(30 * time.Second); r.code != 75 {
			t.Fatalf("the preempted run exited %d, want 75:\n%s", r.code, r.stderr)
		}
		p.wait(t, `saving recorded.*kind=spot`, 10*time.Second)
		m.halt("gpu-s")
	}
	// Two boots end in a preemption, each after a checkpoint: the work
	// since it is lost.
	for _, b := range []struct {
		boot, checkpoint, preempted time.Time
		name                        string
	}{
		{nov(18, 0, 0), nov(18, 5, 30), nov(18, 6, 0), "ckpt-1"},
		{nov(18, 6, 5), nov(18, 12, 15), nov(18, 13, 0), "ckpt-2"},
	} {
		m.step(b.boot)
		p := boot()
		wait, stderr := startJob()
		m.step(b.checkpoint)
		checkpoint(stderr, b.name)
		m.step(b.preempted)
		preempt(p, wait)
	}

	m.step(nov(18, 13, 5))
	p := boot()
	wait, _ := startJob()
	m.step(nov(18, 20, 0))
	if err := os.WriteFile(filepath.Join(ctl, "done"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := wait(30 * time.Second); r.code != 0 {
		t.Fatalf("the last run exited %d, want 0:\n%s", r.code, r.stderr)
	}
	p.wait(t, `saving recorded.*kind=spot`, 10*time.Second)
	m.halt("gpu-s")

	// gpu-c: a big AWS box on a budget with --budget-stop, stopped through
	// the EC2 API (moto, IAM enforced) when the month's spend reaches it.
	moto := peertest.StartMoto(t, "INITIAL_NO_AUTH_ACTION_COUNT=4")
	key, secret := moto.User(t, "gw-stopper", "ec2:StopInstances", "ec2:DescribeInstances")
	id := moto.RunInstance(t)
	aemm := peertest.StartAEMM(t, "-c", writeFile(t, filepath.Join(m.dir, "aemm.json"), `{"metadata": {"values": {"instance-id": "`+id+`"}}}`))
	plan := writeFile(t, filepath.Join(m.dir, "gpu-c.yaml"), "workload: {kind: notebook}\nwork_hours: 100\n"+
		"budget: {monthly_limit: 204, currency: USD}\nbox: {provider: aws, hourly_rate: 32.77}\n"+
		"data: {storage_gb: 2000, storage_kind: block}\n")
	m.step(nov(24, 8, 0))
	m.boot("gpu-c", "nlp", "owner=cy,provider=aws,region=us-east-1,price=32.77,currency=USD", never,
		[]string{"AWS_ACCESS_KEY_ID=" + key, "AWS_SECRET_ACCESS_KEY=" + secret, "AWS_REGION=us-east-1"},
		plan, "--budget-stop", "--cloud", "aws", "--stop", "api", "--aws-metadata", aemm.URL, "--aws-endpoint", moto.URL)
	m.stepEvery(nov(24, 14, 15), 5*time.Minute)
	c := m.agents["gpu-c"]
	c.wait(t, `stopped \(budget, aws-stop\): the provider says .*state read back stopped`, 30*time.Second)
	c.wait(t, `saving recorded.*kind=budget-stop`, 10*time.Second)
	m.halt("gpu-c")
	if got := moto.State(t, key, secret, id); got != "stopped" {
		t.Errorf("moto reads gpu-c %q after the budget stop, want stopped", got)
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
		{"deallocated", "vm-saved", nil, "", gpuwarden.SavingConfirmed, "state read back PowerState/deallocated"},
		{"os shutdown", "vm-billing", []string{"--stop-command", "shutdown -h now"}, "provider kept billing: powered-off-still-billing",
			gpuwarden.SavingConfirmed, "powered-off-still-billing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			az := stoppertest.NewAzure()
			defer az.Close()
			// About the saving's way to the server, not ARM's polling
			// (TestIdleStopDeallocatesOnAzure waits out the 10 s Retry-After).
			az.RetryAfter(0)
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
