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

	"github.com/gpuwarden/gpuwarden/internal/manifest"
	"github.com/minio/minio-go/v7"
)

// BenchmarkMinIOSync measures how fast gpuwarden's Push and Pull move a
// checkpoint of 4 files × 64 MiB to and from a real MinIO on loopback, and,
// in the same run over the same bytes, the ceiling of plain minio-go
// PutObject and GetObject (no HEADs, no hashing, no manifest, no read back,
// no fsync), so each figure reads as a fraction of what the client library
// itself reaches. MB is 10^6 bytes; every iteration pushes under a new name,
// because a second push of the same checkpoint would send nothing.
func BenchmarkMinIOSync(b *testing.B) {
	const files, fileSize = 4, 64 << 20
	ctx := context.Background()
	m := startMinIO(b)
	s := openMinIO(b, m, "bench", Options{})

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
	buf = nil
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

		raw := fmt.Sprintf("raw-%d/", iter)
		start = time.Now()
		for _, f := range cp.Files {
			in, err := os.Open(filepath.Join(src, f.Path))
			if err != nil {
				b.Fatal(err)
			}
			// The same part size as Push, so both send the same requests.
			_, err = s.client.PutObject(ctx, s.Bucket, s.base()+raw+f.Path, in, f.Size, minio.PutObjectOptions{PartSize: s.partSizeFor(f.Size)})
			in.Close()
			if err != nil {
				b.Fatal(err)
			}
		}
		rawPut += time.Since(start)

		rawDir := filepath.Join(out, "raw")
		if err := os.MkdirAll(rawDir, 0o755); err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		for _, f := range cp.Files {
			if err := copyObject(ctx, s, s.base()+raw+f.Path, filepath.Join(rawDir, f.Path)); err != nil {
				b.Fatal(err)
			}
		}
		rawGet += time.Since(start)

		// Clean up outside the figures, so MinIO's disk and the pull
		// folder do not grow with the iterations.
		b.StopTimer()
		if err := s.Delete(ctx, c.Name); err != nil {
			b.Fatal(err)
		}
		for obj := range s.client.ListObjects(ctx, s.Bucket, minio.ListObjectsOptions{Prefix: s.base() + raw, Recursive: true}) {
			if obj.Err != nil {
				b.Fatal(obj.Err)
			}
			if err := s.client.RemoveObject(ctx, s.Bucket, obj.Key, minio.RemoveObjectOptions{}); err != nil {
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
}

// copyObject downloads key into the file at dst with nothing but minio-go.
func copyObject(ctx context.Context, s *S3, key, dst string) error {
	obj, err := s.client.GetObject(ctx, s.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return err
	}
	defer obj.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, obj); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
