package objstore

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

func TestOpen(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		target string
		// where is what the store's Where returns; "" expects an error.
		where  string
		bucket string
		prefix string
	}{
		{target: "/mnt/ckpt", where: "/mnt/ckpt"},
		{target: "/mnt/ckpt/", where: "/mnt/ckpt"},
		{target: "file:///mnt/ckpt", where: "/mnt/ckpt"},
		{target: "file://localhost/mnt/ckpt", where: "/mnt/ckpt"},
		{target: "rel/dir", where: filepath.Join(wd, "rel/dir")},
		{target: "s3://ckpt-bucket/runs/job-1/", where: "s3://ckpt-bucket/runs/job-1", bucket: "ckpt-bucket", prefix: "runs/job-1"},
		{target: "s3://ckpt-bucket", where: "s3://ckpt-bucket", bucket: "ckpt-bucket"},
		{target: "S3://ckpt-bucket/p", where: "s3://ckpt-bucket/p", bucket: "ckpt-bucket", prefix: "p"},
		{target: ""},
		{target: "   "},
		{target: "gs://bucket/prefix"},
		{target: "https://bucket.s3.amazonaws.com/prefix"},
		{target: "file://otherhost/mnt"},
		{target: "file://"},
		{target: "s3:///prefix"},
		{target: "s3://Bad_Bucket/prefix"},
		{target: "s3://ab/prefix"},
		{target: "s3://bucket/a//b"},
		{target: "s3://bucket/a/../b"},
		{target: "s3://bucket/p?versionId=1"},
		{target: "s3://key:secret@bucket/p"},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			store, err := Open(context.Background(), tt.target, Options{AccessKey: "k", SecretKey: "s"})
			if tt.where == "" {
				if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
					t.Fatalf("Open(%q) = %v, want an invalid error", tt.target, err)
				}
				if gpuwarden.ErrorHint(err) == "" {
					t.Errorf("Open(%q) error has no hint", tt.target)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open(%q): %v", tt.target, err)
			}
			if got := store.Where(); got != tt.where {
				t.Errorf("Where = %q, want %q", got, tt.where)
			}
			if tt.bucket != "" {
				s, ok := store.(*S3)
				if !ok {
					t.Fatalf("Open(%q) = %T, want *S3", tt.target, store)
				}
				if s.Bucket != tt.bucket || s.Prefix != tt.prefix {
					t.Errorf("bucket, prefix = %q, %q; want %q, %q", s.Bucket, s.Prefix, tt.bucket, tt.prefix)
				}
			} else if _, ok := store.(*Local); !ok {
				t.Errorf("Open(%q) = %T, want *Local", tt.target, store)
			}
		})
	}
}

func TestNewS3Endpoint(t *testing.T) {
	tests := []struct {
		opts Options
		want string // the client's endpoint URL
	}{
		{Options{}, "https://s3.amazonaws.com"},
		{Options{Endpoint: "minio.internal:9000", Insecure: true}, "http://minio.internal:9000"},
		{Options{Endpoint: "http://minio.internal:9000/"}, "http://minio.internal:9000"},
		{Options{Endpoint: "https://s3.eu-central-1.amazonaws.com", Insecure: true}, "https://s3.eu-central-1.amazonaws.com"},
	}
	for _, tt := range tests {
		s, err := NewS3("bucket", "", tt.opts)
		if err != nil {
			t.Fatalf("NewS3(%+v): %v", tt.opts, err)
		}
		if got := s.client.EndpointURL().String(); got != tt.want {
			t.Errorf("endpoint for %+v = %q, want %q", tt.opts, got, tt.want)
		}
	}
	_, err := NewS3("bucket", "", Options{Endpoint: "bad host:x:y"})
	if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid || !strings.Contains(err.Error(), "endpoint") {
		t.Errorf("NewS3 with a bad endpoint = %v, want invalid", err)
	}
}

func TestPartSize(t *testing.T) {
	tests := []struct{ set, want uint64 }{
		{0, DefaultPartSize},
		{1, minPartSize},
		{8 << 20, 8 << 20},
	}
	for _, tt := range tests {
		if got := (&S3{PartSize: tt.set}).partSize(); got != tt.want {
			t.Errorf("partSize(%d) = %d, want %d", tt.set, got, tt.want)
		}
	}
}

func TestPartSizeFor(t *testing.T) {
	s := &S3{PartSize: 64 << 20}
	tests := []struct {
		size int64
		want uint64
	}{
		{0, 64 << 20},
		{100 << 30, 64 << 20},
		{10000 * 64 << 20, 64 << 20},
		{10000*64<<20 + 1, 65 << 20},
		{2 << 40, 210 << 20},
	}
	for _, tt := range tests {
		got := s.partSizeFor(tt.size)
		if got != tt.want {
			t.Errorf("partSizeFor(%d) = %d MiB, want %d MiB", tt.size, got>>20, tt.want>>20)
		}
		if parts := (uint64(tt.size) + got - 1) / got; parts > maxParts {
			t.Errorf("partSizeFor(%d) needs %d parts", tt.size, parts)
		}
	}
}
