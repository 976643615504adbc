package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/bits"
	"os"
	"runtime"
	"sync"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/manifest"
	"golang.org/x/sys/unix"
)

// A folder store is often a network mount, and a hung NFS server holds a
// process in stat, open or read with no way to interrupt it: a context
// cannot reach into the kernel. So every read of a folder store runs its
// system calls on a goroutine of its own, and the caller waits for that
// goroutine or for its context, whichever ends first. A call given up on is
// left behind to finish whenever the kernel lets it (what it opened is
// closed then), and the caller returns at once: --sync-timeout and SIGTERM
// end a restore from a hung mount on time. Opens are O_NONBLOCK|O_NOFOLLOW
// and checked with fstat, so a FIFO, device or symlink in a store is
// refused at once instead of waited on.
//
// The thread of such a call blocks the process's asynchronous signals
// while it is in the kernel (shielded). The kernel hands a signal sent to
// the process to one of its threads, the main one first; a thread stuck on
// a hung mount never comes back to run the handler, so a SIGTERM handed to
// it would wait there as long as the mount, and `run` would not stop.

// readChunk is the most one read of a store file asks for: one goroutine
// per MiB is nothing beside the copy itself.
const readChunk = 1 << 20

// within runs op on a goroutine of its own and returns what it returns, or
// ctx's error once ctx ends first; release, when set, receives the value of
// an op given up on once it comes, so that nothing it opened leaks. what
// names the operation in the error.
func within[T any](ctx context.Context, what string, op func() (T, error), release func(T)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, gaveUp(what, err)
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var r result
		shielded(func() { r.v, r.err = op() })
		ch <- r
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.err == nil && release != nil {
				release(r.v)
			}
		}()
		return zero, gaveUp(what, ctx.Err())
	}
}

// gaveUp is the error of a store read that ctx ended: a deadline is a store
// that did not answer in time (EUnavailable, with a hint); a cancellation
// is the caller's and passes through as it is.
func gaveUp(what string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return (&gpuwarden.Error{Code: gpuwarden.EUnavailable, Message: what + ": the store did not answer in time", Err: err}).
			WithHint("a hung network mount or a stuck disk holds reads forever; fix the store, or give it longer with --sync-timeout")
	}
	return fmt.Errorf("%s: %w", what, err)
}

// storeFile is a regular file of a folder store open for reading, each
// read bounded by ctx as within bounds an open.
type storeFile struct {
	ctx  context.Context
	name string

	mu sync.Mutex
	fd int
	// busy: a read is in flight on fd; closed: Close was called. The fd is
	// closed by whichever comes last, Close or the read, so a read given up
	// on never finds its descriptor number reused.
	busy, closed bool
	// broken is set once a read was given up on: its goroutine may still
	// write into buf, so no other read may run.
	broken error
	buf    []byte
}

// openStoreFile opens the regular file that resolve names (resolve runs on
// the same goroutine, since its checks stat the store too) and returns it
// with its size. A FIFO, device, socket or symlink is refused without being
// waited on, and every read afterwards is bounded by ctx.
func openStoreFile(ctx context.Context, name string, resolve func() (string, error)) (*storeFile, int64, error) {
	type opened struct {
		fd   int
		size int64
	}
	o, err := within(ctx, "open "+name, func() (opened, error) {
		p, err := resolve()
		if err != nil {
			return opened{}, err
		}
		fd, size, err := openRegularFd(p)
		return opened{fd, size}, err
	}, func(o opened) { unix.Close(o.fd) })
	if err != nil {
		return nil, 0, err
	}
	return &storeFile{ctx: ctx, name: name, fd: o.fd}, o.size, nil
}

