package nvml

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuwarden/gpuwarden"
)

// ParseKmsgXIDs returns the Xid errors in a kernel log whose GPU is in
// busToIndex, in log order.
//
// It reads /dev/kmsg records ("4,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00):
// 79, …", the third field being microseconds since boot) and plain lines:
// dmesg and `journalctl -k -o short-monotonic` ("[ 1234.567890] …"),
// `dmesg -T` ("[Sat Nov 29 10:15:02 2026] …") and journalctl's short-iso and
// short formats. Bus ids match case-insensitively, with or without the PCI
// domain and function ("0000:3b:00" is NVML's "00000000:3B:00.0"). Lines
// that are not Xid messages, or whose Xid cannot be read, are skipped, as are
// Xids of buses not in busToIndex; an Xid whose time prefix is not
// recognised keeps a zero Time rather than being lost. Only a failing reader
// is an error.
func ParseKmsgXIDs(r io.Reader, bootTime time.Time, busToIndex map[string]int) ([]gpuwarden.XIDEvent, error) {
	index := make(map[pciAddr]int, len(busToIndex))
	for bus, i := range busToIndex {
		// Two spellings of one bus ("3b:00", "0000:3B:00.0") with different
		// indexes take the lower, not whichever the map yields first, so
		// that a parse does not change from one call to the next.
		if a, ok := parseBus(bus); ok {
			if j, seen := index[a]; !seen || i < j {
				index[a] = i
			}
		}
	}
	var events []gpuwarden.XIDEvent
	err := scanXIDs(r, bootTime, func(x busXID) {
		if i, ok := index[x.bus]; ok {
			events = append(events, gpuwarden.XIDEvent{Index: i, XID: x.xid, Time: x.at})
		}
	})
	return events, err
}

// busXID is one Xid as the log gives it: by bus, not by NVML index.
type busXID struct {
	bus pciAddr
	xid uint64
	at  time.Time
}

// scanXIDs calls found for every readable Xid in a kernel log.
func scanXIDs(r io.Reader, bootTime time.Time, found func(busXID)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 16<<10), 1<<20)
	marker := []byte("NVRM: Xid")
	for sc.Scan() {
		// Almost every line is something else: filter before allocating.
		if !bytes.Contains(sc.Bytes(), marker) {
			continue
		}
		at, msg := splitTimestamp(sc.Text(), bootTime)
		if bus, xid, ok := parseXid(msg); ok {
			found(busXID{bus: bus, xid: xid, at: at})
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read kernel log: %w", err)
	}
	return nil
}

// pciAddr is a GPU's PCI address without the function, which is always 0
// for a GPU and which Xid messages leave out.
type pciAddr struct {
	domain      uint32
	bus, device uint8
}

// parseBus reads "00000000:3B:00.0", "0000:3b:00", "PCI:0000:3b:00" or
// "3b:00"; a missing domain is domain 0, as on almost every host.
func parseBus(s string) (pciAddr, bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.TrimPrefix(s, "pci:")
	if i := strings.LastIndexByte(s, '.'); i >= 0 {
		s = s[:i]
	}
	parts := strings.Split(s, ":")
	var domain uint64
	var err error
	switch len(parts) {
	case 2:
	case 3:
		if domain, err = strconv.ParseUint(parts[0], 16, 32); err != nil {
			return pciAddr{}, false
		}
		parts = parts[1:]
	default:
		return pciAddr{}, false
	}
	bus, err1 := strconv.ParseUint(parts[0], 16, 8)
	dev, err2 := strconv.ParseUint(parts[1], 16, 8)
	if err1 != nil || err2 != nil {
		return pciAddr{}, false
	}
	return pciAddr{domain: uint32(domain), bus: uint8(bus), device: uint8(dev)}, true
}

// parseXid reads the GPU and the number of an Xid message:
// "NVRM: Xid (PCI:0000:3b:00): 79, pid=…", also with a MIG instance after
// the bus ("(PCI:0000:3b:00 GPU-I:05)") and without "PCI:" as old drivers
// wrote it.
func parseXid(msg string) (pciAddr, uint64, bool) {
	const marker = "NVRM: Xid ("
	i := strings.Index(msg, marker)
	if i < 0 {
		return pciAddr{}, 0, false
	}
	rest := msg[i+len(marker):]
	end := strings.Index(rest, "): ")
	if end < 0 {
		return pciAddr{}, 0, false
	}
	where := strings.Fields(rest[:end])
	if len(where) == 0 {
		return pciAddr{}, 0, false
	}
	bus, ok := parseBus(where[0])
	if !ok {
		return pciAddr{}, 0, false
	}
	num := rest[end+3:]
	n := 0
	for n < len(num) && num[n] >= '0' && num[n] <= '9' {
		n++
	}
	// The number ends the message or is followed by a comma; anything else
	// ("79x", "abc") is not the documented format.
	if n == 0 || (n < len(num) && num[n] != ',') {
		return pciAddr{}, 0, false
	}
	// Xids start at 1: a 0 is no error the driver reports, and would
	// otherwise count as an unknown, hence hardware, fault.
	xid, err := strconv.ParseUint(num[:n], 10, 64)
	if err != nil || xid == 0 {
		return pciAddr{}, 0, false
	}
	return bus, xid, true
}

