package objstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/manifest"
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
// PREFIX/NAME/manifest.json.
type S3 struct {
	// Bucket is the bucket's name.
	Bucket string
	// Prefix is the key prefix without slashes at either end, "" for the
	// bucket's root.
	Prefix string
	// PartSize is the multipart part size; files up to it go in one PUT.
	PartSize uint64
	// Sent, when set, is called after each file is uploaded, so the CLI can
	// show progress and tests can count what a sync really sent.
	Sent func(file string, size int64)
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

// Where returns "s3://bucket/prefix", the form Open accepts back.
func (s *S3) Where() string {
	if s.Prefix == "" {
		return "s3://" + s.Bucket
	}
	return "s3://" + s.Bucket + "/" + s.Prefix
}

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

// base is the key prefix under which checkpoints are named.
func (s *S3) base() string {
	if s.Prefix == "" {
		return ""
	}
	return s.Prefix + "/"
}

// key returns the object key of file in checkpoint name.
func (s *S3) key(name, file string) string { return s.base() + name + "/" + file }

// Push uploads cp's files, skipping each object that already has the same
// size and sha256 metadata, and writes the manifest last. It returns nil
// only once every object has been seen on the server with the file's size
// and sha256 (by the HEAD that skipped it or the one after its upload) and
// the manifest read back from the server is byte for byte the one sent, so
// that a caller may call the checkpoint durable.
//
// Resumability is per file, not per part: minio-go aborts a multipart upload
// that fails, so a file cut off half way is sent whole on the next sync,
// while every file that finished is found by HEAD and skipped. Tracking
// upload IDs across processes would save at most one file's worth of
// traffic and leave orphaned parts behind on every crash.
func (s *S3) Push(ctx context.Context, cp gpuwarden.Checkpoint) error {
	if err := s.push(ctx, cp); err != nil {
		return fmt.Errorf("push %s to %s: %w", cp.Name, s.Where(), err)
	}
	return nil
}

func (s *S3) push(ctx context.Context, cp gpuwarden.Checkpoint) error {
	if cp.Path == "" {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "checkpoint has no path on this box")
	}
	data, err := manifest.Encode(cp)
	if err != nil {
		return err
	}
	if err := s.hideChanged(ctx, cp); err != nil {
		return err
	}
	for _, f := range cp.Files {
		if err := ctx.Err(); err != nil {
			return err
		}
		key := s.key(cp.Name, f.Path)
		held, err := s.holds(ctx, key, f)
		if err != nil {
			return err
		}
		if held {
			continue
		}
		if err := s.upload(ctx, key, filepath.Join(cp.Path, filepath.FromSlash(f.Path)), f); err != nil {
			return err
		}
		if s.Sent != nil {
			s.Sent(f.Path, f.Size)
		}
	}
	mkey := s.key(cp.Name, manifest.Name)
	_, err = s.client.PutObject(ctx, s.Bucket, mkey, bytes.NewReader(data),
		int64(len(data)), minio.PutObjectOptions{ContentType: "application/json", DisableContentSha256: s.UnsignedPayload})
	if err != nil {
		return fmt.Errorf("put manifest: %w", s3Error(s.Bucket, err))
	}
	back, _, err := s.manifestBytes(ctx, cp.Name)
	if err != nil {
		return fmt.Errorf("read manifest back: %w", err)
	}
	if !bytes.Equal(back, data) {
		// A listed manifest the server garbles would make the checkpoint
		// look durable, or make List drop it at random; it must go.
		s.remove(mkey)
		return manifestDiffers(cp.Name, len(data), len(back))
	}
	return nil
}

// hideChanged deletes the manifest of an earlier push under the same name
// when it lists different files, so List does not offer a checkpoint whose
// objects are being replaced.
func (s *S3) hideChanged(ctx context.Context, cp gpuwarden.Checkpoint) error {
	old, err := s.manifest(ctx, cp.Name)
	if err != nil || sameFiles(old, cp) {
		return nil
	}
	if err := s.client.RemoveObject(ctx, s.Bucket, s.key(cp.Name, manifest.Name), minio.RemoveObjectOptions{}); err != nil {
		return fmt.Errorf("remove old manifest: %w", s3Error(s.Bucket, err))
	}
	return nil
}

