package notify

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// budgetEvent has the characters each format must treat with care: Slack
// markup (<, >, &) and a quote.
var budgetEvent = gpuwarden.Event{
	Time:     time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC),
	Kind:     "budget",
	Severity: gpuwarden.SeverityWarning,
	Message:  `spent 80% of <$500> & "more"`,
	Key:      "budget-actual-80-2026-11",
	Data:     map[string]string{"spent": "400.00", "limit": "500.00"},
}

// recorder is a webhook endpoint on 127.0.0.1 that answers from a script
// and keeps every body it got.
type recorder struct {
	mu      sync.Mutex
	bodies  []string
	headers []http.Header
	answers []func(w http.ResponseWriter, r *http.Request)
}

func (rec *recorder) serve(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		n := len(rec.bodies)
		rec.bodies = append(rec.bodies, string(b))
		rec.headers = append(rec.headers, r.Header.Clone())
		var answer func(http.ResponseWriter, *http.Request)
		if n < len(rec.answers) {
			answer = rec.answers[n]
		}
		rec.mu.Unlock()
		if answer == nil {
			_, _ = io.WriteString(w, "ok")
			return
		}
		answer(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func (rec *recorder) got() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]string(nil), rec.bodies...)
}

func status(code int, body string, header ...string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

// sleeps records the waits a webhook asks for instead of waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleeps) got() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

func newTestWebhook(t *testing.T, url, format string, sl *sleeps, opts ...Option) *Webhook {
	t.Helper()
	base := []Option{WithNode("gpu-box-1"), WithSleep(sl.sleep), WithRand(func() float64 { return 0.5 })}
	w, err := NewWebhook(url, format, nil, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestWebhookJSONKeepsEventFields checks that the generic JSON body still
// carries the event's own fields at the top level, as before the alert
// schema: receivers that route on "kind" or "key" keep working.
func TestWebhookJSONKeepsEventFields(t *testing.T) {
	rec := &recorder{}
	srv := rec.serve(t)
	w := newTestWebhook(t, srv.URL+"/hook", FormatJSON, &sleeps{})
	if err := w.Notify(context.Background(), budgetEvent); err != nil {
		t.Fatal(err)
	}
	got := rec.got()
	if len(got) != 1 {
		t.Fatalf("got %d bodies, want 1", len(got))
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(got[0]), &body); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"schema": AlertSchema, "time": "2026-11-29T12:00:00Z", "kind": "budget", "severity": "warning",
		"message": `spent 80% of <$500> & "more"`, "key": "budget-actual-80-2026-11", "node": "gpu-box-1",
		"source": "gpuwarden", "status": "trigger"}
	for k, v := range want {
		if body[k] != v {
			t.Errorf("%s = %#v, want %#v", k, body[k], v)
		}
	}
	if ct := rec.headers[0].Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
}

func TestWebhookLongTextIsCut(t *testing.T) {
	w := newTestWebhook(t, "http://127.0.0.1:1/", FormatSlack, &sleeps{})
	body, err := w.Body(gpuwarden.Event{Severity: "info", Message: strings.Repeat("é", 3000)})
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Text) > maxTextBytes || !strings.HasSuffix(v.Text, "...") {
		t.Errorf("text is %d bytes, ends %q; want at most %d bytes ending in ...", len(v.Text), v.Text[len(v.Text)-10:], maxTextBytes)
	}
	checkSlack(t, body)
}

func TestWebhookRetries(t *testing.T) {
	tests := []struct {
		name       string
		answers    []func(http.ResponseWriter, *http.Request)
		opts       []Option
		wantPosts  int
		wantSleeps []time.Duration
		wantErr    []string // substrings; nil means success
	}{
		{
			name:      "500 then success",
			answers:   []func(http.ResponseWriter, *http.Request){status(500, "boom")},
			wantPosts: 2,
			// Equal jitter with rand 0.5: 250 ms + 0.5 × 250 ms.
			wantSleeps: []time.Duration{375 * time.Millisecond},
		},
		{
			name: "429 honours Retry-After",
			answers: []func(http.ResponseWriter, *http.Request){
				status(429, "rate_limited", "Retry-After", "3"),
				status(503, "", "Retry-After", "1"), // longer than the 750 ms backoff: honoured
				status(503, "", "Retry-After", "1"), // shorter than the 1.5 s backoff: backoff wins
			},
			wantPosts:  4,
			wantSleeps: []time.Duration{3 * time.Second, time.Second, 1500 * time.Millisecond},
		},
		{
			name:      "400 is not retried",
			answers:   []func(http.ResponseWriter, *http.Request){status(400, "invalid_payload\n")},
			wantPosts: 1,
			wantErr:   []string{"status 400 Bad Request", `"invalid_payload"`, "attempt 1 of 4"},
		},
		{
			name:      "404 quotes only the first 200 bytes",
			answers:   []func(http.ResponseWriter, *http.Request){status(404, strings.Repeat("x", 199)+"yz")},
			wantPosts: 1,
			wantErr:   []string{"status 404 Not Found", `"` + strings.Repeat("x", 199) + `y"`},
		},
		{
			name: "5xx until attempts run out",
			answers: []func(http.ResponseWriter, *http.Request){
				status(502, "a"), status(502, "b"), status(502, "c"), status(502, "d"), status(200, "never"),
			},
			wantPosts:  4,
			wantSleeps: []time.Duration{375 * time.Millisecond, 750 * time.Millisecond, 1500 * time.Millisecond},
			wantErr:    []string{"attempt 4 of 4", "status 502 Bad Gateway", `"d"`},
		},
		{
			name:       "Retry-After beyond the limit fails at once",
			answers:    []func(http.ResponseWriter, *http.Request){status(429, "", "Retry-After", "3600")},
			wantPosts:  1,
			wantSleeps: nil,
			wantErr:    []string{"retry after 1h0m0s is longer than 1m0s", "status 429"},
		},
		{
			name:       "attempts option",
			answers:    []func(http.ResponseWriter, *http.Request){status(500, ""), status(500, "")},
			opts:       []Option{WithAttempts(2)},
			wantPosts:  2,
			wantSleeps: []time.Duration{375 * time.Millisecond},
			wantErr:    []string{"attempt 2 of 2", "status 500"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{answers: tt.answers}
			srv := rec.serve(t)
			sl := &sleeps{}
			w := newTestWebhook(t, srv.URL, FormatSlack, sl, tt.opts...)
			err := w.Notify(context.Background(), budgetEvent)
			if tt.wantErr == nil && err != nil {
				t.Fatalf("Notify: %v", err)
			}
			for _, want := range tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("error = %v, want it to contain %q", err, want)
				}
			}
			if got := len(rec.got()); got != tt.wantPosts {
				t.Errorf("posts = %d, want %d", got, tt.wantPosts)
			}
			if got := sl.got(); !slices.Equal(got, tt.wantSleeps) {
				t.Errorf("sleeps = %v, want %v", got, tt.wantSleeps)
			}
		})
	}
}

