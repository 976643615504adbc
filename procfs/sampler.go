// Package procfs samples the host beside the GPUs from Linux's /proc: CPU,
// memory, disk and network throughput, interactive sessions and the names
// of running processes. It is the agent's CPU path, so it needs no GPU, and
// it runs every second, so it keeps its files open and its buffers between
// calls and allocates only the slices it returns.
//
// Sources, all documented in proc(5):
//   - CPU and iowait: /proc/stat, as deltas between calls. Busy time is the
//     sum of user, nice, system, irq, softirq and steal (guest is already
//     inside user); iowait counts as idle in CPUPercent and has its own figure.
//   - Load1: /proc/loadavg. Memory: MemTotal − MemAvailable from /proc/meminfo.
//   - Disk: /proc/diskstats, sectors × 512 over whole disks only (sd*, vd*,
//     xvd*, nvme*n*), so that a partition's I/O is not counted twice.
//   - Network: /proc/net/dev, every interface but lo, in the sampler's own
//     network namespace. Traffic that crosses a bridge and a veth (containers)
//     is counted on each.
//   - Sessions and processes: /proc/PID/stat, read once per process. Its
//     comm field is the string /proc/PID/comm shows, so one read gives both
//     the name and the controlling terminal.
//
// Sessions are the distinct controlling terminals of live user processes
// that are a pseudo-terminal (pts: ssh logins, terminal windows in VS Code
// or Jupyter, tmux and screen windows, docker -t) or a console (ttyN, ttySN),
// leaving out terminals where only a getty waits. utmp is not used: sshd
// writes it, but containers, tmux, VS Code and Jupyter do not. An ssh
// connection without a terminal (ssh host cmd, scp) is not a session.
// Kernel threads and zombies are neither sessions nor processes. On a /proc
// mounted with hidepid, only root sees other users' processes.
//
// Between calls a Sampler keeps its five /proc files open, and each
// process's stat file too (at most 1024, and a quarter of RLIMIT_NOFILE),
// since reopening costs more than reading; Close releases them.
package procfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// The files read on every call, opened once and re-read from offset 0:
// a seq_file in /proc regenerates its text when read from the start.
const (
	fileStat = iota
	fileMeminfo
	fileLoadavg
	fileDiskstats
	fileNetDev
	nFiles
)

var fileNames = [nFiles]string{"stat", "meminfo", "loadavg", "diskstats", "net/dev"}

// optional marks files a sandbox may lack (gVisor has no diskstats): a
// missing one gives zero rates rather than failing the whole sample.
var optional = [nFiles]bool{fileDiskstats: true, fileNetDev: true}

// gettys hold a console open while nobody is logged in on it.
var gettys = map[string]bool{"agetty": true, "getty": true, "mingetty": true, "mgetty": true, "fbgetty": true}

// maxNames bounds the table of interned process names; past it the table
// starts afresh, so that a host spawning endless unique names cannot grow it.
const maxNames = 4096

// Sampler reads HostSamples from /proc; rates are measured between
// consecutive calls, and it is safe for concurrent use.
type Sampler struct {
	// Root is prepended to /proc, for tests; "" means "/".
	Root string
	// Now stamps samples and times the rates; nil means time.Now.
	Now func() time.Time
	// ProcessEvery spaces the process scan (Sessions, Processes), which
	// costs about 3 µs per process while the rest of a sample costs about
	// 30 µs (measured on a 2-vCPU VM): on a host with thousands of processes, a scan every few
	// seconds keeps the agent in its budget, and an idle policy that works
	// in minutes loses nothing. Between scans a sample repeats the last
	// scan's figures. 0 scans on every call.
	ProcessEvery time.Duration

	mu     sync.Mutex
	root   string // the Root the open files belong to
	files  [nFiles]*os.File
	absent [nFiles]bool
	procs  *procDir // the process scan, with what it keeps between calls
	buf    []byte
	prev   counters
	cur    counters
	names  map[string]string // interned process names
	list   []string          // the last scan's names, sorted and unique
	ttys   []int64
	// scanned is when the last process scan ran, zero before the first;
	// sessions is what it counted.
	scanned  time.Time
	sessions int
}

// counters are the cumulative figures the rates are computed from.
type counters struct {
	valid     bool
	time      time.Time
	cpu       cpuTimes
	cores     []cpuTimes
	disk      bool // diskstats was read
	diskRead  uint64
	diskWrite uint64
	net       bool // net/dev was read
	netRx     uint64
	netTx     uint64
}

