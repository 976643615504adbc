package objstore

import (
	"context"
	"os"
	"testing"

	"github.com/minio/minio-go/v7"
)

// BenchmarkMinIOSync runs benchSync on a real MinIO on loopback, with 4
// files × 64 MiB (the figures in docs/benchmarks.md), against plain
// minio-go PutObject (the part size Push uses) and GetObject.
func BenchmarkMinIOSync(b *testing.B) {
	s := openMinIO(b, startMinIO(b), "bench", Options{})
	benchSync(b, &s.blobStore, 64<<20, rawClient{
		put: func(ctx context.Context, key, src string, size int64) error {
			in, err := os.Open(src)
			if err != nil {
				return err
			}
			defer in.Close()
			_, err = s.client.PutObject(ctx, s.Bucket, key, in, size, minio.PutObjectOptions{PartSize: s.partSizeFor(size)})
			return err
		},
		get: func(ctx context.Context, key, dst string) error {
			obj, err := s.client.GetObject(ctx, s.Bucket, key, minio.GetObjectOptions{})
			if err != nil {
				return err
			}
			defer obj.Close()
			return writeAll(dst, obj)
		},
	})
}
