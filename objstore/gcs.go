package objstore

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"golang.org/x/oauth2/google"
)

// GCS speaks Cloud Storage's JSON API (cloud.google.com/storage/docs/json_api)
// over net/http with golang.org/x/oauth2/google for credentials, not
// through cloud.google.com/go/storage: that client and Google's generated
// one both link grpc-go, which issue #19 keeps out of the binary (2–3 MB of
// the agent's RSS; kubelet/deps_test.go), and the official client alone
// added 34 MB to it. The tests check this client against the official one
// on fake-gcs-server.

// gcsEmulatorEnv is the variable the official clients read an emulator's
// host[:port] from; it is honoured the same way here, without credentials.
const gcsEmulatorEnv = "STORAGE_EMULATOR_HOST"

// gcsScope is the OAuth scope for reading and writing objects.
const gcsScope = "https://www.googleapis.com/auth/devstorage.read_write"

// gcsEndpoint is Cloud Storage's JSON API endpoint.
const gcsEndpoint = "https://storage.googleapis.com"

// gcsErrorBody caps how much of an error answer is read for its message.
const gcsErrorBody = 64 << 10

// gcsRetries is how often a read, list or delete is tried on a transient
// failure (429, 5xx, a broken connection), as Google's retry strategy
// advises with exponential backoff; an upload is not retried here, since
// its body is a stream: the next sync sends the file again.
const gcsRetries = 4

// GCS keeps checkpoints in a Google Cloud Storage bucket as PREFIX/NAME/FILE
// and PREFIX/NAME/manifest.json. Credentials come from Application Default
// Credentials: GOOGLE_APPLICATION_CREDENTIALS, gcloud's login, or the VM's
// service account through the metadata server; STORAGE_EMULATOR_HOST
// points it at an emulator such as fake-gcs-server instead.
type GCS struct {
	blobStore
	// Bucket is the bucket's name.
	Bucket string
	// StatedRegion is --store-region: when set, Region returns it without
	// asking the server.
	StatedRegion string

	endpoint string
	hc       *http.Client
}

var (
	_ gpuwarden.CheckpointStore = (*GCS)(nil)
	_ Regional                  = (*GCS)(nil)
)

// NewGCS returns a store for bucket under prefix ("" for the bucket's
// root). It finds credentials but makes no request to the bucket, so a
// credential the bucket refuses shows up on first use.
func NewGCS(ctx context.Context, bucket, prefix string, opts Options) (*GCS, error) {
	if err := checkGCSBucket(bucket); err != nil {
		return nil, err
	}
	g := &GCS{Bucket: bucket, StatedRegion: opts.StoreRegion, endpoint: gcsEndpoint}
	if host := os.Getenv(gcsEmulatorEnv); host != "" {
		g.endpoint = strings.TrimSuffix(host, "/")
		if !strings.Contains(g.endpoint, "://") {
			g.endpoint = "http://" + g.endpoint
		}
		g.hc = &http.Client{Transport: opts.Transport}
	} else {
		hc, err := google.DefaultClient(ctx, gcsScope)
		if err != nil {
			return nil, (&gpuwarden.Error{Code: gpuwarden.EUnauthorized, Message: "no google cloud credentials", Err: err}).
				WithHint("set GOOGLE_APPLICATION_CREDENTIALS to a service account key, or run on a VM whose service account may use the bucket")
		}
		g.hc = hc
	}
	g.blobStore = blobStore{Prefix: prefix, Sent: opts.Sent, api: gcsAPI{g}}
	return g, nil
}

// Region returns --store-region when given, else the bucket's location as
// Google reports it (the bucket resource's location, lower-cased to match
// region names: "europe-west3"; a multi-region is "eu", "us" or "asia").
func (g *GCS) Region(ctx context.Context) (string, error) {
	if g.StatedRegion != "" {
		return g.StatedRegion, nil
	}
	var b struct {
		Location string `json:"location"`
	}
	if err := g.getJSON(ctx, g.bucketURL()+"?fields=location", &b); err != nil {
		return "", fmt.Errorf("locate %s: %w", g.Where(), g.bucketError(err))
	}
	return strings.ToLower(b.Location), nil
}

func (g *GCS) bucketURL() string {
	return g.endpoint + "/storage/v1/b/" + url.PathEscape(g.Bucket)
}

func (g *GCS) objectURL(key string) string {
	return g.bucketURL() + "/o/" + url.PathEscape(key)
}

