package stopper

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// RunPod's documented REST API:
//   - stop: https://docs.runpod.io/api-reference/pods/POST/pods/podId/stop
//   - get: https://docs.runpod.io/api-reference/pods/GET/pods/podId
//   - pod-scoped key and runpodctl in every pod: https://docs.runpod.io/runpodctl
const (
	// DefaultRunPodAPI is RunPod's REST API.
	DefaultRunPodAPI = "https://rest.runpod.io/v1"
	// RunPodPodIDEnv names the pod's ID in its environment.
	RunPodPodIDEnv = "RUNPOD_POD_ID"
	// RunPodAPIKeyEnv names the API key in the pod's environment.
	RunPodAPIKeyEnv = "RUNPOD_API_KEY"
)

// RunPod stops this pod through RunPod's REST API: a pod is a container,
// and a shutdown inside it does not stop the pod or its bill.
type RunPod struct {
	// API is the REST API's base URL (--runpod-api).
	API string
	// PodID and APIKey override RUNPOD_POD_ID and RUNPOD_API_KEY.
	PodID, APIKey string

	opts  Options
	cache proveCache
}

// NewRunPod returns the RunPod stopper with the documented endpoint.
func NewRunPod(o Options) *RunPod { return &RunPod{API: DefaultRunPodAPI, opts: o.withDefaults()} }

// Method returns gpuwarden.StopRunPod.
func (r *RunPod) Method() string { return gpuwarden.StopRunPod }

// ids returns the pod ID and the API key.
func (r *RunPod) ids() (pod, key string, err error) {
	pod, key = cmpOr(r.PodID, r.opts.Getenv(RunPodPodIDEnv)), cmpOr(r.APIKey, r.opts.Getenv(RunPodAPIKeyEnv))
	if pod == "" {
		return "", "", fail(gpuwarden.EEnvironment, "run inside a RunPod pod (RunPod sets "+RunPodPodIDEnv+"), or give the pod ID", nil,
			"runpod: no pod ID (%s is empty)", RunPodPodIDEnv)
	}
	if key == "" {
		return "", "", fail(gpuwarden.EUnauthorized, "set "+RunPodAPIKeyEnv+" to an API key with write access to pods", nil,
			"runpod: no API key (%s is empty)", RunPodAPIKeyEnv)
	}
	return pod, key, nil
}

// runpodPod is the part of a pod RunPod's GET answers with.
type runpodPod struct {
	ID            string `json:"id"`
	DesiredStatus string `json:"desiredStatus"`
	Status        string `json:"status"`
}

// state is the pod's status, desiredStatus first as RunPod documents it.
func (p runpodPod) state() string { return cmpOr(p.DesiredStatus, p.Status) }

// send sends one authenticated request.
func (r *RunPod) send(ctx context.Context, method, u, key string) (response, error) {
	h := http.Header{"Authorization": {"Bearer " + key}, "Accept": {"application/json"}}
	var body []byte
	if method == http.MethodPost {
		body = []byte{}
	}
	res, err := do(ctx, r.opts.apiClient(), method, u, h, body)
	if err != nil {
		return response{}, unreachable("RunPod's API", "--runpod-api", err)
	}
	return res, nil
}

// podURL is the pod's REST URL.
func (r *RunPod) podURL(pod string) string { return trimBase(r.API) + "/pods/" + url.PathEscape(pod) }

// failure maps an error answer.
func runpodFailure(what, pod string, res response) error {
	msg := fmt.Sprintf("runpod %s: status %d: %s", what, res.status, snippet(res.body))
	switch res.status {
	case http.StatusUnauthorized:
		return fail(gpuwarden.EUnauthorized, "set "+RunPodAPIKeyEnv+" to a valid RunPod API key", nil, "%s", msg)
	case http.StatusForbidden:
		return fail(gpuwarden.EForbidden, "use an API key with read/write access to pods (RunPod console, Settings, API Keys)", nil, "%s", msg)
	case http.StatusNotFound:
		return fail(gpuwarden.ENotFound, "check "+RunPodPodIDEnv+" ("+pod+") names this pod", nil, "%s", msg)
	}
	return fail(gpuwarden.EUnavailable, "retry later; RunPod answered an error", nil, "%s", msg)
}

