package main

import (
	"bytes"
	"context"
	"fmt"
	nethttp "net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/launch"
	"github.com/gpuwarden/gpuwarden/notify"
	"github.com/gpuwarden/gpuwarden/report"
	"github.com/gpuwarden/gpuwarden/sqlite"
	"github.com/spf13/cobra"
)

type reportFlags struct {
	fleet                fleetFlags
	output               string
	project, by, month   string
	days, hours          int
	idleAfter, lostAfter time.Duration
	post, postFormat     string
	dataDir              string
	from, to             string
}

func (a *app) reportCommand() *cobra.Command {
	var f reportFlags
	c := &cobra.Command{
		Use:       "report spend|orphans|nodes|providers|heatmap|cost|provisioning|savings",
		Short:     "Fleet reports: spend vs budget, orphans, node and provider scorecards, heatmap, cost per result, savings",
		ValidArgs: append(slices.Clone(report.Names), "savings"),
		Long: `report reads the fleet server (--server with a token, or --db on the server's
box) and prints one report:

  spend      month-to-date spend per project, owner or provider (--by) with
             the forecast for the month and the budget (--month 2026-11)
  orphans    boxes nobody owns or uses: no owner label, TTL exceeded, idle
             for --idle-after, or no heartbeat for --lost-after while maybe
             still billing; -o md is the weekly review, --post sends it to a
             webhook
  nodes      per node: burn-ins and their verdicts, Xid, ECC, failed runs,
             errors per 100 up hours (--days back)
  providers  per provider: provisioning time mean, p50, p95 and outliers,
             preemptions per 100 h, failure rate
  heatmap    utilisation per GPU per hour (--hours back)
  cost       cost per epoch or per 1,000 requests where jobs report progress
  provisioning  launch command to ready, per provider, region and offer:
             mean, p50, p95, outliers, and failures by class, from the
             attempts ` + "`gpuwarden launch`" + ` recorded in this box's ledger (--data-dir),
             or from the server
` + savingsHelp + `
` + exitCodes("0  the report was made", "2  bad input or usage, or a token the server refuses", "3  the server or database does not answer",
			"4  internal error"),
		Example: `  gpuwarden report spend --server https://fleet:8080 --token-file viewer.token
  gpuwarden report spend --by owner -o json --db sqlite:/var/lib/gpuwarden/server.db
  gpuwarden report orphans -o md --post https://hooks.slack.com/services/…
  gpuwarden report heatmap --hours 12` + savingsExample,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] == "savings" {
				return a.runSavingsReport(cmd.Context(), &f)
			}
			if err := outputFormat(f.output, "table", "json", "md"); err != nil {
				return err
			}
			return a.runReport(cmd.Context(), args[0], &f)
		},
	}
	f.fleet.register(c)
	fl := c.Flags()
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table, json or md (savings: also csv)")
	fl.StringVar(&f.project, "project", "", "only this project (a fleet admin token sees all by default)")
	fl.StringVar(&f.by, "by", "project", "spend: group by project, owner or provider; savings: project, owner, kind or node")
	fl.StringVar(&f.month, "month", "", "spend, savings: the month, YYYY-MM (default: this month)")
	fl.StringVar(&f.from, "from", "", "savings: the period's start, a date (2026-11-01) or RFC 3339 time, instead of --month")
	fl.StringVar(&f.to, "to", "", "savings: the period's end (excluded), a date or RFC 3339 time")
	fl.IntVar(&f.days, "days", 30, "nodes, providers, cost: days to look back")
	fl.IntVar(&f.hours, "hours", 24, "heatmap: hours to show")
	fl.DurationVar(&f.idleAfter, "idle-after", report.DefaultIdleAfter, "orphans: idle this long makes an orphan")
	fl.DurationVar(&f.lostAfter, "lost-after", report.DefaultLostAfter, "orphans: no heartbeat this long makes a box lost")
	fl.StringVar(&f.dataDir, "data-dir", defaultDataDir(), "provisioning, savings: this box's ledger (without --server or --db)")
	fl.StringVar(&f.post, "post", "", "also post the markdown report to this webhook `URL`")
	fl.StringVar(&f.postFormat, "post-format", notify.FormatAuto, "webhook body for --post: auto (from the URL), slack, teams, discord, pagerduty, ntfy or json")
	return c
}