func TestWebhookStatusErrorIsInspectable(t *testing.T) {
	rec := &recorder{answers: []func(http.ResponseWriter, *http.Request){status(403, "no_service")}}
	srv := rec.serve(t)
	w := newTestWebhook(t, srv.URL, FormatJSON, &sleeps{})
	err := w.Notify(context.Background(), budgetEvent)
	var se *StatusError
	if !errors.As(err, &se) || se.StatusCode != 403 || se.Body != "no_service" {
		t.Fatalf("error = %#v, want a *StatusError 403 with body no_service", err)
	}
}

func TestWebhookPerAttemptTimeout(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	posts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		posts++
		mu.Unlock()
		select { // hang until the client gives up
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)

	sl := &sleeps{}
	w := newTestWebhook(t, srv.URL, FormatSlack, sl, WithAttempts(2), WithTimeout(100*time.Millisecond))
	start := time.Now()
	err := w.Notify(context.Background(), budgetEvent)
	elapsed := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error = %v, want context.DeadlineExceeded", err)
	}
	if elapsed > 3*time.Second {
		t.Errorf("Notify took %s; each attempt should stop after 100ms", elapsed)
	}
	mu.Lock()
	defer mu.Unlock()
	if posts != 2 {
		t.Errorf("posts = %d, want 2 (the timeout is retried)", posts)
	}
}

