package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/notify/notifytest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// routingKey is a made-up PagerDuty integration key of the documented shape.
const routingKey = "R0UT1NGKEY0123456789abcdefABCDEF"

var at = time.Date(2026, 12, 2, 7, 30, 0, 0, time.UTC)

// testBox is a box with everything known: IDs, labels, a dashboard and a
// live budget meter.
func testBox(dryRun bool) Box {
	return Box{Host: "gpu-box-1", NodeID: "n-7f3a", InstanceID: "i-0abc123", Owner: "ana", Provider: "aws",
		Region: "eu-west-1", Link: "http://fleet.example:8080/", DryRun: dryRun, StopCommand: "shutdown -h now",
		Status: func() gpuwarden.AgentStatus {
			return gpuwarden.AgentStatus{Node: "gpu-box-1",
				Idle:   gpuwarden.IdleState{Idle: true, StopAt: at.Add(5 * time.Minute), DryRun: dryRun},
				Budget: gpuwarden.BudgetState{Currency: "USD", HourlyRate: 2_500_000, Spent: 4120, Limit: 50000}}
		}}
}

// The events every format is checked with: a warning before a stop, a dry
// run's stop, the end of the idle episode, and a text with markup and
// characters that need care.
var (
	idleWarning = gpuwarden.Event{Time: at, Kind: "idle-warning", Severity: gpuwarden.SeverityWarning,
		Key:     "idle-warning-2026-12-02T07:00:00Z",
		Message: "gpu-box-1 has been idle since 2026-12-02T07:00:00Z: it stops at 2026-12-02T07:35:00Z unless work starts"}
	idleStop = gpuwarden.Event{Time: at, Kind: "idle-stop", Severity: gpuwarden.SeverityCritical,
		Key:     "idle-stop-2026-12-02T07:00:00Z",
		Message: "gpu-box-1 idle for 30m0s (GPUs under 5%, no jobs): stopping with shutdown -h now"}
	idleOver = gpuwarden.Event{Time: at.Add(time.Minute), Kind: "idle-over", Severity: gpuwarden.SeverityInfo,
		Key:     "idle-over-2026-12-02T07:00:00Z",
		Message: "gpu-box-1 is busy again (GPU 0 at 93%): the idle stop is off",
		Data:    map[string]string{gpuwarden.DataResolves: "idle-warning-2026-12-02T07:00:00Z idle-stop-2026-12-02T07:00:00Z"}}
)

type receiverCase struct {
	name   string
	url    func(base string) string // the webhook URL on the loopback receiver
	format string
	check  func(t *testing.T, body []byte, h http.Header)
}

var receivers = []receiverCase{
	{"slack", func(b string) string { return b + "/services/T0/B0/secret" }, FormatSlack,
		func(t *testing.T, b []byte, _ http.Header) { checkSlack(t, b) }},
	{"teams", func(b string) string { return b + "/workflows/abc/triggers/manual/paths/invoke?sig=secret" }, FormatTeams,
		func(t *testing.T, b []byte, _ http.Header) { notifytest.CheckTeams(t, b) }},
	{"discord", func(b string) string { return b + "/api/webhooks/123/secret" }, FormatDiscord,
		func(t *testing.T, b []byte, _ http.Header) { checkDiscord(t, b) }},
	{"pagerduty", func(b string) string { return b + "/v2/enqueue?routing_key=" + routingKey }, FormatPagerDuty,
		func(t *testing.T, b []byte, _ http.Header) { notifytest.CheckPagerDuty(t, b) }},
	{"ntfy", func(b string) string { return b + "/gpu-alerts" }, FormatNtfy, checkNtfy},
	{"json", func(b string) string { return b + "/hook" }, FormatJSON,
		func(t *testing.T, b []byte, _ http.Header) { checkJSON(t, b) }},
}

