package preempt_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/preempt"
	"github.com/gpuwarden/gpuwarden/preempt/preempttest"
)

// gcpNow is the fixed clock of the GCP tests: At is first seen plus the
// notice GCP documents.
var gcpNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestGCPPoll(t *testing.T) {
	const (
		preemptedPath = "/computeMetadata/v1/instance/preempted"
		maintPath     = "/computeMetadata/v1/instance/maintenance-event"
	)
	preemptAt := gcpNow.Add(30 * time.Second)
	maintAt := gcpNow.Add(60 * time.Second)
	tests := []struct {
		name    string
		setup   func(f *preempttest.GCP)
		want    []gpuwarden.Notice
		wantErr []string
	}{
		{name: "no notice", setup: func(*preempttest.GCP) {}},
		{
			name:  "preempted",
			setup: func(f *preempttest.GCP) { f.Preempt() },
			want:  []gpuwarden.Notice{{Provider: "gcp", Kind: gpuwarden.NoticePreemption, At: preemptAt, Detail: "instance/preempted=TRUE", ID: "gcp-preempted"}},
		},
		{
			name:  "live migration",
			setup: func(f *preempttest.GCP) { f.Maintenance("MIGRATE_ON_HOST_MAINTENANCE") },
			want:  []gpuwarden.Notice{{Provider: "gcp", Kind: gpuwarden.NoticeMigration, At: maintAt, Detail: "MIGRATE_ON_HOST_MAINTENANCE", ID: "gcp-maintenance-1"}},
		},
		{
			name:  "terminate for maintenance",
			setup: func(f *preempttest.GCP) { f.Maintenance("TERMINATE_ON_HOST_MAINTENANCE") },
			want:  []gpuwarden.Notice{{Provider: "gcp", Kind: gpuwarden.NoticeMaintenance, At: maintAt, Detail: "TERMINATE_ON_HOST_MAINTENANCE", ID: "gcp-maintenance-1"}},
		},
		{
			name:  "a value Google adds later is still maintenance",
			setup: func(f *preempttest.GCP) { f.Maintenance("SOME_FUTURE_EVENT") },
			want:  []gpuwarden.Notice{{Provider: "gcp", Kind: gpuwarden.NoticeMaintenance, At: maintAt, Detail: "SOME_FUTURE_EVENT", ID: "gcp-maintenance-1"}},
		},
		{
			name: "preempted and maintenance together",
			setup: func(f *preempttest.GCP) {
				f.Preempt()
				f.Maintenance("TERMINATE_ON_HOST_MAINTENANCE")
			},
			want: []gpuwarden.Notice{
				{Provider: "gcp", Kind: gpuwarden.NoticePreemption, At: preemptAt, Detail: "instance/preempted=TRUE", ID: "gcp-preempted"},
				{Provider: "gcp", Kind: gpuwarden.NoticeMaintenance, At: maintAt, Detail: "TERMINATE_ON_HOST_MAINTENANCE", ID: "gcp-maintenance-1"},
			},
		},
		{name: "keys absent on this VM", setup: func(f *preempttest.GCP) {
			f.Respond(preemptedPath, http.StatusNotFound, "not found")
			f.Respond(maintPath, http.StatusNotFound, "not found")
		}},
		{
			name:    "preempted neither TRUE nor FALSE",
			setup:   func(f *preempttest.GCP) { f.Respond(preemptedPath, http.StatusOK, "MAYBE") },
			wantErr: []string{"gcp", preemptedPath, "TRUE or FALSE"},
		},
		{
			name:    "maintenance-event empty",
			setup:   func(f *preempttest.GCP) { f.Respond(maintPath, http.StatusOK, "") },
			wantErr: []string{"gcp", maintPath, "empty"},
		},
		{
			name:    "server error",
			setup:   func(f *preempttest.GCP) { f.Respond(maintPath, http.StatusServiceUnavailable, "") },
			wantErr: []string{"gcp", maintPath, "503"},
		},
		{
			name: "a broken key does not hide the preemption",
			setup: func(f *preempttest.GCP) {
				f.Preempt()
				f.Respond(maintPath, http.StatusInternalServerError, "")
			},
			want:    []gpuwarden.Notice{{Provider: "gcp", Kind: gpuwarden.NoticePreemption, At: preemptAt, Detail: "instance/preempted=TRUE", ID: "gcp-preempted"}},
			wantErr: []string{"gcp", maintPath},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := preempttest.NewGCP()
			defer f.Close()
			tt.setup(f)
			src := preempt.NewGCP(nil, f.URL)
			src.Now = func() time.Time { return gcpNow }
			got, err := src.Poll(testCtx(t))
			if tt.wantErr == nil && err != nil {
				t.Fatalf("Poll: %v", err)
			}
			if tt.wantErr != nil {
				wantErrMentions(t, err, tt.wantErr...)
			}
			equalNotices(t, got, tt.want)
			if n := f.Forbidden(); n != 0 {
				t.Errorf("fake refused %d requests: the source must send Metadata-Flavor: Google", n)
			}
		})
	}
}

