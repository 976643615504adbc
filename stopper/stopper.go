// Package stopper stops a rented box the way its provider bills: an Azure VM
// by deallocating it, an EC2 instance or a Compute Engine VM by stopping it,
// a RunPod pod or a Vast.ai instance by stopping the container through the
// provider's API, a Lambda instance by terminating it (Lambda has no stop),
// and other boxes by an OS shutdown or the user's own command. Each stopper
// is a gpuwarden.BillStopper: Prove checks identity, credentials and
// permission without stopping anything (AWS with a DryRun, Azure by listing
// the identity's permissions, GCP with testIamPermissions, the container
// clouds with an authenticated read), and Stop reports the provider's own
// answer and the state read back.
//
// New picks the stopper for a provider and a mode from gpuwarden's stop
// semantics table, and says plainly when nothing can stop the bill there.
//
// Every request is bounded (timeouts, 1 MiB answers, no redirects, so a
// token is never sent elsewhere); Prove caches its answer, so that proving
// often costs at most one provider request a minute. The formats follow the
// providers' documentation, named in each file; stoppertest serves fakes of
// them on loopback.
package stopper

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// Defaults of Options.
const (
	// DefaultProveTTL is how long a proven answer is reused.
	DefaultProveTTL = 10 * time.Minute
	// MinProveInterval is the floor of ProveTTL and how long a refusal or
	// a failure is reused: no provider hears from Prove more than once a
	// minute.
	MinProveInterval = time.Minute
	// DefaultConfirmWithin bounds how long Stop waits for the provider to
	// report a non-billing state before answering stop-requested.
	DefaultConfirmWithin = 5 * time.Minute
	// DefaultPollEvery is the wait between two reads of the stop's progress
	// when the provider does not ask for another (Retry-After).
	DefaultPollEvery = 5 * time.Second

	maxBody        = 1 << 20
	apiTimeout     = 30 * time.Second
	apiDial        = 5 * time.Second
	metaTimeout    = 3 * time.Second
	metaDial       = time.Second
	maxRetryAfter  = time.Minute
	defaultCommand = "shutdown -h now"
)

// Options are the knobs every stopper shares; the zero value is ready.
type Options struct {
	// Client sends every request when set (tests point it at loopback
	// fakes); nil means APIClient() for provider APIs and MetadataClient()
	// for the link-local metadata services.
	Client *http.Client
	// Log receives one line per provider call; nil discards.
	Log *slog.Logger
	// Now is the clock, a field so tests can fix it.
	Now func() time.Time
	// Sleep waits between two polls of a stop; nil waits on a timer. Tests
	// give one that advances their clock.
	Sleep func(ctx context.Context, d time.Duration) error
	// ProveTTL is how long a proven answer is reused (DefaultProveTTL;
	// never below MinProveInterval).
	ProveTTL time.Duration
	// ConfirmWithin bounds the wait for a confirmed state after a stop
	// (DefaultConfirmWithin).
	ConfirmWithin time.Duration
	// PollEvery is the wait between polls (DefaultPollEvery).
	PollEvery time.Duration
	// Getenv reads the environment; nil means LookupEnv.
	Getenv func(string) string
}

// withDefaults fills the zero fields.
func (o Options) withDefaults() Options {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	if o.ProveTTL == 0 {
		o.ProveTTL = DefaultProveTTL
	}
	o.ProveTTL = max(o.ProveTTL, MinProveInterval)
	if o.ConfirmWithin <= 0 {
		o.ConfirmWithin = DefaultConfirmWithin
	}
	if o.PollEvery <= 0 {
		o.PollEvery = DefaultPollEvery
	}
	if o.Getenv == nil {
		o.Getenv = LookupEnv
	}
	return o
}

// apiClient returns the client for provider APIs.
func (o Options) apiClient() *http.Client {
	if o.Client != nil {
		return o.Client
	}
	return defaultAPI
}

// metaClient returns the client for metadata services.
func (o Options) metaClient() *http.Client {
	if o.Client != nil {
		return o.Client
	}
	return defaultMeta
}

var (
	defaultAPI  = APIClient()
	defaultMeta = MetadataClient()
)

// noRedirect keeps a bearer token from following a redirect to another host.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// APIClient returns the client for provider APIs: 5 s to connect, 30 s per
// request, the environment's proxy (corporate networks need it), no redirects.
func APIClient() *http.Client {
	dialer := &net.Dialer{Timeout: apiDial, KeepAlive: 30 * time.Second}
	return &http.Client{
		Timeout: apiTimeout,
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           dialer.DialContext,
			TLSHandshakeTimeout:   apiDial,
			ResponseHeaderTimeout: apiTimeout,
			MaxIdleConns:          4,
			IdleConnTimeout:       90 * time.Second,
		},
		CheckRedirect: noRedirect,
	}
}

