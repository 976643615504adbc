package catalog

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/parallel"
)

// The parsed-catalog cache keeps what a big price file parsed to in
// DATA_DIR/cache, named by a hash of the file's content, of the name and
// provider it was read as (offers carry both) and of the gpuwarden binary
// that parsed it: an unchanged file is not parsed twice, and a changed
// file, or a new gpuwarden, is never served an old parse.
const (
	cacheMagic = "gpuwarden parsed catalog\n"
	// cacheVersion changes with the cache's layout.
	cacheVersion = 1
	// minCachedFile is the smallest file worth caching: below a megabyte
	// (some 14,000 rows) parsing takes under 5 ms.
	minCachedFile = 1 << 20
	// cacheBlock is how many offers a block of the layout holds; blocks
	// are written and read in parallel.
	cacheBlock = 1 << 14
	// maxCacheFiles is how many parsed catalogs are kept, the least
	// recently used going first.
	maxCacheFiles = 8
	// staleTempAge is the age past which a temporary file of an
	// interrupted write is removed.
	staleTempAge = time.Hour
	// minEncodedOffer is the fewest bytes an offer takes in the cache
	// (eight string indexes, a length, three floats, six varints), which
	// bounds what a damaged count can make the reader allocate.
	minEncodedOffer = 8 + 1 + 3*8 + 6
)

// crcTable is made on first use, not at start: the agent links this
// package too, and never reads a cache.
var crcTable = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

// cacheFileKind tells the cache's own files by name: an entry is
// catalog-<64 hex>.bin, a temporary one that name with .<pid>.tmp after it.
// (Checked by hand, not by a regular expression compiled at start: the
// agent links this package too, and a {64} repeat costs its memory.)
func cacheFileKind(name string) (entry, temp bool) {
	hexPart, rest, ok := strings.Cut(strings.TrimPrefix(name, "catalog-"), ".bin")
	if !ok || len(hexPart) != 64 || !strings.HasPrefix(name, "catalog-") || strings.Trim(hexPart, "0123456789abcdef") != "" {
		return false, false
	}
	if rest == "" {
		return true, false
	}
	pid, ok := strings.CutSuffix(strings.TrimPrefix(rest, "."), ".tmp")
	return false, ok && strings.HasPrefix(rest, ".") && pid != "" && strings.Trim(pid, "0123456789") == ""
}

// parseCache is the cache in one folder; the zero value caches nothing.
type parseCache struct{ dir string }

// newParseCache is the cache in dir, or none: when dir is "" or is not a
// real directory (absent is fine: it is made on the first write), so that
// the cache never follows a link out of DATA_DIR.
func newParseCache(dir string) parseCache {
	if dir == "" {
		return parseCache{}
	}
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) || err == nil && fi.IsDir() {
		return parseCache{dir: dir}
	}
	return parseCache{}
}

// binaryIdentity names the running binary by its path, size and
// modification time, so that a rebuilt or upgraded gpuwarden, whose
// readers may parse differently, does not read its predecessor's cache.
// ok is false when the binary cannot be found: then nothing is cached.
var binaryIdentity = sync.OnceValues(func() (string, bool) {
	exe, err := os.Executable()
	if err != nil {
		return "", false
	}
	fi, err := os.Stat(exe)
	if err != nil {
		return "", false
	}
	return fmt.Sprintf("%s %d %d", exe, fi.Size(), fi.ModTime().UnixNano()), true
})

