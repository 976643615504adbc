package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/gpuwarden/gpuwarden"
	"github.com/minio/minio-go/v7"
)

// DefaultPartSize is the multipart part size for uploads: large enough that
// a 100 GB checkpoint stays far below S3's 10,000-part limit, small enough
// that the four parts in flight fit comfortably in a training box's memory.
const DefaultPartSize = 64 << 20

// minPartSize is S3's smallest allowed part (the last part excepted).
const minPartSize = 5 << 20

// uploadThreads is how many parts of one file are sent at once; a single
// stream to S3 rarely fills the link of a GPU box.
const uploadThreads = 4

// metaSHA256 is the user-metadata key (x-amz-meta-sha256) that records a
// file's sha256 on its object, so that a later sync can skip it with a HEAD
// instead of downloading it; ETags cannot serve, multipart ETags are not
// content hashes.
const metaSHA256 = "sha256"

// S3 keeps checkpoints in an S3-compatible bucket as PREFIX/NAME/FILE and
// PREFIX/NAME/manifest.json, through minio-go. The store contract is
// blobStore's, the one gs:// and az:// keep; S3 adds only what its client
// needs: part sizes, the payload signing mode and GetBucketLocation.
type S3 struct {
	blobStore
	// Bucket is the bucket's name.
	Bucket string
	// PartSize is the multipart part size; files up to it go in one PUT.
	PartSize uint64
	// UnsignedPayload sends bodies as UNSIGNED-PAYLOAD rather than in
	// aws-chunked framing (see Options.UnsignedPayload).
	UnsignedPayload bool
	// StatedRegion is --store-region: when set, Region returns it without
	// asking the server.
	StatedRegion string

	// secure is whether requests go over https; minio-go signs bodies in
	// aws-chunked framing only over plain http.
	secure bool
	client *minio.Client
	// locator has no region configured, because minio-go answers
	// GetBucketLocation from the configured region without asking, and a
	// residency check must hear the bucket's real location.
	locator *minio.Client
}

var _ gpuwarden.CheckpointStore = (*S3)(nil)

// Region returns --store-region when given, else asks the server where the
// bucket lives (GetBucketLocation), so the CLI can refuse a target outside
// the plan's countries before any upload.
func (s *S3) Region(ctx context.Context) (string, error) {
	if s.StatedRegion != "" {
		return s.StatedRegion, nil
	}
	loc, err := s.locator.GetBucketLocation(ctx, s.Bucket)
	if err != nil {
		return "", fmt.Errorf("locate %s: %w", s.Where(), s3Error(s.Bucket, err))
	}
	return loc, nil
}

// chunkedFraming reports whether uploads go out in aws-chunked framing:
// minio-go uses it over plain http unless the payload is sent unsigned.
func (s *S3) chunkedFraming() bool { return !s.secure && !s.UnsignedPayload }

// partSize is PartSize within S3's bounds, DefaultPartSize when unset.
func (s *S3) partSize() uint64 {
	switch {
	case s.PartSize == 0:
		return DefaultPartSize
	case s.PartSize < minPartSize:
		return minPartSize
	}
	return s.PartSize
}

// maxParts is S3's limit on the parts of one multipart upload.
const maxParts = 10000

// partSizeFor grows the part size for a file too large to fit in maxParts
// parts of the configured size, since minio-go refuses such an upload rather
// than adapting an explicit part size.
func (s *S3) partSizeFor(size int64) uint64 {
	ps := s.partSize()
	if need := uint64((size + maxParts - 1) / maxParts); need > ps {
		ps = (need + 1<<20 - 1) &^ (1<<20 - 1) // whole MiB
	}
	return ps
}

// s3API is the blobAPI of an S3 bucket.
type s3API struct{ s *S3 }

func (a s3API) scheme() string { return "s3://" + a.s.Bucket }

func (a s3API) stat(ctx context.Context, key string) (int64, string, bool, error) {
	info, err := a.s.client.StatObject(ctx, a.s.Bucket, key, minio.StatObjectOptions{})
	if s3Code(err) == minio.NoSuchKey {
		return 0, "", false, nil
	}
	if err != nil {
		return 0, "", false, s3Error(a.s.Bucket, err)
	}
	return info.Size, metaValue(info.UserMetadata, metaSHA256), true, nil
}

