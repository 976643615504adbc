package catalog

import (
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"runtime"
	"strings"
	"unsafe"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/parallel"
)

// streamChunk is how much of a big price file is held at once while it is
// read in chunks: a 70 MB file held whole was as large as the offers read
// from it.
var streamChunk = 8 << 20 // a variable for the tests, which cut smaller chunks

// errNotStreamed says a file is not one to read in chunks: another format,
// or a quote somewhere, after which a line break may sit inside a field.
var errNotStreamed = errors.New("not a file to read in chunks")

// streamOwnFile reads a big own-format price file in chunks, each cut after
// a line break and read a piece per processor, its offers added to dst as
// if read whole: the same offers, warnings and first error. It returns the
// file's content hash (hashContent) and size for the cache. errNotStreamed, with dst as it
// was, means the caller reads the file whole.
func streamOwnFile(name string, dst *gpuwarden.OffersBuilder) (warns []string, content [sha256.Size]byte, size int, err error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, content, 0, errNotStreamed // readPriceFile says why
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() < minSplit || fi.Size() > maxPriceFile {
		return nil, content, 0, errNotStreamed
	}
	first := dst.Len()
	// A chunk is an eighth of the file, at least a megabyte and at most
	// streamChunk: a 7 MB file read in one chunk held it whole.
	chunk := min(streamChunk, max(int(fi.Size())/8, min(streamChunk, 1<<20)))
	s := &ownStream{name: name, r: f, hash: newContentHasher(), buf: make([]byte, chunk), dst: dst}
	warns, err = s.read(fi.Size())
	if err != nil {
		dst.Truncate(first)
		return nil, content, 0, err
	}
	return warns, s.hash.Sum(), s.total, nil
}

// ownStream is one file being read in chunks.
type ownStream struct {
	name   string
	r      io.Reader
	hash   *contentHasher
	buf    []byte
	filled int  // bytes of buf that hold the file
	eof    bool // the file has no more after buf[:filled]
	total  int  // bytes read
	dst    *gpuwarden.OffersBuilder
}

func (s *ownStream) read(size int64) ([]string, error) {
	if err := s.fill(); err != nil {
		return nil, err
	}
	cur, err := s.cut()
	if err != nil {
		return nil, err
	}
	// The header is read from a copy of its line: the buffer is reused,
	// and the table's column names are substrings of what it reads.
	hdrEnd := strings.IndexByte(cur, '\n') + 1
	if hdrEnd == 0 || strings.IndexByte(cur, '"') >= 0 {
		return nil, errNotStreamed
	}
	t, err := openTable(s.name, strings.Clone(cur[:hdrEnd]))
	if err != nil || t.format != formatOwn {
		return nil, errNotStreamed // read whole, the error (if any) is reported as ever
	}
	rest, line := cur[hdrEnd:], t.r.numLine
	// The rows of the first chunk tell how many the file has, near enough
	// to make room once; once read, they tell how long the names are.
	estimate := 0
	if rows := strings.Count(rest, "\n"); rows > 0 {
		estimate = int(float64(size) / float64(len(rest)) * float64(rows) * 1.02)
		s.dst.Grow(estimate)
	}
	procs := runtime.GOMAXPROCS(0)
	pieces := make([]gpuwarden.OffersBuilder, procs)
	joined := &ownReader{}
	first := s.dst.Len()
	for chunk := 0; ; chunk++ {
		if strings.IndexByte(rest, '"') >= 0 {
			return nil, errNotStreamed
		}
		// The chunk is hashed while it is read, on a goroutine of its own:
		// hashing after reading was a fifth of a first plan of 100,000
		// offers.
		hashed := make(chan struct{})
		go func(chunk []byte) {
			s.hash.Write(chunk)
			close(hashed)
		}(s.buf[:len(cur)])
		err := readOwnPieces(t, splitAt(rest, line, procs), s.dst, pieces, joined)
		<-hashed
		if err != nil {
			return nil, err
		}
		if chunk == 0 {
			s.dst.Grow(estimate - (s.dst.Len() - first)) // the rows have room: this grows the names
		}
		line += strings.Count(rest, "\n")
		if s.eof && s.filled == len(cur) {
			return joined.warnings(), nil
		}
		// What follows the chunk's last line break moves to the front.
		s.filled = copy(s.buf, s.buf[len(cur):s.filled])
		if err := s.fill(); err != nil {
			return nil, err
		}
		if cur, err = s.cut(); err != nil {
			return nil, err
		}
		rest = cur
	}
}

