package supervise

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/gpuwarden/gpuwarden"
	"golang.org/x/sys/unix"
)

// Root is a checkpoint root opened once: its own path is resolved a single
// time (so `--checkpoint-dir` may itself be a symlink to a bigger disk), and
// from then on everything gpuwarden opens, renames or deletes stays beneath
// it. Renames and removals go through os.Root, which walks every component
// with openat and never lets a path leave the root; files a manifest vouches
// for are opened with openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS where the
// kernel has it (Linux 5.6+), else after an Lstat of every component. A
// symlink anywhere below the root is refused, never followed: a symlinked
// incoming/ once made the clean-up of partial checkpoints delete another
// folder's contents.
type Root struct {
	path string
	fs   *os.Root
	// dirfd is the root directory opened for openat2, -1 when not open.
	dirfd int
}

// OpenRoot resolves and opens the checkpoint root at path, creating it and
// its incoming/ and committed/ folders when missing. A symlinked incoming/
// or committed/ is refused with a hint, because following it would put
// gpuwarden's renames and deletions into a folder it does not manage.
func OpenRoot(path string) (*Root, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint root %s: %w", path, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint root %s: %w", path, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("checkpoint root %s: %w", path, err)
	}
	r := &Root{path: real, dirfd: -1}
	if r.fs, err = os.OpenRoot(real); err != nil {
		return nil, fmt.Errorf("checkpoint root %s: %w", path, err)
	}
	for _, d := range []string{IncomingDir, CommittedDir} {
		if err := r.ensureDir(d); err != nil {
			r.Close()
			return nil, err
		}
	}
	fd, err := unix.Open(real, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("checkpoint root %s: %w", path, err)
	}
	r.dirfd = fd
	return r, nil
}

// ensureDir makes name a real directory directly under the root.
func (r *Root) ensureDir(name string) error {
	info, err := r.fs.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		if err := r.fs.Mkdir(name, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("checkpoint root %s: %w", r.path, err)
		}
		info, err = r.fs.Lstat(name)
	}
	if err != nil {
		return fmt.Errorf("checkpoint root %s: %w", r.path, err)
	}
	if info.Mode()&fs.ModeSymlink != 0 {
		target, _ := os.Readlink(filepath.Join(r.path, name))
		return gpuwarden.Errorf(gpuwarden.EInvalid, "%s is a symlink (to %s): gpuwarden renames and deletes inside it and never follows a link out of the checkpoint root", filepath.Join(r.path, name), target).
			WithHint("point --checkpoint-dir at the real folder instead (it may itself be a symlink): gpuwarden creates incoming/ and committed/ in it")
	}
	if !info.IsDir() {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "%s is not a directory", filepath.Join(r.path, name)).
			WithHint("move it away: gpuwarden keeps its checkpoints in %s and %s", IncomingDir, CommittedDir)
	}
	return nil
}

// Close releases the root's descriptors.
func (r *Root) Close() error {
	if r.dirfd >= 0 {
		_ = unix.Close(r.dirfd)
		r.dirfd = -1
	}
	if r.fs != nil {
		return r.fs.Close()
	}
	return nil
}

// abs is the absolute path of rel, for messages and for the job.
func (r *Root) abs(rel string) string { return filepath.Join(r.path, filepath.FromSlash(rel)) }

// rel turns an absolute path beneath the root into a root-relative one; a
// path outside it is an error.
func (r *Root) rel(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(r.path, abs)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		// Named through the unresolved root (a symlink to a bigger disk):
		// resolve the parent, never the entry itself.
		if dir, derr := filepath.EvalSymlinks(filepath.Dir(abs)); derr == nil && dir != filepath.Dir(abs) {
			return r.rel(filepath.Join(dir, filepath.Base(abs)))
		}
		return "", gpuwarden.Errorf(gpuwarden.EInvalid, "%s is outside the checkpoint root %s", p, r.path).
			WithHint("write checkpoints under %s (the job's $%s)", r.abs(IncomingDir), EnvCheckpointDir)
	}
	return filepath.ToSlash(rel), nil
}

