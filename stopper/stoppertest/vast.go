package stoppertest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
)

// Vast is a fake of Vast.ai's API for one instance. It follows:
//   - https://docs.vast.ai/api/stop-instance (PUT /api/v0/instances/{id}/ {"state": "stopped"})
//   - https://docs.vast.ai/api/show-instance ({"instances": {…}})
//   - https://docs.vast.ai/cli/reference/show-instance (actual_status, intended_status, cur_state)
//   - https://docs.vast.ai/api-reference/authentication (Authorization: Bearer)
//
// It serves under /api/v0 (give the stopper URL+"/api/v0"), refuses a
// missing or wrong key (401), a scoped key's stop (403), a body other than
// a state (400) and another instance (404).
type Vast struct {
	*httptest.Server
	Recorder

	mu          sync.Mutex
	id          int
	key         string
	readOnly    bool
	actual      string
	intended    string
	settleAfter int
	stuck       bool
	reads       int
	stops       int
}

// NewVast starts the fake for one running instance reachable with key;
// the caller closes it.
func NewVast(id int, key string) *Vast {
	f := &Vast{id: id, key: key, actual: "running", intended: "running"}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

// API is the base URL to give the stopper (--vast-api).
func (f *Vast) API() string { return f.URL + "/api/v0" }

// ReadOnly makes the key one whose scope allows reads only.
func (f *Vast) ReadOnly() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readOnly = true
}

// SettleAfter sets how many reads after the stop still say running.
func (f *Vast) SettleAfter(reads int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settleAfter = reads
}

// Stuck keeps actual_status running after the stop was accepted.
func (f *Vast) Stuck() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stuck = true
}

// Stops counts the stop requests accepted.
func (f *Vast) Stops() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stops
}

// ActualStatus is the instance's actual_status now.
func (f *Vast) ActualStatus() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.actual
}

// vastError answers with Vast's error shape.
func vastError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"success": false, "error": code, "msg": msg})
}

func (f *Vast) serve(w http.ResponseWriter, r *http.Request) {
	c := f.record(r)
	f.mu.Lock()
	defer f.mu.Unlock()
	if tok, ok := bearer(r.Header); !ok || tok != f.key {
		vastError(w, http.StatusUnauthorized, "auth_error", "Invalid user key")
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/api/v0/instances/")
	if !ok || !strings.HasSuffix(rest, "/") {
		vastError(w, http.StatusNotFound, "not_found", "Not found")
		return
	}
	if rest != strconv.Itoa(f.id)+"/" {
		vastError(w, http.StatusNotFound, "no_such_instance", "Instance "+strings.TrimSuffix(rest, "/")+" not found.")
		return
	}
	switch r.Method {
	case http.MethodGet:
		if f.stops > 0 && !f.stuck {
			if f.reads >= f.settleAfter {
				f.actual, f.intended = "stopped", "stopped"
			}
			f.reads++
		}
		writeJSON(w, http.StatusOK, map[string]any{"instances": map[string]any{
			"id": f.id, "actual_status": f.actual, "intended_status": f.intended, "cur_state": f.intended,
			"next_state": f.intended, "gpu_name": "RTX 4090", "num_gpus": 1, "dph_total": 0.42,
			"status_msg": "success, running pytorch/pytorch_latest/ssh",
		}})
	case http.MethodPut:
		var body map[string]any
		if err := json.Unmarshal([]byte(c.Body), &body); err != nil {
			vastError(w, http.StatusBadRequest, "invalid_args", "Request body is not JSON")
			return
		}
		if state, _ := body["state"].(string); state != "stopped" && state != "running" {
			vastError(w, http.StatusBadRequest, "invalid_args", "state must be running or stopped")
			return
		}
		if f.readOnly {
			vastError(w, http.StatusForbidden, "forbidden", "API key lacks permission instance_write")
			return
		}
		f.stops++
		f.intended = "stopped"
		writeJSON(w, http.StatusOK, map[string]any{"success": true, "msg": "Instance stop initiated successfully"})
	default:
		vastError(w, http.StatusMethodNotAllowed, "method_not_allowed", "Method not allowed")
	}
}