// gcsStatusError is a non-2xx answer of the JSON API.
type gcsStatusError struct {
	Status  int
	Message string
}

func (e *gcsStatusError) Error() string {
	return fmt.Sprintf("cloud storage answered %d: %s", e.Status, e.Message)
}

// statusOf returns the HTTP status in err's chain, 0 when there is none.
func statusOf(err error) int {
	var se *gcsStatusError
	if errors.As(err, &se) {
		return se.Status
	}
	return 0
}

// do sends a request built by mk, retrying transient failures with
// backoff until ctx ends, and returns a 2xx response; any other answer is
// a *gcsStatusError with the API's message.
func (g *GCS) do(ctx context.Context, retry bool, mk func() (*http.Request, error)) (*http.Response, error) {
	tries := 1
	if retry {
		tries = gcsRetries
	}
	var last error
	for i := range tries {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("%w (after %v)", ctx.Err(), last)
			case <-time.After(time.Duration(100<<i) * time.Millisecond):
			}
		}
		req, err := mk()
		if err != nil {
			return nil, err
		}
		// Objects are never stored gzip-encoded by gpuwarden; asking for
		// identity keeps Go from hiding a transcoded size.
		req.Header.Set("Accept-Encoding", "identity")
		res, err := g.hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			last = err
			continue
		}
		if res.StatusCode/100 == 2 {
			return res, nil
		}
		last = readStatusError(res)
		if res.StatusCode != http.StatusTooManyRequests && res.StatusCode/100 != 5 {
			return nil, last
		}
	}
	return nil, last
}

// readStatusError reads at most gcsErrorBody bytes of an error answer.
func readStatusError(res *http.Response) error {
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, gcsErrorBody))
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		msg = e.Error.Message
	}
	return &gcsStatusError{Status: res.StatusCode, Message: msg}
}

// getJSON GETs u (retried) and decodes at most gcsErrorBody·16 bytes.
func (g *GCS) getJSON(ctx context.Context, u string, v any) error {
	res, err := g.do(ctx, true, func() (*http.Request, error) { return http.NewRequestWithContext(ctx, http.MethodGet, u, nil) })
	if err != nil {
		return err
	}
	defer res.Body.Close()
	return json.NewDecoder(io.LimitReader(res.Body, gcsErrorBody*16)).Decode(v)
}

// gcsObject is the part of an object resource gpuwarden reads.
type gcsObject struct {
	Size     string            `json:"size"`
	CRC32C   string            `json:"crc32c"`
	Metadata map[string]string `json:"metadata"`
}

// bucketError gives a missing bucket and refused credentials the codes and
// hints the CLI maps once.
func (g *GCS) bucketError(err error) error {
	switch statusOf(err) {
	case http.StatusNotFound:
		return (&gpuwarden.Error{Code: gpuwarden.ENotFound, Message: fmt.Sprintf("bucket %s does not exist", g.Bucket), Err: err}).
			WithHint("create the bucket in a location the plan allows, or fix the gs:// target")
	case http.StatusUnauthorized, http.StatusForbidden:
		return (&gpuwarden.Error{Code: gpuwarden.EUnauthorized, Message: fmt.Sprintf("access to bucket %s refused", g.Bucket), Err: err}).
			WithHint("check GOOGLE_APPLICATION_CREDENTIALS (or the VM's service account and its scopes) and the bucket's IAM")
	}
	return err
}

// gcsAPI is the blobAPI of a GCS bucket.
type gcsAPI struct{ g *GCS }

func (a gcsAPI) scheme() string { return "gs://" + a.g.Bucket }

func (a gcsAPI) stat(ctx context.Context, key string) (int64, string, bool, error) {
	var o gcsObject
	err := a.g.getJSON(ctx, a.g.objectURL(key)+"?fields=size,metadata", &o)
	if statusOf(err) == http.StatusNotFound {
		return 0, "", false, nil
	}
	if err != nil {
		return 0, "", false, a.g.bucketError(err)
	}
	size, err := strconv.ParseInt(o.Size, 10, 64)
	if err != nil {
		return 0, "", false, fmt.Errorf("stat %s: size %q: %w", key, o.Size, err)
	}
	return size, metaValue(o.Metadata, metaSHA256), true, nil
}

