package catalog

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"path"
	"runtime"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/gpuwarden/gpuwarden"
)

// format is a price-file layout that ReadOffers understands.
type format int

const (
	formatOwn format = iota + 1
	formatSkyPilot
	formatGpuhunt
)

// What each format is called in messages, and the columns a file of that
// format cannot do without.
var formats = map[format]struct {
	title    string
	hint     string
	required []string
}{
	formatOwn: {
		title:    "gpuwarden prices.csv",
		hint:     "expected gpuwarden's prices.csv format: provider,region,country,instance,gpu,gpu_count,vram_gb_per_gpu,vcpus,ram_gb,currency,on_demand_hourly,spot_hourly,monthly,as_of,source (columns in any order)",
		required: []string{"provider", "region", "gpu", "gpu_count", "vram_gb_per_gpu", "currency"},
	},
	formatSkyPilot: {
		title:    "SkyPilot vms.csv",
		hint:     "expected a SkyPilot catalog vms.csv: InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region[,AvailabilityZone]",
		required: []string{"instancetype", "acceleratorname", "acceleratorcount", "price", "region"},
	},
	formatGpuhunt: {
		title:    "gpuhunt CSV",
		hint:     "expected a gpuhunt catalog CSV: instance_name,location,price,cpu,memory,gpu_count,gpu_name,gpu_memory,spot[,disk_size,gpu_vendor,flags,provider]",
		required: []string{"instance_name", "location", "price", "gpu_count", "gpu_name", "spot"},
	},
}

const acceptedFormats = "gpuwarden prices.csv (provider,region,gpu,gpu_count,currency,on_demand_hourly,…), " +
	"a SkyPilot catalog vms.csv (InstanceType,AcceleratorName,AcceleratorCount,…,Price,SpotPrice,Region) " +
	"or a gpuhunt catalog CSV (instance_name,location,price,…,gpu_count,gpu_name,gpu_memory,spot)"

// ReadOffers reads a user's price file, recognising its format by the header
// row: gpuwarden's own prices.csv, a SkyPilot catalog vms.csv or a gpuhunt
// catalog CSV. SkyPilot and gpuhunt files do not name their provider, so it is
// taken from the file name (aws/vms.csv, aws.csv, gcp-vms.csv); use
// ReadOffersAs when the name does not say. It returns the offers and warnings
// about rows it skipped or guessed at, or an *gpuwarden.Error with code
// EInvalid that points at the first bad cell as NAME:LINE:COL.
func ReadOffers(name string, r io.Reader) ([]gpuwarden.Offer, []string, error) {
	return readOffers(name, "", r)
}

// ReadOffersAs is ReadOffers with the provider given, for SkyPilot and gpuhunt
// files whose name does not tell it; files of our own format name the provider
// on every row and ignore it.
func ReadOffersAs(name, provider string, r io.Reader) ([]gpuwarden.Offer, []string, error) {
	return readOffers(name, normalizeProvider(provider), r)
}

func readOffers(name, provider string, r io.Reader) ([]gpuwarden.Offer, []string, error) {
	data, err := readAll(name, r, 0)
	if err != nil {
		return nil, nil, err
	}
	var b gpuwarden.OffersBuilder
	warns, err := parseOffers(name, provider, data, &b)
	if err != nil {
		return nil, nil, err
	}
	offers := b.Offers()
	return offers.Slice(), warns, nil
}

// maxPriceFile bounds what a price file may hold: 1 GiB is some 14 million
// rows of our own format, far beyond any provider's list, and a file
// larger than that is an error rather than a machine out of memory.
const maxPriceFile = 1 << 30

// readAll reads r whole, up to maxPriceFile, into a string that nothing
// else holds, so that rows can be read as substrings of it. With the size
// known, that is one allocation.
func readAll(name string, r io.Reader, size int) (string, error) {
	if l, ok := r.(interface{ Len() int }); ok && size == 0 {
		size = min(l.Len(), maxPriceFile) // a bytes.Reader, a strings.Reader: its length is known
	}
	var buf bytes.Buffer
	buf.Grow(size + bytes.MinRead)
	if _, err := buf.ReadFrom(io.LimitReader(r, maxPriceFile+1)); err != nil {
		return "", invalid(acceptedFormats, "%s: read: %v", name, err)
	}
	b := buf.Bytes()
	if len(b) > maxPriceFile {
		return "", invalid("split the file by provider", "%s: larger than %d MiB, the most a price file may hold", name, maxPriceFile>>20)
	}
	return unsafe.String(unsafe.SliceData(b), len(b)), nil
}

