package objstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/manifest"
)

// blobAPI is what a cloud's object client must do for blobStore to keep the
// store contract; s3://, gs:// and az:// each implement it over their
// client, so that the contract (manifest last, verify, bounded reads,
// delete only what a manifest lists) is written once for all three.
type blobAPI interface {
	// scheme returns the target's form up to the prefix, e.g. "gs://bucket".
	scheme() string
	// stat returns an object's size and sha256 metadata; found is false
	// when there is no such object.
	stat(ctx context.Context, key string) (size int64, sha string, found bool, err error)
	// put stores size bytes read from r at key with sha as its sha256
	// metadata; it reads r to its end, and fails when the server reports
	// having stored other bytes than it was sent.
	put(ctx context.Context, key string, r io.Reader, size int64, sha, contentType string) error
	// open reads the object at key; size is the server's size for it. A
	// missing object is an ENotFound error.
	open(ctx context.Context, key string) (rc io.ReadCloser, size int64, err error)
	// children lists the names one level below prefix (which ends in "/"),
	// i.e. the "NAME/" common prefixes of a delimited listing.
	children(ctx context.Context, prefix string) ([]string, error)
	// remove deletes the object at key; a missing one is not an error.
	remove(ctx context.Context, key string) error
}

// storedHinter is a blobAPI that can tell why its server kept an object of
// another size than was sent, where the generic hint (sync again) would
// only repeat the failure: S3 over plain http, whose signed chunk framing
// some servers store as data.
type storedHinter interface {
	// storedHint returns the hint for an object stored as stored bytes
	// when sent were sent, "" when it knows no better one.
	storedHint(stored, sent int64) string
}

// blobStore keeps checkpoints in an object store as PREFIX/NAME/FILE and
// PREFIX/NAME/manifest.json, over any blobAPI.
type blobStore struct {
	// Prefix is the key prefix without slashes at either end, "" for the
	// bucket's or container's root.
	Prefix string
	// Sent, when set, is called after each file is uploaded, so the CLI can
	// show progress and tests can count what a sync really sent.
	Sent func(file string, size int64)

	api blobAPI
}

var _ gpuwarden.CheckpointStore = (*blobStore)(nil)

// Where returns the target the store was opened from, the form Open
// accepts back.
func (s *blobStore) Where() string {
	if s.Prefix == "" {
		return s.api.scheme()
	}
	return s.api.scheme() + "/" + s.Prefix
}

// base is the key prefix under which checkpoints are named.
func (s *blobStore) base() string {
	if s.Prefix == "" {
		return ""
	}
	return s.Prefix + "/"
}

// key returns the object key of file in checkpoint name.
func (s *blobStore) key(name, file string) string { return s.base() + name + "/" + file }

// Push uploads cp's files, skipping each object that already has the same
// size and sha256 metadata, and writes the manifest last. It returns nil
// only once every object has been seen on the server with the file's size
// and sha256 and the manifest read back from the server is byte for byte
// the one sent, so that a caller may call the checkpoint durable.
func (s *blobStore) Push(ctx context.Context, cp gpuwarden.Checkpoint) error {
	if err := s.push(ctx, cp); err != nil {
		return fmt.Errorf("push %s to %s: %w", cp.Name, s.Where(), err)
	}
	return nil
}