// holds reports whether the object at key has f's size and sha256 metadata.
func (s *S3) holds(ctx context.Context, key string, f gpuwarden.ManifestFile) (bool, error) {
	info, err := s.client.StatObject(ctx, s.Bucket, key, minio.StatObjectOptions{})
	if s3Code(err) == minio.NoSuchKey {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat %s: %w", key, s3Error(s.Bucket, err))
	}
	return info.Size == f.Size && userMeta(info.UserMetadata, metaSHA256) == f.SHA256, nil
}

// upload sends the file at src to key with its sha256 as metadata and makes
// sure the bytes sent are the ones in the manifest.
func (s *S3) upload(ctx context.Context, key, src string, f gpuwarden.ManifestFile) error {
	in, err := os.Open(src)
	if err != nil {
		return manifest.FileError("open", src, err)
	}
	defer in.Close()
	opts := minio.PutObjectOptions{
		UserMetadata: map[string]string{metaSHA256: f.SHA256},
		ContentType:  "application/octet-stream",
		PartSize:     s.partSizeFor(f.Size),
		// minio-go sends UNSIGNED-PAYLOAD instead of aws-chunked framing
		// when the body's sha256 is not to be signed.
		DisableContentSha256: s.UnsignedPayload,
	}
	if f.Size == 0 {
		// Over plain http minio-go signs the payload in aws-chunked form and,
		// for an empty body, sends it without a Content-Length, which S3
		// refuses (MissingContentLength); there is nothing to sign anyway.
		opts.DisableContentSha256 = true
	}
	if f.Size <= int64(opts.PartSize) {
		// One PUT: read the file into memory and check it before sending,
		// which also gives minio-go a seekable body it can retry.
		buf := make([]byte, f.Size)
		if _, err := io.ReadFull(ctxReader{ctx, in}, buf); err != nil {
			return fmt.Errorf("read %s: %w", src, err)
		}
		if n, _ := io.Copy(io.Discard, io.LimitReader(in, 1)); n != 0 {
			return manifest.SizeMismatch(f, f.Size+n)
		}
		if sum := sha256.Sum256(buf); hex.EncodeToString(sum[:]) != f.SHA256 {
			return manifest.ChecksumMismatch(f.Path)
		}
		if _, err := s.client.PutObject(ctx, s.Bucket, key, bytes.NewReader(buf), f.Size, opts); err != nil {
			return fmt.Errorf("put %s: %w", key, s3Error(s.Bucket, err))
		}
	} else {
		// Multipart: parts are read in order into NumThreads buffers and sent
		// in parallel (each part retryable from its buffer), and the file is
		// hashed on the way, so it is read once.
		opts.ConcurrentStreamParts = true
		opts.NumThreads = uploadThreads
		h := sha256.New()
		r := io.TeeReader(ctxReader{ctx, in}, h)
		if _, err := s.client.PutObject(ctx, s.Bucket, key, r, f.Size, opts); err != nil {
			return fmt.Errorf("put %s: %w", key, s3Error(s.Bucket, err))
		}
		n, _ := io.Copy(io.Discard, io.LimitReader(in, 1))
		if hex.EncodeToString(h.Sum(nil)) != f.SHA256 || n != 0 {
			// The source changed after it was committed: the object now
			// carries a sha256 its bytes do not have, so it must go.
			s.remove(key)
			return manifest.ChecksumMismatch(f.Path)
		}
	}
	// Read back what the server stored: a short object with the right
	// metadata would otherwise be skipped by every later sync.
	info, err := s.client.StatObject(ctx, s.Bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return fmt.Errorf("stat %s after upload: %w", key, s3Error(s.Bucket, err))
	}
	if info.Size != f.Size || userMeta(info.UserMetadata, metaSHA256) != f.SHA256 {
		s.remove(key)
		e := gpuwarden.Errorf(gpuwarden.EInternal, "%s stored as %d bytes, sent %d", key, info.Size, f.Size)
		if info.Size > f.Size && s.chunkedFraming() {
			// The excess is the aws-chunked framing (chunk sizes and
			// signatures) the server kept as data; retrying sends the
			// same framing again, so only another signing mode helps.
			return e.WithHint("this server stored the signed chunk framing: use https, or --s3-unsigned-payload")
		}
		return e.WithHint("the server kept a different object than was sent; retry the sync")
	}
	return nil
}

