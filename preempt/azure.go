package preempt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
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
	// azureInstanceQuery is the instance document's version: Detect reads it
	// because it answers at once while Scheduled Events' first call may take
	// minutes, and every source reads compute.name from it once.
	azureInstanceQuery = "?api-version=2021-02-01"
	azureHeader        = "Metadata"
)

// AzureWarmUp is how long Azure may take to answer the first Scheduled
// Events call while it enables the service for the VM ("expect a delayed
// response in your first call of up to two minutes"): poll failures inside
// it are expected and logged at debug level, failures after it are warnings.
const AzureWarmUp = 2 * time.Minute

// Azure polls Scheduled Events. Microsoft delivers the events of every VM in
// an availability set or scale-set placement group to all of them, so Azure
// reads this VM's name (compute.name in the instance document) once and
// reports, and approves, only events whose Resources name it. Polling never
// acknowledges an event; Approve does (POST StartRequests), which lets Azure
// evict, reboot or redeploy at once, so the CLI calls it only under
// --azure-approve and only after the checkpoint has committed.
type Azure struct {
	// Now is the clock that dates an event first seen started or with a
	// NotBefore that does not parse, a field so tests can fix it.
	Now func() time.Time

	client *http.Client
	base   string

	mu sync.Mutex
	// name is this VM's compute.name, empty until the instance document
	// was read; it never changes for the life of the VM.
	name   string
	log    *slog.Logger
	events ledger
	// due is when each listed event was first seen Started or with a
	// NotBefore that does not parse, so that its At does not move from poll
	// to poll; started marks the events seen Started, whose leaving the list
	// means done rather than canceled.
	due     map[string]time.Time
	started map[string]bool
	// warned holds the events whose unparseable NotBefore was logged, so
	// the warning comes once per event, not once a second.
	warned map[string]bool
}

// NewAzure returns a Source for Azure IMDS at base; a nil client means
// NewClient(). Azure enables Scheduled Events on the first request and warns
// that this first answer may take up to AzureWarmUp; Watch's retries cover it.
func NewAzure(client *http.Client, base string) *Azure {
	return &Azure{
		Now: time.Now, client: newClientIfNil(client), base: trimBase(base),
		log: discardLogger, due: make(map[string]time.Time), started: make(map[string]bool), warned: make(map[string]bool),
	}
}

// Provider returns "azure".
func (z *Azure) Provider() string { return ProviderAzure }

// WarmUp returns AzureWarmUp, the documented delay of the first call.
func (z *Azure) WarmUp() time.Duration { return AzureWarmUp }

// setLogger takes the logger for what Poll reads but doubts.
func (z *Azure) setLogger(log *slog.Logger) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.log = log
}

// azureDocument is the Scheduled Events answer; DocumentIncarnation is a
// pointer so that a document without it reads as malformed.
type azureDocument struct {
	DocumentIncarnation *int         `json:"DocumentIncarnation"`
	Events              []azureEvent `json:"Events"`
}

// azureEvent is one scheduled event; NotBefore is RFC 1123 ("Mon, 19 Sep 2016
// 18:29:47 GMT") in the documentation, ISO 8601 from Microsoft's mock
// server, and blank once the event has started.
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

// azureStarted is the EventStatus of an event under way. Azure lists no
// Completed status, an event simply leaves the list when it is done, but
// Microsoft's mock server walks events through Completed (and an event can
// be Canceled): azureOver holds the statuses that mean the event is over.
const azureStarted = "Started"

// The reasons a cancellation gives: an event seen Started (or listed
// Completed) is done; one that left while Scheduled was canceled or withdrawn.
const (
	azureDone      = "done: Scheduled Events no longer lists it under way"
	azureWithdrawn = "canceled: Scheduled Events no longer lists it"
)

// azureOver reports whether an EventStatus says the event is over.
func azureOver(status string) bool {
	switch strings.ToLower(status) {
	case "completed", "canceled", "cancelled":
		return true
	}
	return false
}