// splitTimestamp takes a line's time prefix off and turns it into wall time.
func splitTimestamp(line string, boot time.Time) (time.Time, string) {
	// /dev/kmsg: "prio,seq,usec,flags[,more];message".
	if semi := strings.IndexByte(line, ';'); semi > 0 {
		fields := strings.Split(line[:semi], ",")
		if len(fields) >= 4 && digits(fields[0]) && digits(fields[1]) && digits(fields[2]) {
			// A count past int64 nanoseconds would wrap to before boot:
			// leave such a time unrecognised rather than wrong.
			usec, err := strconv.ParseInt(fields[2], 10, 64)
			if err == nil && usec <= math.MaxInt64/int64(time.Microsecond) {
				return boot.Add(time.Duration(usec) * time.Microsecond), line[semi+1:]
			}
		}
	}
	// dmesg: "[ 1234.567890] message", or "[Sat Nov 29 10:15:02 2026] message" with -T.
	if strings.HasPrefix(line, "[") {
		if end := strings.IndexByte(line, ']'); end > 0 {
			stamp, msg := strings.TrimSpace(line[1:end]), line[end+1:]
			if d, ok := secondsSinceBoot(stamp); ok {
				return boot.Add(d), msg
			}
			if t, err := time.ParseInLocation("Mon Jan _2 15:04:05 2006", stamp, time.Local); err == nil {
				return t, msg
			}
			return time.Time{}, msg
		}
	}
	// journalctl short-iso: "2026-11-29T10:15:02+0000 host kernel: message".
	if sp := strings.IndexByte(line, ' '); sp > 0 {
		for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999-0700"} {
			if t, err := time.Parse(layout, line[:sp]); err == nil {
				return t, line[sp+1:]
			}
		}
	}
	// journalctl short: "Nov 29 10:15:02 host kernel: message", without a
	// year: take the boot's, or the next one when that puts it before boot.
	const short = "Jan _2 15:04:05"
	if len(line) > len(short) {
		if t, err := time.ParseInLocation(short, line[:len(short)], time.Local); err == nil && !boot.IsZero() {
			t = t.AddDate(boot.Year(), 0, 0)
			if t.Before(boot.Add(-24 * time.Hour)) {
				t = t.AddDate(1, 0, 0)
			}
			return t, line[len(short):]
		}
	}
	return time.Time{}, line
}

// secondsSinceBoot reads dmesg's "1234.567890" exactly, without the float
// rounding that would move events by a microsecond.
func secondsSinceBoot(s string) (time.Duration, bool) {
	whole, frac, _ := strings.Cut(s, ".")
	if !digits(whole) || (frac != "" && !digits(frac)) || len(frac) > 9 {
		return 0, false
	}
	sec, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return 0, false
	}
	ns := int64(0)
	if frac != "" {
		ns, _ = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
	}
	if sec > (math.MaxInt64-ns)/int64(time.Second) {
		return 0, false // would wrap to before boot
	}
	return time.Duration(sec)*time.Second + time.Duration(ns), true
}

// digits reports whether s is a non-empty run of ASCII digits.
func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// maxKmsg caps one read of the kernel log; the ring buffer is far smaller,
// the cap only stops a log that grows faster than we read.
const maxKmsg = 16 << 20

// maxXIDs is how many Xids the followed log keeps: the newest, so that an
// Xid 13 storm cannot grow memory without bound.
const maxXIDs = 1024

// kernelLog follows the kernel log across Health calls. The first read takes
// the whole ring buffer (about 1 MiB, thousands of read calls on /dev/kmsg),
// later reads only the records logged since, so that a Health call per GPU
// per second stays within the agent's CPU budget.
type kernelLog struct {
	mu      sync.Mutex
	fd      int
	open    bool
	partial []byte   // an unfinished last line (regular files only)
	xids    []busXID // every Xid seen, oldest first, at most maxXIDs
	warned  bool     // the unreadable log was reported once
	openErr error    // why the log could not be opened, while it cannot
}

