// Package report computes the fleet server's reports (spend against budget,
// orphan review, node and provider scorecards, the utilisation heatmap and
// cost per result) from the rows the fleet ledger returns. It is pure: no
// database and no HTTP, so the server, the CLI and the tests all get the same
// numbers from the same rows.
//
// Every output is made to be served as JSON: snake_case tags, times in
// RFC 3339 (UTC), money as exact decimals, and never a NaN or an infinity,
// which JSON cannot carry.
package report

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"math/big"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/textsafe"
)

// Input is what a report reads: the fleet ledger's rows for a period.
type Input struct {
	Now      time.Time
	Projects []gpuwarden.Project
	Nodes    []gpuwarden.Node
	Hours    []gpuwarden.NodeHour  // node hours in the period
	Events   []gpuwarden.NodeEvent // events in the period
	// LostAfter is how long a silent node takes to be lost (NodeState);
	// zero means DefaultLostAfter.
	LostAfter time.Duration
}

// None is the key shown for an empty owner or provider label, so that
// unlabelled boxes stay visible as a group instead of vanishing.
const None = "(none)"

// Unknown is the key of spend whose node the ledger no longer lists, so that
// the rows still add up to everything the hours cost.
const Unknown = "(unknown)"

// Defaults of the orphan review; DefaultLostAfter also decides which nodes
// are lost (NodeState), and so what the spend forecast counts as burning.
const (
	DefaultIdleAfter = 4 * time.Hour
	DefaultLostAfter = 10 * time.Minute
)

// Event kinds the reports read, as the agents and the CLI record them.
const (
	KindBurnin      = "burnin"
	KindRunReport   = "run-report"
	KindPreemption  = gpuwarden.NoticePreemption
	KindRebalance   = gpuwarden.NoticeRebalance
	KindMaintenance = gpuwarden.NoticeMaintenance
	KindXid         = "xid"
	KindECC         = "ecc"
	KindRemap       = "remap"
	KindProgress    = "progress"
)

// minRateHours is the smallest denominator of a per-100-hours rate: a node
// up for six minutes with one error would otherwise score 1,000 errors per
// 100 hours, and a node with no hours at all would divide by zero.
const minRateHours = 1.0

// index holds the lookups every report needs once.
type index struct {
	nodes    map[string]*gpuwarden.Node
	projects map[string]*gpuwarden.Project
}

func newIndex(in Input) index {
	ix := index{nodes: make(map[string]*gpuwarden.Node, len(in.Nodes)), projects: make(map[string]*gpuwarden.Project, len(in.Projects))}
	for i := range in.Nodes {
		ix.nodes[in.Nodes[i].ID] = &in.Nodes[i]
	}
	for i := range in.Projects {
		ix.projects[in.Projects[i].Name] = &in.Projects[i]
	}
	return ix
}

// currency is what a node bills in: its own label, else its project's.
func (ix index) currency(n *gpuwarden.Node) gpuwarden.Currency {
	if n == nil {
		return ""
	}
	if n.Labels.Currency != "" {
		return n.Labels.Currency
	}
	if p := ix.projects[n.Project]; p != nil {
		return p.Currency
	}
	return ""
}

// hourCurrency is the currency of an hour's cost: the hour's own, else its node's.
func (ix index) hourCurrency(h gpuwarden.NodeHour) gpuwarden.Currency {
	if h.Currency != "" {
		return h.Currency
	}
	return ix.currency(ix.nodes[h.Node])
}

// orNone shows an empty label as None.
func orNone(s string) string {
	if s == "" {
		return None
	}
	return s
}

// lastSign is the last time the node showed it was alive: its last
// heartbeat, or its registration when it never sent one.
func lastSign(n *gpuwarden.Node) time.Time {
	if !n.LastSeen.IsZero() {
		return n.LastSeen
	}
	return n.Registered
}

// state is a node's state as the fleet sees it (NodeState) at the input's
// clock and lost window.
func (in Input) state(n *gpuwarden.Node) string { return NodeState(*n, in.Now.UTC(), in.LostAfter) }

// billsNothing says whether a node in state bills nothing that a report
// should show as live: confirmed stopped, or marked gone.
func billsNothing(state string) bool { return !gpuwarden.Billing(state) }

// finite turns NaN and infinities into zero: JSON cannot carry them, and a
// report must never fail to encode because one input was odd.
func finite(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return x
}

// round1 and round2 keep floats short and stable in JSON and golden files.
func round1(x float64) float64 { return finite(math.Round(finite(x)*10) / 10) }
func round2(x float64) float64 { return finite(math.Round(finite(x)*100) / 100) }

// per100 is a count per 100 hours with the denominator floored at minRateHours.
func per100(count int, hours float64) float64 {
	return round2(float64(count) * 100 / max(finite(hours), minRateHours))
}

