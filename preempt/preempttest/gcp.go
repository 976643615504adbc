package preempttest

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
)

// GCP is a fake Compute Engine metadata server: it refuses (403) any request
// without Metadata-Flavor: Google, and sets that header, an ETag and
// Content-Type: application/text on every answer, as the real one does.
type GCP struct {
	*httptest.Server
	raw overrides

	mu          sync.Mutex
	preempted   bool
	maintenance string
	forbidden   int
}

// NewGCP starts the fake on 127.0.0.1 with preempted FALSE and
// maintenance-event NONE; the caller closes it.
func NewGCP() *GCP {
	f := &GCP{maintenance: "NONE"}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

// Preempt sets instance/preempted to TRUE.
func (f *GCP) Preempt() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.preempted = true
}

// Maintenance sets instance/maintenance-event: MIGRATE_ON_HOST_MAINTENANCE,
// TERMINATE_ON_HOST_MAINTENANCE, or NONE to end the window.
func (f *GCP) Maintenance(value string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.maintenance = value
}

// Clear sets preempted FALSE and maintenance-event NONE, and drops canned answers.
func (f *GCP) Clear() {
	f.mu.Lock()
	f.preempted, f.maintenance = false, "NONE"
	f.mu.Unlock()
	f.raw.clear()
}

// Respond replaces the answer for path (e.g. "/computeMetadata/v1/instance/preempted")
// with status and body; the header check and the response headers still apply.
func (f *GCP) Respond(path string, status int, body string) { f.raw.set(path, status, body) }

// Forbidden counts requests refused for lacking Metadata-Flavor: Google.
func (f *GCP) Forbidden() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.forbidden
}

// serve routes one request.
func (f *GCP) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Metadata-Flavor", "Google")
	w.Header().Set("Server", "Metadata Server for VM")
	// The metadata server rejects proxied requests and those without the header.
	if r.Header.Get("Metadata-Flavor") != "Google" || r.Header.Get("X-Forwarded-For") != "" {
		f.mu.Lock()
		f.forbidden++
		f.mu.Unlock()
		w.Header().Set("Content-Type", "text/html; charset=UTF-8")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, "Your client does not have permission to get URL %s from this server. Missing Metadata-Flavor:Google header.\n", r.URL.Path)
		return
	}
	if r.Method != http.MethodGet {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/text")
	if f.raw.serve(w, r.URL.Path) {
		return
	}
	f.mu.Lock()
	var value string
	found := true
	switch r.URL.Path {
	case "/", "/computeMetadata/":
		value = "computeMetadata/\n"
		if r.URL.Path != "/" {
			value = "v1/\n"
		}
	case "/computeMetadata/v1/instance/preempted":
		value = "FALSE"
		if f.preempted {
			value = "TRUE"
		}
	case "/computeMetadata/v1/instance/maintenance-event":
		value = f.maintenance
	case "/computeMetadata/v1/instance/id":
		value = "4520031799277581759"
	default:
		found = false
	}
	f.mu.Unlock()
	if !found {
		w.Header().Set("Content-Type", "text/html; charset=UTF-8")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, "The requested URL %s was not found on this server.\n", r.URL.Path)
		return
	}
	w.Header().Set("ETag", fmt.Sprintf("%x", sha256.Sum256([]byte(value)))[:16])
	fmt.Fprint(w, value)
}
