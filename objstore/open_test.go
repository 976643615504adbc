package objstore

import (
	"context"
	"fmt"
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
		{target: "gs://ckpt_bucket/runs/job-1/", where: "gs://ckpt_bucket/runs/job-1", bucket: "ckpt_bucket", prefix: "runs/job-1"},
		{target: "GS://ckpt-bucket", where: "gs://ckpt-bucket", bucket: "ckpt-bucket"},
		{target: "az://acct1/ckpts/runs/job-1", where: "az://acct1/ckpts/runs/job-1", bucket: "ckpts", prefix: "runs/job-1"},
		{target: "az://acct1/ckpts", where: "az://acct1/ckpts", bucket: "ckpts"},
		{target: "gs://Bad/prefix"},
		{target: "gs://bucket:443/prefix"},
		{target: "gs://bucket/a/../b"},
		{target: "az://acct1"},
		{target: "az://acct1/"},
		{target: "az://Acct_1/ckpts/p"},
		{target: "az://acct1/-ckpts/p"},
		{target: "az://acct1/ckpts/a//b"},
		{target: "wasbs://ckpts@acct1.blob.core.windows.net/p"},
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
	// Neither client may look for real credentials here: the GCS one
	// finds none on this box without its emulator, and the Azure one must
	// not be told about an account it does not serve.
	t.Setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:1")
	t.Setenv(AzureConnectionStringEnv, "")
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
				var bucket, prefix string
				switch s := store.(type) {
				case *S3:
					bucket, prefix = s.Bucket, s.Prefix
				case *GCS:
					bucket, prefix = s.Bucket, s.Prefix
				case *Azure:
					bucket, prefix = s.Container, s.Prefix
				}
				if scheme, _, _ := strings.Cut(tt.where, "://"); !strings.HasPrefix(strings.ToLower(fmt.Sprintf("%T", store)), "*objstore.") || !strings.HasPrefix(store.Where(), scheme+"://") {
					t.Fatalf("Open(%q) = %T, want a %s store", tt.target, store, scheme)
				}
				if bucket != tt.bucket || prefix != tt.prefix {
					t.Errorf("bucket, prefix = %q, %q; want %q, %q", bucket, prefix, tt.bucket, tt.prefix)
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