// get reads the pod.
func (r *RunPod) get(ctx context.Context, pod, key string) (runpodPod, error) {
	res, err := r.send(ctx, http.MethodGet, r.podURL(pod), key)
	if err != nil {
		return runpodPod{}, err
	}
	if res.status != http.StatusOK {
		return runpodPod{}, runpodFailure("get pod", pod, res)
	}
	var p runpodPod
	if err := json.Unmarshal(res.body, &p); err != nil {
		return p, fail(gpuwarden.EUnavailable, "check --runpod-api", err, "runpod get pod: decode")
	}
	return p, nil
}

// Prove reads the pod with the API key: it proves the key and the pod ID.
// RunPod has no dry run, so the right to stop is not proven by the read;
// the proof says so.
func (r *RunPod) Prove(ctx context.Context) (gpuwarden.StopProof, error) {
	return r.cache.prove(ctx, r.opts, r.prove)
}

func (r *RunPod) prove(ctx context.Context) (gpuwarden.StopProof, error) {
	p := newProof(r.Method(), r.opts.Now())
	pod, key, err := r.ids()
	if err != nil {
		return p.refuse(err)
	}
	p.check("pod %s, API key from %s", pod, from(r.APIKey, RunPodAPIKeyEnv))
	got, err := r.get(ctx, pod, key)
	if err != nil {
		return p.refuse(err)
	}
	if got.ID != "" && got.ID != pod {
		return p.refuse(fail(gpuwarden.EUnavailable, "check --runpod-api", nil, "runpod: asked for pod %s, got %s", pod, got.ID))
	}
	p.check("GET /pods/%s with the key: desiredStatus %s", pod, cmpOr(got.state(), "unset"))
	p.check("RunPod has no dry run: the key's right to stop is assumed from its read")
	return p.ok()
}

// Stop calls POST /pods/{id}/stop, then reads the pod until its
// desiredStatus is EXITED or ConfirmWithin passes.
func (r *RunPod) Stop(ctx context.Context) (gpuwarden.StopOutcome, error) {
	start := r.opts.Now()
	out := gpuwarden.StopOutcome{Method: r.Method(), At: start, Billing: gpuwarden.NodeRunning}
	pod, key, err := r.ids()
	if err != nil {
		return out, err
	}
	defer r.cache.forget()
	res, err := r.send(ctx, http.MethodPost, r.podURL(pod)+"/stop", key)
	if err != nil {
		return out, err
	}
	out.HTTPStatus = res.status
	if res.status/100 != 2 {
		return out, runpodFailure("stop pod", pod, res)
	}
	out.Billing = gpuwarden.NodeStopRequested
	r.opts.Log.Info("runpod stop accepted", "pod", pod, "status", res.status)
	got, done, err := poll(ctx, r.opts, start, func(ctx context.Context) (runpodPod, time.Duration, error) {
		p, err := r.get(ctx, pod, key)
		return p, 0, err
	}, func(p runpodPod) bool { return strings.EqualFold(p.state(), "EXITED") })
	out.State, out.At = got.state(), r.opts.Now()
	switch {
	case err != nil:
		out.Detail = "stop accepted; reading the pod back failed: " + err.Error()
	case done:
		out.Billing = gpuwarden.NodeStopped
		out.Detail = "RunPod reports the pod EXITED: GPU billing stopped; its volume still bills until the pod is terminated"
	default:
		out.Detail = "stop accepted; the pod was " + cmpOr(out.State, "in an unknown state") + " after " +
			out.At.Sub(start).Round(time.Second).String()
	}
	return out, nil
}

// from names where a credential came from: the configuration or an env var.
func from(override, env string) string {
	if override != "" {
		return "configuration"
	}
	return env
}
