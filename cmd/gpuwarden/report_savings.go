package main

import (
	"context"
	"fmt"
	"io"
	nethttp "net/http"
	"net/url"
	"path/filepath"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/report"
	"github.com/gpuwarden/gpuwarden/savings"
	"github.com/gpuwarden/gpuwarden/sqlite"
)

// savingsHelp is `report savings` in the report command's help.
const savingsHelp = `  savings    what gpuwarden saved (--month 2026-11, or --from/--to), per
             project, owner, kind or node (--by), every amount confirmed,
             estimated or attributed, each event with its evidence; -o csv is
             one row per event under a header and nothing else, so that a
             spreadsheet's SUM of amount is the total. Reads the fleet server,
             or without --server/--db this box's agent ledger (--data-dir);
             see docs/savings.md
`

// savingsExample is `report savings` in the report command's examples.
const savingsExample = `
  gpuwarden report savings --month 2026-11 --by kind --server https://fleet:8080 --token-file viewer.token
  gpuwarden report savings --from 2026-11-01 --to 2026-11-15 -o csv > savings.csv`

// savingsPeriod reads --month or --from/--to (dates or RFC 3339 times),
// this month by default; both at once is a usage error.
func savingsPeriod(f *reportFlags, now time.Time) (from, to time.Time, err error) {
	if f.month != "" && (f.from != "" || f.to != "") {
		return from, to, gpuwarden.Errorf(gpuwarden.EInvalid, "--month and --from/--to: give one or the other")
	}
	if f.month != "" {
		if from, to, err = savings.ParseMonth(f.month); err != nil {
			return from, to, fmt.Errorf("--month: %w", err)
		}
		return from, to, nil
	}
	from, to = savings.Month(now)
	for _, p := range []struct {
		name, v string
		dst     *time.Time
	}{{"--from", f.from, &from}, {"--to", f.to, &to}} {
		if p.v == "" {
			continue
		}
		t, err := parseWhen(p.v)
		if err != nil {
			return from, to, gpuwarden.Errorf(gpuwarden.EInvalid, "%s %q is not a date (2026-11-01) or an RFC 3339 time", p.name, p.v)
		}
		*p.dst = t
	}
	if !to.After(from) {
		return from, to, gpuwarden.Errorf(gpuwarden.EInvalid, "--to %s is not after --from %s", to.Format(time.RFC3339), from.Format(time.RFC3339))
	}
	return from, to, nil
}

func parseWhen(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	return time.Parse("2006-01-02", s)
}

// runSavingsReport is `report savings`: the events of a period from the
// fleet server, its database, or this box's agent ledger, grouped and
// printed.
func (a *app) runSavingsReport(ctx context.Context, f *reportFlags) error {
	if err := outputFormat(f.output, "table", "json", "csv", "md"); err != nil {
		return err
	}
	if f.post != "" {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "--post: report savings is not posted").
			WithHint("the fleet server sends the month's savings to its webhooks on the first of the month")
	}
	from, to, err := savingsPeriod(f, a.now())
	if err != nil {
		return err
	}
	q := gpuwarden.SavingsQuery{From: from, To: to, Project: f.project}
	var r report.SavingsReport
	switch {
	case f.fleet.remote():
		cl, err := f.fleet.client()
		if err != nil {
			return err
		}
		v := url.Values{"from": {from.Format(time.RFC3339)}, "to": {to.Format(time.RFC3339)}, "by": {f.by}}
		if f.project != "" {
			v.Set("project", f.project)
		}
		if err := cl.Do(ctx, nethttp.MethodGet, "/api/v1/savings", v, nil, &r); err != nil {
			return err
		}
	default:
		events, err := a.localSavings(ctx, f, q)
		if err != nil {
			return err
		}
		if r, err = report.Savings(events, from, to, f.by); err != nil {
			return err
		}
	}
	switch f.output {
	case "json":
		return writeJSON(a.stdout, "report.savings", r)
	case "csv":
		return report.WriteSavingsCSV(a.stdout, r.Events)
	case "md":
		_, err := io.WriteString(a.stdout, r.Markdown("Savings, "+from.Format("2006-01-02")+" to "+to.Format("2006-01-02")))
		return err
	}
	return report.WriteSavingsTable(a.stdout, r)
}

// localSavings reads the server's database (--db) or this box's ledger.
func (a *app) localSavings(ctx context.Context, f *reportFlags, q gpuwarden.SavingsQuery) ([]gpuwarden.Saving, error) {
	if f.fleet.db != "" {
		store, _, err := openFleet(ctx, f.fleet.db, false)
		if err != nil {
			return nil, err
		}
		defer store.Close()
		sl, ok := store.(gpuwarden.SavingsLedger)
		if !ok {
			return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "--db %s keeps no savings", f.fleet.db)
		}
		return sl.Savings(ctx, q)
	}
	path := filepath.Join(f.dataDir, "ledger.db")
	if !fileExists(path) {
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "no ledger at %s: no agent ran here", path).
			WithHint("pass --data-dir of a `gpuwarden up`, or --server/--db to read the fleet's")
	}
	l, err := sqlite.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	return l.Savings(ctx, q)
}
