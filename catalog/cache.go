package catalog

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// The parsed-catalog cache keeps what a big price file parsed to in
// DATA_DIR/cache, named by a hash of the file's content, of the name and
// provider it was read as (offers carry both) and of the gpuwarden binary
// that parsed it: an unchanged file is not parsed twice, and a changed
// file, or a new gpuwarden, is never served an old parse.
const (
	cacheMagic = "gpuwarden parsed catalog\n"
	// cacheVersion changes with the cache's layout.
	cacheVersion = 2
	// minCachedFile is the smallest file worth caching: below a megabyte
	// (some 14,000 rows) parsing takes under 5 ms.
	minCachedFile = 1 << 20
	// maxCacheFiles is how many parsed catalogs are kept, the least
	// recently used going first.
	maxCacheFiles = 8
	// staleTempAge is the age past which a temporary file of an
	// interrupted write is removed.
	staleTempAge = time.Hour
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

// readFile reads a user's price file through the cache, its offers added
// to dst: the file is hashed first, and parsed only when no entry has its
// content; a big one of our own format in chunks (streamOwnFile), any
// other whole.
func (c parseCache) readFile(name string, dst *gpuwarden.OffersBuilder) ([]string, error) {
	if content, size, ok := c.hashFile(name); ok {
		if warns, ok := c.lookup(name, "", content, size, dst); ok {
			return warns, nil
		}
	}
	first := dst.Len()
	warns, content, size, err := streamOwnFile(name, dst)
	if err == nil {
		c.store(name, "", content, size, dst, first, warns)
		return warns, nil
	}
	if !errors.Is(err, errNotStreamed) {
		return nil, err
	}
	data, err := readPriceFile(name)
	if err != nil {
		return nil, err
	}
	warns, err = parseOffers(name, "", data, dst)
	if err != nil {
		return nil, err // a bad file is not cached: it is read, and reported, anew
	}
	// The content parsed is hashed again, since the file may have changed
	// since it was first hashed.
	c.store(name, "", hashContentOf(data), len(data), dst, first, warns)
	return warns, nil
}

// hashFile hashes a file big enough to be cached, reading it in pieces on
// every core (hashContent): on a hit, the file is never held whole. ok is
// false for one too small, or with no cache to look in.
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
	content, err = hashContent(f, fi.Size())
	if err != nil {
		return content, 0, false
	}
	return content, int(fi.Size()), true
}

func (c parseCache) path(key string) string { return filepath.Join(c.dir, "catalog-"+key+".bin") }

// lookup adds the cached parse of a file of size bytes with this content
// to dst, if there is one. Any fault (a damaged or foreign file) is a
// miss, logged, and leaves dst as it was.
func (c parseCache) lookup(name, provider string, content [sha256.Size]byte, size int, dst *gpuwarden.OffersBuilder) ([]string, bool) {
	if size < minCachedFile {
		return nil, false
	}
	return c.lookupEntry(name, provider, content, dst)
}

// lookupEntry is lookup whatever the size: for the embedded snapshot,
// which is small but parsed from gzip by the slower SkyPilot importer.
func (c parseCache) lookupEntry(name, provider string, content [sha256.Size]byte, dst *gpuwarden.OffersBuilder) ([]string, bool) {
	if c.dir == "" {
		return nil, false
	}
	key, ok := c.key(name, provider, content)
	if !ok {
		return nil, false
	}
	p := c.path(key)
	warns, err := readCacheFile(p, key, dst)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			slog.Debug("catalog cache: entry not used", "file", p, "err", err)
		}
		return nil, false
	}
	now := time.Now()
	_ = os.Chtimes(p, now, now) // most recently used
	return warns, true
}

// store keeps the parse of a file of size bytes with this content, read as
// name and provider: the offers from first on. A cache that cannot be written is logged and left:
// the parse is what matters.
func (c parseCache) store(name, provider string, content [sha256.Size]byte, size int, offers *gpuwarden.OffersBuilder, first int, warns []string) {
	if size < minCachedFile {
		return
	}
	c.storeEntry(name, provider, content, offers, first, warns)
}

