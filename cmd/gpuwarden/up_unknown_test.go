package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestUpNeverStopsABusyMIGBox: under MIG the device's utilization is
// unknown; the agent decides per instance from processes and memory, so a
// box whose instances run work is never stopped, and status shows both
// instances with their processes and the utilization as unknown, not 0 %.
func TestUpNeverStopsABusyMIGBox(t *testing.T) {
	dir := t.TempDir()
	p := startUp(t, dir, "--simulate", "1xH100,load=80,mig=2", "--idle-window", "3s", "--dry-run")
	url := p.url(t)
	time.Sleep(5 * time.Second)
	if strings.Contains(p.text(), "would stop") || strings.Contains(p.text(), "idle since") {
		t.Fatalf("a busy MIG box got an idle warning or stop:\n%s", p.text())
	}
	r := gw(t, dir, "status", "--addr", strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/"))
	if r.code != 0 {
		t.Fatalf("status: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"0/0  MIG 3g.40gb  unknown", "0/1  MIG 3g.40gb  unknown", "(python 5000)", "(python 5001)",
		"busy: GPU 0 MIG 0 (3g.40gb) runs PID 5000"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, r.stdout)
		}
	}
	if regexp.MustCompile(`(?m)^0[ /].* 0%`).MatchString(r.stdout) {
		t.Errorf("status shows a 0%% utilization under MIG:\n%s", r.stdout)
	}
	var st struct {
		Last struct {
			GPUs []struct {
				Util    *float64          `json:"util_percent"`
				Unknown map[string]string `json:"unknown"`
				MIG     []struct {
					Profile   string            `json:"profile"`
					Util      *float64          `json:"util_percent"`
					Processes []json.RawMessage `json:"processes"`
				} `json:"mig"`
			} `json:"gpus"`
		} `json:"last"`
	}
	if err := json.Unmarshal([]byte(get(t, url+"api/v1/status")), &st); err != nil || len(st.Last.GPUs) != 1 {
		t.Fatalf("status JSON: %v %+v", err, st)
	}
	g := st.Last.GPUs[0]
	if g.Util != nil || g.Unknown["util_percent"] != "mig" || len(g.MIG) != 2 || g.MIG[0].Util != nil || len(g.MIG[1].Processes) != 1 {
		t.Errorf("status JSON GPU = %+v, want utilization null and unknown under MIG, two instances with a process each", g)
	}
	m := get(t, url+"metrics")
	for _, want := range []string{`(?m)^gpuwarden_gpu_field_unknown\{field="util_percent",gpu="0",.*reason="mig".*\} 1$`,
		`(?m)^gpuwarden_mig_memory_used_bytes\{gpu="0",mig="1",profile="3g.40gb",.*\} 3\.`, `(?m)^gpuwarden_mig_processes\{.*mig="0".*\} 1$`} {
		if !regexp.MustCompile(want).MatchString(m) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(m, `gpuwarden_gpu_utilization_ratio{`) {
		t.Errorf("/metrics exports a utilization sample the driver never gave")
	}
}

// TestUpTelemetryLost: a driver that hangs raises one telemetry-lost alert
// through the webhook, the box is never stopped while blind, and once the
// hang clears an all-clear goes out and status reads the GPU again.
func TestUpTelemetryLost(t *testing.T) {
	var mu sync.Mutex
	var kinds []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var e struct {
			Kind string `json:"kind"`
		}
		b, _ := io.ReadAll(r.Body)
		if json.Unmarshal(b, &e) == nil {
			mu.Lock()
			kinds = append(kinds, e.Kind)
			mu.Unlock()
		}
	}))
	defer hook.Close()
	dir := t.TempDir()
	// The agent gives the inventory 5 s at start, then samples every
	// second: a 10 s hang leaves it blind for about five samples.
	p := startUp(t, dir, "--simulate", "1xH100,load=80,fault=nvml-hang:10s", "--idle-window", "3s", "--dry-run",
		"--webhook", hook.URL, "--webhook-format", "json")
	url := p.url(t)
	p.wait(t, `kind=telemetry-lost`, 15*time.Second)
	// The alert goes out inside the tick; the status follows at its end.
	var st struct {
		Telemetry struct {
			Lost bool `json:"lost"`
		} `json:"telemetry"`
		Warnings []string `json:"warnings"`
	}
	for deadline := time.Now().Add(2 * time.Second); !st.Telemetry.Lost && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err := json.Unmarshal([]byte(get(t, url+"api/v1/status")), &st); err != nil {
			t.Fatal(err)
		}
	}
	if !st.Telemetry.Lost || len(st.Warnings) == 0 || !strings.Contains(st.Warnings[0], "telemetry lost") {
		t.Errorf("status while blind: telemetry %+v warnings %q", st.Telemetry, st.Warnings)
	}
	if m := get(t, url+"metrics"); !strings.Contains(m, "gpuwarden_telemetry_lost 1") {
		t.Errorf("/metrics does not say telemetry is lost")
	}
	addr := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/")
	if r := gw(t, dir, "status", "--addr", addr); !strings.Contains(r.stdout, "GPUs      unknown: the driver has not answered") ||
		!strings.Contains(r.stdout, "Warning   telemetry lost since") {
		t.Errorf("status while blind does not say so:\n%s", r.stdout)
	}
	p.wait(t, `kind=telemetry-restored`, 15*time.Second)
	time.Sleep(2 * time.Second)
	if m := get(t, url+"metrics"); !strings.Contains(m, "gpuwarden_telemetry_lost 0") || !strings.Contains(m, `gpuwarden_gpu_utilization_ratio{`) {
		t.Errorf("/metrics after recovery: telemetry_lost not 0 or no utilization")
	}
	r := gw(t, dir, "status", "--addr", addr)
	if !regexp.MustCompile(`(?m)^0 +H100-SXM +80%`).MatchString(r.stdout) {
		t.Errorf("status after recovery does not read the GPU:\n%s", r.stdout)
	}
	p.kill(syscall.SIGTERM)
	if strings.Contains(p.text(), "would stop") {
		t.Errorf("the box was stopped:\n%s", p.text())
	}
	mu.Lock()
	defer mu.Unlock()
	lost, restored := 0, 0
	for _, k := range kinds {
		switch k {
		case "telemetry-lost":
			lost++
		case "telemetry-restored":
			restored++
		}
	}
	if lost != 1 || restored != 1 {
		t.Errorf("webhook got %v: want one telemetry-lost and one telemetry-restored", kinds)
	}
}

