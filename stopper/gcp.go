package stopper

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// Google's documented interfaces:
//   - metadata server: https://cloud.google.com/compute/docs/metadata/querying-metadata
//   - default service account token: https://cloud.google.com/compute/docs/access/authenticate-workloads
//   - instances.stop: https://cloud.google.com/compute/docs/reference/rest/v1/instances/stop
//   - zoneOperations.get: https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations/get
//   - instances.get: https://cloud.google.com/compute/docs/reference/rest/v1/instances/get
//   - instances.testIamPermissions: https://cloud.google.com/compute/docs/reference/rest/v1/instances/testIamPermissions
const (
	// DefaultGCPMetadata is the metadata server's name inside GCP.
	DefaultGCPMetadata = "http://metadata.google.internal"
	// DefaultGCPCompute is the Compute Engine API.
	DefaultGCPCompute = "https://compute.googleapis.com"
	// GCPStopPermission is the IAM permission instances.stop needs.
	GCPStopPermission = "compute.instances.stop"
	// GCPGetPermission is the one reading the instance back needs.
	GCPGetPermission = "compute.instances.get"

	gcpMetaPrefix = "/computeMetadata/v1"
	gcpFlavor     = "Metadata-Flavor"
)

// gcpScopes are the access scopes that let the VM's token call Compute.
var gcpScopes = []string{
	"https://www.googleapis.com/auth/cloud-platform",
	"https://www.googleapis.com/auth/compute",
}

// GCP stops this Compute Engine VM with instances.stop, with the VM's
// default service account. An OS shutdown already stops a VM and its
// compute billing; this stopper is for `--stop api` and the confirmed state.
type GCP struct {
	// Metadata is the metadata server's base URL (--gcp-metadata).
	Metadata string
	// Compute is the Compute Engine API's base URL (--gcp-compute).
	Compute string
	// Project, Zone and Instance override what the metadata server says.
	Project, Zone, Instance string

	opts  Options
	cache proveCache

	mu       sync.Mutex
	token    string
	tokenExp time.Time
}

// NewGCP returns the GCP stopper with the documented endpoints.
func NewGCP(o Options) *GCP {
	return &GCP{Metadata: DefaultGCPMetadata, Compute: DefaultGCPCompute, opts: o.withDefaults()}
}

// Method returns gpuwarden.StopGCP.
func (g *GCP) Method() string { return gpuwarden.StopGCP }

// meta reads one metadata path; an answer without Metadata-Flavor: Google
// is not GCP's metadata server.
func (g *GCP) meta(ctx context.Context, p string) (string, error) {
	res, err := do(ctx, g.opts.metaClient(), http.MethodGet, trimBase(g.Metadata)+gcpMetaPrefix+p, http.Header{gcpFlavor: {"Google"}}, nil)
	if err != nil {
		return "", unreachable("the GCP metadata server", "--gcp-metadata", err)
	}
	if res.header.Get(gcpFlavor) != "Google" {
		return "", fail(gpuwarden.EEnvironment, "run on a Compute Engine VM, or point --gcp-metadata at its metadata server", nil,
			"gcp metadata %s: the answer is not from GCP's metadata server (no Metadata-Flavor: Google)", p)
	}
	if res.status != http.StatusOK {
		return "", fail(gpuwarden.EEnvironment, "check the VM's service account (gcloud compute instances describe)", nil,
			"gcp metadata %s: status %d: %s", p, res.status, snippet(res.body))
	}
	return strings.TrimSpace(string(res.body)), nil
}

// identity returns project, zone and instance name.
func (g *GCP) identity(ctx context.Context) (project, zone, name string, err error) {
	project, zone, name = g.Project, g.Zone, g.Instance
	if project == "" {
		if project, err = g.meta(ctx, "/project/project-id"); err != nil {
			return
		}
	}
	if zone == "" {
		if zone, err = g.meta(ctx, "/instance/zone"); err != nil {
			return
		}
		zone = path.Base(zone) // projects/123/zones/us-central1-a
	}
	if name == "" {
		name, err = g.meta(ctx, "/instance/name")
	}
	return
}

// gcpToken is the metadata server's token answer.
type gcpToken struct {
	AccessToken string `json:"access_token"`
	ExpiresIn   int64  `json:"expires_in"`
}

// tokenFor returns a cached access token, or asks the metadata server.
func (g *GCP) tokenFor(ctx context.Context) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.opts.Now()
	if g.token != "" && now.Before(g.tokenExp) {
		return g.token, nil
	}
	body, err := g.meta(ctx, "/instance/service-accounts/default/token")
	if err != nil {
		if gpuwarden.ErrorCodeOf(err) == gpuwarden.EEnvironment {
			return "", fail(gpuwarden.EUnauthorized, "attach a service account to the VM (gcloud compute instances set-service-account)", err,
				"gcp: no token for the VM's service account")
		}
		return "", err
	}
	var t gcpToken
	if err := json.Unmarshal([]byte(body), &t); err != nil || t.AccessToken == "" {
		return "", fail(gpuwarden.EUnauthorized, "attach a service account to the VM", err, "gcp: no access_token in the token answer")
	}
	ttl := max(time.Duration(t.ExpiresIn)*time.Second-time.Minute, time.Minute)
	g.token, g.tokenExp = t.AccessToken, now.Add(ttl)
	return g.token, nil
}

