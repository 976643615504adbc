package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// TestIdleEpisodeOverResolves checks the end of an idle episode: once its
// warning went out, the box turning busy sends one idle-over that resolves
// the warning's and the stop's keys; an episode that ends before any
// warning sends nothing.
func TestIdleEpisodeOverResolves(t *testing.T) {
	tests := []struct {
		name      string
		idleTicks int // ticks idle before the job starts; the warning is at the fifth
		want      string
	}{
		{"after the warning", 5, "idle-warning,idle-over"},
		{"busy at the warning's tick", 4, ""},
		{"before the warning", 2, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			cfg := idleConfig()
			cfg.Idle.Window = 6 * time.Second // warn at 4 s, no stop within the test
			cfg.Idle.WarnBefore = 2 * time.Second
			a := h.agent("1xH100", cfg, gpuwarden.HostSample{})
			ctx := context.Background()
			start := h.clock.now()
			for range tt.idleTicks {
				a.Tick(ctx)
				h.clock.add(time.Second)
			}
			a.Jobs.Report("train-1", JobRunning, h.clock.now())
			a.Tick(ctx)
			a.Tick(ctx) // still busy: no second idle-over
			if got := strings.Join(h.events(), ","); got != tt.want {
				t.Fatalf("events %q, want %q", got, tt.want)
			}
			if tt.want == "" {
				return
			}
			evs, err := h.ledger.Events(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			p := start.UTC().Format(time.RFC3339)
			want := "idle-warning-" + p + " idle-stop-" + p
			if got := evs[0].Data[gpuwarden.DataResolves]; got != want || evs[0].Severity != gpuwarden.SeverityInfo {
				t.Errorf("idle-over resolves %q (severity %s), want %q (info)", got, evs[0].Severity, want)
			}
		})
	}
}

// TestCanceledNoticeResolves checks that a canceled notice names the key
// of the alert it ends.
func TestCanceledNoticeResolves(t *testing.T) {
	n := gpuwarden.Notice{Provider: "aws", Kind: gpuwarden.NoticeReboot, ID: "instance-event-1"}
	opened := noticeEvent(n)
	n.Canceled = true
	closed := noticeEvent(n)
	if closed.Data[gpuwarden.DataResolves] != opened.Key || opened.Data[gpuwarden.DataResolves] != "" {
		t.Errorf("cancellation resolves %q, want %q; the notice itself resolves %q, want nothing",
			closed.Data[gpuwarden.DataResolves], opened.Key, opened.Data[gpuwarden.DataResolves])
	}
}
