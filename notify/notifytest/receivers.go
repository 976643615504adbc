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
	"strings"
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

// CheckSlack checks a Block Kit message: a text fallback, and blocks of
// known types within their limits (api.slack.com/reference/block-kit/blocks).
func CheckSlack(t testing.TB, b []byte) {
	t.Helper()
	var m struct {
		Text   string `json:"text"`
		Blocks []struct {
			Type string `json:"type"`
			Text *struct {
				Type, Text string
			} `json:"text"`
			Fields []struct {
				Type, Text string
			} `json:"fields"`
			Elements []struct {
				Type, Text string
			} `json:"elements"`
		} `json:"blocks"`
	}
	decode(t, b, &m)
	if strings.TrimSpace(m.Text) == "" {
		t.Error("slack: no text fallback")
	}
	if len(m.Blocks) == 0 || len(m.Blocks) > 50 {
		t.Errorf("slack: %d blocks, want 1..50", len(m.Blocks))
	}
	for i, bl := range m.Blocks {
		switch bl.Type {
		case "header":
			if bl.Text == nil || bl.Text.Type != "plain_text" || utf8.RuneCountInString(bl.Text.Text) > 150 || bl.Text.Text == "" {
				t.Errorf("slack: block %d: header needs plain_text of 1..150 characters: %+v", i, bl.Text)
			}
		case "section":
			if bl.Text == nil && len(bl.Fields) == 0 {
				t.Errorf("slack: block %d: section without text or fields", i)
			}
			if bl.Text != nil && (utf8.RuneCountInString(bl.Text.Text) > 3000 || !slices.Contains([]string{"mrkdwn", "plain_text"}, bl.Text.Type)) {
				t.Errorf("slack: block %d: section text over 3000 characters or of type %q", i, bl.Text.Type)
			}
			if len(bl.Fields) > 10 {
				t.Errorf("slack: block %d: %d fields, at most 10", i, len(bl.Fields))
			}
			for _, f := range bl.Fields {
				if utf8.RuneCountInString(f.Text) > 2000 || f.Text == "" {
					t.Errorf("slack: block %d: field of %d characters, want 1..2000", i, utf8.RuneCountInString(f.Text))
				}
			}
		case "context":
			if len(bl.Elements) == 0 || len(bl.Elements) > 10 {
				t.Errorf("slack: block %d: context with %d elements, want 1..10", i, len(bl.Elements))
			}
		default:
			t.Errorf("slack: block %d: type %q is not one this sender uses", i, bl.Type)
		}
	}
}
