package gpuwarden

import (
	"fmt"
	"time"
)

// The one time window of the fleet API. Every time an agent reports as
// happening (a heartbeat's time, a minute, an event) lies within
// [now − ReportedPast, now + ReportedSkew] of the server's clock; every
// time it reports as a start (idle_since, launched_at) only not after
// now + ReportedSkew. Older minutes would outlive their deduplication (the
// server keeps minutes FleetMinuteRetention) and count twice; a time in
// the future would top every listing until it came.
const (
	ReportedPast = FleetMinuteRetention
	ReportedSkew = 5 * time.Minute
)

// CheckReported refuses a reported time outside the window, naming what
// it is.
func CheckReported(what string, t, now time.Time) error {
	switch {
	case t.Before(now.Add(-ReportedPast)):
		return Errorf(EInvalid, "%s %s is older than %s", what, t.UTC().Format(time.RFC3339), fmtDays(ReportedPast)).
			WithHint("the server takes times within %s before and %s after its clock", fmtDays(ReportedPast), ReportedSkew)
	case t.After(now.Add(ReportedSkew)):
		return Errorf(EInvalid, "%s %s is in the future", what, t.UTC().Format(time.RFC3339)).
			WithHint("check the agent's clock: the server takes times up to %s after its own", ReportedSkew)
	}
	return nil
}

// CheckSince refuses a start time in the future; a zero time means none.
func CheckSince(what string, t, now time.Time) error {
	if !t.IsZero() && t.After(now.Add(ReportedSkew)) {
		return Errorf(EInvalid, "%s %s is in the future", what, t.UTC().Format(time.RFC3339)).
			WithHint("check the agent's clock: the server takes times up to %s after its own", ReportedSkew)
	}
	return nil
}

func fmtDays(d time.Duration) string { return fmt.Sprintf("%.0f days", d.Hours()/24) }