// TestReceiversAcceptEveryAlert posts each event in each format to a
// loopback receiver that decodes the body and checks it against the
// receiver's documented schema, and compares it with its golden file.
func TestReceiversAcceptEveryAlert(t *testing.T) {
	events := []struct {
		name   string
		event  gpuwarden.Event
		dryRun bool
	}{
		{"warning", idleWarning, false},
		{"dry-run-stop", idleStop, true},
		{"resolve", idleOver, true},
		{"markup", budgetEvent, false},
	}
	for _, rc := range receivers {
		for _, ev := range events {
			t.Run(rc.name+"/"+ev.name, func(t *testing.T) {
				rec := &recorder{}
				srv := rec.serve(t)
				w := newTestWebhook(t, rc.url(srv.URL), rc.format, &sleeps{}, WithBox(testBox(ev.dryRun)))
				if err := w.Notify(context.Background(), ev.event); err != nil {
					t.Fatal(err)
				}
				bodies := rec.got()
				wantN := 1
				if rc.format == FormatPagerDuty && ev.name == "resolve" {
					wantN = 2 // one resolve per key the event ends
				}
				if len(bodies) != wantN {
					t.Fatalf("receiver got %d requests, want %d", len(bodies), wantN)
				}
				var golden bytes.Buffer
				for i, b := range bodies {
					rc.check(t, []byte(b), rec.headers[i])
					if rc.format == FormatNtfy {
						for _, k := range []string{"Title", "Priority", "Tags", "Click"} {
							fmt.Fprintf(&golden, "%s: %s\n", k, rec.headers[i].Get(k))
						}
					}
					golden.WriteString(indent(t, []byte(b)) + "\n")
				}
				text := strings.Join(bodies, "\n")
				if rc.format == FormatNtfy {
					text += "\n" + rec.headers[0].Get("Title")
				}
				for _, want := range wantText(ev.name, rc.format) {
					if !strings.Contains(text, want) {
						t.Errorf("body does not say %q:\n%s", want, text)
					}
				}
				checkGolden(t, filepath.Join("testdata", rc.name+"-"+ev.name+".golden"), golden.Bytes())
			})
		}
	}
}

// TestReceiversCutLongText sends an alert far over every receiver's limits
// (10,000 characters, multi-byte, in the message, the host and the owner):
// each body must still pass its receiver's checks.
func TestReceiversCutLongText(t *testing.T) {
	long := strings.Repeat("é日x", 3400)
	box := testBox(false)
	box.Host, box.Owner = "box-"+long[:600], long
	ev := gpuwarden.Event{Time: at, Kind: "xid", Severity: gpuwarden.SeverityCritical, Key: "xid-" + long, Message: long}
	for _, rc := range receivers {
		t.Run(rc.name, func(t *testing.T) {
			rec := &recorder{}
			srv := rec.serve(t)
			w := newTestWebhook(t, rc.url(srv.URL), rc.format, &sleeps{}, WithBox(box))
			if err := w.Notify(context.Background(), ev); err != nil {
				t.Fatal(err)
			}
			bodies := rec.got()
			if len(bodies) != 1 {
				t.Fatalf("receiver got %d requests, want 1", len(bodies))
			}
			rc.check(t, []byte(bodies[0]), rec.headers[0])
		})
	}
}

// wantText is what a message must say, whatever its format: the box, the
// owner, the provider, the money, the dashboard, and the dry run.
func wantText(event, format string) []string {
	if format == FormatPagerDuty && event == "resolve" {
		return []string{`"event_action":"resolve"`, `"dedup_key":"idle-warning-2026-12-02T07:00:00Z"`, `"dedup_key":"idle-stop-2026-12-02T07:00:00Z"`}
	}
	want := []string{"gpu-box-1", "n-7f3a", "i-0abc123", "ana", "aws/eu-west-1", "$2.50/h", "$41.20 spent this month", "$500.00 budget",
		"http://fleet.example:8080/"}
	switch event {
	case "dry-run-stop":
		want = append(want, "dry run: would have stopped the box", "DRY RUN")
	case "resolve":
		want = append(want, "RESOLVED", "busy again")
	case "warning":
		want = append(want, "stops the box (shutdown -h now) at 2026-12-02T07:35:00Z unless work starts")
	}
	return want
}

func indent(t *testing.T, b []byte) string {
	t.Helper()
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return string(b) // ntfy's body is text
	}
	return out.String()
}

func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./notify -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test ./notify -update rewrites it):\n got:\n%s\nwant:\n%s", path, got, want)
	}
}

func decode(t *testing.T, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, b)
	}
}

// checkSlack checks a Block Kit message (notifytest.CheckSlack).
func checkSlack(t *testing.T, b []byte) { t.Helper(); notifytest.CheckSlack(t, b) }

