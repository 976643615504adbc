// Package manifest owns the on-disk checkpoint manifest format: manifest.json
// inside a checkpoint directory holds its gpuwarden.Checkpoint as JSON (files
// with size and sha256, the step parsed from the directory name). objstore and
// supervise both read, write, hash and verify checkpoints through it.
package manifest

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

// Name is the file, inside a checkpoint directory, that holds its manifest;
// it is written last so that its presence means "complete".
const Name = "manifest.json"

// TempPrefix starts the name of the temp file Write renames onto Name; a
// crash can leave one behind, and hashing leaves it out.
const TempPrefix = "." + Name + ".tmp"

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

// Build hashes every regular file under dir (paths relative to dir,
// slash-separated, sorted, manifest.json left out) and returns the checkpoint
// the supervisor commits, named after the directory and stamped now.
func Build(dir string) (gpuwarden.Checkpoint, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("manifest %s: %w", dir, err)
	}
	info, err := os.Stat(abs)
	if err != nil {
		return gpuwarden.Checkpoint{}, FileError("manifest", abs, err)
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
	files, _, err := Walk(abs, nil, HashFile)
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("manifest %s: %w", abs, err)
	}
	if files != nil {
		cp.Files = files
	}
	for _, f := range files {
		cp.Bytes += f.Size
	}
	return cp, nil
}

// Walk hashes every regular file under dir with hash and returns them sorted
// by slash-separated relative path, leaving out the top-level manifest and
// any temp file of Write, and those skip (when set) names. It also lists
// dir's directories, dir first, for a caller that fsyncs them. Anything but
// a regular file or a directory is an error: a symlink would let the manifest
// vouch for bytes outside the checkpoint, and cannot be copied faithfully.
func Walk(dir string, skip func(rel string) bool, hash func(path string) (int64, string, error)) ([]gpuwarden.ManifestFile, []string, error) {
	var files []gpuwarden.ManifestFile
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == Name || (strings.HasPrefix(rel, TempPrefix) && !strings.Contains(rel, "/")) || (skip != nil && skip(rel)) {
			return nil
		}
		if !d.Type().IsRegular() {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "%s is not a regular file (%s)", rel, d.Type()).
				WithHint("checkpoints may hold only regular files; copy the target instead of linking it")
		}
		size, sum, err := hash(p)
		if err != nil {
			return err
		}
		files = append(files, gpuwarden.ManifestFile{Path: rel, Size: size, SHA256: sum})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, dirs, nil
}

// Verify re-hashes the files of cp under cp.Path against its manifest, so the
// supervisor resumes only from a checkpoint whose bytes are still the ones
// that were committed; files not in the manifest are ignored.
func Verify(cp gpuwarden.Checkpoint) error {
	if cp.Path == "" {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "verify %s: checkpoint has no path on this box", cp.Name)
	}
	if err := Check(cp); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	for _, f := range cp.Files {
		size, sum, err := HashFile(filepath.Join(cp.Path, filepath.FromSlash(f.Path)))
		if err != nil {
			return fmt.Errorf("verify %s: %w", cp.Name, FileError("read", f.Path, err))
		}
		if size != f.Size {
			return fmt.Errorf("verify %s: %w", cp.Name, SizeMismatch(f, size))
		}
		if sum != f.SHA256 {
			return fmt.Errorf("verify %s: %w", cp.Name, ChecksumMismatch(f.Path))
		}
	}
	return nil
}

// MaxSize bounds every manifest read, from a box or a store: one of a
// million files is some 150 MB, and anything larger is not one of ours. A
// manifest is read whole into memory, so without the bound a 2 GiB sparse
// manifest.json in a store cost 4 GB of memory on every start.
const MaxSize = 1 << 28

// Read loads dir/manifest.json and sets Path to dir, because a
// manifest never records where it lives: the directory may have moved.
// It reads at most MaxSize bytes, and only from a regular file.
func Read(dir string) (gpuwarden.Checkpoint, error) {
	data, err := ReadFileCapped(filepath.Join(dir, Name))
	if err != nil {
		return gpuwarden.Checkpoint{}, FileError("read manifest", dir, err)
	}
	cp, err := Decode(data, filepath.Base(dir))
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("read manifest %s: %w", dir, err)
	}
	cp.Path = dir
	return cp, nil
}

// Write writes cp's manifest into cp.Path atomically (temp file, fsync,
// rename, directory fsync), so a crash never leaves a half-written manifest
// that would mark a checkpoint as complete.
func Write(cp gpuwarden.Checkpoint) error {
	if cp.Path == "" {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "write manifest %s: checkpoint has no path", cp.Name)
	}
	return WriteTo(cp.Path, cp)
}