// api sends one Compute Engine request.
func (g *GCP) api(ctx context.Context, method, u string, body any) (response, error) {
	tok, err := g.tokenFor(ctx)
	if err != nil {
		return response{}, err
	}
	if !sameOrigin(u, g.Compute) {
		return response{}, fail(gpuwarden.EInternal, "report this: Compute Engine pointed gpuwarden at another host", nil,
			"refusing to send the GCP token to %s", u)
	}
	h := http.Header{"Authorization": {"Bearer " + tok}}
	var b []byte
	if method == http.MethodPost {
		b = []byte("{}")
		if body != nil {
			b, _ = json.Marshal(body)
		}
		h.Set("Content-Type", "application/json")
	}
	res, err := do(ctx, g.opts.apiClient(), method, u, h, b)
	if err != nil {
		return response{}, unreachable("the Compute Engine API", "--gcp-compute", err)
	}
	if res.status == http.StatusUnauthorized {
		g.mu.Lock()
		g.token = ""
		g.mu.Unlock()
	}
	return res, nil
}

// gcpError is Google's error body.
type gcpError struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
	} `json:"error"`
}

// gcpFailure maps an error answer to an application error.
func gcpFailure(what, instance string, res response) error {
	var e gcpError
	_ = json.Unmarshal(res.body, &e)
	msg := cmpOr(e.Error.Message, snippet(res.body))
	switch res.status {
	case http.StatusUnauthorized:
		return fail(gpuwarden.EUnauthorized, "check the VM's service account and --gcp-compute", nil, "gcp %s: status 401: %s", what, msg)
	case http.StatusForbidden:
		return fail(gpuwarden.EForbidden, grantGCP(instance), nil, "gcp %s: status 403: %s", what, msg)
	case http.StatusNotFound:
		return fail(gpuwarden.ENotFound, "check the project, zone and instance name", nil, "gcp %s: status 404: %s", what, msg)
	}
	return fail(gpuwarden.EUnavailable, "retry later; Compute Engine answered an error", nil, "gcp %s: status %d: %s", what, res.status, msg)
}

// grantGCP is the fix for a missing permission.
func grantGCP(instance string) string {
	return "give the VM's service account " + GCPStopPermission + " and " + GCPGetPermission + " on " + instance +
		" (e.g. gcloud compute instances add-iam-policy-binding " + path.Base(instance) +
		" --member serviceAccount:<sa> --role roles/compute.instanceAdmin.v1)"
}

// instanceURL is the instance's API URL.
func (g *GCP) instanceURL(project, zone, name string) string {
	return trimBase(g.Compute) + "/compute/v1/projects/" + project + "/zones/" + zone + "/instances/" + name
}

// Prove reads the VM's identity and token, checks the token's access
// scopes, and asks testIamPermissions whether the service account may stop
// and read this instance.
func (g *GCP) Prove(ctx context.Context) (gpuwarden.StopProof, error) {
	return g.cache.prove(ctx, g.opts, g.prove)
}

func (g *GCP) prove(ctx context.Context) (gpuwarden.StopProof, error) {
	p := newProof(g.Method(), g.opts.Now())
	project, zone, name, err := g.identity(ctx)
	if err != nil {
		return p.refuse(err)
	}
	inst := "projects/" + project + "/zones/" + zone + "/instances/" + name
	p.check("instance %s", inst)
	if _, err := g.tokenFor(ctx); err != nil {
		return p.refuse(err)
	}
	p.check("token of the VM's default service account")
	if scopes, err := g.meta(ctx, "/instance/service-accounts/default/scopes"); err == nil {
		if !slices.ContainsFunc(strings.Fields(scopes), func(s string) bool { return slices.Contains(gcpScopes, s) }) {
			return p.refuse(fail(gpuwarden.EForbidden,
				"stop the VM and give it the cloud-platform access scope (gcloud compute instances set-service-account "+name+
					" --zone "+zone+" --scopes cloud-platform)", nil,
				"gcp: the VM's access scopes (%s) do not allow Compute Engine calls", strings.Join(strings.Fields(scopes), ", ")))
		}
		p.check("access scopes allow Compute Engine")
	}
	res, err := g.api(ctx, http.MethodPost, g.instanceURL(project, zone, name)+"/testIamPermissions",
		map[string][]string{"permissions": {GCPStopPermission, GCPGetPermission}})
	if err != nil {
		return p.refuse(err)
	}
	if res.status != http.StatusOK {
		return p.refuse(gcpFailure("testIamPermissions", inst, res))
	}
	var granted struct {
		Permissions []string `json:"permissions"`
	}
	if err := json.Unmarshal(res.body, &granted); err != nil {
		return p.refuse(fail(gpuwarden.EUnavailable, "check --gcp-compute", err, "gcp testIamPermissions: decode"))
	}
	if !slices.Contains(granted.Permissions, GCPStopPermission) {
		return p.refuse(fail(gpuwarden.EForbidden, grantGCP(inst), nil,
			"gcp: the VM's service account lacks %s on %s", GCPStopPermission, inst))
	}
	p.check("testIamPermissions: %s granted", GCPStopPermission)
	if slices.Contains(granted.Permissions, GCPGetPermission) {
		p.check("testIamPermissions: %s granted (the state after a stop can be confirmed)", GCPGetPermission)
	} else {
		p.check("%s not granted: a stop will be reported stop-requested, unconfirmed", GCPGetPermission)
	}
	return p.ok()
}