// parseOffers is readOffers on the whole file, its offers added to dst.
// On an error dst may hold some of the file's offers: the caller drops it.
func parseOffers(name, provider, data string, dst *gpuwarden.OffersBuilder) ([]string, error) {
	t, err := openTable(name, data)
	if err != nil {
		return nil, err
	}
	var (
		offers []gpuwarden.Offer
		warns  []string
	)
	switch t.format {
	case formatOwn:
		return readOwn(t, dst)
	case formatSkyPilot:
		if provider == "" {
			if provider, err = providerFromName(t); err != nil {
				return nil, err
			}
		}
		offers, warns, err = readSkyPilot(t, provider)
	case formatGpuhunt:
		if provider == "" && t.col("provider") < 0 {
			if provider, err = providerFromName(t); err != nil {
				return nil, err
			}
		}
		offers, warns, err = readGpuhunt(t, provider)
	}
	if err != nil {
		return nil, err
	}
	dst.Grow(len(offers))
	for i := range offers {
		if err := checkOfferNames(&offers[i]); err != nil {
			return nil, err
		}
		dst.Append(&offers[i])
	}
	return warns, nil
}

// checkOfferNames holds an offer read from a published catalog to the names
// gpuwarden.CheckName allows, naming the row it came from: its provider,
// region, instance and GPU reach launch commands (`plan -o targets`) and
// tables, and the catalog is a third party's.
func checkOfferNames(o *gpuwarden.Offer) error {
	for _, c := range [...]struct{ kind, value string }{
		{gpuwarden.NameProvider, o.Provider}, {gpuwarden.NameRegion, o.Region},
		{gpuwarden.NameInstance, o.Instance}, {gpuwarden.NameGPU, o.GPU},
	} {
		if err := gpuwarden.CheckName(c.kind, c.value); err != nil {
			return invalid("a price catalog names providers, regions, instances and GPUs with letters, digits and - _ . only; fix or drop the row",
				"%s:%d: %v", o.Origin.File, o.Origin.Line, err)
		}
	}
	return nil
}

// table is a CSV file being read row by row, with its header indexed by
// lower-case column name so that columns may come in any order and case.
type table struct {
	name   string
	format format
	r      *csvRows
	cols   []string       // header names as written, for messages
	idx    map[string]int // lower-case header name → column
	rec    []string       // the current row; reused between rows
}

const utf8BOM = "\xEF\xBB\xBF"

func openTable(name, data string) (*table, error) {
	t, err := readHeader(name, data, acceptedFormats)
	if err != nil {
		return nil, err
	}
	t.format = detectFormat(t.idx)
	if t.format == 0 {
		return nil, invalid(acceptedFormats, "%s:1: unrecognised header %s: expected %s", name, quoted(strings.Join(t.cols, ",")), acceptedFormats)
	}
	f := formats[t.format]
	for _, c := range f.required {
		if t.col(c) < 0 {
			return nil, invalid(f.hint, "%s:1: header has no column %s, which a %s needs", name, c, f.title)
		}
	}
	if t.format == formatOwn && firstCol(t.col("on_demand_hourly"), t.col("spot_hourly"), t.col("monthly")) < 0 {
		return nil, invalid(f.hint, "%s:1: header has no price column: a %s needs on_demand_hourly, spot_hourly or monthly", name, f.title)
	}
	return t, nil
}

