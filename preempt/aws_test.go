package preempt_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/preempt"
	"github.com/gpuwarden/gpuwarden/preempt/preempttest"
)

// testCtx bounds a test's requests well under the test timeout.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantErrMentions checks that err names the provider and the path.
func wantErrMentions(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one mentioning %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not mention %q", err, p)
		}
	}
}

// equalNotices compares notices field by field, times with Equal.
func equalNotices(t *testing.T, got, want []gpuwarden.Notice) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d notices %+v, want %d %+v", len(got), got, len(want), want)
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Provider != w.Provider || g.Kind != w.Kind || !g.At.Equal(w.At) || g.Detail != w.Detail || g.ID != w.ID || g.Canceled != w.Canceled {
			t.Errorf("notice %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}

func TestAWSPoll(t *testing.T) {
	spotAt := time.Date(2017, 9, 18, 8, 22, 0, 0, time.UTC)
	reboot := time.Date(2019, 1, 21, 9, 0, 43, 0, time.UTC)
	const (
		spotPath      = "/latest/meta-data/spot/instance-action"
		rebalancePath = "/latest/meta-data/events/recommendations/rebalance"
		schedPath     = "/latest/meta-data/events/maintenance/scheduled"
	)
	tests := []struct {
		name    string
		setup   func(f *preempttest.AWS)
		want    []gpuwarden.Notice
		wantErr []string // parts the error must name; nil means no error
	}{
		{name: "no notice", setup: func(*preempttest.AWS) {}},
		{
			name:  "spot terminate",
			setup: func(f *preempttest.AWS) { f.Interrupt("terminate", spotAt) },
			want: []gpuwarden.Notice{{Provider: "aws", Kind: gpuwarden.NoticePreemption, At: spotAt,
				Detail: "spot terminate", ID: preempt.AWSSpotID}},
		},
		{
			name:  "spot stop",
			setup: func(f *preempttest.AWS) { f.Interrupt("stop", spotAt) },
			want: []gpuwarden.Notice{{Provider: "aws", Kind: gpuwarden.NoticePreemption, At: spotAt,
				Detail: "spot stop", ID: preempt.AWSSpotID}},
		},
		{
			name:  "spot hibernate",
			setup: func(f *preempttest.AWS) { f.Interrupt("hibernate", spotAt) },
			want: []gpuwarden.Notice{{Provider: "aws", Kind: gpuwarden.NoticePreemption, At: spotAt,
				Detail: "spot hibernate", ID: preempt.AWSSpotID}},
		},
		{
			name:  "rebalance",
			setup: func(f *preempttest.AWS) { f.Rebalance(time.Date(2020, 11, 5, 8, 22, 0, 0, time.UTC)) },
			want: []gpuwarden.Notice{{Provider: "aws", Kind: gpuwarden.NoticeRebalance,
				Detail: "rebalance recommended at 2020-11-05T08:22:00Z", ID: preempt.AWSRebalanceID}},
		},
		{
			name: "spot and rebalance together",
			setup: func(f *preempttest.AWS) {
				f.Rebalance(spotAt.Add(-time.Minute))
				f.Interrupt("terminate", spotAt)
			},
			want: []gpuwarden.Notice{
				{Provider: "aws", Kind: gpuwarden.NoticePreemption, At: spotAt, Detail: "spot terminate", ID: preempt.AWSSpotID},
				{Provider: "aws", Kind: gpuwarden.NoticeRebalance, Detail: "rebalance recommended at 2017-09-18T08:21:00Z", ID: preempt.AWSRebalanceID},
			},
		},
		{
			name: "scheduled events, documented example and every code",
			setup: func(f *preempttest.AWS) {
				f.Respond(schedPath, http.StatusOK, `[ 
  {
    "NotBefore" : "21 Jan 2019 09:00:43 GMT",
    "Code" : "system-reboot",
    "Description" : "scheduled reboot",
    "EventId" : "instance-event-0d59937288b749b32",
    "NotAfter" : "21 Jan 2019 09:17:23 GMT",
    "State" : "active"
  },
  {"NotBefore": "1 Feb 2019 10:00:00 GMT", "Code": "instance-reboot", "EventId": "instance-event-2", "State": "active"},
  {"NotBefore": "1 Feb 2019 10:00:00 GMT", "Code": "system-maintenance", "EventId": "instance-event-3", "State": "active"},
  {"NotBefore": "1 Feb 2019 10:00:00 GMT", "Code": "instance-retirement", "EventId": "instance-event-4", "State": "active"},
  {"NotBefore": "1 Feb 2019 10:00:00 GMT", "Code": "instance-stop", "EventId": "instance-event-5", "State": "active"},
  {"NotBefore": "1 Feb 2019 10:00:00 GMT", "Code": "instance-stop", "Description": "[Completed] stopped", "EventId": "instance-event-6", "State": "completed"},
  {"NotBefore": "1 Feb 2019 10:00:00 GMT", "Code": "system-reboot", "EventId": "instance-event-7", "State": "canceled"}
]`)
			},
			want: []gpuwarden.Notice{
				{Provider: "aws", Kind: gpuwarden.NoticeReboot, At: reboot, Detail: "system-reboot: scheduled reboot", ID: "instance-event-0d59937288b749b32"},
				{Provider: "aws", Kind: gpuwarden.NoticeReboot, At: time.Date(2019, 2, 1, 10, 0, 0, 0, time.UTC), Detail: "instance-reboot", ID: "instance-event-2"},
				{Provider: "aws", Kind: gpuwarden.NoticeMaintenance, At: time.Date(2019, 2, 1, 10, 0, 0, 0, time.UTC), Detail: "system-maintenance", ID: "instance-event-3"},
				{Provider: "aws", Kind: gpuwarden.NoticeMaintenance, At: time.Date(2019, 2, 1, 10, 0, 0, 0, time.UTC), Detail: "instance-retirement", ID: "instance-event-4"},
				{Provider: "aws", Kind: gpuwarden.NoticeMaintenance, At: time.Date(2019, 2, 1, 10, 0, 0, 0, time.UTC), Detail: "instance-stop", ID: "instance-event-5"},
			},
		},
		{
			name: "scheduled through the fake's Schedule",
			setup: func(f *preempttest.AWS) {
				f.Schedule(preempttest.AWSEvent{EventID: "instance-event-x", Code: "system-reboot",
					NotBefore: reboot.Format(preempttest.AWSTimeLayout), Description: "scheduled reboot"})
			},
			want: []gpuwarden.Notice{{Provider: "aws", Kind: gpuwarden.NoticeReboot, At: reboot,
				Detail: "system-reboot: scheduled reboot", ID: "instance-event-x"}},
		},
		{name: "scheduled empty list", setup: func(f *preempttest.AWS) { f.Respond(schedPath, http.StatusOK, "[]") }},
		{
			name:    "spot not json",
			setup:   func(f *preempttest.AWS) { f.Respond(spotPath, http.StatusOK, "terminate soon") },
			wantErr: []string{"aws", spotPath, "decode"},
		},
		{
			name: "spot bad time",
			setup: func(f *preempttest.AWS) {
				f.Respond(spotPath, http.StatusOK, `{"action":"terminate","time":"tomorrow"}`)
			},
			wantErr: []string{"aws", spotPath, "time"},
		},
		{
			name:    "spot unknown action",
			setup:   func(f *preempttest.AWS) { f.Respond(spotPath, http.StatusOK, `{"time":"2017-09-18T08:22:00Z"}`) },
			wantErr: []string{"aws", spotPath, "action"},
		},
		{
			name:    "rebalance not json",
			setup:   func(f *preempttest.AWS) { f.Respond(rebalancePath, http.StatusOK, `{"noticeTime":`) },
			wantErr: []string{"aws", rebalancePath},
		},
		{
			name:    "scheduled not a list",
			setup:   func(f *preempttest.AWS) { f.Respond(schedPath, http.StatusOK, `{"Code":"system-reboot"}`) },
			wantErr: []string{"aws", schedPath, "decode"},
		},
		{
			name: "scheduled bad NotBefore",
			setup: func(f *preempttest.AWS) {
				f.Respond(schedPath, http.StatusOK, `[{"NotBefore":"2019-01-21","Code":"system-reboot","EventId":"e1"}]`)
			},
			wantErr: []string{"aws", schedPath, "NotBefore"},
		},
		{
			name:    "scheduled without EventId",
			setup:   func(f *preempttest.AWS) { f.Respond(schedPath, http.StatusOK, `[{"Code":"system-reboot"}]`) },
			wantErr: []string{"aws", schedPath, "EventId"},
		},
		{
			name:    "server error",
			setup:   func(f *preempttest.AWS) { f.Respond(rebalancePath, http.StatusInternalServerError, "boom") },
			wantErr: []string{"aws", rebalancePath, "500"},
		},
		{
			name:    "token refused",
			setup:   func(f *preempttest.AWS) { f.Respond("/latest/api/token", http.StatusForbidden, "") },
			wantErr: []string{"aws", "/latest/api/token", "403"},
		},
		{
			name: "a broken document does not hide the spot notice",
			setup: func(f *preempttest.AWS) {
				f.Interrupt("terminate", spotAt)
				f.Respond(schedPath, http.StatusOK, "<html>")
			},
			want: []gpuwarden.Notice{{Provider: "aws", Kind: gpuwarden.NoticePreemption, At: spotAt,
				Detail: "spot terminate", ID: preempt.AWSSpotID}},
			wantErr: []string{"aws", schedPath},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := preempttest.NewAWS()
			defer f.Close()
			tt.setup(f)
			got, err := preempt.NewAWS(nil, f.URL).Poll(testCtx(t))
			if tt.wantErr == nil && err != nil {
				t.Fatalf("Poll: %v", err)
			}
			if tt.wantErr != nil {
				wantErrMentions(t, err, tt.wantErr...)
			}
			equalNotices(t, got, tt.want)
		})
	}
}

// TestAWSScheduledLife follows scheduled events through polls: reported
// once per poll under their EventId, canceled once when they turn completed
// or canceled or leave the list, never for events first seen already over,
// and not while an entry without EventId makes the list unreadable.
func TestAWSScheduledLife(t *testing.T) {
	const schedPath = "/latest/meta-data/events/maintenance/scheduled"
	f := preempttest.NewAWS()
	defer f.Close()
	src := preempt.NewAWS(nil, f.URL)
	nb := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	nbs := nb.Format(preempttest.AWSTimeLayout)
	reboot := gpuwarden.Notice{Provider: "aws", Kind: gpuwarden.NoticeReboot, At: nb, Detail: "system-reboot: scheduled reboot", ID: "e-reboot"}
	stop := gpuwarden.Notice{Provider: "aws", Kind: gpuwarden.NoticeMaintenance, At: nb, Detail: "instance-stop", ID: "e-stop"}
	cancel := func(n gpuwarden.Notice, detail string) gpuwarden.Notice {
		n.Canceled, n.Detail = true, detail
		return n
	}
	steps := []struct {
		name  string
		setup func()
		want  []gpuwarden.Notice
		err   bool
	}{
		{"two active", func() {
			f.Schedule(preempttest.AWSEvent{EventID: "e-reboot", Code: "system-reboot", Description: "scheduled reboot", NotBefore: nbs})
			f.Schedule(preempttest.AWSEvent{EventID: "e-stop", Code: "instance-stop", NotBefore: nbs})
			// Over before this source ever saw it: history, not news.
			f.Schedule(preempttest.AWSEvent{EventID: "e-retire", Code: "instance-retirement", Description: "[Canceled] retire", NotBefore: nbs})
		}, []gpuwarden.Notice{reboot, stop}, false},
		{"same again", func() {}, []gpuwarden.Notice{reboot, stop}, false},
		{"reboot canceled by State", func() { f.SetState("e-reboot", "canceled") },
			[]gpuwarden.Notice{cancel(reboot, "system-reboot canceled: scheduled reboot"), stop}, false},
		{"canceled only once", func() {}, []gpuwarden.Notice{stop}, false},
		{"an entry without EventId hides what left", func() {
			f.Respond(schedPath, http.StatusOK, `[{"Code": "system-reboot", "NotBefore": "`+nbs+`"}]`)
		}, nil, true},
		{"stop completed by description", func() {
			f.Respond(schedPath, http.StatusOK, `[{"EventId": "e-stop", "Code": "instance-stop", "State": "active", "Description": "[Completed] stopped", "NotBefore": "`+nbs+`"}]`)
		}, []gpuwarden.Notice{cancel(stop, "instance-stop completed: [Completed] stopped")}, false},
		{"a new one", func() {
			f.Clear()
			f.Schedule(preempttest.AWSEvent{EventID: "e-maint", Code: "system-maintenance", NotBefore: nbs})
		}, []gpuwarden.Notice{{Provider: "aws", Kind: gpuwarden.NoticeMaintenance, At: nb, Detail: "system-maintenance", ID: "e-maint"}}, false},
		{"list gone (404)", func() { f.Unschedule("e-maint") },
			[]gpuwarden.Notice{{Provider: "aws", Kind: gpuwarden.NoticeMaintenance, At: nb, Detail: "system-maintenance (no longer scheduled)", ID: "e-maint", Canceled: true}}, false},
		{"quiet after", func() {}, nil, false},
	}
	for _, s := range steps {
		s.setup()
		got, err := src.Poll(testCtx(t))
		if (err != nil) != s.err {
			t.Fatalf("%s: err = %v, want error %v", s.name, err, s.err)
		}
		t.Logf("step %s", s.name)
		equalNotices(t, got, s.want)
	}
}

// TestAWSErrorCancelsNothing checks that a failed read of the list is not
// taken for an empty one.
func TestAWSErrorCancelsNothing(t *testing.T) {
	const schedPath = "/latest/meta-data/events/maintenance/scheduled"
	f := preempttest.NewAWS()
	defer f.Close()
	src := preempt.NewAWS(nil, f.URL)
	f.Schedule(preempttest.AWSEvent{EventID: "e1", Code: "system-reboot", NotBefore: "1 May 2026 10:00:00 GMT"})
	if got, err := src.Poll(testCtx(t)); err != nil || len(got) != 1 {
		t.Fatalf("first poll: %+v, %v", got, err)
	}
	for _, status := range []int{http.StatusInternalServerError, http.StatusOK} {
		f.Respond(schedPath, status, "<html>")
		got, err := src.Poll(testCtx(t))
		if err == nil || len(got) != 0 {
			t.Errorf("status %d: %+v, %v; want an error and no cancellation", status, got, err)
		}
	}
	f.Clear()
	got, err := src.Poll(testCtx(t))
	if err != nil || len(got) != 1 || !got[0].Canceled || got[0].ID != "e1" {
		t.Errorf("after the list went away: %+v, %v; want e1 canceled", got, err)
	}
}

func TestAWSTokenExpiredGetsOneRetry(t *testing.T) {
	f := preempttest.NewAWS()
	defer f.Close()
	spotAt := time.Date(2017, 9, 18, 8, 22, 0, 0, time.UTC)
	f.Interrupt("terminate", spotAt)
	src := preempt.NewAWS(nil, f.URL)
	ctx := testCtx(t)
	if _, err := src.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.TokenRequests(); got != 1 {
		t.Fatalf("token PUTs after first poll = %d, want 1 (one token serves every path)", got)
	}
	f.ExpireTokens() // as an IMDS restart or a TTL that ran out would
	got, err := src.Poll(ctx)
	if err != nil {
		t.Fatalf("Poll after expiry: %v", err)
	}
	if len(got) != 1 || got[0].Kind != gpuwarden.NoticePreemption {
		t.Fatalf("notices after expiry = %+v, want the spot preemption", got)
	}
	if got := f.TokenRequests(); got != 2 {
		t.Errorf("token PUTs = %d, want 2", got)
	}
	if got := f.Unauthorized(); got != 1 {
		t.Errorf("401s = %d, want exactly 1 (the first GET after expiry)", got)
	}
}

func TestAWSTokenRenewedBeforeExpiry(t *testing.T) {
	f := preempttest.NewAWS()
	defer f.Close()
	src := preempt.NewAWS(nil, f.URL)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	src.Now = func() time.Time { return now }
	ctx := testCtx(t)
	for _, step := range []struct {
		advance time.Duration
		puts    int
	}{
		{0, 1},
		{5 * time.Hour, 1},                   // 6 h token, an hour left: reuse
		{59*time.Minute + 30*time.Second, 2}, // 30 s left: inside the slack, renew first
		{time.Minute, 2},
	} {
		now = now.Add(step.advance)
		if _, err := src.Poll(ctx); err != nil {
			t.Fatal(err)
		}
		if got := f.TokenRequests(); got != step.puts {
			t.Errorf("after +%v: token PUTs = %d, want %d", step.advance, got, step.puts)
		}
	}
	if got := f.Unauthorized(); got != 0 {
		t.Errorf("401s = %d, want 0: renewal must come before expiry", got)
	}
}

func TestAWSFakeEnforcesIMDSv2(t *testing.T) {
	f := preempttest.NewAWS()
	defer f.Close()
	f.Interrupt("terminate", time.Now())
	client := f.Client()
	do := func(method, path string, header map[string]string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, f.URL+path, nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	tests := []struct {
		name   string
		method string
		path   string
		header map[string]string
		want   int
	}{
		{"get without token", "GET", "/latest/meta-data/spot/instance-action", nil, 401},
		{"get with a made-up token", "GET", "/latest/meta-data/spot/instance-action", map[string]string{"X-aws-ec2-metadata-token": "nope"}, 401},
		{"token without ttl", "PUT", "/latest/api/token", nil, 400},
		{"token with ttl over 6 h", "PUT", "/latest/api/token", map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "21601"}, 400},
		{"token by GET", "GET", "/latest/api/token", map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "60"}, 405},
		{"token through a proxy", "PUT", "/latest/api/token", map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "60", "X-Forwarded-For": "10.0.0.1"}, 403},
		{"token", "PUT", "/latest/api/token", map[string]string{"X-aws-ec2-metadata-token-ttl-seconds": "60"}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := do(tt.method, tt.path, tt.header).StatusCode; got != tt.want {
				t.Errorf("status = %d, want %d", got, tt.want)
			}
		})
	}
}
