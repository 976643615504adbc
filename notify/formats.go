package notify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpuwarden/gpuwarden"
)

// The webhook body formats NewWebhook accepts.
const (
	// FormatAuto infers the format from the URL (InferFormat).
	FormatAuto = "auto"
	// FormatSlack is Block Kit blocks with a "text" fallback: Slack reads
	// the blocks, Mattermost and Discord's /slack endpoint the text.
	FormatSlack = "slack"
	// FormatTeams is a Microsoft Teams Workflows message: one attachment
	// holding an Adaptive Card 1.4.
	FormatTeams = "teams"
	// FormatDiscord is Discord's own webhook body: content and one embed.
	FormatDiscord = "discord"
	// FormatPagerDuty is a PagerDuty Events API v2 event: trigger, and
	// resolve with the same dedup_key when the condition ends.
	FormatPagerDuty = "pagerduty"
	// FormatNtfy is ntfy's plain-text publish: the message as the body,
	// Title, Priority, Tags and Click as headers.
	FormatNtfy = "ntfy"
	// FormatJSON is the event itself plus the box, the money and the
	// action, under schema gpuwarden.alert/v1 (docs/alerts.md).
	FormatJSON = "json"
)

// Formats lists the formats a user may name, FormatAuto first.
var Formats = []string{FormatAuto, FormatSlack, FormatTeams, FormatDiscord, FormatPagerDuty, FormatNtfy, FormatJSON}

// AlertSchema names the generic JSON body's schema; fields are only added
// within v1.
const AlertSchema = "gpuwarden.alert/v1"

// PagerDutyEventsURL is where PagerDuty's Events API v2 takes events.
const PagerDutyEventsURL = "https://events.pagerduty.com/v2/enqueue"

// Receivers' documented limits the bodies keep within.
const (
	slackHeaderMax    = 150
	slackSectionMax   = 3000
	slackFieldMax     = 2000
	slackFieldsMax    = 10
	discordContentMax = 2000
	discordTitleMax   = 256
	discordDescMax    = 4096
	discordFieldName  = 256
	discordFieldValue = 1024
	discordFieldsMax  = 25
	discordEmbedMax   = 6000
	discordFooter     = "gpuwarden"
	teamsTitleMax     = 200
	teamsTextMax      = 3000
	teamsFactMax      = 500
	pagerSummaryMax   = 1024
	pagerDedupMax     = 255
	pagerKeyLen       = 32
	ntfyHeaderMax     = 250
)

// InferFormat picks the body format from the webhook URL's host and path;
// anything not recognised gets FormatSlack, the text most chat webhooks
// (Mattermost, Rocket.Chat, Zulip's Slack door) accept.
func InferFormat(u *url.URL) string {
	host := strings.ToLower(u.Hostname())
	path := strings.ToLower(u.Path)
	switch {
	case u.Scheme == "pagerduty":
		return FormatPagerDuty
	case host == "hooks.slack.com":
		return FormatSlack
	case strings.HasSuffix(host, ".webhook.office.com"), strings.HasSuffix(host, ".logic.azure.com"),
		host == "environment.api.powerplatform.com", strings.HasSuffix(host, ".environment.api.powerplatform.com"):
		return FormatTeams
	case (host == "discord.com" || host == "discordapp.com" || strings.HasSuffix(host, ".discord.com")) &&
		strings.HasPrefix(path, "/api/webhooks/"):
		if strings.HasSuffix(strings.TrimSuffix(path, "/"), "/slack") {
			return FormatSlack
		}
		return FormatDiscord
	case host == "events.pagerduty.com", strings.HasSuffix(host, ".pagerduty.com") && strings.HasPrefix(path, "/v2/enqueue"):
		return FormatPagerDuty
	case host == "ntfy.sh", strings.HasPrefix(host, "ntfy."), path == "/ntfy" || strings.HasPrefix(path, "/ntfy/"):
		return FormatNtfy
	}
	return FormatSlack
}