// readHeader starts reading a CSV and indexes its header row. Rows are
// checked for their field count one by one, to point at the row in our
// words.
func readHeader(name, data, hint string) (*table, error) {
	// Excel writes a byte-order mark, which would otherwise be part of the
	// first header name, or an error before a quote.
	data = strings.TrimPrefix(data, utf8BOM)
	t := &table{name: name, r: newCSVRows(data)}
	hdr, ok, err := t.r.read()
	if err != nil {
		return nil, t.readErr(err, hint)
	}
	if !ok {
		return nil, invalid(hint, "%s: empty file: expected a header row of %s", name, acceptedFormats)
	}

	t.cols = make([]string, len(hdr))
	t.idx = make(map[string]int, len(hdr))
	for i, h := range hdr {
		h = strings.TrimSpace(h)
		t.cols[i] = h
		key := strings.ToLower(h)
		if key == "" {
			continue
		}
		if _, dup := t.idx[key]; dup {
			return nil, invalid(hint, "%s:1:%d: column %s appears twice in the header", name, i+1, cut(h))
		}
		t.idx[key] = i
	}
	return t, nil
}

// rowChunk is a piece of a file's rows, cut after a line break.
type rowChunk struct {
	data       string
	lineBefore int // the number of the line before the piece
	lines      int // the most rows it can hold: its line breaks, plus one
}

// minSplit is the smallest rest of a file worth reading in pieces.
const minSplit = 1 << 20

// splitRows cuts the rows after t's header into a piece per processor, for
// a file big enough to pay and without a quote, so that every line break
// ends a row; nil otherwise.
func splitRows(t *table) []rowChunk {
	rest := t.r.data[t.r.off:]
	n := runtime.GOMAXPROCS(0)
	if n < 2 || len(rest) < minSplit || strings.IndexByte(rest, '"') >= 0 {
		return nil
	}
	return splitAt(rest, t.r.numLine, n)
}

// detectFormat names the layout from columns only one of the three has.
func detectFormat(idx map[string]int) format {
	has := func(k string) bool { _, ok := idx[k]; return ok }
	switch {
	case has("instancetype") && has("acceleratorname"):
		return formatSkyPilot
	case has("instance_name") && has("gpu_name"):
		return formatGpuhunt
	case has("on_demand_hourly") || has("spot_hourly") || has("monthly") ||
		(has("provider") && has("gpu") && has("gpu_count")):
		return formatOwn
	}
	return 0
}

// col returns the column of a lower-case header name, or -1.
func (t *table) col(key string) int {
	if i, ok := t.idx[key]; ok {
		return i
	}
	return -1
}

// next reads the following row into t.rec; it reports false at the end. A
// row must have as many fields as the header: a comma left unquoted in a
// text column (a source such as "1,50") would otherwise move every field
// after it one column on, or, when it is the last column, be read as text
// with half a price in it.
func (t *table) next() (bool, error) {
	rec, ok, err := t.r.read()
	if err != nil {
		return false, t.readErr(err, formats[t.format].hint)
	}
	if !ok {
		return false, nil
	}
	if len(rec) != len(t.cols) {
		line := t.r.pos[0].line
		hint := "quote a field that holds a comma (\"a, b\"), and give every row one field per column, empty ones too"
		if h := formats[t.format].hint; h != "" {
			hint += "; " + h
		}
		return false, invalid(hint, "%s:%d:%d: row has %d fields, the header has %d",
			t.name, line, min(len(rec), len(t.cols))+1, len(rec), len(t.cols))
	}
	t.rec = rec
	return true, nil
}

// cell returns the trimmed value of column i of the current row; "" for a
// column the file does not have.
func (t *table) cell(i int) string {
	if i < 0 {
		return ""
	}
	s := t.rec[i]
	// Most cells have no space at either end: test the two bytes before
	// calling TrimSpace, which was a tenth of reading a big file.
	if s == "" || (s[0] > ' ' && s[0] < utf8.RuneSelf && s[len(s)-1] > ' ' && s[len(s)-1] < utf8.RuneSelf) {
		return s
	}
	return strings.TrimSpace(s)
}

// line is the line the current row starts on.
func (t *table) line() int { return t.r.pos[0].line }

// origin names the current row for Offer.Origin.
func (t *table) origin() gpuwarden.Origin { return gpuwarden.Origin{File: t.name, Line: t.line()} }

