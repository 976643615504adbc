package yamlread

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"

	"github.com/gpuwarden/gpuwarden/internal/yamlerr"
)

// FuzzParse holds the two checks to each other and to the parser: Scan
// never refuses a file of text that the exact CheckTokens lets through (so
// the quick check costs no real file anything), and every file Parse accepts
// builds a tree within MaxDepth and MaxKeys (so the exact check is exact). The seeds
// in testdata/fuzz/FuzzParse are small versions of the hostile files.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"", "a: 1\n", "a:\n  - b: [1, {c: d}]\n", "a: |\n  [[[\nb: 2\n", "- a\n  \"x\n- [[\n",
		"--- |\n[[[\n---\n[[\n", "a: 'it''s [' # ]\n", "? a\n: b\n", "&x a: *x\n", "{a: [b, {c: [d]}]}\n",
		strings.Repeat("[", MaxDepth+1), nest(MaxDepth + 1), keys(MaxKeys + 1), strings.Repeat("- ", MaxDepth+1),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// The fuzzer has no per-input time limit, and a reader stuck in a
		// loop only shows as a stalled exec count; failing here records the
		// input in testdata/fuzz instead.
		done := make(chan string, 1)
		go func() { done <- checkParse(data) }()
		select {
		case msg := <-done:
			if msg != "" {
				t.Fatal(msg)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no answer within 5s on %q", data)
		}
	})
}

// checkParse reads data both ways and says what is wrong, or "".
func checkParse(data []byte) string {
	{
		quick := testFile.Scan(data)
		toks := lexer.Tokenize(string(data))
		exact := testFile.CheckTokens(toks)
		if quick != nil && exact == nil && toks.InvalidToken() == nil && !strings.Contains(quick.Msg, "larger than") && plain(data) {
			return fmt.Sprintf("Scan refuses (%v) what CheckTokens lets through: %q", quick, data)
		}
		file, err := testFile.Parse(data)
		var fe *yamlerr.FieldError
		if errors.As(err, &fe) {
			if fe.At.Line < 1 || fe.At.Col < 1 || fe.Hint == "" {
				return fmt.Sprintf("limit error without a position or hint: %+v", fe)
			}
			return ""
		}
		if err != nil {
			return "" // a syntax error
		}
		for _, doc := range file.Docs {
			if d := depth(doc.Body, false); d > MaxDepth {
				return fmt.Sprintf("parsed a tree %d deep: %q", d, data)
			}
		}
		return ""
	}
}

// depth is how deeply mappings and lists nest in n; inMap says n is a
// mapping's entry, which is not a level of its own.
func depth(n ast.Node, inMap bool) int {
	switch v := n.(type) {
	case *ast.MappingNode:
		d := 0
		if !v.IsFlowStyle && len(v.Values) > MaxKeys {
			return MaxDepth + 1000 // a mapping wider than MaxKeys fails the test too
		}
		for _, kv := range v.Values {
			d = max(d, depth(kv, true))
		}
		return 1 + d
	case *ast.MappingValueNode:
		d := max(depth(v.Key, false), depth(v.Value, false))
		if !inMap {
			d++ // a mapping of one entry
		}
		return d
	case *ast.SequenceNode:
		d := 0
		for _, e := range v.Values {
			d = max(d, depth(e, false))
		}
		return 1 + d
	case *ast.AnchorNode:
		return depth(v.Value, inMap)
	case *ast.TagNode:
		return depth(v.Value, inMap)
	case *ast.MappingKeyNode:
		return depth(v.Value, inMap)
	}
	return 0
}

// plain reports text as gpuwarden's files hold it: valid UTF-8 without
// control characters but tabs and line breaks, and without "%", whose
// directive state the library keeps in ways not worth copying, since a
// plan or a lock has no directives.
func plain(data []byte) bool {
	if !utf8.Valid(data) || bytes.IndexByte(data, '%') >= 0 {
		return false
	}
	for _, r := range string(data) {
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0x7f {
			return false
		}
	}
	return true
}
