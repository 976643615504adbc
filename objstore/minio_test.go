package objstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/manifest"
	"github.com/gpuwarden/gpuwarden/internal/peertest"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// startMinIO runs a real MinIO (skipping when it is not installed) with
// testBucket created, and puts its credentials into the environment, where
// the CLI's store finds them: Options carries none from the command line.
func startMinIO(t testing.TB) *peertest.MinIO {
	t.Helper()
	m := peertest.StartMinIO(t)
	for _, kv := range m.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	admin, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.MakeBucket(context.Background(), testBucket, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		t.Fatalf("create bucket: %v\n%s", err, m.Log())
	}
	return m
}

// openMinIO opens s3://testBucket/prefix on m the way the CLI does for
// --s3-endpoint HOST:PORT --s3-insecure --s3-path-style.
func openMinIO(t testing.TB, m *peertest.MinIO, prefix string, opts Options) *S3 {
	t.Helper()
	opts.Endpoint, opts.Insecure, opts.PathStyle = m.Endpoint, true, true
	store, err := Open(context.Background(), "s3://"+testBucket+"/"+prefix, opts)
	if err != nil {
		t.Fatal(err)
	}
	return store.(*S3)
}

// TestMinIO runs the behaviour every store shares against a real S3 server:
// round trip, skipping what is held, torn pushes, corruption, and deleting
// and keeping only what gpuwarden wrote. Each case gets its own prefix.
func TestMinIO(t *testing.T) {
	m := startMinIO(t)
	var n atomic.Int64
	testStore(t, func(t *testing.T) harness {
		return s3Harness(openMinIO(t, m, fmt.Sprintf("case-%d/job", n.Add(1)), Options{}))
	})
}

func TestMinIOReplacedObject(t *testing.T) {
	ctx := context.Background()
	m := startMinIO(t)
	const file = "model/shard-0.safetensors"
	for i, tt := range []struct {
		name string
		// keepMeta replaces the object with its sha256 metadata intact, as
		// a copy tool that preserves metadata would; otherwise without.
		keepMeta bool
	}{
		{"sha256 metadata kept", true},
		{"sha256 metadata dropped", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := openMinIO(t, m, fmt.Sprintf("replaced-%d", i), Options{})
			older := newCheckpoint(t, "000001-step-000010", ckptFiles)
			newer := newCheckpoint(t, "000002-step-000020", ckptFiles)
			for _, cp := range []gpuwarden.Checkpoint{older, newer} {
				if err := s.Push(ctx, cp); err != nil {
					t.Fatal(err)
				}
			}
			h := s3Harness(s)
			b := h.get(t, newer.Name+"/"+file)
			b[len(b)/3] ^= 0x01 // same size, other bytes
			opts := minio.PutObjectOptions{}
			if tt.keepMeta {
				opts.UserMetadata = map[string]string{metaSHA256: sha256Of(t, newer, file)}
			}
			if _, err := s.client.PutObject(ctx, s.Bucket, s.key(newer.Name, file), bytes.NewReader(b), int64(len(b)), opts); err != nil {
				t.Fatal(err)
			}

			dir := t.TempDir()
			_, err := s.Pull(ctx, newer.Name, dir)
			if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid || !strings.Contains(err.Error(), "checksum mismatch in "+file) {
				t.Fatalf("Pull of the replaced object = %v, want checksum mismatch in %s", err, file)
			}
			noLeftovers(t, dir)
			if _, err := os.Stat(filepath.Join(dir, newer.Name)); !os.IsNotExist(err) {
				t.Errorf("a failed pull left %s behind", newer.Name)
			}
			// The next-older checkpoint is still good to resume from.
			pulled, err := s.Pull(ctx, older.Name, dir)
			if err != nil {
				t.Fatalf("Pull of the older checkpoint: %v", err)
			}
			sameTree(t, older, pulled.Path)

			if !tt.keepMeta {
				// Without the metadata the next sync sees the object is not
				// ours and sends the file again, which repairs the copy.
				var sent sentLog
				s.Sent = sent.add
				if err := s.Push(ctx, newer); err != nil {
					t.Fatal(err)
				}
				if got := sent.take(); !reflect.DeepEqual(got, []string{file}) {
					t.Errorf("push after the replacement sent %v, want [%s]", got, file)
				}
				pulled, err := s.Pull(ctx, newer.Name, t.TempDir())
				if err != nil {
					t.Fatalf("Pull after the repair: %v", err)
				}
				sameTree(t, newer, pulled.Path)
			}
		})
	}
}

