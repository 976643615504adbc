package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/catalog"
	"github.com/gpuwarden/gpuwarden/internal/codepages"
	"github.com/gpuwarden/gpuwarden/internal/textsafe"
	"github.com/spf13/cobra"
)

// pageWidth is the widest line the human output may print.
const pageWidth = 100

// catalogFlags are the flags of every command that reads prices.
type catalogFlags struct {
	files      []string
	noEmbedded bool
	// dataDir, when set, says where `catalog update` stored its downloads;
	// commands that price with them register it with registerDownloads.
	dataDir func() string
}

func (f *catalogFlags) register(c *cobra.Command) {
	c.Flags().StringArrayVar(&f.files, "catalog", nil,
		"price `FILE` to add (own CSV, SkyPilot vms.csv or gpuhunt CSV); repeatable")
	c.Flags().BoolVar(&f.noEmbedded, "no-embedded", false, "leave out the embedded price snapshot")
}

// registerDownloads is register plus the downloaded catalogs of
// DATA_DIR/catalogs; a command that has --data-dir already shares it.
func (f *catalogFlags) registerDownloads(c *cobra.Command) {
	f.register(c)
	if c.Flags().Lookup("data-dir") == nil {
		c.Flags().String("data-dir", defaultDataDir(), "`DIR` whose catalogs/ holds the prices `gpuwarden catalog update` downloaded")
	}
	fl := c.Flags().Lookup("data-dir")
	f.dataDir = func() string { return fl.Value.String() }
}

// load reads the catalogs and returns them with warnings: the readers' own
// and one per source whose prices are older than 90 days.
func (f *catalogFlags) load(now time.Time) (*gpuwarden.Catalog, error) {
	return f.loadWith(now, nil, true)
}

// loadWith adds a plan's own catalogs (already resolved) to the flags'; the
// embedded snapshot is read unless the flag or the plan leaves it out.
func (f *catalogFlags) loadWith(now time.Time, planFiles []string, planEmbedded bool) (*gpuwarden.Catalog, error) {
	files := append(append([]string(nil), planFiles...), f.files...)
	embedded := !f.noEmbedded && planEmbedded
	if !embedded && len(files) == 0 {
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "no prices: the embedded snapshot is left out and no catalog is given").WithHint("add --catalog FILE")
	}
	opt := catalog.Options{Files: files, Embedded: embedded, Now: now}
	if f.dataDir != nil {
		opt.StoreDir = filepath.Join(f.dataDir(), "catalogs")
		opt.CacheDir = filepath.Join(f.dataDir(), "cache")
	}
	cat, err := catalog.LoadWith(opt)
	if err != nil {
		return nil, err
	}
	cat.Warnings = append(cat.Warnings, catalog.Stale(cat, now, catalog.PriceMaxAge)...)
	return cat, nil
}

// jsonSchema names the schema of a command's -o json: "gpuwarden.<kind>/v1",
// the form plan's has had since its first release, or the version a kind
// names itself ("plan/v2"). Fields are only added within a version; a
// rename or removal makes the next one (docs/json.md).
func jsonSchema(kind string) string {
	if strings.Contains(kind, "/") {
		return "gpuwarden." + kind
	}
	return "gpuwarden." + kind + "/v1"
}

// writeJSON writes v as indented JSON whose first field is "schema":
// jsonSchema(kind), so that every -o json says what it is; v must encode
// to an object (a list goes in one under a named field). A v that names
// its own schema first (plan's view) keeps it. An empty kind writes v as it
// is: the private protocol between gpuwarden and its own child processes.
func writeJSON(w io.Writer, kind string, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	return writeJSONBytes(w, kind, bytes.TrimSpace(buf.Bytes()))
}

// writeJSONBytes is writeJSON for JSON already encoded (an agent's status).
func writeJSONBytes(w io.Writer, kind string, raw []byte) error {
	if kind != "" {
		var err error
		if raw, err = withSchema(raw, jsonSchema(kind)); err != nil {
			return err
		}
	}
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return fmt.Errorf("indent json: %w", err)
	}
	out.WriteByte('\n')
	_, err := w.Write(out.Bytes())
	return err
}

// withSchema puts "schema": schema first in the JSON object raw.
func withSchema(raw []byte, schema string) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 || raw[0] != '{' {
		return nil, gpuwarden.Errorf(gpuwarden.EInternal, "json output %s is not an object", schema)
	}
	field, _ := json.Marshal(schema)
	head := append([]byte(`{"schema":`), field...)
	rest := bytes.TrimSpace(raw[1:])
	switch {
	case bytes.HasPrefix(raw, head):
		return raw, nil // the value names this schema itself
	case bytes.HasPrefix(raw, []byte(`{"schema":`)):
		return nil, gpuwarden.Errorf(gpuwarden.EInternal, "json output names another schema than %s", schema)
	case len(rest) > 0 && rest[0] == '}':
		return append(head, '}'), nil
	}
	return append(append(head, ','), rest...), nil
}