// key names the cache entry of a file's content read as name and provider.
func (c parseCache) key(name, provider string, content [sha256.Size]byte) (string, bool) {
	id, ok := binaryIdentity()
	if !ok {
		return "", false
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s%d\x00%s\x00%s\x00%s\x00", cacheMagic, cacheVersion, id, provider, name)
	h.Write(content[:])
	return hex.EncodeToString(h.Sum(nil)), true
}

// readFile reads a user's price file through the cache, its offers after
// before (as parseOffers): the file is hashed first, and parsed only when
// no entry has its content.
func (c parseCache) readFile(name string, before []gpuwarden.Offer) ([]gpuwarden.Offer, []string, error) {
	if content, size, ok := c.hashFile(name); ok {
		if offers, warns, ok := c.lookup(name, "", content, size, before); ok {
			return offers, warns, nil
		}
	}
	data, err := readPriceFile(name)
	if err != nil {
		return nil, nil, err
	}
	offers, warns, err := parseOffers(name, "", data, before)
	if err != nil {
		return nil, nil, err // a bad file is not cached: it is read, and reported, anew
	}
	// The content parsed is hashed again, since the file may have changed
	// since it was first hashed.
	c.store(name, "", sha256.Sum256(unsafe.Slice(unsafe.StringData(data), len(data))), len(data), offers[len(before):], warns)
	return offers, warns, nil
}

// hashFile hashes a file big enough to be cached, reading it in pieces:
// on a hit, the file is never held whole. ok is false for one too small,
// or with no cache to look in.
func (c parseCache) hashFile(name string) (content [sha256.Size]byte, size int, ok bool) {
	if c.dir == "" {
		return content, 0, false
	}
	f, err := os.Open(name)
	if err != nil {
		return content, 0, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() < minCachedFile || fi.Size() > maxPriceFile {
		return content, 0, false
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return content, 0, false
	}
	h.Sum(content[:0])
	return content, int(n), true
}

func (c parseCache) path(key string) string { return filepath.Join(c.dir, "catalog-"+key+".bin") }

// lookup returns the cached parse of a file of size bytes with this
// content, if there is one, its offers after before. Any fault (a damaged
// or foreign file) is a miss, logged.
func (c parseCache) lookup(name, provider string, content [sha256.Size]byte, size int, before []gpuwarden.Offer) ([]gpuwarden.Offer, []string, bool) {
	if size < minCachedFile || c.dir == "" {
		return nil, nil, false
	}
	key, ok := c.key(name, provider, content)
	if !ok {
		return nil, nil, false
	}
	p := c.path(key)
	offers, warns, err := readCacheFile(p, key, before)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			slog.Debug("catalog cache: entry not used", "file", p, "err", err)
		}
		return nil, nil, false
	}
	now := time.Now()
	_ = os.Chtimes(p, now, now) // most recently used
	return offers, warns, true
}

// store keeps the parse of a file of size bytes with this content, read as
// name and provider. A cache that cannot be written is logged and left:
// the parse is what matters.
func (c parseCache) store(name, provider string, content [sha256.Size]byte, size int, offers []gpuwarden.Offer, warns []string) {
	if size < minCachedFile || c.dir == "" {
		return
	}
	key, ok := c.key(name, provider, content)
	if !ok {
		return
	}
	if err := c.write(key, encodeCache(key, offers, warns)); err != nil {
		slog.Debug("catalog cache: not stored", "dir", c.dir, "err", err)
	}
}

