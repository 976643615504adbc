package preempt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// The IMDSv2 paths and headers, as the EC2 user guide documents them.
const (
	awsTokenPath      = "/latest/api/token"
	awsSpotPath       = "/latest/meta-data/spot/instance-action"
	awsRebalancePath  = "/latest/meta-data/events/recommendations/rebalance"
	awsScheduledPath  = "/latest/meta-data/events/maintenance/scheduled"
	awsInstanceIDPath = "/latest/meta-data/instance-id"

	awsTTLHeader   = "X-aws-ec2-metadata-token-ttl-seconds"
	awsTokenHeader = "X-aws-ec2-metadata-token"

	// awsTokenTTL is the longest TTL IMDSv2 grants (6 h): fewer PUTs.
	awsTokenTTL = 21600 * time.Second
	// awsTokenSlack renews the token this long before it expires, so a poll
	// never spends its 2 s budget on a 401 round trip.
	awsTokenSlack = time.Minute

	// awsScheduledLayout is the NotBefore format of the scheduled-events
	// document ("21 Jan 2019 09:00:43 GMT", and "4 Dec 2026 03:10:37 GMT"
	// from amazon-ec2-metadata-mock), unlike the RFC 3339 spot time.
	awsScheduledLayout = "2 Jan 2006 15:04:05 MST"

	// AWSSpotID is the ID of the spot interruption notice: one per instance,
	// because an instance is interrupted once, and IMDS (and its mock, on
	// every request) may re-send the document with a new time or action.
	AWSSpotID = "aws-spot-instance-action"
	// AWSRebalanceID is the ID of the rebalance recommendation, which EC2
	// emits at most once per instance; its noticeTime is not part of it.
	AWSRebalanceID = "aws-rebalance"
)

// AWS polls the EC2 instance metadata service through IMDSv2 only, because
// instances launched with HttpTokens=required refuse v1 and v2 works on all.
type AWS struct {
	// Now is the clock for token expiry, a field so tests can move it.
	Now func() time.Time

	client *http.Client
	base   string

	mu      sync.Mutex
	token   string
	expires time.Time

	// events holds the scheduled events reported, so that one that turns
	// completed or canceled, or leaves the list, is canceled once.
	evmu   sync.Mutex
	events ledger
}

// NewAWS returns a Source for the EC2 metadata service at base; a nil client
// means NewClient().
func NewAWS(client *http.Client, base string) *AWS {
	return &AWS{Now: time.Now, client: newClientIfNil(client), base: trimBase(base)}
}

// Provider returns "aws".
func (a *AWS) Provider() string { return ProviderAWS }

// tokenFor returns a session token valid for at least awsTokenSlack, asking
// IMDSv2 for a new one (PUT with a TTL header) when needed.
func (a *AWS) tokenFor(ctx context.Context) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.Now()
	if a.token != "" && now.Before(a.expires.Add(-awsTokenSlack)) {
		return a.token, nil
	}
	res, err := do(ctx, a.client, http.MethodPut, a.base+awsTokenPath,
		map[string]string{awsTTLHeader: strconv.Itoa(int(awsTokenTTL / time.Second))})
	if err != nil {
		return "", tokenError{pathError(ProviderAWS, awsTokenPath, err)}
	}
	if res.status != http.StatusOK {
		return "", tokenError{pathError(ProviderAWS, awsTokenPath, statusError(res))}
	}
	token := strings.TrimSpace(string(res.body))
	if token == "" || strings.ContainsAny(token, "\r\n") {
		return "", tokenError{pathError(ProviderAWS, awsTokenPath, errors.New("empty or malformed token"))}
	}
	ttl := awsTokenTTL
	// IMDS echoes the granted TTL; trust it over what we asked for.
	if s := res.header.Get(awsTTLHeader); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			ttl = time.Duration(n) * time.Second
		}
	}
	a.token, a.expires = token, now.Add(ttl)
	return token, nil
}

// tokenError marks a failed token PUT, after which no metadata path can answer.
type tokenError struct{ error }

// Unwrap exposes the cause.
func (e tokenError) Unwrap() error { return e.error }

// dropToken forgets a token IMDS refused, so the next call asks for a new one.
func (a *AWS) dropToken(refused string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.token == refused {
		a.token = ""
	}
}

