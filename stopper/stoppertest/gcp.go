package stoppertest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// GCP is a fake of a Compute Engine VM's metadata server and of the
// Compute Engine API calls a stop needs. It follows:
//   - https://cloud.google.com/compute/docs/metadata/querying-metadata
//   - https://cloud.google.com/compute/docs/access/authenticate-workloads
//   - https://cloud.google.com/compute/docs/reference/rest/v1/instances/stop
//   - https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations/get
//   - https://cloud.google.com/compute/docs/reference/rest/v1/instances/get
//   - https://cloud.google.com/compute/docs/reference/rest/v1/instances/testIamPermissions
//
// The metadata server refuses (403) a request without "Metadata-Flavor:
// Google" or with X-Forwarded-For and marks every answer with that header;
// the API refuses a missing or wrong bearer token (401) and a stop the
// service account may not do (403), answers another instance with 404.
type GCP struct {
	// Metadata serves the metadata server (--gcp-metadata).
	Metadata *httptest.Server
	// Compute serves the Compute Engine API (--gcp-compute).
	Compute *httptest.Server
	// MetadataCalls and ComputeCalls record what each one received.
	MetadataCalls, ComputeCalls Recorder

	mu          sync.Mutex
	project     string
	zone, name  string
	token       string
	scopes      []string
	granted     []string
	status      string
	settleAfter int
	stuck       bool
	ops         map[string]int
	stops       int
}

// NewGCP starts the fake for one RUNNING VM whose service account has the
// cloud-platform scope and may stop and get it; the caller closes it.
func NewGCP() *GCP {
	f := &GCP{project: "gpu-project", zone: "europe-west4-a", name: "gpu-vm",
		token:   "ya29.fake-" + strconv.FormatInt(time.Now().UnixNano(), 36),
		scopes:  []string{"https://www.googleapis.com/auth/cloud-platform"},
		granted: []string{"compute.instances.stop", "compute.instances.get"},
		status:  "RUNNING", settleAfter: 1, ops: map[string]int{}}
	f.Metadata = httptest.NewServer(http.HandlerFunc(f.serveMetadata))
	f.Compute = httptest.NewServer(http.HandlerFunc(f.serveCompute))
	return f
}

// Close stops both servers.
func (f *GCP) Close() {
	f.Metadata.Close()
	f.Compute.Close()
}

// Instance is the VM's "projects/…/zones/…/instances/…" name.
func (f *GCP) Instance() string {
	return "projects/" + f.project + "/zones/" + f.zone + "/instances/" + f.name
}

// SetScopes replaces the VM's access scopes.
func (f *GCP) SetScopes(scopes ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scopes = scopes
}

// SetGranted replaces the IAM permissions the service account holds on
// the VM (of those testIamPermissions is asked about).
func (f *GCP) SetGranted(perms ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.granted = perms
}

// SettleAfter sets how many operation polls answer RUNNING before the
// stop is DONE (default 1).
func (f *GCP) SettleAfter(polls int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settleAfter = polls
}

// Stuck keeps the stop's operation RUNNING and the VM STOPPING forever.
func (f *GCP) Stuck() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stuck = true
}

// Status returns the VM's status now.
func (f *GCP) Status() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status
}

// Stops counts the stop requests accepted.
func (f *GCP) Stops() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stops
}

func (f *GCP) serveMetadata(w http.ResponseWriter, r *http.Request) {
	f.MetadataCalls.record(r)
	w.Header().Set("Metadata-Flavor", "Google")
	if r.Header.Get("Metadata-Flavor") != "Google" || r.Header.Get("X-Forwarded-For") != "" {
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, "Missing Metadata-Flavor:Google header.")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.URL.Path {
	case "/computeMetadata/v1/project/project-id":
		fmt.Fprint(w, f.project)
	case "/computeMetadata/v1/instance/zone":
		fmt.Fprint(w, "projects/123456789012/zones/"+f.zone)
	case "/computeMetadata/v1/instance/name":
		fmt.Fprint(w, f.name)
	case "/computeMetadata/v1/instance/service-accounts/default/scopes":
		fmt.Fprint(w, strings.Join(f.scopes, "\n")+"\n")
	case "/computeMetadata/v1/instance/service-accounts/default/token":
		writeJSON(w, http.StatusOK, map[string]any{"access_token": f.token, "expires_in": 3599, "token_type": "Bearer"})
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// gcpError answers with Google's error shape.
func gcpError(w http.ResponseWriter, status int, reason, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": status, "message": msg,
		"errors": []map[string]string{{"message": msg, "domain": "global", "reason": reason}}}})
}

