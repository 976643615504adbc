package yamlread

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/parser"

	"github.com/gpuwarden/gpuwarden/internal/yamlerr"
)

var testFile = File{Kind: "plan file", MaxBytes: 256 << 10, SizeHint: "check that this is the right file"}

// nest is n levels of block mappings, one key each.
func nest(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%sk%d:\n", strings.Repeat(" ", i), i)
	}
	return b.String()
}

// keys is one block mapping of n keys.
func keys(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "k%d: %d\n", i, i)
	}
	return b.String()
}

func TestScan(t *testing.T) {
	deep := strings.Repeat("[", MaxDepth+1)
	tests := []struct {
		name string
		in   string
		want string // "" for no error
	}{
		{"plan", "name: x\nworkload: {kind: inference, params_b: 7}\nbudget:\n  monthly_limit: 100\n", ""},
		{"flow at the cap", strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth), ""},
		{"flow past the cap", deep, "1:65: plan file nests deeper than 64 levels"},
		{"flow past the cap after a key", "a: " + deep, "1:67: plan file nests deeper than 64 levels"},
		{"flow over lines", "a: [\n" + strings.Repeat("  [\n", MaxDepth), "64:3: plan file nests deeper than 64 levels"},
		{"block at the cap", nest(MaxDepth), ""},
		{"block past the cap", nest(MaxDepth + 1), "65:65: plan file nests deeper than 64 levels"},
		{"dashes past the cap", strings.Repeat("- ", MaxDepth+1) + "x", "1:129: plan file nests deeper than 64 levels"},
		{"block and flow add up", nest(MaxDepth/2) + strings.Repeat(" ", MaxDepth/2) + "x: " + strings.Repeat("{a: ", MaxDepth/2),
			"33:160: plan file nests deeper than 64 levels"},
		{"brackets in double quotes", `a: "` + deep + `"`, ""},
		{"brackets in single quotes", `a: '` + deep + `'`, ""},
		{"escaped quotes", `a: "\"` + deep + `"` + "\nb: 'it''s " + deep + "'", ""},
		{"quote over lines", "a: \"x\n" + deep + "\"\n", ""},
		{"brackets in a comment", "a: 1 # " + deep + "\n# " + deep, ""},
		{"brackets in a plain scalar", "a: x" + deep, ""},
		{"brackets in a plain scalar over lines", "a: x\n  " + deep, ""},
		{"hash inside a plain scalar", "a: x#" + deep, ""},
		{"hash after a blank", "a: x #" + deep + "\nb: " + deep, "2:67: plan file nests deeper than 64 levels"},
		{"brackets in a block scalar", "a: |\n  " + deep + "\n  " + deep + "\nb: 1\n", ""},
		{"block scalar ends", "a: |\n  text\n" + deep, "3:64: plan file nests deeper than 64 levels"},
		{"block scalar after ---", "--- |\n" + deep + "\n", ""},
		{"new document resets", strings.Repeat("[", MaxDepth) + "\n---\n" + strings.Repeat("[", MaxDepth), ""},
		{"quote in a plain scalar", "- a\n  \"x\n- " + deep, "3:66: plan file nests deeper than 64 levels"},
		{"multibyte columns", "é: " + deep, "1:67: plan file nests deeper than 64 levels"},
		{"crlf lines", "a:\r\n  b: " + deep, "2:68: plan file nests deeper than 64 levels"},
		{"lone cr ends a line", "a: 1\rb: " + deep, "2:67: plan file nests deeper than 64 levels"},
		{"keys at the cap", keys(MaxKeys), ""},
		{"keys past the cap", keys(MaxKeys + 1), "257:1: a mapping holds more than 256 keys"},
		{"keys of a list at its key's column", "a:\n" + strings.Repeat("- x\n", MaxKeys) + "b: 1\n", ""},
		{"keys of two mappings", "a:\n" + strings.ReplaceAll(keys(MaxKeys), "k", "  k") + "b:\n" + strings.ReplaceAll(keys(MaxKeys), "k", "  k"), ""},
		{"punctuation past the cap", "[" + strings.Repeat("1,", MaxTokens) + "]", "1:100001: plan file holds more than 50000 keys, values and brackets"},
		{"punctuation in comments and quotes", strings.Repeat("# -:[,]{}\n", MaxTokens/8+1) + "a: \"" + strings.Repeat(",", MaxTokens+1) + "\"", ""},
		{"too large", strings.Repeat("#", testFile.MaxBytes+1), "1:1: plan file is larger than 256 KiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if fe := testFile.Scan([]byte(tt.in)); fe != nil {
				got = fe.Error()
			}
			if got != tt.want {
				t.Errorf("Scan = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCheckTokens(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"plan", "name: x\nworkload: {kind: inference}\ntargets:\n- name: a\n  provider: aws\n", ""},
		{"flow past the cap", strings.Repeat("[", MaxDepth+1), "1:65: plan file nests deeper than 64 levels"},
		{"block at the cap", nest(MaxDepth), ""},
		{"block past the cap", nest(MaxDepth + 1), "65:65: plan file nests deeper than 64 levels"},
		{"list under its key", "a:\n- b:\n  - c: 1\nd: 2\n", ""},
		{"keys at the cap", keys(MaxKeys), ""},
		{"keys past the cap", keys(MaxKeys + 1), "257:1: a mapping holds more than 256 keys"},
		{"keys of two mappings", "a:\n" + strings.ReplaceAll(keys(MaxKeys), "k", "  k") + "b:\n" + strings.ReplaceAll(keys(MaxKeys), "k", "  k"), ""},
		{"flow keys count as tokens only", "{" + strings.Repeat("a: 1, ", MaxKeys+1) + "}", ""},
		{"tokens past the cap", "[" + strings.Repeat("1,", MaxTokens/2) + "]", "1:50001: plan file holds more than 50000 keys, values and brackets"},
		{"comments are not tokens", strings.Repeat("#\n", MaxTokens+1), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if fe := testFile.CheckTokens(lexer.Tokenize(tt.in)); fe != nil {
				got = fe.Error()
			}
			if got != tt.want {
				t.Errorf("CheckTokens = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestParseHostile feeds Parse the files that ran the plan command out of
// memory: 100,000 and 20,000 unclosed "[" (200 and 40 KB), the same depth in
// block lists and mappings, and a mapping of 100,000 keys. Each must come
// back as a positioned limit error without the library building anything,
// within a loose memory bound (the library took 680 MB for depth 20,000).
func TestParseHostile(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"depth 100000", strings.Repeat("[", 100_000), "1:65: plan file nests deeper than 64 levels"},
		{"depth 20000", strings.Repeat("[", 20_000), "1:65: plan file nests deeper than 64 levels"},
		{"depth 20000 closed", strings.Repeat("[", 20_000) + strings.Repeat("]", 20_000), "1:65: plan file nests deeper than 64 levels"},
		{"flow mappings", strings.Repeat("{a: ", 20_000), "1:257: plan file nests deeper than 64 levels"},
		{"dashes", strings.Repeat("- ", 100_000), "1:129: plan file nests deeper than 64 levels"},
		{"indentation", nest(700), "65:65: plan file nests deeper than 64 levels"},
		{"wide mapping", keys(20_000), "257:1: a mapping holds more than 256 keys"},
		{"flat list", "[" + strings.Repeat("1,", 100_000) + "]", "1:100001: plan file holds more than 50000 keys, values and brackets"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte(tt.in)
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := testFile.Parse(data, parser.AllowDuplicateMapKey())
			runtime.ReadMemStats(&after)
			var fe *yamlerr.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Parse = %v, want a limit error", err)
			}
			if got := fe.Error(); got != tt.want {
				t.Errorf("Parse = %q, want %q", got, tt.want)
			}
			if fe.Hint == "" {
				t.Error("no hint")
			}
			used := after.TotalAlloc - before.TotalAlloc
			t.Logf("allocated %.1f MB", float64(used)/(1<<20))
			if used > 100<<20 {
				t.Errorf("allocated %d MB, want under 100 MB", used>>20)
			}
		})
	}
}

// TestParseAtTheCaps parses the most expensive files the limits let through
// and holds them to the same loose memory bound.
func TestParseAtTheCaps(t *testing.T) {
	var wide strings.Builder
	for m := range MaxTokens / (3*MaxKeys + 2) {
		fmt.Fprintf(&wide, "m%d:\n", m)
		for k := range MaxKeys {
			fmt.Fprintf(&wide, "  k%d: 1\n", k)
		}
	}
	tests := []struct{ name, in string }{
		{"deepest flow", strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)},
		{"deepest block", nest(MaxDepth)},
		{"widest mapping", keys(MaxKeys)},
		{"most tokens", "[" + strings.Repeat("1,", MaxTokens/2-2) + "]"},
		{"wide mappings up to the size cap", wide.String()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := testFile.Parse([]byte(tt.in))
			runtime.ReadMemStats(&after)
			var fe *yamlerr.FieldError
			if errors.As(err, &fe) {
				t.Fatalf("Parse = %v, want no limit error", err)
			}
			used := after.TotalAlloc - before.TotalAlloc
			t.Logf("allocated %.1f MB", float64(used)/(1<<20))
			if used > 100<<20 {
				t.Errorf("allocated %d MB, want under 100 MB", used>>20)
			}
		})
	}
}

func TestParseDropsByteOrderMark(t *testing.T) {
	f, err := testFile.Parse([]byte("\ufeffa: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := f.Docs[0].Body.(*ast.MappingNode)
	if !ok || len(m.Values) != 1 || m.Values[0].Key.String() != "a" {
		t.Fatalf("parsed %v, want the mapping a: 1", f.Docs[0].Body)
	}
}
