package report

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// The groupings Spend accepts.
const (
	ByProject  = "project"
	ByOwner    = "owner"
	ByProvider = "provider"
)

// SpendReport is a month's spend to date per key and currency, with the
// forecast to the month's end and the budgets it will cross.
type SpendReport struct {
	By string `json:"by"`
	// Month is "2026-11"; From and To bound it in UTC.
	Month string    `json:"month"`
	From  time.Time `json:"from"`
	To    time.Time `json:"to"`
	Now   time.Time `json:"now"`
	// HoursLeft is what the forecast multiplies the hourly burn by.
	HoursLeft float64         `json:"hours_left"`
	Rows      []SpendRow      `json:"rows"`
	Totals    []CurrencyTotal `json:"totals"`
	Findings  []string        `json:"findings"`
}

// SpendRow is one key's spend in one currency: a key whose boxes bill in
// two currencies gets two rows, since their sums cannot be added.
type SpendRow struct {
	Key      string             `json:"key"`
	Currency gpuwarden.Currency `json:"currency"`
	Spent    gpuwarden.Cents    `json:"spent"`
	// Nodes had spend this month or may bill now (neither stopped nor
	// gone); Running are running and still sending heartbeats.
	Nodes   int `json:"nodes"`
	Running int `json:"running"`
	// HourlyBurn is what the row bills an hour now: the running nodes'
	// hourly prices and AfterStopHourly.
	HourlyBurn gpuwarden.Micros `json:"hourly_burn"`
	// AfterStop is the part of Spent that boxes billed after they stopped
	// reporting ("still billing after stop", see AfterStop): a stop that
	// did not end the bill, a lost box, a stopped box's disks.
	AfterStop gpuwarden.Cents `json:"after_stop"`
	// StillBilling counts the boxes that bill so now, and AfterStopHourly
	// is their part of HourlyBurn.
	StillBilling    int              `json:"still_billing"`
	AfterStopHourly gpuwarden.Micros `json:"after_stop_hourly"`
	// Forecast is Spent plus HourlyBurn for every hour left in the month.
	Forecast gpuwarden.Cents `json:"forecast"`
	// Budget is set when the row is a project's and in its budget's currency.
	Budget *BudgetUse `json:"budget,omitempty"`
}

// BudgetUse compares a row with its project's monthly budget.
type BudgetUse struct {
	Limit           gpuwarden.Cents `json:"limit"`
	SpentPercent    float64         `json:"spent_percent"`
	ForecastPercent float64         `json:"forecast_percent"`
}

// CurrencyTotal sums the rows of one currency; totals are sums of the
// rounded rows, so printed lines add up to printed totals.
type CurrencyTotal struct {
	Currency        gpuwarden.Currency `json:"currency"`
	Spent           gpuwarden.Cents    `json:"spent"`
	Nodes           int                `json:"nodes"`
	Running         int                `json:"running"`
	HourlyBurn      gpuwarden.Micros   `json:"hourly_burn"`
	AfterStop       gpuwarden.Cents    `json:"after_stop"`
	StillBilling    int                `json:"still_billing"`
	AfterStopHourly gpuwarden.Micros   `json:"after_stop_hourly"`
	Forecast        gpuwarden.Cents    `json:"forecast"`
}

