package main

import (
	"context"
	"fmt"
	nethttp "net/http"
	"net/url"
	"time"

	"github.com/gpuwarden/gpuwarden"
	gwhttp "github.com/gpuwarden/gpuwarden/http"
	"github.com/gpuwarden/gpuwarden/report"
	"github.com/spf13/cobra"
)

func (a *app) nodeCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "node",
		Short: "Manage one node of the fleet server: mark it gone once the provider no longer bills it",
		Long: `node acts on one node the fleet server knows (` + "`gpuwarden nodes`" + ` is this box's
burn-in scorecards instead).

` + exitCodes("0  done", "2  bad input or usage, an unknown node, or a token the server refuses",
			"3  the server or database does not answer, or cannot take writes now", "4  internal error"),
		Example: `  gpuwarden node gone az-train-3 --server https://fleet:8080 --token-file admin.token
  gpuwarden node gone az-train-3 --reason "deleted in the portal" --db sqlite:/var/lib/gpuwarden/server.db`,
	}
	c.AddCommand(a.nodeGoneCommand())
	return c
}

func (a *app) nodeGoneCommand() *cobra.Command {
	var f fleetFlags
	var reason, output string
	var lostAfter time.Duration
	c := &cobra.Command{
		Use:   "gone ID",
		Short: "Mark a node gone: it stops accruing spend and leaves the orphan review",
		Long: `gone says that a node no longer bills: you checked with the provider that the
box is deleted, deallocated or terminated. The fleet server keeps counting the
spend of a box that stopped reporting without a stop the provider confirmed
(stop-requested, powered-off-still-billing, lost), at the rate that still
bills, and lists it in the orphan review; once marked gone it stops accruing
(what it billed until now stays in the month's spend) and leaves the review.
A node that reports again is live again.

Only an admin token of the node's project, or a fleet admin token, may mark a
node gone; --db writes to the server's database directly, on its own box.

` + exitCodes("0  the node is marked gone (or was already)", "2  bad input or usage, an unknown node, or a token the server refuses (not an admin)",
			"3  the server or database does not answer, or cannot take writes now", "4  internal error"),
		Example: `  gpuwarden node gone az-train-3 --server https://fleet:8080 --token-file admin.token
  gpuwarden node gone az-train-3 --reason "deallocated in the portal" -o json --db sqlite:server.db`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := outputFormat(output, "table", "json"); err != nil {
				return err
			}
			g, err := a.markGone(cmd.Context(), &f, args[0], reason, lostAfter)
			if err != nil {
				return err
			}
			return a.printGone(output, g)
		},
	}
	f.register(c)
	fl := c.Flags()
	fl.StringVar(&reason, "reason", "", "`TEXT`: how you know it is gone, kept with the node")
	fl.DurationVar(&lostAfter, "lost-after", report.DefaultLostAfter, "with --db: a silent box is lost after this long (a server uses its own)")
	fl.StringVarP(&output, "output", "o", "table", "output format: table or json")
	return c
}

// markGone marks the node gone through the server, or in the database.
func (a *app) markGone(ctx context.Context, f *fleetFlags, id, reason string, lostAfter time.Duration) (gwhttp.GoneNode, error) {
	var g gwhttp.GoneNode
	if f.remote() {
		cl, err := f.client()
		if err != nil {
			return g, err
		}
		err = cl.Do(ctx, nethttp.MethodPost, "/api/v1/nodes/"+url.PathEscape(id)+"/gone", nil, gwhttp.GoneRequest{Reason: reason}, &g)
		return g, err
	}
	if lostAfter <= 0 {
		return g, gpuwarden.Errorf(gpuwarden.EInvalid, "--lost-after must be positive")
	}
	store, _, err := openFleet(ctx, f.db, false)
	if err != nil {
		return g, err
	}
	defer store.Close()
	n, err := store.Node(ctx, id)
	if err != nil {
		return g, err
	}
	now := a.now()
	return gwhttp.MarkGone(ctx, store, n, now, lostAfter, "the ledger directly (--db)", reason,
		func(ctx context.Context, hb gpuwarden.Heartbeat) error {
			return store.RecordHeartbeats(ctx, now.UTC(), []gpuwarden.Heartbeat{hb})
		})
}

func (a *app) printGone(output string, g gwhttp.GoneNode) error {
	if output == "json" {
		return writeJSON(a.stdout, "node-gone", g)
	}
	var msg string
	if g.AlreadyGone {
		msg = fmt.Sprintf("node %s was already gone (marked %s); nothing changed\n", g.Node.ID, goneStamp(g.Node.LastSeen))
	} else {
		msg = fmt.Sprintf("node %s marked gone (it was %s): it no longer accrues spend and leaves the orphan review\n", g.Node.ID, g.Was)
	}
	if a := g.AfterStop; a != nil {
		msg += fmt.Sprintf("it billed %s after it stopped reporting (%s from %s to %s); that stays in the month's spend\n",
			goneMoney(a.Currency, g.Billed), goneRate(a.Currency, a.Hourly), goneStamp(a.From), goneStamp(a.Until))
	}
	_, err := fmt.Fprint(a.stdout, msg)
	return err
}

func goneStamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

// fmtMoney prints an amount; an unknown currency prints the bare decimal.
func goneMoney(cur gpuwarden.Currency, c gpuwarden.Cents) string {
	if cur == "" {
		return c.Decimal()
	}
	return cur.Format(c)
}

// fmtRate prints a price per hour.
func goneRate(cur gpuwarden.Currency, m gpuwarden.Micros) string {
	if cur == "" {
		return m.String() + "/h"
	}
	return cur.FormatRate(m, "h")
}
