package burnin

import (
	"fmt"
	"io"
	"strings"

	"github.com/gpuwarden/gpuwarden"
)

// Column widths of Table; the reason takes what is left of 100 columns.
const (
	tableWidth = 100
	colCheck   = 14
	colGPU     = 3
	colValue   = 13
	colExpect  = 13
	colVerdict = 7
	colReason  = tableWidth - colCheck - colGPU - colValue - colExpect - colVerdict - 5
)

// Table writes a report for people: one line per check, its reason wrapped
// under the REASON column so that no line passes 100 columns, then the
// overall verdict.
func Table(w io.Writer, r gpuwarden.BurnReport) error {
	var b strings.Builder
	fmt.Fprintf(&b, "burn-in %s of %s (node %s), %d GPUs\n", r.Mode, r.Host, r.Node, len(r.GPUs))
	row := func(check, gpu, value, expect, verdict, reason string) {
		lines := wrap(reason, colReason)
		fmt.Fprintf(&b, "%-*s %-*s %*s %*s %-*s %s", colCheck, check, colGPU, gpu, colValue, value, colExpect, expect,
			colVerdict, verdict, lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(&b, "\n%*s%s", tableWidth-colReason, "", l)
		}
		b.WriteByte('\n')
	}
	row("CHECK", "GPU", "VALUE", "EXPECT", "VERDICT", "REASON")
	var warns, fails, skips int
	for _, c := range r.Checks {
		gpu := "-"
		if c.GPU != nil {
			gpu = fmt.Sprint(*c.GPU)
		}
		value, expect := "", ""
		if c.Unit != "" {
			value = num(c.Value, c.Unit)
		}
		if c.Expect != 0 {
			expect = num(c.Expect, c.Unit)
		}
		row(c.Name, gpu, value, expect, c.Verdict, c.Reason)
		switch c.Verdict {
		case gpuwarden.VerdictWarn:
			warns++
		case gpuwarden.VerdictFail:
			fails++
		case gpuwarden.VerdictSkip:
			skips++
		}
	}
	fmt.Fprintf(&b, "\nverdict: %s (%d checks, %d warnings, %d failures", r.Verdict, len(r.Checks), warns, fails)
	if skips > 0 {
		fmt.Fprintf(&b, ", %d skipped: not proven", skips)
	}
	b.WriteString(")\n")
	lines := strings.Split(b.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	out := strings.Join(lines, "\n")
	if _, err := io.WriteString(w, out); err != nil {
		return fmt.Errorf("burnin: write table: %w", err)
	}
	return nil
}

// wrap breaks text at spaces into lines of at most width runes; a word
// longer than a line is cut.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	// A figure and its "%" stay on one line.
	var words []string
	for _, w := range strings.Fields(text) {
		if strings.HasPrefix(w, "%") && len(words) > 0 {
			words[len(words)-1] += " " + w
			continue
		}
		words = append(words, w)
	}
	for _, word := range words {
		for len([]rune(word)) > width {
			if line != "" {
				lines, line = append(lines, line), ""
			}
			r := []rune(word)
			lines, word = append(lines, string(r[:width])), string(r[width:])
		}
		switch {
		case line == "":
			line = word
		case len([]rune(line))+1+len([]rune(word)) <= width:
			line += " " + word
		default:
			lines, line = append(lines, line), word
		}
	}
	return append(lines, line)
}