// Spend reports the month-to-date spend per project, owner or provider. The
// month is month's calendar month in UTC (the zero time means Now's); hours
// outside it are ignored, so the caller may pass a wider period. Spend is
// the minutes the agents shipped plus what boxes billed after they stopped
// reporting (StillBilling), up to Now.
func Spend(in Input, by string, month time.Time) (SpendReport, error) {
	if by != ByProject && by != ByOwner && by != ByProvider {
		return SpendReport{}, gpuwarden.Errorf(gpuwarden.EInvalid, "spend by %q: no such grouping", by).
			WithHint("choose %s, %s or %s", ByProject, ByOwner, ByProvider)
	}
	now := in.Now.UTC()
	if month.IsZero() {
		month = now
	}
	month = month.UTC()
	from := time.Date(month.Year(), month.Month(), 1, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(0, 1, 0)
	left := to.Sub(minTime(maxTime(now, from), to))

	ix := newIndex(in)
	keyOf := func(n *gpuwarden.Node) string {
		if n == nil {
			return Unknown
		}
		switch by {
		case ByProject:
			return orNone(n.Project)
		case ByOwner:
			return orNone(n.Labels.Owner)
		default:
			return orNone(n.Labels.Provider)
		}
	}

	type rowKey struct {
		key string
		cur gpuwarden.Currency
	}
	type acc struct {
		spent, afterStop gpuwarden.Micros
		nodes            map[string]bool
		running, still   int
		burn, stillBurn  gpuwarden.Micros
	}
	rows := map[rowKey]*acc{}
	get := func(k rowKey) *acc {
		a := rows[k]
		if a == nil {
			a = &acc{nodes: map[string]bool{}}
			rows[k] = a
		}
		return a
	}
	unknownHours := map[gpuwarden.Currency]gpuwarden.Micros{}
	unknownCount := 0
	for _, h := range in.Hours {
		if h.Hour.Before(from) || !h.Hour.Before(to) {
			continue
		}
		n := ix.nodes[h.Node]
		cur := ix.hourCurrency(h)
		a := get(rowKey{keyOf(n), cur})
		a.spent += h.Cost
		if n == nil {
			unknownHours[cur] += h.Cost
			unknownCount++
			continue
		}
		if ix.currency(n) == cur {
			a.nodes[n.ID] = true
		}
	}
	for i := range in.Nodes {
		n := &in.Nodes[i]
		if ix.nodes[n.ID] != n { // a node listed twice counts once
			continue
		}
		state := in.state(n)
		cur := ix.currency(n)
		if as, ok := StillBilling(*n, cur, now, in.LostAfter); ok {
			m := as.Within(from, minTime(now, to))
			if m > 0 || as.Accruing() {
				a := get(rowKey{keyOf(n), as.Currency})
				a.spent += m
				a.afterStop += m
				if as.Currency == cur {
					a.nodes[n.ID] = true
				}
				if as.Accruing() {
					a.still++
					a.stillBurn += as.Hourly
					a.burn += as.Hourly
				}
			}
		}
		if billsNothing(state) {
			continue
		}
		a := get(rowKey{keyOf(n), cur})
		a.nodes[n.ID] = true
		if state == gpuwarden.NodeRunning {
			a.running++
			a.burn += n.Labels.HourlyPrice
		}
	}
	if by == ByProject {
		// Every project shows, even one with nothing spent: a budget that is
		// untouched is an answer too.
		for _, p := range in.Projects {
			get(rowKey{orNone(p.Name), p.Currency})
		}
	}

	r := SpendReport{By: by, Month: from.Format("2006-01"), From: from, To: to, Now: now,
		HoursLeft: round1(left.Hours()), Rows: []SpendRow{}, Totals: []CurrencyTotal{}, Findings: []string{}}
	for k, a := range rows {
		row := SpendRow{Key: k.key, Currency: k.cur, Spent: gpuwarden.CentsOf(a.spent), Nodes: len(a.nodes),
			Running: a.running, HourlyBurn: a.burn, AfterStop: gpuwarden.CentsOf(a.afterStop),
			StillBilling: a.still, AfterStopHourly: a.stillBurn}
		row.Forecast = row.Spent // a month that is over forecasts what it spent
		if now.Before(to) {
			row.Forecast = gpuwarden.MonthForecast(row.Spent, a.burn, maxTime(now, from))
		}
		if by == ByProject {
			if p := ix.projects[k.key]; p != nil && p.Budget > 0 && p.Currency == k.cur {
				row.Budget = &BudgetUse{Limit: p.Budget, SpentPercent: percentOf(row.Spent, p.Budget),
					ForecastPercent: percentOf(row.Forecast, p.Budget)}
			}
		}
		r.Rows = append(r.Rows, row)
	}
	slices.SortFunc(r.Rows, func(a, b SpendRow) int {
		return cmp.Or(cmp.Compare(b.Spent, a.Spent), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Currency, b.Currency))
	})

	totals := map[gpuwarden.Currency]*CurrencyTotal{}
	for _, row := range r.Rows {
		t := totals[row.Currency]
		if t == nil {
			t = &CurrencyTotal{Currency: row.Currency}
			totals[row.Currency] = t
		}
		t.Spent += row.Spent
		t.Nodes += row.Nodes
		t.Running += row.Running
		t.HourlyBurn += row.HourlyBurn
		t.AfterStop += row.AfterStop
		t.StillBilling += row.StillBilling
		t.AfterStopHourly += row.AfterStopHourly
		t.Forecast += row.Forecast
	}
	for _, c := range sortedKeys(totals) {
		r.Totals = append(r.Totals, *totals[c])
	}
	r.Findings = spendFindings(r, ix, unknownHours, unknownCount)
	return r, nil
}