// Sample reads the host now; the first call returns zero rates (CPU, iowait,
// disk, network), since a rate needs two readings.
func (s *Sampler) Sample() (gpuwarden.HostSample, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	t := now()
	if s.Root != s.root {
		// A new root (a test's next snapshot) means new files, but the
		// counters carry over: that is how a test feeds two readings.
		s.closeLocked()
		s.root = s.Root
	}
	if s.buf == nil {
		s.buf = make([]byte, 64<<10)
		s.names = make(map[string]string)
	}
	hs := gpuwarden.HostSample{Time: t}
	cur := &s.cur
	cur.valid, cur.time = false, t

	b, err := s.read(fileStat)
	if err != nil {
		return gpuwarden.HostSample{}, err
	}
	cur.cpu, cur.cores, err = parseCPU(b, cur.cores)
	if err != nil {
		return gpuwarden.HostSample{}, s.formatError(fileStat, err)
	}

	if b, err = s.read(fileMeminfo); err != nil {
		return gpuwarden.HostSample{}, err
	}
	total, avail, err := parseMeminfo(b)
	if err != nil {
		return gpuwarden.HostSample{}, s.formatError(fileMeminfo, err)
	}
	hs.MemTotalBytes, hs.MemUsedBytes = total, total-min(avail, total)

	if b, err = s.read(fileLoadavg); err != nil {
		return gpuwarden.HostSample{}, err
	}
	if hs.Load1, err = parseLoad1(b); err != nil {
		return gpuwarden.HostSample{}, s.formatError(fileLoadavg, err)
	}

	cur.disk = false
	if b, err = s.read(fileDiskstats); err != nil {
		return gpuwarden.HostSample{}, err
	} else if b != nil {
		if cur.diskRead, cur.diskWrite, err = parseDiskstats(b); err != nil {
			return gpuwarden.HostSample{}, s.formatError(fileDiskstats, err)
		}
		cur.disk = true
	}

	cur.net = false
	if b, err = s.read(fileNetDev); err != nil {
		return gpuwarden.HostSample{}, err
	} else if b != nil {
		if cur.netRx, cur.netTx, err = parseNetDev(b); err != nil {
			return gpuwarden.HostSample{}, s.formatError(fileNetDev, err)
		}
		cur.net = true
	}

	if s.scanned.IsZero() || s.ProcessEvery <= 0 || t.Sub(s.scanned) >= s.ProcessEvery || t.Before(s.scanned) {
		if err := s.scanProcesses(); err != nil {
			s.scanned = time.Time{} // the names are half gathered: scan again next time
			return gpuwarden.HostSample{}, err
		}
		s.scanned = t
	}
	// A copy: the caller may keep or change the slice.
	hs.Sessions, hs.Processes = s.sessions, slices.Clone(s.list)

	cur.valid = true
	hs.Counters = cur.totals()
	s.rates(&hs)
	s.prev, s.cur = s.cur, s.prev // keep both core arrays for reuse
	return hs, nil
}

// userHZ is the unit of /proc/stat's CPU times: USER_HZ, 100 on every
// architecture Linux builds for today (sysconf(_SC_CLK_TCK)); node_exporter
// assumes the same.
const userHZ = 100

// totals are the counters as HostCounters, for /metrics.
func (c *counters) totals() *gpuwarden.HostCounters {
	return &gpuwarden.HostCounters{
		CPUBusySeconds: float64(c.cpu.busy) / userHZ, CPUIdleSeconds: float64(c.cpu.idle) / userHZ,
		CPUIOWaitSeconds: float64(c.cpu.iowait) / userHZ,
		HasDisk:          c.disk, DiskReadBytes: c.diskRead, DiskWrittenBytes: c.diskWrite,
		HasNet: c.net, NetReceiveBytes: c.netRx, NetTransmitBytes: c.netTx,
	}
}

// rates fills the per-second figures from s.prev to s.cur, zero when
// there is no earlier reading or the clock did not move forward.
func (s *Sampler) rates(hs *gpuwarden.HostSample) {
	prev, cur := &s.prev, &s.cur
	hs.CPUPerCore = make([]float64, len(cur.cores))
	if !prev.valid {
		return
	}
	dt := cur.time.Sub(prev.time).Seconds()
	if dt <= 0 {
		return
	}
	hs.CPUPercent, hs.IOWaitPercent = cpuPercent(prev.cpu, cur.cpu)
	if len(prev.cores) == len(cur.cores) { // else a CPU went on- or offline
		for i := range cur.cores {
			hs.CPUPerCore[i], _ = cpuPercent(prev.cores[i], cur.cores[i])
		}
	}
	if prev.disk && cur.disk {
		hs.DiskReadBps = float64(delta(prev.diskRead, cur.diskRead)) / dt
		hs.DiskWriteBps = float64(delta(prev.diskWrite, cur.diskWrite)) / dt
	}
	if prev.net && cur.net {
		hs.NetRxBps = float64(delta(prev.netRx, cur.netRx)) / dt
		hs.NetTxBps = float64(delta(prev.netTx, cur.netTx)) / dt
	}
}

