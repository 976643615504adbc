package nvml

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// kmsgHeader is a /dev/kmsg record's prefix as splitTimestamp reads it:
// priority, sequence and microseconds since boot, more fields, then ';'.
var kmsgHeader = regexp.MustCompile(`^([0-9]+),([0-9]+),([0-9]+),[^;]*;`)

// dmesgHeader is plain dmesg's "[ seconds.fraction]" prefix.
var dmesgHeader = regexp.MustCompile(`^\[[ \t]*[0-9]+(\.[0-9]*)?[ \t]*\]`)

// FuzzParseKmsgXIDs feeds kernel logs to ParseKmsgXIDs and checks what its
// doc comment promises beyond not panicking: only a failing reader is an
// error; every event is of a GPU in busToIndex; its Xid is a positive number
// written in its line; lines are read one by one and in log order (the
// whole log gives what its lines give one at a time), so there are never
// more events than Xid lines; a time counted from boot is not before boot
// (an unreadable one is zero); and a second parse gives the same events.
func FuzzParseKmsgXIDs(f *testing.F) {
	for _, name := range []string{"kmsg-h200.txt", "dmesg.txt", "journal.txt"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b), "00000000:3B:00.0")
	}
	for _, s := range []string{
		// The rows of TestParseKmsgXIDs.
		"6,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n",
		"4,88,1000000,-,caller=T4021;NVRM: Xid (PCI:0000:5d:00): 45, pid=7, name=x, Ch 00000010\n",
		"[ 10.000000] NVRM: Xid (PCI:0000:3b:00): 92",
		"gpu-node kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n",
		"NVRM: Xid (PCI:0000:3b:00): , pid=1\nNVRM: Xid (PCI:0000:3b:00): 79x, pid=1\nNVRM: Xid (PCI:0000:3b:00: 79, pid=1\n",
		"NVRM: Xid (): 79, pid=1\nNVRM: Xid (PCI:3b): 79, pid=1\nNVRM: Xid (PCI:0000:3b:00): 99999999999999999999999, too big\n",
		"2026-11-29T10:15:02+0000 h200-node-7 kernel: NVRM: Xid (PCI:0000:3b:00 GPU-I:05): 79, x\r\n",
		"Nov 29 10:15:04 h200-node-7 kernel: NVRM: Xid (0000:5d:00): 94, pid=1\n",
		"[Sat Nov 29 10:15:02 2026] NVRM: Xid (PCI:0000:3b:00): 31, x\n",
		// What the fuzzer found (TestParseKmsgXIDsFuzzFinds).
		"4,1,9223372036854775,-;NVRM: Xid (PCI:0000:3b:00): 13, x\n",
		"[9223372037.5] NVRM: Xid (PCI:0000:3b:00): 13, x\n",
		"[ 1.0] NVRM: Xid (PCI:0000:3b:00): 0, x\n",
		"",
	} {
		f.Add(s, "0001:81:1f.0")
	}
	f.Fuzz(func(t *testing.T, log, bus string) {
		buses := map[string]int{"00000000:3B:00.0": 0, "0000:5d:00": 1, bus: 7}
		got, err := ParseKmsgXIDs(strings.NewReader(log), testBoot, buses)
		if err != nil {
			// bufio.Scanner's line cap is 1 MiB; a shorter log cannot fail.
			if len(log) < 1<<20 {
				t.Fatalf("in-memory log of %d bytes: %v", len(log), err)
			}
			return
		}
		again, _ := ParseKmsgXIDs(strings.NewReader(log), testBoot, buses)
		if !equalXIDs(got, again) {
			t.Fatalf("two parses differ:\n%v\n%v", got, again)
		}
		var perLine []gpuwarden.XIDEvent
		for line := range strings.SplitSeq(log, "\n") {
			events, err := ParseKmsgXIDs(strings.NewReader(line), testBoot, buses)
			if err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			if len(events) > 1 {
				t.Fatalf("line %q gave %d events, want at most one", line, len(events))
			}
			if len(events) == 1 {
				checkXIDLine(t, line, events[0])
			}
			perLine = append(perLine, events...)
		}
		if !equalXIDs(got, perLine) {
			t.Fatalf("whole log gave\n%v\nits lines one by one gave\n%v", got, perLine)
		}
	})
}

