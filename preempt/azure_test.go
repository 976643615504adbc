package preempt_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/preempt"
	"github.com/gpuwarden/gpuwarden/preempt/preempttest"
)

// azureNow is the fixed clock of the Azure tests, the At of an event first
// seen already started.
var azureNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestAzurePoll(t *testing.T) {
	const path = "/metadata/scheduledevents"
	notBefore := time.Date(2016, 9, 19, 18, 29, 47, 0, time.UTC)
	event := func(typ string) func(f *preempttest.Azure) {
		return func(f *preempttest.Azure) {
			f.Schedule(preempttest.AzureEvent{EventID: "ev-" + typ, EventType: typ, NotBefore: "Mon, 19 Sep 2016 18:29:47 GMT"})
		}
	}
	want := func(kind, typ string) []gpuwarden.Notice {
		return []gpuwarden.Notice{{Provider: "azure", Kind: kind, At: notBefore, Detail: typ + " Scheduled", ID: "ev-" + typ}}
	}
	tests := []struct {
		name    string
		setup   func(f *preempttest.Azure)
		want    []gpuwarden.Notice
		wantErr []string
	}{
		{name: "no events", setup: func(*preempttest.Azure) {}},
		{name: "preempt", setup: event("Preempt"), want: want(gpuwarden.NoticePreemption, "Preempt")},
		{name: "reboot", setup: event("Reboot"), want: want(gpuwarden.NoticeReboot, "Reboot")},
		{name: "redeploy", setup: event("Redeploy"), want: want(gpuwarden.NoticeRedeploy, "Redeploy")},
		{name: "freeze", setup: event("Freeze"), want: want(gpuwarden.NoticeMigration, "Freeze")},
		{name: "terminate deletes the VM", setup: event("Terminate"), want: want(gpuwarden.NoticePreemption, "Terminate")},
		{name: "a type Azure adds later", setup: event("Hibernate"), want: want(gpuwarden.NoticeMaintenance, "Hibernate")},
		{
			name: "documented example, started with blank NotBefore",
			setup: func(f *preempttest.Azure) {
				f.SetName("WestNO_0")
				f.Respond(path, http.StatusOK, `{
    "DocumentIncarnation": 2,
    "Events": [
        {
            "EventId": "f020ba2e-3bc0-4c40-a10b-86575a9eabd5",
            "EventType": "Freeze",
            "ResourceType": "VirtualMachine",
            "Resources": ["WestNO_0", "WestNO_1"],
            "EventStatus": "Started",
            "NotBefore": "",
            "Description": "Virtual machine is being paused because of a memory-preserving Live Migration operation.",
            "EventSource": "Platform",
            "DurationInSeconds": 5
        }
    ]
}`)
			},
			want: []gpuwarden.Notice{{Provider: "azure", Kind: gpuwarden.NoticeMigration, At: azureNow,
				Detail: "Freeze Started: Virtual machine is being paused because of a memory-preserving Live Migration operation.",
				ID:     "f020ba2e-3bc0-4c40-a10b-86575a9eabd5"}},
		},
		{
			name:    "not json",
			setup:   func(f *preempttest.Azure) { f.Respond(path, http.StatusOK, "<html>") },
			wantErr: []string{"azure", path, "decode"},
		},
		{
			name:    "no DocumentIncarnation",
			setup:   func(f *preempttest.Azure) { f.Respond(path, http.StatusOK, `{"Events": []}`) },
			wantErr: []string{"azure", path, "DocumentIncarnation"},
		},
		{
			name: "a NotBefore that does not parse is due now, beside the good event",
			setup: func(f *preempttest.Azure) {
				f.Respond(path, http.StatusOK, `{"DocumentIncarnation": 3, "Events": [
					{"EventId": "bad", "EventType": "Reboot", "Resources": ["fake-vm"], "EventStatus": "Scheduled", "NotBefore": "19/09/2016 18:29"},
					{"EventId": "ev-Preempt", "EventType": "Preempt", "Resources": ["fake-vm"], "EventStatus": "Scheduled", "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT"}]}`)
			},
			want: append([]gpuwarden.Notice{{Provider: "azure", Kind: gpuwarden.NoticeReboot, At: azureNow, Detail: "Reboot Scheduled", ID: "bad"}},
				want(gpuwarden.NoticePreemption, "Preempt")...),
		},
		{
			name: "instance document without a name",
			setup: func(f *preempttest.Azure) {
				f.Respond("/metadata/instance", http.StatusOK, `{"compute": {"vmId": "02aab8a4-74ef-476e-8182-f6d2ba4166a6"}}`)
			},
			wantErr: []string{"azure", "/metadata/instance", "compute.name"},
		},
		{
			name: "event without EventId",
			setup: func(f *preempttest.Azure) {
				f.Respond(path, http.StatusOK, `{"DocumentIncarnation": 3, "Events": [{"EventType": "Reboot"}]}`)
			},
			wantErr: []string{"azure", path, "EventId"},
		},
		{
			name:    "server error",
			setup:   func(f *preempttest.Azure) { f.Respond(path, http.StatusInternalServerError, `{"error":"x"}`) },
			wantErr: []string{"azure", path, "500"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := preempttest.NewAzure()
			defer f.Close()
			tt.setup(f)
			src := preempt.NewAzure(nil, f.URL)
			src.Now = func() time.Time { return azureNow }
			got, err := src.Poll(testCtx(t))
			if tt.wantErr == nil && err != nil {
				t.Fatalf("Poll: %v", err)
			}
			if tt.wantErr != nil {
				wantErrMentions(t, err, tt.wantErr...)
			}
			equalNotices(t, got, tt.want)
			if n := f.Rejected(); n != 0 {
				t.Errorf("fake refused %d requests: the source must send Metadata: true and api-version", n)
			}
		})
	}
}