// checkDiscord checks an execute-webhook body against Discord's limits.
func checkDiscord(t *testing.T, b []byte) {
	t.Helper()
	var m struct {
		Content string `json:"content"`
		Embeds  []struct {
			Title       string `json:"title"`
			Description string `json:"description"`
			Timestamp   string `json:"timestamp"`
			Color       int    `json:"color"`
			Footer      struct {
				Text string `json:"text"`
			} `json:"footer"`
			Fields []struct {
				Name, Value string
			} `json:"fields"`
		} `json:"embeds"`
		AllowedMentions struct {
			Parse []string `json:"parse"`
		} `json:"allowed_mentions"`
	}
	decode(t, b, &m)
	if m.Content == "" && len(m.Embeds) == 0 {
		t.Error("discord: neither content nor embeds")
	}
	if n := utf8.RuneCountInString(m.Content); n > 2000 {
		t.Errorf("discord: content of %d characters, at most 2000", n)
	}
	if len(m.Embeds) > 10 {
		t.Errorf("discord: %d embeds, at most 10", len(m.Embeds))
	}
	total := 0
	for i, e := range m.Embeds {
		if n := utf8.RuneCountInString(e.Title); n > 256 {
			t.Errorf("discord: embed %d: title of %d characters, at most 256", i, n)
		}
		if n := utf8.RuneCountInString(e.Description); n > 4096 {
			t.Errorf("discord: embed %d: description of %d characters, at most 4096", i, n)
		}
		if _, err := time.Parse(time.RFC3339, e.Timestamp); err != nil {
			t.Errorf("discord: embed %d: timestamp %q is not ISO 8601", i, e.Timestamp)
		}
		if e.Color < 0 || e.Color > 0xffffff {
			t.Errorf("discord: embed %d: color %d", i, e.Color)
		}
		if len(e.Fields) > 25 {
			t.Errorf("discord: embed %d: %d fields, at most 25", i, len(e.Fields))
		}
		total += utf8.RuneCountInString(e.Title + e.Description + e.Footer.Text)
		for _, f := range e.Fields {
			if f.Name == "" || f.Value == "" || utf8.RuneCountInString(f.Name) > 256 || utf8.RuneCountInString(f.Value) > 1024 {
				t.Errorf("discord: embed %d: field %q", i, f.Name)
			}
			total += utf8.RuneCountInString(f.Name + f.Value)
		}
	}
	if total > 6000 {
		t.Errorf("discord: embeds hold %d characters, at most 6000", total)
	}
	if m.AllowedMentions.Parse == nil || len(m.AllowedMentions.Parse) != 0 {
		t.Errorf("discord: allowed_mentions.parse = %v, want [] (no pings)", m.AllowedMentions.Parse)
	}
}

// checkNtfy checks a plain-text publish: text body, and the headers ntfy reads.
func checkNtfy(t *testing.T, b []byte, h http.Header) {
	t.Helper()
	if json.Valid(b) {
		t.Errorf("ntfy: body is JSON, ntfy would show it raw: %s", b)
	}
	if len(b) == 0 || len(b) > 4096 || !utf8.Valid(b) {
		t.Errorf("ntfy: body of %d bytes, want 1..4096 of UTF-8", len(b))
	}
	if !strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
		t.Errorf("ntfy: Content-Type %q", h.Get("Content-Type"))
	}
	if h.Get("Title") == "" {
		t.Error("ntfy: no Title")
	}
	if !slices.Contains([]string{"1", "2", "3", "4", "5"}, h.Get("Priority")) {
		t.Errorf("ntfy: Priority %q, want 1..5", h.Get("Priority"))
	}
	for _, tag := range strings.Split(h.Get("Tags"), ",") {
		if tag == "" {
			t.Errorf("ntfy: empty tag in %q", h.Get("Tags"))
		}
	}
	if c := h.Get("Click"); c != "" {
		if u, err := url.Parse(c); err != nil || u.Scheme == "" {
			t.Errorf("ntfy: Click %q is not a url", c)
		}
	}
}

