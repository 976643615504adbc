package procfs

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// The roots under testdata/ were written by hand from the formats in
// proc(5) (see testdata/README.md); snap2 is snap1 two seconds later.
var (
	snap1 = filepath.Join("testdata", "snap1")
	snap2 = filepath.Join("testdata", "snap2")
	t1    = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
)

// stepClock returns the times in turn, one per call.
func stepClock(times ...time.Time) func() time.Time {
	return func() time.Time {
		t := times[0]
		if len(times) > 1 {
			times = times[1:]
		}
		return t
	}
}

func TestSampleSnapshots(t *testing.T) {
	s := &Sampler{Root: snap1, Now: stepClock(t1, t1.Add(2*time.Second))}
	defer s.Close()
	first, err := s.Sample()
	if err != nil {
		t.Fatal(err)
	}
	s.Root = snap2
	second, err := s.Sample()
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name      string
		got, want any
	}{
		// The first reading has no rates yet.
		{"first time", first.Time, t1},
		{"first cpu", first.CPUPercent, 0.0},
		{"first per core", first.CPUPerCore, []float64{0, 0}},
		{"first disk read", first.DiskReadBps, 0.0},
		{"first net rx", first.NetRxBps, 0.0},
		{"first load1", first.Load1, 0.62},
		{"first mem used", first.MemUsedBytes, uint64(16384000-9000000) * 1024},
		{"first sessions", first.Sessions, 0}, // only gettys hold terminals
		{"first processes", first.Processes, []string{"agetty", "sshd", "systemd"}},

		{"time", second.Time, t1.Add(2 * time.Second)},
		// All CPUs: busy +155 user (guest +30 is inside it), +45 system,
		// +10 irq, +10 softirq = 220; idle +160; iowait +20; of 400 ticks.
		{"cpu", second.CPUPercent, 55.0},
		{"iowait", second.IOWaitPercent, 5.0},
		// cpu0: 200 busy of 200; cpu1: 20 busy, 160 idle, 20 iowait.
		{"per core", second.CPUPerCore, []float64{100, 10}},
		{"load1", second.Load1, 1.25},
		{"mem total", second.MemTotalBytes, uint64(16384000) * 1024},
		{"mem used", second.MemUsedBytes, uint64(16384000-4096000) * 1024},
		// Sectors read: sda +2048, nvme0n1 +4096, xvda +2048 = 8192 × 512 B
		// in 2 s; written: sda +1024, nvme0n1 +3072 = 4096 × 512 B in 2 s.
		// Partitions, loop, ram, dm, md and sr moved by 99,999 and are left out.
		{"disk read", second.DiskReadBps, 8192 * 512 / 2.0},
		{"disk write", second.DiskWriteBps, 4096 * 512 / 2.0},
		// rx: eth0 +2,000,000, docker0 +200,000, ib0 +200,000; tx: eth0
		// +1,000,000; lo moved by 9,999,999 and is left out.
		{"net rx", second.NetRxBps, 1200000.0},
		{"net tx", second.NetTxBps, 500000.0},
		// pts/0 (bash, python3), pts/3, tty2, pts/300; not the gettys on
		// tty1 and ttyS0, not the zombie on pts/4.
		{"sessions", second.Sessions, 4},
		{"processes", second.Processes,
			[]string{"(sd-pam)", "agetty", "bash", "my) app", "python3", "sshd", "systemd", "vim"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !equal(tt.got, tt.want) {
				t.Errorf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
}

func equal(a, b any) bool {
	switch a := a.(type) {
	case []float64:
		return slices.Equal(a, b.([]float64))
	case []string:
		return slices.Equal(a, b.([]string))
	case time.Time:
		return a.Equal(b.(time.Time))
	}
	return a == b
}

// TestFixtureCommMatchesStat holds the fixtures to what the sampler relies
// on: the name in /proc/PID/stat is the one /proc/PID/comm shows.
func TestFixtureCommMatchesStat(t *testing.T) {
	for _, root := range []string{snap1, snap2} {
		stats, err := filepath.Glob(filepath.Join(root, "proc", "[0-9]*", "stat"))
		if err != nil || len(stats) == 0 {
			t.Fatalf("no fixtures under %s: %v", root, err)
		}
		for _, path := range stats {
			checkCommMatchesStat(t, path)
		}
	}
}

func checkCommMatchesStat(t *testing.T, statPath string) {
	t.Helper()
	stat, err := os.ReadFile(statPath)
	if err != nil {
		t.Fatal(err)
	}
	comm, err := os.ReadFile(filepath.Join(filepath.Dir(statPath), "comm"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := parsePIDStat(stat)
	if err != nil {
		t.Fatalf("%s: %v", statPath, err)
	}
	if want := strings.TrimSuffix(string(comm), "\n"); string(p.comm) != want {
		t.Errorf("%s: name %q, comm file %q", statPath, p.comm, want)
	}
}

func TestSampleClockThatDoesNotAdvance(t *testing.T) {
	s := &Sampler{Root: snap1, Now: stepClock(t1)}
	defer s.Close()
	if _, err := s.Sample(); err != nil {
		t.Fatal(err)
	}
	s.Root = snap2
	got, err := s.Sample()
	if err != nil {
		t.Fatal(err)
	}
	if got.CPUPercent != 0 || got.DiskReadBps != 0 || got.NetRxBps != 0 {
		t.Errorf("rates with no time passed = %v %v %v, want zeros", got.CPUPercent, got.DiskReadBps, got.NetRxBps)
	}
}

// writeRoot makes a proc root in a temporary directory from file contents.
func writeRoot(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		p := filepath.Join(dir, "proc", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func minimalRoot(extra map[string]string) map[string]string {
	files := map[string]string{
		"stat":    "cpu  1 0 1 10 0 0 0 0 0 0\ncpu0 1 0 1 10 0 0 0 0 0 0\nintr 0\n",
		"meminfo": "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 50 kB\nCached: 250 kB\n", // no MemAvailable: kernel < 3.14
		"loadavg": "0.00 0.00 0.00 1/1 1\n",
	}
	for k, v := range extra {
		files[k] = v
	}
	return files
}

func TestSampleOptionalFilesAndOldMeminfo(t *testing.T) {
	dir := t.TempDir()
	writeRoot(t, dir, minimalRoot(nil)) // no diskstats, no net/dev: a sandbox
	s := &Sampler{Root: dir}
	defer s.Close()
	got, err := s.Sample()
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(1000-400) * 1024; got.MemUsedBytes != want {
		t.Errorf("used = %d, want %d (MemTotal − MemFree − Buffers − Cached)", got.MemUsedBytes, want)
	}
}

func TestSampleErrors(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"no stat", map[string]string{"meminfo": "MemTotal: 1 kB\n", "loadavg": "0 0 0 1/1 1\n"}, "stat"},
		{"bad stat", minimalRoot(map[string]string{"stat": "cpu  x y z\n"}), "stat: unexpected format"},
		{"bad meminfo", minimalRoot(map[string]string{"meminfo": "MemFree: 1 kB\n"}), "meminfo: unexpected format"},
		{"bad loadavg", minimalRoot(map[string]string{"loadavg": "high\n"}), "loadavg: unexpected format"},
		{"bad diskstats", minimalRoot(map[string]string{"diskstats": "8 0 sda 1 2\n"}), "diskstats: unexpected format"},
		{"bad net/dev", minimalRoot(map[string]string{"net/dev": "h\nh\neth0: x\n"}), "net/dev: unexpected format"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeRoot(t, dir, tt.files)
			s := &Sampler{Root: dir}
			defer s.Close()
			_, err := s.Sample()
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "procfs: ") {
				t.Errorf("error = %v, want procfs: … %s", err, tt.want)
			}
		})
	}
}

// TestKernelThreadCache shows that a pid remembered as a kernel thread is
// read again once it has left the listing.
func TestKernelThreadCache(t *testing.T) {
	kthread := "7 (kworker/0:0) I 2 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 1 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
	user := "7 (trainer) R 1 7 7 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
	dir := t.TempDir()
	writeRoot(t, dir, minimalRoot(map[string]string{"7/stat": kthread}))
	s := &Sampler{Root: dir}
	defer s.Close()
	sample := func() []string {
		t.Helper()
		got, err := s.Sample()
		if err != nil {
			t.Fatal(err)
		}
		return got.Processes
	}
	if got := sample(); len(got) != 0 {
		t.Errorf("with a kernel thread: processes = %q, want none", got)
	}
	if err := os.RemoveAll(filepath.Join(dir, "proc", "7")); err != nil {
		t.Fatal(err)
	}
	sample()
	writeRoot(t, dir, map[string]string{"7/stat": user})
	if got := sample(); !slices.Equal(got, []string{"trainer"}) {
		t.Errorf("after pid reuse: processes = %q, want [trainer]", got)
	}
}

func TestProcessEvery(t *testing.T) {
	bash := "40 (bash) S 1 40 40 34816 40 4194560 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
	dir := t.TempDir()
	writeRoot(t, dir, minimalRoot(nil))
	s := &Sampler{Root: dir, ProcessEvery: 5 * time.Second,
		Now: stepClock(t1, t1.Add(2*time.Second), t1.Add(5*time.Second))}
	defer s.Close()
	var got []gpuwarden.HostSample
	for i := range 3 {
		hs, err := s.Sample()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, hs)
		if i == 0 {
			writeRoot(t, dir, map[string]string{"40/stat": bash}) // a login after the first scan
		}
	}
	tests := []struct {
		name      string
		got, want any
	}{
		{"first scan", got[0].Processes, []string(nil)},
		{"2 s later: the first scan repeated", got[1].Processes, []string(nil)},
		{"2 s later: sessions repeated", got[1].Sessions, 0},
		{"5 s later: scanned again", got[2].Processes, []string{"bash"}},
		{"5 s later: the login counts", got[2].Sessions, 1},
	}
	for _, tt := range tests {
		if !equal(tt.got, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}

func TestParsers(t *testing.T) {
	t.Run("whole disks", func(t *testing.T) {
		for name, want := range map[string]bool{
			"sda": true, "sdab": true, "vda": true, "xvdf": true, "nvme0n1": true, "nvme12n3": true,
			"sda1": false, "vda2": false, "xvda1": false, "nvme0n1p1": false, "nvme0c0n1": false, "nvme0": false,
			"loop0": false, "ram0": false, "dm-0": false, "md0": false, "sr0": false, "zram0": false, "sd": false,
		} {
			if got := wholeDisk([]byte(name)); got != want {
				t.Errorf("wholeDisk(%q) = %v, want %v", name, got, want)
			}
		}
	})
	t.Run("tty numbers", func(t *testing.T) {
		tests := []struct {
			tty          int64
			major, minor int64
			interactive  bool
		}{
			{0, 0, 0, false},
			{136<<8 | 0, 136, 0, true},                      // pts/0
			{(136 << 8) | 44 | (256 << 12), 136, 300, true}, // pts/300
			{143<<8 | 255, 143, 255, true},                  // last pts major
			{4<<8 | 1, 4, 1, true},                          // tty1
			{4<<8 | 64, 4, 64, true},                        // ttyS0
			{5<<8 | 1, 5, 1, false},                         // /dev/console
			{188 << 8, 188, 0, false},                       // ttyUSB0
		}
		for _, tt := range tests {
			major, minor := ttyMajorMinor(tt.tty)
			if major != tt.major || minor != tt.minor || interactiveTTY(tt.tty) != tt.interactive {
				t.Errorf("tty_nr %d = %d:%d interactive %v, want %d:%d %v",
					tt.tty, major, minor, interactiveTTY(tt.tty), tt.major, tt.minor, tt.interactive)
			}
		}
	})
	t.Run("cpu deltas floor at zero", func(t *testing.T) {
		// iowait stepping back (NO_HZ) must not push busy past 100 %.
		busy, iowait := cpuPercent(cpuTimes{busy: 100, idle: 100, iowait: 50}, cpuTimes{busy: 200, idle: 100, iowait: 40})
		if busy != 100 || iowait != 0 {
			t.Errorf("busy, iowait = %v, %v; want 100, 0", busy, iowait)
		}
	})
	t.Run("load1", func(t *testing.T) {
		for in, want := range map[string]float64{"0.00 1 1": 0, "1.25 x": 1.25, "12.5": 12.5, "3": 3, "0.62\n": 0.62} {
			if got, err := parseLoad1([]byte(in)); err != nil || got != want {
				t.Errorf("parseLoad1(%q) = %v, %v; want %v", in, got, err, want)
			}
		}
	})
	t.Run("numbers", func(t *testing.T) {
		if _, ok := parseUint([]byte("18446744073709551616")); ok {
			t.Error("parseUint accepted 2^64")
		}
		if x, ok := parseUint([]byte("18446744073709551615")); !ok || x != 1<<64-1 {
			t.Errorf("parseUint(2^64-1) = %d, %v", x, ok)
		}
		if x, ok := parseInt([]byte("-1")); !ok || x != -1 {
			t.Errorf("parseInt(-1) = %d, %v", x, ok)
		}
	})
}

// TestSampleRealProc reads this machine's /proc: only sane ranges can be
// checked, and that the rates move between two calls.
func TestSampleRealProc(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("no /proc")
	}
	s := &Sampler{}
	defer s.Close()
	first, err := s.Sample()
	if err != nil {
		t.Fatal(err)
	}
	// Burn a little CPU and wait, so the second reading has ticks to compare.
	deadline := time.Now().Add(60 * time.Millisecond)
	for time.Now().Before(deadline) {
	}
	time.Sleep(50 * time.Millisecond)
	got, err := s.Sample()
	if err != nil {
		t.Fatal(err)
	}
	if first.CPUPercent != 0 || first.NetRxBps != 0 {
		t.Errorf("first sample has rates %v %v, want zeros", first.CPUPercent, first.NetRxBps)
	}
	inRange := func(name string, v, lo, hi float64) {
		if !(v >= lo && v <= hi) {
			t.Errorf("%s = %v, want in [%v, %v]", name, v, lo, hi)
		}
	}
	inRange("cpu", got.CPUPercent, 0, 100)
	inRange("iowait", got.IOWaitPercent, 0, 100)
	inRange("load1", got.Load1, 0, 100000)
	inRange("disk read", got.DiskReadBps, 0, 1e12)
	inRange("disk write", got.DiskWriteBps, 0, 1e12)
	inRange("net rx", got.NetRxBps, 0, 1e12)
	inRange("net tx", got.NetTxBps, 0, 1e12)
	inRange("sessions", float64(got.Sessions), 0, 100000)
	if len(got.CPUPerCore) < 1 || len(got.CPUPerCore) < runtime.NumCPU() {
		t.Errorf("%d cores, want at least %d", len(got.CPUPerCore), runtime.NumCPU())
	}
	for i, c := range got.CPUPerCore {
		inRange("core "+strconv.Itoa(i), c, 0, 100)
	}
	if got.MemTotalBytes == 0 || got.MemUsedBytes > got.MemTotalBytes {
		t.Errorf("memory used %d of %d", got.MemUsedBytes, got.MemTotalBytes)
	}
	if !slices.IsSorted(got.Processes) || len(slices.Compact(slices.Clone(got.Processes))) != len(got.Processes) {
		t.Errorf("processes not sorted and unique: %q", got.Processes)
	}
	self, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	if name := string(bytes.TrimSpace(self)); !slices.Contains(got.Processes, name) {
		t.Errorf("processes %q lack this test (%q)", got.Processes, name)
	}
	if slices.ContainsFunc(got.Processes, func(p string) bool { return p == "kthreadd" || strings.HasPrefix(p, "kworker/") }) {
		t.Errorf("processes list kernel threads: %q", got.Processes)
	}
	checkCommMatchesStat(t, "/proc/self/stat")
}

// TestRereadSeesNewCounters checks what the sampler's open files rely on:
// reading a /proc file again from offset 0 gives fresh figures.
func TestRereadSeesNewCounters(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("no /proc")
	}
	s := &Sampler{}
	defer s.Close()
	read := func() cpuTimes {
		t.Helper()
		s.mu.Lock()
		defer s.mu.Unlock()
		b, err := s.read(fileStat)
		if err != nil {
			t.Fatal(err)
		}
		all, _, err := parseCPU(b, nil)
		if err != nil {
			t.Fatal(err)
		}
		return all
	}
	s.buf = make([]byte, 64<<10)
	a := read()
	deadline := time.Now().Add(100 * time.Millisecond)
	for time.Now().Before(deadline) {
	}
	b := read()
	if b.busy+b.idle+b.iowait <= a.busy+a.idle+a.iowait {
		t.Errorf("cpu ticks did not advance on re-read: %+v then %+v", a, b)
	}
}

// BenchmarkSample is one agent tick on this machine's /proc: with the
// process scan on every call, and with ProcessEvery at 10 s on a clock that
// advances a second per call, as in the agent.
func BenchmarkSample(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("no /proc")
	}
	for _, every := range []time.Duration{0, 10 * time.Second} {
		b.Run("process-every="+every.String(), func(b *testing.B) {
			tick := time.Now()
			s := &Sampler{ProcessEvery: every, Now: func() time.Time {
				tick = tick.Add(time.Second)
				return tick
			}}
			defer s.Close()
			var hs gpuwarden.HostSample
			var err error
			for b.Loop() {
				if hs, err = s.Sample(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(hs.Processes)), "names")
		})
	}
}
