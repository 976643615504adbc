package objstore

import (
	"bufio"
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

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/manifest"
)

// openFunc opens one file of a stored checkpoint for reading.
type openFunc func(ctx context.Context, file string) (io.ReadCloser, error)

// pullInto copies the files of cp, as open yields them, into dir/NAME. It
// fills a hidden temp directory next to the target and renames it into place
// only after every file matched its size and sha256, so dir never shows a
// half-pulled or damaged checkpoint under its real name.
func pullInto(ctx context.Context, cp gpuwarden.Checkpoint, dir string, open openFunc) (gpuwarden.Checkpoint, error) {
	if err := manifest.Check(cp); err != nil {
		return gpuwarden.Checkpoint{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return gpuwarden.Checkpoint{}, err
	}
	final := filepath.Join(dir, cp.Name)
	if _, err := os.Lstat(final); err == nil {
		// An earlier pull that finished, or the checkpoint this box wrote
		// itself: reuse it when it is the same and intact, never overwrite it.
		if have, err := manifest.Read(final); err == nil && sameFiles(have, cp) && manifest.Verify(have) == nil {
			return have, nil
		}
		return gpuwarden.Checkpoint{}, gpuwarden.Errorf(gpuwarden.EConflict, "%s already exists and differs from the stored checkpoint", final).
			WithHint("move it aside or delete it, then pull again")
	} else if !errors.Is(err, fs.ErrNotExist) {
		return gpuwarden.Checkpoint{}, err
	}
	tmp, err := os.MkdirTemp(dir, "."+cp.Name+".pull-*")
	if err != nil {
		return gpuwarden.Checkpoint{}, err
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	for _, f := range cp.Files {
		if err := ctx.Err(); err != nil {
			return gpuwarden.Checkpoint{}, err
		}
		if err := pullFile(ctx, f, tmp, open); err != nil {
			return gpuwarden.Checkpoint{}, err
		}
	}
	cp.Path = tmp
	if err := manifest.Write(cp); err != nil {
		return gpuwarden.Checkpoint{}, err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return gpuwarden.Checkpoint{}, err
	}
	if err := os.Rename(tmp, final); err != nil {
		return gpuwarden.Checkpoint{}, err
	}
	done = true
	if err := manifest.SyncDir(dir); err != nil {
		return gpuwarden.Checkpoint{}, err
	}
	cp.Path = final
	return cp, nil
}

// pullFile copies one file into tmp, hashing while it writes so that the
// check costs no second read. It copies at most the manifest's size plus
// one byte, the one that proves the stored file is longer than listed: a 1
// GiB sparse file listed as 256 KiB once filled a box's 64 MiB checkpoint
// disk before the size check at the end could object.
func pullFile(ctx context.Context, f gpuwarden.ManifestFile, tmp string, open openFunc) error {
	rc, err := open(ctx, f.Path)
	if err != nil {
		return err
	}
	defer rc.Close()
	h := sha256.New()
	dst := filepath.Join(tmp, filepath.FromSlash(f.Path))
	// The buffer makes each store read a large one, whatever io.Copy asks for.
	src := io.LimitReader(io.TeeReader(ctxReader{ctx, bufio.NewReaderSize(rc, readChunk)}, h), f.Size+1)
	return manifest.WriteFileAtomic(dst, src, func(n int64) error {
		if n > f.Size {
			return manifest.SizeExceeded(f)
		}
		if n != f.Size {
			return manifest.SizeMismatch(f, n)
		}
		if hex.EncodeToString(h.Sum(nil)) != f.SHA256 {
			return manifest.ChecksumMismatch(f.Path)
		}
		return nil
	})
}

// sameFiles reports whether two manifests list the same files with the same
// sizes and hashes, in any order.
func sameFiles(a, b gpuwarden.Checkpoint) bool {
	if a.Name != b.Name || len(a.Files) != len(b.Files) {
		return false
	}
	m := make(map[string]gpuwarden.ManifestFile, len(a.Files))
	for _, f := range a.Files {
		m[f.Path] = f
	}
	for _, f := range b.Files {
		if m[f.Path] != f {
			return false
		}
	}
	return true
}

// sortCheckpoints orders oldest first, as CheckpointStore.List promises:
// gpuwarden's checkpoints by the sequence number in their name, which the
// supervisor gives in the order the job wrote them, after every name it
// does not write; then by commit time, then step, then name. Commit times
// come from the clocks of different boxes: one a day ahead once made the
// next box resume step 20 with step 60 stored.
func sortCheckpoints(cps []gpuwarden.Checkpoint) {
	sort.SliceStable(cps, func(i, j int) bool {
		a, b := cps[i], cps[j]
		sa, _, oka := gpuwarden.ParseCheckpointName(a.Name)
		sb, _, okb := gpuwarden.ParseCheckpointName(b.Name)
		if oka != okb {
			return okb
		}
		if sa != sb {
			return sa < sb
		}
		if !a.Committed.Equal(b.Committed) {
			return a.Committed.Before(b.Committed)
		}
		if a.Step != b.Step {
			return a.Step < b.Step
		}
		return a.Name < b.Name
	})
}

// ctxReader stops a long copy when its context ends, since io.Copy of a
// multi-gigabyte file would otherwise outlive a cancelled sync.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

// Read fails with the context's error once the context is done.
func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, fmt.Errorf("copy: %w", err)
	}
	return c.r.Read(p)
}