// get reads one metadata path; a 401 (token expired or IMDS restarted) gets
// one retry with a fresh token, as the IMDSv2 documentation advises.
func (a *AWS) get(ctx context.Context, path string) (response, error) {
	for attempt := 0; ; attempt++ {
		token, err := a.tokenFor(ctx)
		if err != nil {
			return response{}, err
		}
		res, err := do(ctx, a.client, http.MethodGet, a.base+path, map[string]string{awsTokenHeader: token})
		if err != nil {
			return response{}, pathError(ProviderAWS, path, err)
		}
		if res.status == http.StatusUnauthorized && attempt == 0 {
			a.dropToken(token)
			continue
		}
		return res, nil
	}
}

// Poll reads the spot interruption notice, the rebalance recommendation and
// the scheduled maintenance events; each one missing (404) means no notice.
// The spot notice is a preemption with ID AWSSpotID at the document's time;
// the recommendation a rebalance with ID AWSRebalanceID and no time;
// scheduled events keep their EventId, system-reboot and instance-reboot are
// reboots, the other codes maintenance, each at its NotBefore. A scheduled
// event reported earlier that turns completed or canceled, or is no longer
// listed, comes back once with Canceled set.
func (a *AWS) Poll(ctx context.Context) ([]gpuwarden.Notice, error) {
	var notices []gpuwarden.Notice
	var errs []error
	for _, read := range []func(context.Context) ([]gpuwarden.Notice, error){a.spot, a.rebalance, a.scheduled} {
		n, err := read(ctx)
		notices = append(notices, n...)
		if err != nil {
			errs = append(errs, err)
			// A token failure fails every path alike; say it once.
			var te tokenError
			if ctx.Err() != nil || errors.As(err, &te) {
				break
			}
		}
	}
	return notices, errors.Join(errs...)
}

// probe checks that base is EC2's IMDSv2: a token, then an instance ID ("i-…")
// read with it, because a PUT that happens to answer 200 proves nothing.
func (a *AWS) probe(ctx context.Context) error {
	res, err := a.get(ctx, awsInstanceIDPath)
	if err != nil {
		return err
	}
	if res.status != http.StatusOK {
		return pathError(ProviderAWS, awsInstanceIDPath, statusError(res))
	}
	if !strings.HasPrefix(strings.TrimSpace(string(res.body)), "i-") {
		return pathError(ProviderAWS, awsInstanceIDPath, fmt.Errorf("not an instance id: %s", snippet(res.body)))
	}
	return nil
}

// awsInstanceAction is spot/instance-action: present only once EC2 has
// decided to interrupt, e.g. {"action": "terminate", "time": "2017-09-18T08:22:00Z"}.
type awsInstanceAction struct {
	Action string `json:"action"`
	Time   string `json:"time"`
}

// spot maps the interruption notice to a preemption at its time, under the
// one ID AWSSpotID whatever the time and action say.
func (a *AWS) spot(ctx context.Context) ([]gpuwarden.Notice, error) {
	body, ok, err := a.document(ctx, awsSpotPath)
	if err != nil || !ok {
		return nil, err
	}
	var doc awsInstanceAction
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, pathError(ProviderAWS, awsSpotPath, fmt.Errorf("decode: %w", err))
	}
	switch doc.Action {
	case "terminate", "stop", "hibernate":
	default:
		return nil, pathError(ProviderAWS, awsSpotPath, fmt.Errorf("unknown action %q", doc.Action))
	}
	at, err := time.Parse(time.RFC3339, doc.Time)
	if err != nil {
		return nil, pathError(ProviderAWS, awsSpotPath, fmt.Errorf("time: %w", err))
	}
	return []gpuwarden.Notice{{
		Provider: ProviderAWS,
		Kind:     gpuwarden.NoticePreemption,
		At:       at.UTC(),
		Detail:   "spot " + doc.Action,
		ID:       AWSSpotID,
	}}, nil
}

// awsRebalance is events/recommendations/rebalance: {"noticeTime": "2020-11-05T08:22:00Z"},
// present only after EC2 emits the recommendation.
type awsRebalance struct {
	NoticeTime string `json:"noticeTime"`
}

// rebalance maps the recommendation; it carries no interruption time, so At
// stays zero and the emission time goes into Detail, not into the ID.
func (a *AWS) rebalance(ctx context.Context) ([]gpuwarden.Notice, error) {
	body, ok, err := a.document(ctx, awsRebalancePath)
	if err != nil || !ok {
		return nil, err
	}
	var doc awsRebalance
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, pathError(ProviderAWS, awsRebalancePath, fmt.Errorf("decode: %w", err))
	}
	if _, err := time.Parse(time.RFC3339, doc.NoticeTime); err != nil {
		return nil, pathError(ProviderAWS, awsRebalancePath, fmt.Errorf("noticeTime: %w", err))
	}
	return []gpuwarden.Notice{{
		Provider: ProviderAWS,
		Kind:     gpuwarden.NoticeRebalance,
		Detail:   "rebalance recommended at " + doc.NoticeTime,
		ID:       AWSRebalanceID,
	}}, nil
}

