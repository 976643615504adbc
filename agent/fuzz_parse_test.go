package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// minutesPerWeek is how many minutes of the week the reference schedule marks.
const minutesPerWeek = 7 * 24 * 60

// weekMinutes is the reference reading of windows: minutes [Start, End) on
// each of its days, the part past midnight on the next day when End is not
// after Start, as Window's doc comment says. Index 0 is Sunday 00:00.
func weekMinutes(windows []Window) [minutesPerWeek]bool {
	var on [minutesPerWeek]bool
	for _, w := range windows {
		end := w.End
		if end <= w.Start {
			end += 24 * 60
		}
		for d, set := range w.Days {
			if !set {
				continue
			}
			for m := w.Start; m < end; m++ {
				on[(d*24*60+m)%minutesPerWeek] = true
			}
		}
	}
	return on
}

// formatWindow writes a window back in the syntax ParseSchedule reads.
func formatWindow(w Window) string {
	var days []string
	for d, set := range w.Days {
		if set {
			days = append(days, strings.ToLower(time.Weekday(d).String()[:3]))
		}
	}
	clock := func(m int) string { return fmt.Sprintf("%02d:%02d", m/60, m%60) }
	return strings.Join(days, ",") + " " + clock(w.Start) + "-" + clock(w.End)
}

// FuzzParseSchedule checks ParseSchedule beyond not panicking: a refusal is
// EInvalid and names the flag and the value at fault (the zone, or the
// first bad window); an accepted schedule has one window per text, each
// with its text, at least one day, times within 00:00..24:00, and at least
// one minute on (an empty window is refused); written back out, a window
// parses to the same window; and On agrees, minute by minute over a week,
// with the reference reading of the windows, and in the schedule's zone
// with its wall clock.
func FuzzParseSchedule(f *testing.F) {
	// The rows of TestSchedule and the plan examples.
	f.Add("Mon-Fri 08:00-20:00", "Sat 22:00-02:00", "Europe/Berlin", int64(1795950000))
	f.Add("Mon-Fri 08:00-09:00", "", "UTC", int64(0))
	f.Add("Sat,Sun 10:00-14:00", "Fri-Mon 00:00-24:00", "", int64(-1))
	f.Add("Mon 25:00-26:00", "Funday 08:00-09:00", "UTC", int64(1))
	f.Add("Mon 08:00", "Mon 08:00-08:00", "Mars/Olympus", int64(1))
	f.Add("  mon  9:30-17:45 ", "SUN 23:59-00:01", "America/New_York", int64(1774000000))
	// What the fuzzer found (TestScheduleFuzzFinds).
	f.Add("Mon 24:00-00:00", "Tue 24:00-01:00", "UTC", int64(0))
	f.Fuzz(func(t *testing.T, w1, w2, tz string, at int64) {
		windows := []string{w1}
		if w2 != "" {
			windows = append(windows, w2)
		}
		s, err := ParseSchedule(windows, tz)
		if err != nil {
			checkScheduleError(t, windows, tz, err)
			return
		}
		if len(s.Windows) != len(windows) || s.Location == nil {
			t.Fatalf("%q in %q: %d windows, location %v", windows, tz, len(s.Windows), s.Location)
		}
		for i, w := range s.Windows {
			if w.Text != windows[i] {
				t.Fatalf("window %d text %q, want %q", i, w.Text, windows[i])
			}
			if w.Days == [7]bool{} || w.Start < 0 || w.Start > 24*60 || w.End < 0 || w.End > 24*60 {
				t.Fatalf("%q: accepted %+v", w.Text, w)
			}
			on := weekMinutes([]Window{w})
			n := 0
			for _, set := range on {
				if set {
					n++
				}
			}
			if n == 0 {
				t.Fatalf("%q: accepted a window that is never on: %+v", w.Text, w)
			}
			text := formatWindow(w)
			back, err := ParseSchedule([]string{text}, "UTC")
			if err != nil {
				t.Fatalf("%q written back as %q does not parse: %v", w.Text, text, err)
			}
			if got := back.Windows[0]; got.Days != w.Days || got.Start != w.Start || got.End != w.End {
				t.Fatalf("%q written back as %q parses to %+v, want %+v", w.Text, text, got, w)
			}
		}
		// Minute by minute in UTC against the reference reading.
		utc := &Schedule{Windows: s.Windows, Location: time.UTC}
		want := weekMinutes(s.Windows)
		sunday := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
		for m := range minutesPerWeek {
			at := sunday.Add(time.Duration(m)*time.Minute + 30*time.Second)
			if got := utc.On(at); got != want[m] {
				t.Fatalf("%q: On(%v) = %v, want %v", windows, at, got, want[m])
			}
		}
		// In the schedule's zone, On reads the wall clock there.
		instant := time.Unix(at%(1<<40), 0)
		wall := instant.In(s.Location)
		asUTC := time.Date(wall.Year(), wall.Month(), wall.Day(), wall.Hour(), wall.Minute(), wall.Second(), 0, time.UTC)
		if got, want := s.On(instant), utc.On(asUTC); got != want {
			t.Fatalf("%q in %q: On(%v) = %v, but its wall clock %v gives %v", windows, tz, instant, got, wall, want)
		}
	})
}

