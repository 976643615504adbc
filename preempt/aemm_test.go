package preempt_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/peertest"
	"github.com/gpuwarden/gpuwarden/preempt"
)

// The AEMM tests drive preempt.NewAWS and preempt.Watch against AWS's own
// amazon-ec2-metadata-mock (v1.13.0, IMDSv2 only), which behaves as no
// hand-written fake would: without -t it serves the spot time as request
// time + 2 minutes, and the rebalance noticeTime as the request time, so
// every poll sees a new time.
const (
	// aemmEvery is Watch's period, fast so that a window holds many polls.
	aemmEvery = 100 * time.Millisecond
	// aemmWindow is how long each case watches: long enough that the
	// mock's moving times cross several second boundaries.
	aemmWindow = 3 * time.Second
	// aemmMinPolls is the fewest polls a window must hold to count.
	aemmMinPolls = 10
)

// recordingSource counts polls and remembers every distinct At each ID was
// polled with, before Watch filters, so a case can show that the mock moved.
type recordingSource struct {
	preempt.Source

	mu    sync.Mutex
	polls int
	errs  []error
	ats   map[string]map[int64]bool
}

func (r *recordingSource) Poll(ctx context.Context) ([]gpuwarden.Notice, error) {
	ns, err := r.Source.Poll(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.polls++
	// A poll cut short because the window ended is the test's doing.
	if err != nil && !errors.Is(ctx.Err(), context.Canceled) {
		r.errs = append(r.errs, err)
	}
	if r.ats == nil {
		r.ats = make(map[string]map[int64]bool)
	}
	for _, n := range ns {
		if r.ats[n.ID] == nil {
			r.ats[n.ID] = make(map[int64]bool)
		}
		r.ats[n.ID][n.At.UnixNano()] = true
	}
	return ns, err
}

// aemmRun is what one case's window saw.
type aemmRun struct {
	url string
	// before is taken before the mock started, after once the window ended:
	// every time the mock served lies between them.
	before, after time.Time
	delivered     []gpuwarden.Notice
	polls         int
	errs          []error
	ats           map[string]map[int64]bool
}

// aemmEventID reads the mock's scheduled EventId the way an instance would,
// so that the test does not hard-code it.
func aemmEventID(t *testing.T, m *peertest.AEMM) string {
	t.Helper()
	token, err := m.Token()
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, m.URL+"/latest/meta-data/events/maintenance/scheduled", nil)
	req.Header.Set("X-aws-ec2-metadata-token", token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var events []struct {
		EventID string `json:"EventId"`
	}
	if err := json.NewDecoder(res.Body).Decode(&events); err != nil || len(events) != 1 || events[0].EventID == "" {
		t.Fatalf("scheduled events from the mock: %+v, %v; want one with an EventId", events, err)
	}
	return events[0].EventID
}

// wantNotice is one expected delivery; At must lie in [atLo, atHi], both
// zero meaning At must be zero.
type wantNotice struct {
	kind, id   string
	atLo, atHi time.Time
}

func TestAEMM(t *testing.T) {
	nb := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	tests := []struct {
		name string
		args []string
		// want builds the expected deliveries from the run, in order.
		want func(t *testing.T, m *peertest.AEMM, r aemmRun) []wantNotice
		// moving names an ID whose At the mock must have moved during the
		// window, proof that the case exercised the moving time.
		moving string
	}{
		{
			name: "spot with the moving default time is one notice",
			args: []string{"spot", "--rebalance-delay-sec", "3600"},
			want: func(_ *testing.T, _ *peertest.AEMM, r aemmRun) []wantNotice {
				return []wantNotice{{gpuwarden.NoticePreemption, preempt.AWSSpotID,
					r.before.Truncate(time.Second).Add(2 * time.Minute), r.after.Add(2 * time.Minute)}}
			},
			moving: preempt.AWSSpotID,
		},
		{
			name: "spot and rebalance at once, both moving",
			args: []string{"spot"},
			want: func(_ *testing.T, _ *peertest.AEMM, r aemmRun) []wantNotice {
				return []wantNotice{
					{gpuwarden.NoticePreemption, preempt.AWSSpotID,
						r.before.Truncate(time.Second).Add(2 * time.Minute), r.after.Add(2 * time.Minute)},
					{kind: gpuwarden.NoticeRebalance, id: preempt.AWSRebalanceID},
				}
			},
			moving: preempt.AWSSpotID,
		},
		{
			name: "rebalance without the interruption",
			args: []string{"spot", "-d", "3600", "--rebalance-delay-sec", "0"},
			want: func(*testing.T, *peertest.AEMM, aemmRun) []wantNotice {
				return []wantNotice{{kind: gpuwarden.NoticeRebalance, id: preempt.AWSRebalanceID}}
			},
		},
		{
			name: "system-reboot in 48 h",
			args: []string{"events", "-o", "system-reboot", "-b", nb.Format(time.RFC3339)},
			want: func(t *testing.T, m *peertest.AEMM, _ aemmRun) []wantNotice {
				return []wantNotice{{gpuwarden.NoticeReboot, aemmEventID(t, m), nb, nb}}
			},
		},
		{
			name: "instance-stop now",
			args: []string{"events", "-o", "instance-stop"},
			want: func(t *testing.T, m *peertest.AEMM, r aemmRun) []wantNotice {
				return []wantNotice{{gpuwarden.NoticeMaintenance, aemmEventID(t, m), r.before.Truncate(time.Second), r.after}}
			},
		},
		{
			name: "canceled system-reboot",
			args: []string{"events", "-o", "system-reboot", "-t", "canceled"},
			want: func(*testing.T, *peertest.AEMM, aemmRun) []wantNotice { return nil },
		},
		{
			name: "completed instance-stop",
			args: []string{"events", "-o", "instance-stop", "-t", "completed"},
			want: func(*testing.T, *peertest.AEMM, aemmRun) []wantNotice { return nil },
		},
	}

	// Every case watches its own mock for the same window at once, so the
	// test takes one window however few CPUs run it.
	mocks := make([]*peertest.AEMM, len(tests))
	runs := make([]aemmRun, len(tests))
	var wg sync.WaitGroup
	for i, tt := range tests {
		runs[i].before = time.Now().UTC()
		mocks[i] = peertest.StartAEMM(t, tt.args...)
		runs[i].url = mocks[i].URL
		wg.Go(func() { runs[i] = watchAEMM(runs[i]) })
	}
	wg.Wait()

	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runs[i]
			if r.polls < aemmMinPolls {
				t.Fatalf("only %d polls in the window, want %d", r.polls, aemmMinPolls)
			}
			for _, err := range r.errs {
				t.Errorf("poll error: %v", err)
			}
			if len(r.errs) > 0 {
				t.Logf("mock log tail:\n%s", tail(mocks[i].Log(), 2000))
			}
			if tt.moving != "" && len(r.ats[tt.moving]) < 2 {
				t.Errorf("the mock served %s with %d distinct times, want it to move", tt.moving, len(r.ats[tt.moving]))
			}
			want := tt.want(t, mocks[i], r)
			got := r.delivered
			if len(got) != len(want) {
				t.Fatalf("delivered %d notices %+v over %d polls, want %d %+v",
					len(got), got, r.polls, len(want), want)
			}
			for j, w := range want {
				g := got[j]
				if g.Provider != preempt.ProviderAWS || g.Kind != w.kind || g.ID != w.id || g.Canceled {
					t.Errorf("notice %d = %+v, want provider aws, kind %s, id %s, not canceled", j, g, w.kind, w.id)
				}
				if g.At.Before(w.atLo) || g.At.After(w.atHi) {
					t.Errorf("notice %d At = %v, want in [%v, %v]", j, g.At, w.atLo, w.atHi)
				}
			}
		})
	}
}

// watchAEMM runs Watch on the mock at r.url until the window has passed and
// held enough polls, and returns r filled in.
func watchAEMM(r aemmRun) aemmRun {
	src := &recordingSource{Source: preempt.NewAWS(nil, r.url)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		preempt.Watch(ctx, src, aemmEvery, func(n gpuwarden.Notice) {
			mu.Lock()
			r.delivered = append(r.delivered, n)
			mu.Unlock()
		})
	}()
	start := time.Now()
	for {
		time.Sleep(aemmEvery)
		src.mu.Lock()
		polls := src.polls
		src.mu.Unlock()
		// A bound on waiting, not a speed check: a box too slow to poll
		// ten times in a minute fails on the count below instead.
		if time.Since(start) >= aemmWindow && polls >= aemmMinPolls || time.Since(start) > time.Minute {
			break
		}
	}
	cancel()
	<-done
	r.after = time.Now().UTC()
	src.mu.Lock()
	defer src.mu.Unlock()
	r.polls, r.errs, r.ats = src.polls, src.errs, src.ats
	return r
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