// percentOf is part of whole in percent to a tenth, computed in integers so
// that 601.50 of 1,000.00 is 60.2 and never a binary 60.1499….
func percentOf(part, whole gpuwarden.Cents) float64 {
	return float64(divRound(int64(part), 1000, int64(whole))) / 10
}

// spendFindings says which budgets are crossed or will be, which spend could
// not be compared with a budget, and which hours belong to no known node.
func spendFindings(r SpendReport, ix index, unknown map[gpuwarden.Currency]gpuwarden.Micros, unknownCount int) []string {
	out := []string{}
	if r.By == ByProject {
		for _, row := range r.Rows {
			p := ix.projects[row.Key]
			if p == nil || p.Budget <= 0 {
				continue
			}
			budget := money(p.Currency, p.Budget)
			if row.Budget == nil {
				if row.Spent > 0 || row.Forecast > 0 {
					out = append(out, fmt.Sprintf("%s spent %s in %s, which is not compared with its %s budget in %s",
						row.Key, money(row.Currency, row.Spent), curName(row.Currency), budget, curName(p.Currency)))
				}
				continue
			}
			over := row.Forecast > p.Budget
			if row.Budget.SpentPercent < 50 && !over {
				continue
			}
			var s string
			if row.Spent > p.Budget {
				s = fmt.Sprintf("%s has spent %s, %s of its %s budget", row.Key, money(row.Currency, row.Spent), pct(row.Budget.SpentPercent), budget)
			} else {
				s = fmt.Sprintf("%s is at %s of its %s budget", row.Key, pct(row.Budget.SpentPercent), budget)
				if over {
					s += fmt.Sprintf("; forecast %s exceeds it", money(row.Currency, row.Forecast))
				}
			}
			out = append(out, s)
		}
	}
	for _, row := range r.Rows {
		if row.AfterStop == 0 && row.StillBilling == 0 {
			continue
		}
		f := fmt.Sprintf("%s: %s of the %s spent was billed after boxes stopped reporting (still billing after stop)",
			row.Key, money(row.Currency, row.AfterStop), money(row.Currency, row.Spent))
		switch row.StillBilling {
		case 0:
		case 1:
			f += fmt.Sprintf("; 1 box still bills %s", rate(row.Currency, row.AfterStopHourly))
		default:
			f += fmt.Sprintf("; %d boxes still bill %s", row.StillBilling, rate(row.Currency, row.AfterStopHourly))
		}
		out = append(out, f)
	}
	if unknownCount > 0 {
		var parts []string
		for _, c := range sortedKeys(unknown) {
			parts = append(parts, money(c, gpuwarden.CentsOf(unknown[c])))
		}
		noun := "node hours (%s) belong"
		if unknownCount == 1 {
			noun = "node hour (%s) belongs"
		}
		out = append(out, fmt.Sprintf("%d "+noun+" to nodes the ledger no longer lists; they show as %s",
			unknownCount, strings.Join(parts, ", "), Unknown))
	}
	return out
}

