package objstore

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/gpuwarden/gpuwarden/internal/manifest"
)

// rawClient moves one file with nothing but a cloud's official client, the
// same requests the store makes (chunk or block size, concurrency), without
// hashing, HEADs, manifest or read back: the ceiling the store is a
// fraction of.
type rawClient struct {
	put func(ctx context.Context, key, src string, size int64) error
	get func(ctx context.Context, key, dst string) error
}

// benchSync measures Push and Pull of 4 files of fileSize bytes against the
// raw client in the same run over the same bytes, and reports both and
// their ratio. MB is 10^6 bytes; every iteration pushes under a new name,
// because a second push of the same checkpoint would send nothing.
func benchSync(b *testing.B, s *blobStore, fileSize int, raw rawClient) {
	const files = 4
	ctx := context.Background()
	src := filepath.Join(b.TempDir(), "000000-bench")
	if err := os.MkdirAll(src, 0o755); err != nil {
		b.Fatal(err)
	}
	rng := rand.NewChaCha8([32]byte{1})
	buf := make([]byte, fileSize)
	for i := range files {
		rng.Read(buf)
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("shard-%d.bin", i)), buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	cp, err := manifest.Build(src)
	if err != nil {
		b.Fatal(err)
	}
	total := float64(cp.Bytes)
	out := b.TempDir()

	var push, pull, rawPut, rawGet time.Duration
	iter := 0
	for b.Loop() {
		iter++
		c := cp
		c.Name = fmt.Sprintf("%06d-bench", iter)
		start := time.Now()
		if err := s.Push(ctx, c); err != nil {
			b.Fatal(err)
		}
		push += time.Since(start)

		start = time.Now()
		pulled, err := s.Pull(ctx, c.Name, out)
		if err != nil {
			b.Fatal(err)
		}
		pull += time.Since(start)

		rawKeys := make([]string, len(cp.Files))
		start = time.Now()
		for i, f := range cp.Files {
			rawKeys[i] = s.base() + fmt.Sprintf("raw-%d/", iter) + f.Path
			if err := raw.put(ctx, rawKeys[i], filepath.Join(src, f.Path), f.Size); err != nil {
				b.Fatal(err)
			}
		}
		rawPut += time.Since(start)

		rawDir := filepath.Join(out, "raw")
		if err := os.MkdirAll(rawDir, 0o755); err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		for i, f := range cp.Files {
			if err := raw.get(ctx, rawKeys[i], filepath.Join(rawDir, f.Path)); err != nil {
				b.Fatal(err)
			}
		}
		rawGet += time.Since(start)

		// Clean up outside the figures, so the emulator and the pull
		// folder do not grow with the iterations.
		b.StopTimer()
		if err := s.Delete(ctx, c.Name); err != nil {
			b.Fatal(err)
		}
		for _, k := range rawKeys {
			if err := s.api.remove(ctx, k); err != nil {
				b.Fatal(err)
			}
		}
		if err := os.RemoveAll(pulled.Path); err != nil {
			b.Fatal(err)
		}
		if err := os.RemoveAll(rawDir); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	mbps := func(d time.Duration) float64 { return total * float64(iter) / 1e6 / d.Seconds() }
	b.ReportMetric(mbps(push), "upload-MB/s")
	b.ReportMetric(mbps(pull), "restore-MB/s")
	b.ReportMetric(mbps(rawPut), "raw-put-MB/s")
	b.ReportMetric(mbps(rawGet), "raw-get-MB/s")
	b.ReportMetric(rawPut.Seconds()/push.Seconds(), "upload/raw")
	b.ReportMetric(rawGet.Seconds()/pull.Seconds(), "restore/raw")
}

// BenchmarkGCSSync runs benchSync on fake-gcs-server, 4 files × 32 MiB.
func BenchmarkGCSSync(b *testing.B) {
	startGCS(b, "EUROPE-WEST3")
	s := openGCS(b, "bench", Options{})
	bucket := rawGCS(b).Bucket(s.Bucket)
	benchSync(b, &s.blobStore, 32<<20, rawClient{
		put: func(ctx context.Context, key, src string, size int64) error {
			in, err := os.Open(src)
			if err != nil {
				return err
			}
			defer in.Close()
			w := bucket.Object(key).NewWriter(ctx)
			// One request, as gpuwarden's upload makes it.
			w.ChunkSize = 0
			if _, err := io.Copy(w, in); err != nil {
				return err
			}
			return w.Close()
		},
		get: func(ctx context.Context, key, dst string) error {
			r, err := bucket.Object(key).NewReader(ctx)
			if err != nil {
				return err
			}
			defer r.Close()
			return writeAll(dst, r)
		},
	})
}

// BenchmarkAzureSync runs benchSync on Azurite, 4 files × 32 MiB.
func BenchmarkAzureSync(b *testing.B) {
	startAzurite(b)
	s := openAzure(b, "bench", Options{})
	benchSync(b, &s.blobStore, 32<<20, rawClient{
		put: func(ctx context.Context, key, src string, size int64) error {
			in, err := os.Open(src)
			if err != nil {
				return err
			}
			defer in.Close()
			_, err = s.client.UploadStream(ctx, s.Container, key, in, &azblob.UploadStreamOptions{
				BlockSize: azureBlockSizeFor(size), Concurrency: uploadThreads,
			})
			return err
		},
		get: func(ctx context.Context, key, dst string) error {
			res, err := s.client.DownloadStream(ctx, s.Container, key, nil)
			if err != nil {
				return err
			}
			defer res.Body.Close()
			return writeAll(dst, res.Body)
		},
	})
}

// writeAll copies r into a new file at dst.
func writeAll(dst string, r io.Reader) error {
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, r); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
