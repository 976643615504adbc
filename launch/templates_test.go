package launch

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

// TestTemplateStopsFindTheBoxByName checks every built-in stop in both of
// its forms: with an instance ID it names the ID, without one it looks
// the box up by the name launch gave it; both render through the shell
// escaper and parse as sh (issue 28 item 5).
func TestTemplateStopsFindTheBoxByName(t *testing.T) {
	tests := []struct {
		provider string
		byName   string // what the stop without an ID must contain
	}{
		{"aws", "--filters Name=tag:Name,Values=gw-0123abcd-1"},
		{"gcp", "gcloud compute instances delete gw-0123abcd-1"},
		{"azure", "az vm delete --resource-group \"$RESOURCE_GROUP\" --name gw-0123abcd-1"},
		{"lambda", "key=name; n=gw-0123abcd-1"},
		{"runpod", "awk -v n=gw-0123abcd-1 '$2 == n { print $1 }'"},
	}
	for _, tc := range tests {
		t.Run(tc.provider, func(t *testing.T) {
			tmpl := Template(tc.provider)
			if err := ValidateTarget(gpuwarden.Target{Name: "a", Provider: tc.provider, Region: "r", Zone: "z", Launch: tmpl.Launch, Stop: tmpl.Stop, InstanceID: tmpl.InstanceID}); err != nil {
				t.Fatalf("the template does not validate: %v", err)
			}
			v := Vars{Name: "gw-0123abcd-1", Provider: tc.provider, Region: "us-east-1", Zone: "us-east-1a"}
			for _, id := range []string{"", "i-0abc123def4567890"} {
				v.InstanceID = id
				stop, err := Render(tmpl.Stop, v)
				if err != nil {
					t.Fatalf("render (id %q): %v", id, err)
				}
				if out, err := exec.Command("sh", "-n", "-c", stop).CombinedOutput(); err != nil {
					t.Errorf("sh -n (id %q): %v\n%s\n%s", id, err, out, stop)
				}
				if id == "" && !strings.Contains(stop, tc.byName) {
					t.Errorf("stop without an id lacks %q:\n%s", tc.byName, stop)
				}
				if id != "" && tc.provider != "gcp" && tc.provider != "azure" && !strings.Contains(stop, id) {
					t.Errorf("stop with id %s does not use it:\n%s", id, stop)
				}
			}
		})
	}
}

// lambdaAPI is a stand-in for the Lambda Cloud API as its reference
// documents it: HTTP basic auth with the API key as the user name, GET
// /instances ({"data": [instance]}), POST /instance-operations/terminate
// ({"instance_ids": [...]}, answering {"data": {"terminated_instances":
// [...]}}), and the error body {"error": {"code", "message"}}. A
// terminated instance reads "terminating" once, then leaves the list.
type lambdaAPI struct {
	mu        sync.Mutex
	instances []map[string]string
}

func (l *lambdaAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	fail := func(status int, code, msg string) {
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
	}
	if user, _, ok := r.BasicAuth(); !ok || user != "secret_gw_test" {
		fail(http.StatusUnauthorized, "global/invalid-api-key", "API key was invalid, expired, or deleted.")
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/instances":
		json.NewEncoder(w).Encode(map[string]any{"data": l.instances})
		kept := l.instances[:0]
		for _, in := range l.instances {
			if in["status"] == "terminating" {
				in["status"] = "terminated"
				continue // gone from the next list
			}
			kept = append(kept, in)
		}
		l.instances = kept
	case r.Method == http.MethodPost && r.URL.Path == "/api/v1/instance-operations/terminate":
		var req struct {
			IDs []string `json:"instance_ids"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.IDs) == 0 {
			fail(http.StatusBadRequest, "global/invalid-parameters", "Invalid request body.")
			return
		}
		var done []map[string]string
		for _, id := range req.IDs {
			found := false
			for _, in := range l.instances {
				if in["id"] == id {
					in["status"] = "terminating"
					done = append(done, in)
					found = true
				}
			}
			if !found {
				fail(http.StatusNotFound, "global/object-does-not-exist", "Specified instance does not exist.")
				return
			}
		}
		json.NewEncoder(w).Encode(map[string]any{"data": map[string]any{"terminated_instances": done}})
	default:
		fail(http.StatusNotFound, "global/not-found", "Not found.")
	}
}

func (l *lambdaAPI) statuses() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]string{}
	for _, in := range l.instances {
		out[in["name"]] = in["status"]
	}
	return out
}

// TestLambdaStopAgainstTheAPI runs the built-in Lambda stop (curl and jq)
// against the API stand-in: by name it terminates the instance named
// {{.Name}} and no other, and it reports the box gone only once the list
// no longer shows it.
func TestLambdaStopAgainstTheAPI(t *testing.T) {
	for _, bin := range []string{"curl", "jq"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not installed; the Lambda stop template uses it", bin)
		}
	}
	tests := []struct {
		name, id, key string
		wantOK        bool
		wantOut       string
		wantLeft      map[string]string
	}{
		{"by name", "", "secret_gw_test", true, "terminated 0920582c7ff041399e34823a0be62549", map[string]string{"train-other": "active"}},
		{"by id", "0920582c7ff041399e34823a0be62549", "secret_gw_test", true, "terminated 0920582c7ff041399e34823a0be62549", map[string]string{"train-other": "active"}},
		{"nothing by that name", "", "secret_gw_test", true, "no instance name gw-ffffffff-9 is left", nil},
		{"refused key", "", "wrong", false, "401", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			api := &lambdaAPI{instances: []map[string]string{
				{"id": "0920582c7ff041399e34823a0be62549", "name": "gw-0123abcd-1", "status": "active"},
				{"id": "1b3c5d7e9f0a2c4e6a8b0d2f4a6c8e0b", "name": "train-other", "status": "active"},
			}}
			srv := httptest.NewServer(api)
			defer srv.Close()
			name := "gw-0123abcd-1"
			if tc.name == "nothing by that name" {
				name = "gw-ffffffff-9"
			}
			stop, err := Render(Template("lambda").Stop, Vars{Name: name, InstanceID: tc.id})
			if err != nil {
				t.Fatal(err)
			}
			res := runShell(context.Background(), stop, commandEnv([]string{"LAMBDA_API=" + srv.URL + "/api/v1", "LAMBDA_API_KEY=" + tc.key, "LAMBDA_POLL=0"}, Vars{Name: name}, "a"), stopTimeout)
			if res.ok() != tc.wantOK || !bytes.Contains([]byte(res.output), []byte(tc.wantOut)) {
				t.Fatalf("stop ok %v, want %v; output lacks %q:\n%s", res.ok(), tc.wantOK, tc.wantOut, res.output)
			}
			if tc.wantLeft != nil {
				if got := api.statuses(); len(got) != len(tc.wantLeft) || got["train-other"] != "active" {
					t.Errorf("left %v, want %v", got, tc.wantLeft)
				}
			}
		})
	}
}
