package procfs

import (
	"bytes"
	"errors"
)

// The parsers below read the text formats of proc(5) straight from the
// read buffer, without splitting into strings: the sampler runs every
// second for the life of the agent, so a steady state without garbage is
// worth a few hand-written loops.

// errFormat marks a file whose layout is not the one proc(5) documents.
var errFormat = errors.New("unexpected format")

// cpuTimes are one cpu line of /proc/stat folded into the three sums the
// sample needs, in clock ticks since boot.
type cpuTimes struct {
	busy   uint64 // user nice system irq softirq steal (guest is inside user)
	idle   uint64
	iowait uint64
}

// parseCPU reads the "cpu" and "cpuN" lines at the head of /proc/stat into
// all and cores (reusing cores' array); it stops at the first other line.
func parseCPU(b []byte, cores []cpuTimes) (all cpuTimes, _ []cpuTimes, err error) {
	cores = cores[:0]
	found := false
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		if !bytes.HasPrefix(line, []byte("cpu")) {
			if found {
				break
			}
			continue
		}
		name, rest := nextField(line)
		var v [8]uint64 // user nice system idle iowait irq softirq steal
		n := 0
		for n < len(v) {
			var f []byte
			f, rest = nextField(rest)
			if len(f) == 0 {
				break
			}
			x, ok := parseUint(f)
			if !ok {
				return all, cores, errFormat
			}
			v[n] = x
			n++
		}
		if n < 4 { // kernels since 2.6 print at least user nice system idle
			return all, cores, errFormat
		}
		t := cpuTimes{busy: v[0] + v[1] + v[2] + v[5] + v[6] + v[7], idle: v[3], iowait: v[4]}
		if len(name) == 3 {
			all, found = t, true
		} else {
			cores = append(cores, t)
		}
	}
	if !found {
		return all, cores, errFormat
	}
	return all, cores, nil
}

// parseMeminfo returns MemTotal and MemAvailable in bytes; kernels before
// 3.14 lack MemAvailable, and there MemFree + Buffers + Cached stands in.
func parseMeminfo(b []byte) (total, avail uint64, err error) {
	var free, buffers, cached uint64
	var haveTotal, haveAvail bool
	for len(b) > 0 && !(haveTotal && haveAvail) {
		var line []byte
		line, b = nextLine(b)
		key, rest, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		var dst *uint64
		switch string(key) { // no allocation: the compiler compares in place
		case "MemTotal":
			dst, haveTotal = &total, true
		case "MemAvailable":
			dst, haveAvail = &avail, true
		case "MemFree":
			dst = &free
		case "Buffers":
			dst = &buffers
		case "Cached":
			dst = &cached
		default:
			continue
		}
		f, _ := nextField(rest)
		kb, ok := parseUint(f)
		if !ok {
			return 0, 0, errFormat
		}
		*dst = kb * 1024 // the unit is always kB (KiB)
	}
	if !haveTotal {
		return 0, 0, errFormat
	}
	if !haveAvail {
		avail = min(free+buffers+cached, total)
	}
	return total, avail, nil
}

// parseLoad1 returns the first figure of /proc/loadavg ("0.62 1.83 ...").
func parseLoad1(b []byte) (float64, error) {
	f, _ := nextField(b)
	whole, frac, _ := bytes.Cut(f, []byte("."))
	w, ok := parseUint(whole)
	if !ok {
		return 0, errFormat
	}
	x := float64(w)
	if len(frac) > 0 {
		fr, ok := parseUint(frac)
		if !ok || len(frac) > 6 {
			return 0, errFormat
		}
		scale := 1.0
		for range frac {
			scale *= 10
		}
		x += float64(fr) / scale
	}
	return x, nil
}

// parseDiskstats sums sectors read and written over whole disks, in bytes;
// partitions, device-mapper, md, loop and ram devices are left out because
// their I/O is already counted on the disk beneath them (or is not disk I/O).
func parseDiskstats(b []byte) (read, written uint64, err error) {
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		_, rest := nextField(line) // major
		_, rest = nextField(rest)  // minor
		var name []byte
		name, rest = nextField(rest)
		if len(name) == 0 || !wholeDisk(name) {
			continue
		}
		// reads, reads merged, sectors read, ms reading, writes, writes
		// merged, sectors written: fields 4 to 10 of the line.
		var v [7]uint64
		for i := range v {
			var f []byte
			f, rest = nextField(rest)
			x, ok := parseUint(f)
			if !ok {
				return 0, 0, errFormat
			}
			v[i] = x
		}
		// The kernel counts 512-byte sectors here whatever the device's
		// own sector size (Documentation/admin-guide/iostats.rst).
		read += v[2] * 512
		written += v[6] * 512
	}
	return read, written, nil
}

