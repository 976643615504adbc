package preempttest

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
)

// GCPMachineTypePrefix is how instance/machine-type names the type:
// projects/PROJECT_NUMBER/machineTypes/TYPE (Google's "Predefined metadata
// keys" page).
const GCPMachineTypePrefix = "projects/123456789012/machineTypes/"

// GCP is a fake Compute Engine metadata server: it refuses (403) any request
// without Metadata-Flavor: Google, and sets that header, an ETag and
// Content-Type: application/text on every answer, as the real one does. It
// serves instance/preempted, instance/maintenance-event,
// instance/machine-type and instance/scheduling/on-host-maintenance.
type GCP struct {
	*httptest.Server
	raw overrides

	mu           sync.Mutex
	preempted    bool
	maintenance  string
	machineType  string
	onHostMaint  string
	forbidden    int
	machineReads int
}

// NewGCP starts the fake on 127.0.0.1 as an n1-standard-8 that migrates
// (on-host-maintenance MIGRATE), with preempted FALSE and maintenance-event
// NONE; the caller closes it.
func NewGCP() *GCP {
	f := &GCP{maintenance: "NONE", machineType: "n1-standard-8", onHostMaint: "MIGRATE"}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

// GPUVM makes the fake an accelerator-optimized VM: machine type mt (such
// as a3-highgpu-8g) with on-host-maintenance TERMINATE, the only policy a
// VM with GPUs may have because GPUs cannot be live-migrated (Google's
// "Handle GPU host maintenance events").
func (f *GCP) GPUVM(mt string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.machineType, f.onHostMaint = mt, "TERMINATE"
}

// SetScheduling sets the machine type and on-host-maintenance (MIGRATE or
// TERMINATE) as the metadata server reports them.
func (f *GCP) SetScheduling(machineType, onHostMaintenance string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.machineType, f.onHostMaint = machineType, onHostMaintenance
}

// MachineTypeReads counts reads of instance/machine-type, so a test sees
// that a source reads what never changes once.
func (f *GCP) MachineTypeReads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.machineReads
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
	case "/computeMetadata/v1/instance/machine-type":
		f.machineReads++
		value = GCPMachineTypePrefix + f.machineType
	case "/computeMetadata/v1/instance/scheduling/on-host-maintenance":
		value = f.onHostMaint
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