// checkJSON checks the generic body against docs/alerts.md's schema.
func checkJSON(t *testing.T, b []byte) {
	t.Helper()
	var m struct {
		Schema   string `json:"schema"`
		Time     string `json:"time"`
		Kind     string `json:"kind"`
		Severity string `json:"severity"`
		Message  string `json:"message"`
		Node     string `json:"node"`
		Source   string `json:"source"`
		Status   string `json:"status"`
		Title    string `json:"title"`
		Summary  string `json:"summary"`
		Action   string `json:"action"`
		DryRun   *bool  `json:"dry_run"`
		Box      *struct {
			Host string `json:"host"`
		} `json:"box"`
	}
	decode(t, b, &m)
	switch {
	case m.Schema != AlertSchema:
		t.Errorf("json: schema %q", m.Schema)
	case m.Status != "trigger" && m.Status != "resolve":
		t.Errorf("json: status %q", m.Status)
	case m.Source != "gpuwarden" || m.Box == nil || m.Box.Host == "" || m.Node != m.Box.Host:
		t.Errorf("json: source %q, node %q, box %+v", m.Source, m.Node, m.Box)
	case m.Title == "" || m.Summary == "" || m.Action == "" || m.DryRun == nil:
		t.Errorf("json: title, summary, action and dry_run are required: %s", b)
	}
	if _, err := time.Parse(time.RFC3339, m.Time); err != nil {
		t.Errorf("json: time %q", m.Time)
	}
}

func TestInferFormat(t *testing.T) {
	tests := []struct{ url, want string }{
		{"https://hooks.slack.com/services/T0/B0/X", FormatSlack},
		{"https://prod-12.westeurope.logic.azure.com:443/workflows/abc/triggers/manual/paths/invoke?sig=x", FormatTeams},
		{"https://contoso.webhook.office.com/webhookb2/abc", FormatTeams},
		{"https://default1234.56.environment.api.powerplatform.com:443/powerautomate/automations/direct/workflows/abc", FormatTeams},
		{"https://discord.com/api/webhooks/123/tok", FormatDiscord},
		{"https://discordapp.com/api/webhooks/123/tok", FormatDiscord},
		{"https://discord.com/api/webhooks/123/tok/slack", FormatSlack},
		{"https://events.pagerduty.com/v2/enqueue?routing_key=" + routingKey, FormatPagerDuty},
		{"https://events.eu.pagerduty.com/v2/enqueue?routing_key=" + routingKey, FormatPagerDuty},
		{"pagerduty://" + routingKey, FormatPagerDuty},
		{"https://ntfy.sh/gpu-alerts", FormatNtfy},
		{"https://ntfy.example.org/gpu-alerts", FormatNtfy},
		{"https://example.org/ntfy/gpu-alerts", FormatNtfy},
		{"https://mattermost.example.org/hooks/xyz", FormatSlack},
		{"https://discord.com/channels/1/2", FormatSlack},             // not a webhook path
		{"json+https://hooks.slack.com/services/T0/B0/X", FormatJSON}, // named on the URL: it wins
		{"ntfy+http://127.0.0.1:8080/alerts", FormatNtfy},
		{"pagerduty+https://events.pagerduty.com/v2/enqueue?routing_key=" + routingKey, FormatPagerDuty},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		// InferFormat reads hosts; a format named on the URL is NewWebhook's.
		if _, _, named := SplitFormat(tt.url); !named {
			if got := InferFormat(u); got != tt.want {
				t.Errorf("InferFormat(%s) = %q, want %q", tt.url, got, tt.want)
			}
		}
		w, err := NewWebhook(tt.url, FormatAuto, nil)
		if err != nil {
			t.Errorf("NewWebhook(%s): %v", tt.url, err)
			continue
		}
		if w.Format() != tt.want {
			t.Errorf("NewWebhook(%s).Format() = %q, want %q", tt.url, w.Format(), tt.want)
		}
	}
}

func TestSplitFormat(t *testing.T) {
	tests := []struct{ in, format, rest string }{
		{"json+https://x.example/hook", FormatJSON, "https://x.example/hook"},
		{"teams+http://127.0.0.1:9/flow", FormatTeams, "http://127.0.0.1:9/flow"},
		{"auto+https://x.example/", "", "auto+https://x.example/"},
		{"xml+https://x.example/", "", "xml+https://x.example/"},
		{"json+ftp://x.example/", "", "json+ftp://x.example/"},
		{"https://a+b.example/", "", "https://a+b.example/"},
	}
	for _, tt := range tests {
		f, rest, ok := SplitFormat(tt.in)
		if f != tt.format || rest != tt.rest || ok != (tt.format != "") {
			t.Errorf("SplitFormat(%q) = %q, %q, %v; want %q, %q", tt.in, f, rest, ok, tt.format, tt.rest)
		}
	}
	w, err := NewWebhook("ntfy+http://127.0.0.1:9/alerts", FormatSlack, nil)
	if err != nil || w.Format() != FormatNtfy || w.url != "http://127.0.0.1:9/alerts" {
		t.Errorf("NewWebhook with a named format: %v, format %q, url %q", err, w.Format(), w.url)
	}
}