// divRound returns a × m ÷ b rounded half away from zero, exactly: cost per
// unit multiplies micros by micros, which leaves int64.
func divRound(a, m, b int64) int64 {
	if b == 0 {
		return 0
	}
	num := new(big.Int).Mul(big.NewInt(a), big.NewInt(m))
	den := big.NewInt(b)
	neg := (num.Sign() < 0) != (den.Sign() < 0)
	num.Abs(num)
	den.Abs(den)
	q, r := new(big.Int).QuoRem(num, den, new(big.Int))
	if r.Lsh(r, 1).Cmp(den) >= 0 {
		q.Add(q, big.NewInt(1))
	}
	if neg {
		q.Neg(q)
	}
	if !q.IsInt64() {
		if neg {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	return q.Int64()
}

// utc returns t in UTC, leaving the zero time zero.
func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

// money prints an amount; an unknown currency prints the bare decimal rather
// than Format's leading blank.
func money(cur gpuwarden.Currency, c gpuwarden.Cents) string {
	if cur == "" {
		return c.Decimal()
	}
	return cur.Format(c)
}

// rate prints a price per hour with all its digits.
func rate(cur gpuwarden.Currency, m gpuwarden.Micros) string {
	if cur == "" {
		return m.String() + "/h"
	}
	return cur.FormatRate(m, "h")
}

// curName names a currency in a table column.
func curName(cur gpuwarden.Currency) string {
	if cur == "" {
		return "?"
	}
	return string(cur)
}

// human prints a duration the way people say it: "45m", "6h 10m", "36h",
// "3d 2h". Hours run up to two days because "TTL 24h" reads better than "1d".
func human(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	if d < time.Minute {
		return "under a minute"
	}
	d = d.Truncate(time.Minute)
	switch {
	case d >= 48*time.Hour:
		days, h := int64(d/(24*time.Hour)), int64(d%(24*time.Hour)/time.Hour)
		if h == 0 {
			return fmt.Sprintf("%dd", days)
		}
		return fmt.Sprintf("%dd %dh", days, h)
	case d >= time.Hour:
		h, m := int64(d/time.Hour), int64(d%time.Hour/time.Minute)
		if m == 0 {
			return fmt.Sprintf("%dh", h)
		}
		return fmt.Sprintf("%dh %dm", h, m)
	default:
		return fmt.Sprintf("%dm", int64(d/time.Minute))
	}
}

// stamp prints a time for people, in UTC to the minute.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04 UTC")
}

// pct prints a percentage with the space the findings use ("84 %").
func pct(x float64) string { return fmt.Sprintf("%.0f %%", math.Floor(finite(x))) }

// truncate shortens s to n runes, marking the cut: node IDs carry GPU UUIDs
// and would push every table past 100 columns.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// pageWidth is the widest line the text outputs print.
const pageWidth = 100

// wrap breaks text into lines of at most pageWidth runes, the first starting
// with lead and the rest indented to match it: findings and advice are
// sentences that would otherwise run past the terminal.
func wrap(text, lead string) string {
	indent := strings.Repeat(" ", utf8.RuneCountInString(lead))
	var b strings.Builder
	line := lead
	for _, word := range strings.Fields(text) {
		if utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) > pageWidth && line != lead && line != indent {
			b.WriteString(line + "\n")
			line = indent
		}
		if line != lead && line != indent {
			line += " "
		}
		line += word
	}
	b.WriteString(line + "\n")
	return b.String()
}

// table prints aligned columns, two blanks apart, with no trailing blanks.
type table struct {
	head  []string
	right []bool
	rows  [][]string
}

func newTable(head ...string) *table { return &table{head: head, right: make([]bool, len(head))} }

// alignRight marks numeric columns, which read best right-aligned.
func (t *table) alignRight(cols ...int) *table {
	for _, c := range cols {
		t.right[c] = true
	}
	return t
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) error {
	width := make([]int, len(t.head))
	all := append([][]string{t.head}, t.rows...)
	for _, r := range all {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, r := range all {
		var line strings.Builder
		for i, c := range r {
			if i > 0 {
				line.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if t.right[i] {
				line.WriteString(pad + c)
			} else {
				line.WriteString(c + pad)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// mdTable renders a GitHub-flavoured markdown table.
func mdTable(head []string, right []bool, rows [][]string) string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(head, " | ") + " |\n|")
	for i := range head {
		if right[i] {
			b.WriteString("---:|")
		} else {
			b.WriteString("---|")
		}
	}
	b.WriteString("\n")
	for _, r := range rows {
		esc := make([]string, len(r))
		for i, c := range r {
			esc[i] = mdCell(c)
		}
		b.WriteString("| " + strings.Join(esc, " | ") + " |\n")
	}
	return b.String()
}

// mdCell keeps a label from breaking the table: labels come from the boxes.
func mdCell(s string) string { return textsafe.MarkdownCell(s) }

// mdCode wraps a node ID in backticks so that markdown leaves it alone.
func mdCode(s string) string {
	return "`" + strings.ReplaceAll(s, "`", "'") + "`"
}

// sortedKeys returns a map's keys in order, for output that does not
// depend on map iteration.
func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
