package preempttest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"time"
)

// AzureEvent is one Scheduled Events entry, field names as Microsoft's
// documentation shows them for api-version 2020-07-01.
type AzureEvent struct {
	EventID           string   `json:"EventId"`
	EventType         string   `json:"EventType"`
	ResourceType      string   `json:"ResourceType"`
	Resources         []string `json:"Resources"`
	EventStatus       string   `json:"EventStatus"`
	NotBefore         string   `json:"NotBefore"`
	Description       string   `json:"Description"`
	EventSource       string   `json:"EventSource"`
	DurationInSeconds int      `json:"DurationInSeconds"`
}

// AzureTimeLayout is NotBefore's RFC 1123 form ("Mon, 19 Sep 2016 18:29:47 GMT").
const AzureTimeLayout = http.TimeFormat

// AzureISOLayout is the ISO 8601 form of NotBefore that Microsoft's
// Scheduled Events mock server (Azure-Samples) sends instead of the RFC 1123
// form the documentation shows.
const AzureISOLayout = "2006-01-02T15:04:05Z"

// AzureVMName is the fake VM's compute.name, and the Resources entry of an
// event Schedule fills in.
const AzureVMName = "fake-vm"

// Azure is a fake Azure Instance Metadata Service written from Microsoft's
// Scheduled Events documentation (learn.microsoft.com, "Azure Metadata
// Service: Scheduled Events for Linux VMs") and the documented behaviour of
// the Azure-Samples Scheduled Events mock server:
//   - it refuses (400) requests without the Metadata: true header or without
//     api-version, as IMDS does;
//   - it serves the instance document (compute.name) and Scheduled Events,
//     which lists every event of the availability set or scale-set placement
//     group, siblings' included: Resources says whose it is;
//   - a StartRequests POST approves events: an approved event stays listed,
//     now Started with a blank NotBefore, until Remove (Azure drops an event
//     only once it is done);
//   - Enabling makes the first calls hang, as Azure's first call does for up
//     to two minutes while it enables the service.
type Azure struct {
	*httptest.Server
	raw overrides

	mu          sync.Mutex
	name        string
	incarnation int
	events      []AzureEvent
	rejected    int
	approved    []string
	// enabling is how long Scheduled Events takes to answer after the first
	// request; enabledAt is when it answers, zero before the first request.
	enabling  time.Duration
	enabledAt time.Time
	calls     int
}

// NewAzure starts the fake on 127.0.0.1 with no events, named AzureVMName;
// the caller closes it.
func NewAzure() *Azure {
	f := &Azure{incarnation: 1, name: AzureVMName}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

// SetName changes the VM's compute.name in the instance document.
func (f *Azure) SetName(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.name = name
}

// Enabling makes Scheduled Events answer only d after its first request:
// every GET before then waits (or ends when the client gives up), as
// Azure's first call does while it enables the service for the VM.
func (f *Azure) Enabling(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.enabling, f.enabledAt = d, time.Time{}
}

// Calls counts Scheduled Events GETs, answered or not.
func (f *Azure) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// Start moves an event to Started with a blank NotBefore, as Azure does when
// it begins (on approval or at NotBefore).
func (f *Azure) Start(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.startLocked(id)
}

// Complete lists an event as Completed, the last state Microsoft's mock
// server walks an event through (Azure itself drops a done event: Remove).
func (f *Azure) Complete(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.events {
		if f.events[i].EventID == id {
			f.events[i].EventStatus, f.events[i].NotBefore = "Completed", ""
			f.incarnation++
		}
	}
}

// startLocked is Start with f.mu held.
func (f *Azure) startLocked(id string) {
	for i := range f.events {
		if f.events[i].EventID == id && f.events[i].EventStatus != "Started" {
			f.events[i].EventStatus, f.events[i].NotBefore = "Started", ""
			f.incarnation++
		}
	}
}

// HardwareFailure lists a Reboot that is already Started with a blank
// NotBefore and was never Scheduled, as Microsoft documents for a VM whose
// host failed, and returns its EventId.
func (f *Azure) HardwareFailure() string {
	return f.Schedule(AzureEvent{
		EventType: "Reboot", EventStatus: "Started", DurationInSeconds: -1,
		Description: "Virtual machine is being restarted because of a host hardware failure.",
	})
}

// Schedule adds an event and returns its EventId; empty fields get the
// defaults a platform event has (a fresh ID, VirtualMachine, this VM as the
// only resource, Scheduled, Platform). DocumentIncarnation goes up, as it
// does on every change.
func (f *Azure) Schedule(ev AzureEvent) string {
	if ev.EventID == "" {
		id := randomID(16)
		ev.EventID = fmt.Sprintf("%s-%s-%s-%s-%s", id[:8], id[8:12], id[12:16], id[16:20], id[20:])
	}
	if ev.ResourceType == "" {
		ev.ResourceType = "VirtualMachine"
	}
	if ev.Resources == nil {
		f.mu.Lock()
		ev.Resources = []string{f.name}
		f.mu.Unlock()
	}
	if ev.EventStatus == "" {
		ev.EventStatus = "Scheduled"
	}
	if ev.EventSource == "" {
		ev.EventSource = "Platform"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, ev)
	f.incarnation++
	return ev.EventID
}

// Preempt schedules a Spot eviction NotBefore the given time (Azure gives at
// least 30 s) and returns its EventId.
func (f *Azure) Preempt(notBefore time.Time) string {
	return f.Schedule(AzureEvent{
		EventType:         "Preempt",
		NotBefore:         notBefore.UTC().Format(AzureTimeLayout),
		DurationInSeconds: -1,
		Description:       "Virtual machine is being preempted.",
	})
}

// Remove withdraws an event, as Azure does once it completes or is canceled.
func (f *Azure) Remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = slices.DeleteFunc(f.events, func(e AzureEvent) bool { return e.EventID == id })
	f.incarnation++
}