// checkXIDLine checks one event against the line it came from.
func checkXIDLine(t *testing.T, line string, e gpuwarden.XIDEvent) {
	t.Helper()
	if !slices.Contains([]int{0, 1, 7}, e.Index) {
		t.Fatalf("line %q: GPU index %d is not in the bus map", line, e.Index)
	}
	_, after, ok := strings.Cut(line, "NVRM: Xid (")
	if !ok {
		t.Fatalf("line %q has no Xid message but gave %v", line, e)
	}
	if e.XID == 0 || !strings.Contains(after, "): ") || !strings.Contains(after, strconv.FormatUint(e.XID, 10)) {
		t.Fatalf("line %q: Xid %d is not a positive number the message writes", line, e.XID)
	}
	if e.Time.IsZero() {
		return // a time prefix it does not know, as documented
	}
	if m := kmsgHeader.FindStringSubmatch(line); m != nil {
		usec, _ := strconv.ParseInt(m[3], 10, 64)
		if want := testBoot.Add(time.Duration(usec) * time.Microsecond); !e.Time.Equal(want) || e.Time.Before(testBoot) {
			t.Fatalf("line %q: time %v, want boot + %d µs = %v", line, e.Time, usec, want)
		}
	}
	if dmesgHeader.MatchString(line) && e.Time.Before(testBoot) {
		t.Fatalf("line %q: time %v is before boot %v", line, e.Time, testBoot)
	}
}

// TestParseKmsgXIDsFuzzFinds holds the logs FuzzParseKmsgXIDs found
// misread: a time since boot past int64 nanoseconds wrapped to before boot,
// and an Xid 0, which no driver writes, counted as a hardware fault.
func TestParseKmsgXIDsFuzzFinds(t *testing.T) {
	buses := map[string]int{"3b:00": 0}
	tests := []struct {
		name string
		log  string
		want []gpuwarden.XIDEvent
	}{
		{name: "kmsg microseconds past int64 nanoseconds",
			log:  "4,1,9223372036854776,-;NVRM: Xid (PCI:0000:3b:00): 13, x\n",
			want: []gpuwarden.XIDEvent{{Index: 0, XID: 13}}},
		{name: "kmsg microseconds at the int64 limit",
			log:  "4,1,9223372036854775,-;NVRM: Xid (PCI:0000:3b:00): 13, x\n",
			want: []gpuwarden.XIDEvent{{Index: 0, XID: 13, Time: testBoot.Add(9223372036854775 * time.Microsecond)}}},
		{name: "dmesg seconds past int64 nanoseconds",
			log:  "[9223372037.0] NVRM: Xid (PCI:0000:3b:00): 13, x\n",
			want: []gpuwarden.XIDEvent{{Index: 0, XID: 13}}},
		{name: "dmesg fraction that tips over int64 nanoseconds",
			log:  "[9223372036.854775808] NVRM: Xid (PCI:0000:3b:00): 13, x\n",
			want: []gpuwarden.XIDEvent{{Index: 0, XID: 13}}},
		{name: "dmesg seconds at the int64 limit",
			log:  "[9223372036.854775807] NVRM: Xid (PCI:0000:3b:00): 13, x\n",
			want: []gpuwarden.XIDEvent{{Index: 0, XID: 13, Time: testBoot.Add(time.Duration(1<<63 - 1))}}},
		{name: "xid 0 is skipped", log: "[ 1.0] NVRM: Xid (PCI:0000:3b:00): 0, x\n[ 2.0] NVRM: Xid (PCI:0000:3b:00): 000\n"},
		{name: "leading zeros are the same xid",
			log:  "[ 1.0] NVRM: Xid (PCI:0000:3b:00): 079, x\n",
			want: []gpuwarden.XIDEvent{{Index: 0, XID: 79, Time: testBoot.Add(time.Second)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseKmsgXIDs(strings.NewReader(tt.log), testBoot, buses)
			if err != nil {
				t.Fatal(err)
			}
			if !equalXIDs(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestParseKmsgXIDsOneBusTwoSpellings: FuzzParseKmsgXIDs found that two
// spellings of one bus with different indexes gave whichever index the map
// yielded first, so two parses of one log disagreed; the lower one wins.
func TestParseKmsgXIDsOneBusTwoSpellings(t *testing.T) {
	const log = "[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, x\n"
	buses := map[string]int{"3b:00": 5, "00000000:3B:00.0": 2, "0000:3b:00": 9, "5d:00": 1}
	// Map order is random per range: enough parses see every order.
	for range 50 {
		got, err := ParseKmsgXIDs(strings.NewReader(log), testBoot, buses)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Index != 2 {
			t.Fatalf("got %v, want one Xid on GPU 2", got)
		}
	}
}
