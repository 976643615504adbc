// Package notify sends the agent's events where people see them: webhooks
// in the receiver's own format (Slack Block Kit, Microsoft Teams Adaptive
// Cards, Discord embeds, PagerDuty Events v2, ntfy, generic JSON) and
// wall(1) on the box itself, with a burst guard (Dedup) and a fan-out
// (Multi) around them. An event whose Data names the keys it resolves ends
// those alerts: a PagerDuty resolve, a short "resolved" message elsewhere.
//
// Delivery is best effort with a bound: a webhook retries what a retry can
// fix (network errors, 429, 5xx) a few times with backoff, and gives up with
// an error the caller can log; the ledger, not this package, remembers what
// was sent across restarts.
package notify

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpuwarden/gpuwarden"
)

// Defaults for a Webhook; the options below change them.
const (
	// DefaultAttempts is how many times a send is tried in all.
	DefaultAttempts = 4
	// DefaultTimeout bounds one attempt.
	DefaultTimeout = 5 * time.Second
	// DefaultBackoff is the first wait between attempts; it doubles after each.
	DefaultBackoff = 500 * time.Millisecond
	// DefaultMaxDelay caps the doubling wait.
	DefaultMaxDelay = 10 * time.Second
	// DefaultMaxRetryAfter is the longest Retry-After a webhook waits out;
	// beyond it the send fails at once, since an alert that arrives an hour
	// late is worth less than an error in the log now.
	DefaultMaxRetryAfter = time.Minute
)

const (
	// bodySnippet is how much of an error response an error quotes: enough
	// for Slack's "invalid_payload" or a proxy's one-line reason.
	bodySnippet = 200
	// drainLimit is how much of a response is read past the snippet so that
	// the connection can be reused; bigger bodies cost a new connection.
	drainLimit = 64 << 10
	// maxTextBytes keeps the text under Discord's 2,000-character limit;
	// Slack and Mattermost take more, but an alert should be short anyway.
	maxTextBytes = 1900
)

// Webhook posts events to one HTTP endpoint; it is safe for concurrent use.
type Webhook struct {
	url        string
	target     string // scheme://host, what errors and logs show: the path of a Slack URL is its secret
	format     string
	routingKey string // PagerDuty's integration key, never logged
	client     *http.Client
	box        Box
	attempts   int
	timeout    time.Duration
	base       time.Duration
	maxDelay   time.Duration
	maxAfter   time.Duration
	sleep      func(ctx context.Context, d time.Duration) error
	rand       func() float64
	log        *slog.Logger
}

var _ gpuwarden.Notifier = (*Webhook)(nil)

// Option changes one setting of a Webhook.
type Option func(*Webhook)

// WithNode names the box in every message; the default is the host name.
func WithNode(node string) Option { return func(w *Webhook) { w.box.Host = node } }

// WithBox sets what every message says about the box: its IDs, owner,
// provider, dashboard and live money; an empty Host keeps the host name.
func WithBox(b Box) Option {
	return func(w *Webhook) {
		if b.Host == "" {
			b.Host = w.box.Host
		}
		w.box = b
	}
}

// WithAttempts sets how many times a send is tried in all (at least 1).
func WithAttempts(n int) Option {
	return func(w *Webhook) { w.attempts = max(n, 1) }
}

// WithTimeout bounds each attempt, so that one hung endpoint cannot hold
// the agent's alert path for longer than attempts × timeout.
func WithTimeout(d time.Duration) Option { return func(w *Webhook) { w.timeout = d } }

// WithSleep replaces the wait between attempts, so that tests need not
// wait; sleep must return early with ctx's error when ctx ends.
func WithSleep(sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(w *Webhook) { w.sleep = sleep }
}

// WithRand replaces the jitter source, a function returning [0, 1), so that
// tests see exact delays; it must be safe for concurrent use.
func WithRand(rand func() float64) Option { return func(w *Webhook) { w.rand = rand } }

// WithLogger sets where retries are noted (at debug level).
func WithLogger(log *slog.Logger) Option { return func(w *Webhook) { w.log = log } }

