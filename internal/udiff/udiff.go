// Package udiff writes the unified diff of two texts, as `diff -u` does,
// so that a change to a user's file (preflight --fix) is shown line for
// line before it is written.
package udiff

import (
	"fmt"
	"strings"
)

// Context is the number of unchanged lines shown around each change.
const Context = 3

// maxCells bounds the table of the longest common subsequence: past it
// (two files of thousands of changed lines), the changed middle is shown
// as removed and added whole, still a correct diff.
const maxCells = 4 << 20

// Unified returns the unified diff from a (named oldName) to b (newName),
// or "" when they are equal. A last line without a line ending is marked
// as diff marks it.
func Unified(oldName, newName string, a, b []byte) string {
	if string(a) == string(b) {
		return ""
	}
	x, y := lines(string(a)), lines(string(b))
	ops := script(x, y)
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", oldName, newName)
	for _, h := range hunks(ops) {
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", span(h.oldStart, h.oldLen), span(h.newStart, h.newLen))
		for _, o := range ops[h.from:h.to] {
			var text string
			if o.kind == '+' {
				text = y[o.j]
			} else {
				text = x[o.i]
			}
			out.WriteByte(o.kind)
			out.WriteString(strings.TrimSuffix(text, "\n"))
			out.WriteByte('\n')
			if !strings.HasSuffix(text, "\n") {
				out.WriteString("\\ No newline at end of file\n")
			}
		}
	}
	return out.String()
}

// lines splits s after each line ending, keeping it.
func lines(s string) []string {
	var out []string
	for s != "" {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// op is one line of the edit script: ' ' kept (x[i] = y[j]), '-' x[i]
// removed, '+' y[j] added.
type op struct {
	kind byte
	i, j int
}

// script is the shortest edit script from x to y: the common head and tail
// kept, the middle by the longest common subsequence.
func script(x, y []string) []op {
	head := 0
	for head < len(x) && head < len(y) && x[head] == y[head] {
		head++
	}
	tail := 0
	for tail < len(x)-head && tail < len(y)-head && x[len(x)-1-tail] == y[len(y)-1-tail] {
		tail++
	}
	var ops []op
	for k := 0; k < head; k++ {
		ops = append(ops, op{' ', k, k})
	}
	mx, my := x[head:len(x)-tail], y[head:len(y)-tail]
	n, m := len(mx), len(my)
	if (n+1)*(m+1) > maxCells {
		for i := range n {
			ops = append(ops, op{'-', head + i, head})
		}
		for j := range m {
			ops = append(ops, op{'+', head, head + j})
		}
	} else {
		// lcs[i][j] is the longest common subsequence of mx[i:] and my[j:].
		lcs := make([][]int32, n+1)
		for i := range lcs {
			lcs[i] = make([]int32, m+1)
		}
		for i := n - 1; i >= 0; i-- {
			for j := m - 1; j >= 0; j-- {
				if mx[i] == my[j] {
					lcs[i][j] = lcs[i+1][j+1] + 1
				} else {
					lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
				}
			}
		}
		i, j := 0, 0
		for i < n || j < m {
			switch {
			case i < n && j < m && mx[i] == my[j]:
				ops = append(ops, op{' ', head + i, head + j})
				i, j = i+1, j+1
			case j < m && (i == n || lcs[i][j+1] > lcs[i+1][j]):
				ops = append(ops, op{'+', head + i, head + j})
				j++
			default:
				ops = append(ops, op{'-', head + i, head + j})
				i++
			}
		}
	}
	for k := 0; k < tail; k++ {
		ops = append(ops, op{' ', len(x) - tail + k, len(y) - tail + k})
	}
	return ops
}

// hunk is ops[from:to] with the line ranges it covers, 1-based.
type hunk struct {
	from, to                           int
	oldStart, oldLen, newStart, newLen int
}

// hunks groups the changes with Context kept lines around each; changes
// closer than twice that share a hunk.
func hunks(ops []op) []hunk {
	var out []hunk
	for k := 0; k < len(ops); {
		if ops[k].kind == ' ' {
			k++
			continue
		}
		from := max(0, k-Context)
		end := k // one past the last change of the hunk
		for end < len(ops) {
			next := end
			for next < len(ops) && ops[next].kind == ' ' {
				next++
			}
			if next == len(ops) || next-end > 2*Context {
				break
			}
			for next < len(ops) && ops[next].kind != ' ' {
				next++
			}
			end = next
		}
		to := min(len(ops), end+Context)
		h := hunk{from: from, to: to}
		first := ops[from]
		h.oldStart, h.newStart = first.i+1, first.j+1
		for _, o := range ops[from:to] {
			if o.kind != '+' {
				h.oldLen++
			}
			if o.kind != '-' {
				h.newLen++
			}
		}
		out = append(out, h)
		k = to
	}
	return out
}

// span writes a hunk's range as diff does: "3,4"; "3" for one line; for
// none, the line before it and 0.
func span(start, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", start-1)
	case 1:
		return fmt.Sprintf("%d", start)
	}
	return fmt.Sprintf("%d,%d", start, n)
}
