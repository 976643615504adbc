// Package preempt hears a cloud's preemption and maintenance notices from the
// instance metadata service of AWS, GCP and Azure, so that the agent can tell
// jobs within two seconds (it polls every second; SkyPilot polls every five).
//
// One provider event is one notice ID for its whole life, because the agent
// and `gpuwarden run` act once per ID: AWS's spot instance-action is
// "aws-spot-instance-action" and its rebalance recommendation
// "aws-rebalance" (the metadata mock re-sends both with a new time on every
// request), a scheduled event is its EventId, GCP's preemption is
// "gcp-preempted" and each maintenance window "gcp-maintenance-N". When an
// event a source reported is completed, canceled or withdrawn, the source
// reports the same ID and Kind once more with Canceled set, so that a stop
// planned for it can be called off; spot interruptions, rebalance
// recommendations and GCP preemptions are never canceled. Watch delivers an
// ID again only when its deadline moves earlier or it is canceled.
//
// Sources only read, with one exception the user opts into: *Azure is an
// Approver, and the CLI approves (POST StartRequests) an Azure event only
// under --azure-approve and only after the job's checkpoint has committed,
// because approval lets Azure evict, reboot or redeploy the VM at once.
// Azure lists the events of every VM in an availability set or scale-set
// placement group to all of them, so *Azure reports and approves only the
// events whose Resources name this VM (compute.name, read once).
//
// How much warning a notice gives depends on the VM: GCP announces
// TERMINATE_ON_HOST_MAINTENANCE an hour ahead on a VM with GPUs and 60 s
// ahead on others, so *GCP reads the machine type and host maintenance
// policy once. Health turns poll outcomes into log lines (a warning only
// after a provider's documented warm-up, Azure's 2 minutes) and into
// gpuwarden_notice_source_up. docs/clouds.md sums up what is read, when,
// and the page each fact comes from.
//
// The formats follow the providers' own documentation:
//   - AWS IMDSv2 token: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-instance-metadata-service.html
//   - AWS spot/instance-action: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html
//   - AWS events/recommendations/rebalance: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/rebalance-recommendations.html
//   - AWS events/maintenance/scheduled: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/monitoring-instances-status-check_sched.html
//   - GCP metadata server, wait_for_change and ETags: https://cloud.google.com/compute/docs/metadata/querying-metadata
//   - GCP instance/preempted: https://cloud.google.com/compute/docs/instances/create-use-preemptible
//   - GCP instance/maintenance-event: https://cloud.google.com/compute/docs/metadata/getting-live-migration-notice
//   - GCP GPU VMs' 1-hour notice: https://cloud.google.com/compute/docs/gpus/gpu-host-maintenance
//   - GCP machine-type, scheduling/on-host-maintenance: https://cloud.google.com/compute/docs/metadata/predefined-metadata-keys
//   - Azure Scheduled Events: https://learn.microsoft.com/azure/virtual-machines/linux/scheduled-events
//
// Fakes that serve these formats on loopback live in preempt/preempttest;
// aemm_test.go also drives the AWS source against AWS's own
// amazon-ec2-metadata-mock.
package preempt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// The provider names, as Source.Provider and `--cloud` spell them.
const (
	ProviderAWS   = "aws"
	ProviderGCP   = "gcp"
	ProviderAzure = "azure"
	// ProviderNone is `--cloud none`: run without notices.
	ProviderNone = "none"
)

// ErrNoCloud says no metadata service answered, so the agent runs without
// notices rather than failing on a box that is not a cloud VM.
var ErrNoCloud = errors.New("no cloud metadata service answered")

// Endpoints are the metadata services' base URLs, separate so that tests can
// point each one at a loopback fake.
type Endpoints struct {
	AWS, GCP, Azure string
}

// DefaultEndpoints returns the real link-local addresses the three clouds
// document; GCP's name resolves only inside GCP, which keeps it off other clouds.
func DefaultEndpoints() Endpoints {
	return Endpoints{
		AWS:   "http://169.254.169.254",
		GCP:   "http://metadata.google.internal",
		Azure: "http://169.254.169.254",
	}
}

