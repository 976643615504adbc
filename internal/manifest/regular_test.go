package manifest

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// TestOpenRegular: only a regular file is opened; a FIFO is refused at
// once instead of waited on, and neither a symlink nor a directory passes.
func TestOpenRegular(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name   string
		make   func(p string) error
		reason string // "" for a file that opens
	}{
		{"regular", func(p string) error { return os.WriteFile(p, []byte("hello"), 0o644) }, ""},
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }, "is a FIFO"},
		{"symlink", func(p string) error { return os.Symlink("/etc/hostname", p) }, "is a symlink"},
		{"directory", func(p string) error { return os.Mkdir(p, 0o755) }, "is a directory"},
		{"socket", func(p string) error {
			l, err := net.Listen("unix", p)
			if err == nil {
				t.Cleanup(func() { l.Close() })
			}
			return err
		}, "is a socket"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, tt.name)
			if err := tt.make(p); err != nil {
				t.Fatal(err)
			}
			type result struct {
				f   *os.File
				err error
			}
			ch := make(chan result, 1)
			go func() {
				f, _, err := OpenRegular(p)
				ch <- result{f, err}
			}()
			var r result
			select {
			case r = <-ch:
			case <-time.After(time.Minute):
				t.Fatal("OpenRegular hung")
			}
			if r.f != nil {
				r.f.Close()
			}
			if tt.reason == "" {
				if r.err != nil {
					t.Errorf("OpenRegular = %v, want the file", r.err)
				}
				return
			}
			if gpuwarden.ErrorCodeOf(r.err) != gpuwarden.EInvalid || !strings.Contains(r.err.Error(), tt.reason) {
				t.Errorf("OpenRegular = %v, want invalid: %s", r.err, tt.reason)
			}
		})
	}
}

// TestReadOfAManifestOverTheCap: Read refuses a manifest over MaxSize by
// its size, without reading it into memory.
func TestReadOfAManifestOverTheCap(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, Name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, Name), 2<<30); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Read(dir)
	runtime.ReadMemStats(&after)
	if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid || !strings.Contains(err.Error(), "a manifest may have") {
		t.Errorf("Read = %v, want the size refused", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Errorf("Read allocated %d MiB for a 2 GiB sparse manifest", alloc>>20)
	}
}
