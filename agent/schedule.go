package agent

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// Schedule is the on-hours of a box, as weekday/hour windows in a time zone
// (Cloud Custodian's offhours idea): outside every window the box is stopped,
// busy or not, after a warning.
type Schedule struct {
	Windows  []Window
	Location *time.Location
}

// Window is a span of minutes on some weekdays; End may pass midnight.
type Window struct {
	Days       [7]bool // indexed by time.Weekday
	Start, End int     // minutes after midnight
	Text       string
}

var dayNames = map[string]time.Weekday{"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday,
	"wed": time.Wednesday, "thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday}

// ParseSchedule reads windows such as "Mon-Fri 08:00-20:00" and "Sat 10:00-14:00"
// in a time zone such as "Europe/Berlin" ("" is UTC).
func ParseSchedule(windows []string, tz string) (*Schedule, error) {
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "--on-hours-tz: unknown time zone %q", tz).WithHint("an IANA name such as Europe/Berlin or UTC")
	}
	s := &Schedule{Location: loc}
	for _, w := range windows {
		win, err := parseWindow(w)
		if err != nil {
			return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "--on-hours %q: %v", w, err).
				WithHint(`write DAYS HH:MM-HH:MM, e.g. "Mon-Fri 08:00-20:00" or "Sat,Sun 10:00-14:00"`)
		}
		s.Windows = append(s.Windows, win)
	}
	return s, nil
}

func parseWindow(text string) (Window, error) {
	w := Window{Text: text}
	days, hours, ok := strings.Cut(strings.TrimSpace(text), " ")
	if !ok {
		return w, fmt.Errorf("needs days and hours")
	}
	for _, part := range strings.Split(strings.ToLower(days), ",") {
		from, to, isRange := strings.Cut(part, "-")
		a, okA := dayNames[from]
		if !okA {
			return w, fmt.Errorf("unknown day %q", from)
		}
		b := a
		if isRange {
			var okB bool
			if b, okB = dayNames[to]; !okB {
				return w, fmt.Errorf("unknown day %q", to)
			}
		}
		for d := a; ; d = (d + 1) % 7 {
			w.Days[d] = true
			if d == b {
				break
			}
		}
	}
	from, to, ok := strings.Cut(strings.TrimSpace(hours), "-")
	if !ok {
		return w, fmt.Errorf("hours need a start and an end")
	}
	var err error
	if w.Start, err = clockMinutes(from); err != nil {
		return w, err
	}
	if w.End, err = clockMinutes(to); err != nil {
		return w, err
	}
	// 24:00 is the next midnight, so "24:00-00:00" is as empty as "08:00-08:00".
	if w.Start == w.End || w.Start%(24*60) == w.End {
		return w, fmt.Errorf("the window is empty")
	}
	return w, nil
}

func clockMinutes(s string) (int, error) {
	t, err := time.Parse("15:04", s)
	if err != nil {
		if s == "24:00" {
			return 24 * 60, nil
		}
		return 0, fmt.Errorf("%q is not HH:MM", s)
	}
	return t.Hour()*60 + t.Minute(), nil
}

// On reports whether t falls inside any window.
func (s *Schedule) On(t time.Time) bool {
	lt := t.In(s.Location)
	m := lt.Hour()*60 + lt.Minute()
	day := lt.Weekday()
	for _, w := range s.Windows {
		switch {
		case w.Start < w.End:
			if w.Days[day] && m >= w.Start && m < w.End {
				return true
			}
		default: // passes midnight: the evening part today, the morning part from yesterday's window
			if (w.Days[day] && m >= w.Start) || (w.Days[(day+6)%7] && m < w.End) {
				return true
			}
		}
	}
	return false
}

const offSinceKey = "offhours_since"

// offHoursPolicy warns when the on-hours end and stops the box WarnBefore
// later, busy or not; the start of the off period keys both events.
func (a *Agent) offHoursPolicy(ctx context.Context, now time.Time) {
	s := a.cfg.OffHours
	if s == nil {
		return
	}
	since, _, err := a.ledger.State(ctx, offSinceKey)
	if err != nil {
		a.warn(ctx, "read the off-hours clock", "err", err)
		return
	}
	if s.On(now) {
		if since != "" {
			_ = a.ledger.SetState(ctx, offSinceKey, "")
		}
		return
	}
	start, err := time.Parse(time.RFC3339, since)
	if err != nil {
		start = now
		_ = a.ledger.SetState(ctx, offSinceKey, now.UTC().Format(time.RFC3339))
	}
	period := start.UTC().Format(time.RFC3339)
	stopAt := start.Add(a.cfg.Idle.WarnBefore)
	a.alert(ctx, gpuwarden.Event{Kind: "offhours-warning", Severity: gpuwarden.SeverityWarning, Key: "offhours-warning-" + period,
		Message: fmt.Sprintf("%s is outside its on-hours: it stops at %s", a.cfg.Node, stopAt.UTC().Format(time.RFC3339))})
	if now.Before(stopAt) || a.Jobs.Checkpointing() {
		return
	}
	if a.alert(ctx, gpuwarden.Event{Kind: "offhours-stop", Severity: gpuwarden.SeverityCritical, Key: "offhours-stop-" + period,
		Message: fmt.Sprintf("%s is outside its on-hours: stopping with %s", a.cfg.Node, a.cfg.Stop.method())}) {
		a.stop(ctx, "off-hours")
	}
}