// chunkedFraming reports whether uploads go out in aws-chunked framing:
// minio-go uses it over plain http unless the payload is sent unsigned.
func (s *S3) chunkedFraming() bool { return !s.secure && !s.UnsignedPayload }

// remove deletes a bad upload on a best-effort basis; the error that made it
// bad is the one worth reporting, and a leftover is re-sent next time since
// its metadata will not match.
func (s *S3) remove(key string) {
	_ = s.client.RemoveObject(context.Background(), s.Bucket, key, minio.RemoveObjectOptions{})
}

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

// manifest reads and checks NAME/manifest.json; a missing one is ENotFound.
func (s *S3) manifest(ctx context.Context, name string) (gpuwarden.Checkpoint, error) {
	data, found, err := s.manifestBytes(ctx, name)
	if err != nil {
		return gpuwarden.Checkpoint{}, err
	}
	if !found {
		return gpuwarden.Checkpoint{}, notStored(name, s.Where())
	}
	return manifest.Decode(data, name)
}

// manifestBytes reads NAME/manifest.json as stored; found is false when
// there is none.
func (s *S3) manifestBytes(ctx context.Context, name string) (data []byte, found bool, err error) {
	obj, err := s.client.GetObject(ctx, s.Bucket, s.key(name, manifest.Name), minio.GetObjectOptions{})
	if err == nil {
		defer obj.Close()
		// A manifest of a million files is some 150 MB; anything larger is
		// not one of ours, and is refused (EInvalid, so List passes over it)
		// after at most MaxSize+1 bytes.
		var st minio.ObjectInfo
		if st, err = obj.Stat(); err == nil && st.Size > manifest.MaxSize {
			return nil, false, manifest.TooLarge(s.key(name, manifest.Name), st.Size)
		}
		if err == nil {
			data, err = manifest.ReadCapped(obj, s.key(name, manifest.Name))
		}
		if err == nil {
			return data, true, nil
		}
		if gpuwarden.ErrorCodeOf(err) == gpuwarden.EInvalid {
			return nil, false, err
		}
	}
	if s3Code(err) == minio.NoSuchKey {
		return nil, false, nil
	}
	return nil, false, fmt.Errorf("get manifest of %s: %w", name, s3Error(s.Bucket, err))
}

// List returns the checkpoints under the prefix that have a manifest, oldest
// first.
func (s *S3) List(ctx context.Context) ([]gpuwarden.Checkpoint, error) {
	cps := []gpuwarden.Checkpoint{}
	// Without Recursive the listing is delimited by "/", so it yields one
	// common prefix per checkpoint rather than every file of every one.
	for obj := range s.client.ListObjects(ctx, s.Bucket, minio.ListObjectsOptions{Prefix: s.base()}) {
		if obj.Err != nil {
			return nil, fmt.Errorf("list %s: %w", s.Where(), s3Error(s.Bucket, obj.Err))
		}
		name, ok := strings.CutSuffix(strings.TrimPrefix(obj.Key, s.base()), "/")
		if !ok || manifest.CheckName(name) != nil {
			continue
		}
		cp, err := s.manifest(ctx, name)
		switch code := gpuwarden.ErrorCodeOf(err); {
		case err == nil:
			cps = append(cps, cp)
		case code == gpuwarden.ENotFound, code == gpuwarden.EInvalid:
			// A torn push has no manifest; a foreign or damaged one must
			// not hide the good checkpoints.
		default:
			return nil, fmt.Errorf("list %s: %w", s.Where(), err)
		}
	}
	sortCheckpoints(cps)
	return cps, nil
}

// Pull downloads checkpoint name into dir/NAME, verifying every file's sha256.
func (s *S3) Pull(ctx context.Context, name, dir string) (gpuwarden.Checkpoint, error) {
	cp, err := s.pull(ctx, name, dir)
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("pull %s from %s: %w", name, s.Where(), err)
	}
	return cp, nil
}

