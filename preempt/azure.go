package preempt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
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

// Azure polls Scheduled Events. It never acknowledges an event (POST
// StartRequests): that would let Azure evict or reboot sooner, and the agent
// only needs to tell the jobs.
type Azure struct {
	client *http.Client
	base   string
}

// NewAzure returns a Source for Azure IMDS at base; a nil client means
// NewClient(). Azure enables Scheduled Events on the first request and warns
// that this first answer may take up to two minutes; Watch's retries cover it.
func NewAzure(client *http.Client, base string) *Azure {
	return &Azure{client: newClientIfNil(client), base: trimBase(base)}
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

// Poll maps Preempt to NoticePreemption, Reboot to NoticeReboot, Redeploy to
// NoticeRedeploy, and Freeze, Terminate or any newer type to NoticeMaintenance.
func (z *Azure) Poll(ctx context.Context) ([]gpuwarden.Notice, error) {
	doc, err := z.document(ctx)
	if err != nil {
		return nil, err
	}
	var notices []gpuwarden.Notice
	var errs []error
	for i, ev := range doc.Events {
		if ev.EventID == "" {
			errs = append(errs, pathError(ProviderAzure, azureEventsPath, fmt.Errorf("event %d has no EventId", i)))
			continue
		}
		var at time.Time
		if ev.NotBefore != "" {
			t, err := time.Parse(time.RFC1123, ev.NotBefore)
			if err != nil {
				errs = append(errs, pathError(ProviderAzure, azureEventsPath, fmt.Errorf("event %s NotBefore: %w", ev.EventID, err)))
				continue
			}
			at = t.UTC()
		}
		kind := gpuwarden.NoticeMaintenance
		switch ev.EventType {
		case "Preempt":
			kind = gpuwarden.NoticePreemption
		case "Reboot":
			kind = gpuwarden.NoticeReboot
		case "Redeploy":
			kind = gpuwarden.NoticeRedeploy
		}
		detail := strings.TrimSpace(ev.EventType + " " + ev.EventStatus)
		if ev.Description != "" {
			detail += ": " + ev.Description
		}
		notices = append(notices, gpuwarden.Notice{
			Provider: ProviderAzure, Kind: kind, At: at, Detail: detail, ID: ev.EventID,
		})
	}
	return notices, errors.Join(errs...)
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