// openRegularFd opens p read-only when it is a regular file, without
// following a final symlink and without waiting on a FIFO, and returns the
// descriptor in blocking mode with the file's size.
func openRegularFd(p string) (int, int64, error) {
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Lstat(p, &st) }); err != nil {
		return -1, 0, &fs.PathError{Op: "lstat", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return -1, 0, manifest.NotRegular(p, modeOf(st.Mode))
	}
	var fd int
	err := ignoringEINTR(func() (err error) {
		fd, err = unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		return err
	})
	if errors.Is(err, unix.ELOOP) {
		return -1, 0, manifest.NotRegular(p, fs.ModeSymlink)
	}
	if err != nil {
		return -1, 0, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	if err := ignoringEINTR(func() error { return unix.Fstat(fd, &st) }); err != nil {
		unix.Close(fd)
		return -1, 0, &fs.PathError{Op: "fstat", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return -1, 0, manifest.NotRegular(p, modeOf(st.Mode))
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return -1, 0, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	return fd, st.Size, nil
}

// modeOf turns a stat mode's file type into an fs.FileMode for messages.
func modeOf(m uint32) fs.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFLNK:
		return fs.ModeSymlink
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFDIR:
		return fs.ModeDir
	}
	return fs.ModeIrregular
}

func ignoringEINTR(f func() error) error {
	for {
		if err := f(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// Read reads up to readChunk bytes on a goroutine of its own and waits
// for it or for the file's context.
func (f *storeFile) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := f.ctx.Err(); err != nil {
		return 0, gaveUp("read "+f.name, err)
	}
	f.mu.Lock()
	switch {
	case f.closed:
		f.mu.Unlock()
		return 0, fs.ErrClosed
	case f.broken != nil:
		f.mu.Unlock()
		return 0, f.broken
	}
	n := min(len(p), readChunk)
	if len(f.buf) < n {
		f.buf = make([]byte, n)
	}
	buf := f.buf[:n]
	f.busy = true
	f.mu.Unlock()

	type result struct {
		n   int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var r result
		shielded(func() {
			r.err = ignoringEINTR(func() (err error) {
				r.n, err = unix.Read(f.fd, buf)
				return err
			})
		})
		f.mu.Lock()
		f.busy = false
		if f.closed {
			unix.Close(f.fd)
		}
		f.mu.Unlock()
		ch <- r
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return 0, &fs.PathError{Op: "read", Path: f.name, Err: r.err}
		}
		if r.n == 0 {
			return 0, io.EOF
		}
		return copy(p, buf[:r.n]), nil
	case <-f.ctx.Done():
		err := gaveUp("read "+f.name, f.ctx.Err())
		f.mu.Lock()
		f.broken = err
		f.mu.Unlock()
		return 0, err
	}
}

// Close closes the file now, or, while a read given up on is still in the
// kernel, as soon as that read returns; it never waits.
func (f *storeFile) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	if !f.busy {
		return unix.Close(f.fd)
	}
	return nil
}

// readStoreManifest reads a folder store's manifest.json, which resolve
// names, under ctx: only a regular file of at most manifest.MaxSize bytes,
// its size checked before a byte is read. found is false when there is none.
func readStoreManifest(ctx context.Context, name string, resolve func() (string, error)) (data []byte, found bool, err error) {
	f, size, err := openStoreFile(ctx, name, resolve)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	if size > manifest.MaxSize {
		return nil, false, manifest.TooLarge(name, size)
	}
	data, err = manifest.ReadCapped(f, name)
	if err != nil {
		return nil, false, err
	}
	return data, true, nil
}

// shielded runs f on a thread of its own with every asynchronous signal
// blocked, then restores the thread's mask; the synchronous ones (a fault
// in f itself) stay deliverable. A thread that never returns from the
// kernel keeps its mask, and the kernel gives signals to the others.
func shielded(f func()) {
	runtime.LockOSThread()
	var set, old unix.Sigset_t
	word := bits.Len64(uint64(^set.Val[0])) // 64 bits a word, 32 on 32-bit Linux
	for sig := 1; sig <= 64; sig++ {
		switch unix.Signal(sig) {
		case unix.SIGSEGV, unix.SIGBUS, unix.SIGFPE, unix.SIGILL, unix.SIGTRAP, unix.SIGSYS:
			continue
		}
		set.Val[(sig-1)/word] |= 1 << uint((sig-1)%word)
	}
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &set, &old); err != nil {
		runtime.UnlockOSThread()
		f()
		return
	}
	f()
	_ = unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
	runtime.UnlockOSThread()
}

// readDirNoWait lists a directory without waiting on a FIFO put in its
// place: O_DIRECTORY refuses anything else at once.
func readDirNoWait(p string) ([]os.DirEntry, error) {
	var fd int
	err := ignoringEINTR(func() (err error) {
		fd, err = unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	d := os.NewFile(uintptr(fd), p)
	defer d.Close()
	return d.ReadDir(-1)
}
