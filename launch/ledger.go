package launch

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// EventKind is the ledger event kind of a launch attempt's record.
const EventKind = "launch"

// maxLedgerEvents bounds how many events Recorded reads: years of launches.
const maxLedgerEvents = 1 << 20

// Event is one record of an attempt as a ledger event. Records are
// appended, never updated, so a crash between two records loses neither;
// Fold keeps the latest.
func Event(a gpuwarden.LaunchAttempt, now time.Time) (gpuwarden.Event, error) {
	b, err := json.Marshal(a)
	if err != nil {
		return gpuwarden.Event{}, fmt.Errorf("record attempt %s: %w", a.ID, err)
	}
	sev, state := gpuwarden.SeverityInfo, a.Outcome
	switch {
	case a.Outcome == "":
		state = "started"
	case a.Outcome == gpuwarden.AttemptFailed && a.MayExist:
		sev = gpuwarden.SeverityWarning
	}
	return gpuwarden.Event{Time: now.UTC(), Kind: EventKind, Severity: sev,
		Message: fmt.Sprintf("launch %s: %s %s %s %s", a.ID, a.Target, a.Provider, a.Region, state),
		Data:    map[string]string{"attempt": string(b)}}, nil
}

// Attempts decodes the launch records among events and folds them to the
// latest state of each attempt; records it cannot read are skipped.
func Attempts(events []gpuwarden.Event) []gpuwarden.LaunchAttempt {
	var records []gpuwarden.LaunchAttempt
	for _, e := range events {
		if e.Kind != EventKind {
			continue
		}
		var a gpuwarden.LaunchAttempt
		if err := json.Unmarshal([]byte(e.Data["attempt"]), &a); err != nil || a.ID == "" {
			continue
		}
		records = append(records, a)
	}
	return Fold(records)
}

// Recorded reads every attempt a ledger holds, oldest first.
func Recorded(ctx context.Context, l gpuwarden.Ledger) ([]gpuwarden.LaunchAttempt, error) {
	evs, err := l.EventsAfter(ctx, 0, maxLedgerEvents)
	if err != nil {
		return nil, fmt.Errorf("read launch attempts: %w", err)
	}
	return Attempts(evs), nil
}
