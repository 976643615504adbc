package agent

import (
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// TestSetNoticeSource: the status carries whether the cloud's notice source
// answers and since when, for gpuwarden_notice_source_up.
func TestSetNoticeSource(t *testing.T) {
	h := newHarness(t)
	a := h.agent("1xH100", idleConfig(), gpuwarden.HostSample{})
	if ns := a.Status().NoticeSource; ns != nil {
		t.Fatalf("before any poll: %+v, want none", ns)
	}
	t0 := time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)
	steps := []struct {
		up bool
		at time.Time
	}{
		{false, t0},
		{true, t0.Add(90 * time.Second)},
		{false, t0.Add(time.Hour)},
	}
	for i, s := range steps {
		a.Now = func() time.Time { return s.at }
		a.SetNoticeSource("azure", s.up)
		got := a.Status().NoticeSource
		want := gpuwarden.NoticeSourceState{Cloud: "azure", Up: s.up, Since: s.at}
		if got == nil || *got != want {
			t.Errorf("step %d: %+v, want %+v", i, got, want)
		}
	}
}