func TestAzureFakePreemptAndRemove(t *testing.T) {
	f := preempttest.NewAzure()
	defer f.Close()
	at := time.Now().Add(30 * time.Second).Truncate(time.Second).UTC()
	id := f.Preempt(at)
	src := preempt.NewAzure(nil, f.URL)
	got, err := src.Poll(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != id || got[0].Kind != gpuwarden.NoticePreemption || !got[0].At.Equal(at) {
		t.Fatalf("got %+v, want one preemption %s at %v", got, id, at)
	}
	f.Remove(id)
	want := []gpuwarden.Notice{{Provider: "azure", Kind: gpuwarden.NoticePreemption, At: at, ID: id, Canceled: true,
		Detail: "Preempt Scheduled: Virtual machine is being preempted. (canceled: Scheduled Events no longer lists it)"}}
	got, err = src.Poll(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	equalNotices(t, got, want)
	if got, err := src.Poll(testCtx(t)); err != nil || len(got) != 0 {
		t.Fatalf("after the cancellation: %+v, %v; want none (cancel once)", got, err)
	}
}

// TestAzureEventLife follows events through polls: At from NotBefore, then
// the first sighting once started, and one cancellation when it leaves the
// list, none while a malformed entry makes the list unreadable.
func TestAzureEventLife(t *testing.T) {
	const path = "/metadata/scheduledevents"
	f := preempttest.NewAzure()
	defer f.Close()
	src := preempt.NewAzure(nil, f.URL)
	now := azureNow
	src.Now = func() time.Time { return now }
	notBefore := azureNow.Add(10 * time.Minute)
	reboot := func(status, nb string) string {
		return `{"EventId": "r1", "EventType": "Reboot", "Resources": ["fake-vm"], "EventStatus": "` + status + `", "NotBefore": "` + nb + `", "Description": "Virtual machine is going to be restarted as requested by authorized user."}`
	}
	const detail = ": Virtual machine is going to be restarted as requested by authorized user."
	scheduled := reboot("Scheduled", notBefore.Format(preempttest.AzureTimeLayout))
	started := reboot("Started", "")
	steps := []struct {
		name   string
		events string // the Events array's entries
		want   []gpuwarden.Notice
		err    bool
	}{
		{"scheduled", scheduled, []gpuwarden.Notice{
			{Provider: "azure", Kind: gpuwarden.NoticeReboot, At: notBefore, Detail: "Reboot Scheduled" + detail, ID: "r1"}}, false},
		{"started: first sighting", started, []gpuwarden.Notice{
			{Provider: "azure", Kind: gpuwarden.NoticeReboot, At: azureNow.Add(time.Second), Detail: "Reboot Started" + detail, ID: "r1"}}, false},
		{"still started: At stays", started, []gpuwarden.Notice{
			{Provider: "azure", Kind: gpuwarden.NoticeReboot, At: azureNow.Add(time.Second), Detail: "Reboot Started" + detail, ID: "r1"}}, false},
		{"an entry without EventId hides what left", `{"EventType": "Freeze"}`, nil, true},
		{"gone", "", []gpuwarden.Notice{
			{Provider: "azure", Kind: gpuwarden.NoticeReboot, At: azureNow.Add(time.Second), Canceled: true,
				Detail: "Reboot Started" + detail + " (done: Scheduled Events no longer lists it under way)", ID: "r1"}}, false},
		{"gone stays quiet", "", nil, false},
	}
	for i, s := range steps {
		f.Respond(path, http.StatusOK, `{"DocumentIncarnation": `+strconv.Itoa(i+2)+`, "Events": [`+s.events+`]}`)
		got, err := src.Poll(testCtx(t))
		if (err != nil) != s.err {
			t.Fatalf("%s: err = %v, want error %v", s.name, err, s.err)
		}
		t.Logf("step %s", s.name)
		equalNotices(t, got, s.want)
		now = now.Add(time.Second)
	}
}

// TestAzureApprove checks the request Approve sends and its errors, against
// a server that lists ev-1 for this VM and answers the POST with status.
func TestAzureApprove(t *testing.T) {
	type request struct {
		method, query, metadata, contentType, body string
	}
	tests := []struct {
		name    string
		status  int
		id      string
		wantErr []string // nil: no error
	}{
		{name: "accepted", status: http.StatusOK, id: "ev-1"},
		{name: "refused", status: http.StatusBadRequest, id: "ev-1", wantErr: []string{"azure", "/metadata/scheduledevents", "ev-1", "400"}},
		{name: "server error", status: http.StatusInternalServerError, id: "ev-1", wantErr: []string{"azure", "500"}},
		{name: "no id", status: http.StatusOK, id: "", wantErr: []string{"azure", "empty event id"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var got []request
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.Method == http.MethodGet && r.URL.Path == "/metadata/instance":
					io.WriteString(w, `{"compute": {"name": "vm0"}}`)
					return
				case r.Method == http.MethodGet:
					io.WriteString(w, `{"DocumentIncarnation": 1, "Events": [{"EventId": "ev-1", "EventType": "Reboot", "Resources": ["vm0"], "EventStatus": "Scheduled", "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT"}]}`)
					return
				}
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				got = append(got, request{r.Method, r.URL.RawQuery, r.Header.Get("Metadata"), r.Header.Get("Content-Type"), string(b)})
				mu.Unlock()
				w.WriteHeader(tt.status)
			}))
			err := preempt.NewAzure(nil, srv.URL).Approve(testCtx(t), tt.id)
			srv.Close()
			mu.Lock()
			defer mu.Unlock()
			if tt.wantErr != nil {
				wantErrMentions(t, err, tt.wantErr...)
			} else if err != nil {
				t.Fatalf("Approve: %v", err)
			}
			if tt.id == "" {
				if len(got) != 0 {
					t.Errorf("sent %+v for an empty id, want nothing", got)
				}
				return
			}
			want := request{"POST", "api-version=2020-07-01", "true", "application/json", `{"StartRequests":[{"EventId":"` + tt.id + `"}]}`}
			if len(got) != 1 || got[0] != want {
				t.Errorf("requests %+v, want one %+v", got, want)
			}
		})
	}
}

