package stopper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// Azure's documented endpoints and API versions:
//   - managed identity token: https://learn.microsoft.com/en-us/entra/identity/managed-identities-azure-resources/how-to-use-vm-token
//   - instance metadata: https://learn.microsoft.com/en-us/azure/virtual-machines/instance-metadata-service
//   - permissions: https://learn.microsoft.com/en-us/rest/api/authorization/permissions/list-for-resource
//   - deallocate: https://learn.microsoft.com/en-us/rest/api/compute/virtual-machines/deallocate
//   - async operations: https://learn.microsoft.com/en-us/azure/azure-resource-manager/management/async-operations
//   - instance view: https://learn.microsoft.com/en-us/rest/api/compute/virtual-machines/instance-view
const (
	// DefaultAzureMetadata is IMDS's link-local address.
	DefaultAzureMetadata = "http://169.254.169.254"
	// DefaultAzureManagement is Azure Resource Manager.
	DefaultAzureManagement = "https://management.azure.com"
	// DefaultAzureResource is the token audience ARM accepts.
	DefaultAzureResource = "https://management.azure.com/"

	// AzureTokenPath is IMDS's managed identity token endpoint.
	AzureTokenPath = "/metadata/identity/oauth2/token"
	// AzureTokenVersion is the token endpoint's documented api-version.
	AzureTokenVersion = "2018-02-01"
	// AzureInstancePath is IMDS's instance document.
	AzureInstancePath = "/metadata/instance"
	// AzureInstanceVersion is the instance document's api-version.
	AzureInstanceVersion = "2021-02-01"
	// AzurePermVersion is Microsoft.Authorization/permissions' api-version.
	AzurePermVersion = "2022-04-01"
	// AzureComputeVersion is Microsoft.Compute's api-version.
	AzureComputeVersion = "2024-07-01"

	// AzureDeallocateAction is the permission deallocate needs on a VM.
	AzureDeallocateAction = "Microsoft.Compute/virtualMachines/deallocate/action"
	// AzureScaleSetDeallocateAction is the one a scale-set VM needs.
	AzureScaleSetDeallocateAction = "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/deallocate/action"
)

// Azure deallocates this VM through ARM with the VM's managed identity: an
// OS shutdown leaves an Azure VM allocated and billed.
type Azure struct {
	// Metadata is IMDS's base URL (--azure-metadata).
	Metadata string
	// Management is ARM's base URL (--azure-management).
	Management string
	// Resource is the token audience (DefaultAzureResource).
	Resource string
	// ClientID picks a user-assigned identity; empty uses the system one.
	ClientID string
	// ResourceID overrides the VM's resource ID read from IMDS.
	ResourceID string

	opts  Options
	cache proveCache

	mu       sync.Mutex
	token    string
	tokenExp time.Time
	rid      string
}

// NewAzure returns the Azure stopper with the documented endpoints.
func NewAzure(o Options) *Azure {
	return &Azure{Metadata: DefaultAzureMetadata, Management: DefaultAzureManagement,
		Resource: DefaultAzureResource, opts: o.withDefaults()}
}

// Method returns gpuwarden.StopAzureDeallocate.
func (a *Azure) Method() string { return gpuwarden.StopAzureDeallocate }

// azureToken is IMDS's token answer; expires_in comes as a string.
type azureToken struct {
	AccessToken string      `json:"access_token"`
	ExpiresIn   json.Number `json:"expires_in"`
	TokenType   string      `json:"token_type"`
}

// azureIMDSError is IMDS's error body.
type azureIMDSError struct {
	Error       string `json:"error"`
	Description string `json:"error_description"`
}

// tokenFor returns a cached ARM token, or asks IMDS for one.
func (a *Azure) tokenFor(ctx context.Context) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.opts.Now()
	if a.token != "" && now.Before(a.tokenExp) {
		return a.token, nil
	}
	q := url.Values{"api-version": {AzureTokenVersion}, "resource": {a.Resource}}
	if a.ClientID != "" {
		q.Set("client_id", a.ClientID)
	}
	res, err := do(ctx, a.opts.metaClient(), http.MethodGet, trimBase(a.Metadata)+AzureTokenPath+"?"+q.Encode(),
		http.Header{"Metadata": {"true"}}, nil)
	if err != nil {
		return "", unreachable("Azure IMDS", "--azure-metadata", err)
	}
	if res.status != http.StatusOK {
		var e azureIMDSError
		_ = json.Unmarshal(res.body, &e)
		return "", fail(gpuwarden.EUnauthorized,
			"enable a managed identity on this VM (az vm identity assign -g <group> -n <vm>) and give it Virtual Machine Contributor on the VM",
			nil, "azure managed identity token: status %d: %s", res.status, cmpOr(e.Description, snippet(res.body)))
	}
	var t azureToken
	if err := json.Unmarshal(res.body, &t); err != nil || t.AccessToken == "" {
		return "", fail(gpuwarden.EUnavailable, "check --azure-metadata points at Azure IMDS", err,
			"azure managed identity token: no access_token in %s", snippet(res.body))
	}
	ttl := time.Hour
	if n, err := t.ExpiresIn.Int64(); err == nil && n > 0 {
		ttl = time.Duration(n) * time.Second
	}
	// Renew five minutes early so a stop never starts with a dying token.
	a.token, a.tokenExp = t.AccessToken, now.Add(ttl-5*time.Minute)
	return a.token, nil
}

// azureInstance is the part of the instance document that names the VM.
type azureInstance struct {
	Compute struct {
		Name              string `json:"name"`
		ResourceGroupName string `json:"resourceGroupName"`
		SubscriptionID    string `json:"subscriptionId"`
		ResourceID        string `json:"resourceId"`
	} `json:"compute"`
}

// resourceID returns the VM's ARM ID: ResourceID, else IMDS's
// compute.resourceId, else one built from subscription, group and name.
func (a *Azure) resourceID(ctx context.Context) (string, error) {
	if a.ResourceID != "" {
		return a.ResourceID, nil
	}
	a.mu.Lock()
	rid := a.rid
	a.mu.Unlock()
	if rid != "" {
		return rid, nil
	}
	res, err := do(ctx, a.opts.metaClient(), http.MethodGet,
		trimBase(a.Metadata)+AzureInstancePath+"?api-version="+AzureInstanceVersion, http.Header{"Metadata": {"true"}}, nil)
	if err != nil {
		return "", unreachable("Azure IMDS", "--azure-metadata", err)
	}
	if res.status != http.StatusOK {
		return "", fail(gpuwarden.EEnvironment, "run on an Azure VM, or point --azure-metadata at Azure IMDS", nil,
			"azure instance metadata: status %d: %s", res.status, snippet(res.body))
	}
	var doc azureInstance
	if err := json.Unmarshal(res.body, &doc); err != nil {
		return "", fail(gpuwarden.EEnvironment, "point --azure-metadata at Azure IMDS", err, "azure instance metadata: decode")
	}
	c := doc.Compute
	rid = c.ResourceID
	if rid == "" && c.SubscriptionID != "" && c.ResourceGroupName != "" && c.Name != "" {
		rid = "/subscriptions/" + c.SubscriptionID + "/resourceGroups/" + c.ResourceGroupName +
			"/providers/Microsoft.Compute/virtualMachines/" + c.Name
	}
	if !strings.HasPrefix(rid, "/subscriptions/") {
		return "", fail(gpuwarden.EEnvironment, "point --azure-metadata at Azure IMDS", nil,
			"azure instance metadata names no VM: %s", snippet(res.body))
	}
	a.mu.Lock()
	a.rid = rid
	a.mu.Unlock()
	return rid, nil
}

// deallocateAction is the permission the VM's kind of resource needs.
func deallocateAction(rid string) string {
	if strings.Contains(strings.ToLower(rid), "/virtualmachinescalesets/") {
		return AzureScaleSetDeallocateAction
	}
	return AzureDeallocateAction
}

// arm sends one ARM request with the token.
func (a *Azure) arm(ctx context.Context, method, u string) (response, error) {
	token, err := a.tokenFor(ctx)
	if err != nil {
		return response{}, err
	}
	if !sameOrigin(u, a.Management) {
		return response{}, fail(gpuwarden.EInternal, "report this: ARM pointed gpuwarden at another host", nil,
			"refusing to send the Azure token to %s (not --azure-management %s)", u, a.Management)
	}
	var body []byte
	h := http.Header{"Authorization": {"Bearer " + token}}
	if method == http.MethodPost {
		body = []byte{}
		h.Set("Content-Type", "application/json")
	}
	res, err := do(ctx, a.opts.apiClient(), method, u, h, body)
	if err != nil {
		return response{}, unreachable("Azure Resource Manager", "--azure-management", err)
	}
	if res.status == http.StatusUnauthorized {
		// The token may have been revoked or expired early: ask again next time.
		a.mu.Lock()
		a.token = ""
		a.mu.Unlock()
	}
	return res, nil
}

// armError is ARM's error body.
type armError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// armFailure maps an ARM answer that is not a success to an error.
func armFailure(what, rid string, res response) error {
	var e armError
	_ = json.Unmarshal(res.body, &e)
	msg := cmpOr(strings.TrimSpace(e.Error.Code+": "+e.Error.Message), snippet(res.body))
	switch res.status {
	case http.StatusUnauthorized:
		return fail(gpuwarden.EUnauthorized, "check the VM's managed identity (and --azure-management)", nil,
			"azure %s: status 401: %s", what, msg)
	case http.StatusForbidden:
		return fail(gpuwarden.EForbidden, grantHint(rid), nil, "azure %s: status 403: %s", what, msg)
	case http.StatusNotFound:
		return fail(gpuwarden.ENotFound, "check the VM's resource ID (IMDS compute.resourceId)", nil,
			"azure %s: %s not found: %s", what, rid, msg)
	}
	return fail(gpuwarden.EUnavailable, "retry later; Azure Resource Manager answered an error", nil,
		"azure %s: status %d: %s", what, res.status, msg)
}

// grantHint names the role assignment that makes deallocate work.
func grantHint(rid string) string {
	return fmt.Sprintf("give this VM's managed identity %s on the VM, e.g. "+
		"az role assignment create --assignee <identity principal ID> --role \"Virtual Machine Contributor\" --scope %s",
		deallocateAction(rid), rid)
}

// azurePermissions is the permissions list answer.
type azurePermissions struct {
	Value []struct {
		Actions    []string `json:"actions"`
		NotActions []string `json:"notActions"`
	} `json:"value"`
	NextLink string `json:"nextLink"`
}

// Prove gets a token from the VM's managed identity, reads the VM's ID and
// checks that the identity's permissions on the VM cover deallocate.
func (a *Azure) Prove(ctx context.Context) (gpuwarden.StopProof, error) {
	return a.cache.prove(ctx, a.opts, a.prove)
}

func (a *Azure) prove(ctx context.Context) (gpuwarden.StopProof, error) {
	p := newProof(a.Method(), a.opts.Now())
	if _, err := a.tokenFor(ctx); err != nil {
		return p.refuse(err)
	}
	p.check("managed identity token from IMDS")
	rid, err := a.resourceID(ctx)
	if err != nil {
		return p.refuse(err)
	}
	p.check("VM %s", rid)
	action := deallocateAction(rid)
	read := strings.TrimSuffix(action, "/deallocate/action") + "/read"
	u := trimBase(a.Management) + rid + "/providers/Microsoft.Authorization/permissions?api-version=" + AzurePermVersion
	var all azurePermissions
	for page := 0; u != "" && page < 5; page++ {
		res, err := a.arm(ctx, http.MethodGet, u)
		if err != nil {
			return p.refuse(err)
		}
		if res.status != http.StatusOK {
			return p.refuse(armFailure("permissions", rid, res))
		}
		var perms azurePermissions
		if err := json.Unmarshal(res.body, &perms); err != nil {
			return p.refuse(fail(gpuwarden.EUnavailable, "check --azure-management points at ARM", err, "azure permissions: decode"))
		}
		all.Value = append(all.Value, perms.Value...)
		u = perms.NextLink
	}
	var by string
	readOK := false
	for _, v := range all.Value {
		if pat, ok := grantedBy(v.Actions, v.NotActions, action); ok && by == "" {
			by = pat
		}
		if granted(v.Actions, v.NotActions, read) {
			readOK = true
		}
	}
	if by == "" {
		return p.refuse(fail(gpuwarden.EForbidden, grantHint(rid), nil,
			"the VM's managed identity may not %s on %s", action, rid))
	}
	p.check("identity may %s (granted by %s)", action, quote(by))
	if readOK {
		p.check("identity may %s (the state after a stop can be confirmed)", read)
	} else {
		p.check("identity may not %s: a stop will be reported stop-requested, unconfirmed", read)
	}
	return p.ok()
}

