package stopper

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// Lambda Cloud's documented API:
//   - API reference (auth, instances, terminate): https://docs-api.lambda.ai/api/cloud
//   - billing stops only on terminate: https://old.docs.lambdalabs.com/cloud/on-demand-instance-invoicing/
const (
	// DefaultLambdaAPI is Lambda Cloud's API (formerly cloud.lambdalabs.com).
	DefaultLambdaAPI = "https://cloud.lambda.ai/api/v1"
	// LambdaAPIKeyEnv names the API key.
	LambdaAPIKeyEnv = "LAMBDA_API_KEY"
	// LambdaInstanceIDEnv names this instance's ID. Lambda documents no way
	// to read it from inside the instance, so the launcher must pass it.
	LambdaInstanceIDEnv = "LAMBDA_INSTANCE_ID"
)

// Lambda terminates this instance: Lambda Cloud has no stop, and an
// instance bills until it is terminated. Terminating loses the instance and
// its local disk (persistent filesystems survive), so MayTerminate is asked
// right before, and can refuse.
type Lambda struct {
	// API is the API's base URL (--lambda-api).
	API string
	// InstanceID and APIKey override LAMBDA_INSTANCE_ID and LAMBDA_API_KEY.
	InstanceID, APIKey string
	// MayTerminate is called right before the terminate request; an error
	// refuses it (the agent refuses while a supervised job's checkpoint is
	// not durable). Nil refuses every terminate.
	MayTerminate func(ctx context.Context) error

	opts  Options
	cache proveCache
}

// NewLambda returns the Lambda stopper with the documented endpoint and
// the terminate guard.
func NewLambda(o Options, mayTerminate func(context.Context) error) *Lambda {
	return &Lambda{API: DefaultLambdaAPI, MayTerminate: mayTerminate, opts: o.withDefaults()}
}

// Method returns gpuwarden.StopLambdaTerminate.
func (l *Lambda) Method() string { return gpuwarden.StopLambdaTerminate }

// ids returns the instance ID and the API key.
func (l *Lambda) ids() (id, key string, err error) {
	id, key = cmpOr(l.InstanceID, l.opts.Getenv(LambdaInstanceIDEnv)), cmpOr(l.APIKey, l.opts.Getenv(LambdaAPIKeyEnv))
	if id == "" {
		return "", "", fail(gpuwarden.EEnvironment,
			"set "+LambdaInstanceIDEnv+" to this instance's ID when launching it (the launch answer's instance_ids; Lambda documents no in-box way to read it)",
			nil, "lambda: no instance ID (%s is empty)", LambdaInstanceIDEnv)
	}
	if key == "" {
		return "", "", fail(gpuwarden.EUnauthorized, "set "+LambdaAPIKeyEnv+" to a Lambda Cloud API key (cloud.lambda.ai, API keys)", nil,
			"lambda: no API key (%s is empty)", LambdaAPIKeyEnv)
	}
	return id, key, nil
}

// lambdaInstance is the part of an instance Lambda answers with.
type lambdaInstance struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// lambdaFailure maps Lambda's {"error": {code, message, suggestion}}.
func lambdaFailure(what, id string, res response) error {
	var e struct {
		Error struct {
			Code       string `json:"code"`
			Message    string `json:"message"`
			Suggestion string `json:"suggestion"`
		} `json:"error"`
	}
	_ = json.Unmarshal(res.body, &e)
	msg := fmt.Sprintf("lambda %s: status %d: %s", what, res.status, cmpOr(e.Error.Code+": "+e.Error.Message, snippet(res.body)))
	switch res.status {
	case http.StatusUnauthorized:
		return fail(gpuwarden.EUnauthorized, cmpOr(e.Error.Suggestion, "set "+LambdaAPIKeyEnv+" to a valid Lambda Cloud API key"), nil, "%s", msg)
	case http.StatusForbidden:
		return fail(gpuwarden.EForbidden, cmpOr(e.Error.Suggestion, "use an API key of the team that owns the instance"), nil, "%s", msg)
	case http.StatusNotFound:
		return fail(gpuwarden.ENotFound, "check "+LambdaInstanceIDEnv+" ("+id+") names this instance", nil, "%s", msg)
	}
	return fail(gpuwarden.EUnavailable, "retry later; Lambda Cloud answered an error", nil, "%s", msg)
}

// send sends one authenticated request (Lambda recommends a Bearer header).
func (l *Lambda) send(ctx context.Context, method, u, key string, body []byte) (response, error) {
	h := http.Header{"Authorization": {"Bearer " + key}, "Accept": {"application/json"}}
	if body != nil {
		h.Set("Content-Type", "application/json")
	}
	res, err := do(ctx, l.opts.apiClient(), method, u, h, body)
	if err != nil {
		return response{}, unreachable("Lambda Cloud's API", "--lambda-api", err)
	}
	return res, nil
}

