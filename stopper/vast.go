package stopper

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// Vast.ai's documented API and container environment:
//   - stop instance: https://docs.vast.ai/api/stop-instance
//   - show instance: https://docs.vast.ai/api/show-instance (statuses: https://docs.vast.ai/cli/reference/show-instance)
//   - authentication: https://docs.vast.ai/api-reference/authentication
//   - CONTAINER_ID and CONTAINER_API_KEY in every instance: https://docs.vast.ai/guides/instances/docker-environment
const (
	// DefaultVastAPI is Vast.ai's API.
	DefaultVastAPI = "https://console.vast.ai/api/v0"
	// VastIDEnv names the instance's ID in its environment.
	VastIDEnv = "CONTAINER_ID"
	// VastLabelEnv is the older "C.<id>" label, read when CONTAINER_ID is not set.
	VastLabelEnv = "VAST_CONTAINERLABEL"
	// VastAPIKeyEnv names the user's API key.
	VastAPIKeyEnv = "VAST_API_KEY"
	// VastContainerKeyEnv names the per-instance key Vast gives every container.
	VastContainerKeyEnv = "CONTAINER_API_KEY"
)

// Vast stops this instance through Vast.ai's API: an instance is a
// container, and a shutdown inside it does not stop it or its bill.
type Vast struct {
	// API is the API's base URL (--vast-api).
	API string
	// InstanceID and APIKey override the environment.
	InstanceID, APIKey string

	opts  Options
	cache proveCache
}

// NewVast returns the Vast stopper with the documented endpoint.
func NewVast(o Options) *Vast { return &Vast{API: DefaultVastAPI, opts: o.withDefaults()} }

// Method returns gpuwarden.StopVast.
func (v *Vast) Method() string { return gpuwarden.StopVast }

// ids returns the instance ID, the API key and where the key came from.
func (v *Vast) ids() (id, key, keyFrom string, err error) {
	id = cmpOr(v.InstanceID, v.opts.Getenv(VastIDEnv))
	if id == "" {
		if label := v.opts.Getenv(VastLabelEnv); strings.HasPrefix(label, "C.") {
			id = strings.TrimPrefix(label, "C.")
		}
	}
	if id == "" {
		return "", "", "", fail(gpuwarden.EEnvironment, "run inside a Vast.ai instance (Vast sets "+VastIDEnv+"), or give the instance ID", nil,
			"vast: no instance ID (%s and %s are empty)", VastIDEnv, VastLabelEnv)
	}
	switch {
	case v.APIKey != "":
		key, keyFrom = v.APIKey, "configuration"
	case v.opts.Getenv(VastAPIKeyEnv) != "":
		key, keyFrom = v.opts.Getenv(VastAPIKeyEnv), VastAPIKeyEnv
	case v.opts.Getenv(VastContainerKeyEnv) != "":
		key, keyFrom = v.opts.Getenv(VastContainerKeyEnv), VastContainerKeyEnv
	default:
		return "", "", "", fail(gpuwarden.EUnauthorized, "set "+VastAPIKeyEnv+" to a Vast.ai API key (cloud.vast.ai, Keys)", nil,
			"vast: no API key (%s and %s are empty)", VastAPIKeyEnv, VastContainerKeyEnv)
	}
	return id, key, keyFrom, nil
}

// vastInstance is the part of an instance Vast's show answers with.
type vastInstance struct {
	ID             json.Number `json:"id"`
	ActualStatus   string      `json:"actual_status"`
	IntendedStatus string      `json:"intended_status"`
	CurState       string      `json:"cur_state"`
}

// instanceURL is the instance's URL; Vast's paths end with a slash.
func (v *Vast) instanceURL(id string) string {
	return trimBase(v.API) + "/instances/" + url.PathEscape(id) + "/"
}

// send sends one authenticated request.
func (v *Vast) send(ctx context.Context, method, u, key string, body []byte) (response, error) {
	h := http.Header{"Authorization": {"Bearer " + key}, "Accept": {"application/json"}}
	if body != nil {
		h.Set("Content-Type", "application/json")
	}
	res, err := do(ctx, v.opts.apiClient(), method, u, h, body)
	if err != nil {
		return response{}, unreachable("Vast.ai's API", "--vast-api", err)
	}
	return res, nil
}

// vastFailure maps an error answer.
func vastFailure(what, id string, res response) error {
	var e struct {
		Error string `json:"error"`
		Msg   string `json:"msg"`
	}
	_ = json.Unmarshal(res.body, &e)
	msg := fmt.Sprintf("vast %s: status %d: %s", what, res.status, cmpOr(strings.TrimSpace(e.Error+" "+e.Msg), snippet(res.body)))
	switch res.status {
	case http.StatusUnauthorized:
		return fail(gpuwarden.EUnauthorized, "set "+VastAPIKeyEnv+" to a valid Vast.ai API key", nil, "%s", msg)
	case http.StatusForbidden:
		return fail(gpuwarden.EForbidden, "use a Vast.ai API key allowed to manage instances ("+VastAPIKeyEnv+")", nil, "%s", msg)
	case http.StatusNotFound:
		return fail(gpuwarden.ENotFound, "check "+VastIDEnv+" ("+id+") names this instance", nil, "%s", msg)
	}
	return fail(gpuwarden.EUnavailable, "retry later; Vast.ai answered an error", nil, "%s", msg)
}

