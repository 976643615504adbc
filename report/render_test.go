package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpuwarden/gpuwarden"
)

// renderings are every text and markdown output of one input, by golden name.
func renderings(t *testing.T, name string, in Input) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	write := func(file string, f func(w io.Writer) error) {
		var b bytes.Buffer
		if err := f(&b); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		out[file] = b.Bytes()
	}
	for _, by := range []string{ByProject, ByOwner} {
		r, err := Spend(in, by, now)
		if err != nil {
			t.Fatal(err)
		}
		write(name+"-spend-"+by+".txt", func(w io.Writer) error { return WriteSpendTable(w, r) })
		if by == ByProject {
			out[name+"-spend.md"] = []byte(r.Markdown("Spend, November 2026"))
		}
	}
	// The JSON the API serves, so that a change of its shape shows in review.
	spend, err := Spend(in, ByProject, now)
	if err != nil {
		t.Fatal(err)
	}
	for what, v := range map[string]any{
		"spend": spend, "orphans": Orphans(in, OrphanOptions{}), "nodes": NodeScores(in), "providers": ProviderScores(in),
		"heatmap": Heatmap(in, ago(4*time.Hour), now), "results": CostPerResult(in),
	} {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		out[name+"-"+what+".json"] = append(b, '\n')
	}
	orphans := Orphans(in, OrphanOptions{})
	write(name+"-orphans.txt", func(w io.Writer) error { return WriteOrphanTable(w, orphans) })
	out[name+"-orphans.md"] = []byte(orphans.Markdown("Weekly orphan review"))
	write(name+"-nodes.txt", func(w io.Writer) error { return WriteNodeScoreTable(w, NodeScores(in)) })
	write(name+"-providers.txt", func(w io.Writer) error { return WriteProviderScoreTable(w, ProviderScores(in)) })
	write(name+"-heatmap.txt", func(w io.Writer) error { return WriteHeatmap(w, Heatmap(in, ago(4*time.Hour), now)) })
	write(name+"-results.txt", func(w io.Writer) error { return WriteCostPerResultTable(w, CostPerResult(in)) })
	return out
}

func TestRenderGolden(t *testing.T) {
	for name, in := range map[string]Input{"fixture": fixture(), "empty": {Now: now}, "stops": stopsFixture()} {
		for file, got := range renderings(t, name, in) {
			t.Run(file, func(t *testing.T) {
				golden(t, file, got)
				if strings.HasSuffix(file, ".txt") {
					for i, line := range strings.Split(string(got), "\n") {
						if n := utf8.RuneCountInString(line); n > 100 {
							t.Errorf("line %d is %d columns, over 100: %q", i+1, n, line)
						}
					}
				}
			})
		}
	}
}

// TestHeatmapTextWraps checks a week: 168 columns print as blocks of two
// days, each with its own tick line, so no line passes 100 columns.
func TestHeatmapTextWraps(t *testing.T) {
	var hours []gpuwarden.NodeHour
	from := time.Date(2026, 11, 13, 0, 0, 0, 0, time.UTC)
	for i := range 168 {
		hours = append(hours, hour("a-very-long-node-identifier-GPU-8f3a", from.Add(time.Duration(i)*time.Hour), 60, "1", "EUR",
			float64(i%5)*25, float64(i%4)*30))
	}
	var b bytes.Buffer
	if err := WriteHeatmap(&b, Heatmap(Input{Now: now, Hours: hours}, from, from.AddDate(0, 0, 7))); err != nil {
		t.Fatal(err)
	}
	golden(t, "week-heatmap.txt", b.Bytes())
	for i, line := range strings.Split(b.String(), "\n") {
		if n := utf8.RuneCountInString(line); n > 100 {
			t.Errorf("line %d is %d columns, over 100: %q", i+1, n, line)
		}
	}
	ticks := 0
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, " ") {
			ticks += strings.Count(line, "11-1")
		}
	}
	if got := ticks; got != 7 {
		t.Errorf("%d date ticks, want 7 (one per midnight)", got)
	}
}

