package launch

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

func TestCleanup(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	attempts := func(t *testing.T) []gpuwarden.LaunchAttempt {
		return []gpuwarden.LaunchAttempt{
			{ID: "L-1", Name: "gw-1", Target: "a", Outcome: gpuwarden.AttemptFailed, Class: "unknown", MayExist: true, StopCommand: script(t, "stop.sh", "one")},
			{ID: "L-2", Name: "gw-2", Target: "b", Outcome: gpuwarden.AttemptFailed, Class: "capacity", StopCommand: script(t, "stop.sh", "refused")},
			{ID: "L-3", Name: "gw-3", Target: "c", Outcome: gpuwarden.AttemptFailed, MayExist: true, StopCommand: script(t, "stop-fail.sh", "i-0dead")},
			{ID: "L-4", Name: "gw-4", Target: "d", Outcome: gpuwarden.AttemptFailed, MayExist: true, Cleaned: t0, StopCommand: script(t, "stop.sh", "done")},
			{ID: "L-5", Name: "gw-5", Target: "e", Outcome: "", MayExist: true, StopCommand: script(t, "stop.sh", "pending")},
			{ID: "L-6", Name: "gw-6", Target: "f", Outcome: gpuwarden.AttemptLaunched, MayExist: true, StopCommand: script(t, "stop.sh", "launched")},
			{ID: "L-7", Name: "gw-7", Target: "g", Outcome: gpuwarden.AttemptFailed, MayExist: true},
		}
	}
	tests := []struct {
		name            string
		includeLaunched bool
		wantN           int
		wantRan         []string
		wantRecorded    []string
	}{
		{"launched kept", false, 2, []string{"stop one", "stop-fail i-0dead", "stop pending"}, []string{"L-1", "L-5"}},
		{"launched included", true, 3, []string{"stop one", "stop-fail i-0dead", "stop pending", "stop launched"}, []string{"L-1", "L-5", "L-6"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 0)
			var out bytes.Buffer
			n, err := Cleanup(context.Background(), attempts(t), e.rec, CleanupOptions{IncludeLaunched: tc.includeLaunched, Out: &out,
				Env: []string{"GW_MARKER=" + e.marker}, Tries: 1})
			if n != tc.wantN {
				t.Errorf("cleaned %d, want %d", n, tc.wantN)
			}
			// The failing stop is reported, after the others were tried.
			if code(err) != gpuwarden.EFinding || !strings.Contains(err.Error(), "gw-3: exit 254") || !strings.Contains(err.Error(), "InvalidInstanceID.NotFound") {
				t.Errorf("error %v (code %q)", err, code(err))
			}
			if got := e.ran(t); !equal(got, tc.wantRan) {
				t.Errorf("ran %q, want %q", got, tc.wantRan)
			}
			var recorded []string
			for _, r := range e.rec.Records() {
				recorded = append(recorded, r.ID)
				if r.Cleaned.IsZero() {
					t.Errorf("%s recorded without Cleaned", r.ID)
				}
			}
			if !equal(recorded, tc.wantRecorded) {
				t.Errorf("recorded %v, want %v", recorded, tc.wantRecorded)
			}
			for _, want := range []string{"gw-1  a: stopped", "gw-3  c: stop failed", "gw-7  g: no stop command"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("out lacks %q:\n%s", want, out.String())
				}
			}
			if !tc.includeLaunched && !strings.Contains(out.String(), "gw-6  f: launched, kept") {
				t.Errorf("out does not say the launched box was kept:\n%s", out.String())
			}
		})
	}
	t.Run("cancelled", func(t *testing.T) {
		e := newEnv(t, 0)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		n, err := Cleanup(ctx, attempts(t)[:1], e.rec, CleanupOptions{})
		if n != 0 || err == nil || !strings.Contains(err.Error(), "not tried") {
			t.Errorf("Cleanup = %d, %v", n, err)
		}
	})
	t.Run("nothing to do", func(t *testing.T) {
		n, err := Cleanup(context.Background(), nil, nil, CleanupOptions{IncludeLaunched: true})
		if n != 0 || err != nil {
			t.Errorf("Cleanup = %d, %v", n, err)
		}
	})
}