func TestAzureFakeStartRequests(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		header bool
		want   int
	}{
		{"approve", `{"StartRequests":[{"EventId":"ID"}]}`, true, http.StatusOK},
		{"without the header", `{"StartRequests":[{"EventId":"ID"}]}`, false, http.StatusBadRequest},
		{"not json", `EventId=ID`, true, http.StatusBadRequest},
		{"no requests", `{"StartRequests":[]}`, true, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := preempttest.NewAzure()
			defer f.Close()
			id := f.Preempt(time.Now().Add(time.Minute))
			req, _ := http.NewRequest("POST", f.URL+"/metadata/scheduledevents?api-version=2020-07-01", strings.NewReader(strings.ReplaceAll(tt.body, "ID", id)))
			if tt.header {
				req.Header.Set("Metadata", "true")
			}
			res, err := f.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != tt.want {
				t.Fatalf("status = %d, want %d", res.StatusCode, tt.want)
			}
			got, err := preempt.NewAzure(nil, f.URL).Poll(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			// An approved event stays listed, Started, until it is done.
			wantApproved, wantDetail := []string(nil), "Preempt Scheduled: Virtual machine is being preempted."
			if tt.want == http.StatusOK {
				wantApproved, wantDetail = []string{id}, "Preempt Started: Virtual machine is being preempted."
			}
			if a := f.Approved(); !slices.Equal(a, wantApproved) {
				t.Errorf("approved %v, want %v", a, wantApproved)
			}
			if len(got) != 1 || got[0].Detail != wantDetail {
				t.Errorf("events listed after: %+v, want one %q", got, wantDetail)
			}
		})
	}
}

func TestAzureFakeRequiresMetadataHeader(t *testing.T) {
	f := preempttest.NewAzure()
	defer f.Close()
	tests := []struct {
		name   string
		query  string
		header map[string]string
		want   int
	}{
		{"no header", "?api-version=2020-07-01", nil, http.StatusBadRequest},
		{"header false", "?api-version=2020-07-01", map[string]string{"Metadata": "false"}, http.StatusBadRequest},
		{"no api-version", "", map[string]string{"Metadata": "true"}, http.StatusBadRequest},
		{"both", "?api-version=2020-07-01", map[string]string{"Metadata": "true"}, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", f.URL+"/metadata/scheduledevents"+tt.query, nil)
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			res, err := f.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tt.want {
				t.Fatalf("status = %d, want %d (%s)", res.StatusCode, tt.want, body)
			}
			if tt.want == http.StatusOK {
				var doc struct {
					DocumentIncarnation *int
					Events              []any
				}
				if err := json.Unmarshal(body, &doc); err != nil || doc.DocumentIncarnation == nil || doc.Events == nil {
					t.Errorf("body %s: want DocumentIncarnation and an Events array", body)
				}
			}
		})
	}
}