func (s *blobStore) push(ctx context.Context, cp gpuwarden.Checkpoint) error {
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
		size, sha, found, err := s.api.stat(ctx, key)
		if err != nil {
			return fmt.Errorf("stat %s: %w", key, err)
		}
		if found && size == f.Size && sha == f.SHA256 {
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
	sum := sha256.Sum256(data)
	if err := s.api.put(ctx, mkey, bytes.NewReader(data), int64(len(data)), hex.EncodeToString(sum[:]), "application/json"); err != nil {
		return fmt.Errorf("put manifest: %w", err)
	}
	back, _, err := s.manifestBytes(ctx, cp.Name)
	if err != nil {
		return fmt.Errorf("read manifest back: %w", err)
	}
	if !bytes.Equal(back, data) {
		// A listed manifest the server garbles would make the checkpoint
		// look durable, or make List drop it at random; it must go.
		s.drop(mkey)
		return manifestDiffers(cp.Name, len(data), len(back))
	}
	return nil
}

// hideChanged deletes the manifest of an earlier push under the same name
// when it lists different files, so List does not offer a checkpoint whose
// objects are being replaced.
func (s *blobStore) hideChanged(ctx context.Context, cp gpuwarden.Checkpoint) error {
	old, err := s.manifest(ctx, cp.Name)
	if err != nil || sameFiles(old, cp) {
		return nil
	}
	if err := s.api.remove(ctx, s.key(cp.Name, manifest.Name)); err != nil {
		return fmt.Errorf("remove old manifest: %w", err)
	}
	return nil
}

// upload streams the file at src to key with its sha256 as metadata,
// hashing it on the way so it is read once, and then checks what the
// server holds: a short object with the right metadata would otherwise be
// skipped by every later sync.
func (s *blobStore) upload(ctx context.Context, key, src string, f gpuwarden.ManifestFile) error {
	in, err := os.Open(src)
	if err != nil {
		return manifest.FileError("open", src, err)
	}
	defer in.Close()
	h := sha256.New()
	// The limit keeps a file grown since its manifest from sending more
	// than the size the object is declared with.
	r := io.TeeReader(io.LimitReader(ctxReader{ctx, in}, f.Size), h)
	if err := s.api.put(ctx, key, r, f.Size, f.SHA256, "application/octet-stream"); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	n, _ := io.Copy(io.Discard, io.LimitReader(in, 1))
	if hex.EncodeToString(h.Sum(nil)) != f.SHA256 || n != 0 {
		// The source changed after it was committed: the object now
		// carries a sha256 its bytes do not have, so it must go.
		s.drop(key)
		return manifest.ChecksumMismatch(f.Path)
	}
	size, sha, found, err := s.api.stat(ctx, key)
	if err != nil {
		return fmt.Errorf("stat %s after upload: %w", key, err)
	}
	if !found || size != f.Size || sha != f.SHA256 {
		s.drop(key)
		hint := "the server kept a different object than was sent; check the store, then sync again"
		if h, ok := s.api.(storedHinter); ok {
			if better := h.storedHint(size, f.Size); better != "" {
				hint = better
			}
		}
		return gpuwarden.Errorf(gpuwarden.EInternal, "%s stored as %d bytes, sent %d", key, size, f.Size).WithHint("%s", hint)
	}
	return nil
}

// drop deletes a bad upload on a best-effort basis; the error that made it
// bad is the one worth reporting, and a leftover is re-sent next time since
// its metadata will not match.
// A server that stopped answering gets dropTimeout, not forever.
func (s *blobStore) drop(key string) {
	ctx, cancel := context.WithTimeout(context.Background(), dropTimeout)
	defer cancel()
	_ = s.api.remove(ctx, key)
}

// dropTimeout bounds the clean-up of a bad upload.
const dropTimeout = 30 * time.Second

// manifest reads and checks NAME/manifest.json; a missing one is ENotFound.
func (s *blobStore) manifest(ctx context.Context, name string) (gpuwarden.Checkpoint, error) {
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
// there is none. A manifest the server says is over manifest.MaxSize is
// refused before a byte is read, and any other after MaxSize+1 bytes
// (EInvalid, so List passes over it).
func (s *blobStore) manifestBytes(ctx context.Context, name string) (data []byte, found bool, err error) {
	key := s.key(name, manifest.Name)
	rc, size, err := s.api.open(ctx, key)
	if gpuwarden.ErrorCodeOf(err) == gpuwarden.ENotFound {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("get manifest of %s: %w", name, err)
	}
	defer rc.Close()
	if size > manifest.MaxSize {
		return nil, false, manifest.TooLarge(key, size)
	}
	data, err = manifest.ReadCapped(ctxReader{ctx, rc}, key)
	if err != nil {
		return nil, false, err
	}
	return data, true, nil
}

// List returns the checkpoints under the prefix that have a manifest, oldest
// first.
func (s *blobStore) List(ctx context.Context) ([]gpuwarden.Checkpoint, error) {
	kids, err := s.api.children(ctx, s.base())
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", s.Where(), err)
	}
	cps := []gpuwarden.Checkpoint{}
	for _, name := range kids {
		if manifest.CheckName(name) != nil {
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
func (s *blobStore) Pull(ctx context.Context, name, dir string) (gpuwarden.Checkpoint, error) {
	cp, err := s.pull(ctx, name, dir)
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("pull %s from %s: %w", name, s.Where(), err)
	}
	return cp, nil
}

func (s *blobStore) pull(ctx context.Context, name, dir string) (gpuwarden.Checkpoint, error) {
	if err := manifest.CheckName(name); err != nil {
		return gpuwarden.Checkpoint{}, err
	}
	cp, err := s.manifest(ctx, name)
	if err != nil {
		return gpuwarden.Checkpoint{}, err
	}
	return pullInto(ctx, cp, dir, func(ctx context.Context, file string) (io.ReadCloser, error) {
		rc, _, err := s.api.open(ctx, s.key(name, file))
		if gpuwarden.ErrorCodeOf(err) == gpuwarden.ENotFound {
			return nil, (&gpuwarden.Error{Code: gpuwarden.ENotFound, Message: file + " is missing from the store", Err: err}).
				WithHint("the checkpoint was damaged or is being deleted; use another one")
		}
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", file, err)
		}
		return rc, nil
	})
}

// Delete removes checkpoint name: exactly the objects its manifest lists,
// the manifest first (read into memory, then removed) so that a delete cut
// short leaves an invisible leftover rather than a listed, broken
// checkpoint. Objects without a manifest cannot be attributed to gpuwarden
// and stay, as does any object the manifest does not list.
func (s *blobStore) Delete(ctx context.Context, name string) error {
	if err := s.delete(ctx, name); err != nil {
		return fmt.Errorf("delete %s from %s: %w", name, s.Where(), err)
	}
	return nil
}

func (s *blobStore) delete(ctx context.Context, name string) error {
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
	if err := s.api.remove(ctx, s.key(name, manifest.Name)); err != nil {
		return fmt.Errorf("remove manifest: %w", err)
	}
	for _, f := range cp.Files {
		if err := s.api.remove(ctx, s.key(name, f.Path)); err != nil {
			return fmt.Errorf("remove %s: %w", f.Path, err)
		}
	}
	return nil
}

// childName turns a delimited listing's common prefix ("PREFIX/NAME/") into
// NAME, false when it is not directly below base.
func childName(base, common string) (string, bool) {
	rest, ok := strings.CutPrefix(common, base)
	if !ok {
		return "", false
	}
	name, ok := strings.CutSuffix(rest, "/")
	if !ok || name == "" || strings.Contains(name, "/") {
		return "", false
	}
	return name, true
}

// metaValue looks a metadata key up without regard to case, because
// servers and clients differ in how they canonicalise header names.
func metaValue[V string | *string](m map[string]V, key string) string {
	for k, v := range m {
		if strings.EqualFold(k, key) {
			switch v := any(v).(type) {
			case string:
				return v
			case *string:
				if v != nil {
					return *v
				}
			}
		}
	}
	return ""
}