// NewWebhook returns a webhook posting to rawURL in format (one of
// Formats; "" or FormatAuto infers it from the URL) through client (nil
// means a plain http.Client); a bad URL or format is an invalid-input error.
// A PagerDuty URL is pagerduty://ROUTING_KEY or an events URL with
// ?routing_key=ROUTING_KEY; the key is never posted in the URL. A URL may
// name its own format first, "json+https://…" (SplitFormat).
func NewWebhook(rawURL, format string, client *http.Client, opts ...Option) (*Webhook, error) {
	if f, rest, ok := SplitFormat(rawURL); ok {
		// A format named on the URL is the most specific: it wins over the flag.
		format, rawURL = f, rest
	}
	if !slices.Contains(Formats, format) && format != "" {
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "webhook format %q is not known", format).
			WithHint("use one of %s", strings.Join(Formats, ", "))
	}
	if format == "" || format == FormatAuto {
		u, err := url.Parse(rawURL)
		if err != nil {
			return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "webhook url is not a url")
		}
		format = InferFormat(u)
	}
	u, key, err := endpoint(rawURL, format)
	if err != nil {
		return nil, err
	}
	if client == nil {
		client = &http.Client{}
	}
	node, _ := os.Hostname()
	w := &Webhook{
		url:        u.String(),
		target:     u.Scheme + "://" + u.Host,
		format:     format,
		routingKey: key,
		client:     client,
		box:        Box{Host: node},
		attempts:   DefaultAttempts,
		timeout:    DefaultTimeout,
		base:       DefaultBackoff,
		maxDelay:   DefaultMaxDelay,
		maxAfter:   DefaultMaxRetryAfter,
		sleep:      sleepCtx,
		rand:       rand.Float64,
		log:        slog.New(slog.DiscardHandler),
	}
	for _, o := range opts {
		o(w)
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	return w, nil
}

// SplitFormat reads a format named on the URL itself, "ntfy+https://…" or
// "json+http://…", so that one list of webhooks can mix formats the URL
// does not tell; ok is false for a URL without one.
func SplitFormat(rawURL string) (format, rest string, ok bool) {
	f, rest, found := strings.Cut(rawURL, "+")
	if !found || f == FormatAuto || !slices.Contains(Formats, f) ||
		!(strings.HasPrefix(rest, "http://") || strings.HasPrefix(rest, "https://")) {
		return "", rawURL, false
	}
	return f, rest, true
}

// String names the endpoint without its secret path, for logs.
func (w *Webhook) String() string { return "webhook " + w.target }

// Format is the body format in use, inferred or named.
func (w *Webhook) Format() string { return w.format }

// StatusError is an endpoint's non-2xx answer, kept whole so that callers
// can tell a wrong URL or payload (4xx) from an outage (5xx).
type StatusError struct {
	// StatusCode is the HTTP status, never a 2xx.
	StatusCode int
	// Status is the status line's text, "429 Too Many Requests".
	Status string
	// Body is the first 200 bytes of the answer, where endpoints say why.
	Body string
	// RetryAfter is the wait the endpoint asked for; zero when it did not.
	RetryAfter time.Duration
}

// Error names the status and quotes the start of the body.
func (e *StatusError) Error() string {
	if e.Body == "" {
		return "status " + e.Status
	}
	return fmt.Sprintf("status %s: %q", e.Status, e.Body)
}

// Notify posts the event (for PagerDuty, one resolve per key it resolves),
// retrying network errors, 429 and 5xx with exponential backoff; other 4xx
// fail at once, since a retry cannot fix them.
func (w *Webhook) Notify(ctx context.Context, e gpuwarden.Event) error {
	return w.sendAlert(ctx, NewAlert(e, w.box))
}

