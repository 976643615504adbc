package gpuwarden

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"slices"
	"strings"
)

// Offers is a catalog's offers, kept small: a million offers read from a
// 70 MB price file took 216 MB as []Offer, three times the file. Here
// what rows share (provider, region, country, GPU, currency, date, source,
// file) is kept once per distinct combination, the instance names are one
// string, and the rest of an offer is a 72-byte row. At makes an Offer
// back; its strings are not copied.
//
// A table does not change once built (OffersBuilder makes one), so
// copies of it share its memory safely. The zero value is an empty table.
type Offers struct {
	rows   []offerRow
	groups []offerGroup
	names  string // instance names back to back; rows point into it
}

// offerGroup is what an offer shares with others from the same file.
type offerGroup struct {
	provider, region, country, gpu, asOf, source, file string
	currency                                           Currency
}

// offerRow is the rest of an offer.
type offerRow struct {
	onDemand, spot, monthly Micros
	gpuCount, vram, ram     float64
	group                   uint32
	name, nameLen           uint32 // the instance name is names[name : name+nameLen]
	line, vcpus, zones      int32
}

// offerRowSize is the bytes a row takes in the binary layout.
const offerRowSize = 6*8 + 6*4

// maxOfferInt is the largest vcpus, zones or line number an offer may
// have: readers reject more, since the table keeps them in 32 bits.
const maxOfferInt = math.MaxInt32

// OffersOf is a table of the offers given, in order.
func OffersOf(offers ...Offer) Offers {
	var b OffersBuilder
	b.Grow(len(offers))
	for i := range offers {
		b.Append(&offers[i])
	}
	return b.Offers()
}

// Len is the number of offers.
func (t *Offers) Len() int { return len(t.rows) }

// At is offer i. Its strings point into the table.
func (t *Offers) At(i int) Offer {
	r := &t.rows[i]
	g := &t.groups[r.group]
	return Offer{
		Provider: g.provider, Region: g.region, Country: g.country, Instance: t.names[r.name : r.name+r.nameLen], GPU: g.gpu,
		GPUCount: r.gpuCount, VRAMGBPerGPU: r.vram, VCPUs: int(r.vcpus), RAMGB: r.ram, Currency: g.currency,
		OnDemandHourly: r.onDemand, SpotHourly: r.spot, Monthly: r.monthly, Zones: int(r.zones),
		AsOf: g.asOf, Source: g.source, Origin: Origin{File: g.file, Line: int(r.line)},
	}
}

// All walks the offers in order.
func (t *Offers) All() iter.Seq2[int, Offer] {
	return func(yield func(int, Offer) bool) {
		for i := range t.rows {
			if !yield(i, t.At(i)) {
				return
			}
		}
	}
}

// Slice is the offers as a slice, for the few callers that sort or edit
// them; it holds 216 bytes per offer.
func (t *Offers) Slice() []Offer {
	out := make([]Offer, t.Len())
	for i := range out {
		out[i] = t.At(i)
	}
	return out
}

// OffersBuilder makes an Offers table, offer by offer or from other
// tables and from the binary layout. The zero value is empty.
type OffersBuilder struct {
	rows    []offerRow
	groups  []offerGroup
	groupOf map[offerGroup]uint32
	names   []byte
}

// Len is the number of offers added so far.
func (b *OffersBuilder) Len() int { return len(b.rows) }

// Grow makes room for n more offers, and for their instance names as long
// as those so far, a tenth more: a million names grown by appending left
// 40 MB behind them.
func (b *OffersBuilder) Grow(n int) {
	if n <= 0 {
		return
	}
	if len(b.rows) > 0 && len(b.names) > 0 {
		b.names = slices.Grow(b.names, int(float64(n)*float64(len(b.names))/float64(len(b.rows))*1.1))
	}
	b.rows = slices.Grow(b.rows, n)
}

// Offers is the table of the offers added; the builder is empty after.
func (b *OffersBuilder) Offers() Offers {
	t := Offers{rows: slices.Clip(b.rows), groups: slices.Clip(b.groups), names: string(b.names)}
	*b = OffersBuilder{}
	return t
}

// Append adds an offer at the end. It panics when a count does not fit
// (see maxOfferInt), or the instance names pass 4 GiB in all: readers
// check the first, and price files are capped well below the second.
func (b *OffersBuilder) Append(o *Offer) {
	if !fitsInt32(o.VCPUs) || !fitsInt32(o.Zones) || !fitsInt32(o.Origin.Line) {
		panic(fmt.Sprintf("gpuwarden: offer %s %s %s: vcpus %d, zones %d or line %d is past %d",
			o.Provider, o.Region, o.Instance, o.VCPUs, o.Zones, o.Origin.Line, maxOfferInt))
	}
	b.checkNames(len(o.Instance))
	g := offerGroup{provider: o.Provider, region: o.Region, country: o.Country, gpu: o.GPU, asOf: o.AsOf,
		source: o.Source, file: o.Origin.File, currency: o.Currency}
	b.rows = append(b.rows, offerRow{
		onDemand: o.OnDemandHourly, spot: o.SpotHourly, monthly: o.Monthly,
		gpuCount: o.GPUCount, vram: o.VRAMGBPerGPU, ram: o.RAMGB,
		group: b.groupIndex(g), name: uint32(len(b.names)), nameLen: uint32(len(o.Instance)),
		line: int32(o.Origin.Line), vcpus: int32(o.VCPUs), zones: int32(o.Zones),
	})
	b.names = append(b.names, o.Instance...)
}

