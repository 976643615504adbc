package objstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/manifest"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/minio/minio-go/v7"
)

const testBucket = "ckpt"

// fakeS3 is gofakes3 on 127.0.0.1 with a log of the requests it served.
type fakeS3 struct {
	url string
	// transport trusts the test certificate when the fake serves TLS.
	transport http.RoundTripper

	mu       sync.Mutex
	requests []string // "METHOD path?query"
	// fault, when set, may answer a request in the server's place.
	fault func(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, bool)
}

// setFault installs (or, with nil, removes) a misbehaviour of the server:
// fault either answers r itself (true) or returns the writer the real
// server answers through.
func (f *fakeS3) setFault(fault func(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, bool)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fault = fault
}

// record logs r and returns the fault in force.
func (f *fakeS3) record(r *http.Request) func(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
	return f.fault
}

// take returns and forgets the requests seen so far.
func (f *fakeS3) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.requests
	f.requests = nil
	return r
}

// count returns how many of reqs start with method and contain part.
func count(reqs []string, method, part string) int {
	n := 0
	for _, r := range reqs {
		if strings.HasPrefix(r, method+" ") && strings.Contains(r, part) {
			n++
		}
	}
	return n
}

func newFakeS3(t *testing.T) *fakeS3 { return startFakeS3(t, false) }

