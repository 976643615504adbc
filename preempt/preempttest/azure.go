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

// Azure is a fake Azure Instance Metadata Service: it refuses (400) requests
// without the Metadata: true header or without api-version, serves
// Scheduled Events and the instance document, and accepts the StartRequests
// POST that approves events, dropping them from the document as Azure does
// once they start.
type Azure struct {
	*httptest.Server
	raw overrides

	mu          sync.Mutex
	incarnation int
	events      []AzureEvent
	rejected    int
	approved    []string
}

// NewAzure starts the fake on 127.0.0.1 with no events; the caller closes it.
func NewAzure() *Azure {
	f := &Azure{incarnation: 1}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

// Schedule adds an event and returns its EventId; empty fields get the
// defaults a platform event has (a fresh ID, VirtualMachine, Scheduled,
// Platform). DocumentIncarnation goes up, as it does on every change.
func (f *Azure) Schedule(ev AzureEvent) string {
	if ev.EventID == "" {
		id := randomID(16)
		ev.EventID = fmt.Sprintf("%s-%s-%s-%s-%s", id[:8], id[8:12], id[12:16], id[16:20], id[20:])
	}
	if ev.ResourceType == "" {
		ev.ResourceType = "VirtualMachine"
	}
	if ev.Resources == nil {
		ev.Resources = []string{"fake-vm"}
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

// Clear withdraws every event and canned answer.
func (f *Azure) Clear() {
	f.mu.Lock()
	f.events = nil
	f.incarnation++
	f.mu.Unlock()
	f.raw.clear()
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
			"compute": map[string]any{"azEnvironment": "AzurePublicCloud", "name": "fake-vm", "vmId": "02aab8a4-74ef-476e-8182-f6d2ba4166a6", "priority": "Spot"},
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

// serveStart takes {"StartRequests": [{"EventId": "..."}]}, records each ID
// and drops those events, answering 200 with no body; a body that is not
// that document gets 400.
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
		f.events = slices.DeleteFunc(f.events, func(e AzureEvent) bool { return e.EventID == sr.EventID })
	}
	f.incarnation++
	f.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}
