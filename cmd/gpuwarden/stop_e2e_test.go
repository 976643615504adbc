package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/agent"
	gwhttp "github.com/gpuwarden/gpuwarden/http"
	"github.com/gpuwarden/gpuwarden/internal/peertest"
	"github.com/gpuwarden/gpuwarden/report"
	"github.com/gpuwarden/gpuwarden/stopper/stoppertest"
)

// stopFleet is a fleet server with an agent and a viewer token of project
// ml, for the stop tests.
type stopFleet struct {
	srv                  *fleetServer
	agentToken, viewer   string
	viewerSecret, remote string
}

func newStopFleet(t *testing.T, dir string) *stopFleet {
	t.Helper()
	srv := startServer(t, dir, "sqlite:"+filepath.Join(dir, "server.db"))
	admin := writeFile(t, filepath.Join(dir, "admin.token"), srv.admin)
	remote := []string{"--server", srv.url, "--token-file", admin}
	r := gwLive(t, dir, append([]string{"token", "create", "--project", "ml", "--role", "agent"}, remote...)...)
	if r.code != 0 {
		t.Fatalf("token create: %d %s", r.code, r.stderr)
	}
	f := &stopFleet{srv: srv, agentToken: writeFile(t, filepath.Join(dir, "agent.token"), strings.TrimSpace(r.stdout))}
	r = gwLive(t, dir, append([]string{"token", "create", "--project", "ml", "--role", "viewer"}, remote...)...)
	f.viewerSecret = strings.TrimSpace(r.stdout)
	f.viewer = writeFile(t, filepath.Join(dir, "viewer.token"), f.viewerSecret)
	return f
}