// WriteTo is Write into dir, for a checkpoint not yet at cp.Path.
func WriteTo(dir string, cp gpuwarden.Checkpoint) error {
	data, err := Encode(cp)
	if err != nil {
		return fmt.Errorf("write manifest %s: %w", cp.Name, err)
	}
	if err := WriteFileAtomic(filepath.Join(dir, Name), bytes.NewReader(data), nil); err != nil {
		return fmt.Errorf("write manifest %s: %w", cp.Name, err)
	}
	return nil
}

// Encode renders cp as stored: without Path, which is local to a box.
func Encode(cp gpuwarden.Checkpoint) ([]byte, error) {
	if err := Check(cp); err != nil {
		return nil, err
	}
	cp.Path = ""
	data, err := json.MarshalIndent(cp, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	return append(data, '\n'), nil
}

// Decode parses a stored manifest and refuses one that does not
// belong under name or whose paths could escape the checkpoint directory,
// since a bucket is shared and its contents are not ours to trust.
func Decode(data []byte, name string) (gpuwarden.Checkpoint, error) {
	var cp gpuwarden.Checkpoint
	if err := json.Unmarshal(data, &cp); err != nil {
		return cp, gpuwarden.Errorf(gpuwarden.EInvalid, "manifest of %s is not valid JSON: %v", name, err)
	}
	if cp.Name != name {
		return cp, gpuwarden.Errorf(gpuwarden.EInvalid, "manifest under %s names checkpoint %q", name, cp.Name)
	}
	if err := Check(cp); err != nil {
		return cp, err
	}
	cp.Path = ""
	return cp, nil
}

// Check rejects names and file paths that are not plain relative
// paths, duplicate entries, and a path listed both as a file and as a
// folder of another (no directory holds both, so such a manifest vouches
// for a tree that cannot exist), before they are joined onto a directory
// or a key prefix.
func Check(cp gpuwarden.Checkpoint) error {
	if err := CheckName(cp.Name); err != nil {
		return err
	}
	seen := make(map[string]bool, len(cp.Files))
	for _, f := range cp.Files {
		if err := CheckFilePath(f.Path); err != nil {
			return fmt.Errorf("checkpoint %s: %w", cp.Name, err)
		}
		if seen[f.Path] {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "checkpoint %s lists %s twice", cp.Name, f.Path)
		}
		seen[f.Path] = true
	}
	for _, f := range cp.Files {
		for dir := path.Dir(f.Path); dir != "."; dir = path.Dir(dir) {
			if seen[dir] {
				return gpuwarden.Errorf(gpuwarden.EInvalid, "checkpoint %s lists %s both as a file and as the folder of %s", cp.Name, dir, f.Path)
			}
		}
		if f.Size < 0 {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "checkpoint %s: %s has negative size", cp.Name, f.Path)
		}
		if b, err := hex.DecodeString(f.SHA256); err != nil || len(b) != sha256.Size {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "checkpoint %s: %s has no valid sha256", cp.Name, f.Path)
		}
	}
	return nil
}

// CheckName accepts only a single path element, because the name becomes a
// directory and a key segment.
func CheckName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00") {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "invalid checkpoint name %q", name).
			WithHint("a checkpoint name is one directory name, without slashes")
	}
	return nil
}

// CheckFilePath accepts clean, relative, slash-separated paths of a file
// below the checkpoint only: "." is the checkpoint's own folder.
func CheckFilePath(p string) error {
	if p == "" || p == "." || p == Name || path.IsAbs(p) || path.Clean(p) != p ||
		p == ".." || strings.HasPrefix(p, "../") || strings.ContainsAny(p, "\\\x00") {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "invalid file path %q in manifest: absolute, unclean or outside the checkpoint", p)
	}
	return nil
}

// HashFile returns the size and hex sha256 of the regular file at p.
func HashFile(p string) (int64, string, error) {
	f, _, err := OpenRegular(p)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	return Sum(f, p, false)
}

// OpenRegular opens p for reading only when it is a regular file: the open
// neither follows a symlink in the last element nor waits for a FIFO's
// writer or a device (O_NOFOLLOW|O_NONBLOCK), and fstat decides. A FIFO
// planted where a checkpoint file belongs once held `run` before its job
// started until SIGKILL. An Lstat first keeps a device from being opened at
// all, since opening some (a tape, a watchdog) acts.
func OpenRegular(p string) (*os.File, fs.FileInfo, error) {
	if st, err := os.Lstat(p); err != nil {
		return nil, nil, err
	} else if !st.Mode().IsRegular() {
		return nil, nil, NotRegular(p, st.Mode())
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, nil, NotRegular(p, fs.ModeSymlink)
		}
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, NotRegular(p, st.Mode())
	}
	return f, st, nil
}