// endpoint resolves where a webhook posts: a PagerDuty URL gives up its
// routing key (pagerduty://KEY, or ?routing_key=KEY on an events URL), and
// the key is left out of the URL that is posted to.
func endpoint(rawURL, format string) (post *url.URL, routingKey string, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, "", gpuwarden.Errorf(gpuwarden.EInvalid, "webhook url is not a url")
	}
	if u.Scheme == "pagerduty" {
		key := u.Host
		if key == "" {
			key = u.Opaque
		}
		if err := checkRoutingKey(key); err != nil {
			return nil, "", err
		}
		p, _ := url.Parse(PagerDutyEventsURL)
		return p, key, nil
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// Never echo the URL: a Slack webhook URL is a credential.
		return nil, "", gpuwarden.Errorf(gpuwarden.EInvalid, "webhook url is not an http(s) url").
			WithHint("write the full url, e.g. https://hooks.slack.com/services/T000/B000/XXXX, or pagerduty://ROUTING_KEY")
	}
	if format == FormatPagerDuty {
		q := u.Query()
		key := q.Get("routing_key")
		if err := checkRoutingKey(key); err != nil {
			return nil, "", err
		}
		q.Del("routing_key")
		u.RawQuery = q.Encode()
		return u, key, nil
	}
	return u, "", nil
}

// checkRoutingKey checks the shape of a PagerDuty integration key without
// ever quoting it: it is the credential.
func checkRoutingKey(key string) error {
	hint := "write pagerduty://ROUTING_KEY or https://events.pagerduty.com/v2/enqueue?routing_key=ROUTING_KEY " +
		"with the 32-character integration key of an Events API v2 integration"
	if key == "" {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "pagerduty webhook has no routing key").WithHint("%s", hint)
	}
	if len(key) != pagerKeyLen {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "pagerduty routing key is %d characters, want %d", len(key), pagerKeyLen).WithHint("%s", hint)
	}
	for _, r := range key {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "pagerduty routing key has a character that is not a letter or digit").WithHint("%s", hint)
		}
	}
	return nil
}

// request is one HTTP body to post, with the headers its format needs.
type request struct {
	body   []byte
	header http.Header
}

// requests renders the alert in the webhook's format: one request, or for
// PagerDuty one resolve per key an ending event resolves.
func (w *Webhook) requests(a Alert) ([]request, error) {
	jsonHeader := http.Header{"Content-Type": {"application/json"}}
	one := func(v any) ([]request, error) {
		b, err := encode(v)
		if err != nil {
			return nil, fmt.Errorf("encode %s body: %w", w.format, err)
		}
		return []request{{body: b, header: jsonHeader}}, nil
	}
	switch w.format {
	case FormatSlack:
		return one(slackBody(a))
	case FormatTeams:
		return one(teamsBody(a))
	case FormatDiscord:
		return one(discordBody(a))
	case FormatPagerDuty:
		var out []request
		for _, v := range pagerBodies(a, w.routingKey) {
			rs, err := one(v)
			if err != nil {
				return nil, err
			}
			out = append(out, rs...)
		}
		return out, nil
	case FormatNtfy:
		return []request{ntfyRequest(a)}, nil
	default:
		return one(jsonBody(a))
	}
}

// encode writes v as compact JSON, keeping <, > and & readable: receivers
// show the text to people.
func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// cut shortens s to at most n runes, marking the cut; receivers count
// characters, not bytes.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-3]) + "..."
}

// Slack's Block Kit. https://api.slack.com/reference/block-kit/blocks
type slackText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type slackBlock struct {
	Type     string      `json:"type"`
	Text     *slackText  `json:"text,omitempty"`
	Fields   []slackText `json:"fields,omitempty"`
	Elements []slackText `json:"elements,omitempty"`
}

func slackBody(a Alert) any {
	var fields []slackText
	for _, f := range a.Facts {
		if len(fields) == slackFieldsMax {
			break
		}
		v := slackEscape(f.Value)
		if f.Name == "Dashboard" {
			v = "<" + slackEscape(f.Value) + "|open the dashboard>"
		}
		fields = append(fields, slackText{"mrkdwn", cut("*"+f.Name+"*\n"+v, slackFieldMax)})
	}
	return struct {
		Text   string       `json:"text"`
		Blocks []slackBlock `json:"blocks"`
	}{
		Text: truncate(slackEscape(a.Line()), maxTextBytes),
		Blocks: []slackBlock{
			{Type: "header", Text: &slackText{"plain_text", cut(a.Title, slackHeaderMax)}},
			{Type: "section", Text: &slackText{"mrkdwn", cut(slackEscape(a.Summary), slackSectionMax)}},
			{Type: "section", Fields: fields},
			{Type: "context", Elements: []slackText{{"mrkdwn", "gpuwarden · " + a.Event.Time.UTC().Format(time.RFC3339)}}},
		},
	}
}

