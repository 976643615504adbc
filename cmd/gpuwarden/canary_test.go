package main

import (
	"bytes"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/canary"
)

// canaryFacts are what a 2×H100 box with python3 and torch reports; the lock
// of the report tests is recorded from them.
var canaryFacts = gpuwarden.Facts{
	"gpu.count": "2", "gpu.model": "H100-SXM", "gpu.vram_gb": "80", "gpu.compute_capability": "9.0",
	"gpu.ecc": "on", "gpu.mig": "off", "gpu.persistence": "on",
	"driver.version": "580.159.04", "cuda.driver_version": "13.0",
	"os.id": "ubuntu", "os.version_id": "24.04", "os.kernel": "6.8.0-49-generic", "container.runtime": "docker",
	"python.python3.version": "3.12.3", "python.python3.torch.version": "2.11.0+cu130",
}

// without returns f less the keys with any of the prefixes, as a box
// that did not probe them reports it.
func without(f gpuwarden.Facts, prefixes ...string) gpuwarden.Facts {
	out := maps.Clone(f)
	maps.DeleteFunc(out, func(k, _ string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				return true
			}
		}
		return false
	})
	return out
}

func with(f gpuwarden.Facts, kv ...string) gpuwarden.Facts {
	out := maps.Clone(f)
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// TestCanaryReport runs the tail of runCanary (compare, decide, table) on
// fixed facts, so that the verdict, the exit code, what was compared and the
// table are pinned without a GPU or the host's own stack.
func TestCanaryReport(t *testing.T) {
	lock := canary.NewLock(canaryFacts, "h100-a", time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	hostFacts := without(canaryFacts, "gpu.", "driver.", "cuda.")
	tests := []struct {
		name string
		// lockPath is --lock ("" under --no-lock); lock is what it held.
		lockPath string
		lock     *gpuwarden.Lock
		facts    gpuwarden.Facts
		// noGPU is --cpu-ok on a host without a driver.
		noGPU, noFrameworks, noLock, strict, fault bool

		verdict  string
		code     int
		complete bool
		lockRows []string
		golden   string
	}{
		{name: "match", lockPath: "gpuwarden.lock", lock: lock, facts: canaryFacts,
			verdict: "ok", code: 0, complete: true,
			lockRows: []string{"ok: 14 fields match gpuwarden.lock"}, golden: "canary-ok.txt"},
		{name: "cpu-ok counts only the host fields", lockPath: "gpuwarden.lock", lock: lock, facts: hostFacts, noGPU: true,
			verdict: "partial", code: 0, complete: false,
			lockRows: []string{"ok: 5 fields match gpuwarden.lock", "skip: 9 GPU fields not compared: no GPU on this box (--cpu-ok)"},
			golden:   "canary-cpu-ok.txt"},
		{name: "cpu-ok strict", lockPath: "gpuwarden.lock", lock: lock, facts: hostFacts, noGPU: true, strict: true,
			verdict: "partial", code: 1, complete: false,
			lockRows: []string{"ok: 5 fields match gpuwarden.lock", "skip: 9 GPU fields not compared: no GPU on this box (--cpu-ok)"}},
		{name: "no-frameworks against a lock that pins them", lockPath: "gpuwarden.lock", lock: lock,
			facts: without(canaryFacts, "python."), noFrameworks: true,
			verdict: "partial", code: 0, complete: false,
			lockRows: []string{"ok: 12 fields match gpuwarden.lock",
				"skip: 2 framework fields not compared: framework probes off (--no-frameworks)"}},
		{name: "drift", lockPath: "gpuwarden.lock", lock: lock, facts: with(canaryFacts, "gpu.model", "H200", "gpu.vram_gb", "141"),
			verdict: "drift", code: 1, complete: true,
			lockRows: []string{"drift: 2 of 14 compared fields differ from gpuwarden.lock"}, golden: "canary-drift.txt"},
		{name: "host drift under cpu-ok", lockPath: "gpuwarden.lock", lock: lock, facts: with(hostFacts, "os.version_id", "22.04"), noGPU: true,
			verdict: "drift", code: 1, complete: false,
			lockRows: []string{"drift: 1 of 5 compared fields differ from gpuwarden.lock",
				"skip: 9 GPU fields not compared: no GPU on this box (--cpu-ok)"}},
		{name: "missing lock", lockPath: "nope.lock", facts: canaryFacts,
			verdict: "no-lock", code: 1, complete: false,
			lockRows: []string{"missing: no nope.lock here"}, golden: "canary-no-lock.txt"},
		{name: "missing default lock", lockPath: "gpuwarden.lock", facts: canaryFacts,
			verdict: "no-lock", code: 1, complete: false,
			lockRows: []string{"missing: no gpuwarden.lock here"}},
		{name: "missing lock under cpu-ok", lockPath: "gpuwarden.lock", facts: hostFacts, noGPU: true,
			verdict: "no-lock", code: 1, complete: false,
			lockRows: []string{"missing: no gpuwarden.lock here"}},
		{name: "a fault outranks a missing lock", lockPath: "nope.lock", facts: canaryFacts, fault: true,
			verdict: "gpu-fault", code: 2, complete: false,
			lockRows: []string{"missing: no nope.lock here"}},
		{name: "no-lock checks the box alone", facts: canaryFacts, noLock: true, strict: true,
			verdict: "ok", code: 0, complete: true,
			lockRows: []string{"skip: --no-lock: the stack is not compared with a lock"}, golden: "canary-no-lock-flag.txt"},
		{name: "no-lock under cpu-ok is partial", facts: hostFacts, noLock: true, noGPU: true,
			verdict: "partial", code: 0, complete: false,
			lockRows: []string{"skip: --no-lock: the stack is not compared with a lock"}},
		{name: "a lock of GPU fields alone under cpu-ok", lockPath: "gpu.lock",
			lock:  canary.NewLock(without(canaryFacts, "os.", "container.", "python."), "h100-a", time.Time{}),
			facts: hostFacts, noGPU: true, verdict: "partial", code: 0, complete: false,
			lockRows: []string{"skip: no field of gpu.lock compared here", "skip: 9 GPU fields not compared: no GPU on this box (--cpu-ok)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newCanaryReport(tt.lockPath)
			if tt.noGPU {
				r.add("driver", -1, statusSkip, "no NVIDIA driver; --cpu-ok checks the host stack only")
				r.gpuSkipped = true
			} else {
				r.add("driver", -1, statusOK, "driver 580.159.04, CUDA 13.0, 2× H100-SXM")
			}
			if tt.fault {
				r.add("health", 1, statusFail, "Xid 79 (GPU has fallen off the bus)")
			}
			r.Facts = tt.facts
			r.compare(tt.lock, tt.noLock, tt.noGPU, tt.noFrameworks)
			r.decide(tt.strict)

			if r.Verdict != tt.verdict || r.ExitCode != tt.code || r.Complete != tt.complete {
				t.Errorf("verdict %q exit %d complete %v, want %q exit %d complete %v",
					r.Verdict, r.ExitCode, r.Complete, tt.verdict, tt.code, tt.complete)
			}
			var got []string
			for _, c := range r.Checks {
				if c.Name == "lock" {
					got = append(got, c.Status+": "+c.Detail)
				}
			}
			if strings.Join(got, "\n") != strings.Join(tt.lockRows, "\n") {
				t.Errorf("lock rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.lockRows, "\n"))
			}
			if tt.lock != nil {
				if n, want := len(r.Compared)+len(r.Ignored)+len(r.Skipped), len(tt.lock.Fields); n != want {
					t.Errorf("compared+ignored+skipped = %d fields, the lock has %d", n, want)
				}
			}
			if tt.golden == "" {
				return
			}
			var b bytes.Buffer
			if err := r.table(&b); err != nil {
				t.Fatal(err)
			}
			golden(t, tt.golden, b.String())
			if tt.golden == "canary-cpu-ok.txt" {
				b.Reset()
				if err := writeJSON(&b, "canary", r); err != nil {
					t.Fatal(err)
				}
				golden(t, "canary-cpu-ok.json", b.String())
			}
		})
	}
}

func TestCanaryShellWord(t *testing.T) {
	tests := []struct{ in, want string }{
		{"nope.lock", "nope.lock"},
		{"ci/gpu warden.lock", "'ci/gpu warden.lock'"},
		{"it's.lock", `'it'\''s.lock'`},
		{"", "''"},
	}
	for _, tt := range tests {
		if got := shellWord(tt.in); got != tt.want {
			t.Errorf("shellWord(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}