func (a *app) runReport(ctx context.Context, name string, f *reportFlags) error {
	v, err := report.Zero(name)
	if err != nil {
		return err
	}
	req := report.Request{Name: name, Project: f.project, By: f.by, Days: f.days, Hours: f.hours,
		IdleAfter: f.idleAfter, LostAfter: f.lostAfter}
	if f.month != "" {
		if req.Month, err = time.Parse("2006-01", f.month); err != nil {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "--month %q is not YYYY-MM", f.month)
		}
	}
	if name == "provisioning" && !f.fleet.remote() && f.fleet.db == "" {
		// Launches are recorded where `gpuwarden launch` ran: this box's ledger.
		if v, err = a.localProvisioning(ctx, f); err != nil {
			return err
		}
	} else if f.fleet.remote() {
		cl, err := f.fleet.client()
		if err != nil {
			return err
		}
		q := url.Values{"by": {f.by}, "days": {strconv.Itoa(f.days)}, "hours": {strconv.Itoa(f.hours)},
			"idle_after": {f.idleAfter.String()}, "lost_after": {f.lostAfter.String()}}
		if f.project != "" {
			q.Set("project", f.project)
		}
		if f.month != "" {
			q.Set("month", f.month)
		}
		if err := cl.Do(ctx, nethttp.MethodGet, "/api/v1/reports/"+name, q, nil, v); err != nil {
			return err
		}
	} else {
		store, _, err := openFleet(ctx, f.fleet.db, false)
		if err != nil {
			return err
		}
		defer store.Close()
		if v, err = report.Build(ctx, store, a.now(), req); err != nil {
			return err
		}
	}
	title := reportTitle(name, a.now())
	if f.post != "" {
		if err := a.postReport(ctx, f, v, title); err != nil {
			return err
		}
	}
	switch f.output {
	case "json":
		return writeJSON(a.stdout, "report."+name, v)
	case "md":
		return report.Write(a.stdout, v, true, title)
	}
	return report.Write(a.stdout, v, false, title)
}

func reportTitle(name string, now time.Time) string {
	y, w := now.ISOWeek()
	switch name {
	case "orphans":
		return fmt.Sprintf("Orphan review, week %d-W%02d", y, w)
	case "spend":
		return "Spend, " + now.Format("January 2006")
	}
	return "gpuwarden " + name
}

// postReport sends the markdown report as one message to a webhook.
func (a *app) postReport(ctx context.Context, f *reportFlags, v any, title string) error {
	var b bytes.Buffer
	if err := report.Write(&b, v, true, title); err != nil {
		return err
	}
	hook, err := notify.NewWebhook(f.post, f.postFormat, &nethttp.Client{Timeout: 10 * time.Second}, notify.WithLogger(a.log))
	if err != nil {
		return &gpuwarden.Error{Code: gpuwarden.EInvalid, Message: "--post", Err: err}
	}
	return hook.Notify(ctx, gpuwarden.Event{Time: a.now().UTC(), Kind: "report", Severity: gpuwarden.SeverityInfo,
		Message: b.String()})
}

// localProvisioning reads the launch attempts of this box's ledger.
func (a *app) localProvisioning(ctx context.Context, f *reportFlags) (any, error) {
	path := filepath.Join(f.dataDir, "ledger.db")
	if !fileExists(path) {
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "no ledger at %s: no launch recorded here", path).
			WithHint("run gpuwarden launch first, or pass --server/--db to read the fleet's")
	}
	l, err := sqlite.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	attempts, err := launch.Recorded(ctx, l)
	if err != nil {
		return nil, err
	}
	now := a.now()
	return report.Launches(attempts, now.Add(-time.Duration(f.days)*24*time.Hour), now), nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
