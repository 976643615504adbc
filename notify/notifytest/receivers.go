// Package notifytest checks webhook bodies against what each receiver
// documents it accepts, for notify's tests and the end-to-end tests of
// the agent's alerts.
package notifytest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"
	"unicode/utf8"
)

func decode(t testing.TB, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, b)
	}
}

// TeamsMessage is a Microsoft Teams Workflows message carrying an Adaptive
// Card, as far as the checks read it.
type TeamsMessage struct {
	Type        string `json:"type"`
	Attachments []struct {
		ContentType string `json:"contentType"`
		Content     struct {
			Schema  string `json:"$schema"`
			Type    string `json:"type"`
			Version string `json:"version"`
			Body    []struct {
				Type  string `json:"type"`
				Text  string `json:"text"`
				Facts []struct {
					Title, Value string
				} `json:"facts"`
			} `json:"body"`
			Actions []struct {
				Type, Title, URL string
			} `json:"actions"`
		} `json:"content"`
	} `json:"attachments"`
}

// CheckTeams checks a Workflows message: attachments[0] an Adaptive Card
// (version 1.4 or later) whose body has TextBlocks; it returns the message.
func CheckTeams(t testing.TB, b []byte) TeamsMessage {
	t.Helper()
	var m TeamsMessage
	decode(t, b, &m)
	if len(b) > 28<<10 {
		t.Errorf("teams: message of %d bytes, over Teams' 28 KB", len(b))
	}
	if m.Type != "message" || len(m.Attachments) != 1 {
		t.Fatalf("teams: type %q with %d attachments, want a message with 1", m.Type, len(m.Attachments))
	}
	a := m.Attachments[0]
	c := a.Content
	var major, minor int
	_, err := fmt.Sscanf(c.Version, "%d.%d", &major, &minor)
	switch {
	case a.ContentType != "application/vnd.microsoft.card.adaptive":
		t.Errorf("teams: contentType %q", a.ContentType)
	case c.Type != "AdaptiveCard":
		t.Errorf("teams: content.type %q, want AdaptiveCard", c.Type)
	case c.Schema != "http://adaptivecards.io/schemas/adaptive-card.json":
		t.Errorf("teams: $schema %q", c.Schema)
	case err != nil || major != 1 || minor < 4:
		t.Errorf("teams: version %q, want 1.4 or later", c.Version)
	case len(c.Body) == 0:
		t.Error("teams: empty card body")
	}
	blocks := 0
	for i, el := range c.Body {
		switch el.Type {
		case "TextBlock":
			blocks++
			if el.Text == "" {
				t.Errorf("teams: body[%d]: empty TextBlock", i)
			}
		case "FactSet":
			for _, f := range el.Facts {
				if f.Title == "" || f.Value == "" {
					t.Errorf("teams: body[%d]: fact %+v needs title and value", i, f)
				}
			}
		default:
			t.Errorf("teams: body[%d]: element type %q is not one this sender uses", i, el.Type)
		}
	}
	if blocks == 0 {
		t.Error("teams: no TextBlock")
	}
	for _, ac := range c.Actions {
		if ac.Type != "Action.OpenUrl" || ac.Title == "" {
			t.Errorf("teams: action %+v", ac)
		}
		if u, err := url.Parse(ac.URL); err != nil || u.Scheme == "" {
			t.Errorf("teams: action url %q", ac.URL)
		}
	}
	return m
}

// PagerDutyEvent is an Events API v2 body as PagerDuty documents it.
type PagerDutyEvent struct {
	RoutingKey  string `json:"routing_key"`
	EventAction string `json:"event_action"`
	DedupKey    string `json:"dedup_key"`
	Payload     *struct {
		Summary       string            `json:"summary"`
		Source        string            `json:"source"`
		Severity      string            `json:"severity"`
		Timestamp     string            `json:"timestamp"`
		CustomDetails map[string]string `json:"custom_details"`
	} `json:"payload"`
	Links []struct {
		Href string `json:"href"`
	} `json:"links"`
}

// CheckPagerDuty checks an Events API v2 event the way the Events API does
// and returns it.
func CheckPagerDuty(t testing.TB, b []byte) PagerDutyEvent {
	t.Helper()
	var m PagerDutyEvent
	decode(t, b, &m)
	if len(m.RoutingKey) != 32 {
		t.Errorf("pagerduty: routing_key of %d characters, want 32", len(m.RoutingKey))
	}
	if !slices.Contains([]string{"trigger", "acknowledge", "resolve"}, m.EventAction) {
		t.Errorf("pagerduty: event_action %q", m.EventAction)
	}
	if len(m.DedupKey) > 255 {
		t.Errorf("pagerduty: dedup_key of %d characters, at most 255", len(m.DedupKey))
	}
	if m.EventAction != "trigger" {
		if m.DedupKey == "" {
			t.Errorf("pagerduty: %s without dedup_key", m.EventAction)
		}
		return m
	}
	p := m.Payload
	if p == nil {
		t.Fatal("pagerduty: trigger without payload")
		return m
	}
	if p.Summary == "" || utf8.RuneCountInString(p.Summary) > 1024 {
		t.Errorf("pagerduty: summary of %d characters, want 1..1024", utf8.RuneCountInString(p.Summary))
	}
	if p.Source == "" {
		t.Error("pagerduty: no payload.source")
	}
	if !slices.Contains([]string{"critical", "error", "warning", "info"}, p.Severity) {
		t.Errorf("pagerduty: severity %q", p.Severity)
	}
	if _, err := time.Parse(time.RFC3339, p.Timestamp); p.Timestamp != "" && err != nil {
		t.Errorf("pagerduty: timestamp %q", p.Timestamp)
	}
	return m
}
