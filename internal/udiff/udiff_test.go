package udiff

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestUnified(t *testing.T) {
	tests := []struct {
		name, a, b, want string
	}{
		{"equal", "a\nb\n", "a\nb\n", ""},
		{"one line changed", "a\nb\nc\n", "a\nB\nc\n", "--- old\n+++ new\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"},
		{"added at the end", "a\n", "a\nb\n", "--- old\n+++ new\n@@ -1 +1,2 @@\n a\n+b\n"},
		{"added to an empty file", "", "a\n", "--- old\n+++ new\n@@ -0,0 +1 @@\n+a\n"},
		{"all removed", "a\nb\n", "", "--- old\n+++ new\n@@ -1,2 +0,0 @@\n-a\n-b\n"},
		{"no newline at the end", "a\nb", "a\nc", "--- old\n+++ new\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"},
		{"two hunks", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n", "1\nX\n3\n4\n5\n6\n7\n8\n9\n10\nY\n12\n",
			"--- old\n+++ new\n@@ -1,5 +1,5 @@\n 1\n-2\n+X\n 3\n 4\n 5\n@@ -8,5 +8,5 @@\n 8\n 9\n 10\n-11\n+Y\n 12\n"},
		{"near changes share a hunk", "1\n2\n3\n4\n5\n6\n7\n8\n", "1\nX\n3\n4\n5\n6\nY\n8\n",
			"--- old\n+++ new\n@@ -1,8 +1,8 @@\n 1\n-2\n+X\n 3\n 4\n 5\n 6\n-7\n+Y\n 8\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Unified("old", "new", []byte(tt.a), []byte(tt.b)); got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

// TestUnifiedPatches: on random edits of a file, the diff is one that
// patch(1) applies to the old text to give the new, and no longer than
// GNU diff's own.
func TestUnifiedPatches(t *testing.T) {
	patch, err := exec.LookPath("patch")
	if err != nil {
		t.Skip("no patch(1) here")
	}
	diff, _ := exec.LookPath("diff")
	r := rand.New(rand.NewPCG(1, 2))
	dir := t.TempDir()
	for n := range 200 {
		var a []string
		for range r.IntN(40) {
			a = append(a, strconv.Itoa(r.IntN(8)))
		}
		b := append([]string(nil), a...)
		for range r.IntN(6) {
			switch i := r.IntN(len(b) + 1); r.IntN(3) {
			case 0:
				b = append(b[:i], append([]string{"new" + strconv.Itoa(r.IntN(5))}, b[i:]...)...)
			case 1:
				if i < len(b) {
					b = append(b[:i], b[i+1:]...)
				}
			default:
				if i < len(b) {
					b[i] = "changed"
				}
			}
		}
		at, bt := join(a), join(b)
		if r.IntN(4) == 0 {
			bt = strings.TrimSuffix(bt, "\n")
		}
		d := Unified("f", "f", []byte(at), []byte(bt))
		file := filepath.Join(dir, fmt.Sprint(n))
		if err := os.WriteFile(file, []byte(at), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(patch, "-s", "-u", "-F0", file)
		cmd.Stdin = strings.NewReader(d)
		if out, err := cmd.CombinedOutput(); d != "" && err != nil {
			t.Fatalf("patch: %v %s\n--- a\n%s--- b\n%s--- diff\n%s", err, out, at, bt, d)
		}
		if got, _ := os.ReadFile(file); string(got) != bt {
			t.Fatalf("patched file differs\n--- a\n%s--- b\n%s--- diff\n%s--- got\n%s", at, bt, d, got)
		}
		if diff != "" && d != "" {
			fa, fb := filepath.Join(dir, "a"), filepath.Join(dir, "b")
			_ = os.WriteFile(fa, []byte(at), 0o644)
			_ = os.WriteFile(fb, []byte(bt), 0o644)
			gnu, _ := exec.Command(diff, "-u", fa, fb).Output()
			if changed(d) > changed(string(gnu)) {
				t.Errorf("%d changed lines where diff -u has %d\n%s\n%s", changed(d), changed(string(gnu)), d, gnu)
			}
		}
	}
}

func join(l []string) string {
	if len(l) == 0 {
		return ""
	}
	return strings.Join(l, "\n") + "\n"
}

// changed counts a diff's removed and added lines.
func changed(d string) int {
	n := 0
	for _, l := range strings.Split(d, "\n") {
		if (strings.HasPrefix(l, "-") || strings.HasPrefix(l, "+")) && !strings.HasPrefix(l, "---") && !strings.HasPrefix(l, "+++") {
			n++
		}
	}
	return n
}