// xids returns the Xids of one GPU seen in the kernel log so far, and
// whether the log is a live source. An unreadable log (no CAP_SYSLOG, a
// container without /dev/kmsg) is common, not a failure, but it is said:
// the source is not live, and no Xid from it is not the same as none.
func (g *GPUs) xids(bus string, index int) ([]gpuwarden.XIDEvent, gpuwarden.XIDSource) {
	src := gpuwarden.XIDSource{Name: gpuwarden.XIDSourceKmsg}
	addr, ok := parseBus(bus)
	if !ok {
		src.Reason = fmt.Sprintf("bus id %q does not parse", bus)
		return nil, src
	}
	k := &g.kmsg
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.open {
		fd, err := openNonBlocking(g.kmsgPath)
		if err != nil {
			if !k.warned {
				k.warned = true
				g.log.Warn("kernel log unreadable: no Xids from it", "path", g.kmsgPath, "err", err)
			}
			k.openErr = err
			src.Reason = err.Error()
			return nil, src
		}
		k.fd, k.open, k.openErr = fd, true, nil
	}
	src.Live = true
	data, err := readAvailable(k.fd, g.kmsgPath)
	if err != nil {
		g.log.Debug("kernel log read stopped early", "path", g.kmsgPath, "err", err)
	}
	if len(data) > 0 {
		data = append(k.partial, data...)
		cut := bytes.LastIndexByte(data, '\n') + 1
		k.partial = bytes.Clone(data[cut:])
		boot, err := g.bootTime()
		if err != nil {
			g.log.Debug("boot time unknown, xid times are off", "err", err)
		}
		_ = scanXIDs(bytes.NewReader(data[:cut]), boot, func(x busXID) { k.xids = append(k.xids, x) })
		if n := len(k.xids); n > maxXIDs {
			k.xids = slices.Clone(k.xids[n-maxXIDs:])
		}
	}
	var events []gpuwarden.XIDEvent
	for _, x := range k.xids {
		if x.bus == addr {
			events = append(events, gpuwarden.XIDEvent{Index: index, XID: x.xid, Time: x.at})
		}
	}
	return events, src
}

// eventWatch follows NVML's event set for Xid critical errors on a
// goroutine of its own: nvmlEventSetWait blocks, so it runs with a bounded
// timeout in a loop that Close stops.
type eventWatch struct {
	mu      sync.Mutex
	started bool
	live    bool
	reason  string // why the source is not live
	xids    []gpuwarden.XIDEvent
	stop    chan struct{}
	done    chan struct{}
	ready   chan struct{} // closed once registration is over, either way
}

// WatchXIDEvents registers every GPU for NVML's Xid critical-error events
// and follows them on a goroutine until Close; Health then reports them
// beside the kernel log's, and the event set as a source. It is for long
// runs (the agent): a one-shot reader such as the canary would only catch
// the Xids of its own half second and would pay the bounded wait in Close.
// It waits for the registration as long as ctx allows, so that the next
// Health already says whether the source is live; a registration stuck in
// the driver leaves it "starting".
func (g *GPUs) WatchXIDEvents(ctx context.Context) {
	w := &g.events
	w.mu.Lock()
	if w.started || g.closed.Load() {
		w.mu.Unlock()
		return
	}
	w.started, w.reason = true, "starting"
	w.stop, w.done, w.ready = make(chan struct{}), make(chan struct{}), make(chan struct{})
	ready := w.ready
	go g.watchEvents(w.stop, w.done, w.ready)
	w.mu.Unlock()
	select {
	case <-ready:
	case <-ctx.Done():
	}
}

// stopEvents ends the watch and waits for it, at most closeTimeout.
func (g *GPUs) stopEvents() {
	w := &g.events
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	if !started {
		return
	}
	close(w.stop)
	select {
	case <-w.done:
	case <-time.After(g.closeTimeout):
		g.log.Warn("nvml event watch did not stop", "after", g.closeTimeout)
	}
}

// setEventState records whether the event source is live.
func (w *eventWatch) set(live bool, reason string) {
	w.mu.Lock()
	w.live, w.reason = live, reason
	w.mu.Unlock()
}

