package catalog

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"io"
	"runtime"
	"strings"

	"github.com/gpuwarden/gpuwarden/internal/parallel"
)

// contentBlock is the size of the pieces a price file's content is hashed
// in for the parsed-catalog cache: each piece has its SHA-256, and the
// file's is the SHA-256 of those in order and of the size. The pieces hash
// on every core at once; one SHA-256 over a 70 MB file took 160 ms, the
// whole of a cached plan's reading.
const contentBlock = 1 << 20

// contentHasher computes the content hash of bytes written to it in order,
// the same as hashContent of a file holding them.
type contentHasher struct {
	block hash.Hash // the current piece's
	n     int       // bytes in the current piece
	size  int64
	sums  []byte // the finished pieces' hashes
}

func newContentHasher() *contentHasher { return &contentHasher{block: sha256.New()} }

func (h *contentHasher) Write(p []byte) (int, error) {
	written := len(p)
	for len(p) > 0 {
		take := min(len(p), contentBlock-h.n)
		h.block.Write(p[:take])
		h.n += take
		h.size += int64(take)
		p = p[take:]
		if h.n == contentBlock {
			h.sums = h.block.Sum(h.sums)
			h.block.Reset()
			h.n = 0
		}
	}
	return written, nil
}

// Sum is the content hash of what was written.
func (h *contentHasher) Sum() [sha256.Size]byte {
	sums := h.sums
	if h.n > 0 {
		sums = h.block.Sum(sums)
	}
	return combineContent(sums, h.size)
}

func combineContent(sums []byte, size int64) [sha256.Size]byte {
	return sha256.Sum256(binary.LittleEndian.AppendUint64(append([]byte(nil), sums...), uint64(size)))
}

// hashContent is the content hash of the size bytes of f, its pieces read
// and hashed on every core, each with one buffer.
func hashContent(f io.ReaderAt, size int64) ([sha256.Size]byte, error) {
	pieces := int((size + contentBlock - 1) / contentBlock)
	sums := make([]byte, pieces*sha256.Size)
	workers := min(runtime.GOMAXPROCS(0), pieces)
	errs := make([]error, workers)
	parallel.Do(workers, func(w int) {
		buf := make([]byte, contentBlock)
		for i := w; i < pieces; i += workers {
			piece := buf[:min(contentBlock, size-int64(i)*contentBlock)]
			if _, err := f.ReadAt(piece, int64(i)*contentBlock); err != nil {
				errs[w] = err
				return
			}
			sum := sha256.Sum256(piece)
			copy(sums[i*sha256.Size:], sum[:])
		}
	})
	for _, err := range errs {
		if err != nil {
			return [sha256.Size]byte{}, err
		}
	}
	return combineContent(sums, size), nil
}

// hashContentOf is hashContent of bytes in memory.
func hashContentOf(data string) [sha256.Size]byte {
	sum, _ := hashContent(strings.NewReader(data), int64(len(data))) // a strings.Reader has every byte asked for
	return sum
}