// get reads the instance.
func (v *Vast) get(ctx context.Context, id, key string) (vastInstance, error) {
	res, err := v.send(ctx, http.MethodGet, v.instanceURL(id), key, nil)
	if err != nil {
		return vastInstance{}, err
	}
	if res.status != http.StatusOK {
		return vastInstance{}, vastFailure("show instance", id, res)
	}
	var doc struct {
		Instances json.RawMessage `json:"instances"`
	}
	if err := json.Unmarshal(res.body, &doc); err != nil {
		return vastInstance{}, fail(gpuwarden.EUnavailable, "check --vast-api", err, "vast show instance: decode")
	}
	// The documented answer is {"instances": {…}}; accept a one-item list too.
	var in vastInstance
	raw := bytes.TrimSpace(doc.Instances)
	if len(raw) > 0 && raw[0] == '[' {
		var list []vastInstance
		if err := json.Unmarshal(raw, &list); err == nil && len(list) > 0 {
			in = list[0]
		}
	} else if len(raw) > 0 && raw[0] == '{' {
		_ = json.Unmarshal(raw, &in)
	}
	if in.ID == "" && in.ActualStatus == "" && in.IntendedStatus == "" {
		return in, fail(gpuwarden.ENotFound, "check "+VastIDEnv+" ("+id+") names this instance", nil,
			"vast show instance %s: no instance in the answer", id)
	}
	return in, nil
}

// Prove reads the instance with the API key: it proves the key and the
// instance ID. Vast has no dry run, so the right to stop is not proven by
// the read; the proof says so.
func (v *Vast) Prove(ctx context.Context) (gpuwarden.StopProof, error) {
	return v.cache.prove(ctx, v.opts, v.prove)
}

func (v *Vast) prove(ctx context.Context) (gpuwarden.StopProof, error) {
	p := newProof(v.Method(), v.opts.Now())
	id, key, keyFrom, err := v.ids()
	if err != nil {
		return p.refuse(err)
	}
	p.check("instance %s, API key from %s", id, keyFrom)
	in, err := v.get(ctx, id, key)
	if err != nil {
		return p.refuse(err)
	}
	if in.ID != "" && in.ID.String() != id {
		return p.refuse(fail(gpuwarden.EUnavailable, "check --vast-api", nil, "vast: asked for instance %s, got %s", id, in.ID))
	}
	p.check("GET /instances/%s/ with the key: actual_status %s, intended_status %s", id,
		cmpOr(in.ActualStatus, "null"), cmpOr(in.IntendedStatus, "unset"))
	p.check("Vast has no dry run: the key's right to stop is assumed from its read")
	return p.ok()
}

// Stop sends PUT /instances/{id}/ {"state":"stopped"}, then reads the
// instance until actual_status is stopped (disk charges continue, no GPU
// charges) or ConfirmWithin passes.
func (v *Vast) Stop(ctx context.Context) (gpuwarden.StopOutcome, error) {
	start := v.opts.Now()
	out := gpuwarden.StopOutcome{Method: v.Method(), At: start, Billing: gpuwarden.NodeRunning}
	id, key, _, err := v.ids()
	if err != nil {
		return out, err
	}
	defer v.cache.forget()
	res, err := v.send(ctx, http.MethodPut, v.instanceURL(id), key, []byte(`{"state":"stopped"}`))
	if err != nil {
		return out, err
	}
	out.HTTPStatus = res.status
	var ok struct {
		Success *bool  `json:"success"`
		Msg     string `json:"msg"`
	}
	_ = json.Unmarshal(res.body, &ok)
	if res.status/100 != 2 || (ok.Success != nil && !*ok.Success) {
		return out, vastFailure("stop instance", id, res)
	}
	out.Billing = gpuwarden.NodeStopRequested
	v.opts.Log.Info("vast stop accepted", "instance", id, "status", res.status, "msg", ok.Msg)
	in, done, err := poll(ctx, v.opts, start, func(ctx context.Context) (vastInstance, time.Duration, error) {
		in, err := v.get(ctx, id, key)
		return in, 0, err
	}, func(in vastInstance) bool { return in.ActualStatus == "stopped" })
	out.State, out.At = in.ActualStatus, v.opts.Now()
	switch {
	case err != nil:
		out.Detail = "stop accepted; reading the instance back failed: " + err.Error()
	case done:
		out.Billing = gpuwarden.NodeStopped
		out.Detail = "Vast.ai reports the instance stopped: no GPU charges; disk charges continue until it is destroyed"
	default:
		out.Detail = fmt.Sprintf("stop accepted (intended_status %s); actual_status was %s after %s",
			cmpOr(in.IntendedStatus, "unset"), cmpOr(in.ActualStatus, "null"), out.At.Sub(start).Round(time.Second))
	}
	return out, nil
}
