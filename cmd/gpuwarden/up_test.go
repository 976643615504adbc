package main

import (
	"bufio"
	"context"
	"encoding/json"
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

	"github.com/gpuwarden/gpuwarden/agent"
	"github.com/gpuwarden/gpuwarden/preempt/preempttest"
)

// upProc is a running `gpuwarden up` with its log collected line by line.
type upProc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	log  []string
	more chan struct{}
	done chan struct{}
}

// startUp starts the agent on loopback only: a free port and no cloud
// metadata unless the test names one.
func startUp(t *testing.T, dir string, args ...string) *upProc {
	t.Helper()
	return startProc(t, dir, append([]string{"up", "--data-dir", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0"}, args...)...)
}

// startProc starts the binary with args, collecting its log; the test's
// end kills it.
func startProc(t *testing.T, dir string, full ...string) *upProc {
	t.Helper()
	cmd := exec.Command(binary, full...)
	cmd.Dir = dir
	return startCmd(t, cmd)
}

// startCmd starts cmd, collecting its stderr; the test's end kills it.
func startCmd(t *testing.T, cmd *exec.Cmd) *upProc {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &upProc{cmd: cmd, more: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
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

// wait returns the first log line matching re, failing after timeout.
func (p *upProc) wait(t *testing.T, re string, timeout time.Duration) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.After(timeout)
	for {
		p.mu.Lock()
		for _, l := range p.log {
			if rx.MatchString(l) {
				p.mu.Unlock()
				return l
			}
		}
		p.mu.Unlock()
		select {
		case <-p.more:
		case <-p.done:
			t.Fatalf("agent exited before logging %q:\n%s", re, p.text())
		case <-deadline:
			t.Fatalf("no log line %q within %s:\n%s", re, timeout, p.text())
		}
	}
}

// exited reports whether the process closed its log: it ended.
func (p *upProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *upProc) text() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.log, "\n")
}

func (p *upProc) kill(sig syscall.Signal) {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(sig)
		_ = p.cmd.Wait()
		<-p.done
	}
}

// url is the dashboard's address from the agent's log.
func (p *upProc) url(t *testing.T) string {
	line := p.wait(t, `serving the dashboard`, 10*time.Second)
	m := regexp.MustCompile(`url=(http://\S+/)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no url in %q", line)
	}
	return m[1]
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return string(b)
}

func TestUpStopsAnIdleBox(t *testing.T) {
	dir := t.TempDir()
	p := startUp(t, dir, "--simulate", "2xH100", "--idle-window", "3s", "--dry-run")
	p.wait(t, `level=WARN msg=".*idle since.*stops at`, 10*time.Second)
	p.wait(t, `dry run: would stop the box.*method=os-shutdown`, 10*time.Second)
	url := p.url(t)
	status := gw(t, dir, "status", "--addr", strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/"))
	if status.code != 0 || !strings.Contains(status.stdout, "Idle      for") || !strings.Contains(status.stdout, "H100-SXM") {
		t.Errorf("gpuwarden status: exit %d\n%s%s", status.code, status.stdout, status.stderr)
	}
	metrics := get(t, url+"metrics")
	for _, series := range []string{"gpuwarden_gpu_utilization_ratio{", "gpuwarden_idle_seconds ", "gpuwarden_cost_total{"} {
		if !strings.Contains(metrics, series) {
			t.Errorf("/metrics has no %s series", series)
		}
	}
	p.kill(syscall.SIGTERM)
	if !strings.Contains(p.text(), "agent stopped") {
		t.Errorf("SIGTERM did not stop the agent cleanly:\n%s", p.text())
	}
}

func TestUpLeavesABusyBoxAlone(t *testing.T) {
	dir := t.TempDir()
	p := startUp(t, dir, "--simulate", "2xH100,load=70", "--idle-window", "2s", "--dry-run")
	url := p.url(t)
	time.Sleep(3500 * time.Millisecond)
	if strings.Contains(p.text(), "would stop") || strings.Contains(p.text(), "idle since") {
		t.Fatalf("a busy box got an idle warning or stop:\n%s", p.text())
	}
	var st struct {
		Idle struct {
			Idle bool     `json:"idle"`
			Busy []string `json:"busy"`
		} `json:"idle"`
	}
	if err := json.Unmarshal([]byte(get(t, url+"api/v1/status")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Idle.Idle || len(st.Idle.Busy) == 0 {
		t.Errorf("status idle = %+v, want busy with reasons", st.Idle)
	}
}

// TestUpSaysItIsSimulated: simulated GPUs are said to be simulated in the
// status, the metrics and the dashboard, and the start-up log names the
// idle window in force, not the flag's zero.
func TestUpSaysItIsSimulated(t *testing.T) {
	dir := t.TempDir()
	p := startUp(t, dir, "--simulate", "1xH100", "--dry-run")
	url := p.url(t)
	var st struct {
		Simulated bool `json:"simulated"`
	}
	if err := json.Unmarshal([]byte(get(t, url+"api/v1/status")), &st); err != nil || !st.Simulated {
		t.Errorf("/api/v1/status simulated = %v (%v), want true", st.Simulated, err)
	}
	if m := get(t, url+"metrics"); !strings.Contains(m, `simulated="true"`) {
		t.Errorf("gpuwarden_agent_info lacks simulated=\"true\"")
	}
	if page := get(t, url); !strings.Contains(page, "simulated GPUs") {
		t.Errorf("the dashboard shows no simulated badge")
	}
	if !strings.Contains(p.text(), "idle_window=30m0s") {
		t.Errorf("the start-up log does not name the 30 min window in force:\n%s", p.text())
	}
}

// TestUpRestartKeepsClocksAndAlerts kills the agent mid-window and checks
// that the restarted one stops on the first window's schedule and sends no
// budget alert twice.
func TestUpRestartKeepsClocksAndAlerts(t *testing.T) {
	dir := t.TempDir()
	plan := "workload: {kind: notebook}\nwork_hours: 10\nbudget: {monthly_limit: 1, currency: USD}\nbox: {hourly_rate: 7200}\n"
	if err := os.WriteFile(filepath.Join(dir, "gpuwarden.yaml"), []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--simulate", "1xH100", "--idle-window", "8s", "--dry-run"}
	first := startUp(t, dir, args...)
	first.wait(t, `100% of the .*kind=budget-actual`, 10*time.Second) // $2 a second: past $1 at once
	time.Sleep(2 * time.Second)
	first.kill(syscall.SIGKILL)
	started := time.Now()

	second := startUp(t, dir, args...)
	second.wait(t, `dry run: would stop the box`, 12*time.Second)
	// The first run had been idle about 3 s of the 8 s window already.
	if took := time.Since(started); took > 7*time.Second {
		t.Errorf("the restarted agent stopped after %v: it started the idle window again", took)
	}
	if strings.Contains(second.text(), "kind=budget-actual") {
		t.Errorf("the restarted agent sent a budget alert again:\n%s", second.text())
	}
	var st struct {
		Events []struct{ Kind string } `json:"events"`
	}
	if err := json.Unmarshal([]byte(get(t, second.url(t)+"api/v1/status")), &st); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range st.Events {
		if e.Kind == "budget-actual" {
			n++
		}
	}
	if n != 3 {
		t.Errorf("%d ACTUAL budget events in the ledger, want one each for 50, 80 and 100 %%", n)
	}
}

// TestUpRelaysPreemption: a loopback AWS metadata service announces a spot
// interruption; a listener on the agent's socket must hear it within 2 s.
func TestUpRelaysPreemption(t *testing.T) {
	for _, cloud := range []string{"aws", "gcp", "azure"} {
		t.Run(cloud, func(t *testing.T) {
			dir := t.TempDir()
			var announce func()
			var url string
			switch cloud {
			case "aws":
				f := preempttest.NewAWS()
				defer f.Close()
				url, announce = f.URL, func() { f.Interrupt("terminate", time.Now().Add(2*time.Minute)) }
			case "gcp":
				f := preempttest.NewGCP()
				defer f.Close()
				url, announce = f.URL, f.Preempt
			case "azure":
				f := preempttest.NewAzure()
				defer f.Close()
				url, announce = f.URL, func() { f.Preempt(time.Now().Add(30 * time.Second)) }
			}
			p := startUp(t, dir, "--simulate", "1xH100,load=50", "--cloud", cloud, "--"+cloud+"-metadata", url)
			p.wait(t, `watching for cloud notices`, 10*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got := make(chan agent.Message, 1)
			go func() {
				_ = agent.Listen(ctx, filepath.Join(dir, "data", "agent.sock"), func(m agent.Message) { got <- m })
			}()
			time.Sleep(200 * time.Millisecond) // let the listener connect
			start := time.Now()
			announce()
			select {
			case m := <-got:
				if took := time.Since(start); took > 2*time.Second || m.Notice == nil || m.Notice.Kind != "preemption" {
					t.Errorf("got %+v after %v, want a preemption within 2 s", m, took)
				}
				t.Logf("%s preemption reached the socket in %v", cloud, time.Since(start))
			case <-time.After(3 * time.Second):
				t.Fatalf("no notice on the socket:\n%s", p.text())
			}
		})
	}
}

// TestReadmeDemoInATerminal runs the README's first demo in a terminal
// (script gives it a pty, which counts as an interactive session) as a new
// user would: with simulated GPUs the user's own terminal must not keep
// the box busy, and the dry-run stop shows as the README shows it (issue
// #32 item 7).
func TestReadmeDemoInATerminal(t *testing.T) {
	dir := t.TempDir()
	p := startOnTerminal(t, dir, "up", "--simulate", "2xH100", "--idle-window", "3s", "--dry-run", "--listen", "127.0.0.1:0",
		"--data-dir", filepath.Join(dir, "data"))
	p.waitFor(t, "dry run: would stop the box", 20*time.Second)
	text := p.out.String()
	for _, want := range []string{`msg="the box is idle"`, "has been idle since", "stopping with os-shutdown", "dry run: would stop the box"} {
		if !strings.Contains(text, want) {
			t.Errorf("in a terminal the demo does not show %q:\n%s", want, text)
		}
	}
}

// TestClockFileIsForSimulatedBoxes: the stepped clock (--clock-file) runs a
// simulated box only, and a clock file that cannot be read is bad input
// naming the file, before anything starts.
func TestClockFileIsForSimulatedBoxes(t *testing.T) {
	dir := t.TempDir()
	clock := writeFile(t, filepath.Join(dir, "clock"), "2026-11-01T00:00:00Z\n")
	bad := writeFile(t, filepath.Join(dir, "bad-clock"), "Sunday\n")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"real box", []string{"--clock-file", clock, "up", "--data-dir", filepath.Join(dir, "d1"), "--listen", ""},
			"--clock-file steps a simulated box only"},
		{"missing file", []string{"--clock-file", filepath.Join(dir, "none"), "up", "--simulate", "1xH100", "--listen", ""},
			"--clock-file: clock file: open " + filepath.Join(dir, "none")},
		{"not a time", []string{"--clock-file", bad, "run", "--", "true"},
			bad + `: line 1: "Sunday" is not an RFC 3339 time`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := gwLive(t, dir, tt.args...)
			if r.code != 2 || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", r.code, r.stderr, tt.want)
			}
		})
	}
}
