package http

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/report"
	"github.com/gpuwarden/gpuwarden/savings"
)

// recordRightSize re-prices, after each batch of a node that carries the
// label replaces=A, its right-size saving for the month (issue #29): A's
// price less its own over the hours it ran, resting on A's newest
// diagnosis-oversized event. A node without the label costs nothing (its
// label is in the owner cache); one with it costs a few indexed reads and
// at most one Events query. The batch is stored already, so a failure is
// logged rather than refused: the next batch prices the event again.
func (s *FleetServer) recordRightSize(ctx context.Context, id string) {
	if err := s.rightSize(ctx, id); err != nil {
		s.log.Warn("price right-size saving", "node", id, "err", err)
	}
}

func (s *FleetServer) rightSize(ctx context.Context, id string) error {
	l, ok := s.store.(gpuwarden.SavingsLedger)
	if !ok {
		return nil
	}
	o, err := s.nodes.owner(ctx, id)
	if err != nil {
		return err
	}
	replaces := strings.TrimSpace(o.replaces)
	if replaces == "" || replaces == id {
		return nil
	}
	return RecordRightSize(ctx, s.store, l, id, replaces, s.now(), s.LostAfter)
}

// RecordRightSize prices and stores node b's right-size saving, b having
// said that it replaces node a: no event when a is unknown, in another
// project or never diagnosed oversized (report.RightSized).
func RecordRightSize(ctx context.Context, store gpuwarden.Fleet, l gpuwarden.SavingsLedger, b, a string,
	now time.Time, lostAfter time.Duration) error {
	nb, err := store.Node(ctx, b)
	if err != nil {
		return fmt.Errorf("read node %s: %w", b, err)
	}
	na, err := store.Node(ctx, a)
	if gpuwarden.ErrorCodeOf(err) == gpuwarden.ENotFound {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read node %s: %w", a, err)
	}
	if na.Project != nb.Project {
		// Another project's box is no evidence here, and its events are
		// not this project's to read.
		return nil
	}
	diag, err := store.Events(ctx, gpuwarden.EventQuery{Project: nb.Project, Node: na.ID,
		Kinds: []string{gpuwarden.EventDiagnosisOversized}, Limit: 1})
	if err != nil {
		return fmt.Errorf("read %s events of %s: %w", gpuwarden.EventDiagnosisOversized, a, err)
	}
	if len(diag) == 0 {
		return nil
	}
	curB, err := nodeCurrency(ctx, store, nb)
	if err != nil {
		return err
	}
	curA, err := nodeCurrency(ctx, store, na)
	if err != nil {
		return err
	}
	monthStart, _ := savings.Month(now)
	already, err := l.Savings(ctx, gpuwarden.SavingsQuery{Node: nb.ID, From: monthStart})
	if err != nil {
		return fmt.Errorf("read savings of %s: %w", b, err)
	}
	sv, ok := report.RightSized(report.RightSize{B: nb, A: na, CurB: curB, CurA: curA, Diagnosis: diag[0],
		Already: already, Now: now, LostAfter: lostAfter})
	if !ok || sv.Currency == "" {
		return nil
	}
	return l.RecordSavings(ctx, []gpuwarden.Saving{sv})
}