// TestPagerDutyKeyStaysOutOfTheURL checks that both URL forms post to the
// events endpoint without the routing key in the URL, and never show it.
func TestPagerDutyKeyStaysOutOfTheURL(t *testing.T) {
	tests := []struct{ url, format, wantPost string }{
		{"pagerduty://" + routingKey, FormatAuto, PagerDutyEventsURL},
		{"https://events.pagerduty.com/v2/enqueue?routing_key=" + routingKey, FormatAuto, PagerDutyEventsURL},
		{"http://127.0.0.1:9/v2/enqueue?routing_key=" + routingKey + "&x=1", FormatPagerDuty, "http://127.0.0.1:9/v2/enqueue?x=1"},
	}
	for _, tt := range tests {
		w, err := NewWebhook(tt.url, tt.format, nil)
		if err != nil {
			t.Fatalf("NewWebhook: %v", err)
		}
		if w.url != tt.wantPost {
			t.Errorf("posts to %q, want %q", w.url, tt.wantPost)
		}
		if w.routingKey != routingKey {
			t.Errorf("routing key %q, want %q", w.routingKey, routingKey)
		}
		if strings.Contains(w.String(), routingKey) {
			t.Errorf("String() %q shows the key", w)
		}
	}
	_, err := NewWebhook("pagerduty://"+routingKey[:31], FormatAuto, nil)
	if err == nil || strings.Contains(err.Error(), routingKey[:31]) {
		t.Errorf("a short key: err %v, want an error that does not quote it", err)
	}
}

// TestDryRunMarksEveryStop checks the wording of a dry run in the
// alert itself: every format builds on it.
func TestDryRunMarksEveryStop(t *testing.T) {
	for _, kind := range []string{"idle-stop", "budget-stop", "offhours-stop"} {
		a := NewAlert(gpuwarden.Event{Time: at, Kind: kind, Severity: gpuwarden.SeverityCritical, Message: "stopping"}, testBox(true))
		if !strings.HasPrefix(a.Summary, "dry run: would have stopped the box") || !strings.HasPrefix(a.Action, "dry run: would have") {
			t.Errorf("%s: summary %q, action %q, want both marked dry run", kind, a.Summary, a.Action)
		}
		a = NewAlert(gpuwarden.Event{Time: at, Kind: kind, Severity: gpuwarden.SeverityCritical, Message: "stopping"}, testBox(false))
		if strings.Contains(a.Text(), "dry run") {
			t.Errorf("%s: a real stop says dry run: %s", kind, a.Text())
		}
	}
	a := NewAlert(gpuwarden.Event{Time: at, Kind: "ecc", Severity: gpuwarden.SeverityCritical, Message: "ECC"}, Box{Host: "h"})
	if got := a.Facts[1]; got.Name != "Money" || !strings.HasPrefix(got.Value, "unknown") {
		t.Errorf("with no status the money fact is %+v, want unknown", got)
	}
}

// FuzzWebhookURL feeds any URL and format to NewWebhook: it must return an
// invalid-input error or a webhook, never panic, and never quote a
// PagerDuty key in its error.
func FuzzWebhookURL(f *testing.F) {
	f.Add("pagerduty://"+routingKey, FormatAuto)
	f.Add("https://events.pagerduty.com/v2/enqueue?routing_key=%zz", FormatPagerDuty)
	f.Add("https://hooks.slack.com/services/a", "")
	f.Add("http://[::1]:80/ntfy/x", FormatNtfy)
	f.Add("pagerduty:opaque", FormatAuto)
	f.Fuzz(func(t *testing.T, raw, format string) {
		w, err := NewWebhook(raw, format, nil)
		if err != nil {
			if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
				t.Fatalf("error %v is not invalid input", err)
			}
			return
		}
		if !slices.Contains(Formats, w.Format()) || w.Format() == FormatAuto {
			t.Fatalf("format %q", w.Format())
		}
		if _, err := w.Body(idleWarning); err != nil {
			t.Fatalf("body: %v", err)
		}
	})
}