// noSymlinks checks that no component of rel is a symlink; os.Root alone
// would follow a link that stays inside the root, and a checkpoint's bytes
// must be its own.
func (r *Root) noSymlinks(rel string) error {
	parts := strings.Split(rel, "/")
	for i := range parts {
		prefix := strings.Join(parts[:i+1], "/")
		info, err := r.fs.Lstat(prefix)
		if err != nil {
			return err
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%s is a symlink: %w", prefix, errSymlink)
		}
	}
	return nil
}

// errSymlink marks a path refused because a component is a symlink.
var errSymlink = errors.New("symlinks are not followed below the checkpoint root")

// errNotRegular marks a FIFO, device or socket where a file belongs.
var errNotRegular = errors.New("not a regular file")

// openFile opens a regular file beneath the root for reading without
// following any symlink on the way. O_NONBLOCK and an fstat refuse a FIFO
// or a device without waiting on it: a FIFO where a manifest belongs would
// otherwise hold the supervisor in open(2) before the job ever starts.
func (r *Root) openFile(rel string) (*os.File, error) {
	fd, err := unix.Openat2(r.dirfd, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case err == nil:
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return nil, &fs.PathError{Op: "fstat", Path: rel, Err: err}
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			unix.Close(fd)
			return nil, &fs.PathError{Op: "open", Path: rel, Err: errNotRegular}
		}
		if err := unix.SetNonblock(fd, false); err != nil {
			unix.Close(fd)
			return nil, &fs.PathError{Op: "open", Path: rel, Err: err}
		}
		return os.NewFile(uintptr(fd), r.abs(rel)), nil
	case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EPERM):
		// No openat2 (Linux < 5.6), or a container's seccomp filter refuses it.
		return r.openFileWalk(rel)
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		// ELOOP: a symlink on the way; EXDEV: the path would leave the root.
		return nil, &fs.PathError{Op: "open", Path: rel, Err: errSymlink}
	}
	return nil, &fs.PathError{Op: "open", Path: rel, Err: err}
}

// openFileWalk is openFile for kernels without openat2: an Lstat of every
// component, then an open through os.Root, then a check that the file
// opened is the one inspected.
func (r *Root) openFileWalk(rel string) (*os.File, error) {
	if err := r.noSymlinks(rel); err != nil {
		return nil, &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	before, err := r.fs.Lstat(rel)
	if err != nil {
		return nil, err
	}
	if !before.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "open", Path: rel, Err: errNotRegular}
	}
	f, err := r.fs.OpenFile(rel, os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	after, err := f.Stat()
	if err != nil || !os.SameFile(before, after) {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: rel, Err: errors.New("replaced while being opened")}
	}
	return f, nil
}

// readDir lists a directory beneath the root, refusing symlinks on the way.
func (r *Root) readDir(rel string) ([]fs.DirEntry, error) {
	if err := r.noSymlinks(rel); err != nil {
		return nil, err
	}
	f, err := r.fs.Open(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadDir(-1)
}

// rename moves one entry to another beneath the root; both parents must be
// free of symlinks.
func (r *Root) rename(from, to string) error {
	for _, p := range []string{parent(from), parent(to)} {
		if p == "" {
			continue
		}
		if err := r.noSymlinks(p); err != nil {
			return err
		}
	}
	return r.fs.Rename(from, to)
}

// removeAll deletes an entry gpuwarden named, and everything in it,
// beneath the root: a symlink inside is removed as a link, never followed.
func (r *Root) removeAll(rel string) error {
	if p := parent(rel); p != "" {
		if err := r.noSymlinks(p); err != nil {
			return err
		}
	}
	return r.fs.RemoveAll(rel)
}

// syncDir fsyncs a directory beneath the root, so a rename in it is durable;
// file systems that cannot (some network mounts) are not a failure.
func (r *Root) syncDir(rel string) error {
	f, err := r.fs.Open(rel)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOTSUP) {
		return fmt.Errorf("sync %s: %w", r.abs(rel), err)
	}
	return nil
}

// parent is the slash-separated parent of rel, "" at the top.
func parent(rel string) string {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return ""
	}
	return rel[:i]
}

// isNotExist reports a missing entry anywhere in err's chain.
func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
