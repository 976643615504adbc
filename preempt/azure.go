package preempt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// The Azure Instance Metadata Service paths. 2020-07-01 is the Scheduled
// Events version that added EventSource and DurationInSeconds.
const (
	azureEventsPath   = "/metadata/scheduledevents"
	azureEventsQuery  = "?api-version=2020-07-01"
	azureInstancePath = "/metadata/instance"
	// azureInstanceQuery is the instance document, used only by Detect because
	// it answers at once while Scheduled Events' first call may take minutes.
	azureInstanceQuery = "?api-version=2021-02-01"
	azureHeader        = "Metadata"
)

// Azure polls Scheduled Events. Polling never acknowledges an event; Approve
// does (POST StartRequests), which lets Azure evict, reboot or redeploy at
// once, so the CLI calls it only under --azure-approve and only after the
// checkpoint has committed.
type Azure struct {
	// Now is the clock that dates an event first seen already started (blank
	// NotBefore), a field so tests can fix it.
	Now func() time.Time

	client *http.Client
	base   string

	mu     sync.Mutex
	events ledger
	// started is when each listed event was first seen with a blank
	// NotBefore, so that its At does not move from poll to poll.
	started map[string]time.Time
	// approved holds the events Approve acknowledged: their leaving the list
	// is the event going ahead as asked, not a cancellation.
	approved map[string]bool
}

// NewAzure returns a Source for Azure IMDS at base; a nil client means
// NewClient(). Azure enables Scheduled Events on the first request and warns
// that this first answer may take up to two minutes; Watch's retries cover it.
func NewAzure(client *http.Client, base string) *Azure {
	return &Azure{
		Now: time.Now, client: newClientIfNil(client), base: trimBase(base),
		started: make(map[string]time.Time), approved: make(map[string]bool),
	}
}

// Provider returns "azure".
func (z *Azure) Provider() string { return ProviderAzure }

// azureDocument is the Scheduled Events answer; DocumentIncarnation is a
// pointer so that a document without it reads as malformed.
type azureDocument struct {
	DocumentIncarnation *int         `json:"DocumentIncarnation"`
	Events              []azureEvent `json:"Events"`
}