// names reports whether the event lists the VM called name; Azure resource
// names ignore case.
func (ev azureEvent) names(name string) bool {
	return slices.ContainsFunc(ev.Resources, func(r string) bool { return strings.EqualFold(strings.TrimSpace(r), name) })
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

// vmName returns this VM's compute.name, reading the instance document the
// first time and whenever an earlier read failed.
func (z *Azure) vmName(ctx context.Context) (string, error) {
	z.mu.Lock()
	name := z.name
	z.mu.Unlock()
	if name != "" {
		return name, nil
	}
	name, err := z.readInstance(ctx)
	if err != nil {
		return "", err
	}
	z.mu.Lock()
	z.name = name
	z.mu.Unlock()
	return name, nil
}

// azureTimeLayouts are the NotBefore forms read: RFC 1123 as documented (also
// with a numeric zone), then RFC 3339 / ISO 8601 as the mock server sends,
// with or without fractions, and without a zone, which reads as UTC like
// every other Azure time.
var azureTimeLayouts = []string{
	time.RFC1123, time.RFC1123Z, time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999",
}

// parseAzureTime reads a NotBefore in any of azureTimeLayouts.
func parseAzureTime(s string) (time.Time, bool) {
	s = strings.TrimSpace(s)
	for _, layout := range azureTimeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}

// Poll reports the events whose Resources name this VM. It maps Preempt and
// Terminate (the VM is deleted) to NoticePreemption, Reboot to NoticeReboot,
// Redeploy to NoticeRedeploy, Freeze (seconds of pause, processes survive)
// to NoticeMigration, and any newer type to NoticeMaintenance. The ID is the
// EventId and At the NotBefore; an event that is Started (after approval,
// at NotBefore, or at once after a host hardware failure, which is never
// Scheduled first) is happening now: At is the poll that first saw it
// started, or its NotBefore when that came earlier. A NotBefore that does not
// parse is due now, with a warning, because dropping it would hide the
// event. An event reported earlier that is no longer listed, or is listed
// Completed or Canceled (as Microsoft's mock server does; Azure itself
// drops a done event), comes back once with Canceled set: Azure lists an
// event, approved or not, until it is done or withdrawn.
func (z *Azure) Poll(ctx context.Context) ([]gpuwarden.Notice, error) {
	name, err := z.vmName(ctx)
	if err != nil {
		return nil, err
	}
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
		if !ev.names(name) {
			continue
		}
		if azureOver(ev.EventStatus) {
			// Swept below like an event that left the list: reported
			// once as over, and only when it was reported before.
			if strings.EqualFold(ev.EventStatus, "Completed") {
				z.started[ev.EventID] = true
			}
			continue
		}
		present[ev.EventID] = true
		notices = append(notices, z.notice(ev, now))
	}
	if complete {
		for id := range z.due {
			if !present[id] {
				delete(z.due, id)
			}
		}
		for id := range z.warned {
			if !present[id] {
				delete(z.warned, id)
			}
		}
		var done, gone map[string]bool
		for id := range z.events.m {
			if present[id] {
				continue
			}
			if z.started[id] {
				done = setAdd(done, id)
			} else {
				gone = setAdd(gone, id)
			}
		}
		// Sweeping each group with the other marked present keeps one
		// cancellation per event, each with its own reason.
		notices = append(notices, z.events.sweep(union(present, gone), azureDone)...)
		notices = append(notices, z.events.sweep(present, azureWithdrawn)...)
		for id := range z.started {
			if !present[id] {
				delete(z.started, id)
			}
		}
	}
	return notices, errors.Join(errs...)
}

// notice turns one of this VM's events into its notice and records it; the
// caller holds z.mu.
func (z *Azure) notice(ev azureEvent, now time.Time) gpuwarden.Notice {
	firstSeen := func() time.Time {
		if _, ok := z.due[ev.EventID]; !ok {
			z.due[ev.EventID] = now
		}
		return z.due[ev.EventID]
	}
	at, parsed := time.Time{}, false
	if ev.NotBefore != "" {
		at, parsed = parseAzureTime(ev.NotBefore)
		if !parsed {
			if !z.warned[ev.EventID] {
				z.warned[ev.EventID] = true
				z.log.Warn("azure scheduled event: NotBefore does not parse; treating the event as due now",
					"id", ev.EventID, "type", ev.EventType, "not_before", ev.NotBefore)
			}
			at = firstSeen()
		}
	}
	if strings.EqualFold(ev.EventStatus, azureStarted) {
		z.started[ev.EventID] = true
		started := firstSeen()
		if prev, ok := z.events.m[ev.EventID]; ok && !prev.At.IsZero() && prev.At.Before(started) {
			started = prev.At
		}
		if at.IsZero() || started.Before(at) {
			at = started
		}
	} else if ev.NotBefore == "" {
		at = firstSeen()
	}
	detail := strings.TrimSpace(ev.EventType + " " + ev.EventStatus)
	if ev.Description != "" {
		detail += ": " + ev.Description
	}
	n := gpuwarden.Notice{Provider: ProviderAzure, Kind: azureKind(ev.EventType), At: at, Detail: detail, ID: ev.EventID}
	z.events.put(n)
	return n
}

