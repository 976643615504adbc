package objstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// ManifestName is the file, inside a checkpoint directory, that holds its
// manifest; stores write it last so that its presence means "complete".
const ManifestName = "manifest.json"

// stepPattern finds the progress number in names like "000003-step-000120".
var stepPattern = regexp.MustCompile(`(?i)(?:^|[^a-z])step[-_.]?([0-9]+)`)

// StepOf returns the progress number in a checkpoint name ("000003-step-000120"
// gives 120), or -1 when the name carries none.
func StepOf(name string) int64 {
	m := stepPattern.FindAllStringSubmatch(name, -1)
	if len(m) == 0 {
		return -1
	}
	n, err := strconv.ParseInt(m[len(m)-1][1], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// Manifest hashes every regular file under dir (paths relative to dir,
// slash-separated, sorted, manifest.json left out) and returns the checkpoint
// the supervisor commits, named after the directory and stamped now.
func Manifest(dir string) (gpuwarden.Checkpoint, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("manifest %s: %w", dir, err)
	}
	info, err := os.Stat(abs)
	if err != nil {
		return gpuwarden.Checkpoint{}, fileError("manifest", abs, err)
	}
	if !info.IsDir() {
		return gpuwarden.Checkpoint{}, gpuwarden.Errorf(gpuwarden.EInvalid, "manifest: %s is not a directory", abs)
	}
	name := filepath.Base(abs)
	cp := gpuwarden.Checkpoint{
		Name:      name,
		Path:      abs,
		Step:      StepOf(name),
		Committed: time.Now().UTC(),
		Files:     []gpuwarden.ManifestFile{},
	}
	err = filepath.WalkDir(abs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(abs, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == ManifestName {
			return nil
		}
		// A symlink or device cannot be copied faithfully to a bucket, and
		// following a link could pull in files from outside the checkpoint.
		if !d.Type().IsRegular() {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "%s is not a regular file", rel).
				WithHint("checkpoints may hold only regular files; copy the target instead of linking it")
		}
		size, sum, err := hashFile(p)
		if err != nil {
			return err
		}
		cp.Files = append(cp.Files, gpuwarden.ManifestFile{Path: rel, Size: size, SHA256: sum})
		cp.Bytes += size
		return nil
	})
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("manifest %s: %w", abs, err)
	}
	sort.Slice(cp.Files, func(i, j int) bool { return cp.Files[i].Path < cp.Files[j].Path })
	return cp, nil
}

// Verify re-hashes the files of cp under cp.Path against its manifest, so the
// supervisor resumes only from a checkpoint whose bytes are still the ones
// that were committed; files not in the manifest are ignored.
func Verify(cp gpuwarden.Checkpoint) error {
	if cp.Path == "" {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "verify %s: checkpoint has no path on this box", cp.Name)
	}
	if err := checkManifest(cp); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	for _, f := range cp.Files {
		size, sum, err := hashFile(filepath.Join(cp.Path, filepath.FromSlash(f.Path)))
		if err != nil {
			return fmt.Errorf("verify %s: %w", cp.Name, fileError("read", f.Path, err))
		}
		if size != f.Size {
			return fmt.Errorf("verify %s: %w", cp.Name, sizeMismatch(f, size))
		}
		if sum != f.SHA256 {
			return fmt.Errorf("verify %s: %w", cp.Name, checksumMismatch(f.Path))
		}
	}
	return nil
}

// ReadManifest loads dir/manifest.json and sets Path to dir, because a
// manifest never records where it lives: the directory may have moved.
func ReadManifest(dir string) (gpuwarden.Checkpoint, error) {
	data, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		return gpuwarden.Checkpoint{}, fileError("read manifest", dir, err)
	}
	cp, err := decodeManifest(data, filepath.Base(dir))
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("read manifest %s: %w", dir, err)
	}
	cp.Path = dir
	return cp, nil
}

// WriteManifest writes cp's manifest into cp.Path atomically (temp file,
// fsync, rename), so a crash never leaves a half-written manifest that would
// mark a checkpoint as complete.
func WriteManifest(cp gpuwarden.Checkpoint) error {
	if cp.Path == "" {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "write manifest %s: checkpoint has no path", cp.Name)
	}
	data, err := encodeManifest(cp)
	if err != nil {
		return fmt.Errorf("write manifest %s: %w", cp.Name, err)
	}
	if err := writeFileAtomic(filepath.Join(cp.Path, ManifestName), bytes.NewReader(data), nil); err != nil {
		return fmt.Errorf("write manifest %s: %w", cp.Name, err)
	}
	return nil
}

