//go:build linux

package procfs

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"unsafe"
)

// procDir walks the processes of a proc directory with raw system calls and
// keeps what it learns between scans, because the scan is most of the cost
// of a sample (measured on a 2-core VM: 1.5 µs to open and close a
// /proc/PID/stat, 2 µs to read it):
//   - each process's stat file stays open and is re-read from offset 0
//     (pread), which regenerates its text; the descriptor is bound to that
//     process, not to its number, so after the process exits a read fails
//     (ESRCH) and a process that reuses the number is opened afresh;
//   - a kernel thread is read once and then skipped while its pid stays
//     listed: a pid is reused only after the pid space wraps, far longer
//     than the time between samples. Many-core hosts run several kernel
//     threads per core, often more than all user processes together;
//   - the listing (getdents), the paths and the read buffer are reused, so
//     a scan allocates nothing.
type procDir struct {
	dir   *os.File // its finalizer closes it if the Sampler is dropped unclosed
	dents []byte
	path  []byte // "PID/stat\x00", relative to dir
	stat  []byte
	pids  []int32
	procs *procTable
	// keep is how many stat files may stay open: each holds a descriptor
	// and a page of kernel memory, so a host with tens of thousands of
	// processes pays open and close for the ones past it.
	keep int
}

// procTable is the per-process state, apart from procDir so that a cleanup
// can close its descriptors when the procDir is dropped without close.
type procTable struct {
	ents, next []procEntry // ascending by pid
	open       int
}

type procEntry struct {
	pid     int32
	fd      int32 // open stat file, or -1
	kthread bool
}

// maxKeepOpen caps the stat files held open; see procDir.keep.
const maxKeepOpen = 1024

func openProcDir(path string) (*procDir, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	keep := maxKeepOpen
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur/4 < uint64(keep) {
		keep = int(lim.Cur / 4) // leave the agent's other files room
	}
	d := &procDir{dir: f, dents: make([]byte, 32<<10), path: make([]byte, 0, 32),
		stat: make([]byte, 4<<10), procs: &procTable{}, keep: keep}
	runtime.AddCleanup(d, (*procTable).closeAll, d.procs)
	return d, nil
}

func (d *procDir) close() error {
	d.procs.closeAll()
	return d.dir.Close()
}

func (t *procTable) closeAll() {
	for i := range t.ents {
		t.closeEntry(&t.ents[i])
	}
	t.ents = t.ents[:0]
}

func (t *procTable) closeEntry(e *procEntry) {
	if e.fd >= 0 {
		syscall.Close(int(e.fd))
		e.fd = -1
		t.open--
	}
}

// scan calls visit with the stat text of every process but the kernel
// threads already known; visit reports whether the process is a kernel
// thread. The text is valid only during the call.
func (d *procDir) scan(visit func(stat []byte) (kthread bool)) error {
	var err error
	if d.pids, err = d.list(d.pids[:0]); err != nil {
		return err
	}
	slices.Sort(d.pids) // /proc lists in order already; the merge below needs it
	t := d.procs
	old, next := t.ents, t.next[:0]
	j := 0
	for _, pid := range d.pids {
		for j < len(old) && old[j].pid < pid {
			t.closeEntry(&old[j]) // exited
			j++
		}
		e := procEntry{pid: pid, fd: -1}
		if j < len(old) && old[j].pid == pid {
			e = old[j]
			j++
		}
		if e.kthread {
			next = append(next, e)
			continue
		}
		b, err := d.readStat(&e)
		if err != nil {
			continue // exited since the listing
		}
		if e.kthread = visit(b); e.kthread {
			t.closeEntry(&e)
		}
		next = append(next, e)
	}
	for ; j < len(old); j++ {
		t.closeEntry(&old[j])
	}
	t.ents, t.next = next, old[:0]
	return nil
}

// list appends the numeric entries of the directory to pids.
func (d *procDir) list(pids []int32) ([]int32, error) {
	fd := int(d.dir.Fd())
	// Rewinding a /proc directory lists the processes alive now.
	if _, err := syscall.Seek(fd, 0, 0); err != nil {
		return pids, fmt.Errorf("rewind %s: %w", d.dir.Name(), err)
	}
	for {
		n, err := syscall.ReadDirent(fd, d.dents)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return pids, fmt.Errorf("read %s: %w", d.dir.Name(), err)
		}
		if n <= 0 {
			return pids, nil
		}
		// struct linux_dirent64: u64 ino, s64 off, u16 reclen, u8 type, name\0.
		for b := d.dents[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return pids, fmt.Errorf("read %s: bad dirent length %d", d.dir.Name(), reclen)
			}
			typ, name := b[18], b[19:reclen]
			b = b[reclen:]
			if typ != syscall.DT_DIR && typ != syscall.DT_UNKNOWN {
				continue
			}
			var pid int64
			ok := len(name) > 0 && name[0] >= '1' && name[0] <= '9'
			for _, c := range name {
				if c == 0 {
					break
				}
				if c < '0' || c > '9' || pid > 1<<30 {
					ok = false
					break
				}
				pid = pid*10 + int64(c-'0')
			}
			if ok {
				pids = append(pids, int32(pid))
			}
		}
	}
}

// readStat returns the text of e's stat file, in a buffer the next call
// reuses, re-reading the open file when there is one and opening it (and
// keeping it open, within d.keep) when not.
func (d *procDir) readStat(e *procEntry) ([]byte, error) {
	t := d.procs
	if e.fd >= 0 {
		if b, err := d.pread(int(e.fd)); err == nil {
			return b, nil
		}
		t.closeEntry(e) // the process exited; its number may be reused
	}
	d.path = strconv.AppendInt(d.path[:0], int64(e.pid), 10)
	d.path = append(d.path, "/stat\x00"...)
	// openat with our own NUL-terminated buffer: syscall.Openat would copy
	// the path into a new allocation on every call.
	r, _, errno := syscall.Syscall6(syscall.SYS_OPENAT, d.dir.Fd(), uintptr(unsafe.Pointer(&d.path[0])),
		syscall.O_RDONLY|syscall.O_CLOEXEC, 0, 0, 0)
	if errno != 0 {
		return nil, errno
	}
	fd := int(r)
	b, err := d.pread(fd)
	if err != nil || t.open >= d.keep {
		syscall.Close(fd)
		return b, err
	}
	e.fd = int32(fd)
	t.open++
	return b, nil
}

// pread reads a whole stat file from offset 0 into d.stat. The kernel
// writes /proc/PID/stat in one piece (single_open), so a read that leaves
// room in the buffer has all of it, and the read to see EOF is saved.
func (d *procDir) pread(fd int) ([]byte, error) {
	n := 0
	for {
		m, err := syscall.Pread(fd, d.stat[n:], int64(n))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		n += m
		if m <= 0 || n < len(d.stat) {
			return d.stat[:n], nil
		}
		d.stat = append(d.stat, make([]byte, len(d.stat))...)
	}
}
