package report

import (
	"cmp"
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// The savings groupings besides ByProject and ByOwner.
const (
	ByKind = "kind"
	ByNode = "node"
)

// SavingsBy are the groupings SavingsSummary knows, in --help order.
var SavingsBy = []string{ByProject, ByOwner, ByKind, ByNode}

// SavingsRow is one group of a savings summary: its key (a project, an
// owner, a kind or a node) and what its events add up to, in one currency.
type SavingsRow struct {
	Key string `json:"key"`
	// Kind is set when the rows are grouped by kind.
	Kind  gpuwarden.SavingKind   `json:"kind,omitempty"`
	Total gpuwarden.SavingsTotal `json:"total"`
}

// SavingsSummary groups events by project, owner, kind or node: one row
// per key and currency (amounts in two currencies are never added), kinds
// in the order of gpuwarden.SavingKinds, other keys by name. The fleet
// server's API and `gpuwarden report savings` both call it, so they agree.
func SavingsSummary(events []gpuwarden.Saving, by string) ([]SavingsRow, error) {
	keyOf, err := savingsKey(by)
	if err != nil {
		return nil, err
	}
	type rowKey struct {
		key string
		cur gpuwarden.Currency
	}
	idx := map[rowKey]int{}
	var rows []SavingsRow
	for _, e := range events {
		k := rowKey{keyOf(e), e.Currency}
		i, ok := idx[k]
		if !ok {
			i = len(rows)
			idx[k] = i
			rows = append(rows, SavingsRow{Key: k.key})
			if by == ByKind {
				rows[i].Kind = e.Kind
			}
		}
		rows[i].Total.Add(e)
	}
	order := map[string]int{}
	for i, k := range gpuwarden.SavingKinds() {
		order[string(k.Kind)] = i
	}
	slices.SortStableFunc(rows, func(a, b SavingsRow) int {
		if by == ByKind {
			if c := cmp.Compare(order[a.Key], order[b.Key]); c != 0 {
				return c
			}
		}
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Total.Currency, b.Total.Currency))
	})
	return rows, nil
}

func savingsKey(by string) (func(gpuwarden.Saving) string, error) {
	switch by {
	case ByProject, "":
		return func(e gpuwarden.Saving) string { return orNone(e.Project) }, nil
	case ByOwner:
		return func(e gpuwarden.Saving) string { return orNone(e.Owner) }, nil
	case ByKind:
		return func(e gpuwarden.Saving) string { return string(e.Kind) }, nil
	case ByNode:
		return func(e gpuwarden.Saving) string { return e.Node }, nil
	}
	return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "--by %q: savings group by %s", by, strings.Join(SavingsBy, ", ")).
		WithHint("choose one of %s", strings.Join(SavingsBy, ", "))
}

// SavingsReport is the savings of a period: the total (confirmed,
// estimated and attributed apart), one total per currency, the rows of a
// grouping and every event with its evidence. Its JSON is the fleet
// server's GET /api/v1/savings answer.
type SavingsReport struct {
	From   time.Time                `json:"from"`
	To     time.Time                `json:"to"`
	By     string                   `json:"by"`
	Total  gpuwarden.SavingsTotal   `json:"total"`
	Totals []gpuwarden.SavingsTotal `json:"totals"`
	Rows   []SavingsRow             `json:"rows"`
	Events []gpuwarden.Saving       `json:"events"`
	// Truncated is set when the server listed fewer events than matched.
	Truncated bool `json:"truncated,omitempty"`
}

// Savings makes the report of events in [from, to) grouped by by.
func Savings(events []gpuwarden.Saving, from, to time.Time, by string) (SavingsReport, error) {
	rows, err := SavingsSummary(events, by)
	if err != nil {
		return SavingsReport{}, err
	}
	r := SavingsReport{From: from.UTC(), To: to.UTC(), By: cmp.Or(by, ByProject), Total: gpuwarden.SumSavings(events),
		Totals: gpuwarden.SumSavingsByCurrency(events), Rows: rows, Events: events}
	if r.Totals == nil {
		r.Totals = []gpuwarden.SavingsTotal{}
	}
	if r.Rows == nil {
		r.Rows = []SavingsRow{}
	}
	if r.Events == nil {
		r.Events = []gpuwarden.Saving{}
	}
	return r, nil
}

// SavingsCSVHeader is the header row of the CSV: one row per event follows
// and nothing else, so that a spreadsheet's SUM of amount is the total.
var SavingsCSVHeader = []string{"id", "kind", "node", "project", "owner", "from", "to", "hours", "rate", "rate_source",
	"amount", "currency", "basis", "not_saved", "evidence", "recorded"}