// MetadataClient returns the client for link-local metadata services: 1 s
// to connect, 3 s per request, never a proxy, no redirects.
func MetadataClient() *http.Client {
	dialer := &net.Dialer{Timeout: metaDial}
	return &http.Client{
		Timeout: metaTimeout,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           dialer.DialContext,
			ResponseHeaderTimeout: metaTimeout,
			MaxIdleConns:          2,
			IdleConnTimeout:       90 * time.Second,
		},
		CheckRedirect: noRedirect,
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// LookupEnv reads a variable from this process's environment, else from
// PID 1's: container clouds (RunPod, Vast.ai) give their pod ID and API key
// to the container's first process, and an agent started from an SSH
// session does not inherit them.
func LookupEnv(name string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	data, err := os.ReadFile("/proc/1/environ")
	if err != nil {
		return ""
	}
	return envFrom(data, name)
}

// envFrom finds name in a NUL-separated environment block.
func envFrom(data []byte, name string) string {
	s := bufio.NewScanner(bytes.NewReader(data))
	s.Buffer(make([]byte, 0, 4096), len(data)+1)
	s.Split(func(b []byte, atEOF bool) (int, []byte, error) {
		if i := bytes.IndexByte(b, 0); i >= 0 {
			return i + 1, b[:i], nil
		}
		if atEOF && len(b) > 0 {
			return len(b), b, nil
		}
		return 0, nil, nil
	})
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), "="); ok && k == name {
			return v
		}
	}
	return ""
}

// response is one answer, read whole: every document here is small.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends one request and reads at most maxBody bytes of the answer.
func do(ctx context.Context, client *http.Client, method, url string, header http.Header, body []byte) (response, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return response{}, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	res, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(res.Body, maxBody+1))
	if err != nil {
		return response{}, fmt.Errorf("read answer: %w", err)
	}
	if len(answer) > maxBody {
		return response{}, fmt.Errorf("answer over %d bytes", maxBody)
	}
	return response{status: res.StatusCode, header: res.Header, body: answer}, nil
}

// snippet shortens an answer for an error message.
func snippet(b []byte) string {
	s := string(bytes.TrimSpace(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return fmt.Sprintf("%q", s)
}

// trimBase drops a trailing slash so paths can be appended.
func trimBase(s string) string { return strings.TrimRight(strings.TrimSpace(s), "/") }

// retryAfter reads a Retry-After in seconds, bounded, else def.
func retryAfter(h http.Header, def time.Duration) time.Duration {
	var n int
	if _, err := fmt.Sscanf(h.Get("Retry-After"), "%d", &n); err == nil && n >= 0 {
		return min(time.Duration(n)*time.Second, maxRetryAfter)
	}
	return def
}

// fail builds the application error of a check that did not pass.
func fail(code gpuwarden.ErrorCode, fix string, cause error, format string, args ...any) *gpuwarden.Error {
	e := gpuwarden.Errorf(code, format, args...).WithHint("%s", fix)
	e.Err = cause
	return e
}

// unreachable is the error of a provider that did not answer.
func unreachable(what, flag string, err error) *gpuwarden.Error {
	return fail(gpuwarden.EUnavailable,
		fmt.Sprintf("check that this box can reach %s (or point %s at it)", what, flag), err,
		"%s did not answer", what)
}

// proof collects what a Prove checked and ends it proven or not.
type proof struct {
	p gpuwarden.StopProof
}

// newProof starts a proof for a method at a time.
func newProof(method string, at time.Time) *proof {
	return &proof{p: gpuwarden.StopProof{Method: method, At: at}}
}

// check records one thing verified.
func (p *proof) check(format string, args ...any) {
	p.p.Checked = append(p.p.Checked, fmt.Sprintf(format, args...))
}

// ok ends the proof proven.
func (p *proof) ok() (gpuwarden.StopProof, error) {
	p.p.Proven = true
	return p.p, nil
}

// refuse ends the proof unproven with the error's message and hint.
func (p *proof) refuse(err error) (gpuwarden.StopProof, error) {
	p.p.Proven = false
	p.p.Reason = err.Error()
	var e *gpuwarden.Error
	if errors.As(err, &e) {
		p.p.Fix = e.Hint
	}
	return p.p, err
}

// proveCache keeps a Prove answer: proven ones for the TTL, the others for
// MinProveInterval, so that a fixed role is seen within a minute while a
// broken one is not asked about more than once a minute. Its lock is held
// for a whole Prove, so concurrent callers share one set of requests.
type proveCache struct {
	mu    sync.Mutex
	proof gpuwarden.StopProof
	err   error
	until time.Time
}

// prove returns the cached answer, or runs run and caches its answer.
func (c *proveCache) prove(ctx context.Context, o Options, run func(context.Context) (gpuwarden.StopProof, error)) (gpuwarden.StopProof, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := o.Now()
	if now.Before(c.until) {
		return c.proof, c.err
	}
	p, err := run(ctx)
	if ctx.Err() != nil {
		// A canceled prove says nothing about the provider: keep nothing.
		return p, err
	}
	ttl := MinProveInterval
	if err == nil && p.Proven {
		ttl = o.ProveTTL
	}
	c.proof, c.err, c.until = p, err, now.Add(ttl)
	return p, err
}

// forget drops the cached answer, after a stop changed what it said.
func (c *proveCache) forget() {
	c.mu.Lock()
	c.until = time.Time{}
	c.mu.Unlock()
}

// poll calls read until done says so or ConfirmWithin has passed since
// start, waiting between calls for what read asks (a Retry-After) or
// PollEvery; it returns the last value read and whether done said yes.
func poll[T any](ctx context.Context, o Options, start time.Time, read func(context.Context) (T, time.Duration, error), done func(T) bool) (T, bool, error) {
	var last T
	for {
		v, wait, err := read(ctx)
		if err != nil {
			return last, false, err
		}
		last = v
		if done(v) {
			return v, true, nil
		}
		if wait <= 0 {
			wait = o.PollEvery
		}
		if !o.Now().Add(wait).Before(start.Add(o.ConfirmWithin)) {
			return last, false, nil
		}
		if err := o.Sleep(ctx, wait); err != nil {
			return last, false, err
		}
	}
}
