package nvml

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gpuwarden/gpuwarden"
)

// equalXIDs compares events, times by instant rather than by location.
func equalXIDs(a, b []gpuwarden.XIDEvent) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Index != b[i].Index || a[i].XID != b[i].XID || !a[i].Time.Equal(b[i].Time) {
			return false
		}
	}
	return true
}

func TestParseKmsgXIDs(t *testing.T) {
	// Two GPUs as NVML names them; 86:00 in the fixtures is left out.
	buses := map[string]int{"00000000:3B:00.0": 0, "00000000:5D:00.0": 1}
	sinceBoot := func(d string) time.Time {
		dur, err := time.ParseDuration(d)
		if err != nil {
			t.Fatal(err)
		}
		return testBoot.Add(dur)
	}
	usec := func(n int64) time.Time { return testBoot.Add(time.Duration(n) * time.Microsecond) }
	local := func(h, m, s, ns int) time.Time { return time.Date(2026, 11, 29, h, m, s, ns, time.Local) }
	tests := []struct {
		name  string
		input string // inline log, or "@file" for a fixture in testdata
		buses map[string]int
		want  []gpuwarden.XIDEvent
	}{
		{name: "kmsg records", input: "@kmsg-h200.txt", buses: buses, want: []gpuwarden.XIDEvent{
			{Index: 0, XID: 13, Time: usec(86400123456)},
			{Index: 0, XID: 13, Time: usec(86400123470)},
			{Index: 1, XID: 31, Time: usec(90061500002)},
			{Index: 0, XID: 94, Time: usec(95000000001)},
			{Index: 1, XID: 79, Time: usec(97201874339)},
			{Index: 0, XID: 48, Time: usec(99000000000)},
			{Index: 0, XID: 119, Time: usec(99000000100)},
		}},
		{name: "dmesg lines", input: "@dmesg.txt", buses: buses, want: []gpuwarden.XIDEvent{
			{Index: 0, XID: 13, Time: sinceBoot("86400.123456s")},
			{Index: 1, XID: 79, Time: sinceBoot("97201.874339s")},
			{Index: 0, XID: 43, Time: sinceBoot("97300.5s")},
		}},
		{name: "journal and dmesg -T lines", input: "@journal.txt", buses: buses, want: []gpuwarden.XIDEvent{
			{Index: 0, XID: 79, Time: time.Date(2026, 11, 29, 10, 15, 2, 0, time.UTC)},
			{Index: 0, XID: 48, Time: time.Date(2026, 11, 29, 10, 15, 3, 250000000, time.UTC)},
			{Index: 0, XID: 94, Time: local(10, 15, 4, 0)},
			{Index: 0, XID: 13, Time: sinceBoot("1234.56789s")},
			{Index: 0, XID: 31, Time: local(10, 15, 5, 0)},
		}},
		{name: "the brief's example record", buses: buses,
			input: "6,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n",
			want:  []gpuwarden.XIDEvent{{Index: 0, XID: 79, Time: usec(5678901)}}},
		{name: "kmsg record with a caller field", buses: buses,
			input: "4,88,1000000,-,caller=T4021;NVRM: Xid (PCI:0000:5d:00): 45, pid=7, name=x, Ch 00000010\n",
			want:  []gpuwarden.XIDEvent{{Index: 1, XID: 45, Time: usec(1000000)}}},
		{name: "last line without newline", buses: buses,
			input: "[ 10.000000] NVRM: Xid (PCI:0000:3b:00): 92",
			want:  []gpuwarden.XIDEvent{{Index: 0, XID: 92, Time: sinceBoot("10s")}}},
		{name: "unknown time prefix keeps the xid", buses: buses,
			input: "gpu-node kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n",
			want:  []gpuwarden.XIDEvent{{Index: 0, XID: 79}}},
		{name: "malformed lines only", buses: buses, input: strings.Join([]string{
			"NVRM: Xid (PCI:0000:3b:00): , pid=1",
			"NVRM: Xid (PCI:0000:3b:00): 79x, pid=1",
			"NVRM: Xid (PCI:0000:3b:00: 79, pid=1",
			"NVRM: Xid (): 79, pid=1",
			"NVRM: Xid (PCI:3b): 79, pid=1",
			"NVRM: Xid (PCI:0000:3b:00): 99999999999999999999999, too big",
			"[ 1.0] NVRM: GPU at PCI:0000:3b:00: GPU-6f1c2c1e",
			"",
		}, "\n")},
		{name: "unknown buses are skipped", input: "@kmsg-h200.txt", buses: map[string]int{"0000:aa:00": 5}},
		{name: "no buses at all", input: "@kmsg-h200.txt"},
		{name: "empty log", input: "", buses: buses},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			input := tt.input
			if name, ok := strings.CutPrefix(input, "@"); ok {
				b, err := os.ReadFile("testdata/" + name)
				if err != nil {
					t.Fatal(err)
				}
				input = string(b)
			}
			got, err := ParseKmsgXIDs(strings.NewReader(input), testBoot, tt.buses)
			if err != nil {
				t.Fatalf("ParseKmsgXIDs: %v", err)
			}
			if !equalXIDs(got, tt.want) {
				t.Errorf("ParseKmsgXIDs() =\n%v\nwant\n%v", got, tt.want)
			}
		})
	}
}