// startFakeS3 serves gofakes3 on 127.0.0.1, over TLS when tls is set.
func startFakeS3(t *testing.T, tls bool) *fakeS3 {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket(testBucket); err != nil {
		t.Fatal(err)
	}
	f := &fakeS3{}
	handler := gofakes3.New(backend).Server()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fault := f.record(r); fault != nil {
			var answered bool
			if w, answered = fault(w, r); answered {
				return
			}
		}
		handler.ServeHTTP(w, r)
	}))
	if tls {
		srv.StartTLS()
		f.transport = srv.Client().Transport
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

// open returns an S3 store on the fake, the way the CLI would build it.
func (f *fakeS3) open(t *testing.T, target string, opts Options) *S3 {
	t.Helper()
	opts.Endpoint = strings.TrimPrefix(strings.TrimPrefix(f.url, "http://"), "https://")
	opts.Insecure = f.transport == nil
	opts.Transport = f.transport
	opts.PathStyle = true
	opts.AccessKey, opts.SecretKey = "test-key", "test-secret"
	if opts.Region == "" {
		opts.Region = "us-east-1"
	}
	store, err := Open(context.Background(), target, opts)
	if err != nil {
		t.Fatal(err)
	}
	return store.(*S3)
}

// objectKeys lists every key under prefix.
func objectKeys(t *testing.T, s *S3, prefix string) []string {
	t.Helper()
	var keys []string
	for obj := range s.client.ListObjects(context.Background(), s.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		keys = append(keys, obj.Key)
	}
	return keys
}

func TestS3(t *testing.T) {
	testStore(t, func(t *testing.T) harness {
		return s3Harness(newFakeS3(t).open(t, "s3://"+testBucket+"/runs/job-1", Options{}))
	})
}

// s3Harness reaches into s's bucket with its own client.
func s3Harness(s *S3) harness {
	ctx := context.Background()
	return harness{
		store:   s,
		setSent: func(f func(string, int64)) { s.Sent = f },
		get: func(t *testing.T, rel string) []byte {
			obj, err := s.client.GetObject(ctx, s.Bucket, s.base()+rel, minio.GetObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer obj.Close()
			b, err := io.ReadAll(obj)
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		put: func(t *testing.T, rel string, data []byte) {
			_, err := s.client.PutObject(ctx, s.Bucket, s.base()+rel, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
		},
		all: func(t *testing.T) []string {
			out := []string{}
			for _, k := range objectKeys(t, s, s.base()) {
				out = append(out, strings.TrimPrefix(k, s.base()))
			}
			sort.Strings(out)
			return out
		},
	}
}

func TestS3KeyLayout(t *testing.T) {
	f := newFakeS3(t)
	for _, tt := range []struct{ target, want string }{
		{"s3://" + testBucket + "/runs/job-1", "runs/job-1/c1/"},
		{"s3://" + testBucket, "c1/"},
	} {
		s := f.open(t, tt.target, Options{})
		cp := newCheckpoint(t, "c1", map[string]string{"model/w.bin": "w", "opt": "o"})
		if err := s.Push(context.Background(), cp); err != nil {
			t.Fatal(err)
		}
		got := objectKeys(t, s, tt.want)
		want := []string{tt.want + "manifest.json", tt.want + "model/w.bin", tt.want + "opt"}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: keys = %v, want %v", tt.target, got, want)
		}
		// Checkpoints under another prefix are not ours to list.
		list, err := s.List(context.Background())
		if err != nil || len(list) != 1 {
			t.Errorf("%s: List = %v, %v; want c1 alone", tt.target, names(list), err)
		}
	}
}

func TestS3SkipUnchangedByMetadata(t *testing.T) {
	ctx := context.Background()
	f := newFakeS3(t)
	s := f.open(t, "s3://"+testBucket+"/p", Options{})
	cp := newCheckpoint(t, "c1", map[string]string{"a": "hello", "b": "world"})
	if err := s.Push(ctx, cp); err != nil {
		t.Fatal(err)
	}
	info, err := s.client.StatObject(ctx, s.Bucket, s.key("c1", "a"), minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := metaValue(info.UserMetadata, metaSHA256); got != helloSHA {
		t.Errorf("x-amz-meta-sha256 = %q, want %q", got, helloSHA)
	}
	f.take()

	// A second push is one HEAD per file, one manifest read, one manifest
	// write and the read back that proves it: no file bytes travel.
	if err := s.Push(ctx, cp); err != nil {
		t.Fatal(err)
	}
	reqs := f.take()
	if n := count(reqs, "HEAD", "/c1/a?") + count(reqs, "HEAD", "/c1/b?"); n != 2 {
		t.Errorf("second push sent %d HEADs for the files, want 2: %v", n, reqs)
	}
	if n := count(reqs, "PUT", "/c1/a?") + count(reqs, "PUT", "/c1/b?"); n != 0 {
		t.Errorf("second push re-sent %d files: %v", n, reqs)
	}

	// Same bytes and size but other sha256 metadata: the metadata, not the
	// name or size, decides, so the file is sent again. (gofakes3 merges the
	// metadata of an overwritten object with the old one instead of
	// replacing it, so "no metadata" cannot be staged this way.)
	stale := map[string]string{metaSHA256: emptySHA}
	if _, err := s.client.PutObject(ctx, s.Bucket, s.key("c1", "a"), strings.NewReader("hello"), 5, minio.PutObjectOptions{UserMetadata: stale}); err != nil {
		t.Fatal(err)
	}
	var sent sentLog
	s.Sent = sent.add
	if err := s.Push(ctx, cp); err != nil {
		t.Fatal(err)
	}
	if got := sent.take(); !reflect.DeepEqual(got, []string{"a"}) {
		t.Errorf("push after metadata loss sent %v, want [a]", got)
	}
}

// TestS3Multipart runs the multipart path for real: gofakes3 implements
// CreateMultipartUpload, UploadPart and CompleteMultipartUpload and keeps the
// metadata given at creation. It serves TLS because over plain http minio-go
// signs each part as aws-chunked, which gofakes3 decodes for PutObject but
// not for UploadPart (see TestS3MultipartChunkedParts).
func TestS3Multipart(t *testing.T) {
	ctx := context.Background()
	f := startFakeS3(t, true)
	s := f.open(t, "s3://"+testBucket+"/big", Options{PartSize: 5 << 20})
	big := make([]byte, 20<<20+12345)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	cp := newCheckpoint(t, "c1", map[string]string{"small": "hello"})
	if err := os.WriteFile(filepath.Join(cp.Path, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	cp, err := manifest.Build(cp.Path)
	if err != nil {
		t.Fatal(err)
	}
	f.take()
	if err := s.Push(ctx, cp); err != nil {
		t.Fatalf("Push: %v", err)
	}
	reqs := f.take()
	if n := count(reqs, "POST", "/c1/big.bin?uploads"); n != 1 {
		t.Errorf("%d multipart uploads started, want 1", n)
	}
	if n := count(reqs, "PUT", "/c1/big.bin?partNumber="); n != 5 {
		t.Errorf("%d parts sent, want 5 (20 MiB + a bit in 5 MiB parts)", n)
	}
	if n := count(reqs, "PUT", "/c1/small?"); n != 1 {
		t.Errorf("small file sent in %d requests, want one PUT", n)
	}
	info, err := s.client.StatObject(ctx, s.Bucket, s.key("c1", "big.bin"), minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != int64(len(big)) || metaValue(info.UserMetadata, metaSHA256) != cp.Files[0].SHA256 {
		t.Errorf("stored big.bin: size %d sha256 %q, want %d %q", info.Size, metaValue(info.UserMetadata, metaSHA256), len(big), cp.Files[0].SHA256)
	}

	// Unchanged, the multipart object is skipped like any other.
	var sent sentLog
	s.Sent = sent.add
	if err := s.Push(ctx, cp); err != nil {
		t.Fatal(err)
	}
	if got := sent.take(); len(got) != 0 {
		t.Errorf("second push sent %v, want nothing", got)
	}

	pulled, err := s.Pull(ctx, "c1", t.TempDir())
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	sameTree(t, cp, pulled.Path)
}

func TestS3MultipartSourceChanged(t *testing.T) {
	// A multipart upload hashes while it streams, so a source that no longer
	// matches its manifest is found only after the object exists; the object
	// must then go, or its sha256 metadata would vouch for the wrong bytes.
	ctx := context.Background()
	s := newFakeS3(t).open(t, "s3://"+testBucket+"/big", Options{PartSize: 5 << 20})
	cp := newCheckpoint(t, "c1", map[string]string{"big.bin": strings.Repeat("a", 11<<20)})
	writeTree(t, cp.Path, map[string]string{"big.bin": strings.Repeat("b", 11<<20)})
	err := s.Push(ctx, cp)
	if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid || !strings.Contains(err.Error(), "checksum mismatch in big.bin") {
		t.Fatalf("Push = %v, want checksum mismatch in big.bin", err)
	}
	if keys := objectKeys(t, s, "big/"); len(keys) != 0 {
		t.Errorf("bucket holds %v after a refused push, want nothing", keys)
	}
}

func TestS3Region(t *testing.T) {
	f := newFakeS3(t)
	// The client is configured for eu-central-1, yet Region must report
	// where the server says the bucket is: gofakes3 answers with an empty
	// LocationConstraint, which S3 defines as us-east-1.
	s := f.open(t, "s3://"+testBucket+"/p", Options{Region: "eu-central-1"})
	got, err := s.Region(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got != "us-east-1" {
		t.Errorf("Region = %q, want us-east-1", got)
	}
	if n := count(f.take(), "GET", "location"); n != 1 {
		t.Errorf("Region made %d location requests, want 1", n)
	}
	if got, err := RegionOf(context.Background(), s); got != "us-east-1" || err != nil {
		t.Errorf("RegionOf = %q, %v", got, err)
	}
}

func TestS3MissingBucket(t *testing.T) {
	ctx := context.Background()
	f := newFakeS3(t)
	s := f.open(t, "s3://no-such-bucket/p", Options{})
	_, err := s.List(ctx)
	if gpuwarden.ErrorCodeOf(err) != gpuwarden.ENotFound || gpuwarden.ErrorHint(err) == "" {
		t.Errorf("List of a missing bucket = %v (hint %q), want not found with a hint", err, gpuwarden.ErrorHint(err))
	}
	if _, err := s.Region(ctx); gpuwarden.ErrorCodeOf(err) != gpuwarden.ENotFound {
		t.Errorf("Region of a missing bucket = %v, want not found", err)
	}
	cp := newCheckpoint(t, "c1", map[string]string{"a": "hello"})
	if err := s.Push(ctx, cp); gpuwarden.ErrorCodeOf(err) != gpuwarden.ENotFound {
		t.Errorf("Push to a missing bucket = %v, want not found", err)
	}
}

func TestS3DeleteLeavesNothing(t *testing.T) {
	ctx := context.Background()
	s := newFakeS3(t).open(t, "s3://"+testBucket+"/p", Options{})
	for _, name := range []string{"c1", "c10"} {
		if err := s.Push(ctx, newCheckpoint(t, name, ckptFiles)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	// "c1/" must not match "c10/".
	if keys := objectKeys(t, s, "p/c1/"); len(keys) != 0 {
		t.Errorf("keys left under p/c1/: %v", keys)
	}
	if keys := objectKeys(t, s, "p/c10/"); len(keys) != len(ckptFiles)+1 {
		t.Errorf("keys under p/c10/ = %v, want %d", keys, len(ckptFiles)+1)
	}
}

// TestS3MultipartChunkedParts pins down the gofakes3 limitation met above,
// the one s3rver has too: over plain http it stores aws-chunked part bodies
// undecoded, so the object comes out larger than the file. The check after
// upload must catch that and remove the object, or its sha256 metadata
// would vouch for wrong bytes; its hint must name what helps (retrying
// sends the same framing), and --s3-unsigned-payload must then work.
func TestS3MultipartChunkedParts(t *testing.T) {
	ctx := context.Background()
	f := newFakeS3(t)
	for _, tt := range []struct {
		name     string
		unsigned bool
	}{
		{"aws-chunked", false},
		{"unsigned payload", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			prefix := strings.ReplaceAll(tt.name, " ", "-")
			s := f.open(t, "s3://"+testBucket+"/"+prefix, Options{PartSize: 5 << 20, UnsignedPayload: tt.unsigned})
			cp := newCheckpoint(t, "c1", map[string]string{"big.bin": strings.Repeat("x", 11<<20), "small": "hello"})
			var chunked atomic.Int64
			f.setFault(func(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, bool) {
				if strings.HasPrefix(r.Header.Get("X-Amz-Content-Sha256"), "STREAMING-") {
					chunked.Add(1)
				}
				return w, false
			})
			defer f.setFault(nil)
			err := s.Push(ctx, cp)
			if tt.unsigned {
				if err != nil {
					t.Fatalf("Push with an unsigned payload: %v", err)
				}
				if n := chunked.Load(); n != 0 {
					t.Errorf("%d requests went out aws-chunked with an unsigned payload", n)
				}
				pulled, err := s.Pull(ctx, "c1", t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				sameTree(t, cp, pulled.Path)
				return
			}
			if chunked.Load() == 0 {
				t.Fatal("no request went out aws-chunked over plain http; the case pins nothing down")
			}
			if err == nil {
				t.Skip("this gofakes3 decodes aws-chunked parts; nothing left to pin down")
			}
			if !strings.Contains(err.Error(), "stored as") {
				t.Fatalf("Push = %v, want the size check after upload to fail", err)
			}
			if want := "this server stored the signed chunk framing: use https, or --s3-unsigned-payload"; gpuwarden.ErrorHint(err) != want {
				t.Errorf("hint = %q, want %q", gpuwarden.ErrorHint(err), want)
			}
			if keys := objectKeys(t, s, prefix+"/c1/big.bin"); len(keys) != 0 {
				t.Errorf("bucket holds %v after a failed check, want nothing", keys)
			}
		})
	}
}

// garbling flips a bit of the first byte of a response body, as a server
// with bad storage would return it.
type garbling struct {
	http.ResponseWriter
	done bool
}

// Write passes p on, the first byte altered.
func (g *garbling) Write(p []byte) (int, error) {
	if g.done || len(p) == 0 {
		return g.ResponseWriter.Write(p)
	}
	g.done = true
	q := append([]byte(nil), p...)
	q[0] ^= 0x20
	return g.ResponseWriter.Write(q)
}

func TestS3PushFailsWhenTheManifestIsNotKept(t *testing.T) {
	isManifest := func(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, "/"+manifest.Name) }
	for _, tt := range []struct {
		name  string
		fault func(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, bool)
	}{
		{"returns other bytes", func(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, bool) {
			if r.Method == http.MethodGet && isManifest(r) {
				return &garbling{ResponseWriter: w}, false
			}
			return w, false
		}},
		{"accepts the manifest and drops it", func(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, bool) {
			if r.Method == http.MethodPut && isManifest(r) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("ETag", `"d41d8cd98f00b204e9800998ecf8427e"`)
				w.WriteHeader(http.StatusOK)
				return w, true
			}
			return w, false
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFakeS3(t)
			s := f.open(t, "s3://"+testBucket+"/p", Options{})
			cp := newCheckpoint(t, "c1", map[string]string{"a": "hello", "b/c": "world"})
			f.setFault(tt.fault)
			err := s.Push(ctx, cp)
			if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInternal || !strings.Contains(err.Error(), "read back from the store differs") {
				t.Fatalf("Push to a server that does not keep the manifest = %v, want read-back failure", err)
			}
			if gpuwarden.ErrorHint(err) == "" {
				t.Errorf("Push error %q has no hint", err)
			}
			f.setFault(nil)
			// No manifest the server may have mangled is left to be listed.
			if list, err := s.List(ctx); err != nil || len(list) != 0 {
				t.Errorf("List after the failed push = %v, %v; want nothing", names(list), err)
			}
			// Once the server behaves, the next sync completes the checkpoint
			// without sending the files again.
			var sent sentLog
			s.Sent = sent.add
			if err := s.Push(ctx, cp); err != nil {
				t.Fatalf("Push once the server behaves: %v", err)
			}
			if got := sent.take(); len(got) != 0 {
				t.Errorf("retried push sent %v, want nothing", got)
			}
			if list, _ := s.List(ctx); !reflect.DeepEqual(names(list), []string{"c1"}) {
				t.Errorf("List = %v, want [c1]", names(list))
			}
		})
	}
}