// awsScheduledEvent is one entry of events/maintenance/scheduled, a JSON
// list present when the instance has active maintenance events.
type awsScheduledEvent struct {
	NotBefore   string `json:"NotBefore"`
	NotAfter    string `json:"NotAfter"`
	Code        string `json:"Code"`
	Description string `json:"Description"`
	EventID     string `json:"EventId"`
	State       string `json:"State"`
}

// scheduled maps reboots to NoticeReboot and stop, retirement and
// maintenance to NoticeMaintenance. Completed and canceled events are
// history, except that one reported earlier is canceled; so is one that
// leaves the list, unless an entry without EventId makes that unknowable.
func (a *AWS) scheduled(ctx context.Context) ([]gpuwarden.Notice, error) {
	body, ok, err := a.document(ctx, awsScheduledPath)
	if err != nil {
		return nil, err
	}
	var events []awsScheduledEvent
	if ok {
		if err := json.Unmarshal(body, &events); err != nil {
			return nil, pathError(ProviderAWS, awsScheduledPath, fmt.Errorf("decode: %w", err))
		}
	}
	a.evmu.Lock()
	defer a.evmu.Unlock()
	var notices []gpuwarden.Notice
	var errs []error
	present := make(map[string]bool, len(events))
	complete := true
	for i, ev := range events {
		if ev.EventID == "" {
			errs = append(errs, pathError(ProviderAWS, awsScheduledPath, fmt.Errorf("event %d has no EventId", i)))
			complete = false
			continue
		}
		present[ev.EventID] = true
		if state, ended := awsEnded(ev); ended {
			if n, ok := a.events.cancel(ev.EventID, awsDetail(ev.Code+" "+state, ev.Description)); ok {
				notices = append(notices, n)
			}
			continue
		}
		var at time.Time
		if ev.NotBefore != "" {
			t, err := time.Parse(awsScheduledLayout, ev.NotBefore)
			if err != nil {
				errs = append(errs, pathError(ProviderAWS, awsScheduledPath, fmt.Errorf("event %s NotBefore: %w", ev.EventID, err)))
				continue
			}
			at = t.UTC()
		}
		n := gpuwarden.Notice{
			Provider: ProviderAWS, Kind: awsScheduledKind(ev.Code), At: at,
			Detail: awsDetail(ev.Code, ev.Description), ID: ev.EventID,
		}
		a.events.put(n)
		notices = append(notices, n)
	}
	if complete {
		notices = append(notices, a.events.sweep(present, "no longer scheduled")...)
	}
	return notices, errors.Join(errs...)
}

// awsEnded says whether a scheduled event is over, by its State or, as the
// user guide shows for events kept in the list, a "[Completed]" or
// "[Canceled]" description prefix; state is the word for Detail.
func awsEnded(ev awsScheduledEvent) (state string, ended bool) {
	switch s := strings.ToLower(ev.State); {
	case s == "completed" || strings.HasPrefix(ev.Description, "[Completed]"):
		return "completed", true
	case s == "canceled" || s == "cancelled" || strings.HasPrefix(ev.Description, "[Canceled]"):
		return "canceled", true
	}
	return "", false
}

// awsScheduledKind maps an event code: the two reboots reboot the instance;
// instance-stop, instance-retirement, system-maintenance and any code AWS
// adds later stop it or take its host, which is maintenance.
func awsScheduledKind(code string) string {
	switch code {
	case "system-reboot", "instance-reboot":
		return gpuwarden.NoticeReboot
	}
	return gpuwarden.NoticeMaintenance
}

// awsDetail is "code: description", or the code alone.
func awsDetail(code, description string) string {
	if description == "" {
		return code
	}
	return code + ": " + description
}

// document returns a metadata document's body, ok=false when the category is
// absent (404) or empty, which is how IMDS says "no notice".
func (a *AWS) document(ctx context.Context, path string) ([]byte, bool, error) {
	res, err := a.get(ctx, path)
	if err != nil {
		return nil, false, err
	}
	switch res.status {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, false, nil
	default:
		return nil, false, pathError(ProviderAWS, path, statusError(res))
	}
	body := strings.TrimSpace(string(res.body))
	if body == "" {
		return nil, false, nil
	}
	return []byte(body), true, nil
}