// TestCanaryMIGLayoutAndXIDSources: a lock made on one MIG layout finds a
// box with another as drift, and a canary that cannot read an Xid source
// says so instead of "no Xid errors".
func TestCanaryMIGLayoutAndXIDSources(t *testing.T) {
	dir := t.TempDir()
	if r := gw(t, dir, "lock", "--simulate", "1xH100,mig=2", "--no-frameworks"); r.code != 0 {
		t.Fatalf("lock: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r := gw(t, dir, "canary", "--simulate", "1xH100,mig=3", "--no-frameworks")
	if r.code != 1 || !strings.Contains(r.stdout, "gpu.mig_layout  GI 1/CI 0 3g.40gb; GI 2/CI 0 3g.40gb → GI 1/CI 0 2g.27gb") {
		t.Errorf("canary on another MIG layout: exit %d, want 1 with gpu.mig_layout drift\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := gw(t, dir, "canary", "--simulate", "1xH100,mig=2", "--no-frameworks"); r.code != 0 {
		t.Errorf("canary on the locked layout: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = gw(t, dir, "canary", "--simulate", "1xH100,fault=no-kmsg", "--no-frameworks", "--no-lock", "-o", "json")
	if !strings.Contains(r.stdout, `"status": "warn"`) && !strings.Contains(r.stdout, `"status":"warn"`) ||
		!strings.Contains(r.stdout, "Xid source unavailable: kmsg unavailable") {
		t.Errorf("canary without kmsg does not warn about the Xid source:\n%s", r.stdout)
	}
}