// cellErr reports a bad cell as NAME:LINE:COL: column NAME: …, COL counting
// columns from 1.
func (t *table) cellErr(i int, format string, args ...any) error {
	line := t.r.pos[i].line
	msg := fmt.Sprintf(format, args...)
	return invalid(formats[t.format].hint, "%s:%d:%d: column %s: %s", t.name, line, i+1, cut(t.cols[i]), msg)
}

// badValue reports a cell whose value failed to parse for the given reason.
func (t *table) badValue(i int, why error) error {
	return t.cellErr(i, "%s %s", quoted(t.cell(i)), why.Error())
}

// maxQuoted is how many characters of a cell or a header an error message
// shows: enough to recognise the value, and a 50 MB line stays one line.
const maxQuoted = 80

// cut shortens s to maxQuoted characters, ending it with "…" when it was
// longer, for messages that show input.
func cut(s string) string {
	n := 0
	for i := range s {
		if n == maxQuoted {
			return s[:i] + "…"
		}
		n++
	}
	return s
}

// quoted is s in Go quotes for a message, cut to maxQuoted characters (the
// "…" inside the quotes).
func quoted(s string) string {
	c := cut(s)
	if c == s {
		return strconv.Quote(s)
	}
	q := strconv.Quote(strings.TrimSuffix(c, "…"))
	return q[:len(q)-1] + `…"`
}

// readErr turns the reader's *csv.ParseError into the same NAME:LINE:COL form.
func (t *table) readErr(err error, hint string) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return invalid(hint, "%s:%d:%d: %v", t.name, pe.Line, pe.Column, pe.Err)
	}
	return invalid(hint, "%s: read: %v", t.name, err)
}

// invalid builds the EInvalid application error every bad input becomes.
func invalid(hint, format string, args ...any) *gpuwarden.Error {
	return gpuwarden.Errorf(gpuwarden.EInvalid, format, args...).WithHint("%s", hint)
}

// price reads a price cell; exact for our own format, rounded to micros for
// catalogs written by pandas. Empty cells are 0, which Offer reads as "not
// offered"; negative prices are errors.
func (t *table) price(i int, exact bool) (gpuwarden.Micros, error) {
	s := t.cell(i)
	if s == "" {
		return 0, nil
	}
	var (
		v   gpuwarden.Micros
		err error
	)
	if exact {
		v, err = parseExactMicros(s)
	} else {
		v, err = parseDecimal(s, true)
	}
	if err != nil {
		return 0, t.badValue(i, err)
	}
	if v < 0 {
		return 0, t.badValue(i, errNegative)
	}
	return v, nil
}

// number reads a non-negative quantity cell; empty is 0.
func (t *table) number(i int) (float64, error) {
	s := t.cell(i)
	if s == "" {
		return 0, nil
	}
	f, err := parseNumber(s)
	if err != nil {
		return 0, t.badValue(i, err)
	}
	if f < 0 {
		return 0, t.badValue(i, errNegative)
	}
	return f, nil
}

// integer reads a whole-number cell such as vCPUs; "8.0" is fine, "8.5" not.
func (t *table) integer(i int) (int, error) {
	f, err := t.number(i)
	if err != nil {
		return 0, err
	}
	if f != float64(int(f)) || f > 1<<20 {
		return 0, t.cellErr(i, "%s is not a whole number", quoted(t.cell(i)))
	}
	return int(f), nil
}

// cpus reads a vCPU count, which SkyPilot and gpuhunt write with
// decimals: bounded as integer bounds a count of our own format, since an
// offer keeps it in 32 bits.
func (t *table) cpus(i int) (float64, error) {
	f, err := t.number(i)
	if err == nil && f > 1<<20 {
		err = t.cellErr(i, "%s is more vCPUs than any machine has", quoted(t.cell(i)))
	}
	return f, err
}