// ReadFileCapped reads the regular file at p, which must hold at most
// MaxSize bytes: the size is checked before reading and the read stops one
// byte past it, for a file that grows meanwhile.
func ReadFileCapped(p string) ([]byte, error) {
	f, st, err := OpenRegular(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() > MaxSize {
		return nil, TooLarge(p, st.Size())
	}
	return ReadCapped(f, p)
}

// ReadCapped reads r to its end, failing once it yields more than MaxSize
// bytes; it never holds more than MaxSize+1 of them.
func ReadCapped(r io.Reader, p string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSize {
		return nil, TooLarge(p, int64(len(data)))
	}
	return data, nil
}

// TooLarge is the error for a manifest over MaxSize bytes; size is what
// was seen, which for a read cut off is MaxSize+1.
func TooLarge(p string, size int64) error {
	return gpuwarden.Errorf(gpuwarden.EInvalid, "%s is %d bytes or more, over the %d a manifest may have", p, size, MaxSize).
		WithHint("gpuwarden never writes a manifest that large; remove or replace the checkpoint that holds it")
}

// NotRegular is the error for a FIFO, device, socket, symlink or directory
// where a checkpoint's regular file belongs: reading one can block forever
// or vouch for bytes outside the checkpoint.
func NotRegular(p string, mode fs.FileMode) error {
	kind := "a " + mode.Type().String()
	switch t := mode.Type(); {
	case t&fs.ModeNamedPipe != 0:
		kind = "a FIFO"
	case t&fs.ModeSymlink != 0:
		kind = "a symlink"
	case t&fs.ModeDevice != 0:
		kind = "a device"
	case t&fs.ModeSocket != 0:
		kind = "a socket"
	case t.IsDir():
		kind = "a directory"
	}
	return gpuwarden.Errorf(gpuwarden.EInvalid, "%s is %s, not a regular file", p, kind).
		WithHint("checkpoints hold only regular files, and gpuwarden writes no other kind; whoever put it there must replace it with the real file")
}

// SizeExceeded is the error for a copy that brought more bytes of f than
// its manifest lists: the copy stops one byte past the size, so a store
// file far larger than its manifest (a 1 GiB sparse file listed as 256
// KiB) never fills the box's disk.
func SizeExceeded(f gpuwarden.ManifestFile) error {
	return gpuwarden.Errorf(gpuwarden.EInvalid, "%s holds more than the %d bytes its manifest lists; the copy stopped there", f.Path, f.Size).
		WithHint("the stored copy is not the checkpoint that was pushed; use an older checkpoint or push this one again from a good copy")
}

// Sum reads f (opened from path p) to its end and returns the bytes read and
// their hex sha256; with sync it also fsyncs f, because a manifest must never
// name data that is not on disk.
func Sum(f *os.File, p string, sync bool) (int64, string, error) {
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", fmt.Errorf("hash %s: %w", p, err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			return 0, "", fmt.Errorf("fsync %s: %w", p, err)
		}
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// ChecksumMismatch is the error every store and Verify return for a file
// whose bytes differ from its manifest entry.
func ChecksumMismatch(file string) error {
	return gpuwarden.Errorf(gpuwarden.EInvalid, "checksum mismatch in %s", file).
		WithHint("the copy is damaged; use an older checkpoint or push this one again from a good copy")
}

// SizeMismatch reports a file whose length differs from its manifest entry.
func SizeMismatch(f gpuwarden.ManifestFile, got int64) error {
	return gpuwarden.Errorf(gpuwarden.EInvalid, "size mismatch in %s: %d bytes, manifest says %d", f.Path, got, f.Size).
		WithHint("the copy is truncated or damaged; use an older checkpoint or push this one again from a good copy")
}

// FileError gives a missing file the not-found code the CLI maps to exit 2.
func FileError(op, p string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return &gpuwarden.Error{Code: gpuwarden.ENotFound, Message: fmt.Sprintf("%s %s", op, p), Err: err}
	}
	return fmt.Errorf("%s %s: %w", op, p, err)
}

// WriteFileAtomic writes r to dst through a temp file in the same directory,
// fsyncs it, renames it into place and fsyncs the directory, so dst is
// either the old content or the whole new content after a crash. check, when
// set, runs after the copy and before the rename and can veto it.
func WriteFileAtomic(dst string, r io.Reader, check func(written int64) error) error {
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
	return SyncDir(dir)
}

// SyncDir makes a rename durable; file systems that cannot sync a directory
// (some network mounts) say so with EINVAL or ENOTSUP, which is not a failure.
func SyncDir(dir string) error {
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
