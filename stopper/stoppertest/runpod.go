package stoppertest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// RunPod is a fake of RunPod's REST API for one pod. It follows:
//   - https://docs.runpod.io/api-reference/pods/POST/pods/podId/stop
//   - https://docs.runpod.io/api-reference/pods/GET/pods/podId
//
// It serves under /v1 (give the stopper URL+"/v1"), refuses a missing or
// wrong "Authorization: Bearer" key (401), a read-only key's stop (403)
// and another pod (404).
type RunPod struct {
	*httptest.Server
	Recorder

	mu          sync.Mutex
	pod, key    string
	readOnly    bool
	desired     string
	settleAfter int
	stuck       bool
	reads       int
	stops       int
}

// NewRunPod starts the fake for one RUNNING pod reachable with key; the
// caller closes it.
func NewRunPod(pod, key string) *RunPod {
	f := &RunPod{pod: pod, key: key, desired: "RUNNING"}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

// API is the base URL to give the stopper (--runpod-api).
func (f *RunPod) API() string { return f.URL + "/v1" }

// ReadOnly makes the key a read-only one: reads work, a stop is refused.
func (f *RunPod) ReadOnly() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readOnly = true
}

// SettleAfter sets how many reads after the stop still say RUNNING.
func (f *RunPod) SettleAfter(reads int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settleAfter = reads
}

// Stuck keeps the pod RUNNING after the stop was accepted.
func (f *RunPod) Stuck() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stuck = true
}

// Stops counts the stop requests accepted.
func (f *RunPod) Stops() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stops
}

// DesiredStatus is the pod's desiredStatus now.
func (f *RunPod) DesiredStatus() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.desired
}

func (f *RunPod) serve(w http.ResponseWriter, r *http.Request) {
	f.record(r)
	f.mu.Lock()
	defer f.mu.Unlock()
	if tok, ok := bearer(r.Header); !ok || tok != f.key {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized: invalid or missing API key"})
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/pods/")
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "not found"})
		return
	}
	id, action, _ := strings.Cut(rest, "/")
	if id != f.pod {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "pod not found"})
		return
	}
	switch {
	case action == "" && r.Method == http.MethodGet:
		if f.stops > 0 && !f.stuck {
			if f.reads >= f.settleAfter {
				f.desired = "EXITED"
			}
			f.reads++
		}
		writeJSON(w, http.StatusOK, f.document())
	case action == "stop" && r.Method == http.MethodPost:
		if f.readOnly {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "Forbidden: API key does not have write access"})
			return
		}
		f.stops++
		writeJSON(w, http.StatusOK, f.document())
	default:
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method not allowed"})
	}
}

// document is the pod as the docs' example shows it, reduced.
func (f *RunPod) document() map[string]any {
	return map[string]any{"id": f.pod, "name": "gpu pod", "desiredStatus": f.desired, "costPerHr": "0.74",
		"imageName": "runpod/pytorch:2.1.0-py3.10-cuda11.8.0-devel-ubuntu22.04", "volumeInGb": 20,
		"lastStatusChange": "Rented by User: " + time.Now().UTC().Format(time.RFC1123)}
}
