// Package launchtest serves loopback stand-ins for the cloud APIs that the
// real aws and gcloud CLIs call when gpuwarden launch runs them, answering
// with the error bodies the providers document, so that tests capture and
// check the CLIs' real output for each failure.
package launchtest

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// Reply is one answer of a stand-in: an HTTP status and the provider's
// error code and message; Status 0 means success.
type Reply struct {
	Status  int
	Code    string
	Message string
	// InOperation puts the error in a finished insert operation, as
	// Compute Engine reports stockouts that it finds after accepting the
	// request ("Handling API responses": operation error.errors[].code).
	InOperation bool
}

// EC2 is a stand-in for the EC2 Query API that answers every action with
// the reply set for it, as "Error codes for the Amazon EC2 API" documents
// the error response: <Response><Errors><Error><Code/><Message/></Error>
// </Errors><RequestID/></Response>.
type EC2 struct {
	URL string

	mu      sync.Mutex
	replies map[string]Reply
	calls   []string
}

// StartEC2 serves the stand-in on 127.0.0.1:0 until the test ends;
// replies maps an action (RunInstances) to its answer.
func StartEC2(t testing.TB, replies map[string]Reply) *EC2 {
	t.Helper()
	e := &EC2{replies: replies}
	srv := httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(srv.Close)
	e.URL = srv.URL
	return e
}