// knownProviders are the provider names a file name may carry; anything else
// in a path (tmp, home, v7) must not be mistaken for one.
var knownProviders = map[string]bool{
	"aws": true, "gcp": true, "azure": true, "lambda": true, "runpod": true, "vast": true,
	"oci": true, "paperspace": true, "fluidstack": true, "hyperbolic": true, "cudo": true,
	"nebius": true, "scaleway": true, "ovh": true, "hetzner": true, "hivenet": true,
	"ibm": true, "do": true, "scp": true, "datacrunch": true, "verda": true, "tensordock": true,
	"vultr": true, "crusoe": true, "jarvislabs": true, "seeweb": true, "shadeform": true,
	"primeintellect": true, "mithril": true, "cloudrift": true, "hotaisle": true, "lium": true, "simplepod": true,
}

// Every cloud `catalog update` downloads is a provider a file may be named
// after: a vms.csv under yotta/ was refused while update fetched it.
func init() {
	for _, c := range SkyPilotClouds {
		knownProviders[c] = true
	}
}

// providerAliases maps the names catalogs use for a provider to ours.
var providerAliases = map[string]string{
	"lambdalabs": "lambda", "lambdacloud": "lambda", "lambda_cloud": "lambda",
	"vastai": "vast", "vast_ai": "vast", "google": "gcp", "amazon": "aws",
	"ovhcloud": "ovh", "cudocompute": "cudo", "digitalocean": "do", "oracle": "oci",
}

// normalizeProvider lower-cases a provider name and resolves aliases.
func normalizeProvider(p string) string {
	p = strings.ToLower(strings.TrimSpace(p))
	if a, ok := providerAliases[p]; ok {
		return a
	}
	return p
}

// providerFromName finds the provider in the file name: the name itself
// (aws.csv, lambdalabs.csv), its first word (aws-vms.csv, gcp_2026-11.csv) or
// the folder it is in (skypilot-catalog/catalogs/v7/aws/vms.csv).
func providerFromName(t *table) (string, error) {
	p := strings.ToLower(strings.ReplaceAll(t.name, `\`, "/"))
	base := path.Base(p)
	stem := strings.TrimSuffix(base, path.Ext(base))
	first, _, _ := strings.Cut(stem, "-")
	first, _, _ = strings.Cut(first, "_")
	first, _, _ = strings.Cut(first, ".")
	dir := path.Base(path.Dir(p))
	for _, c := range []string{stem, first, dir} {
		if n := normalizeProvider(c); knownProviders[n] {
			return n, nil
		}
	}
	f := formats[t.format]
	return "", invalid(
		"rename the file after its provider (aws.csv, aws-vms.csv) or keep it in a folder named after it (aws/vms.csv), or give the provider explicitly",
		"%s: cannot tell the provider of this %s from its name", t.name, f.title)
}

// counted gathers how often something happened in a file, so that a catalog
// with 40,000 odd rows yields one warning, not 40,000.
type counted struct {
	n     int
	lines []int
}

func (c *counted) add(line int) {
	c.n++
	if len(c.lines) < 5 {
		c.lines = append(c.lines, line)
	}
}

// join adds the count of a later piece of the same file.
func (c *counted) join(later counted) {
	c.n += later.n
	for _, l := range later.lines {
		if len(c.lines) < 5 {
			c.lines = append(c.lines, l)
		}
	}
}

// where lists the first lines: "lines 4, 7, 9, …".
func (c *counted) where() string {
	parts := make([]string, len(c.lines))
	for i, l := range c.lines {
		parts[i] = fmt.Sprint(l)
	}
	s := "line " + strings.Join(parts, ", ")
	if len(c.lines) > 1 {
		s = "lines " + strings.Join(parts, ", ")
	}
	if c.n > len(c.lines) {
		s += ", …"
	}
	return s
}

// rowsDo writes "1 row lists" or "12 rows list".
func rowsDo(n int, one, many string) string { return countDo(n, "row", one, many) }

// countDo writes a count, its noun and a verb that agrees with it.
func countDo(n int, noun, one, many string) string {
	if n == 1 {
		return "1 " + noun + " " + one
	}
	return fmt.Sprintf("%d %ss %s", n, noun, many)
}

// rows writes "1 row" or "12 rows".
func rows(n int) string {
	if n == 1 {
		return "1 row"
	}
	return fmt.Sprintf("%d rows", n)
}