func TestFold(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	tests := []struct {
		name    string
		records []gpuwarden.LaunchAttempt
		want    []string // ID:Outcome
	}{
		{"empty", nil, nil},
		{"latest record wins, start order", []gpuwarden.LaunchAttempt{
			{ID: "L-1", Start: at(0)},
			{ID: "L-1", Start: at(0), Outcome: "failed"},
			{ID: "L-2", Start: at(5)},
			{ID: "L-2", Start: at(5), Outcome: "launched"},
			{ID: "L-2", Start: at(5), Outcome: "launched", ProvisionSeconds: 90},
			{ID: "L-1", Start: at(0), Outcome: "failed", Cleaned: at(100)},
		}, []string{"L-1:failed", "L-2:launched"}},
		{"records out of start order", []gpuwarden.LaunchAttempt{
			{ID: "M-2", Start: at(9), Outcome: "skipped"},
			{ID: "M-1", Start: at(1), Outcome: "failed"},
		}, []string{"M-1:failed", "M-2:skipped"}},
		{"same start keeps first-seen order", []gpuwarden.LaunchAttempt{
			{ID: "N-1", Start: at(1), Outcome: "failed"},
			{ID: "N-2", Start: at(1), Outcome: "skipped"},
			{ID: "N-3", Start: at(1), Outcome: "skipped"},
		}, []string{"N-1:failed", "N-2:skipped", "N-3:skipped"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Fold(tc.records)
			var ids []string
			for _, a := range got {
				ids = append(ids, a.ID+":"+a.Outcome)
			}
			if !equal(ids, tc.want) {
				t.Errorf("Fold = %v, want %v", ids, tc.want)
			}
		})
	}
	// The latest record carries its latest fields.
	got := Fold([]gpuwarden.LaunchAttempt{{ID: "L-1", Start: at(0)}, {ID: "L-1", Start: at(0), Outcome: "failed", Cleaned: at(100)}})
	if len(got) != 1 || !got[0].Cleaned.Equal(at(100)) {
		t.Errorf("Fold = %+v", got)
	}
}

// TestCleanupRetries: a stop that fails is tried again after a doubling
// pause, and the attempt is cleaned only once a try says the box is gone;
// one that keeps failing stays uncleaned for the next cleanup (issue 28
// item 5).
func TestCleanupRetries(t *testing.T) {
	tests := []struct {
		name      string
		tries     int
		wantN     int
		wantRan   []string
		wantSlept []time.Duration
		wantErr   bool
	}{
		{"third try works", 3, 1, []string{"flaky-stop 1", "flaky-stop 2", "flaky-stop 3"}, []time.Duration{time.Second, 2 * time.Second}, false},
		{"gives up after two", 2, 0, []string{"flaky-stop 1", "flaky-stop 2"}, []time.Duration{time.Second}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 0)
			a := gpuwarden.LaunchAttempt{ID: "L-1", Name: "gw-1", Target: "a", Outcome: "", MayExist: true, StopCommand: script(t, "flaky-stop.sh")}
			var out bytes.Buffer
			n, err := Cleanup(context.Background(), []gpuwarden.LaunchAttempt{a}, e.rec, CleanupOptions{Out: &out,
				Env: []string{"GW_MARKER=" + e.marker, "GW_STATE=" + e.dir + "/state"}, Tries: tc.tries, Backoff: time.Second,
				Sleep: e.clock.Sleep, Now: e.clock.Now})
			if n != tc.wantN || (err != nil) != tc.wantErr {
				t.Fatalf("Cleanup = %d, %v; want %d, error %v\n%s", n, err, tc.wantN, tc.wantErr, out.String())
			}
			if got := e.ran(t); !equal(got, tc.wantRan) {
				t.Errorf("ran %q, want %q", got, tc.wantRan)
			}
			if got := e.clock.Slept(); !equal(got, tc.wantSlept) {
				t.Errorf("slept %v, want %v", got, tc.wantSlept)
			}
			recs := e.rec.Records()
			if tc.wantErr {
				if len(recs) != 0 {
					t.Errorf("a failed stop was recorded as cleaned: %+v", recs)
				}
				if !strings.Contains(err.Error(), "gw-1: exit 254") || !strings.Contains(err.Error(), "(tried 2 times)") || !strings.Contains(err.Error(), "RequestLimitExceeded") {
					t.Errorf("error %v does not say how it failed", err)
				}
				return
			}
			if len(recs) != 1 || recs[0].Cleaned.IsZero() {
				t.Fatalf("records %+v, want one cleaned", recs)
			}
			if want := "gw-1  a: stopped (no instance named gw-1 is left)"; !strings.Contains(out.String(), want) {
				t.Errorf("out lacks %q:\n%s", want, out.String())
			}
		})
	}
}