// Source reads one cloud's metadata service and reports the notices present
// now; Poll returns what it could read together with an error for what it
// could not, so that one bad path never hides a preemption.
type Source interface {
	Provider() string
	Poll(ctx context.Context) ([]gpuwarden.Notice, error)
}

// discardLogger is a source's logger until SetLogger gives it one.
var discardLogger = slog.New(slog.DiscardHandler)

// SetLogger gives src the logger for what it reads but doubts (an Azure
// NotBefore that does not parse is acted on as due now, and said so at
// warning level); sources that doubt nothing ignore it.
func SetLogger(src Source, log *slog.Logger) {
	if s, ok := src.(interface{ setLogger(*slog.Logger) }); ok && log != nil {
		s.setLogger(log)
	}
}

// Approver is a Source whose cloud lets the instance acknowledge an event so
// that it starts sooner (Azure's StartRequests). It is separate from Source
// because approving hands the VM over early: the CLI checks
// src.(preempt.Approver) and approves only when the user asked for it and
// the checkpoint has committed. id is the notice's ID.
type Approver interface {
	Approve(ctx context.Context, id string) error
}

// Client timeouts: a non-cloud box must fail the dial fast (link-local
// addresses often black-hole), and a hung answer must not eat the 2 s budget.
const (
	dialTimeout    = 300 * time.Millisecond
	requestTimeout = 2 * time.Second
	maxBody        = 1 << 20
)

// NewClient returns the HTTP client the package uses when given nil: 300 ms to
// connect (name lookup included), 2 s per request, no proxy because
// HTTP_PROXY must never see link-local metadata requests, and no redirects
// because no documented metadata path redirects.
func NewClient() *http.Client {
	dialer := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	return &http.Client{
		Timeout: requestTimeout,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           dialer.DialContext,
			ResponseHeaderTimeout: requestTimeout,
			MaxIdleConns:          8,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// ForProvider builds the Source `--cloud aws|gcp|azure|none` names without
// probing; "none" returns ErrNoCloud so the agent treats it like a failed Detect.
func ForProvider(name string, client *http.Client, ep Endpoints) (Source, error) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case ProviderAWS:
		return NewAWS(client, ep.AWS), nil
	case ProviderGCP:
		return NewGCP(client, ep.GCP), nil
	case ProviderAzure:
		return NewAzure(client, ep.Azure), nil
	case ProviderNone:
		return nil, ErrNoCloud
	}
	return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "unknown cloud %q", name).
		WithHint("use --cloud aws, gcp, azure or none, or leave it out to detect")
}

// response is one metadata answer, read whole because every document is small.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends one request without a body and reads at most maxBody bytes of the answer.
func do(ctx context.Context, client *http.Client, method, url string, header map[string]string) (response, error) {
	return doBody(ctx, client, method, url, header, nil)
}

// doBody is do with a request body; nil sends none.
func doBody(ctx context.Context, client *http.Client, method, url string, header map[string]string, body []byte) (response, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return response{}, err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(res.Body, maxBody+1))
	if err != nil {
		return response{}, fmt.Errorf("read body: %w", err)
	}
	if len(answer) > maxBody {
		return response{}, fmt.Errorf("body over %d bytes", maxBody)
	}
	return response{status: res.StatusCode, header: res.Header, body: answer}, nil
}

// pathError names the provider and path, so a log line says which document broke.
func pathError(provider, path string, err error) error {
	return fmt.Errorf("%s %s: %w", provider, path, err)
}

// statusError is an answer with a status the documentation does not give.
func statusError(r response) error {
	return fmt.Errorf("unexpected status %d: %s", r.status, snippet(r.body))
}

// snippet shortens a body for an error message.
func snippet(b []byte) string {
	s := string(bytes.TrimSpace(b))
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return fmt.Sprintf("%q", s)
}

// newClientIfNil gives callers the safe default client when they pass none.
func newClientIfNil(c *http.Client) *http.Client {
	if c == nil {
		return NewClient()
	}
	return c
}

// trimBase drops a trailing slash so base+path never doubles it.
func trimBase(base string) string { return strings.TrimRight(base, "/") }
