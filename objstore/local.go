package objstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/manifest"
)

// Local keeps checkpoints in a directory, typically another disk or a network
// mount, as DIR/NAME/FILE and DIR/NAME/manifest.json.
//
// Dir itself may be a symlink (a mount point often is), but nothing beneath
// it may be: gpuwarden never writes one, so a link there was put by someone
// else, and following it would let a push, pull or delete reach data outside
// the store. Every operation refuses such a checkpoint and List skips it.
type Local struct {
	// Dir is the store's root directory.
	Dir string
	// Sent, when set, is called after each file is written to the store, so
	// the CLI can show progress and tests can count what a sync really sent.
	Sent func(file string, size int64)
	// StatedRegion is --store-region: where the directory really is (a
	// network mount in another country), "" for this box.
	StatedRegion string
}

var _ gpuwarden.CheckpointStore = (*Local)(nil)

// Where returns the store's directory, the form Open accepts back.
func (l *Local) Where() string { return l.Dir }

// Region returns --store-region, else "" because a directory's country
// cannot be known from here; the residency check treats "" as local to the
// box.
func (l *Local) Region(ctx context.Context) (string, error) { return l.StatedRegion, nil }

// Push copies cp's files to DIR/NAME, skipping each file whose copy there
// already has the same size and sha256, and writes the manifest last. It
// returns nil only once the store durably holds every file and the manifest
// read back from it is byte for byte the one written, so that a caller may
// call the checkpoint durable.
func (l *Local) Push(ctx context.Context, cp gpuwarden.Checkpoint) error {
	if err := l.push(ctx, cp); err != nil {
		return fmt.Errorf("push %s to %s: %w", cp.Name, l.Dir, err)
	}
	return nil
}

func (l *Local) push(ctx context.Context, cp gpuwarden.Checkpoint) error {
	if cp.Path == "" {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "checkpoint has no path on this box")
	}
	data, err := manifest.Encode(cp)
	if err != nil {
		return err
	}
	tree, err := l.tree(cp.Name)
	if err != nil {
		return err
	}
	// Every path is checked before anything is written, so that a link
	// found half way cannot leave a partial copy outside the store.
	mpath, err := tree.path(manifest.Name)
	if err != nil {
		return err
	}
	dsts := make([]string, len(cp.Files))
	for i, f := range cp.Files {
		if dsts[i], err = tree.path(f.Path); err != nil {
			return err
		}
	}
	if err := hideChanged(ctx, tree, cp); err != nil {
		return err
	}
	for i, f := range cp.Files {
		if err := ctx.Err(); err != nil {
			return err
		}
		if sameLocalFile(ctx, dsts[i], f) {
			continue
		}
		if err := copyVerified(ctx, filepath.Join(cp.Path, filepath.FromSlash(f.Path)), dsts[i], f); err != nil {
			return err
		}
		if l.Sent != nil {
			l.Sent(f.Path, f.Size)
		}
	}
	if err := os.MkdirAll(tree.root, 0o755); err != nil {
		return err
	}
	if err := l.syncDirs(tree.root, cp); err != nil {
		return err
	}
	if err := manifest.WriteFileAtomic(mpath, bytes.NewReader(data), nil); err != nil {
		return err
	}
	back, _, err := readStoreManifest(ctx, cp.Name+"/"+manifest.Name, func() (string, error) { return mpath, nil })
	if err != nil {
		return fmt.Errorf("read manifest back: %w", err)
	}
	if !bytes.Equal(back, data) {
		return manifestDiffers(cp.Name, len(data), len(back))
	}
	return nil
}