// setAdd adds id to m, making m when it is nil.
func setAdd(m map[string]bool, id string) map[string]bool {
	if m == nil {
		m = make(map[string]bool)
	}
	m[id] = true
	return m
}

// union returns a new set holding the members of a and b.
func union(a, b map[string]bool) map[string]bool {
	out := make(map[string]bool, len(a)+len(b))
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
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
// than at NotBefore. Approving lets the event go ahead for every VM it
// lists, so Approve first reads Scheduled Events and refuses an event that
// is not listed or whose Resources do not name this VM; one already Started
// (or over) needs nothing. Any answer to the POST but 200 is an error naming the status.
func (z *Azure) Approve(ctx context.Context, eventID string) error {
	if strings.TrimSpace(eventID) == "" {
		return pathError(ProviderAzure, azureEventsPath, errors.New("approve: empty event id"))
	}
	name, err := z.vmName(ctx)
	if err != nil {
		return fmt.Errorf("approve %s: %w", eventID, err)
	}
	doc, err := z.document(ctx)
	if err != nil {
		return fmt.Errorf("approve %s: %w", eventID, err)
	}
	i := slices.IndexFunc(doc.Events, func(ev azureEvent) bool { return ev.EventID == eventID })
	switch {
	case i < 0:
		return pathError(ProviderAzure, azureEventsPath, fmt.Errorf("approve %s: the event is not listed (done or withdrawn)", eventID))
	case !doc.Events[i].names(name):
		return pathError(ProviderAzure, azureEventsPath, fmt.Errorf("approve %s: the event is for %s, not this VM %s: approving it would let it go ahead for them",
			eventID, strings.Join(doc.Events[i].Resources, ", "), name))
	case strings.EqualFold(doc.Events[i].EventStatus, azureStarted), azureOver(doc.Events[i].EventStatus):
		return nil
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
	return nil
}

// probeInstance reads the instance document, which answers at once on any
// Azure VM, so that Detect need not wait out Scheduled Events' first call;
// the VM's name it reads is kept, so Poll need not ask again.
func (z *Azure) probeInstance(ctx context.Context) error {
	name, err := z.readInstance(ctx)
	if err != nil {
		return err
	}
	z.mu.Lock()
	z.name = name
	z.mu.Unlock()
	return nil
}

// readInstance reads compute.name from the instance document.
func (z *Azure) readInstance(ctx context.Context) (string, error) {
	res, err := do(ctx, z.client, http.MethodGet, z.base+azureInstancePath+azureInstanceQuery, map[string]string{azureHeader: "true"})
	if err != nil {
		return "", pathError(ProviderAzure, azureInstancePath, err)
	}
	if res.status != http.StatusOK {
		return "", pathError(ProviderAzure, azureInstancePath, statusError(res))
	}
	var doc struct {
		Compute *struct {
			Name string `json:"name"`
		} `json:"compute"`
	}
	if err := json.Unmarshal(res.body, &doc); err != nil {
		return "", pathError(ProviderAzure, azureInstancePath, fmt.Errorf("decode: %w", err))
	}
	if doc.Compute == nil {
		return "", pathError(ProviderAzure, azureInstancePath, errors.New("no compute section"))
	}
	if strings.TrimSpace(doc.Compute.Name) == "" {
		return "", pathError(ProviderAzure, azureInstancePath, errors.New("no compute.name: cannot tell this VM's events from its siblings'"))
	}
	return strings.TrimSpace(doc.Compute.Name), nil
}
