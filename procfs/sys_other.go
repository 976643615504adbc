//go:build !linux

package procfs

import (
	"os"
	"path/filepath"
	"strconv"
)

// procDir reads process entries through package os where /proc is not
// Linux's: the package still builds everywhere, and Sample reports the
// missing files as errors there. It keeps no state between scans.
type procDir struct{ path string }

func openProcDir(path string) (*procDir, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	return &procDir{path: path}, nil
}

func (d *procDir) close() error { return nil }

// scan calls visit with the stat text of every process.
func (d *procDir) scan(visit func(stat []byte) (kthread bool)) error {
	entries, err := os.ReadDir(d.path)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if _, err := strconv.ParseInt(e.Name(), 10, 32); err != nil || !e.IsDir() {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(d.path, e.Name(), "stat")); err == nil {
			visit(b)
		}
	}
	return nil
}
