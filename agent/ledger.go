package agent

import (
	"context"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// LedgerFile is the file under the agent's ledger (sqlite.Ledger), which
// the agent watches: SQLite goes on writing to a file deleted under it, and
// all of it is lost when the agent stops.
type LedgerFile interface {
	// Gone says what became of the file ("deleted", "replaced by another
	// file"); "" while it is the one the ledger writes to.
	Gone() (string, error)
	// Replace starts writing to a file at the ledger's path again and
	// records there, first, a critical event saying why, which it returns.
	Replace(ctx context.Context, why string, now time.Time) (gpuwarden.Event, error)
}

// WatchLedger checks the ledger's file every period until ctx ends; see
// CheckLedger.
func (a *Agent) WatchLedger(ctx context.Context, f LedgerFile, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.CheckLedger(ctx, f)
		}
	}
}

// CheckLedger looks once whether the ledger's file is still there (one
// stat); when it is not, it starts a fresh one and announces it
// (LedgerReplaced). It reports whether it replaced the file.
func (a *Agent) CheckLedger(ctx context.Context, f LedgerFile) bool {
	why, err := f.Gone()
	if err != nil {
		a.log.Warn("look at the ledger file", "err", err)
		return false
	}
	if why == "" {
		return false
	}
	e, err := f.Replace(ctx, why, a.Now())
	if err != nil {
		// The ledger refuses every write until the next look succeeds.
		a.log.Error("the ledger file was "+why+"; starting a fresh one failed", "err", err)
		return false
	}
	a.LedgerReplaced(ctx, e)
	return true
}

// LedgerReplaced announces the event a ledger recorded when it started
// afresh (a damaged file put aside, a file deleted under the agent): an
// error in the log, the notifiers, and a warning in the status for the
// agent's life, since the history, the idle clock and the spend before it
// may be gone. The event is already in the ledger, its first.
func (a *Agent) LedgerReplaced(ctx context.Context, e gpuwarden.Event) {
	a.log.Error(e.Message, "kind", e.Kind, "severity", e.Severity)
	w := e.Time.UTC().Format(time.RFC3339) + ": " + e.Message
	a.mu.Lock()
	a.ledgerWarnings = append(a.ledgerWarnings, w)
	a.status.Warnings = append(a.status.Warnings, w)
	a.mu.Unlock()
	if a.notify != nil {
		if err := a.notify.Notify(ctx, e); err != nil {
			a.log.Warn("notify", "kind", e.Kind, "err", err)
		}
	}
}