// WriteSavingsCSV writes one row per event under a header, and no totals.
func WriteSavingsCSV(w io.Writer, events []gpuwarden.Saving) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(SavingsCSVHeader); err != nil {
		return err
	}
	for _, e := range events {
		rec := []string{e.ID, string(e.Kind), e.Node, e.Project, e.Owner, e.From.UTC().Format(time.RFC3339),
			e.To.UTC().Format(time.RFC3339), strconv.FormatFloat(e.Hours, 'f', -1, 64), e.Rate.String(), e.RateSource,
			e.Amount.Decimal(), string(e.Currency), string(e.Basis), e.NotSaved, e.Evidence, e.At.UTC().Format(time.RFC3339)}
		for i, c := range rec {
			rec[i] = csvSafe(c)
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// csvSafe keeps a spreadsheet from reading a label as a formula (labels
// come from the boxes); amounts are plain decimals and stay numbers.
func csvSafe(s string) string {
	if s == "" {
		return s
	}
	switch s[0] {
	case '=', '+', '@', '\t', '\r':
		return "'" + s
	case '-':
		if _, err := strconv.ParseFloat(s, 64); err != nil {
			return "'" + s
		}
	}
	return s
}

// savingsLine is one event's amount for people: the amount, or "not saved".
func savingsAmount(e gpuwarden.Saving) string {
	if e.NotSaved != "" {
		return "not saved"
	}
	return money(e.Currency, e.Amount)
}

// arithmetic is "14.5 h × $3.28/h" for an event.
func arithmetic(e gpuwarden.Saving) string {
	if e.NotSaved != "" {
		return "—"
	}
	return strconv.FormatFloat(e.Hours, 'f', -1, 64) + " h × " + rate(e.Currency, e.Rate)
}

func (r SavingsReport) totalsLine() []string {
	var out []string
	for _, t := range r.Totals {
		events := "events"
		if t.Events == 1 {
			events = "event"
		}
		out = append(out, fmt.Sprintf("%s saved: %s confirmed, %s estimated, %s attributed (%d %s, %d not saved)",
			money(t.Currency, t.Total), money(t.Currency, t.Confirmed), money(t.Currency, t.Estimated),
			money(t.Currency, t.Attributed), t.Events, events, t.NotSaved))
	}
	if len(out) == 0 {
		out = append(out, "nothing saved: no events in this period")
	}
	return out
}

func (r SavingsReport) period() string {
	return r.From.UTC().Format("2006-01-02 15:04") + " to " + r.To.UTC().Format("2006-01-02 15:04") + " UTC"
}

// WriteSavingsTable prints the report for a terminal: the totals, the
// rows of the grouping, then every event with its arithmetic and why an
// event saved nothing.
func WriteSavingsTable(w io.Writer, r SavingsReport) error {
	var b strings.Builder
	b.WriteString("Savings, " + r.period() + "\n")
	for _, l := range r.totalsLine() {
		b.WriteString(l + "\n")
	}
	if _, err := io.WriteString(w, b.String()+"\n"); err != nil {
		return err
	}
	if len(r.Rows) > 0 {
		t := newTable(strings.ToUpper(r.By[:1])+r.By[1:], "Saved", "Confirmed", "Estimated", "Attributed", "Events", "Not saved").alignRight(1, 2, 3, 4, 5, 6)
		for _, row := range r.Rows {
			x := row.Total
			key := row.Key
			if r.By == ByKind {
				key = gpuwarden.SavingKind(key).Info().Title
			}
			t.add(truncate(key, 24), money(x.Currency, x.Total), money(x.Currency, x.Confirmed), money(x.Currency, x.Estimated),
				money(x.Currency, x.Attributed), strconv.Itoa(x.Events), strconv.Itoa(x.NotSaved))
		}
		if err := t.write(w); err != nil {
			return err
		}
		if _, err := io.WriteString(w, "\n"); err != nil {
			return err
		}
	}
	if len(r.Events) == 0 {
		return nil
	}
	t := newTable("Kind", "Node", "From", "Hours × rate", "Amount", "Basis").alignRight(3, 4)
	var notes []string
	for _, e := range r.Events {
		t.add(e.Kind.Info().Title, truncate(e.Node, 20), e.From.UTC().Format("01-02 15:04"), arithmetic(e), savingsAmount(e), string(e.Basis))
		if e.NotSaved != "" {
			notes = append(notes, fmt.Sprintf("not saved: %s %s: %s", e.Kind.Info().Title, e.Node, e.NotSaved))
		}
	}
	if err := t.write(w); err != nil {
		return err
	}
	for _, n := range notes {
		if _, err := io.WriteString(w, wrap(n, "  ")); err != nil {
			return err
		}
	}
	return nil
}

// Markdown renders the report for a wiki or a chat: totals, the grouping,
// the events with their evidence.
func (r SavingsReport) Markdown(title string) string {
	var b strings.Builder
	b.WriteString("## " + cmp.Or(title, "Savings") + "\n\n" + r.period() + "\n\n")
	for _, l := range r.totalsLine() {
		b.WriteString("- " + l + "\n")
	}
	b.WriteString("\n")
	if len(r.Rows) > 0 {
		var rows [][]string
		for _, row := range r.Rows {
			x := row.Total
			rows = append(rows, []string{row.Key, money(x.Currency, x.Total), money(x.Currency, x.Confirmed), money(x.Currency, x.Estimated),
				money(x.Currency, x.Attributed), strconv.Itoa(x.Events), strconv.Itoa(x.NotSaved)})
		}
		b.WriteString(mdTable([]string{r.By, "Saved", "Confirmed", "Estimated", "Attributed", "Events", "Not saved"},
			[]bool{false, true, true, true, true, true, true}, rows) + "\n")
	}
	if len(r.Events) > 0 {
		var rows [][]string
		for _, e := range r.Events {
			amount := savingsAmount(e)
			if e.NotSaved != "" {
				amount = "not saved: " + e.NotSaved
			}
			rows = append(rows, []string{e.Kind.Info().Title, mdCode(e.Node), e.From.UTC().Format(time.RFC3339) + " – " + e.To.UTC().Format(time.RFC3339),
				arithmetic(e), amount, string(e.Basis), e.Evidence})
		}
		b.WriteString(mdTable([]string{"Kind", "Node", "Period", "Hours × rate", "Amount", "Basis", "Evidence"},
			[]bool{false, false, false, true, true, false, false}, rows))
	}
	return b.String()
}
