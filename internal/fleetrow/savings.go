package fleetrow

import (
	"math"

	"github.com/gpuwarden/gpuwarden"
)

// UpsertSavingSQL replaces an event with the same ID: an event recorded
// again (re-priced once the box started again, or shipped twice) is one row.
const UpsertSavingSQL = `INSERT INTO savings (id, kind, node_id, project, owner, from_ms, to_ms, hours_micros,
 rate_micros, rate_source, amount_cents, currency, basis, evidence, not_saved, at_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
ON CONFLICT (id) DO UPDATE SET kind = excluded.kind, node_id = excluded.node_id, project = excluded.project,
 owner = excluded.owner, from_ms = excluded.from_ms, to_ms = excluded.to_ms, hours_micros = excluded.hours_micros,
 rate_micros = excluded.rate_micros, rate_source = excluded.rate_source, amount_cents = excluded.amount_cents,
 currency = excluded.currency, basis = excluded.basis, evidence = excluded.evidence, not_saved = excluded.not_saved,
 at_ms = excluded.at_ms`

// SavingColumns are the columns a savings SELECT reads, in ScanSaving's order.
const SavingColumns = `id, kind, node_id, project, owner, from_ms, to_ms, hours_micros, rate_micros,
 rate_source, amount_cents, currency, basis, evidence, not_saved, at_ms`

// ValidateSavings checks every event before any is written: an invalid
// event stores nothing.
func ValidateSavings(events []gpuwarden.Saving) error {
	for _, e := range events {
		if err := e.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// SavingArgs are an event's column values for UpsertSavingSQL, after
// ValidateSavings: hours as exact micro-hours, money as micros and cents.
func SavingArgs(e gpuwarden.Saving) []any {
	return []any{e.ID, string(e.Kind), e.Node, e.Project, e.Owner, Ms(e.From), Ms(e.To),
		int64(gpuwarden.MicrosFromFloat(e.Hours)), int64(e.Rate), e.RateSource, int64(e.Amount), string(e.Currency),
		string(e.Basis), e.Evidence, e.NotSaved, Ms(e.At)}
}

// SavingsQueryArgs are the arguments of a savings SELECT ($1 from, $2 to,
// $3 project, $4 owner, $5 node, $6 kind, $7 recorded after, exclusive);
// zero times select everything, an empty filter (or every project) is
// skipped.
func SavingsQueryArgs(q gpuwarden.SavingsQuery) []any {
	from, to := int64(math.MinInt64), int64(math.MaxInt64)
	if !q.From.IsZero() {
		from = q.From.UnixMilli()
	}
	if !q.To.IsZero() {
		to = q.To.UnixMilli()
	}
	project := q.Project
	if project == gpuwarden.AllProjects {
		project = ""
	}
	after := int64(math.MinInt64)
	if !q.RecordedAfter.IsZero() {
		after = q.RecordedAfter.UnixMilli()
	}
	return []any{from, to, project, q.Owner, q.Node, string(q.Kind), after}
}

// ScanSaving reads one row of SavingColumns through the driver's Scan.
func ScanSaving(scan func(dest ...any) error) (gpuwarden.Saving, error) {
	var e gpuwarden.Saving
	var kind, cur, basis string
	var fromMs, toMs, hours, rate, amount, atMs int64
	if err := scan(&e.ID, &kind, &e.Node, &e.Project, &e.Owner, &fromMs, &toMs, &hours, &rate,
		&e.RateSource, &amount, &cur, &basis, &e.Evidence, &e.NotSaved, &atMs); err != nil {
		return e, err
	}
	e.Kind, e.Currency, e.Basis = gpuwarden.SavingKind(kind), gpuwarden.Currency(cur), gpuwarden.SavingBasis(basis)
	e.From, e.To, e.At = Time(fromMs), Time(toMs), Time(atMs)
	e.Hours, e.Rate, e.Amount = gpuwarden.Micros(hours).Float(), gpuwarden.Micros(rate), gpuwarden.Cents(amount)
	return e, nil
}

// ClaimSQL records a one-time mark in the state table ($1 its name, $2 when):
// one row affected means this caller claimed it, none that another had
// (http.SentMarks: replicas on one database send a summary once).
const ClaimSQL = `INSERT INTO state (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`

// ReleaseSQL forgets a claim ($1 its name) whose work failed.
const ReleaseSQL = `DELETE FROM state WHERE name = $1`

// ClaimName is the state row of a claim: prefixed, so that no claim can
// take the name of another value the ledger keeps.
func ClaimName(key string) string { return "claim:" + key }