// TestGCPMaintenanceWindows checks that one window is one notice however many
// polls see it, that its At stays the first sighting plus 60 s, that the end
// of a window cancels it once, and that the next window is a new one.
func TestGCPMaintenanceWindows(t *testing.T) {
	f := preempttest.NewGCP()
	defer f.Close()
	src := preempt.NewGCP(nil, f.URL)
	now := gcpNow
	src.Now = func() time.Time { return now }
	ctx := testCtx(t)
	const (
		migrate   = "MIGRATE_ON_HOST_MAINTENANCE"
		terminate = "TERMINATE_ON_HOST_MAINTENANCE"
	)
	at := func(sec int) time.Time { return gcpNow.Add(time.Duration(sec) * time.Second) }
	steps := []struct {
		value string // "" means the key is absent (404)
		want  []gpuwarden.Notice
	}{
		{"NONE", nil},
		{migrate, []gpuwarden.Notice{{Provider: "gcp", Kind: gpuwarden.NoticeMigration, At: at(61), Detail: migrate, ID: "gcp-maintenance-1"}}},
		// A second later the same window: same ID, same At.
		{migrate, []gpuwarden.Notice{{Provider: "gcp", Kind: gpuwarden.NoticeMigration, At: at(61), Detail: migrate, ID: "gcp-maintenance-1"}}},
		// Another value ends the window and opens the next.
		{terminate, []gpuwarden.Notice{
			{Provider: "gcp", Kind: gpuwarden.NoticeMigration, At: at(61), Detail: migrate + " ended: maintenance-event now " + terminate, ID: "gcp-maintenance-1", Canceled: true},
			{Provider: "gcp", Kind: gpuwarden.NoticeMaintenance, At: at(63), Detail: terminate, ID: "gcp-maintenance-2"},
		}},
		{"NONE", []gpuwarden.Notice{
			{Provider: "gcp", Kind: gpuwarden.NoticeMaintenance, At: at(63), Detail: terminate + " ended: maintenance-event back to NONE", ID: "gcp-maintenance-2", Canceled: true},
		}},
		{"NONE", nil},
		{"SOME_FUTURE_EVENT", []gpuwarden.Notice{{Provider: "gcp", Kind: gpuwarden.NoticeMaintenance, At: at(66), Detail: "SOME_FUTURE_EVENT", ID: "gcp-maintenance-3"}}},
		// The key vanishing ends the window as NONE does.
		{"", []gpuwarden.Notice{
			{Provider: "gcp", Kind: gpuwarden.NoticeMaintenance, At: at(66), Detail: "SOME_FUTURE_EVENT ended: maintenance-event back to NONE", ID: "gcp-maintenance-3", Canceled: true},
		}},
		{"", nil},
	}
	for i, s := range steps {
		if s.value == "" {
			f.Respond("/computeMetadata/v1/instance/maintenance-event", http.StatusNotFound, "not found")
		} else {
			f.Clear()
			f.Maintenance(s.value)
		}
		got, err := src.Poll(ctx)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		t.Logf("step %d: %s", i, s.value)
		equalNotices(t, got, s.want)
		now = now.Add(time.Second)
	}
}

// TestGCPPreemptionAtStays checks that At is the first poll that saw TRUE
// plus 30 s, however late later polls are, and that FALSE cancels nothing.
func TestGCPPreemptionAtStays(t *testing.T) {
	f := preempttest.NewGCP()
	defer f.Close()
	src := preempt.NewGCP(nil, f.URL)
	now := gcpNow
	src.Now = func() time.Time { return now }
	f.Preempt()
	want := []gpuwarden.Notice{{Provider: "gcp", Kind: gpuwarden.NoticePreemption, At: gcpNow.Add(30 * time.Second),
		Detail: "instance/preempted=TRUE", ID: preempt.GCPPreemptedID}}
	for i := range 3 {
		got, err := src.Poll(testCtx(t))
		if err != nil {
			t.Fatalf("poll %d: %v", i, err)
		}
		equalNotices(t, got, want)
		now = now.Add(5 * time.Second)
	}
	f.Clear()
	got, err := src.Poll(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	equalNotices(t, got, nil)
}

// TestGCPRequiresFlavorOnResponse refuses a server that answers without
// Metadata-Flavor: Google, which is not the metadata server.
func TestGCPRequiresFlavorOnResponse(t *testing.T) {
	impostor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "TRUE")
	}))
	defer impostor.Close()
	got, err := preempt.NewGCP(nil, impostor.URL).Poll(testCtx(t))
	wantErrMentions(t, err, "gcp", "Metadata-Flavor")
	if len(got) != 0 {
		t.Errorf("notices from an impostor: %+v", got)
	}
}

func TestGCPFakeRequiresFlavorHeader(t *testing.T) {
	f := preempttest.NewGCP()
	defer f.Close()
	tests := []struct {
		name   string
		header map[string]string
		want   int
	}{
		{"no header", nil, http.StatusForbidden},
		{"wrong flavor", map[string]string{"Metadata-Flavor": "Amazon"}, http.StatusForbidden},
		{"through a proxy", map[string]string{"Metadata-Flavor": "Google", "X-Forwarded-For": "10.0.0.1"}, http.StatusForbidden},
		{"header", map[string]string{"Metadata-Flavor": "Google"}, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", f.URL+"/computeMetadata/v1/instance/preempted", nil)
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
				t.Errorf("status = %d, want %d (%s)", res.StatusCode, tt.want, body)
			}
			if got := res.Header.Get("Metadata-Flavor"); got != "Google" {
				t.Errorf("response Metadata-Flavor = %q, want Google on every answer", got)
			}
			if tt.want == http.StatusOK && (string(body) != "FALSE" || res.Header.Get("ETag") == "") {
				t.Errorf("body %q etag %q, want FALSE with an ETag", body, res.Header.Get("ETag"))
			}
		})
	}
}
