package objstore

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/gpuwarden/gpuwarden"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// DefaultEndpoint is the S3 endpoint used when Options.Endpoint is empty.
const DefaultEndpoint = "s3.amazonaws.com"

// Options configures the stores: most fields are S3's; every store takes
// Sent and StoreRegion.
type Options struct {
	// Endpoint is host[:port] of the S3-compatible service; an http:// or
	// https:// prefix is accepted and sets Insecure accordingly.
	Endpoint string
	// Region signs requests for that region; empty lets minio-go look the
	// bucket's region up, which costs one request per bucket.
	Region string
	// AccessKey and SecretKey are static credentials; when AccessKey is empty
	// the AWS environment variables, ~/.aws/credentials and then the
	// instance role are tried in turn.
	AccessKey string
	// SecretKey goes with AccessKey.
	SecretKey string
	// SessionToken goes with temporary AccessKey/SecretKey pairs.
	SessionToken string
	// Insecure talks plain http, for a MinIO inside the same private network.
	Insecure bool
	// PathStyle addresses the bucket as host/bucket instead of bucket.host,
	// which most self-hosted S3-compatible services need.
	PathStyle bool
	// Transport carries the S3 requests; set it to trust a private CA.
	// Nil uses minio-go's default.
	Transport http.RoundTripper
	// PartSize is the multipart part size, DefaultPartSize when zero.
	PartSize uint64
	// UnsignedPayload sends S3 bodies as UNSIGNED-PAYLOAD instead of
	// minio-go's aws-chunked streaming signature, which it uses over plain
	// http and which some S3-compatible servers (s3rver) store undecoded.
	UnsignedPayload bool
	// StoreRegion states where the store is (--store-region): a region name
	// or a country code. Region returns it instead of asking, because a
	// self-hosted store reports no region (S3 reads that as us-east-1) and
	// an Azure account's location is not visible to blob requests.
	StoreRegion string
	// Sent, when set, is called after each file a push writes to the store.
	Sent func(file string, size int64)
}

// Regional is implemented by every store Open returns; the CLI asks it where
// the data would live before pushing anything, to enforce residency.
type Regional interface {
	// Region returns the store's region, "" when it cannot be known.
	Region(ctx context.Context) (string, error)
}

var (
	_ Regional = (*Local)(nil)
	_ Regional = (*S3)(nil)
	_ Regional = (*GCS)(nil)
	_ Regional = (*Azure)(nil)
)

// RegionOf returns the region of store, or "" for a store that cannot tell.
func RegionOf(ctx context.Context, store gpuwarden.CheckpointStore) (string, error) {
	if r, ok := store.(Regional); ok {
		return r.Region(ctx)
	}
	return "", nil
}

// Open returns the store a target names: a local path or file:///path gives
// a Local, s3://bucket/prefix an S3, gs://bucket/prefix a GCS and
// az://account/container/prefix an Azure; it makes no request, so a wrong
// credential shows up on first use.
func Open(ctx context.Context, target string, opts Options) (gpuwarden.CheckpointStore, error) {
	badTarget := func(format string, args ...any) error {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "checkpoint target %q: %s", target, fmt.Sprintf(format, args...)).
			WithHint("use a directory (/mnt/ckpt or file:///mnt/ckpt), s3://bucket/prefix, gs://bucket/prefix or az://account/container/prefix")
	}
	if strings.TrimSpace(target) == "" {
		return nil, badTarget("empty")
	}
	scheme, _, hasScheme := strings.Cut(target, "://")
	if !hasScheme {
		return newLocal(target, opts)
	}
	u, err := url.Parse(target)
	if err != nil {
		return nil, badTarget("%v", err)
	}
	switch strings.ToLower(scheme) {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, badTarget("file URLs name a path on this box, not on host %s", u.Host)
		}
		if u.Path == "" {
			return nil, badTarget("no path after file://")
		}
		return newLocal(u.Path, opts)
	case "s3", "gs", "az":
		if u.Host == "" {
			return nil, badTarget("no bucket after %s://", scheme)
		}
		if u.RawQuery != "" || u.Fragment != "" || u.User != nil || u.Port() != "" {
			return nil, badTarget("only %s://%s/prefix is understood", scheme, map[string]string{"s3": "bucket", "gs": "bucket", "az": "account/container"}[strings.ToLower(scheme)])
		}
		prefix := strings.Trim(u.Path, "/")
		if prefix != "" && (strings.Contains(prefix, "//") || hasDotSegment(prefix)) {
			return nil, badTarget("prefix %q has empty or dot segments", prefix)
		}
		switch strings.ToLower(scheme) {
		case "gs":
			return NewGCS(ctx, u.Host, prefix, opts)
		case "az":
			containerName, rest, _ := strings.Cut(prefix, "/")
			if containerName == "" {
				return nil, badTarget("no container after az://%s/", u.Host)
			}
			return NewAzure(u.Host, containerName, rest, opts)
		}
		return NewS3(u.Host, prefix, opts)
	default:
		return nil, badTarget("unknown scheme %s", scheme)
	}
}