// table prints aligned columns with no trailing blanks; numeric columns are
// right-aligned by the caller with rightAlign, since tabwriter only pads right.
type table struct {
	out io.Writer
	buf strings.Builder
	tw  *tabwriter.Writer
}

func newTable(w io.Writer) *table {
	t := &table{out: w}
	t.tw = tabwriter.NewWriter(&t.buf, 0, 0, 2, ' ', 0)
	return t
}

// row adds a line; each cell is made safe for a terminal (a catalog's
// text may hold escape sequences, and a tab would shift the columns).
func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = textsafe.Terminal(c, false)
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error {
	if err := t.tw.Flush(); err != nil {
		return err
	}
	for _, line := range strings.SplitAfter(t.buf.String(), "\n") {
		if line == "" {
			continue
		}
		if _, err := io.WriteString(t.out, strings.TrimRight(line, " \n")+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// truncate shortens s to n runes, marking the cut with an ellipsis.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// rightAlign pads every cell of a column on the left to the column's width.
func rightAlign(rows [][]string, cols ...int) {
	for _, c := range cols {
		w := 0
		for _, r := range rows {
			w = max(w, utf8.RuneCountInString(r[c]))
		}
		for _, r := range rows {
			r[c] = strings.Repeat(" ", w-utf8.RuneCountInString(r[c])) + r[c]
		}
	}
}

// wrap breaks text into lines of at most width runes, the first starting
// with lead and the rest indented to match it.
func wrap(text, lead string, width int) string {
	return wrapHanging(text, lead, strings.Repeat(" ", utf8.RuneCountInString(lead)), width)
}

// wrapHanging is wrap with its own indent for the lines after the first.
func wrapHanging(text, lead, indent string, width int) string {
	var b strings.Builder
	line := lead
	for _, word := range strings.Fields(text) {
		if utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) > width && strings.TrimSpace(line) != strings.TrimSpace(lead) {
			b.WriteString(strings.TrimRight(line, " ") + "\n")
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

// priceAges prints where the prices come from and how old they are: the
// embedded snapshot's date, one line per downloaded source, and whether the
// snapshot is old or countries (a plan's residency, offers' --country)
// leave fewer than three providers, with the fix. Every report says it.
func priceAges(w io.Writer, now time.Time, cat *gpuwarden.Catalog, countries []string) {
	for _, line := range catalog.PriceNotes(cat, now, countries) {
		fmt.Fprint(w, wrap(line, "prices: ", pageWidth))
	}
	for _, s := range cat.Sources {
		fmt.Fprint(w, wrap(fmt.Sprintf("%s: %d offers downloaded %s, checked %s ago (%s)", s.Provider, s.Offers,
			s.FetchedAt.UTC().Format("2006-01-02 15:04 UTC"), catalog.FormatAge(now.Sub(s.CheckedAt)), s.URL), "prices: ", pageWidth))
	}
}

func warnAll(w io.Writer, warnings []string) {
	for _, s := range warnings {
		fmt.Fprint(w, wrap(s, "warning: ", pageWidth))
	}
}

// pricingGC lets the garbage collector run less while a report prices a
// catalog, and returns what undoes it. Nearly all a report allocates stays
// live until it prints (the offers, the ranked candidates), so collecting
// at every doubling of the heap frees little: `plan` on a million offers
// took 1.24–1.37 s with the default GOGC=100 and 0.83–0.88 s with 400, at
// the same peak RSS (586 / 594 MB; scripts/bench-plan.sh). A GOGC set in
// the environment is left as it is.
func pricingGC() (undo func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	old := debug.SetGCPercent(400)
	return func() { debug.SetGCPercent(old) }
}

// leanLoad prepares reading a big catalog, and returns what ends it. It
// hands back the binary's pages that the start mapped and, after, those
// the reading mapped (codepages.Drop: at 1M offers the idle process's 20 MB
// were most of the margin to 2× the file). It stops the collector while
// the catalog is read, unless GOGC is set: reading a million offers from
// the cache first fills 72 MB of rows, whose size alone starts a
// collection at once, and its attempts to stop the reader mid page fault
// were a quarter of a cached `plan` (perf). The end collects once and hands
// the freed memory back (the chunks, the pieces read in parallel, the
// names' first copy), so that the ranking's allocations do not add to it:
// 1M offers peaked at 151.7 MB with a collection alone, 142.5 MB with the
// hand-back. The offers' rows hold no pointers: it takes a few
// milliseconds. The collector then runs at GOGC 400 (pricingGC).
func leanLoad() (end func()) {
	codepages.Drop()
	gc := os.Getenv("GOGC") == ""
	if gc {
		debug.SetGCPercent(-1)
	}
	return func() {
		if gc {
			debug.SetGCPercent(400)
			debug.FreeOSMemory()
		}
		codepages.Drop()
	}
}

// residencyOf is the countries a plan may run in; none without a plan.
func residencyOf(p *gpuwarden.Plan) []string {
	if p == nil {
		return nil
	}
	return p.Residency.Countries
}