func TestWebhookStopsWhenContextEnds(t *testing.T) {
	rec := &recorder{answers: []func(http.ResponseWriter, *http.Request){status(500, ""), status(500, "")}}
	srv := rec.serve(t)
	ctx, cancel := context.WithCancel(context.Background())
	w := newTestWebhook(t, srv.URL, FormatSlack, &sleeps{}, WithSleep(func(context.Context, time.Duration) error {
		cancel() // the agent shuts down during the backoff
		return context.Canceled
	}))
	err := w.Notify(ctx, budgetEvent)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error = %v, want context.Canceled", err)
	}
	if got := len(rec.got()); got != 1 {
		t.Errorf("posts = %d, want 1", got)
	}
}

func TestWebhookErrorsHideTheURLPath(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL + "/services/T0/B0/s3cr3t"
	srv.Close() // nothing listens: a connection error quoting the URL
	w := newTestWebhook(t, url, FormatSlack, &sleeps{}, WithAttempts(1))
	err := w.Notify(context.Background(), budgetEvent)
	if err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("error = %v, want a failure that does not quote the secret path", err)
	}
}

func TestWebhookBadCertificateIsNotRetried(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.bodies = append(rec.bodies, "")
		rec.mu.Unlock()
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	srv.StartTLS()
	defer srv.Close()
	sl := &sleeps{}
	w := newTestWebhook(t, srv.URL, FormatSlack, sl) // a plain client: the test CA is unknown to it
	err := w.Notify(context.Background(), budgetEvent)
	var ce *tls.CertificateVerificationError
	if !errors.As(err, &ce) {
		t.Fatalf("error = %v, want a certificate verification error", err)
	}
	if got := sl.got(); len(got) != 0 {
		t.Errorf("sleeps = %v, want no retry", got)
	}
}

func TestNewWebhookRejects(t *testing.T) {
	tests := []struct{ name, url, format string }{
		{"bad format", "https://hooks.example.com/x", "xml"},
		{"no scheme", "hooks.example.com/x", FormatSlack},
		{"ftp", "ftp://hooks.example.com/x", FormatSlack},
		{"empty", "", FormatJSON},
		{"pagerduty without key", "https://events.pagerduty.com/v2/enqueue", FormatPagerDuty},
		{"pagerduty short key", "pagerduty://abc", FormatAuto},
		{"pagerduty odd key", "pagerduty://" + strings.Repeat("a", 31) + "-", FormatAuto},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewWebhook(tt.url, tt.format, nil)
			if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
				t.Errorf("NewWebhook(%q, %q) = %v, want an invalid-input error", tt.url, tt.format, err)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	tests := []struct {
		attempt  int
		rand     float64
		min, max time.Duration
	}{
		{1, 0, 250 * time.Millisecond, 250 * time.Millisecond},
		{1, 0.999999, 499 * time.Millisecond, 500 * time.Millisecond},
		{2, 0, 500 * time.Millisecond, 500 * time.Millisecond},
		{5, 0, 4 * time.Second, 4 * time.Second},
		{6, 0.999999, 9999 * time.Millisecond, 10 * time.Second}, // 16 s capped at 10 s
		{60, 0, 5 * time.Second, 5 * time.Second},                // no overflow
	}
	for _, tt := range tests {
		w, err := NewWebhook("http://127.0.0.1:1/", FormatJSON, nil, WithRand(func() float64 { return tt.rand }))
		if err != nil {
			t.Fatal(err)
		}
		if got := w.backoff(tt.attempt); got < tt.min || got > tt.max {
			t.Errorf("backoff(%d) with rand %v = %s, want in [%s, %s]", tt.attempt, tt.rand, got, tt.min, tt.max)
		}
	}
}
