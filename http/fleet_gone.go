package http

import (
	"context"
	"errors"
	"fmt"
	"io"
	nethttp "net/http"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/report"
)

// GoneRequest is the body of POST /api/v1/nodes/{id}/gone; it may be
// empty. Reason says, for the record, how the person knows.
type GoneRequest struct {
	Reason string `json:"reason,omitempty"`
}

// GoneNode is the answer to marking a node gone: the node as stored now,
// the state it had, and what it billed after it stopped reporting, which
// stays in the month's spend.
type GoneNode struct {
	Node gpuwarden.Node `json:"node"`
	// Was is the node's state (report.NodeState) before it was marked.
	Was string `json:"was"`
	// AlreadyGone is set when the node was gone before: nothing changed.
	AlreadyGone bool `json:"already_gone,omitempty"`
	// AfterStop is what the node billed between its last heartbeat and
	// being marked gone; Billed is its amount.
	AfterStop *report.AfterStop `json:"after_stop,omitempty"`
	Billed    gpuwarden.Cents   `json:"billed_after_stop"`
}

// markGone is POST /api/v1/nodes/{id}/gone: an admin of the node's project
// (or a fleet admin) says the box is gone, after checking with the
// provider. The node stops accruing spend and leaves the orphan review
// until it reports again.
func (s *FleetServer) markGone(w nethttp.ResponseWriter, r *nethttp.Request, sc scope) error {
	id := r.PathValue("id")
	n, err := s.store.Node(r.Context(), id)
	if gpuwarden.ErrorCodeOf(err) == gpuwarden.ENotFound || (err == nil && !sc.canRead(n.Project)) {
		// Not found rather than forbidden, as GET says.
		return noNode(id)
	}
	if err != nil {
		return err
	}
	if !sc.canAdmin(n.Project) {
		return gpuwarden.Errorf(gpuwarden.EForbidden, "only an admin of project %q, or a fleet admin, may mark its nodes gone", n.Project).
			WithHint("use an admin token (gpuwarden token create --project %s --role admin)", n.Project)
	}
	var req GoneRequest
	if err := decodeOptional(r, &req); err != nil {
		return err
	}
	by := "token " + sc.ID
	if sc.Name != "" {
		by += " (" + sc.Name + ")"
	}
	g, err := MarkGone(r.Context(), s.store, n, s.now(), s.LostAfter, by, req.Reason, func(ctx context.Context, hb gpuwarden.Heartbeat) error {
		return s.beats.write(ctx, hb)
	})
	if err != nil {
		return err
	}
	if !g.AlreadyGone {
		s.log.Info("node marked gone", "node", id, "project", n.Project, "was", g.Was, "by", sc.ID, "billed_after_stop", g.Billed.Decimal())
	}
	return writeJSON(w, nethttp.StatusOK, g)
}

// decodeOptional reads a JSON body into v when there is one.
func decodeOptional(r *nethttp.Request, v any) error {
	if r.Body == nil {
		return nil
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var tooBig *nethttp.MaxBytesError
		if errors.As(err, &tooBig) {
			return err
		}
		return gpuwarden.Errorf(gpuwarden.EInvalid, "request body: %v", err)
	}
	if strings.TrimSpace(string(b)) == "" {
		return nil
	}
	r.Body = io.NopCloser(strings.NewReader(string(b)))
	return decode(r, v)
}

// MarkGone marks node n gone at now: write stores its last heartbeat (the
// server's heartbeat writer, or Fleet.RecordHeartbeats for `node gone
// --db`). The heartbeat keeps what the node billed after it stopped
// reporting (report.GoneHeartbeat). A node gone already is left as it is,
// so that marking twice keeps the first time. by and reason are recorded
// in the heartbeat's diagnosis, which the node page shows.
func MarkGone(ctx context.Context, store gpuwarden.Fleet, n gpuwarden.Node, now time.Time, lostAfter time.Duration, by, reason string,
	write func(context.Context, gpuwarden.Heartbeat) error) (GoneNode, error) {
	if len(reason) > maxLabelLen {
		return GoneNode{}, gpuwarden.Errorf(gpuwarden.EInvalid, "reason is longer than %d bytes", maxLabelLen)
	}
	now = now.UTC()
	g := GoneNode{Was: report.NodeState(n, now, lostAfter)}
	cur, err := nodeCurrency(ctx, store, n)
	if err != nil {
		return GoneNode{}, err
	}
	if g.Was != gpuwarden.NodeGone {
		note := "marked gone by " + by
		if reason != "" {
			note += ": " + reason
		}
		before := n
		if err := write(ctx, report.GoneHeartbeat(n, cur, now, lostAfter, note)); err != nil {
			return GoneNode{}, fmt.Errorf("mark node %s gone: %w", n.ID, err)
		}
		if err := recordOrphanEnded(ctx, store, before, cur, now, lostAfter, note); err != nil {
			return GoneNode{}, fmt.Errorf("mark node %s gone: %w", n.ID, err)
		}
		if n, err = store.Node(ctx, n.ID); err != nil {
			return GoneNode{}, fmt.Errorf("mark node %s gone: %w", n.ID, err)
		}
	} else {
		g.AlreadyGone = true
	}
	g.Node = n
	if a, ok := report.StillBilling(n, cur, now, lostAfter); ok && !a.Accruing() {
		g.AfterStop = &a
		g.Billed = gpuwarden.CentsOf(a.Within(a.From, a.Until))
	}
	return g, nil
}

// recordOrphanEnded records the saving of ending a node the orphan
// review flagged (issue #29), in a ledger that keeps savings.
func recordOrphanEnded(ctx context.Context, store gpuwarden.Fleet, n gpuwarden.Node, cur gpuwarden.Currency, now time.Time,
	lostAfter time.Duration, by string) error {
	l, ok := store.(gpuwarden.SavingsLedger)
	if !ok {
		return nil
	}
	already, err := l.Savings(ctx, gpuwarden.SavingsQuery{Node: n.ID, From: now.AddDate(0, -1, 0)})
	if err != nil {
		return fmt.Errorf("read savings: %w", err)
	}
	s, ok := report.OrphanEnded(n, cur, now, lostAfter, by, already)
	if !ok || s.Currency == "" {
		return nil // not flagged, or nothing says what currency it billed in
	}
	return l.RecordSavings(ctx, []gpuwarden.Saving{s})
}

// nodeCurrency is what a node bills in: its label, else its project's.
func nodeCurrency(ctx context.Context, store gpuwarden.Fleet, n gpuwarden.Node) (gpuwarden.Currency, error) {
	if n.Labels.Currency != "" {
		return n.Labels.Currency, nil
	}
	ps, err := store.Projects(ctx)
	if err != nil {
		return "", fmt.Errorf("read projects: %w", err)
	}
	for _, p := range ps {
		if p.Name == n.Project {
			return p.Currency, nil
		}
	}
	return "", nil
}