// get reads the instance; gone reports a 404, which after a terminate
// means the instance no longer exists.
func (l *Lambda) get(ctx context.Context, id, key string) (in lambdaInstance, gone bool, err error) {
	res, err := l.send(ctx, http.MethodGet, trimBase(l.API)+"/instances/"+url.PathEscape(id), key, nil)
	if err != nil {
		return in, false, err
	}
	if res.status == http.StatusNotFound {
		return in, true, lambdaFailure("get instance", id, res)
	}
	if res.status != http.StatusOK {
		return in, false, lambdaFailure("get instance", id, res)
	}
	var doc struct {
		Data lambdaInstance `json:"data"`
	}
	if err := json.Unmarshal(res.body, &doc); err != nil {
		return in, false, fail(gpuwarden.EUnavailable, "check --lambda-api", err, "lambda get instance: decode")
	}
	return doc.Data, false, nil
}

// Prove checks the terminate guard is in place, then reads the instance
// with the API key: it proves the key and the instance ID (Lambda has no
// dry run). The proof records that terminating loses the local disk.
func (l *Lambda) Prove(ctx context.Context) (gpuwarden.StopProof, error) {
	return l.cache.prove(ctx, l.opts, l.prove)
}

func (l *Lambda) prove(ctx context.Context) (gpuwarden.StopProof, error) {
	p := newProof(l.Method(), l.opts.Now())
	if l.MayTerminate == nil {
		return p.refuse(fail(gpuwarden.EInvalid, "give the Lambda stopper a MayTerminate guard (the agent's checkpoint check)", nil,
			"lambda: no terminate guard: gpuwarden never terminates unguarded"))
	}
	id, key, err := l.ids()
	if err != nil {
		return p.refuse(err)
	}
	p.check("instance %s, API key from %s", id, from(l.APIKey, LambdaAPIKeyEnv))
	in, _, err := l.get(ctx, id, key)
	if err != nil {
		return p.refuse(err)
	}
	p.check("GET /instances/%s with the key: status %s", id, cmpOr(in.Status, "unset"))
	p.check("Lambda has no stop: the idle stop terminates, losing the instance's disk (persistent filesystems survive); the guard runs first")
	return p.ok()
}

// Stop asks MayTerminate, then terminates the instance
// (POST /instance-operations/terminate) and reads it back until it is
// terminated or gone (stopped) or ConfirmWithin passes (stop-requested).
func (l *Lambda) Stop(ctx context.Context) (gpuwarden.StopOutcome, error) {
	start := l.opts.Now()
	out := gpuwarden.StopOutcome{Method: l.Method(), At: start, Billing: gpuwarden.NodeRunning}
	id, key, err := l.ids()
	if err != nil {
		return out, err
	}
	if l.MayTerminate == nil {
		return out, fail(gpuwarden.EConflict, "give the Lambda stopper a MayTerminate guard", nil, "lambda: terminate refused: no guard")
	}
	if err := l.MayTerminate(ctx); err != nil {
		out.Detail = "terminate refused by the guard: " + err.Error()
		e := fail(gpuwarden.EConflict, "the box keeps billing until the guard allows the terminate (e.g. the checkpoint is durable)", err,
			"lambda: terminate of %s refused", id)
		return out, e
	}
	defer l.cache.forget()
	body, _ := json.Marshal(map[string][]string{"instance_ids": {id}})
	res, err := l.send(ctx, http.MethodPost, trimBase(l.API)+"/instance-operations/terminate", key, body)
	if err != nil {
		return out, err
	}
	out.HTTPStatus = res.status
	if res.status != http.StatusOK {
		return out, lambdaFailure("terminate", id, res)
	}
	var ans struct {
		Data struct {
			Terminated []lambdaInstance `json:"terminated_instances"`
		} `json:"data"`
	}
	_ = json.Unmarshal(res.body, &ans)
	out.Billing = gpuwarden.NodeStopRequested
	for _, in := range ans.Data.Terminated {
		if in.ID == id {
			out.State = in.Status
		}
	}
	l.opts.Log.Info("lambda terminate accepted", "instance", id, "state", out.State)
	type read struct {
		in   lambdaInstance
		gone bool
	}
	got, done, err := poll(ctx, l.opts, start, func(ctx context.Context) (read, time.Duration, error) {
		in, gone, err := l.get(ctx, id, key)
		if gone {
			return read{gone: true}, 0, nil
		}
		return read{in: in}, 0, err
	}, func(r read) bool { return r.gone || r.in.Status == "terminated" })
	out.At = l.opts.Now()
	switch {
	case err != nil:
		out.Detail = "terminate accepted; reading the instance back failed: " + err.Error()
	case done && got.gone:
		out.Billing, out.State = gpuwarden.NodeStopped, "terminated"
		out.Detail = "Lambda no longer lists the instance: it is terminated and no longer bills; persistent filesystems still do"
	case done:
		out.Billing, out.State = gpuwarden.NodeStopped, got.in.Status
		out.Detail = "Lambda reports the instance terminated: it no longer bills; persistent filesystems still do"
	default:
		out.State = cmpOr(got.in.Status, out.State)
		out.Detail = "terminate accepted; the instance was " + cmpOr(out.State, "in an unknown state") + " after " +
			out.At.Sub(start).Round(time.Second).String()
	}
	return out, nil
}