// sendAlert sends an alert in the webhook's format, every request it takes.
func (w *Webhook) sendAlert(ctx context.Context, a Alert) error {
	reqs, err := w.requests(a)
	if err != nil {
		return fmt.Errorf("%s: %w", w, err)
	}
	var errs []error
	for _, r := range reqs {
		if err := w.send(ctx, r); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// send posts one request with the retry policy.
func (w *Webhook) send(ctx context.Context, r request) error {
	for attempt := 1; ; attempt++ {
		err := w.post(ctx, r)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !retryable(err) || attempt >= w.attempts {
			return fmt.Errorf("%s: attempt %d of %d: %w", w, attempt, w.attempts, err)
		}
		wait := w.backoff(attempt)
		if se := (*StatusError)(nil); errors.As(err, &se) && se.RetryAfter > 0 {
			if se.RetryAfter > w.maxAfter {
				return fmt.Errorf("%s: attempt %d of %d: retry after %s is longer than %s: %w",
					w, attempt, w.attempts, se.RetryAfter, w.maxAfter, err)
			}
			// Honour the endpoint's wait, but never retry sooner than our own
			// backoff would: a Retry-After of 0 or 1 s in a storm is common.
			wait = max(wait, se.RetryAfter)
		}
		w.log.Debug("webhook send failed, retrying", "target", w.target, "attempt", attempt, "wait", wait, "err", err)
		if serr := w.sleep(ctx, wait); serr != nil {
			return fmt.Errorf("%s: attempt %d of %d: %w", w, attempt, w.attempts, errors.Join(err, serr))
		}
	}
}

// post makes one attempt, bounded by the per-attempt timeout.
func (w *Webhook) post(ctx context.Context, r request) error {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(r.body))
	if err != nil {
		return fmt.Errorf("new request: %w", err)
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	req.Header.Set("User-Agent", "gpuwarden")
	resp, err := w.client.Do(req)
	if err != nil {
		// *url.Error quotes the whole URL, secret path included; keep only
		// its cause, and mark it as a transport failure for retryable.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return &netError{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
		return nil
	}
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, bodySnippet))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
	return &StatusError{
		StatusCode: resp.StatusCode,
		Status:     resp.Status,
		Body:       strings.TrimSpace(strings.ToValidUTF8(string(snippet), "")),
		RetryAfter: retryAfter(resp.Header.Get("Retry-After")),
	}
}

// netError marks a failure before any answer: a refused or reset
// connection, a DNS miss, an attempt that timed out.
type netError struct{ err error }

func (e *netError) Error() string { return "post: " + e.err.Error() }
func (e *netError) Unwrap() error { return e.err }

// retryable says whether another attempt could succeed.
func retryable(err error) bool {
	var ne *netError
	if errors.As(err, &ne) {
		// A certificate the client rejects stays rejected; anything else
		// before an answer (refused, reset, timed out) may pass next time.
		var ce *tls.CertificateVerificationError
		return !errors.As(err, &ce)
	}
	var se *StatusError
	if errors.As(err, &se) {
		return se.StatusCode == http.StatusTooManyRequests || se.StatusCode >= 500
	}
	return false
}

// retryAfter reads a Retry-After given in seconds; the HTTP-date form is
// ignored (the backoff applies), as chat endpoints send seconds.
func retryAfter(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

// backoff is the wait after a failed attempt (1-based): base doubling per
// attempt up to maxDelay, with "equal jitter" — half fixed, half random —
// so that agents failing together spread out yet never retry at once.
func (w *Webhook) backoff(attempt int) time.Duration {
	if w.base <= 0 {
		return 0
	}
	d := w.maxDelay
	if shift := attempt - 1; shift < 32 && w.base<<shift < w.maxDelay && w.base<<shift > 0 {
		d = w.base << shift
	}
	half := d / 2
	return half + time.Duration(w.rand()*float64(d-half))
}

// sleepCtx waits for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Body is the first request body Notify sends for e, exposed so that a dry
// run can show what would be posted.
func (w *Webhook) Body(e gpuwarden.Event) ([]byte, error) {
	reqs, err := w.requests(NewAlert(e, w.box))
	if err != nil || len(reqs) == 0 {
		return nil, err
	}
	return reqs[0].body, nil
}

// Text is the one-line human form of an event, "[WARNING] kind on node:
// message", shared by the chat and wall notifiers; the severity is a plain
// word, not an emoji, so that it reads the same in every client and in grep.
func Text(e gpuwarden.Event, node string) string {
	sev := strings.ToUpper(e.Severity)
	if sev == "" {
		sev = strings.ToUpper(gpuwarden.SeverityInfo)
	}
	var b strings.Builder
	b.WriteString("[" + sev + "]")
	if e.Kind != "" {
		b.WriteString(" " + e.Kind)
	}
	if node != "" {
		b.WriteString(" on " + node)
	}
	b.WriteString(": " + e.Message)
	return truncate(b.String(), maxTextBytes)
}

// truncate cuts s to at most n bytes at a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// slackEscape escapes the three characters Slack's text treats as markup
// (<@U123>, <url|label>); Mattermost's Markdown turns the entities back.
var slackEscape = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace
