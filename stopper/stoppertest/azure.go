package stoppertest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Azure is a fake of the two Azure services a VM's deallocate needs: IMDS
// (managed identity token and instance document) and Resource Manager
// (permissions, deallocate with its asynchronous operation, instance view).
// It follows:
//   - https://learn.microsoft.com/en-us/entra/identity/managed-identities-azure-resources/how-to-use-vm-token
//   - https://learn.microsoft.com/en-us/azure/virtual-machines/instance-metadata-service
//   - https://learn.microsoft.com/en-us/rest/api/authorization/permissions/list-for-resource
//   - https://learn.microsoft.com/en-us/rest/api/compute/virtual-machines/deallocate
//   - https://learn.microsoft.com/en-us/azure/azure-resource-manager/management/async-operations
//   - https://learn.microsoft.com/en-us/rest/api/compute/virtual-machines/instance-view
//
// IMDS refuses (400) a request without "Metadata: true", with
// X-Forwarded-For, or without api-version; ARM refuses a missing or wrong
// bearer token (401), a missing api-version (400), another VM (404) and a
// deallocate the identity's permissions do not cover (403).
type Azure struct {
	// IMDS serves the link-local metadata service (--azure-metadata).
	IMDS *httptest.Server
	// ARM serves Resource Manager (--azure-management).
	ARM *httptest.Server
	// IMDSCalls and ARMCalls record what each one received.
	IMDSCalls, ARMCalls Recorder

	mu             sync.Mutex
	subscription   string
	group, vm      string
	token          string
	noIdentity     bool
	actions        []string
	notActions     []string
	power          string
	opPolls        int
	settleAfter    int
	stuck          bool
	failOperation  bool
	operations     map[string]int
	deallocateSeen int
	retryAfter     string
}

// NewAzure starts the fake for one running VM whose identity has the
// Virtual Machine Contributor actions; the caller closes it.
func NewAzure() *Azure {
	f := &Azure{
		subscription: "00000000-0000-0000-0000-00000000cafe", group: "gpu-rg", vm: "gpu-vm",
		token: "fake-arm-token-" + strconv.FormatInt(time.Now().UnixNano(), 36),
		// Virtual Machine Contributor's compute actions, as its built-in role lists them.
		actions: []string{"Microsoft.Authorization/*/read", "Microsoft.Compute/virtualMachines/*",
			"Microsoft.Compute/availabilitySets/*"},
		power: "PowerState/running", settleAfter: 1, operations: map[string]int{}, retryAfter: "10",
	}
	f.IMDS = httptest.NewServer(http.HandlerFunc(f.serveIMDS))
	f.ARM = httptest.NewServer(http.HandlerFunc(f.serveARM))
	return f
}

// Close stops both servers.
func (f *Azure) Close() {
	f.IMDS.Close()
	f.ARM.Close()
}

// ResourceID is the VM's ARM ID.
func (f *Azure) ResourceID() string {
	return "/subscriptions/" + f.subscription + "/resourceGroups/" + f.group +
		"/providers/Microsoft.Compute/virtualMachines/" + f.vm
}

// SetPermissions replaces the identity's permissions on the VM.
func (f *Azure) SetPermissions(actions, notActions []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.actions, f.notActions = actions, notActions
}

// NoIdentity makes IMDS answer as on a VM without a managed identity.
func (f *Azure) NoIdentity() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noIdentity = true
}

// SettleAfter sets how many operation polls answer InProgress before the
// deallocate succeeds (default 1).
func (f *Azure) SettleAfter(polls int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settleAfter = polls
}

// RetryAfter sets the Retry-After, in seconds, of the deallocate's
// answers (default 10, as ARM sends): 0 lets a test that is not about
// the wait poll at once.
func (f *Azure) RetryAfter(seconds int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.retryAfter = strconv.Itoa(seconds)
}

// Stuck keeps the deallocate in progress and the VM deallocating forever.
func (f *Azure) Stuck() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stuck = true
}

// FailOperation makes the deallocate's operation end Failed, the VM running.
func (f *Azure) FailOperation() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failOperation = true
}

// PowerState returns the VM's PowerState/… code now.
func (f *Azure) PowerState() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.power
}

// Deallocations counts the deallocate requests ARM accepted.
func (f *Azure) Deallocations() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deallocateSeen
}

// imdsError answers 400 with IMDS's error shape.
func imdsError(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": msg})
}

func (f *Azure) serveIMDS(w http.ResponseWriter, r *http.Request) {
	f.IMDSCalls.record(r)
	switch {
	case r.Header.Get("Metadata") != "true":
		imdsError(w, "Bad request. Required metadata header not specified")
		return
	case r.Header.Get("X-Forwarded-For") != "":
		imdsError(w, "Bad request. Request with X-Forwarded-For header is not allowed")
		return
	case r.Method != http.MethodGet:
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "Method not allowed"})
		return
	case r.URL.Query().Get("api-version") == "":
		imdsError(w, "Bad request. api-version was not specified in the request.")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.URL.Path {
	case "/metadata/identity/oauth2/token":
		q := r.URL.Query()
		if q.Get("resource") == "" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_request",
				"error_description": "Required audience parameter not specified"})
			return
		}
		if f.noIdentity {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_request",
				"error_description": "Identity not found"})
			return
		}
		now := time.Now()
		writeJSON(w, http.StatusOK, map[string]string{
			"access_token": f.token, "client_id": "11111111-2222-3333-4444-555555555555",
			"expires_in": "86399", "ext_expires_in": "86399",
			"expires_on": strconv.FormatInt(now.Add(24*time.Hour).Unix(), 10),
			"not_before": strconv.FormatInt(now.Unix(), 10),
			"resource":   q.Get("resource"), "token_type": "Bearer",
		})
	case "/metadata/instance":
		writeJSON(w, http.StatusOK, map[string]any{"compute": map[string]string{
			"location": "westeurope", "name": f.vm, "resourceGroupName": f.group,
			"subscriptionId": f.subscription, "resourceId": f.ResourceID(),
			"vmId": "02aab8a4-74ef-476e-8182-f6d2ba4166a6", "vmSize": "Standard_NC24ads_A100_v4",
		}})
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "Not found"})
	}
}

// armError answers with ARM's error shape.
func armError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

func (f *Azure) serveARM(w http.ResponseWriter, r *http.Request) {
	f.ARMCalls.record(r)
	tok, ok := bearer(r.Header)
	switch {
	case !ok:
		armError(w, http.StatusUnauthorized, "AuthenticationFailed", "Authentication failed. The 'Authorization' header is missing.")
		return
	case tok != f.token:
		armError(w, http.StatusUnauthorized, "InvalidAuthenticationToken", "The access token is invalid.")
		return
	case r.URL.Query().Get("api-version") == "":
		armError(w, http.StatusBadRequest, "MissingApiVersionParameter",
			"The api-version query parameter (?api-version=) is required for all requests.")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	vm := f.ResourceID()
	opPrefix := "/subscriptions/" + f.subscription + "/providers/Microsoft.Compute/locations/westeurope/operations/"
	path := r.URL.Path
	switch {
	case strings.HasPrefix(path, opPrefix) && r.Method == http.MethodGet:
		f.serveOperation(w, r, strings.TrimPrefix(path, opPrefix))
	case !strings.HasPrefix(strings.ToLower(path), strings.ToLower(vm)):
		armError(w, http.StatusNotFound, "ResourceNotFound", fmt.Sprintf(
			"The Resource '%s' was not found.", strings.TrimPrefix(path, "/")))
	case strings.EqualFold(path, vm+"/providers/Microsoft.Authorization/permissions") && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, map[string]any{"value": []map[string][]string{{
			"actions": nonNil(f.actions), "notActions": nonNil(f.notActions),
			"dataActions": {}, "notDataActions": {},
		}}})
	case strings.EqualFold(path, vm+"/deallocate") && r.Method == http.MethodPost:
		if !f.allows("Microsoft.Compute/virtualMachines/deallocate/action") {
			armError(w, http.StatusForbidden, "AuthorizationFailed", fmt.Sprintf(
				"The client '11111111-2222-3333-4444-555555555555' with object id '11111111-2222-3333-4444-555555555555' "+
					"does not have authorization to perform action 'Microsoft.Compute/virtualMachines/deallocate/action' "+
					"over scope '%s' or the scope is invalid. If access was recently granted, please refresh your credentials.", vm))
			return
		}
		f.deallocateSeen++
		id := fmt.Sprintf("%08x-0000-4000-8000-%012x", f.deallocateSeen, time.Now().UnixNano()&0xffffffffffff)
		f.operations[id] = 0
		f.power = "PowerState/deallocating"
		base := f.ARM.URL + opPrefix + id
		w.Header().Set("Azure-AsyncOperation", base+"?p=fake&api-version="+r.URL.Query().Get("api-version"))
		w.Header().Set("Location", base+"?p=fake&monitor=true&api-version="+r.URL.Query().Get("api-version"))
		w.Header().Set("Retry-After", f.retryAfter)
		w.Header().Set("x-ms-request-id", id)
		w.WriteHeader(http.StatusAccepted)
	case strings.EqualFold(path, vm+"/instanceView") && r.Method == http.MethodGet:
		if !f.allows("Microsoft.Compute/virtualMachines/read") {
			armError(w, http.StatusForbidden, "AuthorizationFailed", "The client does not have authorization to perform action "+
				"'Microsoft.Compute/virtualMachines/read'.")
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"computerName": f.vm, "statuses": []map[string]string{
			{"code": "ProvisioningState/succeeded", "level": "Info", "displayStatus": "Provisioning succeeded"},
			{"code": f.power, "level": "Info", "displayStatus": strings.TrimPrefix(f.power, "PowerState/")},
		}})
	default:
		armError(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "The requested method is not allowed for this resource.")
	}
}

// serveOperation answers an Azure-AsyncOperation (or Location) poll.
func (f *Azure) serveOperation(w http.ResponseWriter, r *http.Request, id string) {
	polls, ok := f.operations[id]
	if !ok {
		armError(w, http.StatusNotFound, "NotFound", "The operation was not found.")
		return
	}
	polls++
	f.operations[id] = polls
	monitor := r.URL.Query().Get("monitor") == "true"
	status := "InProgress"
	switch {
	case f.stuck || polls <= f.settleAfter:
	case f.failOperation:
		status = "Failed"
		f.power = "PowerState/running"
	default:
		status = "Succeeded"
		f.power = "PowerState/deallocated"
	}
	if monitor {
		if status == "InProgress" {
			w.Header().Set("Retry-After", f.retryAfter)
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.WriteHeader(http.StatusOK)
		return
	}
	body := map[string]any{"name": id, "status": status, "startTime": time.Now().UTC().Format(time.RFC3339)}
	if status == "Failed" {
		body["error"] = map[string]string{"code": "AllocationFailed", "message": "The operation failed (fake)."}
	}
	if status == "InProgress" {
		w.Header().Set("Retry-After", f.retryAfter)
	}
	writeJSON(w, http.StatusOK, body)
}

// allows applies the identity's permissions the way ARM does: an action
// matching actions and no notActions, ignoring case, * for any run.
func (f *Azure) allows(action string) bool {
	for _, n := range f.notActions {
		if match(n, action) {
			return false
		}
	}
	for _, a := range f.actions {
		if match(a, action) {
			return true
		}
	}
	return false
}

// match is a case-insensitive glob where * matches any run of characters.
func match(pattern, s string) bool {
	pattern, s = strings.ToLower(pattern), strings.ToLower(s)
	if !strings.Contains(pattern, "*") {
		return pattern == s
	}
	i := strings.Index(pattern, "*")
	if !strings.HasPrefix(s, pattern[:i]) {
		return false
	}
	rest := pattern[i+1:]
	for j := i; j <= len(s); j++ {
		if match(rest, s[j:]) {
			return true
		}
	}
	return false
}

// nonNil keeps a JSON list a list.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
