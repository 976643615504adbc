//go:build linux

// Package codepages hands back the pages of gpuwarden's own binary that a
// process mapped while starting: the kernel maps code around each page
// touched (64 KB at a time, from a page cache that read the binary 8 MB at
// a time), so after its 196 package inits even `gpuwarden version` holds
// most of the 14 MB of code and 11 MB of tables, though a command then
// runs a small part of them. `plan`, which holds a million offers and whose
// budget is its total RSS against the file's size, hands them back before
// and after reading. `up` no longer does: the agent's memory budget is what
// it owns (RssAnon), and these clean pages of the binary are the kernel's
// to share and drop, so handing them back only made the agent fault its
// code in again (docs/benchmarks.md).
package codepages

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Drop unmaps the binary's read-only mappings (code, read-only data), so
// that only the pages used from now on are mapped again, from the page
// cache, when they are next run. A mapping is dropped only when none of its
// pages was ever written (smaps counts no anonymous memory in it): such
// pages hold what the file holds, so nothing is lost. The writable ones,
// and the relocation table the loader wrote before making it read-only,
// are left. It returns the bytes it asked the kernel to drop.
func Drop() int {
	exe, err := os.Executable()
	if err != nil {
		return 0
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0
	}
	defer f.Close()
	var (
		dropped    int
		start, end uint64
		candidate  bool // the mapping being read is the binary's, read-only
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if r, ok := mappingRange(fields[0]); ok && len(fields) >= 5 {
			// 00400000-011f5000 r-xp 00000000 fd:01 123 /path/to/gpuwarden
			start, end = r[0], r[1]
			candidate = len(fields) >= 6 && fields[5] == exe && !strings.Contains(fields[1], "w")
			continue
		}
		// "Anonymous:" comes after the counts a drop would change and
		// before the mapping's last lines: the decision is made on it.
		if fields[0] != "Anonymous:" || !candidate {
			continue
		}
		candidate = false
		if len(fields) < 2 || fields[1] != "0" {
			continue // written once: its pages are not the file's
		}
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, uintptr(start), uintptr(end-start), syscall.MADV_DONTNEED); errno == 0 {
			dropped += int(end - start)
		}
	}
	return dropped
}

// mappingRange reads "00400000-011f5000", the first field of a mapping's
// line in smaps.
func mappingRange(s string) ([2]uint64, bool) {
	lo, hi, ok := strings.Cut(s, "-")
	if !ok {
		return [2]uint64{}, false
	}
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	if err1 != nil || err2 != nil || end <= start {
		return [2]uint64{}, false
	}
	return [2]uint64{start, end}, true
}