// Teams Workflows ("Post to a channel when a webhook request is received")
// takes a message whose attachment is an Adaptive Card.
// https://learn.microsoft.com/microsoftteams/platform/task-modules-and-cards/cards/cards-reference
type teamsElement struct {
	Type   string      `json:"type"`
	Text   string      `json:"text,omitempty"`
	Wrap   bool        `json:"wrap,omitempty"`
	Size   string      `json:"size,omitempty"`
	Weight string      `json:"weight,omitempty"`
	Color  string      `json:"color,omitempty"`
	Facts  []teamsFact `json:"facts,omitempty"`
}

type teamsFact struct {
	Title string `json:"title"`
	Value string `json:"value"`
}

type teamsAction struct {
	Type  string `json:"type"`
	Title string `json:"title"`
	URL   string `json:"url"`
}

type teamsCard struct {
	Schema  string         `json:"$schema"`
	Type    string         `json:"type"`
	Version string         `json:"version"`
	Body    []teamsElement `json:"body"`
	Actions []teamsAction  `json:"actions,omitempty"`
	MSTeams map[string]any `json:"msteams,omitempty"`
}

type teamsAttachment struct {
	ContentType string    `json:"contentType"`
	ContentURL  *string   `json:"contentUrl"`
	Content     teamsCard `json:"content"`
}

func teamsBody(a Alert) any {
	color := map[string]string{gpuwarden.SeverityCritical: "Attention", gpuwarden.SeverityWarning: "Warning"}[a.Event.Severity]
	if a.Resolve {
		color = "Good"
	}
	// Teams refuses a message over about 28 KB: a cut summary and facts
	// keep the card far under it, whatever the alert quotes.
	facts := make([]teamsFact, 0, len(a.Facts))
	for _, f := range a.Facts {
		facts = append(facts, teamsFact{cut(f.Name, 100), cut(f.Value, teamsFactMax)})
	}
	card := teamsCard{
		Schema:  "http://adaptivecards.io/schemas/adaptive-card.json",
		Type:    "AdaptiveCard",
		Version: "1.4",
		Body: []teamsElement{
			{Type: "TextBlock", Text: cut(a.Title, teamsTitleMax), Wrap: true, Size: "Medium", Weight: "Bolder", Color: color},
			{Type: "TextBlock", Text: cut(a.Summary, teamsTextMax), Wrap: true},
			{Type: "FactSet", Facts: facts},
		},
		MSTeams: map[string]any{"width": "Full"},
	}
	if link := httpLink(a.Box.Link); link != "" {
		card.Actions = []teamsAction{{Type: "Action.OpenUrl", Title: "Open the dashboard", URL: link}}
	}
	return struct {
		Type        string            `json:"type"`
		Attachments []teamsAttachment `json:"attachments"`
	}{"message", []teamsAttachment{{ContentType: "application/vnd.microsoft.card.adaptive", Content: card}}}
}

// Discord's execute-webhook body. https://discord.com/developers/docs/resources/webhook
type discordField struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Inline bool   `json:"inline"`
}

type discordEmbed struct {
	Title       string            `json:"title"`
	Description string            `json:"description"`
	URL         string            `json:"url,omitempty"`
	Color       int               `json:"color"`
	Timestamp   string            `json:"timestamp"`
	Fields      []discordField    `json:"fields"`
	Footer      map[string]string `json:"footer"`
}