// put sends r in one resumable upload (a session opened with the object's
// metadata, then the body in one PUT) and compares the CRC32C the server
// computed over what it stored with the one of the bytes sent, which
// catches a body damaged on the way that a size check would pass.
func (a gcsAPI) put(ctx context.Context, key string, r io.Reader, size int64, sha, contentType string) error {
	meta, err := json.Marshal(map[string]any{"name": key, "contentType": contentType, "metadata": map[string]string{metaSHA256: sha}})
	if err != nil {
		return err
	}
	start := a.g.endpoint + "/upload/storage/v1/b/" + url.PathEscape(a.g.Bucket) + "/o?uploadType=resumable"
	res, err := a.g.do(ctx, true, func() (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, start, bytes.NewReader(meta))
		if err == nil {
			req.Header.Set("Content-Type", "application/json; charset=UTF-8")
			req.Header.Set("X-Upload-Content-Type", contentType)
			req.Header.Set("X-Upload-Content-Length", strconv.FormatInt(size, 10))
		}
		return req, err
	})
	if err != nil {
		return a.g.bucketError(err)
	}
	res.Body.Close()
	session := res.Header.Get("Location")
	if session == "" {
		return gpuwarden.Errorf(gpuwarden.EInternal, "upload of %s: the server opened no session", key)
	}
	crc := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	body := io.TeeReader(r, crc)
	res, err = a.g.do(ctx, false, func() (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, session, body)
		if err == nil {
			req.ContentLength = size
			if size == 0 {
				req.Body = http.NoBody
			}
		}
		return req, err
	})
	if err != nil {
		return a.g.bucketError(err)
	}
	defer res.Body.Close()
	var o gcsObject
	if err := json.NewDecoder(io.LimitReader(res.Body, gcsErrorBody*16)).Decode(&o); err != nil {
		return fmt.Errorf("upload of %s: %w", key, err)
	}
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc.Sum32())
	if o.CRC32C != base64.StdEncoding.EncodeToString(sum[:]) {
		// The object carries the sha256 of bytes it does not hold; left
		// there, every later sync would skip it as already sent.
		_ = a.remove(ctx, key)
		return gpuwarden.Errorf(gpuwarden.EInternal, "%s: the server's CRC32C %q differs from the bytes sent", key, o.CRC32C).
			WithHint("the upload was damaged on the way; sync again")
	}
	return nil
}

func (a gcsAPI) open(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	u := a.g.objectURL(key) + "?alt=media"
	res, err := a.g.do(ctx, true, func() (*http.Request, error) { return http.NewRequestWithContext(ctx, http.MethodGet, u, nil) })
	if statusOf(err) == http.StatusNotFound {
		return nil, 0, &gpuwarden.Error{Code: gpuwarden.ENotFound, Message: key + " not found", Err: err}
	}
	if err != nil {
		return nil, 0, a.g.bucketError(err)
	}
	return res.Body, res.ContentLength, nil
}

func (a gcsAPI) children(ctx context.Context, prefix string) ([]string, error) {
	var out []string
	token := ""
	for {
		q := url.Values{"prefix": {prefix}, "delimiter": {"/"}, "fields": {"prefixes,nextPageToken"}}
		if token != "" {
			q.Set("pageToken", token)
		}
		var page struct {
			Prefixes      []string `json:"prefixes"`
			NextPageToken string   `json:"nextPageToken"`
		}
		if err := a.g.getJSON(ctx, a.g.bucketURL()+"/o?"+q.Encode(), &page); err != nil {
			return nil, a.g.bucketError(err)
		}
		for _, p := range page.Prefixes {
			if name, ok := childName(prefix, p); ok {
				out = append(out, name)
			}
		}
		if page.NextPageToken == "" || page.NextPageToken == token {
			return out, nil
		}
		token = page.NextPageToken
	}
}

func (a gcsAPI) remove(ctx context.Context, key string) error {
	u := a.g.objectURL(key)
	res, err := a.g.do(ctx, true, func() (*http.Request, error) { return http.NewRequestWithContext(ctx, http.MethodDelete, u, nil) })
	if statusOf(err) == http.StatusNotFound {
		return nil
	}
	if err != nil {
		return a.g.bucketError(err)
	}
	res.Body.Close()
	return nil
}

// checkGCSBucket applies Google's bucket naming rules loosely (3–63
// characters of lowercase letters, digits, dots, hyphens and underscores,
// 222 with dots) so a typo fails before any request.
func checkGCSBucket(b string) error {
	ok := len(b) >= 3 && len(b) <= 222
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			ok = false
		}
	}
	if !ok {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "invalid bucket name %q", b).
			WithHint("bucket names are 3 to 63 lowercase letters, digits, dots, hyphens and underscores (222 with dots)")
	}
	return nil
}