// watchEvents creates the event set, registers every GPU for Xid critical
// errors, and waits for events until stopped.
func (g *GPUs) watchEvents(stop, done, ready chan struct{}) {
	defer close(done)
	registered := sync.OnceFunc(func() { close(ready) })
	defer registered()
	w := &g.events
	set, ret := g.lib.EventSetCreate()
	if ret != gonvml.SUCCESS {
		w.set(false, "nvmlEventSetCreate: "+ret.Error())
		return
	}
	defer set.Free()
	n, ret := g.lib.DeviceGetCount()
	if ret != gonvml.SUCCESS {
		w.set(false, "nvmlDeviceGetCount: "+ret.Error())
		return
	}
	devices := map[gonvml.Device]int{}
	var failed []string
	for i := range n {
		dev, ret := g.lib.DeviceGetHandleByIndex(i)
		if ret == gonvml.SUCCESS {
			ret = dev.RegisterEvents(gonvml.EventTypeXidCriticalError, set)
		}
		if ret != gonvml.SUCCESS {
			failed = append(failed, fmt.Sprintf("GPU %d: %v", i, ret))
			continue
		}
		devices[dev] = i
	}
	if len(devices) == 0 {
		w.set(false, "nvmlDeviceRegisterEvents: "+strings.Join(failed, "; "))
		return
	}
	if len(failed) > 0 {
		g.log.Warn("nvml xid events not available on every GPU", "failed", strings.Join(failed, "; "))
	}
	w.set(true, "")
	registered()
	timeout := uint32(g.eventWait / time.Millisecond)
	for {
		select {
		case <-stop:
			return
		default:
		}
		data, ret := set.Wait(timeout)
		switch ret {
		case gonvml.SUCCESS:
		case gonvml.ERROR_TIMEOUT:
			continue
		default:
			// A lost GPU makes every wait fail at once: slow down, and say so.
			w.set(false, "nvmlEventSetWait: "+ret.Error())
			select {
			case <-stop:
				return
			case <-time.After(g.eventWait):
			}
			continue
		}
		w.set(true, "")
		if data.EventType&gonvml.EventTypeXidCriticalError == 0 {
			continue
		}
		index, ok := devices[data.Device]
		if !ok {
			index = -1
		}
		w.mu.Lock()
		w.xids = append(w.xids, gpuwarden.XIDEvent{Index: index, XID: data.EventData, Time: g.now()})
		if n := len(w.xids); n > maxXIDs {
			w.xids = slices.Clone(w.xids[n-maxXIDs:])
		}
		w.mu.Unlock()
	}
}

// forGPU returns the events of one GPU (and those NVML could not place)
// and the source's state; ok is false when nobody asked for the watch.
func (w *eventWatch) forGPU(index int) ([]gpuwarden.XIDEvent, gpuwarden.XIDSource, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.started {
		return nil, gpuwarden.XIDSource{}, false
	}
	src := gpuwarden.XIDSource{Name: gpuwarden.XIDSourceNVMLEvents, Live: w.live, Reason: w.reason}
	var out []gpuwarden.XIDEvent
	for _, x := range w.xids {
		if x.Index == index || x.Index < 0 {
			x.Index = index
			out = append(out, x)
		}
	}
	return out, src, true
}

// sameXIDWindow is how far apart the kernel log's and NVML's times of one
// Xid may be: the log stamps it in the kernel, NVML's event when we read it.
const sameXIDWindow = 5 * time.Second

// mergeXIDs adds the NVML events the kernel log does not already hold: the
// same Xid number within sameXIDWindow is the same error seen twice.
func mergeXIDs(kmsg, events []gpuwarden.XIDEvent) []gpuwarden.XIDEvent {
	out := kmsg
	for _, e := range events {
		dup := slices.ContainsFunc(kmsg, func(k gpuwarden.XIDEvent) bool {
			d := k.Time.Sub(e.Time)
			return k.XID == e.XID && d < sameXIDWindow && d > -sameXIDWindow
		})
		if !dup {
			out = append(out, e)
		}
	}
	return out
}

// close releases the kernel log.
func (k *kernelLog) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.open {
		_ = syscall.Close(k.fd)
		k.open = false
	}
}

// openNonBlocking opens the kernel log with raw syscalls: os.File would hand
// a pollable O_NONBLOCK descriptor to the runtime poller, whose Read waits
// for the next kernel message instead of returning EAGAIN.
func openNonBlocking(path string) (int, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", path, err)
	}
	return fd, nil
}

// readAvailable reads what the file holds now: /dev/kmsg until EAGAIN, a
// regular file (tests) until EOF.
func readAvailable(fd int, path string) ([]byte, error) {
	// One read returns one kmsg record, and fails with EINVAL when the buffer
	// is smaller than the record; records are at most a few KiB.
	buf := make([]byte, 16<<10)
	var out []byte
	for len(out) < maxKmsg {
		n, err := syscall.Read(fd, buf)
		switch {
		case errors.Is(err, syscall.EAGAIN):
			return out, nil
		case errors.Is(err, syscall.EPIPE):
			continue // records were overwritten under us; the next read resumes at the oldest
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return out, fmt.Errorf("read %s: %w", path, err)
		case n == 0:
			return out, nil
		}
		out = append(out, buf[:n]...)
	}
	return out, nil
}