// syncDirs fsyncs the store's directory and every directory of the
// checkpoint, so that the entries MkdirAll created are on disk before the
// manifest that vouches for the files beneath them.
func (l *Local) syncDirs(root string, cp gpuwarden.Checkpoint) error {
	dirs := map[string]bool{l.Dir: true, root: true}
	for _, f := range cp.Files {
		for d := filepath.Dir(filepath.Join(root, filepath.FromSlash(f.Path))); d != root && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	for d := range dirs {
		if err := manifest.SyncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// manifestDiffers is the error for a store that did not keep the manifest
// it was sent: nothing it holds of the checkpoint can be trusted.
func manifestDiffers(name string, sent, got int) error {
	return gpuwarden.Errorf(gpuwarden.EInternal, "manifest of %s read back from the store differs from the one written (%d bytes written, %d read back)", name, sent, got).
		WithHint("the store does not keep what it is sent; check its disk or server, then sync again")
}

// hideChanged removes the manifest of an earlier push under the same name
// when it lists different files, so that List does not offer a checkpoint
// whose files are being replaced underneath it.
func hideChanged(ctx context.Context, t *tree, cp gpuwarden.Checkpoint) error {
	data, found, err := readStoreManifest(ctx, cp.Name+"/"+manifest.Name, func() (string, error) { return t.path(manifest.Name) })
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return err
	}
	if !found {
		return nil // none, or none that can be read: nothing to hide
	}
	if old, err := manifest.Decode(data, cp.Name); err == nil && sameFiles(old, cp) {
		return nil
	}
	if err := os.Remove(filepath.Join(t.root, manifest.Name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return manifest.SyncDir(t.root)
}

// sameLocalFile reports whether the store already holds f: the size is
// compared first so that only a plausible match costs a full read, and
// the read is bounded by ctx like every read of a store.
func sameLocalFile(ctx context.Context, p string, f gpuwarden.ManifestFile) bool {
	in, size, err := openStoreFile(ctx, f.Path, func() (string, error) { return p, nil })
	if err != nil {
		return false
	}
	defer in.Close()
	if size != f.Size {
		return false
	}
	h := sha256.New()
	n, err := io.CopyBuffer(h, in, make([]byte, readChunk))
	return err == nil && n == f.Size && hex.EncodeToString(h.Sum(nil)) == f.SHA256
}

// copyVerified copies src to dst atomically and refuses to put it in place
// when the source no longer matches its manifest entry, because a damaged
// source pushed under a good manifest would poison every later restore.
func copyVerified(ctx context.Context, src, dst string, f gpuwarden.ManifestFile) error {
	in, err := os.Open(src)
	if err != nil {
		return manifest.FileError("open", src, err)
	}
	defer in.Close()
	h := sha256.New()
	return manifest.WriteFileAtomic(dst, io.TeeReader(ctxReader{ctx, in}, h), func(n int64) error {
		if n != f.Size {
			return manifest.SizeMismatch(f, n)
		}
		if hex.EncodeToString(h.Sum(nil)) != f.SHA256 {
			return manifest.ChecksumMismatch(f.Path)
		}
		return nil
	})
}

// List returns the checkpoints under Dir that have a manifest, oldest first
// (see sortCheckpoints), each with Path set to its directory in the store.
// A checkpoint that is a symlink or holds one on the way to its manifest or
// a listed file is left out, since Pull and Delete would refuse it, and so
// is one whose manifest is not a regular file of at most manifest.MaxSize
// bytes. Names gpuwarden does not write are listed when their manifest is
// valid, so that the restore can say it passed them over; it never pulls
// them. The listing is bounded by ctx even on a hung mount.
func (l *Local) List(ctx context.Context) ([]gpuwarden.Checkpoint, error) {
	return within(ctx, "list "+l.Dir, func() ([]gpuwarden.Checkpoint, error) { return l.list(ctx) }, nil)
}

func (l *Local) list(ctx context.Context) ([]gpuwarden.Checkpoint, error) {
	entries, err := readDirNoWait(l.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		// A target nobody has pushed to yet is empty, not broken.
		return []gpuwarden.Checkpoint{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", l.Dir, err)
	}
	cps := []gpuwarden.Checkpoint{}
	for _, e := range entries {
		// DirEntry types come from lstat, so a linked directory is no dir.
		if !e.IsDir() || manifest.CheckName(e.Name()) != nil {
			continue
		}
		cp, ok, err := l.listed(ctx, e.Name())
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", l.Dir, err)
		}
		if ok {
			cps = append(cps, cp)
		}
	}
	sortCheckpoints(cps)
	return cps, nil
}

// listed reads the checkpoint under name for List: ok is false for a torn
// push, a foreign or damaged manifest, or a symlink in the way, none of
// which may hide the good checkpoints; err is kept for a store that
// cannot be read.
func (l *Local) listed(ctx context.Context, name string) (cp gpuwarden.Checkpoint, ok bool, err error) {
	// A refusal (a symlink) is EInvalid; anything else is the disk's.
	skip := func(err error) (gpuwarden.Checkpoint, bool, error) {
		if gpuwarden.ErrorCodeOf(err) == gpuwarden.EInvalid {
			return gpuwarden.Checkpoint{}, false, nil
		}
		return gpuwarden.Checkpoint{}, false, err
	}
	tree, err := l.tree(name)
	if err != nil {
		return skip(err)
	}
	data, found, err := readStoreManifest(ctx, name+"/"+manifest.Name, func() (string, error) { return tree.path(manifest.Name) })
	if err != nil {
		return skip(err)
	}
	if !found {
		return cp, false, nil // a torn push: files without a manifest
	}
	cp, err = manifest.Decode(data, name)
	if err != nil {
		return cp, false, nil
	}
	for _, f := range cp.Files {
		if _, err := tree.path(f.Path); err != nil {
			return skip(err)
		}
	}
	cp.Path = tree.root
	return cp, true, nil
}

// Pull copies checkpoint name into dir/NAME, verifying every file's sha256.
func (l *Local) Pull(ctx context.Context, name, dir string) (gpuwarden.Checkpoint, error) {
	cp, err := l.pull(ctx, name, dir)
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("pull %s from %s: %w", name, l.Dir, err)
	}
	return cp, nil
}

// pull reads the store only through bounded calls (readStoreManifest,
// openStoreFile), so a FIFO is refused at once and a hung mount gives up
// when ctx ends; pullInto copies no more than each file's size plus one byte.
func (l *Local) pull(ctx context.Context, name, dir string) (gpuwarden.Checkpoint, error) {
	if err := manifest.CheckName(name); err != nil {
		return gpuwarden.Checkpoint{}, err
	}
	tree, err := within(ctx, "open "+name, func() (*tree, error) { return l.tree(name) }, nil)
	if err != nil {
		return gpuwarden.Checkpoint{}, err
	}
	data, found, err := readStoreManifest(ctx, name+"/"+manifest.Name, func() (string, error) { return tree.path(manifest.Name) })
	if err != nil {
		return gpuwarden.Checkpoint{}, err
	}
	if !found {
		return gpuwarden.Checkpoint{}, notStored(name, l.Where())
	}
	cp, err := manifest.Decode(data, name)
	if err != nil {
		return gpuwarden.Checkpoint{}, err
	}
	return pullInto(ctx, cp, dir, func(ctx context.Context, file string) (io.ReadCloser, error) {
		f, _, err := openStoreFile(ctx, file, func() (string, error) { return tree.path(file) })
		if err != nil {
			return nil, manifest.FileError("open", file, err)
		}
		return f, nil
	})
}

// Delete removes checkpoint name: exactly the files its manifest lists, the
// manifest first (read into memory, then removed and synced) so that a
// delete cut short leaves an invisible leftover rather than a listed,
// broken checkpoint, and then the directories those files leave empty.
// Anything else under DIR/NAME was not written by this checkpoint's push
// and stays, with the directories that hold it.
//
// A checkpoint without a manifest (a torn push, or files someone else put
// there) cannot be attributed to gpuwarden, so nothing is deleted and the
// result is nil, as it is for a name the store does not hold. A manifest
// that does not decode is refused rather than guessed at.
func (l *Local) Delete(ctx context.Context, name string) error {
	if err := l.delete(ctx, name); err != nil {
		return fmt.Errorf("delete %s from %s: %w", name, l.Dir, err)
	}
	return nil
}

func (l *Local) delete(ctx context.Context, name string) error {
	if err := manifest.CheckName(name); err != nil {
		return err
	}
	tree, err := l.tree(name)
	if err != nil {
		return err
	}
	mpath, err := tree.path(manifest.Name)
	if err != nil {
		return err
	}
	data, found, err := readStoreManifest(ctx, name+"/"+manifest.Name, func() (string, error) { return mpath, nil })
	if err != nil && gpuwarden.ErrorCodeOf(err) == gpuwarden.EInvalid {
		return unattributable(name, l.Where(), err)
	}
	if err != nil || !found {
		return err
	}
	cp, err := manifest.Decode(data, name)
	if err != nil {
		return unattributable(name, l.Where(), err)
	}
	// Every listed path is checked before anything goes, so a link found
	// late cannot leave the checkpoint half deleted.
	paths := make([]string, len(cp.Files))
	for i, f := range cp.Files {
		if paths[i], err = tree.path(f.Path); err != nil {
			return err
		}
	}
	if err := os.Remove(mpath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := manifest.SyncDir(tree.root); err != nil {
		return err
	}
	var firstErr error
	dirs := map[string]bool{}
	for _, p := range paths {
		for d := filepath.Dir(p); d != tree.root && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
		if err := removeRegular(p); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		return firstErr
	}
	// Deepest first, so a directory is tried only after those beneath it.
	order := make([]string, 0, len(dirs)+1)
	for d := range dirs {
		order = append(order, d)
	}
	sort.Slice(order, func(i, j int) bool {
		if di, dj := strings.Count(order[i], string(filepath.Separator)), strings.Count(order[j], string(filepath.Separator)); di != dj {
			return di > dj
		}
		return order[i] < order[j]
	})
	for _, d := range append(order, tree.root) {
		if err := removeEmptyDir(d); err != nil {
			return err
		}
	}
	return manifest.SyncDir(l.Dir)
}

// removeRegular removes the file at p when it is a regular file; anything
// else there (a directory, a device) is not what the push wrote.
func removeRegular(p string) error {
	st, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil
	}
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return nil
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// removeEmptyDir removes d when it is an empty directory and leaves it, with
// no error, when it holds anything: what is left there is not ours.
func removeEmptyDir(d string) error {
	st, err := os.Lstat(d)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return nil
	}
	// rmdir(2) itself refuses a directory that is not empty.
	err = syscall.Rmdir(d)
	if err == nil || errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return &fs.PathError{Op: "rmdir", Path: d, Err: err}
}

// unattributable is the error for a delete whose manifest cannot be read:
// without it there is no telling which files gpuwarden wrote.
func unattributable(name, where string, err error) error {
	return (&gpuwarden.Error{Code: gpuwarden.EInvalid, Message: fmt.Sprintf("manifest of %s cannot be read, so nothing was deleted", name), Err: err}).
		WithHint("gpuwarden deletes only the files a checkpoint's manifest lists; remove %s/%s by hand if it is yours", where, name)
}

// tree checks paths inside one checkpoint directory of a Local store for
// symlinks, remembering the directories already found to be real.
type tree struct {
	root string
	seen map[string]bool
}

// tree returns the checker for DIR/NAME, failing when DIR/NAME is a link.
func (l *Local) tree(name string) (*tree, error) {
	t := &tree{root: filepath.Join(l.Dir, name), seen: map[string]bool{}}
	if _, err := t.check(t.root); err != nil {
		return nil, err
	}
	return t, nil
}

// path returns DIR/NAME/rel once no component of rel beneath DIR/NAME is a
// symlink. A missing component ends the check: nothing below it exists to
// be a link, and a push creates it as a real directory.
func (t *tree) path(rel string) (string, error) {
	p := t.root
	for _, seg := range strings.Split(rel, "/") {
		p = filepath.Join(p, seg)
		if t.seen[p] {
			continue
		}
		exists, err := t.check(p)
		if err != nil {
			return "", err
		}
		if !exists {
			break
		}
		t.seen[p] = true
	}
	return filepath.Join(t.root, filepath.FromSlash(rel)), nil
}

// check reports whether p exists, and fails when it is a symlink.
func (t *tree) check(p string) (bool, error) {
	st, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if st.Mode()&fs.ModeSymlink != 0 {
		return false, gpuwarden.Errorf(gpuwarden.EInvalid, "%s is a symlink, which a checkpoint store never follows", p).
			WithHint("gpuwarden writes no links into a store, so someone else put it there: replace it with the real directory or file, or remove it")
	}
	return true, nil
}

// notStored is the error for a checkpoint the store does not hold complete.
func notStored(name, where string) error {
	return gpuwarden.Errorf(gpuwarden.ENotFound, "checkpoint %s not found", name).
		WithHint("%s holds only checkpoints whose push finished; list them to pick another", where)
}
