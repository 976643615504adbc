//go:build unix

package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// LockFile is the name of the data dir's lock file.
const LockFile = "agent.lock"

// DirLock makes its process the only agent on a data dir for as long as it
// is open.
type DirLock struct {
	f *os.File
}

// LockDataDir takes the data dir's lock, an flock on DIR/agent.lock, and
// writes this process's PID into the file. Take it before the socket or the
// ledger is touched: a second agent on one dir removed the first's socket,
// so jobs reported to it while the first, hearing none, stopped the box
// under them. The kernel drops an flock with its process, so a lock file a
// dead agent left blocks nobody. A lock held elsewhere is a conflict (exit
// 2) naming the PID that holds it.
func LockDataDir(dir string) (*DirLock, error) {
	path := filepath.Join(dir, LockFile)
	// Go opens with O_CLOEXEC: the stop command, an idle script or any
	// child never inherits the lock and holds it after the agent is gone.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the data dir's lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock the data dir %s: %w", dir, err)
		}
		holder := "a process whose PID the lock file does not name"
		if pid := lockHolder(path); pid > 0 {
			holder = fmt.Sprintf("PID %d", pid)
		}
		return nil, gpuwarden.Errorf(gpuwarden.EConflict, "another agent (%s) runs on the data dir %s (its lock %s is held)", holder, dir, path).
			WithHint("stop that agent first, or give this one its own --data-dir")
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("write the PID into %s: %w", path, err)
	}
	return &DirLock{f: f}, nil
}

// lockHolder reads the PID in a held lock file. The holder writes it just
// after it takes the lock, so an empty file is read again for up to 100 ms.
func lockHolder(path string) int {
	for range 20 {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return pid
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0
}

// Close releases the lock; the file stays, since removing it would let a
// third agent lock a new file while a second holds the removed one.
func (l *DirLock) Close() error {
	return l.f.Close()
}