func TestParseKmsgXIDsBusForms(t *testing.T) {
	const record = "4,1,2000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
	for _, bus := range []string{"00000000:3B:00.0", "0000:3b:00", "0000:3B:00.0", "3b:00", "3B:00.0", "PCI:0000:3b:00", " 00000000:3b:00.0 "} {
		t.Run(bus, func(t *testing.T) {
			got, err := ParseKmsgXIDs(strings.NewReader(record), testBoot, map[string]int{bus: 2})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0].Index != 2 || got[0].XID != 79 {
				t.Errorf("bus %q: got %v, want one Xid 79 on GPU 2", bus, got)
			}
		})
	}
	// Another PCI domain is another GPU, however alike the rest of the address.
	got, _ := ParseKmsgXIDs(strings.NewReader(record), testBoot, map[string]int{"00000001:3B:00.0": 2})
	if len(got) != 0 {
		t.Errorf("domain 1 matched domain 0: %v", got)
	}
}

func TestParseKmsgXIDsReadError(t *testing.T) {
	r := iotest.TimeoutReader(strings.NewReader(strings.Repeat("[ 1.0] NVRM: Xid (PCI:0000:3b:00): 13, x\n", 2000)))
	_, err := ParseKmsgXIDs(r, testBoot, map[string]int{"3b:00": 0})
	if err == nil || !strings.Contains(err.Error(), "read kernel log") {
		t.Fatalf("err = %v, want a read error", err)
	}
}