func (f *GCP) serveCompute(w http.ResponseWriter, r *http.Request) {
	c := f.ComputeCalls.record(r)
	if tok, ok := bearer(r.Header); !ok || tok != f.token {
		gcpError(w, http.StatusUnauthorized, "authError",
			"Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	zoneBase := "/compute/v1/projects/" + f.project + "/zones/" + f.zone
	inst := zoneBase + "/instances/" + f.name
	switch p := r.URL.Path; {
	case p == inst && r.Method == http.MethodGet:
		if !slices.Contains(f.granted, "compute.instances.get") {
			gcpError(w, http.StatusForbidden, "forbidden", "Required 'compute.instances.get' permission for '"+f.Instance()+"'")
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"kind": "compute#instance", "name": f.name, "status": f.status,
			"zone": f.Compute.URL + zoneBase})
	case p == inst+"/testIamPermissions" && r.Method == http.MethodPost:
		var req struct {
			Permissions []string `json:"permissions"`
		}
		if err := json.Unmarshal([]byte(c.Body), &req); err != nil || len(req.Permissions) == 0 {
			gcpError(w, http.StatusBadRequest, "required", "Required field 'permissions' not specified")
			return
		}
		var have []string
		for _, perm := range req.Permissions {
			if slices.Contains(f.granted, perm) {
				have = append(have, perm)
			}
		}
		out := map[string]any{}
		if len(have) > 0 { // the API leaves the field out when none is held
			out["permissions"] = have
		}
		writeJSON(w, http.StatusOK, out)
	case p == inst+"/stop" && r.Method == http.MethodPost:
		if !slices.Contains(f.granted, "compute.instances.stop") {
			gcpError(w, http.StatusForbidden, "forbidden", "Required 'compute.instances.stop' permission for '"+f.Instance()+"'")
			return
		}
		f.stops++
		name := fmt.Sprintf("operation-%d-%d", time.Now().UnixNano(), f.stops)
		f.ops[name] = 0
		f.status = "STOPPING"
		writeJSON(w, http.StatusOK, f.operation(zoneBase, name, "RUNNING"))
	case strings.HasPrefix(p, zoneBase+"/operations/") && r.Method == http.MethodGet:
		name := strings.TrimPrefix(p, zoneBase+"/operations/")
		polls, ok := f.ops[name]
		if !ok {
			gcpError(w, http.StatusNotFound, "notFound", "The resource '"+p+"' was not found")
			return
		}
		polls++
		f.ops[name] = polls
		status := "RUNNING"
		if !f.stuck && polls > f.settleAfter {
			status, f.status = "DONE", "TERMINATED"
		}
		writeJSON(w, http.StatusOK, f.operation(zoneBase, name, status))
	case strings.HasPrefix(p, "/compute/v1/projects/"):
		gcpError(w, http.StatusNotFound, "notFound", "The resource '"+strings.TrimPrefix(p, "/compute/v1/")+"' was not found")
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// operation is a zone operation document.
func (f *GCP) operation(zoneBase, name, status string) map[string]any {
	return map[string]any{"kind": "compute#operation", "name": name, "operationType": "stop", "status": status,
		"targetLink": f.Compute.URL + zoneBase + "/instances/" + f.name,
		"selfLink":   f.Compute.URL + zoneBase + "/operations/" + name, "zone": f.Compute.URL + zoneBase, "progress": 0}
}
