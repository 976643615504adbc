package stoppertest

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// Lambda is a fake of Lambda Cloud's API for one instance. It follows
// https://docs-api.lambda.ai/api/cloud (Lambda Cloud API 1.5: GET
// /instances/{id}, POST /instance-operations/terminate with
// {"instance_ids": […]}, Bearer or Basic auth with the API key, errors as
// {"error": {"code", "message", "suggestion"}}, statuses active, booting,
// unhealthy, terminating, terminated).
//
// It serves under /api/v1 (give the stopper URL+"/api/v1").
type Lambda struct {
	*httptest.Server
	Recorder

	mu          sync.Mutex
	id, key     string
	status      string
	settleAfter int
	stuck       bool
	goneAfter   bool
	reads       int
	terminated  int
}

// NewLambda starts the fake for one active instance reachable with key;
// the caller closes it.
func NewLambda(id, key string) *Lambda {
	f := &Lambda{id: id, key: key, status: "active"}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

// API is the base URL to give the stopper (--lambda-api).
func (f *Lambda) API() string { return f.URL + "/api/v1" }

// SettleAfter sets how many reads after the terminate still say terminating.
func (f *Lambda) SettleAfter(reads int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settleAfter = reads
}

// Stuck keeps the instance terminating forever.
func (f *Lambda) Stuck() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stuck = true
}

// Vanish makes a terminated instance disappear (404) instead of reading
// terminated.
func (f *Lambda) Vanish() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.goneAfter = true
}

// Terminations counts the terminate requests that named the instance.
func (f *Lambda) Terminations() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.terminated
}

// Status is the instance's status now.
func (f *Lambda) Status() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status
}

// lambdaError answers with Lambda's error shape.
func lambdaError(w http.ResponseWriter, status int, code, msg, suggestion string) {
	e := map[string]any{"code": code, "message": msg}
	if suggestion != "" {
		e["suggestion"] = suggestion
	}
	writeJSON(w, status, map[string]any{"error": e})
}

// authorized accepts "Bearer <key>", "Basic base64(<key>:)" and "Basic <key>".
func (f *Lambda) authorized(h http.Header) bool {
	if tok, ok := bearer(h); ok {
		return tok == f.key
	}
	v := h.Get("Authorization")
	if len(v) > 6 && strings.EqualFold(v[:6], "basic ") {
		raw := strings.TrimSpace(v[6:])
		if raw == f.key {
			return true
		}
		dec, err := base64.StdEncoding.DecodeString(raw)
		return err == nil && strings.TrimSuffix(string(dec), ":") == f.key
	}
	return false
}

func (f *Lambda) serve(w http.ResponseWriter, r *http.Request) {
	c := f.record(r)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.authorized(r.Header) {
		lambdaError(w, http.StatusUnauthorized, "global/invalid-api-key", "API key was invalid, expired, or deleted.",
			"Check your API key or create a new one, then try again.")
		return
	}
	switch {
	case r.URL.Path == "/api/v1/instances/"+f.id && r.Method == http.MethodGet:
		if f.terminated > 0 && !f.stuck {
			if f.reads >= f.settleAfter {
				f.status = "terminated"
			}
			f.reads++
			if f.status == "terminated" && f.goneAfter {
				lambdaError(w, http.StatusNotFound, "global/object-does-not-exist", "Specified instance does not exist.", "")
				return
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{"data": f.instance()})
	case strings.HasPrefix(r.URL.Path, "/api/v1/instances/") && r.Method == http.MethodGet:
		lambdaError(w, http.StatusNotFound, "global/object-does-not-exist", "Specified instance does not exist.", "")
	case r.URL.Path == "/api/v1/instance-operations/terminate" && r.Method == http.MethodPost:
		var req struct {
			IDs []string `json:"instance_ids"`
		}
		if err := json.Unmarshal([]byte(c.Body), &req); err != nil || len(req.IDs) == 0 {
			lambdaError(w, http.StatusBadRequest, "global/invalid-parameters", "Invalid request body: instance_ids is required.", "")
			return
		}
		var out []map[string]any
		for _, id := range req.IDs {
			if id != f.id {
				lambdaError(w, http.StatusNotFound, "global/object-does-not-exist", "Specified instance does not exist.", "")
				return
			}
			f.terminated++
			f.status = "terminating"
			out = append(out, f.instance())
		}
		writeJSON(w, http.StatusOK, map[string]any{"data": map[string]any{"terminated_instances": out}})
	default:
		lambdaError(w, http.StatusNotFound, "global/object-does-not-exist", "Not found.", "")
	}
}

// instance is the instance document, reduced to what the docs require.
func (f *Lambda) instance() map[string]any {
	return map[string]any{"id": f.id, "name": "training-node-1", "ip": "198.51.100.7", "status": f.status,
		"ssh_key_names": []string{"laptop"}, "file_system_names": []string{},
		"region":        map[string]string{"name": "us-east-1", "description": "Virginia, USA"},
		"instance_type": map[string]any{"name": "gpu_1x_h100_pcie", "price_cents_per_hour": 249}}
}
