package preempt_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/preempt"
	"github.com/gpuwarden/gpuwarden/preempt/preempttest"
)

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
		{name: "freeze", setup: event("Freeze"), want: want(gpuwarden.NoticeMaintenance, "Freeze")},
		{name: "terminate", setup: event("Terminate"), want: want(gpuwarden.NoticeMaintenance, "Terminate")},
		{
			name: "documented example, started with blank NotBefore",
			setup: func(f *preempttest.Azure) {
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
			want: []gpuwarden.Notice{{Provider: "azure", Kind: gpuwarden.NoticeMaintenance,
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
			name: "bad NotBefore does not hide the good event",
			setup: func(f *preempttest.Azure) {
				f.Respond(path, http.StatusOK, `{"DocumentIncarnation": 3, "Events": [
					{"EventId": "bad", "EventType": "Reboot", "EventStatus": "Scheduled", "NotBefore": "2016-09-19T18:29:47Z"},
					{"EventId": "ev-Preempt", "EventType": "Preempt", "EventStatus": "Scheduled", "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT"}]}`)
			},
			want:    want(gpuwarden.NoticePreemption, "Preempt"),
			wantErr: []string{"azure", path, "NotBefore"},
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
			got, err := preempt.NewAzure(nil, f.URL).Poll(testCtx(t))
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
	if got, err := src.Poll(testCtx(t)); err != nil || len(got) != 0 {
		t.Fatalf("after Remove: %+v, %v; want none", got, err)
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