func (s *S3) pull(ctx context.Context, name, dir string) (gpuwarden.Checkpoint, error) {
	if err := manifest.CheckName(name); err != nil {
		return gpuwarden.Checkpoint{}, err
	}
	cp, err := s.manifest(ctx, name)
	if err != nil {
		return gpuwarden.Checkpoint{}, err
	}
	return pullInto(ctx, cp, dir, func(ctx context.Context, file string) (io.ReadCloser, error) {
		obj, err := s.client.GetObject(ctx, s.Bucket, s.key(name, file), minio.GetObjectOptions{})
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", file, s3Error(s.Bucket, err))
		}
		return s3Reader{obj, s.Bucket, file}, nil
	})
}

// s3Reader gives read errors (minio-go reports a missing object only on
// the first Read) the same codes as the rest of the store.
type s3Reader struct {
	obj    *minio.Object
	bucket string
	file   string
}

// Read reads from the object, classifying a failure.
func (r s3Reader) Read(p []byte) (int, error) {
	n, err := r.obj.Read(p)
	if err != nil && err != io.EOF {
		if s3Code(err) == minio.NoSuchKey {
			return n, gpuwarden.Errorf(gpuwarden.ENotFound, "%s is missing from the store", r.file).
				WithHint("the checkpoint was damaged or is being deleted; use another one")
		}
		return n, fmt.Errorf("get %s: %w", r.file, s3Error(r.bucket, err))
	}
	return n, err
}

// Close releases the object's connection.
func (r s3Reader) Close() error { return r.obj.Close() }

// Delete removes checkpoint name: exactly the objects its manifest lists,
// the manifest first (read into memory, then removed) so that a delete cut
// short leaves an invisible leftover rather than a listed, broken
// checkpoint. Any other object under PREFIX/NAME/ was not written by this
// checkpoint's push and stays.
//
// Objects under PREFIX/NAME/ without a manifest (a torn push, or objects
// someone else put there) cannot be attributed to gpuwarden, so nothing is
// deleted and the result is nil, as it is for a name the store does not
// hold. A manifest that does not decode is refused rather than guessed at.
func (s *S3) Delete(ctx context.Context, name string) error {
	if err := s.delete(ctx, name); err != nil {
		return fmt.Errorf("delete %s from %s: %w", name, s.Where(), err)
	}
	return nil
}

func (s *S3) delete(ctx context.Context, name string) error {
	if err := manifest.CheckName(name); err != nil {
		return err
	}
	data, found, err := s.manifestBytes(ctx, name)
	if gpuwarden.ErrorCodeOf(err) == gpuwarden.EInvalid {
		return unattributable(name, s.Where(), err)
	}
	if err != nil || !found {
		return err
	}
	cp, err := manifest.Decode(data, name)
	if err != nil {
		return unattributable(name, s.Where(), err)
	}
	if err := s.client.RemoveObject(ctx, s.Bucket, s.key(name, manifest.Name), minio.RemoveObjectOptions{}); err != nil && s3Code(err) != minio.NoSuchKey {
		return fmt.Errorf("remove manifest: %w", s3Error(s.Bucket, err))
	}
	ch := make(chan minio.ObjectInfo, len(cp.Files))
	for _, f := range cp.Files {
		ch <- minio.ObjectInfo{Key: s.key(name, f.Path)}
	}
	close(ch)
	// The error channel is drained to the end, or RemoveObjects' goroutine
	// would block on it forever.
	var firstErr error
	for rerr := range s.client.RemoveObjects(ctx, s.Bucket, ch, minio.RemoveObjectsOptions{}) {
		if firstErr == nil && s3Code(rerr.Err) != minio.NoSuchKey {
			firstErr = fmt.Errorf("remove %s: %w", rerr.ObjectName, s3Error(s.Bucket, rerr.Err))
		}
	}
	return firstErr
}

// userMeta looks a user-metadata key up without regard to case, because
// servers differ in how they canonicalise x-amz-meta-* header names.
func userMeta(m map[string]string, key string) string {
	for k, v := range m {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return ""
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