func (e *EC2) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	form, _ := url.ParseQuery(string(body))
	action := form.Get("Action")
	e.mu.Lock()
	e.calls = append(e.calls, action)
	reply, ok := e.replies[action]
	e.mu.Unlock()
	// What the real endpoint checks before the action: a SigV4 signature
	// and a known action ("Common client errors").
	switch {
	case !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 "):
		reply = Reply{Status: http.StatusUnauthorized, Code: "MissingAuthenticationToken", Message: "Request is missing Authentication Token"}
	case r.Method != http.MethodPost || action == "" || form.Get("Version") == "":
		reply = Reply{Status: http.StatusBadRequest, Code: "MissingAction", Message: "The request is missing an action or a required parameter."}
	case !ok:
		reply = Reply{Status: http.StatusBadRequest, Code: "InvalidAction", Message: fmt.Sprintf("The action %s is not valid for this web service.", action)}
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	if reply.Status == 0 || reply.Status == http.StatusOK {
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><%sResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>%s</requestId></%sResponse>`, action, requestID, action)
		return
	}
	w.WriteHeader(reply.Status)
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n<Response><Errors><Error><Code>")
	_ = xml.EscapeText(&b, []byte(reply.Code))
	b.WriteString("</Code><Message>")
	_ = xml.EscapeText(&b, []byte(reply.Message))
	b.WriteString("</Message></Error></Errors><RequestID>" + requestID + "</RequestID></Response>")
	io.WriteString(w, b.String())
}

// requestID is fixed so that captured output does not change between runs.
const requestID = "ea966190-f9aa-478e-9ede-00000000c0de"

// GCE is a stand-in for the Compute Engine v1 API as gcloud calls it when
// api_endpoint_overrides/compute points here: it checks the bearer token,
// answers image look-ups, and answers instance inserts in a zone with the
// reply set for that zone, as the error body "Errors" in the Compute
// Engine API reference shows: {"error": {"code", "message", "errors":
// [{"message", "domain", "reason"}]}}. A zone without a reply gets a done
// insert operation, and the instance then exists until it is deleted, so
// that gcloud's describe and delete see what Compute Engine would.
type GCE struct {
	URL string
	// Token is the bearer token gcloud must send (--access-token-file).
	Token string

	mu      sync.Mutex
	replies map[string]Reply
	calls   []string
	// created holds zone/name of the instances inserted and not deleted.
	created map[string]bool
}

// StartGCE serves the stand-in on 127.0.0.1:0 until the test ends;
// replies maps a zone (us-central1-a) to the answer to an insert there.
func StartGCE(t testing.TB, token string, replies map[string]Reply) *GCE {
	t.Helper()
	g := &GCE{Token: token, replies: replies, created: map[string]bool{}}
	srv := httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(srv.Close)
	g.URL = srv.URL
	return g
}

// Endpoint is the value for api_endpoint_overrides/compute.
func (g *GCE) Endpoint() string { return g.URL + "/compute/v1/" }

// Calls returns "METHOD path" of each request so far, in order.
func (g *GCE) Calls() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.calls...)
}

func (g *GCE) serve(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	g.calls = append(g.calls, r.Method+" "+r.URL.Path)
	g.mu.Unlock()
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	if r.Header.Get("Authorization") != "Bearer "+g.Token {
		gceError(w, Reply{Status: http.StatusUnauthorized, Code: "authError",
			Message: "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project."})
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	// compute v1 projects P zones Z instances | compute v1 projects P global images family F
	switch {
	case len(parts) >= 6 && parts[2] == "projects" && parts[4] == "global" && parts[5] == "images" && r.Method == http.MethodGet:
		name := parts[len(parts)-1]
		json.NewEncoder(w).Encode(map[string]any{"kind": "compute#image", "name": name + "-v20261201", "status": "READY",
			"selfLink": g.URL + "/compute/v1/projects/" + parts[3] + "/global/images/" + name + "-v20261201"})
	case len(parts) == 7 && parts[2] == "projects" && parts[4] == "zones" && parts[6] == "instances" && r.Method == http.MethodPost:
		zone := parts[5]
		g.mu.Lock()
		reply, ok := g.replies[zone]
		g.mu.Unlock()
		if ok && !reply.InOperation && reply.Status != 0 && reply.Status != http.StatusOK {
			gceError(w, reply)
			return
		}
		var inst struct {
			Name string `json:"name"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&inst); err != nil || inst.Name == "" {
			gceError(w, Reply{Status: http.StatusBadRequest, Code: "required", Message: "Required field 'resource.name' not specified"})
			return
		}
		self := g.URL + "/compute/v1/projects/" + parts[3] + "/zones/" + zone
		if !(ok && reply.InOperation) {
			g.mu.Lock()
			g.created[zone+"/"+inst.Name] = true
			g.mu.Unlock()
		}
		op := map[string]any{"kind": "compute#operation", "name": "operation-1", "operationType": "insert",
			"status": "DONE", "progress": 100, "zone": self, "targetLink": self + "/instances/" + inst.Name,
			"selfLink": self + "/operations/operation-1"}
		if ok && reply.InOperation {
			op["httpErrorStatusCode"] = reply.Status
			op["error"] = map[string]any{"errors": []map[string]string{{"code": reply.Code, "message": reply.Message}}}
		}
		json.NewEncoder(w).Encode(op)
	case len(parts) == 8 && parts[2] == "projects" && parts[4] == "zones" && parts[6] == "instances":
		zone, name := parts[5], parts[7]
		g.mu.Lock()
		exists := g.created[zone+"/"+name]
		if exists && r.Method == http.MethodDelete {
			delete(g.created, zone+"/"+name)
		}
		g.mu.Unlock()
		self := g.URL + "/compute/v1/projects/" + parts[3] + "/zones/" + zone
		switch {
		case !exists:
			gceError(w, Reply{Status: http.StatusNotFound, Code: "notFound",
				Message: "The resource 'projects/" + parts[3] + "/zones/" + zone + "/instances/" + name + "' was not found"})
		case r.Method == http.MethodDelete:
			json.NewEncoder(w).Encode(map[string]any{"kind": "compute#operation", "name": "operation-2", "operationType": "delete",
				"status": "DONE", "progress": 100, "zone": self, "targetLink": self + "/instances/" + name,
				"selfLink": self + "/operations/operation-2"})
		default:
			json.NewEncoder(w).Encode(map[string]any{"kind": "compute#instance", "name": name, "status": "RUNNING",
				"zone": self, "machineType": self + "/machineTypes/a3-highgpu-8g", "selfLink": self + "/instances/" + name})
		}
	case len(parts) == 6 && parts[2] == "projects" && parts[4] == "zones" && r.Method == http.MethodGet:
		json.NewEncoder(w).Encode(map[string]any{"kind": "compute#zone", "name": parts[5], "status": "UP",
			"region": g.URL + "/compute/v1/projects/" + parts[3] + "/regions/" + parts[5][:strings.LastIndexByte(parts[5], '-')]})
	case len(parts) == 4 && parts[2] == "projects" && r.Method == http.MethodGet:
		json.NewEncoder(w).Encode(map[string]any{"kind": "compute#project", "name": parts[3], "defaultServiceAccount": "123456789012-compute@developer.gserviceaccount.com"})
	default:
		gceError(w, Reply{Status: http.StatusNotFound, Code: "notFound",
			Message: "The resource '" + strings.TrimPrefix(r.URL.Path, "/compute/v1/") + "' was not found"})
	}
}

// gceError writes the Compute Engine error body; Code is the reason.
func gceError(w http.ResponseWriter, reply Reply) {
	w.WriteHeader(reply.Status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"code": reply.Status, "message": reply.Message,
		"errors": []map[string]string{{"message": reply.Message, "domain": "global", "reason": reply.Code}},
	}})
}

// Exists reports whether an instance of that name was created in zone
// and not deleted.
func (g *GCE) Exists(zone, name string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.created[zone+"/"+name]
}