// granted says whether actions minus notActions cover action.
func granted(actions, notActions []string, action string) bool {
	_, ok := grantedBy(actions, notActions, action)
	return ok
}

// grantedBy returns the action pattern that grants action, unless a
// notActions pattern of the same permission takes it away; Azure's patterns
// are case-insensitive and * matches any run of characters.
func grantedBy(actions, notActions []string, action string) (string, bool) {
	for _, n := range notActions {
		if wildMatch(n, action) {
			return "", false
		}
	}
	for _, pat := range actions {
		if wildMatch(pat, action) {
			return pat, true
		}
	}
	return "", false
}

// wildMatch matches s against a pattern whose * stands for any run of
// characters, / included, ignoring case.
func wildMatch(pattern, s string) bool {
	pattern, s = strings.ToLower(pattern), strings.ToLower(s)
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, mid := range parts[1 : len(parts)-1] {
		i := strings.Index(s, mid)
		if i < 0 {
			return false
		}
		s = s[i+len(mid):]
	}
	return strings.HasSuffix(s, last)
}

// azureOperation is an Azure-AsyncOperation status document.
type azureOperation struct {
	Status string `json:"status"`
	Error  struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// azureInstanceView is the part of the instance view that says the power state.
type azureInstanceView struct {
	Statuses []struct {
		Code string `json:"code"`
	} `json:"statuses"`
}

// powerState returns the PowerState/… code of an instance view.
func (v azureInstanceView) powerState() string {
	for _, s := range v.Statuses {
		if strings.HasPrefix(strings.ToLower(s.Code), "powerstate/") {
			return s.Code
		}
	}
	return ""
}

// Stop deallocates the VM (POST …/deallocate), follows the asynchronous
// operation ARM hands back, then reads the instance view until it says
// PowerState/deallocated (stopped) or ConfirmWithin has passed
// (stop-requested).
func (a *Azure) Stop(ctx context.Context) (gpuwarden.StopOutcome, error) {
	start := a.opts.Now()
	out := gpuwarden.StopOutcome{Method: a.Method(), At: start, Billing: gpuwarden.NodeRunning}
	rid, err := a.resourceID(ctx)
	if err != nil {
		return out, err
	}
	defer a.cache.forget()
	res, err := a.arm(ctx, http.MethodPost, trimBase(a.Management)+rid+"/deallocate?api-version="+AzureComputeVersion)
	if err != nil {
		return out, err
	}
	out.HTTPStatus = res.status
	if res.status != http.StatusOK && res.status != http.StatusAccepted {
		return out, armFailure("deallocate", rid, res)
	}
	out.Billing = gpuwarden.NodeStopRequested
	out.OperationID = cmpOr(operationID(res.header.Get("Azure-AsyncOperation")), res.header.Get("x-ms-request-id"))
	a.opts.Log.Info("azure deallocate accepted", "vm", rid, "status", res.status, "operation", out.OperationID)

	if res.status == http.StatusAccepted {
		status, done, err := a.followOperation(ctx, start, res.header)
		if err != nil {
			out.Detail = "deallocate accepted; following it failed: " + err.Error()
			return out, nil
		}
		if done && !strings.EqualFold(status.Status, "Succeeded") && status.Status != "" {
			out.Billing = gpuwarden.NodeRunning
			out.Detail = fmt.Sprintf("deallocate %s: %s %s", status.Status, status.Error.Code, status.Error.Message)
			return out, fail(gpuwarden.EUnavailable, "see the VM's activity log in the Azure portal", nil,
				"azure deallocate of %s ended %s: %s", rid, status.Status, cmpOr(status.Error.Message, status.Error.Code))
		}
	}

	view, done, err := poll(ctx, a.opts, start, func(ctx context.Context) (string, time.Duration, error) {
		r, err := a.arm(ctx, http.MethodGet, trimBase(a.Management)+rid+"/instanceView?api-version="+AzureComputeVersion)
		if err != nil {
			return "", 0, err
		}
		if r.status != http.StatusOK {
			return "", 0, armFailure("instance view", rid, r)
		}
		var v azureInstanceView
		if err := json.Unmarshal(r.body, &v); err != nil {
			return "", 0, fmt.Errorf("azure instance view: decode: %w", err)
		}
		return v.powerState(), 0, nil
	}, func(s string) bool { return strings.EqualFold(s, "PowerState/deallocated") })
	out.State = view
	out.At = a.opts.Now()
	switch {
	case err != nil:
		out.Detail = "deallocate accepted; reading the instance view failed: " + err.Error()
	case done:
		out.Billing = gpuwarden.NodeStopped
		out.Detail = "ARM reports the VM deallocated: compute no longer bills; its disks and static IPs still do"
	default:
		out.Detail = fmt.Sprintf("deallocate accepted; the VM was %s, not yet deallocated, after %s",
			cmpOr(view, "in an unknown power state"), out.At.Sub(start).Round(time.Second))
	}
	return out, nil
}

// followOperation polls the Azure-AsyncOperation URL (else the Location
// URL) until the operation ends or ConfirmWithin passes.
func (a *Azure) followOperation(ctx context.Context, start time.Time, h http.Header) (azureOperation, bool, error) {
	if u := h.Get("Azure-AsyncOperation"); u != "" {
		first := retryAfter(h, 0)
		return poll(ctx, a.opts, start, func(ctx context.Context) (azureOperation, time.Duration, error) {
			if first > 0 {
				wait := first
				first = 0
				if err := a.opts.Sleep(ctx, wait); err != nil {
					return azureOperation{}, 0, err
				}
			}
			r, err := a.arm(ctx, http.MethodGet, u)
			if err != nil {
				return azureOperation{}, 0, err
			}
			if r.status != http.StatusOK {
				return azureOperation{}, 0, fmt.Errorf("azure operation status: %d: %s", r.status, snippet(r.body))
			}
			var op azureOperation
			if err := json.Unmarshal(r.body, &op); err != nil {
				return op, 0, fmt.Errorf("azure operation status: decode: %w", err)
			}
			return op, retryAfter(r.header, 0), nil
		}, func(op azureOperation) bool {
			return op.Status != "" && !strings.EqualFold(op.Status, "InProgress")
		})
	}
	if u := h.Get("Location"); u != "" {
		return poll(ctx, a.opts, start, func(ctx context.Context) (azureOperation, time.Duration, error) {
			r, err := a.arm(ctx, http.MethodGet, u)
			if err != nil {
				return azureOperation{}, 0, err
			}
			switch r.status {
			case http.StatusAccepted:
				return azureOperation{Status: "InProgress"}, retryAfter(r.header, 0), nil
			case http.StatusOK, http.StatusNoContent:
				return azureOperation{Status: "Succeeded"}, 0, nil
			}
			return azureOperation{}, 0, fmt.Errorf("azure operation location: %d: %s", r.status, snippet(r.body))
		}, func(op azureOperation) bool { return op.Status != "InProgress" })
	}
	return azureOperation{}, false, errors.New("azure deallocate: 202 without Azure-AsyncOperation or Location")
}

// operationID is the last path segment of an operation URL.
func operationID(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Path == "" {
		return ""
	}
	seg := strings.Split(strings.TrimRight(p.Path, "/"), "/")
	return seg[len(seg)-1]
}

// sameOrigin says whether u has the scheme and host of base.
func sameOrigin(u, base string) bool {
	pu, err1 := url.Parse(u)
	pb, err2 := url.Parse(base)
	return err1 == nil && err2 == nil && pu.Scheme == pb.Scheme && strings.EqualFold(pu.Host, pb.Host)
}

// cmpOr returns the first non-empty string.
func cmpOr(s ...string) string {
	for _, v := range s {
		if v != "" && v != ":" {
			return v
		}
	}
	return ""
}

// quote is strconv.Quote, named for messages.
var quote = strconv.Quote