// put sends a body up to the part size in one PUT from memory, which gives
// minio-go a seekable body it can retry, and a larger one as a multipart
// upload whose parts are read in order into uploadThreads buffers and sent
// in parallel (each part retryable from its buffer).
//
// Resumability is per file, not per part: minio-go aborts a multipart upload
// that fails, so a file cut off half way is sent whole on the next sync,
// while every file that finished is found by stat and skipped. Tracking
// upload IDs across processes would save at most one file's worth of
// traffic and leave orphaned parts behind on every crash.
//
// Over plain http a signed body goes out in aws-chunked framing, which some
// servers store undecoded; blobStore's size check after the upload catches
// that and storedHint names the way out.
func (a s3API) put(ctx context.Context, key string, r io.Reader, size int64, sha, contentType string) error {
	opts := minio.PutObjectOptions{
		UserMetadata: map[string]string{metaSHA256: sha},
		ContentType:  contentType,
		PartSize:     a.s.partSizeFor(size),
		// minio-go sends UNSIGNED-PAYLOAD instead of aws-chunked framing
		// when the body's sha256 is not to be signed.
		DisableContentSha256: a.s.UnsignedPayload,
	}
	if size == 0 {
		// Over plain http minio-go signs the payload in aws-chunked form and,
		// for an empty body, sends it without a Content-Length, which S3
		// refuses (MissingContentLength); there is nothing to sign anyway.
		opts.DisableContentSha256 = true
	}
	if size <= int64(opts.PartSize) {
		buf := make([]byte, size)
		if _, err := io.ReadFull(r, buf); err != nil {
			return fmt.Errorf("read %s: %w", key, err)
		}
		r = bytes.NewReader(buf)
	} else {
		opts.ConcurrentStreamParts = true
		opts.NumThreads = uploadThreads
	}
	if _, err := a.s.client.PutObject(ctx, a.s.Bucket, key, r, size, opts); err != nil {
		return s3Error(a.s.Bucket, err)
	}
	return nil
}

// storedHint explains an object stored larger than sent when uploads go out
// in aws-chunked framing: the excess is the framing (chunk sizes and
// signatures) the server kept as data, and retrying sends the same framing
// again, so only another signing mode helps.
func (a s3API) storedHint(stored, sent int64) string {
	if stored > sent && a.s.chunkedFraming() {
		return "this server stored the signed chunk framing: use https, or --s3-unsigned-payload"
	}
	return ""
}

// open starts the GET and waits for its headers (Object.Stat issues the
// request), because minio-go otherwise reports a missing object only on the
// first Read.
func (a s3API) open(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	obj, err := a.s.client.GetObject(ctx, a.s.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, 0, s3Error(a.s.Bucket, err)
	}
	info, err := obj.Stat()
	if err != nil {
		obj.Close()
		if s3Code(err) == minio.NoSuchKey {
			return nil, 0, &gpuwarden.Error{Code: gpuwarden.ENotFound, Message: key + " not found", Err: err}
		}
		return nil, 0, s3Error(a.s.Bucket, err)
	}
	return obj, info.Size, nil
}

// children lists without Recursive, so the listing is delimited by "/" and
// yields one common prefix per checkpoint rather than every file of every
// one.
func (a s3API) children(ctx context.Context, prefix string) ([]string, error) {
	var out []string
	for obj := range a.s.client.ListObjects(ctx, a.s.Bucket, minio.ListObjectsOptions{Prefix: prefix}) {
		if obj.Err != nil {
			return nil, s3Error(a.s.Bucket, obj.Err)
		}
		if name, ok := childName(prefix, obj.Key); ok {
			out = append(out, name)
		}
	}
	return out, nil
}

func (a s3API) remove(ctx context.Context, key string) error {
	err := a.s.client.RemoveObject(ctx, a.s.Bucket, key, minio.RemoveObjectOptions{})
	if err == nil || s3Code(err) == minio.NoSuchKey {
		return nil
	}
	return s3Error(a.s.Bucket, err)
}

// s3Code returns the S3 error code in err's chain, "" when there is none.
func s3Code(err error) string {
	var er minio.ErrorResponse
	if errors.As(err, &er) {
		return er.Code
	}
	return ""
}

// s3Error gives the failures a user can fix the codes and hints the CLI maps
// once: a missing bucket and refused credentials.
func s3Error(bucket string, err error) error {
	switch s3Code(err) {
	case minio.NoSuchBucket:
		return (&gpuwarden.Error{Code: gpuwarden.ENotFound, Message: fmt.Sprintf("bucket %s does not exist", bucket), Err: err}).
			WithHint("create the bucket in a region the plan allows, or fix the s3:// target")
	case minio.AccessDenied, minio.InvalidAccessKeyID, minio.SignatureDoesNotMatch, "ExpiredToken", "InvalidToken":
		return (&gpuwarden.Error{Code: gpuwarden.EUnauthorized, Message: fmt.Sprintf("access to bucket %s refused", bucket), Err: err}).
			WithHint("check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN (or the instance role) and the bucket policy")
	}
	return err
}