func (c parseCache) write(key string, pieces [][]byte) error {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	final := c.path(key)
	tmp := final + "." + strconv.Itoa(os.Getpid()) + ".tmp"
	// O_EXCL: a link planted at the temporary name is refused, not followed.
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	for _, b := range pieces {
		if _, err = f.Write(b); err != nil {
			break
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	c.evict()
	return nil
}

// evict keeps the maxCacheFiles most recently used entries and removes
// temporary files that an interrupted write left. It removes only regular
// files with the names this cache gives, never what a link points to.
func (c parseCache) evict() {
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	type entry struct {
		name string
		used time.Time
	}
	var kept []entry
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		isEntry, isTemp := cacheFileKind(e.Name())
		switch {
		case isEntry:
			kept = append(kept, entry{e.Name(), fi.ModTime()})
		case isTemp && time.Since(fi.ModTime()) > staleTempAge:
			_ = os.Remove(filepath.Join(c.dir, e.Name()))
		}
	}
	if len(kept) <= maxCacheFiles {
		return
	}
	slices.SortFunc(kept, func(a, b entry) int { return b.used.Compare(a.used) })
	for _, e := range kept[maxCacheFiles:] {
		_ = os.Remove(filepath.Join(c.dir, e.name))
	}
}

// encodeCache lays out a parse: magic, version, key, the warnings, the
// offer count, each block's length, the blocks, and a CRC-32C of all that;
// in pieces, written one after the other, since joining them would hold
// the entry twice.
// A block holds cacheBlock offers and a table of the strings they use
// (the instance name in line, as it is often one per row; numbers as
// varints and floats), so that blocks are written and read a share per
// processor.
func encodeCache(key string, offers []gpuwarden.Offer, warns []string) [][]byte {
	blocks := make([][]byte, (len(offers)+cacheBlock-1)/cacheBlock)
	parallel.Do(len(blocks), func(i int) {
		blocks[i] = encodeBlock(offers[i*cacheBlock : min((i+1)*cacheBlock, len(offers))])
	})
	var b []byte
	b = append(b, cacheMagic...)
	b = binary.AppendUvarint(b, cacheVersion)
	b = append(b, key...)
	b = binary.AppendUvarint(b, uint64(len(warns)))
	for _, w := range warns {
		b = binary.AppendUvarint(b, uint64(len(w)))
		b = append(b, w...)
	}
	b = binary.AppendUvarint(b, uint64(len(offers)))
	for _, bl := range blocks {
		b = binary.AppendUvarint(b, uint64(len(bl)))
	}
	pieces := append([][]byte{b}, blocks...)
	var crc uint32
	for _, p := range pieces {
		crc = crc32.Update(crc, crcTable(), p)
	}
	return append(pieces, binary.LittleEndian.AppendUint32(nil, crc))
}

// encodeBlock writes a block: its string table, then its offers.
func encodeBlock(offers []gpuwarden.Offer) []byte {
	var (
		ids  = map[string]uint64{}
		strs []string
		// last holds each field's previous string and index: neighbouring
		// rows mostly share a provider, a date, a source, and a map lookup
		// per field was most of the encoding.
		last [8]struct {
			s  string
			id uint64
		}
	)
	body := make([]byte, 0, len(offers)*(minEncodedOffer+16))
	for i := range offers {
		o := &offers[i]
		for f, s := range [...]string{o.Provider, o.Region, o.Country, o.GPU, string(o.Currency), o.AsOf, o.Source, o.Origin.File} {
			if s != last[f].s || i == 0 {
				id, ok := ids[s]
				if !ok {
					id = uint64(len(strs))
					ids[s] = id
					strs = append(strs, s)
				}
				last[f].s, last[f].id = s, id
			}
			body = binary.AppendUvarint(body, last[f].id)
		}
		body = binary.AppendUvarint(body, uint64(len(o.Instance)))
		body = append(body, o.Instance...)
		body = binary.LittleEndian.AppendUint64(body, math.Float64bits(o.GPUCount))
		body = binary.LittleEndian.AppendUint64(body, math.Float64bits(o.VRAMGBPerGPU))
		body = binary.LittleEndian.AppendUint64(body, math.Float64bits(o.RAMGB))
		body = binary.AppendVarint(body, int64(o.VCPUs))
		body = binary.AppendVarint(body, int64(o.OnDemandHourly))
		body = binary.AppendVarint(body, int64(o.SpotHourly))
		body = binary.AppendVarint(body, int64(o.Monthly))
		body = binary.AppendVarint(body, int64(o.Zones))
		body = binary.AppendVarint(body, int64(o.Origin.Line))
	}
	var b []byte
	b = binary.AppendUvarint(b, uint64(len(strs)))
	for _, s := range strs {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return append(b, body...)
}

var errCacheDamaged = errors.New("damaged cache entry")

// readCacheFile reads an entry written by encodeCache. The strings of the
// offers are substrings of the file's bytes, read once and never changed.
func readCacheFile(path, key string, before []gpuwarden.Offer) ([]gpuwarden.Offer, []string, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > 2*maxPriceFile {
		return nil, nil, fmt.Errorf("%s: not a cache entry", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	b := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, nil, err
	}
	return decodeCache(b, key, before)
}

// decodeCache reads encodeCache's layout, its offers after before; b must
// not change afterwards.
func decodeCache(b []byte, key string, before []gpuwarden.Offer) ([]gpuwarden.Offer, []string, error) {
	if len(b) < 4 || binary.LittleEndian.Uint32(b[len(b)-4:]) != crc32.Checksum(b[:len(b)-4], crcTable()) {
		return nil, nil, errCacheDamaged
	}
	r := cacheReader{b: b[:len(b)-4]}
	if !r.literal(cacheMagic) || r.uvarint() != cacheVersion || !r.literal(key) {
		return nil, nil, fmt.Errorf("%w: another version or key", errCacheDamaged)
	}
	warns := make([]string, r.count(1))
	for i := range warns {
		warns[i] = r.text(int(r.count(1)))
	}
	all := make([]gpuwarden.Offer, len(before)+int(r.count(minEncodedOffer)))
	adviseHugePages(all)
	copy(all, before)
	offers := all[len(before):]
	blocks := make([]cacheReader, (len(offers)+cacheBlock-1)/cacheBlock)
	sizes := make([]int, len(blocks))
	for i := range sizes {
		sizes[i] = int(r.count(1))
	}
	for i := range blocks {
		blocks[i].b = r.raw(sizes[i])
	}
	if r.err != nil || len(r.b) != 0 {
		return nil, nil, errCacheDamaged
	}
	// Writing a million offers is most of a cached read, and it splits.
	parallel.Do(len(blocks), func(i int) {
		blocks[i].block(offers[i*cacheBlock : min((i+1)*cacheBlock, len(offers))])
	})
	for i := range blocks {
		if blocks[i].err != nil || len(blocks[i].b) != 0 {
			return nil, nil, errCacheDamaged
		}
	}
	return all, warns, nil
}

// block reads a block into out, which has room for exactly its offers.
func (r *cacheReader) block(out []gpuwarden.Offer) {
	strs := make([]string, r.count(1))
	for i := range strs {
		strs[i] = r.text(int(r.count(1)))
	}
	for i := range out {
		o := &out[i]
		o.Provider, o.Region, o.Country, o.GPU = r.str(strs), r.str(strs), r.str(strs), r.str(strs)
		o.Currency, o.AsOf, o.Source, o.Origin.File = gpuwarden.Currency(r.str(strs)), r.str(strs), r.str(strs), r.str(strs)
		o.Instance = r.text(int(r.count(1)))
		o.GPUCount, o.VRAMGBPerGPU, o.RAMGB = r.float(), r.float(), r.float()
		o.VCPUs = int(r.varint())
		o.OnDemandHourly, o.SpotHourly, o.Monthly = gpuwarden.Micros(r.varint()), gpuwarden.Micros(r.varint()), gpuwarden.Micros(r.varint())
		o.Zones, o.Origin.Line = int(r.varint()), int(r.varint())
	}
}

// cacheReader reads the cache's layout; the first fault sticks in err and
// every later read returns zero, so a damaged entry cannot panic or loop.
type cacheReader struct {
	b   []byte
	err error
}

func (r *cacheReader) fail() { r.err, r.b = errCacheDamaged, nil }

func (r *cacheReader) literal(s string) bool {
	if len(r.b) < len(s) || string(r.b[:len(s)]) != s {
		r.fail()
		return false
	}
	r.b = r.b[len(s):]
	return true
}

func (r *cacheReader) uvarint() uint64 { return readVarint(r, binary.Uvarint) }

func (r *cacheReader) varint() int64 { return readVarint(r, binary.Varint) }

func readVarint[T uint64 | int64](r *cacheReader, decode func([]byte) (T, int)) T {
	v, n := decode(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a count of items of at least each bytes, refusing one that
// the bytes left cannot hold.
func (r *cacheReader) count(each int) uint64 {
	n := r.uvarint()
	if n > uint64(len(r.b)/each) {
		r.fail()
		return 0
	}
	return n
}

func (r *cacheReader) fixed() uint64 {
	if len(r.b) < 8 {
		r.fail()
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *cacheReader) float() float64 { return math.Float64frombits(r.fixed()) }

// raw returns the next n bytes.
func (r *cacheReader) raw(n int) []byte {
	if n > len(r.b) {
		r.fail()
		return nil
	}
	b := r.b[:n:n]
	r.b = r.b[n:]
	return b
}

// text returns the next n bytes as a string that shares them.
func (r *cacheReader) text(n int) string {
	b := r.raw(n)
	return unsafe.String(unsafe.SliceData(b), len(b))
}

func (r *cacheReader) str(strs []string) string {
	i := r.uvarint()
	if i >= uint64(len(strs)) {
		r.fail()
		return ""
	}
	return strs[i]
}
