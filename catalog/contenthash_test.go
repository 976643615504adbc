package catalog

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestContentHashOneDefinition: the file's pieces hashed on every core,
// the bytes in memory, and the bytes written in uneven runs as the stream
// reads them all give one hash; another byte or another length gives
// another.
func TestContentHashOneDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{0, 1, contentBlock - 1, contentBlock, contentBlock + 1, 3*contentBlock + 17} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rng.IntN(256))
		}
		fromFile, err := hashContent(bytes.NewReader(data), int64(size))
		if err != nil {
			t.Fatal(err)
		}
		h := newContentHasher()
		for rest := data; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(300_000))
			h.Write(rest[:n])
			rest = rest[n:]
		}
		if fromMemory, streamed := hashContentOf(string(data)), h.Sum(); fromFile != fromMemory || fromFile != streamed {
			t.Errorf("size %d: file %x, memory %x, streamed %x", size, fromFile[:4], fromMemory[:4], streamed[:4])
		}
		if size > 0 {
			data[size/2] ^= 1
			if hashContentOf(string(data)) == fromFile {
				t.Errorf("size %d: a changed byte hashes the same", size)
			}
		}
		if hashContentOf(string(append(data, 0))) == fromFile {
			t.Errorf("size %d: a longer file hashes the same", size)
		}
	}
}
