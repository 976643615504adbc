package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/manifest"
	"github.com/gpuwarden/gpuwarden/internal/peertest"
	"google.golang.org/api/iterator"
)

// The gs:// and az:// stores run the shared store behaviour (store_test.go)
// against the real emulators: fake-gcs-server and Azurite. Both are
// required under GPUWARDEN_PEER_TESTS=1.

const testContainer = "ckpts"

// startGCS runs fake-gcs-server with testBucket created in location and
// points the official client at it, as STORAGE_EMULATOR_HOST does for the
// CLI.
func startGCS(t testing.TB, location string) *peertest.FakeGCS {
	t.Helper()
	f := peertest.StartFakeGCS(t, location)
	f.CreateBucket(t, testBucket)
	for _, kv := range f.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	return f
}

// openGCS opens gs://testBucket/prefix the way the CLI does.
func openGCS(t testing.TB, prefix string, opts Options) *GCS {
	t.Helper()
	store, err := Open(context.Background(), "gs://"+testBucket+"/"+prefix, opts)
	if err != nil {
		t.Fatal(err)
	}
	return store.(*GCS)
}

// rawGCS is the official Cloud Storage client on the emulator startGCS
// runs: the back door of the tests, and the reference gpuwarden's own
// JSON API client is held to.
func rawGCS(t testing.TB) *storage.Client {
	t.Helper()
	c, err := storage.NewClient(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// gcsHarness reaches behind a GCS store with the official client.
func gcsHarness(t testing.TB, s *GCS) harness {
	ctx := context.Background()
	b := rawGCS(t).Bucket(s.Bucket)
	return harness{
		store:   s,
		setSent: func(f func(string, int64)) { s.Sent = f },
		get: func(t *testing.T, rel string) []byte {
			r, err := b.Object(s.base() + rel).NewReader(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			data, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			return data
		},
		put: func(t *testing.T, rel string, data []byte) {
			w := b.Object(s.base() + rel).NewWriter(ctx)
			if _, err := w.Write(data); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		},
		all: func(t *testing.T) []string {
			out := []string{}
			it := b.Objects(ctx, &storage.Query{Prefix: s.base()})
			for {
				o, err := it.Next()
				if errors.Is(err, iterator.Done) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, strings.TrimPrefix(o.Name, s.base()))
			}
			sort.Strings(out)
			return out
		},
	}
}

func TestGCS(t *testing.T) {
	startGCS(t, "EUROPE-WEST3")
	var n atomic.Int64
	testStore(t, func(t *testing.T) harness {
		return gcsHarness(t, openGCS(t, fmt.Sprintf("case-%d/job", n.Add(1)), Options{}))
	})
}

// TestGCSRegion: residency reads the bucket's location from the server,
// unless --store-region states it.
func TestGCSRegion(t *testing.T) {
	ctx := context.Background()
	startGCS(t, "EUROPE-WEST3")
	for _, tt := range []struct {
		name, stated, want string
	}{
		{"from the bucket", "", "europe-west3"},
		{"stated", "DE", "DE"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := openGCS(t, "p", Options{StoreRegion: tt.stated})
			got, err := RegionOf(ctx, s)
			if err != nil || got != tt.want {
				t.Errorf("RegionOf = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	missing := openGCS(t, "p", Options{})
	missing.Bucket = "no-such-bucket"
	if _, err := missing.Region(ctx); gpuwarden.ErrorCodeOf(err) != gpuwarden.ENotFound {
		t.Errorf("Region of a missing bucket = %v, want not found", err)
	}
}

// TestCloudManifestOverTheCap: a stored manifest larger than
// manifest.MaxSize is refused by the size the server gives, before its body
// is read, and hides neither the good checkpoints nor itself from Delete's
// caution.
func TestCloudManifestOverTheCap(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		open func(t *testing.T) harness
	}{
		{"gs", func(t *testing.T) harness {
			startGCS(t, "EUROPE-WEST3")
			return gcsHarness(t, openGCS(t, "cap", Options{}))
		}},
		{"az", func(t *testing.T) harness { startAzurite(t); return azureHarness(openAzure(t, "cap", Options{})) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.open(t)
			good := newCheckpoint(t, "000001-step-000100", map[string]string{"a": "hello"})
			if err := h.store.Push(ctx, good); err != nil {
				t.Fatal(err)
			}
			const huge = "000002-step-000200"
			h.put(t, huge+"/"+manifest.Name, bytes.Repeat([]byte(" "), manifest.MaxSize+1))
			list, err := h.store.List(ctx)
			if err != nil || !reflect.DeepEqual(names(list), []string{good.Name}) {
				t.Errorf("List = %v, %v; want only %s", names(list), err, good.Name)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err = h.store.Pull(ctx, huge, t.TempDir())
			runtime.ReadMemStats(&after)
			if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid || !strings.Contains(err.Error(), "a manifest may have") {
				t.Errorf("Pull = %v, want the manifest refused for its size", err)
			}
			// Refused by the size the server states, not after reading it.
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
				t.Errorf("Pull allocated %d MiB for a manifest over the cap; it must not read it", alloc>>20)
			}
			if err := h.store.Delete(ctx, huge); gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
				t.Errorf("Delete = %v, want invalid", err)
			}
		})
	}
}

// hangingServer accepts connections and never answers, as a store behind
// a dead link or a wedged proxy would.
func hangingServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// TestCloudStoresHonourDeadlines: against a server that never answers,
// every operation returns once its context ends (the sync's deadline),
// however the client retries.
func TestCloudStoresHonourDeadlines(t *testing.T) {
	addr := hangingServer(t)
	for _, tt := range []struct {
		name string
		open func(t *testing.T) gpuwarden.CheckpointStore
	}{
		{"gs", func(t *testing.T) gpuwarden.CheckpointStore {
			t.Setenv("STORAGE_EMULATOR_HOST", addr)
			return openGCS(t, "p", Options{})
		}},
		{"az", func(t *testing.T) gpuwarden.CheckpointStore {
			t.Setenv(AzureConnectionStringEnv, "DefaultEndpointsProtocol=http;AccountName="+peertest.AzuriteAccount+
				";AccountKey="+peertest.AzuriteKey+";BlobEndpoint=http://"+addr+"/"+peertest.AzuriteAccount+";")
			return openAzure(t, "p", Options{})
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := tt.open(t)
			cp := newCheckpoint(t, "000001-step-000010", map[string]string{"a": "hello"})
			for _, op := range []struct {
				name string
				do   func(ctx context.Context) error
			}{
				{"push", func(ctx context.Context) error { return store.Push(ctx, cp) }},
				{"list", func(ctx context.Context) error { _, err := store.List(ctx); return err }},
				{"pull", func(ctx context.Context) error { _, err := store.Pull(ctx, cp.Name, t.TempDir()); return err }},
				{"delete", func(ctx context.Context) error { return store.Delete(ctx, cp.Name) }},
			} {
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				start := time.Now()
				err := hangGuard(t, op.name, func() error { return op.do(ctx) })
				cancel()
				if err == nil || !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("%s = %v, want the deadline's error", op.name, err)
				}
				if took := time.Since(start); took > 5*time.Second {
					t.Errorf("%s took %s after a 500ms deadline", op.name, took)
				}
			}
		})
	}
}

// startAzurite runs Azurite with testContainer created and puts its
// connection string where the CLI's store finds it.
func startAzurite(t testing.TB) *peertest.Azurite {
	t.Helper()
	a := peertest.StartAzurite(t)
	t.Setenv(AzureConnectionStringEnv, a.ConnectionString())
	c, err := azblob.NewClientFromConnectionString(a.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateContainer(context.Background(), testContainer, nil); err != nil {
		t.Fatalf("create container: %v\n%s", err, a.Log())
	}
	return a
}

// openAzure opens az://devstoreaccount1/testContainer/prefix as the CLI does.
func openAzure(t testing.TB, prefix string, opts Options) *Azure {
	t.Helper()
	store, err := Open(context.Background(), "az://"+peertest.AzuriteAccount+"/"+testContainer+"/"+prefix, opts)
	if err != nil {
		t.Fatal(err)
	}
	return store.(*Azure)
}

// azureHarness reaches behind an Azure store with its own client.
func azureHarness(s *Azure) harness {
	ctx := context.Background()
	return harness{
		store:   s,
		setSent: func(f func(string, int64)) { s.Sent = f },
		get: func(t *testing.T, rel string) []byte {
			res, err := s.client.DownloadStream(ctx, s.Container, s.base()+rel, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			data, err := io.ReadAll(res.Body)
			if err != nil {
				t.Fatal(err)
			}
			return data
		},
		put: func(t *testing.T, rel string, data []byte) {
			if _, err := s.client.UploadBuffer(ctx, s.Container, s.base()+rel, data, nil); err != nil {
				t.Fatal(err)
			}
		},
		all: func(t *testing.T) []string {
			out := []string{}
			prefix := s.base()
			pager := s.client.NewListBlobsFlatPager(s.Container, &azblob.ListBlobsFlatOptions{Prefix: &prefix})
			for pager.More() {
				page, err := pager.NextPage(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, b := range page.Segment.BlobItems {
					out = append(out, strings.TrimPrefix(*b.Name, prefix))
				}
			}
			sort.Strings(out)
			return out
		},
	}
}

func TestAzure(t *testing.T) {
	startAzurite(t)
	var n atomic.Int64
	testStore(t, func(t *testing.T) harness {
		// Stated, because the shared cases ask RegionOf, which an Azure
		// store cannot answer alone (TestAzureRegion).
		return azureHarness(openAzure(t, fmt.Sprintf("case-%d/job", n.Add(1)), Options{StoreRegion: "germanywestcentral"}))
	})
}

// TestAzureRegion: an account's location is not in the data plane, so
// residency needs --store-region and refuses to guess without it.
func TestAzureRegion(t *testing.T) {
	ctx := context.Background()
	startAzurite(t)
	got, err := RegionOf(ctx, openAzure(t, "p", Options{StoreRegion: "germanywestcentral"}))
	if err != nil || got != "germanywestcentral" {
		t.Errorf("stated: RegionOf = %q, %v; want germanywestcentral", got, err)
	}
	_, err = RegionOf(ctx, openAzure(t, "p", Options{}))
	if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid || !strings.Contains(gpuwarden.ErrorHint(err), "--store-region") {
		t.Errorf("unstated: RegionOf = %v (hint %q), want invalid with a --store-region hint", err, gpuwarden.ErrorHint(err))
	}
}

// TestAzureMissingContainer: a container that does not exist is a not-found
// error naming it, not a bare HTTP status.
func TestAzureMissingContainer(t *testing.T) {
	startAzurite(t)
	store, err := Open(context.Background(), "az://"+peertest.AzuriteAccount+"/no-such-container/p", Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = store.List(context.Background())
	if gpuwarden.ErrorCodeOf(err) != gpuwarden.ENotFound || !strings.Contains(err.Error(), "container no-such-container does not exist") {
		t.Errorf("List = %v, want container not found", err)
	}
}

// TestAzureConnectionStringAccount: a connection string for another
// account than the target's is refused before any request.
func TestAzureConnectionStringAccount(t *testing.T) {
	for _, tt := range []struct {
		name, cs, account string
		ok                bool
	}{
		{"same account", "DefaultEndpointsProtocol=https;AccountName=acct1;AccountKey=a2V5;EndpointSuffix=core.windows.net", "acct1", true},
		{"other account", "DefaultEndpointsProtocol=https;AccountName=acct2;AccountKey=a2V5;EndpointSuffix=core.windows.net", "acct1", false},
		{"SAS, account in the host", "BlobEndpoint=https://acct1.blob.core.windows.net/;SharedAccessSignature=sv=x", "acct1", true},
		{"SAS, emulator path", "BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;SharedAccessSignature=sv=x", "devstoreaccount1", true},
		{"SAS, other host", "BlobEndpoint=https://acct2.blob.core.windows.net/;SharedAccessSignature=sv=x", "acct1", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := connectionStringNames(tt.cs, tt.account)
			if got := err == nil; got != tt.ok || (err != nil && gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid) {
				t.Errorf("connectionStringNames = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

// flipFirst flips a bit of the first byte read from r, as a link that
// damages a request body would.
type flipFirst struct {
	io.ReadCloser
	done bool
}

func (f *flipFirst) Read(p []byte) (int, error) {
	n, err := f.ReadCloser.Read(p)
	if n > 0 && !f.done {
		p[0] ^= 0x01
		f.done = true
	}
	return n, err
}

// TestGCSUploadDamagedOnTheWay: an upload whose body is damaged between
// gpuwarden and the server fails by the CRC32C the server computed, leaves
// no object that would vouch for the wrong bytes, and the next sync
// completes the checkpoint.
func TestGCSUploadDamagedOnTheWay(t *testing.T) {
	ctx := context.Background()
	f := startGCS(t, "EUROPE-WEST3")
	target, err := url.Parse("http://" + f.Host)
	if err != nil {
		t.Fatal(err)
	}
	var damage atomic.Bool
	damage.Store(true)
	rp := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && r.ContentLength > 0 && damage.Load() {
			r.Body = &flipFirst{ReadCloser: r.Body}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	proxy := strings.TrimPrefix(srv.URL, "http://")
	// The upload session's URL names the server; it must lead back here.
	rp.ModifyResponse = func(res *http.Response) error {
		if loc := res.Header.Get("Location"); loc != "" {
			res.Header.Set("Location", strings.Replace(loc, f.Host, proxy, 1))
		}
		return nil
	}
	t.Setenv("STORAGE_EMULATOR_HOST", proxy)
	s := openGCS(t, "crc", Options{})
	h := gcsHarness(t, s)
	cp := newCheckpoint(t, "000001-step-000010", map[string]string{"a": "hello", "b/c": "world"})
	err = s.Push(ctx, cp)
	if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInternal || !strings.Contains(err.Error(), "CRC32C") {
		t.Fatalf("Push over a damaging link = %v, want a CRC32C mismatch", err)
	}
	if got := h.all(t); len(got) != 0 {
		t.Errorf("the bucket holds %v after the damaged upload, want nothing", got)
	}
	damage.Store(false)
	if err := s.Push(ctx, cp); err != nil {
		t.Fatalf("Push once the link behaves: %v", err)
	}
	pulled, err := s.Pull(ctx, cp.Name, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, cp, pulled.Path)
}

// TestGCSMissingBucket: a bucket that does not exist is a not-found error
// naming it, for a push as for a list.
func TestGCSMissingBucket(t *testing.T) {
	ctx := context.Background()
	startGCS(t, "EUROPE-WEST3")
	store, err := Open(ctx, "gs://no-such-bucket/p", Options{})
	if err != nil {
		t.Fatal(err)
	}
	cp := newCheckpoint(t, "000001-step-000010", map[string]string{"a": "hello"})
	for _, op := range []struct {
		name string
		err  error
	}{
		{"push", store.Push(ctx, cp)},
		{"list", func() error { _, err := store.List(ctx); return err }()},
	} {
		if gpuwarden.ErrorCodeOf(op.err) != gpuwarden.ENotFound || !strings.Contains(op.err.Error(), "bucket no-such-bucket does not exist") {
			t.Errorf("%s = %v, want bucket not found", op.name, op.err)
		}
	}
}

// TestGCSAnswers: how the JSON API client takes the answers Cloud
// Storage's docs list for a bucket listing (json_api/v1/status-codes):
// 429 and 5xx are retried with backoff, 401/403 are refused credentials,
// 404 a missing bucket, and an error body's message reaches the user.
func TestGCSAnswers(t *testing.T) {
	ok := `{"prefixes":["p/000001-step-000010/"]}`
	for _, tt := range []struct {
		name     string
		statuses []int // answered in turn, the last one repeated
		code     gpuwarden.ErrorCode
		calls    int
	}{
		{"ok", []int{200}, "", 1},
		{"503 then ok", []int{503, 200}, "", 2},
		{"429 twice then ok", []int{429, 429, 200}, "", 3},
		{"500 for good", []int{500}, gpuwarden.EInternal, gcsRetries},
		{"401", []int{401}, gpuwarden.EUnauthorized, 1},
		{"403", []int{403}, gpuwarden.EUnauthorized, 1},
		{"404", []int{404}, gpuwarden.ENotFound, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var calls atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := int(calls.Add(1))
				st := tt.statuses[min(n, len(tt.statuses))-1]
				if r.URL.Path != "/storage/v1/b/bkt/o" || r.URL.Query().Get("delimiter") != "/" || r.URL.Query().Get("prefix") != "p/" {
					st = http.StatusBadRequest
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(st)
				if st == 200 {
					io.WriteString(w, ok)
					return
				}
				fmt.Fprintf(w, `{"error":{"code":%d,"message":"answer %d"}}`, st, st)
			}))
			t.Cleanup(srv.Close)
			t.Setenv("STORAGE_EMULATOR_HOST", srv.URL)
			store, err := Open(context.Background(), "gs://bkt/p", Options{})
			if err != nil {
				t.Fatal(err)
			}
			kids, err := store.(*GCS).api.children(context.Background(), "p/")
			if got := int(calls.Load()); got != tt.calls {
				t.Errorf("%d requests, want %d", got, tt.calls)
			}
			if tt.code == "" {
				if err != nil || !reflect.DeepEqual(kids, []string{"000001-step-000010"}) {
					t.Errorf("children = %v, %v; want [000001-step-000010]", kids, err)
				}
				return
			}
			if code := gpuwarden.ErrorCodeOf(err); code != tt.code || !strings.Contains(err.Error(), "answer") {
				t.Errorf("children = %v (code %s), want %s with the server's message", err, code, tt.code)
			}
		})
	}
}
