package objstore

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/manifest"
	"golang.org/x/sys/unix"
)

// hangGuard fails the test when op does not return: on the code before
// these checks, each of these reads blocked until SIGKILL.
func hangGuard[T any](t *testing.T, what string, op func() T) T {
	t.Helper()
	ch := make(chan T, 1)
	go func() { ch <- op() }()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("%s hung", what)
		panic("unreachable")
	}
}

// endless yields zero bytes until it has given cap of them, then fails as
// a full disk would: the copy it feeds must stop long before.
type endless struct {
	n, cap int64
}

func (e *endless) Read(p []byte) (int, error) {
	if e.n >= e.cap {
		return 0, errors.New("emulated disk cap reached: the copy did not stop at the manifest's size")
	}
	k := min(int64(len(p)), e.cap-e.n)
	clear(p[:k])
	e.n += k
	return int(k), nil
}

func (e *endless) Close() error { return nil }

// TestPullCopiesAtMostSizePlusOne: a stored file larger than its manifest
// says is cut one byte past the size, fails its checkpoint, and leaves
// nothing behind.
func TestPullCopiesAtMostSizePlusOne(t *testing.T) {
	const size = 256 << 10
	cp := gpuwarden.Checkpoint{Name: "000002-step-000010", Files: []gpuwarden.ManifestFile{{Path: "w.bin", Size: size, SHA256: emptySHA}}}
	dir := t.TempDir()
	src := &endless{cap: 64 << 20}
	_, err := pullInto(context.Background(), cp, dir, func(context.Context, string) (io.ReadCloser, error) { return src, nil })
	if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid || !strings.Contains(err.Error(), "holds more than the 262144 bytes") {
		t.Fatalf("pull = %v, want the size exceeded", err)
	}
	// What passed the limit is size+1; the store was read ahead by at most
	// one buffer, never written.
	if src.n > size+1+readChunk {
		t.Errorf("read %d bytes of the store for a %d-byte file", src.n, size)
	}
	noLeftovers(t, dir)
	if des, _ := os.ReadDir(dir); len(des) != 0 {
		t.Errorf("the failed pull left %d entries", len(des))
	}
}

// TestLocalPullRefusesWhatIsNotARegularFile: a FIFO, a socket, a directory
// or a sparse giant where a checkpoint's file or manifest belongs fails
// that checkpoint at once, and List passes over a manifest it cannot trust.
func TestLocalPullRefusesWhatIsNotARegularFile(t *testing.T) {
	ctx := context.Background()
	fifo := func(t *testing.T, p string) {
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name    string
		file    string // replaced in the store
		replace func(t *testing.T, p string)
		listed  bool   // whether List still offers the checkpoint
		reason  string // in Pull's error
	}{
		{"a FIFO for a file", "optim.pt", fifo, true, "is a FIFO"},
		{"a FIFO for the manifest", manifest.Name, fifo, false, "is a FIFO"},
		{"a socket for a file", "optim.pt", func(t *testing.T, p string) {
			l, err := net.Listen("unix", p)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
		}, true, "is a socket"},
		{"a directory for the manifest", manifest.Name, func(t *testing.T, p string) {
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}, false, "is a directory"},
		{"a file far longer than listed", "model/shard-0.safetensors", func(t *testing.T, p string) {
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, 1<<30); err != nil {
				t.Fatal(err)
			}
		}, true, "holds more than the 8000 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := &Local{Dir: t.TempDir()}
			cp := newCheckpoint(t, "000001-step-000100", ckptFiles)
			if err := store.Push(ctx, cp); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(store.Dir, cp.Name, filepath.FromSlash(tt.file))
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			tt.replace(t, p)
			list := hangGuard(t, "List", func() []gpuwarden.Checkpoint {
				l, err := store.List(ctx)
				if err != nil {
					t.Errorf("List: %v", err)
				}
				return l
			})
			if got := len(list) == 1; got != tt.listed {
				t.Errorf("List offers %v, want listed %v", names(list), tt.listed)
			}
			dir := t.TempDir()
			err := hangGuard(t, "Pull", func() error { _, err := store.Pull(ctx, cp.Name, dir); return err })
			if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid || !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("Pull = %v, want invalid: %s", err, tt.reason)
			}
			noLeftovers(t, dir)
		})
	}
}

// TestManifestOverTheCapIsNeverRead: a sparse 2 GiB manifest.json in a
// folder store is refused by its size, before a byte of it is read.
func TestManifestOverTheCapIsNeverRead(t *testing.T) {
	ctx := context.Background()
	store := &Local{Dir: t.TempDir()}
	good := newCheckpoint(t, "000001-step-000100", map[string]string{"a": "hello"})
	huge := newCheckpoint(t, "000002-step-000200", map[string]string{"a": "hello"})
	for _, cp := range []gpuwarden.Checkpoint{good, huge} {
		if err := store.Push(ctx, cp); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Truncate(filepath.Join(store.Dir, huge.Name, manifest.Name), 2<<30); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	list, err := store.List(ctx)
	runtime.ReadMemStats(&after)
	if err != nil || !reflect.DeepEqual(names(list), []string{good.Name}) {
		t.Errorf("List = %v, %v; want only %s", names(list), err, good.Name)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Errorf("List allocated %d MiB for a 2 GiB sparse manifest; it must not read it", alloc>>20)
	}
	_, err = store.Pull(ctx, huge.Name, t.TempDir())
	if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid || !strings.Contains(err.Error(), "a manifest may have") {
		t.Errorf("Pull = %v, want the manifest refused for its size", err)
	}
	// Nor does Delete read it: it refuses to guess what the push wrote.
	if err := store.Delete(ctx, huge.Name); gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
		t.Errorf("Delete = %v, want invalid", err)
	}
}