// fill reads until buf is full or the file ends.
func (s *ownStream) fill() error {
	n, err := io.ReadFull(s.r, s.buf[s.filled:])
	s.filled += n
	s.total += n
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		s.eof = true
	case err != nil:
		return invalid(acceptedFormats, "%s: read: %v", s.name, err)
	}
	if s.total > maxPriceFile {
		return invalid("split the file by provider", "%s: larger than %d MiB, the most a price file may hold", s.name, maxPriceFile>>20)
	}
	return nil
}

// cut is the part of buf to read now, as a string that shares it: up to
// its last line break, or all of it at the end of the file; a full buffer
// without a line break (a row longer than a chunk) is doubled and read on.
func (s *ownStream) cut() (string, error) {
	n := s.filled
	for !s.eof {
		if i := strings.LastIndexByte(unsafe.String(unsafe.SliceData(s.buf), s.filled), '\n'); i >= 0 {
			n = i + 1
			break
		}
		s.buf = append(s.buf, make([]byte, len(s.buf))...)
		if err := s.fill(); err != nil {
			return "", err
		}
		n = s.filled
	}
	return unsafe.String(unsafe.SliceData(s.buf), n), nil
}

// splitAt cuts rows, which follow line lineBefore, into up to n pieces at
// line breaks.
func splitAt(rows string, lineBefore, n int) []rowChunk {
	if len(rows) < minSplit/4 {
		n = 1
	}
	chunks := make([]rowChunk, 0, n)
	for i := 0; i < n && rows != ""; i++ {
		cut := len(rows)
		if size := len(rows) / (n - i); i < n-1 {
			if j := strings.IndexByte(rows[size:], '\n'); j >= 0 {
				cut = size + j + 1
			}
		}
		breaks := strings.Count(rows[:cut], "\n")
		chunks = append(chunks, rowChunk{data: rows[:cut], lineBefore: lineBefore, lines: breaks + 1})
		lineBefore += breaks
		rows = rows[cut:]
	}
	return chunks
}

// readOwnPieces reads pieces of an own-format file at once, the first
// into dst and each other into its builder of pieces, and adds those to
// dst in order, with their
// warnings counted into joined: the first error in file order stops it.
func readOwnPieces(t *table, chunks []rowChunk, dst *gpuwarden.OffersBuilder, pieces []gpuwarden.OffersBuilder, joined *ownReader) error {
	readers := make([]*ownReader, len(chunks))
	errs := make([]error, len(chunks))
	parallel.Do(len(chunks), func(i int) {
		pt := *t // the header is shared, read only
		pt.r = &csvRows{data: chunks[i].data, numLine: chunks[i].lineBefore}
		r := newOwnReader(&pt)
		readers[i] = r
		// The first piece is read straight into dst, the others into
		// builders kept from chunk to chunk, then added after it.
		into := dst
		if i > 0 {
			into = &pieces[i]
			into.Reset()
			into.Grow(chunks[i].lines)
		}
		var o gpuwarden.Offer
		for {
			ok, err := pt.next()
			if err == nil && ok {
				o = gpuwarden.Offer{}
				err = r.row(&pt, &o)
			}
			if err != nil || !ok {
				errs[i] = err
				return
			}
			into.Append(&o)
		}
	})
	for i := range chunks {
		if errs[i] != nil {
			return errs[i]
		}
		if i > 0 {
			dst.AppendBuilder(&pieces[i])
		}
		joined.undated.join(readers[i].undated)
		joined.noCountry.join(readers[i].noCountry)
		joined.noVRAM.join(readers[i].noVRAM)
	}
	return nil
}