func discordBody(a Alert) any {
	color := map[string]int{gpuwarden.SeverityCritical: 0xd32f2f, gpuwarden.SeverityWarning: 0xf9a825}[a.Event.Severity]
	if color == 0 {
		color = 0x1976d2
	}
	if a.Resolve {
		color = 0x2e7d32
	}
	// Discord refuses a message whose embeds hold more than 6,000
	// characters in all: a long summary takes at most half of what the
	// title leaves, the fields share the rest in order.
	title := cut(a.Title, discordTitleMax)
	rem := discordEmbedMax - utf8.RuneCountInString(title) - utf8.RuneCountInString(discordFooter)
	desc := cut(a.Summary, min(discordDescMax, rem/2))
	rem -= utf8.RuneCountInString(desc)
	var fields []discordField
	for _, f := range a.Facts {
		name := cut(f.Name, discordFieldName)
		room := min(discordFieldValue, rem-utf8.RuneCountInString(name))
		if len(fields) == discordFieldsMax || room < 8 {
			break
		}
		value := cut(f.Value, room)
		rem -= utf8.RuneCountInString(name) + utf8.RuneCountInString(value)
		fields = append(fields, discordField{name, value, len(f.Value) < 40})
	}
	return struct {
		Content         string              `json:"content"`
		Embeds          []discordEmbed      `json:"embeds"`
		AllowedMentions map[string][]string `json:"allowed_mentions"`
	}{
		Content: cut(a.Line(), discordContentMax),
		Embeds: []discordEmbed{{Title: title, Description: desc,
			URL: httpLink(a.Box.Link), Color: color, Timestamp: a.Event.Time.UTC().Format(time.RFC3339),
			Fields: fields, Footer: map[string]string{"text": discordFooter}}},
		// A message quoting a process name must never ping @everyone.
		AllowedMentions: map[string][]string{"parse": {}},
	}
}

// PagerDuty Events API v2.
// https://developer.pagerduty.com/docs/events-api-v2/trigger-events/
type pagerPayload struct {
	Summary       string            `json:"summary"`
	Source        string            `json:"source"`
	Severity      string            `json:"severity"`
	Timestamp     string            `json:"timestamp,omitempty"`
	Component     string            `json:"component,omitempty"`
	Group         string            `json:"group,omitempty"`
	Class         string            `json:"class,omitempty"`
	CustomDetails map[string]string `json:"custom_details,omitempty"`
}

type pagerLink struct {
	Href string `json:"href"`
	Text string `json:"text"`
}

type pagerEvent struct {
	RoutingKey  string        `json:"routing_key"`
	EventAction string        `json:"event_action"`
	DedupKey    string        `json:"dedup_key,omitempty"`
	Payload     *pagerPayload `json:"payload,omitempty"`
	Client      string        `json:"client,omitempty"`
	ClientURL   string        `json:"client_url,omitempty"`
	Links       []pagerLink   `json:"links,omitempty"`
}

// pagerBodies is a trigger keyed by the alert's key, or one resolve per key
// an ending event resolves.
func pagerBodies(a Alert, key string) []pagerEvent {
	if a.Resolve {
		out := make([]pagerEvent, 0, len(a.Resolves))
		for _, k := range a.Resolves {
			out = append(out, pagerEvent{RoutingKey: key, EventAction: "resolve", DedupKey: pagerDedup(k)})
		}
		return out
	}
	sev := a.Event.Severity
	switch sev {
	case gpuwarden.SeverityCritical, gpuwarden.SeverityWarning, gpuwarden.SeverityInfo:
	default:
		sev = gpuwarden.SeverityInfo
	}
	details := map[string]string{}
	for _, f := range a.Facts {
		details[strings.ToLower(strings.ReplaceAll(f.Name, "/", "_"))] = f.Value
	}
	for k, v := range a.Event.Data {
		if _, taken := details[k]; !taken {
			details[k] = v
		}
	}
	source := a.Box.Host
	if source == "" {
		source = "gpuwarden"
	}
	ev := pagerEvent{RoutingKey: key, EventAction: "trigger", DedupKey: pagerDedup(a.Event.Key),
		Payload: &pagerPayload{Summary: cut(a.Line(), pagerSummaryMax), Source: source, Severity: sev,
			Timestamp: a.Event.Time.UTC().Format(time.RFC3339), Component: "gpuwarden", Class: a.Event.Kind,
			Group: strings.Trim(a.Box.Provider+"/"+a.Box.Region, "/"), CustomDetails: details},
		Client: "gpuwarden"}
	if link := httpLink(a.Box.Link); link != "" {
		ev.ClientURL = link
		ev.Links = []pagerLink{{Href: link, Text: "gpuwarden dashboard"}}
	}
	return []pagerEvent{ev}
}