// TestListOrdersBySequence: the store's list is oldest first by the
// sequence in the name, whatever the clocks of the boxes said; names
// gpuwarden does not write come first, as the oldest.
func TestListOrdersBySequence(t *testing.T) {
	ctx := context.Background()
	store := &Local{Dir: t.TempDir()}
	base := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		at   time.Time
	}{
		{"000003-step-000060", base},
		{"000001-step-000020", base.Add(24 * time.Hour)}, // a clock a day ahead
		{"best", base.Add(48 * time.Hour)},
		{"000002-step-000040", base.Add(-time.Hour)},
	} {
		cp := newCheckpoint(t, c.name, map[string]string{"a": "hello"})
		cp.Committed = c.at
		if err := store.Push(ctx, cp); err != nil {
			t.Fatal(err)
		}
	}
	list, err := store.List(ctx)
	want := []string{"best", "000001-step-000020", "000002-step-000040", "000003-step-000060"}
	if err != nil || !reflect.DeepEqual(names(list), want) {
		t.Errorf("List = %v, %v; want %v", names(list), err, want)
	}
}

// TestStoreFileReadEndsWithItsContext: a read blocked in the kernel (a
// pipe with no writer stands for a hung mount) returns when its context
// ends, Close does not wait for it, and the descriptor is closed once the
// kernel lets the read go.
func TestStoreFileReadEndsWithItsContext(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[1])
	ctx, cancel := context.WithCancel(context.Background())
	f := &storeFile{ctx: ctx, name: "w.bin", fd: p[0]}
	read := make(chan error, 1)
	go func() {
		_, err := f.Read(make([]byte, 64))
		read <- err
	}()
	// Cancelled only once the read is in the kernel.
	hangGuard(t, "the read's start", func() bool {
		for {
			f.mu.Lock()
			busy := f.busy
			f.mu.Unlock()
			if busy {
				return true
			}
			time.Sleep(time.Millisecond)
		}
	})
	cancel()
	err := hangGuard(t, "Read", func() error { return <-read })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Read = %v, want the cancellation", err)
	}
	if err := hangGuard(t, "Close", f.Close); err != nil {
		t.Errorf("Close = %v", err)
	}
	if _, err := f.Read(make([]byte, 1)); err == nil {
		t.Error("a closed file read again")
	}
	// The kernel lets the abandoned read go; its descriptor closes then.
	if _, err := unix.Write(p[1], []byte("x")); err != nil {
		t.Fatal(err)
	}
	hangGuard(t, "the abandoned read's close", func() bool {
		for {
			if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_GETFD, 0); errors.Is(err, unix.EBADF) {
				return true
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// TestWithinGivesUpAndReleases: an operation that outlives its deadline is
// given up on with EUnavailable, and what it opened is released when it
// finally returns.
func TestWithinGivesUpAndReleases(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	unblock := make(chan struct{})
	released := make(chan int, 1)
	var ran atomic.Bool
	_, err := within(ctx, "open w.bin", func() (int, error) {
		ran.Store(true)
		<-unblock
		return 7, nil
	}, func(fd int) { released <- fd })
	if gpuwarden.ErrorCodeOf(err) != gpuwarden.EUnavailable || !errors.Is(err, context.DeadlineExceeded) || gpuwarden.ErrorHint(err) == "" {
		t.Errorf("within = %v, want unavailable past the deadline, with a hint", err)
	}
	close(unblock)
	if fd := hangGuard(t, "release", func() int { return <-released }); fd != 7 || !ran.Load() {
		t.Errorf("released %d, want 7", fd)
	}
}

// TestShieldedBlocksAsyncSignals: while a store call is in the kernel its
// thread takes no signal sent to the process, so the kernel hands a SIGTERM
// to a thread that can run the handler; a fault of its own still reaches it.
func TestShieldedBlocksAsyncSignals(t *testing.T) {
	var mask unix.Sigset_t
	var err error
	shielded(func() { err = unix.PthreadSigmask(unix.SIG_BLOCK, nil, &mask) })
	if err != nil {
		t.Fatal(err)
	}
	word := 8 * int(reflect.TypeOf(mask.Val[0]).Size())
	blocked := func(s unix.Signal) bool { return mask.Val[(int(s)-1)/word]&(1<<uint((int(s)-1)%word)) != 0 }
	for _, tt := range []struct {
		sig  unix.Signal
		want bool
	}{
		{unix.SIGTERM, true}, {unix.SIGINT, true}, {unix.SIGHUP, true}, {unix.SIGQUIT, true},
		{unix.SIGUSR1, true}, {unix.SIGCHLD, true}, {unix.SIGURG, true},
		{unix.SIGSEGV, false}, {unix.SIGBUS, false}, {unix.SIGFPE, false}, {unix.SIGILL, false},
	} {
		if got := blocked(tt.sig); got != tt.want {
			t.Errorf("%v blocked in a shielded call: %v, want %v", tt.sig, got, tt.want)
		}
	}
}