// node reads a node as the server knows it.
func (f *stopFleet) node(t *testing.T, id string) gpuwarden.Node {
	t.Helper()
	cl, err := gwhttp.NewClient(f.srv.url, f.viewerSecret, nil)
	if err != nil {
		t.Fatal(err)
	}
	var n gpuwarden.Node
	if err := cl.Do(context.Background(), "GET", "/api/v1/nodes/"+id, nil, nil, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitState waits until the server shows the node in state.
func (f *stopFleet) waitState(t *testing.T, id, state string) gpuwarden.Node {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := f.node(t, id)
		if n.Live.State == state {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s is %q, want %q:\n%s", id, n.Live.State, state, f.srv.text())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestIdleStopDeallocatesOnAzure is issue #27's first "done when": an idle
// simulated box on Azure (the fake IMDS and ARM of stoppertest, written
// from Microsoft's REST docs) is deallocated with the managed identity's
// token, the agent reads PowerState/deallocated back, and the fleet server
// shows the node stopped with the provider's answer.
func TestIdleStopDeallocatesOnAzure(t *testing.T) {
	dir := t.TempDir()
	az := stoppertest.NewAzure()
	defer az.Close()
	fleet := newStopFleet(t, dir)
	p := startUp(t, dir, "--simulate", "1xH100,load=0", "--cloud", "azure", "--azure-metadata", az.IMDS.URL,
		"--azure-management", az.ARM.URL, "--idle-window", "3s", "--ignore-sessions", "--node-id", "vm-azure",
		"--server", fleet.srv.url, "--token-file", fleet.agentToken, "--heartbeat", "1s",
		"--label", "owner=ana,provider=azure,region=westeurope,price=3.40,currency=USD")
	p.wait(t, `idle stop proven.*azure-deallocate`, 15*time.Second)
	p.wait(t, ` stopped \(idle, azure-deallocate\): the provider says HTTP 202.*PowerState/deallocated`, 40*time.Second)
	if az.Deallocations() != 1 || az.PowerState() != "PowerState/deallocated" {
		t.Errorf("the fake ARM saw %d deallocations, power state %q; want 1 and deallocated", az.Deallocations(), az.PowerState())
	}
	n := fleet.waitState(t, "vm-azure", gpuwarden.NodeStopped)
	if n.Live.Stop == nil || n.Live.Stop.Outcome == nil || n.Live.Stop.Outcome.HTTPStatus != 202 ||
		n.Live.Stop.Outcome.State != "PowerState/deallocated" || n.Live.Stop.Proof == nil || !n.Live.Stop.Proof.Proven {
		t.Errorf("the server's node does not carry the proof and the provider's answer: %+v", n.Live.Stop)
	}
	r := gwLive(t, dir, "report", "orphans", "-o", "json", "--server", fleet.srv.url, "--token-file", fleet.viewer)
	var orphans report.OrphanReport
	if err := json.Unmarshal([]byte(r.stdout), &orphans); err != nil {
		t.Fatalf("orphans: %v\n%s", err, r.stdout)
	}
	for _, o := range orphans.Orphans {
		if o.Node == "vm-azure" {
			t.Errorf("a deallocated VM is an orphan: %+v", o)
		}
	}
}

// TestOSShutdownOnAzureStillBills is the second half: the same box told
// to stop with `shutdown -h now` (a stub on PATH: no test powers anything
// off) is powered off but still allocated, so the server keeps it
// powered-off-still-billing, an orphan with the fix, its spend growing.
func TestOSShutdownOnAzureStillBills(t *testing.T) {
	dir := t.TempDir()
	az := stoppertest.NewAzure()
	defer az.Close()
	fleet := newStopFleet(t, dir)
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "shutdown.argv")
	writeExec(t, filepath.Join(bin, "shutdown"), "#!/bin/sh\necho \"$@\" >> "+marker+"\n")
	cmd := gwCmd(dir, "up", "--data-dir", filepath.Join(dir, "data"), "--listen", "", "--simulate", "1xH100,load=0",
		"--cloud", "azure", "--azure-metadata", az.IMDS.URL, "--azure-management", az.ARM.URL,
		"--stop-command", "shutdown -h now", "--idle-window", "3s", "--ignore-sessions", "--node-id", "vm-azure-os",
		"--server", fleet.srv.url, "--token-file", fleet.agentToken, "--heartbeat", "1s",
		"--label", "owner=ana,provider=azure,region=westeurope,price=3.40,currency=USD")
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	p := startCmd(t, cmd)
	p.wait(t, `idle stop would NOT stop billing here: .*azure`, 15*time.Second)
	p.wait(t, `powered off \(idle, os-shutdown\) but STILL BILLING`, 30*time.Second)
	if b, err := os.ReadFile(marker); err != nil || strings.TrimSpace(string(b)) != "-h now" {
		t.Errorf("the stub shutdown got %q (%v), want -h now", b, err)
	}
	if az.Deallocations() != 0 {
		t.Errorf("an OS shutdown deallocated the VM")
	}
	n := fleet.waitState(t, "vm-azure-os", gpuwarden.NodePoweredOffStillBilling)
	if n.Live.Stop == nil || n.Live.Stop.StopsBilling || n.Live.Stop.Fix == "" {
		t.Errorf("the node's stop report does not say it keeps billing, with the fix: %+v", n.Live.Stop)
	}
	r := gwLive(t, dir, "report", "orphans", "-o", "json", "--server", fleet.srv.url, "--token-file", fleet.viewer)
	if !strings.Contains(r.stdout, "vm-azure-os") || !strings.Contains(r.stdout, "--stop auto") {
		t.Errorf("the powered-off VM is not an orphan with the fix:\n%s", r.stdout)
	}
	spent := func() int64 {
		r := gwLive(t, dir, "report", "spend", "-o", "json", "--server", fleet.srv.url, "--token-file", fleet.viewer)
		var s report.SpendReport
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || len(s.Rows) != 1 {
			t.Fatalf("spend: %v\n%s", err, r.stdout)
		}
		return int64(s.Rows[0].Spent)
	}
	p.kill(9) // the box is off: nothing reports any more
	first := spent()
	time.Sleep(3 * time.Second) // $3.40/h is about a cent every 10 s
	deadline := time.Now().Add(30 * time.Second)
	for spent() <= first {
		if time.Now().After(deadline) {
			t.Fatalf("the spend of a powered-off, still-allocated VM stopped growing at %d", first)
		}
		time.Sleep(time.Second)
	}
}

// TestPreflightChecksTheStopEndsTheBill is issue #27's fourth "done when":
// preflight fails a plan on Azure, Lambda, RunPod and Vast whose stop is a
// bare OS shutdown, with the fix, and passes it once the provider's own
// stop is proven against the fakes of stoppertest.
func TestPreflightChecksTheStopEndsTheBill(t *testing.T) {
	root := repoRoot(t)
	base, err := os.ReadFile(filepath.Join(root, "examples", "qlora-7b.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	az := stoppertest.NewAzure()
	defer az.Close()
	runpod := stoppertest.NewRunPod("pod-1", "rp-key")
	defer runpod.Close()
	vast := stoppertest.NewVast(4242, "vast-key")
	defer vast.Close()
	tests := []struct {
		name, provider, instance, stop string
		flags, env                     []string
		status, inEvidence, inFix      string
	}{
		{"azure os", "azure", "Standard_NC4as_T4_v3", "os", nil, nil, "fail", "keeps azure billing", "on_hours.stop to auto (azure-deallocate)"},
		{"azure proven", "azure", "Standard_NC4as_T4_v3", "auto",
			[]string{"--azure-metadata", az.IMDS.URL, "--azure-management", az.ARM.URL}, nil, "ok", "azure-deallocate ends the bill on azure, proven", ""},
		{"lambda os", "lambda", "gpu_1x_a10", "os", nil, nil, "fail", "keeps lambda billing", "on_hours.stop to terminate"},
		{"runpod os", "runpod", "1x_RTX_4090", "os", nil, nil, "fail", "keeps runpod billing", "on_hours.stop to auto (runpod-stop)"},
		{"runpod proven", "runpod", "1x_RTX_4090", "auto", []string{"--runpod-api", runpod.API()},
			[]string{"RUNPOD_POD_ID=pod-1", "RUNPOD_API_KEY=rp-key"}, "ok", "runpod-stop ends the bill on runpod, proven", ""},
		{"runpod refused", "runpod", "1x_RTX_4090", "auto", []string{"--runpod-api", runpod.API()},
			[]string{"RUNPOD_POD_ID=pod-1", "RUNPOD_API_KEY=wrong"}, "fail", "not proven", ""},
		{"vast os", "vast", "1x-RTX_4090", "os", nil, nil, "fail", "keeps vast billing", "on_hours.stop to auto (vast-stop)"},
		{"vast proven", "vast", "1x-RTX_4090", "auto", []string{"--vast-api", vast.API()},
			[]string{"CONTAINER_ID=4242", "VAST_API_KEY=vast-key"}, "ok", "vast-stop ends the bill on vast, proven", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			plan := strings.Replace(string(base), "  auto_shutdown_idle_minutes: 30\n", "  auto_shutdown_idle_minutes: 30\n  stop: "+tt.stop+"\n", 1) +
				"box:\n  provider: " + tt.provider + "\n  region: us-east-1\n  instance: " + tt.instance + "\n"
			path := writeFile(t, filepath.Join(dir, "plan.yaml"), plan)
			cmd := gwCmd(dir, append([]string{"preflight", path, "--no-canary", "--data-dir", filepath.Join(dir, "data"), "-o", "json"}, tt.flags...)...)
			cmd.Env = append(os.Environ(), tt.env...)
			out, _ := cmd.Output()
			var res struct {
				Items []struct{ ID, Status, Evidence, Fix string }
			}
			if err := json.Unmarshal(out, &res); err != nil {
				t.Fatalf("preflight -o json: %v\n%s", err, out)
			}
			for _, it := range res.Items {
				if it.ID != "idle-stop" {
					continue
				}
				if it.Status != tt.status || !strings.Contains(it.Evidence, tt.inEvidence) || !strings.Contains(it.Fix, tt.inFix) {
					t.Errorf("idle-stop = %s %q fix %q; want %s with %q and fix %q", it.Status, it.Evidence, it.Fix, tt.status, tt.inEvidence, tt.inFix)
				}
				return
			}
			t.Fatalf("no idle-stop item:\n%s", out)
		})
	}
}

// TestIdleStopStopsTheEC2InstanceOnMoto is issue #27's second "done when",
// against the real moto server with IAM enforced and AWS's own
// amazon-ec2-metadata-mock as IMDS (set to moto's instance): with --stop api
// the stop is proven at start with a DryRun, then the idle stop stops the
// instance and moto reads it back stopped; a role without
// ec2:StopInstances is refused at start, loudly, with the fix.
func TestIdleStopStopsTheEC2InstanceOnMoto(t *testing.T) {
	// Seven set-up actions run before moto enforces IAM: two users of
	// three each, and the instance.
	m := peertest.StartMoto(t, "INITIAL_NO_AUTH_ACTION_COUNT=7")
	allowedKey, allowedSecret := m.User(t, "gw-stopper", "ec2:StopInstances", "ec2:DescribeInstances")
	deniedKey, deniedSecret := m.User(t, "gw-reader", "ec2:DescribeInstances")
	id := m.RunInstance(t)
	dir := t.TempDir()
	config := writeFile(t, filepath.Join(dir, "aemm.json"), `{"metadata": {"values": {"instance-id": "`+id+`"}}}`)
	imds := peertest.StartAEMM(t, "-c", config)
	up := func(name, key, secret string) *upProc {
		cmd := gwCmd(dir, "up", "--data-dir", filepath.Join(dir, name), "--listen", "", "--simulate", "1xH100,load=0",
			"--cloud", "aws", "--stop", "api", "--aws-metadata", imds.URL, "--aws-endpoint", m.URL,
			"--idle-window", "3s", "--label", "provider=aws,region=us-east-1")
		cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+key, "AWS_SECRET_ACCESS_KEY="+secret, "AWS_REGION=us-east-1")
		return startCmd(t, cmd)
	}

	denied := up("denied", deniedKey, deniedSecret)
	denied.wait(t, `the idle stop \(aws-stop\) is not proven.*ec2:StopInstances`, 20*time.Second)
	denied.kill(9)

	p := up("allowed", allowedKey, allowedSecret)
	p.wait(t, `idle stop proven.*aws-stop.*DryRun`, 20*time.Second)
	p.wait(t, ` stopped \(idle, aws-stop\): the provider says .*state read back stopped`, 60*time.Second)
	if got := m.State(t, allowedKey, allowedSecret, id); got != "stopped" {
		t.Errorf("moto reads the instance %q after the idle stop, want stopped", got)
	}
}

// TestIdleStopOnContainerClouds is issue #27's third "done when": an idle
// simulated box on RunPod and on Vast is stopped through the provider's
// API (fakes written from their REST docs), the state read back; on
// Lambda, which has no stop, --stop terminate is refused while a
// supervised job's newest checkpoint is not in its store, and goes through
// once it is.
func TestIdleStopOnContainerClouds(t *testing.T) {
	t.Run("runpod", func(t *testing.T) {
		dir := t.TempDir()
		f := stoppertest.NewRunPod("pod-7", "rp-key")
		defer f.Close()
		cmd := gwCmd(dir, "up", "--data-dir", filepath.Join(dir, "data"), "--listen", "", "--simulate", "1xH100,load=0",
			"--cloud", "runpod", "--runpod-api", f.API(), "--idle-window", "3s")
		cmd.Env = append(os.Environ(), "RUNPOD_POD_ID=pod-7", "RUNPOD_API_KEY=rp-key")
		p := startCmd(t, cmd)
		p.wait(t, `idle stop proven.*runpod-stop`, 15*time.Second)
		p.wait(t, ` stopped \(idle, runpod-stop\): the provider says HTTP 200.*state read back EXITED`, 40*time.Second)
		if f.Stops() != 1 || f.DesiredStatus() != "EXITED" {
			t.Errorf("the fake saw %d stops, status %q; want 1 and EXITED", f.Stops(), f.DesiredStatus())
		}
	})
	t.Run("vast", func(t *testing.T) {
		dir := t.TempDir()
		f := stoppertest.NewVast(4242, "vast-key")
		defer f.Close()
		cmd := gwCmd(dir, "up", "--data-dir", filepath.Join(dir, "data"), "--listen", "", "--simulate", "1xH100,load=0",
			"--cloud", "vast", "--vast-api", f.API(), "--idle-window", "3s")
		cmd.Env = append(os.Environ(), "CONTAINER_ID=4242", "VAST_API_KEY=vast-key")
		p := startCmd(t, cmd)
		p.wait(t, `idle stop proven.*vast-stop`, 15*time.Second)
		p.wait(t, ` stopped \(idle, vast-stop\): the provider says .*state read back stopped`, 40*time.Second)
		if f.Stops() != 1 || f.ActualStatus() != "stopped" {
			t.Errorf("the fake saw %d stops, status %q; want 1 and stopped", f.Stops(), f.ActualStatus())
		}
	})
	t.Run("lambda", func(t *testing.T) {
		dir := t.TempDir()
		f := stoppertest.NewLambda("0920582c7ff041399e34823a0be62549", "lambda-key")
		defer f.Close()
		data := filepath.Join(dir, "data")
		cmd := gwCmd(dir, "up", "--data-dir", data, "--listen", "", "--simulate", "1xH100,load=0",
			"--cloud", "lambda", "--stop", "terminate", "--lambda-api", f.API(), "--idle-window", "3s")
		cmd.Env = append(os.Environ(), "LAMBDA_INSTANCE_ID=0920582c7ff041399e34823a0be62549", "LAMBDA_API_KEY=lambda-key")
		p := startCmd(t, cmd)
		p.wait(t, `idle stop proven.*lambda-terminate`, 15*time.Second)
		// A supervised job, as gpuwarden run reports it on the socket: its
		// newest checkpoint never reached the store, then it ends.
		cl, err := agent.Dial(context.Background(), filepath.Join(data, "agent.sock"))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		undurable := gpuwarden.SyncReport{Target: "s3://ckpt/run-1", NewestCommitted: "000003-step-000300", Failed: 1,
			NewestDurable: &gpuwarden.DurableCheckpoint{Name: "000002-step-000200", Step: 200}}
		if err := cl.Report("run-1", agent.JobRunning); err != nil {
			t.Fatal(err)
		}
		if err := cl.ReportSync("run-1", undurable); err != nil {
			t.Fatal(err)
		}
		if err := cl.Report("run-1", agent.JobDone); err != nil {
			t.Fatal(err)
		}
		p.wait(t, `the stop \(lambda-terminate\) failed, the box still bills: .*terminating would lose work: job run-1: checkpoint 000003-step-000300 is not in s3://ckpt/run-1`, 40*time.Second)
		if f.Terminations() != 0 {
			t.Fatalf("the box was terminated with an undurable checkpoint")
		}
		// The checkpoint reaches the store: the next idle period terminates.
		undurable.Durable, undurable.NewestDurable = true, &gpuwarden.DurableCheckpoint{Name: "000003-step-000300", Step: 300}
		if err := cl.ReportSync("run-1", undurable); err != nil {
			t.Fatal(err)
		}
		if err := cl.Report("run-1", agent.JobDone); err != nil {
			t.Fatal(err)
		}
		p.wait(t, ` stopped \(idle, lambda-terminate\)`, 40*time.Second)
		if f.Terminations() != 1 {
			t.Errorf("the fake saw %d terminations, want 1", f.Terminations())
		}
	})
}

// TestBlindBusyBoxIsNeverStopped is issue #27's fifth "done when": `up`
// with no NVIDIA driver (this machine has none) and two busy cores says the
// box is busy, by the host rule, and never stops it; a plan whose
// auto_shutdown_idle_minutes is 0 turns the idle stop off, and says so.
func TestBlindBusyBoxIsNeverStopped(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("this host has an NVIDIA driver")
	}
	dir := t.TempDir()
	for range 2 {
		spin := exec.Command("sh", "-c", "while :; do :; done")
		if err := spin.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = spin.Process.Kill(); _ = spin.Wait() })
	}
	p := startUp(t, dir, "--idle-window", "3s", "--dry-run", "--cloud", "none", "--ignore-sessions")
	p.wait(t, `no NVIDIA driver: running on the CPU path`, 10*time.Second)
	p.wait(t, `the box is busy.*CPU at [0-9]+% \(no GPU reading: idle needs a quiet host\).*rule=host-quiet`, 15*time.Second)
	time.Sleep(6 * time.Second) // twice the idle window
	if strings.Contains(p.text(), "would stop the box") || strings.Contains(p.text(), "idle-warning") {
		t.Errorf("a blind box with two busy cores was going to be stopped:\n%s", p.text())
	}

	base, err := os.ReadFile(filepath.Join(repoRoot(t), "examples", "notebook-a100.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	plan := writeFile(t, filepath.Join(dir, "notebook.yaml"), string(base))
	off := startProc(t, dir, "up", plan, "--data-dir", filepath.Join(dir, "off"), "--listen", "127.0.0.1:0",
		"--simulate", "1xA100,load=0", "--dry-run", "--cloud", "none")
	url := off.url(t)
	st := gw(t, dir, "status", "--addr", strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/"), "-o", "json")
	var status gpuwarden.AgentStatus
	if err := json.Unmarshal([]byte(st.stdout), &status); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, st.stdout)
	}
	if status.Idle.Rule != gpuwarden.IdleRuleOff || !strings.Contains(status.Idle.OffWhy, "auto_shutdown_idle_minutes is 0") {
		t.Errorf("a plan with 0 idle minutes: idle rule %q (%q), want off and why", status.Idle.Rule, status.Idle.OffWhy)
	}
}