// TestMarkdownEscapesLabels keeps a label with a pipe or a newline from
// breaking the table: labels are whatever a box says about itself.
func TestMarkdownEscapesLabels(t *testing.T) {
	in := Input{Now: now, Nodes: []gpuwarden.Node{{ID: "x|y", Project: "p|q\nr", Registered: ago(time.Hour),
		Labels: gpuwarden.NodeLabels{Provider: "a|b"}, Live: gpuwarden.Heartbeat{State: gpuwarden.NodeRunning}}}}
	md := Orphans(in, OrphanOptions{}).Markdown("t")
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "| `x") {
			if got := strings.Count(strings.ReplaceAll(line, `\|`, ""), "|"); got != 10 {
				t.Errorf("row has %d cell borders, want 10: %q", got, line)
			}
			if !strings.Contains(line, `p\|q r`) {
				t.Errorf("project not escaped onto one line: %q", line)
			}
			return
		}
	}
	t.Errorf("no orphan row in:\n%s", md)
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWritersReturnWriteErrors(t *testing.T) {
	in := fixture()
	spend, _ := Spend(in, ByProject, now)
	for name, f := range map[string]func(io.Writer) error{
		"spend":     func(w io.Writer) error { return WriteSpendTable(w, spend) },
		"orphans":   func(w io.Writer) error { return WriteOrphanTable(w, Orphans(in, OrphanOptions{})) },
		"nodes":     func(w io.Writer) error { return WriteNodeScoreTable(w, NodeScores(in)) },
		"providers": func(w io.Writer) error { return WriteProviderScoreTable(w, ProviderScores(in)) },
		"heatmap":   func(w io.Writer) error { return WriteHeatmap(w, Heatmap(in, ago(4*time.Hour), now)) },
		"results":   func(w io.Writer) error { return WriteCostPerResultTable(w, CostPerResult(in)) },
	} {
		if err := f(failWriter{}); err == nil {
			t.Errorf("%s: no error from a failing writer", name)
		}
	}
}

func TestAmount(t *testing.T) {
	tests := []struct {
		cur  gpuwarden.Currency
		m    string
		want string
	}{
		{"EUR", "1200", "€1,200.00"},
		{"EUR", "0.5", "€0.50"},
		{"USD", "0.000083", "$0.000083"},
		{"USD", "1234.0833", "$1,234.0833"},
		{"CHF", "0.125", "CHF 0.125"},
		{"", "0.125", "0.125"},
		{"", "3", "3.00"},
		{"EUR", "-0.001", "-€0.001"},
	}
	for _, tt := range tests {
		if got := amount(tt.cur, eur(tt.m)); got != tt.want {
			t.Errorf("amount(%s, %s) = %q, want %q", tt.cur, tt.m, got, tt.want)
		}
	}
}

func TestUnits(t *testing.T) {
	tests := []struct{ m, want string }{{"0", "0"}, {"2.5", "2.5"}, {"120000", "120,000"}, {"1234567.125", "1,234,567.125"}, {"-1000", "-1,000"}}
	for _, tt := range tests {
		if got := units(eur(tt.m)); got != tt.want {
			t.Errorf("units(%s) = %q, want %q", tt.m, got, tt.want)
		}
	}
}

func TestWrap(t *testing.T) {
	long := strings.Repeat("word ", 30)
	got := wrap(long, "  - ")
	for _, line := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
		if n := utf8.RuneCountInString(line); n > pageWidth {
			t.Errorf("line of %d runes: %q", n, line)
		}
		if !strings.HasPrefix(line, "  - word") && !strings.HasPrefix(line, "    word") {
			t.Errorf("line not led or indented: %q", line)
		}
	}
	if strings.Count(got, "word") != 30 {
		t.Errorf("words lost: %q", got)
	}
	if got := wrap("short", ""); got != "short\n" {
		t.Errorf("wrap(short) = %q", got)
	}
}