// checkScheduleError checks that a refusal is bad input naming what is bad.
func checkScheduleError(t *testing.T, windows []string, tz string, err error) {
	t.Helper()
	if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
		t.Fatalf("%q in %q: error %v has code %q, want %q", windows, tz, err, gpuwarden.ErrorCodeOf(err), gpuwarden.EInvalid)
	}
	if gpuwarden.ErrorHint(err) == "" {
		t.Fatalf("%q in %q: error %v has no hint", windows, tz, err)
	}
	if _, tzErr := time.LoadLocation(tz); tzErr != nil {
		if want := fmt.Sprintf("--on-hours-tz: unknown time zone %q", tz); !strings.Contains(err.Error(), want) {
			t.Fatalf("bad zone %q: error %q does not say %q", tz, err, want)
		}
		return
	}
	for _, w := range windows {
		if _, werr := parseWindow(w); werr != nil {
			if want := fmt.Sprintf("--on-hours %q", w); !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("bad window %q: error %q does not start %q", w, err, want)
			}
			return
		}
	}
	t.Fatalf("%q in %q refused though every window parses alone: %v", windows, tz, err)
}

// TestScheduleFuzzFinds holds what FuzzParseSchedule found: "24:00-00:00"
// is midnight to the same midnight, a window that is never on, and was
// accepted; "24:00-01:00" starts at the day's end and is the next morning.
func TestScheduleFuzzFinds(t *testing.T) {
	tests := []struct {
		window string
		ok     bool
		on     []time.Time
		off    []time.Time
	}{
		{window: "Mon 24:00-00:00"},
		{window: "Mon 24:00-24:00"},
		{window: "Mon 00:00-00:00"},
		{window: "Mon 00:00-24:00", ok: true,
			on:  []time.Time{time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 23, 59, 0, 0, time.UTC)},
			off: []time.Time{time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 29, 23, 59, 0, 0, time.UTC)}},
		{window: "Mon 24:00-01:00", ok: true,
			on:  []time.Time{time.Date(2026, 12, 1, 0, 30, 0, 0, time.UTC)},
			off: []time.Time{time.Date(2026, 11, 30, 0, 30, 0, 0, time.UTC), time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC)}},
	}
	for _, tt := range tests {
		s, err := ParseSchedule([]string{tt.window}, "UTC")
		if (err == nil) != tt.ok {
			t.Errorf("%q: err %v, want ok %v", tt.window, err, tt.ok)
			continue
		}
		if err != nil {
			if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid || !strings.Contains(err.Error(), "empty") {
				t.Errorf("%q: err %v, want invalid saying the window is empty", tt.window, err)
			}
			continue
		}
		for _, at := range tt.on {
			if !s.On(at) {
				t.Errorf("%q: off at %v, want on", tt.window, at)
			}
		}
		for _, at := range tt.off {
			if s.On(at) {
				t.Errorf("%q: on at %v, want off", tt.window, at)
			}
		}
	}
}
