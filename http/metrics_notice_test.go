package http

import (
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

// TestMetricsNoticeSourceUp: gpuwarden_notice_source_up{cloud} is 1 while
// the cloud's metadata service answers, 0 while it does not, and absent
// when the agent polls no cloud.
func TestMetricsNoticeSourceUp(t *testing.T) {
	tests := []struct {
		name   string
		source *gpuwarden.NoticeSourceState
		want   float64 // -1: absent
	}{
		{"answering", &gpuwarden.NoticeSourceState{Cloud: "azure", Up: true}, 1},
		{"not answering", &gpuwarden.NoticeSourceState{Cloud: "gcp", Up: false}, 0},
		{"no cloud polled", nil, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := fixtureStatus()
			st.NoticeSource = tt.source
			_, base := startServer(t, newFakeAgent(st))
			mf, ok := scrape(t, base)["gpuwarden_notice_source_up"]
			if tt.want < 0 {
				if ok {
					t.Fatalf("gpuwarden_notice_source_up present with no cloud polled: %v", mf)
				}
				return
			}
			if !ok {
				t.Fatal("gpuwarden_notice_source_up missing")
			}
			m, ok := series(mf, map[string]string{"cloud": tt.source.Cloud})
			if !ok {
				t.Fatalf("no series for cloud %q in %v", tt.source.Cloud, mf)
			}
			if got := valueOf(mf, m); got != tt.want {
				t.Errorf("gpuwarden_notice_source_up{cloud=%q} = %v, want %v", tt.source.Cloud, got, tt.want)
			}
		})
	}
}