// Respond replaces the answer for path (e.g. "/metadata/scheduledevents")
// with status and body; the header check still applies.
func (f *Azure) Respond(path string, status int, body string) { f.raw.set(path, status, body) }

// Approved returns the EventIds approved so far, in order, including IDs
// that named no listed event, so a test sees exactly what was sent.
func (f *Azure) Approved() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.approved)
}

// Rejected counts requests refused for a missing header or api-version.
func (f *Azure) Rejected() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rejected
}

// serve routes one request.
func (f *Azure) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	reject := func(msg string) {
		f.mu.Lock()
		f.rejected++
		f.mu.Unlock()
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]string{"error": msg})
	}
	if r.Header.Get("Metadata") != "true" {
		reject("Bad request. Required metadata header not specified")
		return
	}
	if r.URL.Query().Get("api-version") == "" {
		reject("Bad request. api-version was not specified in the request. For more information refer to aka.ms/azureimds")
		return
	}
	if r.Method == http.MethodPost && r.URL.Path == "/metadata/scheduledevents" {
		f.serveStart(w, r)
		return
	}
	if r.Method != http.MethodGet {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	if f.raw.serve(w, r.URL.Path) {
		return
	}
	if r.URL.Path == "/metadata/scheduledevents" && !f.waitEnabled(r) {
		return
	}
	var doc any
	f.mu.Lock()
	switch r.URL.Path {
	case "/metadata/scheduledevents":
		events := slices.Clone(f.events)
		if events == nil {
			events = []AzureEvent{}
		}
		doc = map[string]any{"DocumentIncarnation": f.incarnation, "Events": events}
	case "/metadata/instance":
		doc = map[string]any{
			"compute": map[string]any{"azEnvironment": "AzurePublicCloud", "name": f.name, "vmId": "02aab8a4-74ef-476e-8182-f6d2ba4166a6", "priority": "Spot"},
			"network": map[string]any{"interface": []any{}},
		}
	}
	f.mu.Unlock()
	if doc == nil {
		w.WriteHeader(http.StatusNotFound)
		json.NewEncoder(w).Encode(map[string]string{"error": "Not found"})
		return
	}
	json.NewEncoder(w).Encode(doc)
}

// waitEnabled holds a Scheduled Events GET until the service is enabled,
// starting the clock on the first request; false when the client gave up.
func (f *Azure) waitEnabled(r *http.Request) bool {
	f.mu.Lock()
	f.calls++
	if f.enabledAt.IsZero() {
		f.enabledAt = time.Now().Add(f.enabling)
	}
	wait := time.Until(f.enabledAt)
	f.mu.Unlock()
	if wait <= 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// serveStart takes {"StartRequests": [{"EventId": "..."}]}, records each ID
// and starts those events, which stay listed, answering 200 with no body; a
// body that is not that document gets 400. Like Azure, it does not check
// whose event it is: approving lets it go ahead for every listed VM.
func (f *Azure) serveStart(w http.ResponseWriter, r *http.Request) {
	var req struct {
		StartRequests []struct {
			EventID string `json:"EventId"`
		} `json:"StartRequests"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil || len(req.StartRequests) == 0 {
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]string{"error": "Bad request. Invalid StartRequests"})
		return
	}
	f.mu.Lock()
	for _, sr := range req.StartRequests {
		if sr.EventID == "" {
			continue
		}
		f.approved = append(f.approved, sr.EventID)
		f.startLocked(sr.EventID)
	}
	f.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}
