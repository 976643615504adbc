package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// canaryJSON is the part of `canary -o json` the end-to-end tests check.
type canaryJSON struct {
	Verdict  string   `json:"verdict"`
	ExitCode int      `json:"exit_code"`
	Lock     string   `json:"lock"`
	Complete *bool    `json:"complete"`
	Compared []string `json:"compared"`
	Skipped  []struct {
		Field, Why string
	} `json:"skipped"`
	Checks []check `json:"checks"`
}

func decodeCanary(t *testing.T, r result) canaryJSON {
	t.Helper()
	var got canaryJSON
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("canary -o json: %v\n%s%s", err, r.stdout, r.stderr)
	}
	if got.Complete == nil {
		t.Fatalf("canary -o json has no \"complete\":\n%s", r.stdout)
	}
	return got
}

// TestCanaryMissingLock: a lock that is not there is a finding, so that a
// mistyped --lock or a CI job that never made one does not go green; only
// --no-lock checks the box alone.
func TestCanaryMissingLock(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		code int
		// want are substrings of stdout, stderr for the usage errors.
		want []string
	}{
		{"mistyped lock", []string{"--lock", "nope.lock"}, 1,
			[]string{"missing  no nope.lock here", "gpuwarden lock --lock nope.lock", "--no-lock", "Verdict   NO-LOCK (exit 1)"}},
		{"default lock never made", nil, 1,
			[]string{"missing  no gpuwarden.lock here", "`gpuwarden lock` on a box where the job works", "Verdict   NO-LOCK (exit 1)"}},
		{"a fault outranks it", []string{"--lock", "nope.lock", "--simulate", "1xH100,fault=xid"}, 2,
			[]string{"no nope.lock here", "Verdict   GPU-FAULT (exit 2)"}},
		{"no-lock checks the box alone", []string{"--no-lock"}, 0,
			[]string{"skip    --no-lock: the stack is not compared with a lock", "Verdict   OK (exit 0)"}},
		{"no-lock with a lock contradicts", []string{"--no-lock", "--lock", "nope.lock"}, 4,
			[]string{"--lock nope.lock and --no-lock contradict each other"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"canary", "--simulate", "1xH100", "--no-frameworks"}, tt.args...)
			r := gw(t, dir, args...)
			out := r.stdout
			if tt.code == 4 {
				out = r.stderr
			}
			if r.code != tt.code {
				t.Errorf("exit %d, want %d:\n%s%s", r.code, tt.code, r.stdout, r.stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}

	r := gw(t, dir, "canary", "--lock", "nope.lock", "--simulate", "1xH100", "--no-frameworks", "-o", "json")
	got := decodeCanary(t, r)
	if r.code != 1 || got.Verdict != "no-lock" || got.ExitCode != 1 || *got.Complete || got.Lock != "nope.lock" {
		t.Errorf("json: exit %d verdict %q exit_code %d complete %v lock %q, want 1 no-lock 1 false nope.lock",
			r.code, got.Verdict, got.ExitCode, *got.Complete, got.Lock)
	}
}

// TestCanaryPartial: a field the lock pins but the run did not probe is
// skipped and said to be; the pass is partial, exit 0, or 1 with --strict.
func TestCanaryPartial(t *testing.T) {
	dir := t.TempDir()
	if r := gw(t, dir, "lock", "--simulate", "2xH100", "--no-frameworks"); r.code != 0 {
		t.Fatalf("lock: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Pin a framework, as a lock made with the probes on does.
	path := filepath.Join(dir, "gpuwarden.lock")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString("  python.python3.torch.version: {value: \"2.11.0+cu130\", match: exact}\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"partial", nil, 0, []string{
			"skip    1 framework field not compared: framework probes off (--no-frameworks)",
			"Skipped   framework probes off (--no-frameworks): python.python3.torch.version",
			"Verdict   OK (partial) (exit 0)"}},
		{"strict", []string{"--strict"}, 1, []string{"Verdict   OK (partial) (exit 1)"}},
		{"drift outranks partial", []string{"--simulate", "2xH200"}, 1, []string{"Verdict   DRIFT (exit 1)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := gw(t, dir, append([]string{"canary", "--simulate", "2xH100", "--no-frameworks"}, tt.args...)...)
			if r.code != tt.code {
				t.Errorf("exit %d, want %d:\n%s%s", r.code, tt.code, r.stdout, r.stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("output lacks %q:\n%s", w, r.stdout)
				}
			}
		})
	}

	r := gw(t, dir, "canary", "--simulate", "2xH100", "--no-frameworks", "-o", "json")
	got := decodeCanary(t, r)
	if got.Verdict != "partial" || *got.Complete || len(got.Skipped) != 1 ||
		got.Skipped[0].Field != "python.python3.torch.version" || got.Skipped[0].Why != whyNoFrameworks {
		t.Errorf("json: verdict %q complete %v skipped %+v, want partial, false, the torch field skipped under --no-frameworks",
			got.Verdict, *got.Complete, got.Skipped)
	}
	for _, k := range got.Compared {
		if strings.HasPrefix(k, "python.") {
			t.Errorf("compared lists %s, which --no-frameworks did not probe", k)
		}
	}
}

// TestCanaryCPUOKCountsWhatItCompared: on a host without a driver, --cpu-ok
// against a 2×H100 lock compares the host fields only and must say so
// rather than "13 fields match".
func TestCanaryCPUOKCountsWhatItCompared(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("this host has an NVIDIA driver")
	}
	dir := t.TempDir()
	if r := gw(t, dir, "lock", "--simulate", "2xH100", "--no-frameworks"); r.code != 0 {
		t.Fatalf("lock: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r := gw(t, dir, "canary", "--cpu-ok", "--no-frameworks")
	if r.code != 0 {
		t.Errorf("exit %d, want 0 (a partial pass):\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, w := range []string{"9 GPU fields not compared: no GPU on this box (--cpu-ok)", "Verdict   OK (partial) (exit 0)"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("output lacks %q:\n%s", w, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "13 fields match") {
		t.Errorf("claims every field matched though only the host was compared:\n%s", r.stdout)
	}
	if r := gw(t, dir, "canary", "--cpu-ok", "--no-frameworks", "--strict"); r.code != 1 {
		t.Errorf("--strict: exit %d, want 1:\n%s%s", r.code, r.stdout, r.stderr)
	}

	got := decodeCanary(t, gw(t, dir, "canary", "--cpu-ok", "--no-frameworks", "-o", "json"))
	if got.Verdict != "partial" || *got.Complete || len(got.Skipped) != 9 {
		t.Errorf("json: verdict %q complete %v %d skipped, want partial, false, 9", got.Verdict, *got.Complete, len(got.Skipped))
	}
	for _, s := range got.Skipped {
		if s.Why != whyNoGPU {
			t.Errorf("skipped %s: why %q, want %q", s.Field, s.Why, whyNoGPU)
		}
	}
	for _, k := range got.Compared {
		if strings.HasPrefix(k, "gpu.") || strings.HasPrefix(k, "driver.") || strings.HasPrefix(k, "cuda.") {
			t.Errorf("compared lists %s, which this box has no GPU to show", k)
		}
	}
}

// TestCanaryHelpExitCodes keeps the help's example and exit codes in step
// with what the canary does.
func TestCanaryHelpExitCodes(t *testing.T) {
	r := gw(t, ".", "canary", "--help")
	for _, w := range []string{
		"Examples:", "Exit codes (canary's own):",
		"0  ok, or a partial pass (OK (partial)) unless --strict",
		"1  drift: the stack differs from the lock; no lock (unless --no-lock);",
		"2  GPU fault", "3  no NVIDIA driver or GPU", "4  usage or internal error",
		"--no-lock", "--strict", "gpuwarden canary --no-lock",
	} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("canary --help lacks %q:\n%s", w, r.stdout)
		}
	}
}