// azureEvent is one scheduled event; NotBefore is RFC 1123 ("Mon, 19 Sep 2016
// 18:29:47 GMT") and blank once the event has started.
type azureEvent struct {
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

// document fetches and decodes Scheduled Events.
func (z *Azure) document(ctx context.Context) (azureDocument, error) {
	res, err := do(ctx, z.client, http.MethodGet, z.base+azureEventsPath+azureEventsQuery, map[string]string{azureHeader: "true"})
	if err != nil {
		return azureDocument{}, pathError(ProviderAzure, azureEventsPath, err)
	}
	if res.status != http.StatusOK {
		return azureDocument{}, pathError(ProviderAzure, azureEventsPath, statusError(res))
	}
	var doc azureDocument
	if err := json.Unmarshal(res.body, &doc); err != nil {
		return azureDocument{}, pathError(ProviderAzure, azureEventsPath, fmt.Errorf("decode: %w", err))
	}
	if doc.DocumentIncarnation == nil {
		return azureDocument{}, pathError(ProviderAzure, azureEventsPath, errors.New("no DocumentIncarnation"))
	}
	return doc, nil
}

// Poll maps Preempt and Terminate (the VM is deleted) to NoticePreemption,
// Reboot to NoticeReboot, Redeploy to NoticeRedeploy, Freeze (seconds of
// pause, processes survive) to NoticeMigration, and any newer type to
// NoticeMaintenance; the ID is the EventId and At the NotBefore, or, once the
// event has started and NotBefore is blank, the poll that first saw it so.
// An event reported earlier that is no longer listed comes back once with
// Canceled set, unless Approve acknowledged it: then it went ahead.
func (z *Azure) Poll(ctx context.Context) ([]gpuwarden.Notice, error) {
	doc, err := z.document(ctx)
	if err != nil {
		return nil, err
	}
	now := z.Now().UTC()
	z.mu.Lock()
	defer z.mu.Unlock()
	var notices []gpuwarden.Notice
	var errs []error
	present := make(map[string]bool, len(doc.Events))
	complete := true
	for i, ev := range doc.Events {
		if ev.EventID == "" {
			errs = append(errs, pathError(ProviderAzure, azureEventsPath, fmt.Errorf("event %d has no EventId", i)))
			complete = false
			continue
		}
		present[ev.EventID] = true
		var at time.Time
		if ev.NotBefore != "" {
			t, err := time.Parse(time.RFC1123, ev.NotBefore)
			if err != nil {
				errs = append(errs, pathError(ProviderAzure, azureEventsPath, fmt.Errorf("event %s NotBefore: %w", ev.EventID, err)))
				continue
			}
			at = t.UTC()
		} else {
			if _, ok := z.started[ev.EventID]; !ok {
				z.started[ev.EventID] = now
			}
			at = z.started[ev.EventID]
		}
		detail := strings.TrimSpace(ev.EventType + " " + ev.EventStatus)
		if ev.Description != "" {
			detail += ": " + ev.Description
		}
		n := gpuwarden.Notice{
			Provider: ProviderAzure, Kind: azureKind(ev.EventType), At: at, Detail: detail, ID: ev.EventID,
		}
		z.events.put(n)
		notices = append(notices, n)
	}
	if complete {
		for id := range z.started {
			if !present[id] {
				delete(z.started, id)
			}
		}
		for id := range z.approved {
			if !present[id] {
				z.events.forget(id)
				delete(z.approved, id)
			}
		}
		notices = append(notices, z.events.sweep(present, "no longer in Scheduled Events")...)
	}
	return notices, errors.Join(errs...)
}

// azureKind maps an EventType to a notice kind.
func azureKind(eventType string) string {
	switch eventType {
	case "Preempt", "Terminate":
		return gpuwarden.NoticePreemption
	case "Reboot":
		return gpuwarden.NoticeReboot
	case "Redeploy":
		return gpuwarden.NoticeRedeploy
	case "Freeze":
		return gpuwarden.NoticeMigration
	}
	return gpuwarden.NoticeMaintenance
}

// azureStartRequests is the body that acknowledges events.
type azureStartRequests struct {
	StartRequests []azureStartRequest `json:"StartRequests"`
}

// azureStartRequest names one event to start.
type azureStartRequest struct {
	EventID string `json:"EventId"`
}

// Approve acknowledges the Scheduled Event eventID (a notice's ID) with
// POST StartRequests, Microsoft's documented way to let it start now rather
// than at NotBefore; any answer but 200 is an error naming the status. Once
// approved, the event leaving the list is not reported as canceled.
func (z *Azure) Approve(ctx context.Context, eventID string) error {
	if strings.TrimSpace(eventID) == "" {
		return pathError(ProviderAzure, azureEventsPath, errors.New("approve: empty event id"))
	}
	body, err := json.Marshal(azureStartRequests{StartRequests: []azureStartRequest{{EventID: eventID}}})
	if err != nil {
		return pathError(ProviderAzure, azureEventsPath, fmt.Errorf("approve %s: %w", eventID, err))
	}
	res, err := doBody(ctx, z.client, http.MethodPost, z.base+azureEventsPath+azureEventsQuery,
		map[string]string{azureHeader: "true", "Content-Type": "application/json"}, body)
	if err != nil {
		return pathError(ProviderAzure, azureEventsPath, fmt.Errorf("approve %s: %w", eventID, err))
	}
	if res.status != http.StatusOK {
		return pathError(ProviderAzure, azureEventsPath, fmt.Errorf("approve %s: %w", eventID, statusError(res)))
	}
	z.mu.Lock()
	z.approved[eventID] = true
	z.mu.Unlock()
	return nil
}

// probeInstance reads the instance document, which answers at once on any
// Azure VM, so that Detect need not wait out Scheduled Events' first call.
func (z *Azure) probeInstance(ctx context.Context) error {
	res, err := do(ctx, z.client, http.MethodGet, z.base+azureInstancePath+azureInstanceQuery, map[string]string{azureHeader: "true"})
	if err != nil {
		return pathError(ProviderAzure, azureInstancePath, err)
	}
	if res.status != http.StatusOK {
		return pathError(ProviderAzure, azureInstancePath, statusError(res))
	}
	var doc struct {
		Compute map[string]any `json:"compute"`
	}
	if err := json.Unmarshal(res.body, &doc); err != nil {
		return pathError(ProviderAzure, azureInstancePath, fmt.Errorf("decode: %w", err))
	}
	if doc.Compute == nil {
		return pathError(ProviderAzure, azureInstancePath, errors.New("no compute section"))
	}
	return nil
}
