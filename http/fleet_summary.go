package http

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	nethttp "net/http"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/notify"
	"github.com/gpuwarden/gpuwarden/report"
	"github.com/gpuwarden/gpuwarden/savings"
)

// Monthly summary timing: checked every ten minutes, so that it goes out
// within ten minutes of midnight UTC on the 1st; a server that was down
// then sends it when it comes back within the first week, and not later,
// when last month's figures are old news.
const (
	DefaultSummaryEvery   = 10 * time.Minute
	DefaultSummaryCatchUp = 7 * 24 * time.Hour
)

// SummaryHook is one webhook the monthly summary goes to; ID names it in
// the record of what was sent, so that adding a webhook sends it the
// month's summary without sending it again to the others.
type SummaryHook struct {
	ID   string
	Send func(ctx context.Context, s notify.MonthlySummary) error
}

// WebhookSummaryHooks makes a hook of each webhook URL (notify.NewWebhook,
// format as there), named by a hash of its URL: the URL is a secret that
// the record of what was sent must not hold.
func WebhookSummaryHooks(urls []string, format string, log *slog.Logger) ([]SummaryHook, error) {
	client := &nethttp.Client{Timeout: 10 * time.Second}
	hooks := make([]SummaryHook, 0, len(urls))
	for i, u := range urls {
		w, err := notify.NewWebhook(u, format, client, notify.WithLogger(log))
		if err != nil {
			return nil, fmt.Errorf("--webhook %d: %w", i+1, err)
		}
		sum := sha256.Sum256([]byte(u))
		hooks = append(hooks, SummaryHook{ID: hex.EncodeToString(sum[:6]), Send: w.SendSummary})
	}
	return hooks, nil
}

// SentMarks remembers which summaries went out, across restarts.
type SentMarks interface {
	// Claim records key and reports whether it is new: false means that
	// the summary was sent, or is being sent, already.
	Claim(ctx context.Context, key string) (bool, error)
	// Release forgets a claim whose send failed, so that the next check
	// tries again.
	Release(ctx context.Context, key string) error
}

// MonthlySummaries sends last month's spend and savings to the webhooks
// once, when the server's clock has crossed into a new month (UTC).
type MonthlySummaries struct {
	// Server is whose ledger and clock the summary reads.
	Server *FleetServer
	Hooks  []SummaryHook
	// Link is the dashboard's base URL ("https://fleet.example:8080"); the
	// summary links its savings page. Empty: no link.
	Link string
	// Every and CatchUp tune the check; zero means the defaults.
	Every, CatchUp time.Duration
}

// marks is the record in use: the ledger's where it keeps one.
func (m *MonthlySummaries) marks() SentMarks {
	l, _ := m.Server.store.(SentMarks)
	return l
}

// Run checks now and then every Every until ctx ends; failures are logged
// and retried at the next check.
func (m *MonthlySummaries) Run(ctx context.Context) {
	every := m.Every
	if every <= 0 {
		every = DefaultSummaryEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if n, err := m.Check(ctx); err != nil && ctx.Err() == nil {
			m.Server.log.Warn("monthly summary", "err", err, "sent", n)
		} else if n > 0 {
			m.Server.log.Info("monthly summary sent", "webhooks", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Check sends last month's summary to every webhook that has not had it,
// if the month began less than CatchUp ago; it returns how many it sent.
// A send that fails is released, so that the next check tries it again.
func (m *MonthlySummaries) Check(ctx context.Context) (int, error) {
	if len(m.Hooks) == 0 {
		return 0, nil
	}
	marks := m.marks()
	if marks == nil {
		return 0, gpuwarden.Errorf(gpuwarden.EInternal, "monthly summary: the fleet ledger keeps no record of what was sent")
	}
	now := m.Server.now().UTC()
	start, _ := savings.Month(now)
	catchUp := m.CatchUp
	if catchUp <= 0 {
		catchUp = DefaultSummaryCatchUp
	}
	if now.Sub(start) >= catchUp {
		return 0, nil
	}
	month := start.AddDate(0, -1, 0)
	var (
		summary *notify.MonthlySummary
		sent    int
		errs    []error
	)
	for _, h := range m.Hooks {
		key := notify.KindSavingsSummary + "/" + month.Format("2006-01") + "/" + h.ID
		ok, err := marks.Claim(ctx, key)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			continue
		}
		if summary == nil {
			s, err := m.Build(ctx, month, now)
			if err != nil {
				errs = append(errs, err, marks.Release(ctx, key))
				break
			}
			summary = &s
		}
		if err := h.Send(ctx, *summary); err != nil {
			// Released so that the next check retries; a crash between a
			// send and here leaves the claim, and never sends twice.
			errs = append(errs, fmt.Errorf("webhook %s: %w", h.ID, err), marks.Release(ctx, key))
			continue
		}
		sent++
	}
	return sent, errors.Join(errs...)
}

// Build gathers the summary of the month that begins at month: its spend,
// its savings, its biggest saving, and the biggest waste billing at now.
func (m *MonthlySummaries) Build(ctx context.Context, month, now time.Time) (notify.MonthlySummary, error) {
	s := m.Server
	from, to := savings.Month(month)
	out := notify.MonthlySummary{Month: from.Format("2006-01"), From: from, To: to, Sent: now,
		Source: "gpuwarden server"}
	if m.Link != "" {
		out.Link = strings.TrimSuffix(m.Link, "/") + savingsHref(out.Month, "", "")
	}
	v, err := report.Build(ctx, s.store, now, report.Request{Name: "spend", Project: gpuwarden.AllProjects, By: report.ByProject,
		Month: from, IdleAfter: s.IdleAfter, LostAfter: s.LostAfter})
	if err != nil {
		return out, fmt.Errorf("monthly summary: spend: %w", err)
	}
	for _, t := range v.(report.SpendReport).Totals {
		out.Spent = append(out.Spent, notify.SpentLine{Currency: t.Currency, Spent: t.Spent})
	}
	ledger, err := s.savingsLedger()
	if err != nil {
		return out, fmt.Errorf("monthly summary: %w", err)
	}
	events, err := ledger.Savings(ctx, gpuwarden.SavingsQuery{From: out.From, To: out.To})
	if err != nil {
		return out, fmt.Errorf("monthly summary: savings: %w", err)
	}
	out.Saved = gpuwarden.SumSavingsByCurrency(events)
	for i, e := range events {
		if e.NotSaved == "" && e.Amount > 0 && (out.BiggestSaving == nil || e.Amount > out.BiggestSaving.Amount) {
			out.BiggestSaving = &events[i]
		}
	}
	v, err = report.Build(ctx, s.store, now, report.Request{Name: "orphans", Project: gpuwarden.AllProjects,
		IdleAfter: s.IdleAfter, LostAfter: s.LostAfter})
	if err != nil {
		return out, fmt.Errorf("monthly summary: orphans: %w", err)
	}
	for _, o := range v.(report.OrphanReport).Orphans {
		if o.BillsHourly <= 0 || out.BiggestWaste != nil && o.WeeklyCost <= out.BiggestWaste.Weekly {
			continue
		}
		why := make([]string, 0, len(o.Reasons))
		for _, r := range o.Reasons {
			why = append(why, r.Reason)
		}
		out.BiggestWaste = &notify.Waste{Node: o.Node, Project: o.Project, Owner: o.Owner, Why: strings.Join(why, ", "),
			Hourly: o.BillsHourly, Currency: o.Currency, Weekly: o.WeeklyCost}
	}
	return out, nil
}