// cpuPercent is busy and iowait time as percentages of all time between
// two readings. Each part's delta is floored at zero: a core's iowait can
// step backwards (a known NO_HZ artefact), and a removed disk or interface
// makes a sum shrink.
func cpuPercent(a, b cpuTimes) (busy, iowait float64) {
	db, di, dw := delta(a.busy, b.busy), delta(a.idle, b.idle), delta(a.iowait, b.iowait)
	total := db + di + dw
	if total == 0 {
		return 0, 0
	}
	// Multiply first: whole percentages then come out exact.
	return float64(100*db) / float64(total), float64(100*dw) / float64(total)
}

// delta is b − a, or zero when the counter went backwards.
func delta(a, b uint64) uint64 {
	if b < a {
		return 0
	}
	return b - a
}

// scanProcesses counts sessions into s.sessions and collects the sorted
// process names into s.list.
func (s *Sampler) scanProcesses() error {
	if s.procs == nil {
		d, err := openProcDir(s.procPath(""))
		if err != nil {
			return fmt.Errorf("procfs: open %s: %w", s.procPath(""), err)
		}
		s.procs = d
	}
	s.list, s.ttys = s.list[:0], s.ttys[:0]
	err := s.procs.scan(func(b []byte) bool {
		p, err := parsePIDStat(b)
		if err != nil {
			return false // a torn read of an exiting process
		}
		if p.kthread {
			return true
		}
		if p.state == 'Z' || p.state == 'X' {
			return false
		}
		name, ok := s.names[string(p.comm)] // a lookup does not allocate
		if !ok {
			if len(s.names) >= maxNames {
				clear(s.names)
			}
			name = string(p.comm)
			s.names[name] = name
		}
		s.list = append(s.list, name)
		if interactiveTTY(p.tty) && !gettys[name] {
			s.ttys = append(s.ttys, p.tty)
		}
		return false
	})
	if err != nil {
		return fmt.Errorf("procfs: %w", err)
	}
	slices.Sort(s.ttys)
	s.sessions = len(slices.Compact(s.ttys))
	slices.Sort(s.list)
	s.list = slices.Compact(s.list)
	return nil
}

// read returns the whole of one of the fixed files, in s.buf; a missing
// optional file returns nil and no error.
func (s *Sampler) read(i int) ([]byte, error) {
	if s.absent[i] {
		return nil, nil
	}
	f := s.files[i]
	if f == nil {
		var err error
		f, err = os.Open(s.procPath(fileNames[i]))
		if errors.Is(err, fs.ErrNotExist) && optional[i] {
			s.absent[i] = true
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("procfs: %w", err)
		}
		s.files[i] = f
	}
	for {
		n, err := f.ReadAt(s.buf, 0)
		if err == io.EOF {
			return s.buf[:n], nil
		}
		if err != nil {
			return nil, fmt.Errorf("procfs: %w", err)
		}
		// The buffer filled up (a host with hundreds of cores has a long
		// /proc/stat): grow it and read the file afresh.
		s.buf = make([]byte, 2*len(s.buf))
	}
}

func (s *Sampler) formatError(i int, err error) error {
	return fmt.Errorf("procfs: read %s: %w", s.procPath(fileNames[i]), err)
}

// procPath is name under Root's /proc.
func (s *Sampler) procPath(name string) string {
	root := s.root
	if root == "" {
		root = "/"
	}
	return filepath.Join(root, "proc", name)
}

// Close releases the files the sampler keeps open between calls; a later
// Sample opens them again. A sampler that lives as long as the process
// needs no Close.
func (s *Sampler) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeLocked()
}

func (s *Sampler) closeLocked() error {
	var errs []error
	for i, f := range s.files {
		if f != nil {
			errs = append(errs, f.Close())
		}
		s.files[i], s.absent[i] = nil, false
	}
	if s.procs != nil {
		errs = append(errs, s.procs.close())
		s.procs = nil
	}
	s.scanned = time.Time{} // the next sample scans the (new) root
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("procfs: close: %w", err)
	}
	return nil
}