// encodeManifest renders cp as stored: without Path, which is local to a box.
func encodeManifest(cp gpuwarden.Checkpoint) ([]byte, error) {
	if err := checkManifest(cp); err != nil {
		return nil, err
	}
	cp.Path = ""
	data, err := json.MarshalIndent(cp, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	return append(data, '\n'), nil
}

// decodeManifest parses a stored manifest and refuses one that does not
// belong under name or whose paths could escape the checkpoint directory,
// since a bucket is shared and its contents are not ours to trust.
func decodeManifest(data []byte, name string) (gpuwarden.Checkpoint, error) {
	var cp gpuwarden.Checkpoint
	if err := json.Unmarshal(data, &cp); err != nil {
		return cp, gpuwarden.Errorf(gpuwarden.EInvalid, "manifest of %s is not valid JSON: %v", name, err)
	}
	if cp.Name != name {
		return cp, gpuwarden.Errorf(gpuwarden.EInvalid, "manifest under %s names checkpoint %q", name, cp.Name)
	}
	if err := checkManifest(cp); err != nil {
		return cp, err
	}
	cp.Path = ""
	return cp, nil
}

// checkManifest rejects names and file paths that are not plain relative
// paths, and duplicate entries, before they are joined onto a directory or
// a key prefix.
func checkManifest(cp gpuwarden.Checkpoint) error {
	if err := checkName(cp.Name); err != nil {
		return err
	}
	seen := make(map[string]bool, len(cp.Files))
	for _, f := range cp.Files {
		if err := checkFilePath(f.Path); err != nil {
			return fmt.Errorf("checkpoint %s: %w", cp.Name, err)
		}
		if seen[f.Path] {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "checkpoint %s lists %s twice", cp.Name, f.Path)
		}
		seen[f.Path] = true
		if f.Size < 0 {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "checkpoint %s: %s has negative size", cp.Name, f.Path)
		}
		if b, err := hex.DecodeString(f.SHA256); err != nil || len(b) != sha256.Size {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "checkpoint %s: %s has no valid sha256", cp.Name, f.Path)
		}
	}
	return nil
}

// checkName accepts only a single path element, because the name becomes a
// directory and a key segment.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00") {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "invalid checkpoint name %q", name).
			WithHint("a checkpoint name is one directory name, without slashes")
	}
	return nil
}

// checkFilePath accepts clean, relative, slash-separated paths only.
func checkFilePath(p string) error {
	if p == "" || p == ManifestName || path.IsAbs(p) || path.Clean(p) != p ||
		p == ".." || strings.HasPrefix(p, "../") || strings.ContainsAny(p, "\\\x00") {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "invalid file path %q in manifest", p)
	}
	return nil
}

// hashFile returns the size and hex sha256 of the file at p.
func hashFile(p string) (int64, string, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", fmt.Errorf("hash %s: %w", p, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// checksumMismatch is the error every store and Verify return for a file
// whose bytes differ from its manifest entry.
func checksumMismatch(file string) error {
	return gpuwarden.Errorf(gpuwarden.EInvalid, "checksum mismatch in %s", file).
		WithHint("the copy is damaged; use an older checkpoint or push this one again from a good copy")
}

// sizeMismatch reports a file whose length differs from its manifest entry.
func sizeMismatch(f gpuwarden.ManifestFile, got int64) error {
	return gpuwarden.Errorf(gpuwarden.EInvalid, "size mismatch in %s: %d bytes, manifest says %d", f.Path, got, f.Size).
		WithHint("the copy is truncated or damaged; use an older checkpoint or push this one again from a good copy")
}

// fileError gives a missing file the not-found code the CLI maps to exit 2.
func fileError(op, p string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return &gpuwarden.Error{Code: gpuwarden.ENotFound, Message: fmt.Sprintf("%s %s", op, p), Err: err}
	}
	return fmt.Errorf("%s %s: %w", op, p, err)
}

// writeFileAtomic writes r to dst through a temp file in the same directory,
// fsyncs it, renames it into place and fsyncs the directory, so dst is
// either the old content or the whole new content after a crash. check, when
// set, runs after the copy and before the rename and can veto it.
func writeFileAtomic(dst string, r io.Reader, check func(written int64) error) error {
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	n, err := io.Copy(tmp, r)
	if err != nil {
		return err
	}
	if check != nil {
		if err := check(n); err != nil {
			return err
		}
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return err
	}
	done = true
	return syncDir(dir)
}

// syncDir makes a rename durable; file systems that cannot sync a directory
// (some network mounts) say so with EINVAL or ENOTSUP, which is not a failure.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOTSUP) {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