// storeEntry is store whatever the size (see lookupEntry).
func (c parseCache) storeEntry(name, provider string, content [sha256.Size]byte, offers *gpuwarden.OffersBuilder, first int, warns []string) {
	if c.dir == "" {
		return
	}
	key, ok := c.key(name, provider, content)
	if !ok {
		return
	}
	if err := c.write(key, func(w io.Writer) error { return encodeCache(w, key, offers, first, warns) }); err != nil {
		slog.Debug("catalog cache: not stored", "dir", c.dir, "err", err)
	}
}

func (c parseCache) write(key string, encode func(io.Writer) error) error {
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
	err = encode(f)
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
// offers from first on as gpuwarden.OffersBuilder writes them, and a
// CRC-32C of all that.
func encodeCache(w io.Writer, key string, offers *gpuwarden.OffersBuilder, first int, warns []string) error {
	var b []byte
	b = append(b, cacheMagic...)
	b = binary.AppendUvarint(b, cacheVersion)
	b = append(b, key...)
	b = binary.AppendUvarint(b, uint64(len(warns)))
	for _, wn := range warns {
		b = binary.AppendUvarint(b, uint64(len(wn)))
		b = append(b, wn...)
	}
	crc := crc32.New(crcTable())
	both := io.MultiWriter(w, crc)
	if _, err := both.Write(b); err != nil {
		return err
	}
	if err := offers.WriteFrom(both, first); err != nil {
		return err
	}
	_, err := w.Write(binary.LittleEndian.AppendUint32(nil, crc.Sum32()))
	return err
}

var errCacheDamaged = errors.New("damaged cache entry")

// readCacheFile reads an entry written by encodeCache, its offers added to
// dst; on an error dst is left as it was.
func readCacheFile(path, key string, dst *gpuwarden.OffersBuilder) ([]string, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > 2*maxPriceFile {
		return nil, fmt.Errorf("%s: not a cache entry", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return decodeCache(f, fi.Size(), key, dst)
}

// decodeCache reads encodeCache's layout of size bytes, its offers added
// to dst; on an error dst is left as it was.
func decodeCache(r io.Reader, size int64, key string, dst *gpuwarden.OffersBuilder) ([]string, error) {
	if size < 4 {
		return nil, errCacheDamaged
	}
	crc := crc32.New(crcTable())
	body := bufio.NewReaderSize(io.TeeReader(io.LimitReader(r, size-4), crc), 1<<16)
	if !readLiteral(body, cacheMagic) {
		return nil, fmt.Errorf("%w: not a cache entry", errCacheDamaged)
	}
	if v, err := binary.ReadUvarint(body); err != nil || v != cacheVersion || !readLiteral(body, key) {
		return nil, fmt.Errorf("%w: another version or key", errCacheDamaged)
	}
	n, err := binary.ReadUvarint(body)
	if err != nil || n > uint64(size) {
		return nil, errCacheDamaged
	}
	warns := make([]string, 0, min(n, 64))
	for range n {
		l, err := binary.ReadUvarint(body)
		if err != nil || l > uint64(size) {
			return nil, errCacheDamaged
		}
		w := make([]byte, l)
		if _, err := io.ReadFull(body, w); err != nil {
			return nil, errCacheDamaged
		}
		warns = append(warns, string(w))
	}
	first := dst.Len()
	if err := dst.AppendFrom(body, size); err != nil {
		return nil, fmt.Errorf("%w: %v", errCacheDamaged, err)
	}
	var sum [4]byte
	if _, err := body.Peek(1); err != io.EOF {
		dst.Truncate(first)
		return nil, fmt.Errorf("%w: bytes after the offers", errCacheDamaged)
	}
	if _, err := io.ReadFull(r, sum[:]); err != nil || binary.LittleEndian.Uint32(sum[:]) != crc.Sum32() {
		dst.Truncate(first)
		return nil, fmt.Errorf("%w: checksum", errCacheDamaged)
	}
	return warns, nil
}

// readLiteral reads len(s) bytes and reports whether they are s.
func readLiteral(r io.Reader, s string) bool {
	b := make([]byte, len(s))
	_, err := io.ReadFull(r, b)
	return err == nil && string(b) == s
}