// gcpOperation is the part of a zone operation Stop reads.
type gcpOperation struct {
	Name     string `json:"name"`
	Status   string `json:"status"`
	SelfLink string `json:"selfLink"`
	Error    *struct {
		Errors []struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"errors"`
	} `json:"error"`
}

// Stop calls instances.stop, follows the operation until DONE, then reads
// the instance until its status is TERMINATED or STOPPED (stopped) or
// ConfirmWithin passes (stop-requested).
func (g *GCP) Stop(ctx context.Context) (gpuwarden.StopOutcome, error) {
	start := g.opts.Now()
	out := gpuwarden.StopOutcome{Method: g.Method(), At: start, Billing: gpuwarden.NodeRunning}
	project, zone, name, err := g.identity(ctx)
	if err != nil {
		return out, err
	}
	defer g.cache.forget()
	inst := "projects/" + project + "/zones/" + zone + "/instances/" + name
	res, err := g.api(ctx, http.MethodPost, g.instanceURL(project, zone, name)+"/stop", nil)
	if err != nil {
		return out, err
	}
	out.HTTPStatus = res.status
	if res.status != http.StatusOK {
		return out, gcpFailure("instances.stop", inst, res)
	}
	var op gcpOperation
	_ = json.Unmarshal(res.body, &op)
	out.OperationID = op.Name
	out.Billing = gpuwarden.NodeStopRequested
	g.opts.Log.Info("gcp stop accepted", "instance", inst, "operation", op.Name)
	opURL := trimBase(g.Compute) + "/compute/v1/projects/" + project + "/zones/" + zone + "/operations/" + op.Name
	if op.Name != "" && op.Status != "DONE" {
		op, _, err = poll(ctx, g.opts, start, func(ctx context.Context) (gcpOperation, time.Duration, error) {
			r, err := g.api(ctx, http.MethodGet, opURL, nil)
			if err != nil {
				return gcpOperation{}, 0, err
			}
			if r.status != http.StatusOK {
				return gcpOperation{}, 0, gcpFailure("zoneOperations.get", inst, r)
			}
			var o gcpOperation
			if err := json.Unmarshal(r.body, &o); err != nil {
				return o, 0, fmt.Errorf("gcp operation: decode: %w", err)
			}
			return o, 0, nil
		}, func(o gcpOperation) bool { return o.Status == "DONE" })
		if err != nil {
			out.Detail = "instances.stop accepted; following its operation failed: " + err.Error()
			return out, nil
		}
	}
	if op.Error != nil && len(op.Error.Errors) > 0 {
		e := op.Error.Errors[0]
		out.Billing = gpuwarden.NodeRunning
		out.Detail = "stop operation failed: " + e.Code + ": " + e.Message
		return out, fail(gpuwarden.EUnavailable, "see the VM's audit log in the Cloud console", nil,
			"gcp stop of %s failed: %s: %s", inst, e.Code, e.Message)
	}
	status, done, err := poll(ctx, g.opts, start, func(ctx context.Context) (string, time.Duration, error) {
		r, err := g.api(ctx, http.MethodGet, g.instanceURL(project, zone, name), nil)
		if err != nil {
			return "", 0, err
		}
		if r.status != http.StatusOK {
			return "", 0, gcpFailure("instances.get", inst, r)
		}
		var in struct {
			Status string `json:"status"`
		}
		if err := json.Unmarshal(r.body, &in); err != nil {
			return "", 0, fmt.Errorf("gcp instance: decode: %w", err)
		}
		return in.Status, 0, nil
	}, func(s string) bool { return s == "TERMINATED" || s == "STOPPED" })
	out.State = status
	out.At = g.opts.Now()
	switch {
	case err != nil:
		out.Detail = "instances.stop accepted; reading the instance back failed: " + err.Error()
	case done:
		out.Billing = gpuwarden.NodeStopped
		out.Detail = "Compute Engine reports the VM " + status + ": no VM usage bills; disks and static IPs still do"
	default:
		out.Detail = "instances.stop accepted; the VM was " + cmpOr(status, "in an unknown state") + " after " +
			out.At.Sub(start).Round(time.Second).String()
	}
	return out, nil
}