// sha256Of returns the manifest's sha256 for file of cp.
func sha256Of(t *testing.T, cp gpuwarden.Checkpoint, file string) string {
	t.Helper()
	for _, f := range cp.Files {
		if f.Path == file {
			return f.SHA256
		}
	}
	t.Fatalf("%s lists no %s", cp.Name, file)
	return ""
}

// waitDown returns once nothing accepts connections at endpoint, so a
// restart cannot race the killed server for its port.
func waitDown(t *testing.T, endpoint string) {
	t.Helper()
	for range 1000 {
		c, err := net.Dial("tcp", endpoint)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s still accepts connections after Kill", endpoint)
}

func TestMinIOKilledMidPush(t *testing.T) {
	ctx := context.Background()
	m := startMinIO(t)
	s := openMinIO(t, m, "killed/job", Options{})
	c1 := newCheckpoint(t, "000001-step-000010", ckptFiles)
	if err := s.Push(ctx, c1); err != nil {
		t.Fatal(err)
	}

	// The server dies right after the second file of the next push, as a
	// crashed or rebooted MinIO would.
	c2 := newCheckpoint(t, "000002-step-000020", ckptFiles)
	var sent sentLog
	s.Sent = func(file string, size int64) {
		sent.add(file, size)
		if len(sent.files) == 2 {
			m.Kill()
		}
	}
	// minio-go retries a refused connection for several seconds; the sync's
	// deadline is what bounds the push, and it must be honoured.
	tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.Push(tctx, c2); err == nil {
		t.Fatal("Push to a killed server = nil, want an error")
	}
	if got := len(sent.take()); got != 2 {
		t.Fatalf("push sent %d files before failing, want the 2 before the kill", got)
	}

	waitDown(t, m.Endpoint)
	m.Start()
	s.Sent = sent.add
	list, err := s.List(ctx)
	if err != nil {
		t.Fatalf("List after the restart: %v", err)
	}
	if got := names(list); !reflect.DeepEqual(got, []string{c1.Name}) {
		t.Errorf("List after the restart = %v, want [%s]: the cut-off push must not show", got, c1.Name)
	}
	if err := s.Push(ctx, c2); err != nil {
		t.Fatalf("Push after the restart: %v", err)
	}
	if got := len(sent.take()); got != len(ckptFiles)-2 {
		t.Errorf("push after the restart sent %d files, want the %d the first did not", got, len(ckptFiles)-2)
	}
	for _, cp := range []gpuwarden.Checkpoint{c1, c2} {
		pulled, err := s.Pull(ctx, cp.Name, t.TempDir())
		if err != nil {
			t.Fatalf("Pull %s after the restart: %v", cp.Name, err)
		}
		sameTree(t, cp, pulled.Path)
	}
}

func TestMinIOMultipart(t *testing.T) {
	// Real multipart uploads, over plain http with aws-chunked parts, which
	// gofakes3 cannot take (see TestS3MultipartChunkedParts).
	ctx := context.Background()
	m := startMinIO(t)
	s := openMinIO(t, m, "big", Options{PartSize: 5 << 20})
	cp := newCheckpoint(t, "000001-step-000010", map[string]string{"small": "hello"})
	big := make([]byte, 11<<20+4321)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cp.Path, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	cp, err := manifest.Build(cp.Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Push(ctx, cp); err != nil {
		t.Fatalf("Push: %v", err)
	}
	info, err := s.client.StatObject(ctx, s.Bucket, s.key(cp.Name, "big.bin"), minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := sha256Of(t, cp, "big.bin"); info.Size != int64(len(big)) || metaValue(info.UserMetadata, metaSHA256) != want {
		t.Errorf("stored big.bin: size %d sha256 %q, want %d %q", info.Size, metaValue(info.UserMetadata, metaSHA256), len(big), want)
	}
	var sent sentLog
	s.Sent = sent.add
	if err := s.Push(ctx, cp); err != nil {
		t.Fatal(err)
	}
	if got := sent.take(); len(got) != 0 {
		t.Errorf("second push sent %v, want nothing", got)
	}
	pulled, err := s.Pull(ctx, cp.Name, t.TempDir())
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	sameTree(t, cp, pulled.Path)
}