// pagerDedup keeps a key within PagerDuty's 255 characters; the agent's
// keys are far shorter, a cut one still pairs trigger and resolve.
func pagerDedup(k string) string {
	if len(k) <= pagerDedupMax {
		return k
	}
	return k[:pagerDedupMax]
}

// ntfy publishes the body as the message; headers carry the rest.
// https://docs.ntfy.sh/publish/
func ntfyRequest(a Alert) request {
	prio := map[string]string{gpuwarden.SeverityCritical: "5", gpuwarden.SeverityWarning: "4"}[a.Event.Severity]
	tags := map[string]string{gpuwarden.SeverityCritical: "rotating_light", gpuwarden.SeverityWarning: "warning"}[a.Event.Severity]
	if prio == "" {
		prio, tags = "3", "information_source"
	}
	if a.Resolve {
		prio, tags = "3", "white_check_mark"
	}
	if a.Box.DryRun && (stopKinds[a.Event.Kind] != "" || warnKinds[a.Event.Kind]) {
		tags += ",dry-run"
	}
	if a.Event.Kind != "" {
		tags += "," + a.Event.Kind
	}
	h := http.Header{
		"Content-Type": {"text/plain; charset=utf-8"},
		"Title":        {headerText(a.Title)},
		"Priority":     {prio},
		"Tags":         {headerText(tags)},
	}
	if link := httpLink(a.Box.Link); link != "" {
		h.Set("Click", link)
	}
	var b strings.Builder
	b.WriteString(a.Summary)
	for _, f := range a.Facts {
		b.WriteString("\n" + f.Name + ": " + f.Value)
	}
	return request{body: []byte(truncate(b.String(), 4000)), header: h}
}

// headerText makes a header value of s: control characters out, and
// non-ASCII text in RFC 2047 form, which ntfy decodes.
func headerText(s string) string {
	s = cut(sanitizeTerminal(s), ntfyHeaderMax)
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return mime.QEncoding.Encode("utf-8", s)
		}
	}
	return s
}

// httpLink is the dashboard link when it is an http(s) URL receivers can
// open, else empty.
func httpLink(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ""
	}
	return s
}

// The generic JSON body: the event's own fields at the top level (as
// before v1) and the alert's around them.
type jsonBox struct {
	Host       string `json:"host"`
	NodeID     string `json:"node_id,omitempty"`
	InstanceID string `json:"instance_id,omitempty"`
	Owner      string `json:"owner,omitempty"`
	Provider   string `json:"provider,omitempty"`
	Region     string `json:"region,omitempty"`
}

func jsonBody(a Alert) any {
	status := "trigger"
	if a.Resolve {
		status = "resolve"
	}
	return struct {
		Schema string `json:"schema"`
		gpuwarden.Event
		Node     string   `json:"node"`
		Source   string   `json:"source"`
		Status   string   `json:"status"`
		Resolves []string `json:"resolves,omitempty"`
		Title    string   `json:"title"`
		Summary  string   `json:"summary"`
		Action   string   `json:"action"`
		DryRun   bool     `json:"dry_run"`
		Box      jsonBox  `json:"box"`
		Money    *Money   `json:"money"`
		Link     string   `json:"link,omitempty"`
		Facts    []Fact   `json:"facts"`
	}{
		Schema: AlertSchema, Event: a.Event, Node: a.Box.Host, Source: "gpuwarden", Status: status,
		Resolves: a.Resolves, Title: a.Title, Summary: a.Summary, Action: a.Action, DryRun: a.Box.DryRun,
		Box:   jsonBox{a.Box.Host, a.Box.NodeID, a.Box.InstanceID, a.Box.Owner, a.Box.Provider, a.Box.Region},
		Money: a.Money, Link: a.Box.Link, Facts: a.Facts,
	}
}