func TestParseBus(t *testing.T) {
	tests := []struct {
		in   string
		want pciAddr
		ok   bool
	}{
		{"00000000:3B:00.0", pciAddr{0, 0x3b, 0}, true},
		{"0000:3b:00", pciAddr{0, 0x3b, 0}, true},
		{"PCI:0001:81:1f", pciAddr{1, 0x81, 0x1f}, true},
		{"5d:00", pciAddr{0, 0x5d, 0}, true},
		{"3b", pciAddr{}, false},
		{"0000:3g:00", pciAddr{}, false},
		{"0000:3b:100", pciAddr{}, false},
		{"1:2:3:4", pciAddr{}, false},
		{"", pciAddr{}, false},
	}
	for _, tt := range tests {
		got, ok := parseBus(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseBus(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// readFile reads a file the way the followed kernel log does.
func readFile(path string) ([]byte, error) {
	fd, err := openNonBlocking(path)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	return readAvailable(fd, path)
}

func TestReadAvailable(t *testing.T) {
	want, err := os.ReadFile("testdata/kmsg-h200.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, err := readFile("testdata/kmsg-h200.txt")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("readAvailable read %d bytes, want %d", len(got), len(want))
	}
	if _, err := readFile("testdata/no-such-file"); err == nil {
		t.Error("no error for a missing file")
	}
}

// TestReadKmsg reads this host's real /dev/kmsg when the test may: it must
// come back (EAGAIN at the end of the ring buffer) instead of waiting for the
// next kernel message.
func TestReadKmsg(t *testing.T) {
	done := make(chan error, 1)
	go func() {
		_, err := readFile("/dev/kmsg")
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Skipf("/dev/kmsg not readable here: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reading /dev/kmsg blocked")
	}
}

// TestHealthFollowsKernelLog checks that Health reads the log once and then
// only what is appended: no Xid twice, new ones of this GPU added, those of
// other GPUs and half-written lines left out.
func TestHealthFollowsKernelLog(t *testing.T) {
	fixture, err := os.ReadFile("testdata/kmsg-h200.txt")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kmsg")
	if err := os.WriteFile(path, fixture, 0o600); err != nil {
		t.Fatal(err)
	}
	g := newFake().open(t)
	g.kmsgPath = path
	count := func() int {
		t.Helper()
		h, err := g.Health(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		return len(h.XIDs)
	}
	appendLog := func(s string) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		add  string
		want int
	}{
		{"", 5},
		{"", 5},
		{"4,2301,99100000000,-;NVRM: Xid (PCI:0000:3b:00): 31, pid=1, name=x, MMU Fault\n", 6},
		{"4,2302,99200000000,-;NVRM: Xid (PCI:0000:5d:00): 31, pid=1, name=x, MMU Fault\n", 6},
		{"4,2303,99300000000,-;NVRM: Xid (PCI:0000:3b:00): 4", 6},
		{"3, pid=1, name=x, Reset Channel Verif Error\n", 7},
	}
	for i, s := range steps {
		appendLog(s.add)
		if got := count(); got != s.want {
			t.Fatalf("step %d: %d Xids, want %d", i, got, s.want)
		}
	}
	h, _ := g.Health(context.Background(), 0)
	if last := h.XIDs[len(h.XIDs)-1]; last.XID != 43 {
		t.Errorf("last Xid = %d, want 43 from the line written in two parts", last.XID)
	}
}

func TestKernelLogKeepsNewestXIDs(t *testing.T) {
	var sb strings.Builder
	for i := range maxXIDs + 10 {
		fmt.Fprintf(&sb, "4,%d,%d,-;NVRM: Xid (PCI:0000:3b:00): %d, storm\n", i, i, i)
	}
	path := filepath.Join(t.TempDir(), "kmsg")
	if err := os.WriteFile(path, []byte(sb.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	g := newFake().open(t)
	g.kmsgPath = path
	h, err := g.Health(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.XIDs) != maxXIDs || h.XIDs[0].XID != 10 {
		t.Errorf("kept %d Xids starting at %d, want %d starting at 10", len(h.XIDs), h.XIDs[0].XID, maxXIDs)
	}
}

// BenchmarkParseKmsgXIDs parses a full 1 MiB kernel ring buffer, which is
// what each Health call reads.
func BenchmarkParseKmsgXIDs(b *testing.B) {
	var sb strings.Builder
	for i := 0; sb.Len() < 1<<20; i++ {
		if i%500 == 0 {
			fmt.Fprintf(&sb, "4,%d,%d,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=48213, name=python3, Graphics SM Warp Exception\n", i, i*1000)
			continue
		}
		fmt.Fprintf(&sb, "6,%d,%d,-;audit: type=1400 audit(1764410102.123:%d): apparmor=\"DENIED\" operation=\"open\" profile=\"snap\"\n", i, i*1000, i)
	}
	log := sb.String()
	buses := map[string]int{"00000000:3B:00.0": 0}
	b.SetBytes(int64(len(log)))
	for b.Loop() {
		if _, err := ParseKmsgXIDs(strings.NewReader(log), testBoot, buses); err != nil {
			b.Fatal(err)
		}
	}
}

// TestXIDEvents: an Xid that NVML's event set reports reaches Health even
// when the kernel log cannot be read, the source says it is live, the same
// Xid in both sources counts once, and Close stops the watch and frees the
// set.
func TestXIDEvents(t *testing.T) {
	f := newFake()
	var mu sync.Mutex
	sent, freed := 0, 0
	set := &mock.EventSet{
		WaitFunc: func(timeout uint32) (gonvml.EventData, gonvml.Return) {
			mu.Lock()
			defer mu.Unlock()
			if sent == 0 {
				sent++
				return gonvml.EventData{Device: f.dev, EventType: gonvml.EventTypeXidCriticalError, EventData: 79}, gonvml.SUCCESS
			}
			time.Sleep(time.Duration(timeout) * time.Millisecond)
			return gonvml.EventData{}, gonvml.ERROR_TIMEOUT
		},
		FreeFunc: func() gonvml.Return { mu.Lock(); freed++; mu.Unlock(); return gonvml.SUCCESS },
	}
	f.lib.EventSetCreateFunc = func() (gonvml.EventSet, gonvml.Return) { return set, gonvml.SUCCESS }
	f.dev.RegisterEventsFunc = func(types uint64, _ gonvml.EventSet) gonvml.Return {
		if types&gonvml.EventTypeXidCriticalError == 0 {
			t.Errorf("registered for events %#x, not Xid critical errors", types)
		}
		return gonvml.SUCCESS
	}
	g := f.open(t)
	g.eventWait = 20 * time.Millisecond
	g.kmsgPath = "testdata/no-such-kmsg"
	g.WatchXIDEvents(context.Background())
	var h gpuwarden.Health
	for deadline := time.Now().Add(5 * time.Second); len(h.XIDs) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var err error
		if h, err = g.Health(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
	}
	if len(h.XIDs) != 1 || h.XIDs[0].XID != 79 || h.XIDs[0].Index != 0 || !h.Faulty() {
		t.Fatalf("Health xids %+v, want the event's Xid 79 on GPU 0", h.XIDs)
	}
	if got, want := gpuwarden.DescribeXIDSources(h.XIDSources), "kmsg unavailable (open testdata/no-such-kmsg: no such file or directory), nvml-events live"; got != want {
		t.Errorf("sources %q, want %q", got, want)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if freed != 1 {
		t.Errorf("event set freed %d times after Close, want 1", freed)
	}
}

func TestMergeXIDs(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	kmsg := []gpuwarden.XIDEvent{{XID: 79, Time: at}}
	events := []gpuwarden.XIDEvent{{XID: 79, Time: at.Add(2 * time.Second)}, {XID: 48, Time: at}, {XID: 79, Time: at.Add(time.Minute)}}
	got := mergeXIDs(kmsg, events)
	if len(got) != 3 || got[1].XID != 48 || !got[2].Time.Equal(at.Add(time.Minute)) {
		t.Errorf("merge = %+v, want the kernel's 79, then 48 and the later 79 from NVML", got)
	}
}