// wholeDisk says whether a diskstats name is a whole disk: sdX, vdX, xvdX
// (letters only) or nvmeNnM (no pN partition, no cN multipath path).
func wholeDisk(name []byte) bool {
	for _, p := range []string{"xvd", "sd", "vd"} {
		if rest, ok := bytes.CutPrefix(name, []byte(p)); ok {
			return len(rest) > 0 && allLower(rest)
		}
	}
	rest, ok := bytes.CutPrefix(name, []byte("nvme"))
	if !ok {
		return false
	}
	ctrl, ns, ok := bytes.Cut(rest, []byte("n"))
	return ok && len(ctrl) > 0 && len(ns) > 0 && allDigits(ctrl) && allDigits(ns)
}

// parseNetDev sums received and sent bytes over every interface but lo.
func parseNetDev(b []byte) (rx, tx uint64, err error) {
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		// The name ends at the colon; large counters may follow it with
		// no space ("eth0:123456"), so the colon, not a field, splits.
		name, rest, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue // the two header lines
		}
		if string(bytes.TrimSpace(name)) == "lo" {
			continue
		}
		// rx: bytes packets errs drop fifo frame compressed multicast;
		// then tx: bytes ...
		var r, t uint64
		for i := 0; i <= 8; i++ {
			var f []byte
			f, rest = nextField(rest)
			if i != 0 && i != 8 {
				continue
			}
			x, ok := parseUint(f)
			if !ok {
				return 0, 0, errFormat
			}
			if i == 0 {
				r = x
			} else {
				t = x
			}
		}
		rx += r
		tx += t
	}
	return rx, tx, nil
}

// pidStat is what the sampler takes from /proc/PID/stat.
type pidStat struct {
	comm    []byte // aliases the read buffer
	state   byte
	tty     int64
	kthread bool
}

// pfKthread is PF_KTHREAD in the flags field (include/linux/sched.h).
const pfKthread = 0x00200000

// parsePIDStat reads "pid (comm) state ppid pgrp session tty_nr tpgid flags
// ...". The name may hold spaces and parentheses, so it ends at the last
// ')' of the line: every field after it is a number.
func parsePIDStat(b []byte) (pidStat, error) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return pidStat{}, errFormat
	}
	p := pidStat{comm: b[open+1 : end]}
	rest := b[end+1:]
	var f []byte
	f, rest = nextField(rest)
	if len(f) != 1 {
		return pidStat{}, errFormat
	}
	p.state = f[0]
	for range 3 { // ppid pgrp session
		_, rest = nextField(rest)
	}
	f, rest = nextField(rest)
	tty, ok := parseInt(f)
	if !ok {
		return pidStat{}, errFormat
	}
	p.tty = tty
	_, rest = nextField(rest) // tpgid
	f, _ = nextField(rest)
	flags, ok := parseUint(f)
	if !ok {
		return pidStat{}, errFormat
	}
	p.kthread = flags&pfKthread != 0
	return p, nil
}

// ttyMajorMinor decodes tty_nr as the kernel encodes it (new_encode_dev):
// minor bits 0–7 and 20–31, major bits 8–19.
func ttyMajorMinor(tty int64) (major, minor int64) {
	return (tty >> 8) & 0xfff, (tty & 0xff) | ((tty >> 12) & 0xfff00)
}

// interactiveTTY says whether a controlling terminal is one a person types
// at: a pseudo-terminal (pts, majors 136–143: ssh, terminal windows, tmux)
// or a virtual or serial console (major 4: tty1, ttyS0).
func interactiveTTY(tty int64) bool {
	if tty == 0 {
		return false
	}
	major, _ := ttyMajorMinor(tty)
	return major == 4 || (major >= 136 && major <= 143)
}

// nextLine splits b at the first newline.
func nextLine(b []byte) (line, rest []byte) {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[:i], b[i+1:]
	}
	return b, nil
}

// nextField returns the first blank-separated field of b and what follows.
func nextField(b []byte) (field, rest []byte) {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	j := i
	for j < len(b) && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' {
		j++
	}
	return b[i:j], b[j:]
}

// parseUint reads a decimal without sign; ok is false on anything else or
// on overflow.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var x uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if x > (1<<64-1-d)/10 {
			return 0, false
		}
		x = x*10 + d
	}
	return x, true
}

// parseInt reads a decimal with an optional minus sign.
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	x, ok := parseUint(b)
	if !ok || x > 1<<63-1 {
		return 0, false
	}
	if neg {
		return -int64(x), true
	}
	return int64(x), true
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}

func allLower(b []byte) bool {
	for _, c := range b {
		if c < 'a' || c > 'z' {
			return false
		}
	}
	return len(b) > 0
}
