//go:build linux

package codepages

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestDropKeepsTheProcessRunning: after the binary's read-only pages are
// dropped, code and tables fault back in from the file (a sort, a
// formatted number, a map, a panic recovered with its stack), and the
// mapped size of the binary falls.
func TestDropKeepsTheProcessRunning(t *testing.T) {
	before := binaryRSS(t)
	if n := Drop(); n == 0 {
		t.Fatal("Drop dropped nothing")
	}
	after := binaryRSS(t)
	m := map[string]int{}
	for i := range 1000 {
		m[strconv.Itoa(i)] = i
	}
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Error("no panic recovered")
			}
		}()
		var s []int
		_ = s[len(m)] // index out of range: the runtime's tables are read
	}()
	if got := strings.Repeat("ab", 3); got != "ababab" || len(m) != 1000 {
		t.Errorf("after Drop: %q, %d", got, len(m))
	}
	if after >= before {
		t.Errorf("binary's resident pages %d kB before, %d kB after", before, after)
	}
	t.Logf("binary resident: %d kB before, %d kB after", before, after)
}

// binaryRSS is the resident size of the test binary's mappings, in kB.
func binaryRSS(t *testing.T) int {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	total, ours := 0, false
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-"):
			ours = len(f) >= 6 && f[5] == exe
		case ours && len(f) >= 2 && f[0] == "Rss:":
			n, _ := strconv.Atoi(f[1])
			total += n
		}
	}
	return total
}