// spendHead is the table header; the key column is named after the grouping.
func spendHead(r SpendReport) []string {
	head := []string{strings.ToUpper(r.By), "CUR", "SPENT", "NODES", "RUNNING", "BURN", "FORECAST"}
	if r.By == ByProject {
		head = append(head, "BUDGET", "USED", "FORECAST %")
	}
	return head
}

func spendCells(r SpendReport, row SpendRow, keyWidth int) []string {
	cells := []string{truncate(row.Key, keyWidth), curName(row.Currency), money(row.Currency, row.Spent),
		fmt.Sprint(row.Nodes), fmt.Sprint(row.Running), rate(row.Currency, row.HourlyBurn), money(row.Currency, row.Forecast)}
	if r.By == ByProject {
		if row.Budget != nil {
			cells = append(cells, money(row.Currency, row.Budget.Limit), pct(row.Budget.SpentPercent), pct(row.Budget.ForecastPercent))
		} else {
			cells = append(cells, "-", "-", "-")
		}
	}
	return cells
}

func totalCells(r SpendReport, t CurrencyTotal) []string {
	cells := []string{"total", curName(t.Currency), money(t.Currency, t.Spent), fmt.Sprint(t.Nodes), fmt.Sprint(t.Running),
		rate(t.Currency, t.HourlyBurn), money(t.Currency, t.Forecast)}
	if r.By == ByProject {
		cells = append(cells, "", "", "")
	}
	return cells
}

func (r SpendReport) heading() string {
	return fmt.Sprintf("Spend by %s, %s: month to date at %s, %.1f h left", r.By, r.Month, stamp(r.Now), r.HoursLeft)
}

// WriteSpendTable prints the spend report as a table for the terminal.
func WriteSpendTable(w io.Writer, r SpendReport) error {
	var b strings.Builder
	b.WriteString(r.heading() + "\n\n")
	if len(r.Rows) == 0 {
		b.WriteString("No spend recorded.\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	t := newTable(spendHead(r)...).alignRight(2, 3, 4, 5, 6)
	if r.By == ByProject {
		t.alignRight(7, 8, 9)
	}
	for _, row := range r.Rows {
		t.add(spendCells(r, row, 20)...)
	}
	for _, tot := range r.Totals {
		t.add(totalCells(r, tot)...)
	}
	if err := t.write(&b); err != nil {
		return err
	}
	writeFindings(&b, r.Findings)
	_, err := io.WriteString(w, b.String())
	return err
}

func writeFindings(b *strings.Builder, findings []string) {
	if len(findings) == 0 {
		return
	}
	b.WriteString("\nFindings:\n")
	for _, f := range findings {
		b.WriteString(wrap(f, "  - "))
	}
}

// Markdown renders the spend report for a chat channel or an issue.
func (r SpendReport) Markdown(title string) string {
	var b strings.Builder
	if title != "" {
		b.WriteString("## " + mdCell(title) + "\n\n")
	}
	b.WriteString(r.heading() + ".\n\n")
	if len(r.Rows) == 0 {
		b.WriteString("No spend recorded.\n")
		return b.String()
	}
	head := spendHead(r)
	for i := range head {
		head[i] = strings.ToLower(head[i])
	}
	right := make([]bool, len(head))
	for i := 2; i < len(head); i++ {
		right[i] = true
	}
	var rows [][]string
	for _, row := range r.Rows {
		rows = append(rows, spendCells(r, row, 1<<20))
	}
	for _, t := range r.Totals {
		cells := totalCells(r, t)
		for i := range cells {
			if cells[i] != "" {
				cells[i] = "**" + cells[i] + "**"
			}
		}
		rows = append(rows, cells)
	}
	b.WriteString(mdTable(head, right, rows))
	if len(r.Findings) > 0 {
		b.WriteString("\n**Findings**\n\n")
		for _, f := range r.Findings {
			b.WriteString("- " + mdCell(f) + "\n")
		}
	}
	return b.String()
}