func fitsInt32(n int) bool { return n >= math.MinInt32 && n <= math.MaxInt32 }

func (b *OffersBuilder) checkNames(more int) {
	if len(b.names)+more > math.MaxUint32 {
		panic("gpuwarden: more than 4 GiB of instance names in one catalog")
	}
}

// groupIndex is g's place in b.groups, added when new. Rows of one file
// mostly share their group with the row before, which is tried first.
func (b *OffersBuilder) groupIndex(g offerGroup) uint32 {
	if n := len(b.rows); n > 0 && b.groups[b.rows[n-1].group] == g {
		return b.rows[n-1].group
	}
	if i, ok := b.groupOf[g]; ok {
		return i
	}
	if b.groupOf == nil {
		b.groupOf = map[offerGroup]uint32{}
	}
	// Strings are kept once per group: copied, so that a group does not
	// keep alive the whole file it was read from.
	g = offerGroup{provider: strings.Clone(g.provider), region: strings.Clone(g.region), country: strings.Clone(g.country),
		gpu: strings.Clone(g.gpu), asOf: strings.Clone(g.asOf), source: strings.Clone(g.source), file: strings.Clone(g.file),
		currency: Currency(strings.Clone(string(g.currency)))}
	i := uint32(len(b.groups))
	b.groups = append(b.groups, g)
	b.groupOf[g] = i
	return i
}

// AppendBuilder adds all of o's offers at the end, in order; o is left
// as it was.
func (b *OffersBuilder) AppendBuilder(o *OffersBuilder) {
	if len(o.rows) == 0 {
		return
	}
	remap := make([]uint32, len(o.groups))
	for i, g := range o.groups {
		remap[i] = b.groupIndex(g)
	}
	b.checkNames(len(o.names))
	b.Grow(len(o.rows))
	shift := uint32(len(b.names))
	for _, r := range o.rows {
		r.group = remap[r.group]
		r.name += shift
		b.rows = append(b.rows, r)
	}
	b.names = append(b.names, o.names...)
}

// Reset empties the builder and keeps its memory for the next offers.
func (b *OffersBuilder) Reset() {
	b.rows, b.groups, b.names = b.rows[:0], b.groups[:0], b.names[:0]
	clear(b.groupOf)
}

// Truncate drops the offers from n on.
func (b *OffersBuilder) Truncate(n int) {
	end := 0
	if n > 0 {
		r := &b.rows[n-1]
		end = int(r.name + r.nameLen)
	}
	b.rows, b.names = b.rows[:n], b.names[:end]
}

// The binary layout WriteFrom writes and AppendFrom reads: a header of
// counts, the groups' strings, the rows, little-endian, and the names. It
// is the parsed-catalog cache's, which guards it with a checksum.
const offersMagic = "gpuwarden offers\n"

// WriteFrom writes the offers from first on in the binary layout.
func (b *OffersBuilder) WriteFrom(w io.Writer, first int) error {
	rows := b.rows[first:]
	names := b.names
	if first < len(b.rows) {
		names = names[rows[0].name:]
	} else {
		names = nil
	}
	var shift uint32
	if len(rows) > 0 {
		shift = rows[0].name
	}
	buf := []byte(offersMagic)
	buf = binary.AppendUvarint(buf, uint64(len(b.groups)))
	buf = binary.AppendUvarint(buf, uint64(len(rows)))
	buf = binary.AppendUvarint(buf, uint64(len(names)))
	for i := range b.groups {
		for _, s := range b.groups[i].strings() {
			buf = binary.AppendUvarint(buf, uint64(len(s)))
			buf = append(buf, s...)
		}
	}
	// Rows are written a thousand at a time.
	for len(rows) > 0 {
		n := min(len(rows), 1024)
		for i := range rows[:n] {
			buf = rows[i].append(buf, shift)
		}
		if _, err := w.Write(buf); err != nil {
			return err
		}
		buf, rows = buf[:0], rows[n:]
	}
	if len(buf) > 0 {
		if _, err := w.Write(buf); err != nil {
			return err
		}
	}
	_, err := w.Write(names)
	return err
}

