package sqlite

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

func TestEventsOfKind(t *testing.T) {
	ctx := context.Background()
	l := openTest(t, filepath.Join(t.TempDir(), "ledger.db"))
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	for i, kind := range []string{"progress", "idle-stop", "progress", "budget", "progress"} {
		e := gpuwarden.Event{Time: at.Add(time.Duration(i) * time.Minute), Kind: kind, Severity: gpuwarden.SeverityInfo,
			Message: kind, Data: map[string]string{"i": string(rune('0' + i))}}
		if _, err := l.RecordEvent(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		kind  string
		limit int
		want  []string // the "i" of each event, newest first
	}{
		{"progress", 10, []string{"4", "2", "0"}},
		{"progress", 2, []string{"4", "2"}},
		{"budget", 10, []string{"3"}},
		{"notice", 10, nil},
		{"progress", 0, nil},
	}
	for _, tt := range tests {
		evs, err := l.EventsOfKind(ctx, tt.kind, tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range evs {
			if e.Kind != tt.kind {
				t.Errorf("EventsOfKind(%q) returned a %q event", tt.kind, e.Kind)
			}
			got = append(got, e.Data["i"])
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("EventsOfKind(%q, %d) = %v, want %v", tt.kind, tt.limit, got, tt.want)
		}
	}
}