// hasDotSegment reports "." or ".." segments, which S3 would keep literally
// but which would make the same target look like two places.
func hasDotSegment(p string) bool {
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// newLocal makes the path absolute, since the supervisor may change its
// working directory and Where must name the same place for people.
func newLocal(p string, opts Options) (*Local, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return nil, fmt.Errorf("checkpoint target %s: %w", p, err)
	}
	return &Local{Dir: abs, Sent: opts.Sent, StatedRegion: opts.StoreRegion}, nil
}

// NewS3 returns a store for bucket under prefix ("" for the bucket's root).
func NewS3(bucket, prefix string, opts Options) (*S3, error) {
	endpoint := opts.Endpoint
	secure := !opts.Insecure
	switch {
	case endpoint == "":
		endpoint = DefaultEndpoint
	case strings.HasPrefix(endpoint, "http://"):
		endpoint, secure = strings.TrimPrefix(endpoint, "http://"), false
	case strings.HasPrefix(endpoint, "https://"):
		endpoint, secure = strings.TrimPrefix(endpoint, "https://"), true
	}
	endpoint = strings.TrimSuffix(endpoint, "/")
	var creds *credentials.Credentials
	if opts.AccessKey != "" {
		creds = credentials.NewStaticV4(opts.AccessKey, opts.SecretKey, opts.SessionToken)
	} else {
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{},
			&credentials.FileAWSCredentials{},
			&credentials.IAM{},
		})
	}
	lookup := minio.BucketLookupAuto
	if opts.PathStyle {
		lookup = minio.BucketLookupPath
	}
	newClient := func(region string) (*minio.Client, error) {
		c, err := minio.New(endpoint, &minio.Options{Creds: creds, Secure: secure, Region: region, BucketLookup: lookup, Transport: opts.Transport})
		if err != nil {
			return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "s3 endpoint %q: %v", endpoint, err).
				WithHint("give the endpoint as host or host:port")
		}
		return c, nil
	}
	client, err := newClient(opts.Region)
	if err != nil {
		return nil, err
	}
	locator, err := newClient("")
	if err != nil {
		return nil, err
	}
	if err := checkBucket(bucket); err != nil {
		return nil, err
	}
	s := &S3{Bucket: bucket, PartSize: opts.PartSize, UnsignedPayload: opts.UnsignedPayload,
		StatedRegion: opts.StoreRegion, secure: secure, client: client, locator: locator}
	s.blobStore = blobStore{Prefix: prefix, Sent: opts.Sent, api: s3API{s}}
	return s, nil
}

// checkBucket applies S3's bucket naming rules loosely (3–63 characters of
// lowercase letters, digits, dots and hyphens) so a typo fails before any
// request.
func checkBucket(b string) error {
	ok := len(b) >= 3 && len(b) <= 63
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			ok = false
		}
	}
	if !ok {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "invalid bucket name %q", b).
			WithHint("bucket names are 3 to 63 lowercase letters, digits, dots and hyphens")
	}
	return nil
}
