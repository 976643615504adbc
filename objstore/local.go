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

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/manifest"
)

// Local keeps checkpoints in a directory, typically another disk or a network
// mount, as DIR/NAME/FILE and DIR/NAME/manifest.json.
type Local struct {
	// Dir is the store's root directory.
	Dir string
	// Sent, when set, is called after each file is written to the store, so
	// the CLI can show progress and tests can count what a sync really sent.
	Sent func(file string, size int64)
}

var _ gpuwarden.CheckpointStore = (*Local)(nil)

// Where returns the store's directory, the form Open accepts back.
func (l *Local) Where() string { return l.Dir }

// Region returns "" because a directory's country cannot be known from here;
// the residency check treats it as local to the box.
func (l *Local) Region(ctx context.Context) (string, error) { return "", nil }

// Push copies cp's files to DIR/NAME, skipping each file whose copy there
// already has the same size and sha256, and writes the manifest last.
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
	dest := filepath.Join(l.Dir, cp.Name)
	if err := hideChanged(dest, cp); err != nil {
		return err
	}
	for _, f := range cp.Files {
		if err := ctx.Err(); err != nil {
			return err
		}
		dst := filepath.Join(dest, filepath.FromSlash(f.Path))
		if sameLocalFile(dst, f) {
			continue
		}
		if err := copyVerified(ctx, filepath.Join(cp.Path, filepath.FromSlash(f.Path)), dst, f); err != nil {
			return err
		}
		if l.Sent != nil {
			l.Sent(f.Path, f.Size)
		}
	}
	return manifest.WriteFileAtomic(filepath.Join(dest, manifest.Name), bytes.NewReader(data), nil)
}

// hideChanged removes the manifest of an earlier push under the same name
// when it lists different files, so that List does not offer a checkpoint
// whose files are being replaced underneath it.
func hideChanged(dest string, cp gpuwarden.Checkpoint) error {
	old, err := manifest.Read(dest)
	if err != nil || sameFiles(old, cp) {
		return nil
	}
	if err := os.Remove(filepath.Join(dest, manifest.Name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return manifest.SyncDir(dest)
}

// sameLocalFile reports whether the store already holds f: the size is
// compared first so that only a plausible match costs a full read.
func sameLocalFile(p string, f gpuwarden.ManifestFile) bool {
	st, err := os.Stat(p)
	if err != nil || !st.Mode().IsRegular() || st.Size() != f.Size {
		return false
	}
	_, sum, err := manifest.HashFile(p)
	return err == nil && sum == f.SHA256
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

// List returns the checkpoints under Dir that have a manifest, oldest first,
// each with Path set to its directory in the store.
func (l *Local) List(ctx context.Context) ([]gpuwarden.Checkpoint, error) {
	entries, err := os.ReadDir(l.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		// A target nobody has pushed to yet is empty, not broken.
		return []gpuwarden.Checkpoint{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", l.Dir, err)
	}
	cps := []gpuwarden.Checkpoint{}
	for _, e := range entries {
		if !e.IsDir() || manifest.CheckName(e.Name()) != nil {
			continue
		}
		dir := filepath.Join(l.Dir, e.Name())
		data, err := os.ReadFile(filepath.Join(dir, manifest.Name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // a torn push: files without a manifest
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", l.Dir, err)
		}
		cp, err := manifest.Decode(data, e.Name())
		if err != nil {
			// A foreign or damaged manifest must not hide the good ones.
			continue
		}
		cp.Path = dir
		cps = append(cps, cp)
	}
	sortCheckpoints(cps)
	return cps, nil
}

// Pull copies checkpoint name into dir/NAME, verifying every file's sha256.
func (l *Local) Pull(ctx context.Context, name, dir string) (gpuwarden.Checkpoint, error) {
	cp, err := l.pull(ctx, name, dir)
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("pull %s from %s: %w", name, l.Dir, err)
	}
	return cp, nil
}

func (l *Local) pull(ctx context.Context, name, dir string) (gpuwarden.Checkpoint, error) {
	if err := manifest.CheckName(name); err != nil {
		return gpuwarden.Checkpoint{}, err
	}
	src := filepath.Join(l.Dir, name)
	cp, err := manifest.Read(src)
	if gpuwarden.ErrorCodeOf(err) == gpuwarden.ENotFound {
		return gpuwarden.Checkpoint{}, notStored(name, l.Where())
	}
	if err != nil {
		return gpuwarden.Checkpoint{}, err
	}
	return pullInto(ctx, cp, dir, func(ctx context.Context, file string) (io.ReadCloser, error) {
		f, err := os.Open(filepath.Join(src, filepath.FromSlash(file)))
		if err != nil {
			return nil, manifest.FileError("open", file, err)
		}
		return f, nil
	})
}

// Delete removes checkpoint name; its manifest goes first so that a delete
// cut short leaves an invisible leftover rather than a listed, broken
// checkpoint. Deleting a checkpoint that is not there is not an error.
func (l *Local) Delete(ctx context.Context, name string) error {
	if err := manifest.CheckName(name); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	dir := filepath.Join(l.Dir, name)
	if err := os.Remove(filepath.Join(dir, manifest.Name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s from %s: %w", name, l.Dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("delete %s from %s: %w", name, l.Dir, err)
	}
	return nil
}

// notStored is the error for a checkpoint the store does not hold complete.
func notStored(name, where string) error {
	return gpuwarden.Errorf(gpuwarden.ENotFound, "checkpoint %s not found", name).
		WithHint("%s holds only checkpoints whose push finished; list them to pick another", where)
}