func (g *offerGroup) strings() [8]string {
	return [8]string{g.provider, g.region, g.country, g.gpu, g.asOf, g.source, g.file, string(g.currency)}
}

var le = binary.LittleEndian

func (r *offerRow) append(b []byte, shift uint32) []byte {
	b = le.AppendUint64(b, uint64(r.onDemand))
	b = le.AppendUint64(b, uint64(r.spot))
	b = le.AppendUint64(b, uint64(r.monthly))
	b = le.AppendUint64(b, math.Float64bits(r.gpuCount))
	b = le.AppendUint64(b, math.Float64bits(r.vram))
	b = le.AppendUint64(b, math.Float64bits(r.ram))
	b = le.AppendUint32(b, r.group)
	b = le.AppendUint32(b, r.name-shift)
	b = le.AppendUint32(b, r.nameLen)
	b = le.AppendUint32(b, uint32(r.line))
	b = le.AppendUint32(b, uint32(r.vcpus))
	return le.AppendUint32(b, uint32(r.zones))
}

func readRow(b []byte) offerRow {
	return offerRow{
		onDemand: Micros(le.Uint64(b)), spot: Micros(le.Uint64(b[8:])), monthly: Micros(le.Uint64(b[16:])),
		gpuCount: math.Float64frombits(le.Uint64(b[24:])), vram: math.Float64frombits(le.Uint64(b[32:])),
		ram: math.Float64frombits(le.Uint64(b[40:])), group: le.Uint32(b[48:]), name: le.Uint32(b[52:]),
		nameLen: le.Uint32(b[56:]), line: int32(le.Uint32(b[60:])), vcpus: int32(le.Uint32(b[64:])), zones: int32(le.Uint32(b[68:])),
	}
}

// AppendFrom reads offers that WriteFrom wrote, of at most size bytes, and
// adds them at the end. A layout that is damaged, larger than size or
// pointing outside itself is an error, and b is left as it was.
func (b *OffersBuilder) AppendFrom(r io.Reader, size int64) error {
	rows, groups := len(b.rows), len(b.groups)
	err := b.appendFrom(&byteReader{r: r}, size)
	if err != nil {
		b.Truncate(rows)
		for _, g := range b.groups[groups:] {
			delete(b.groupOf, g)
		}
		b.groups = b.groups[:groups]
	}
	return err
}

var errOffersLayout = errors.New("not a table of offers")

func (b *OffersBuilder) appendFrom(r *byteReader, size int64) error {
	head := make([]byte, len(offersMagic))
	if _, err := io.ReadFull(r, head); err != nil {
		return err
	}
	if string(head) != offersMagic {
		return errOffersLayout
	}
	var counts [3]uint64
	for i := range counts {
		n, err := binary.ReadUvarint(r)
		if err != nil {
			return err
		}
		counts[i] = n
	}
	groups, rows, names := counts[0], counts[1], counts[2]
	if groups > uint64(size) || rows > uint64(size)/offerRowSize || names > uint64(size) ||
		uint64(len(b.names))+names > math.MaxUint32 {
		return errOffersLayout
	}
	// The layout's groups are matched with b's: remap[i] is group i's place.
	remap := make([]uint32, 0, min(groups, 1<<10))
	for range groups {
		var s [8]string
		for i := range s {
			n, err := binary.ReadUvarint(r)
			if err != nil {
				return err
			}
			if n > uint64(size) {
				return errOffersLayout
			}
			buf := make([]byte, n)
			if _, err := io.ReadFull(r, buf); err != nil {
				return err
			}
			s[i] = string(buf)
		}
		remap = append(remap, b.groupIndex(offerGroup{provider: s[0], region: s[1], country: s[2], gpu: s[3],
			asOf: s[4], source: s[5], file: s[6], currency: Currency(s[7])}))
	}
	// The counts are bounded by size, so room for them is made at once.
	shift := uint32(len(b.names))
	b.Grow(int(rows))
	buf := make([]byte, 1024*offerRowSize)
	for left := int(rows); left > 0; {
		n := min(left, 1024)
		if _, err := io.ReadFull(r, buf[:n*offerRowSize]); err != nil {
			return err
		}
		for i := range n {
			row := readRow(buf[i*offerRowSize:])
			if uint64(row.group) >= groups || uint64(row.name)+uint64(row.nameLen) > names {
				return errOffersLayout
			}
			row.group, row.name = remap[row.group], row.name+shift
			b.rows = append(b.rows, row)
		}
		left -= n
	}
	at := len(b.names)
	b.names = slices.Grow(b.names, int(names))[:at+int(names)]
	_, err := io.ReadFull(r, b.names[at:])
	return err
}

// byteReader reads the varints of the layout from an io.Reader.
type byteReader struct{ r io.Reader }

func (c *byteReader) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *byteReader) ReadByte() (byte, error) {
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, err
	}
	return b[0], nil
}
