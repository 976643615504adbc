package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden/agent"
)

// agentStatus is what these tests read of /api/v1/status.
type agentStatus struct {
	Warnings []string `json:"warnings"`
	Events   []struct {
		Kind, Severity, Message string
	} `json:"events"`
	Jobs []struct {
		ID string `json:"id"`
	} `json:"jobs"`
}

func readStatus(t *testing.T, url string) agentStatus {
	t.Helper()
	var st agentStatus
	if err := json.Unmarshal([]byte(get(t, url+"api/v1/status")), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestUpOneAgentPerDataDir: a second agent on a data dir exits 2 naming
// the first's PID and leaves its socket alone, so that jobs still report
// to the first; once the first is killed, its lock and socket block
// nobody.
func TestUpOneAgentPerDataDir(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	args := []string{"--simulate", "1xH100", "--dry-run"}
	first := startUp(t, dir, args...)
	url := first.url(t)
	first.wait(t, `msg="agent up"`, 10*time.Second)
	sock := filepath.Join(data, "agent.sock")
	before, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	second := exec.CommandContext(ctx, binary, append([]string{"up", "--data-dir", data, "--listen", "127.0.0.1:0"}, args...)...)
	var stderr bytes.Buffer
	second.Stderr = &stderr
	err = second.Run()
	code := -1
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err == nil {
		code = 0
	}
	pid := strconv.Itoa(first.cmd.Process.Pid)
	if code != 2 || !strings.Contains(stderr.String(), "PID "+pid) {
		t.Errorf("a second agent on the data dir: exit %d, want 2 with a message naming PID %s:\n%s", code, pid, stderr.String())
	}

	after, err := os.Stat(sock)
	if err != nil || !os.SameFile(before, after) {
		t.Fatalf("the first agent's socket was removed or replaced (%v)", err)
	}
	c, err := agent.Dial(ctx, sock)
	if err != nil {
		t.Fatalf("the first agent's socket does not answer: %v", err)
	}
	defer c.Close()
	if err := c.Report("train-1", agent.JobRunning); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := readStatus(t, url)
		if len(st.Jobs) == 1 && st.Jobs[0].ID == "train-1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first agent's status has jobs %+v, want train-1 reported on its socket", st.Jobs)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// A dead agent's lock file (with its PID) and socket file block nobody.
	c.Close()
	first.kill(syscall.SIGKILL)
	third := startUp(t, dir, args...)
	third.wait(t, `msg="agent up"`, 15*time.Second)
	b, _ := os.ReadFile(filepath.Join(data, agent.LockFile))
	if got := strings.TrimSpace(string(b)); got != strconv.Itoa(third.cmd.Process.Pid) {
		t.Errorf("lock file holds %q, want the new agent's PID %d", got, third.cmd.Process.Pid)
	}
	third.kill(syscall.SIGTERM)
}

// TestUpLedgerDamagedOrDeleted: a damaged ledger no longer keeps the agent
// from starting, and one deleted under it is noticed; each time a fresh
// ledger starts (0600, as are its -wal and -shm) and the agent says so: a
// critical event, an error in the log, a warning in `status`. The damaged
// file is kept aside as it was.
func TestUpLedgerDamagedOrDeleted(t *testing.T) {
	garbage := bytes.Repeat([]byte("not a ledger "), 1000)
	tests := []struct {
		name    string
		before  func(t *testing.T, data string) // before the agent starts
		during  func(t *testing.T, data string) // once it is up
		wantLog string
		kind    string
	}{
		{"damaged", func(t *testing.T, data string) {
			if err := os.MkdirAll(data, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(data, "ledger.db"), garbage, 0o600); err != nil {
				t.Fatal(err)
			}
		}, func(*testing.T, string) {}, `level=ERROR msg="the ledger \S+ledger.db was damaged \(file is not a database`, "ledger-damaged"},
		{"deleted while running", func(*testing.T, string) {}, func(t *testing.T, data string) {
			if err := os.Remove(filepath.Join(data, "ledger.db")); err != nil {
				t.Fatal(err)
			}
		}, `level=ERROR msg="the ledger \S+ledger.db was deleted while the agent ran`, "ledger-lost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			data := filepath.Join(dir, "data")
			tt.before(t, data)
			p := startUp(t, dir, "--simulate", "1xH100", "--dry-run")
			url := p.url(t)
			p.wait(t, `msg="agent up"`, 10*time.Second)
			tt.during(t, data)
			p.wait(t, tt.wantLog, 20*time.Second)

			// The status is the last tick's: wait for one after the alert.
			deadline := time.Now().Add(10 * time.Second)
			for {
				st := readStatus(t, url)
				warned := false
				for _, w := range st.Warnings {
					warned = warned || strings.Contains(w, "ledger.db")
				}
				critical := false
				for _, e := range st.Events {
					critical = critical || e.Kind == tt.kind && e.Severity == "critical"
				}
				if warned && critical {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("status: warnings %q, events %+v; want a warning naming the ledger and a critical %s event", st.Warnings, st.Events, tt.kind)
				}
				time.Sleep(100 * time.Millisecond)
			}
			text := gw(t, dir, "status", "--addr", strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/"))
			if text.code != 0 || !strings.Contains(text.stdout, "Warning") || !strings.Contains(text.stdout, "ledger.db") {
				t.Errorf("gpuwarden status: exit %d, no warning about the ledger:\n%s%s", text.code, text.stdout, text.stderr)
			}
			if tt.kind == "ledger-damaged" {
				asides, _ := filepath.Glob(filepath.Join(data, "ledger.db.damaged-*"))
				if len(asides) != 1 {
					t.Fatalf("damaged files kept aside: %v, want one", asides)
				}
				if kept, _ := os.ReadFile(asides[0]); !bytes.Equal(kept, garbage) {
					t.Errorf("%s is not the damaged file as it was", asides[0])
				}
			}
			// The fresh ledger takes the ticks, and its files are the owner's only.
			for _, name := range []string{"ledger.db", "ledger.db-wal", "ledger.db-shm"} {
				fi, err := os.Stat(filepath.Join(data, name))
				if err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				if got := fi.Mode().Perm(); got != 0o600 {
					t.Errorf("%s: mode %o, want 600", name, got)
				}
			}
			p.kill(syscall.SIGTERM)
			if !strings.Contains(p.text(), "agent stopped") {
				t.Errorf("the agent did not stop cleanly:\n%s", p.text())
			}
		})
	}
}
