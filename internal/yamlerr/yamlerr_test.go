package yamlerr

import (
	"errors"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/parser"

	"github.com/gpuwarden/gpuwarden"
)

func TestToError(t *testing.T) {
	tests := []struct {
		fe   FieldError
		want string
	}{
		{FieldError{At: Pos{3, 7}, Field: "budget.limit", Msg: "must be a number"}, "f.yaml:3:7: budget.limit: must be a number"},
		{FieldError{At: Pos{2, 1}, Msg: "document is empty"}, "f.yaml:2:1: document is empty"},
		{FieldError{At: Pos{0, 5}, Field: "x", Msg: "bad"}, "f.yaml:1:1: x: bad"},
		{FieldError{Field: "x", Msg: "two\nlines"}, "f.yaml:1:1: x: two lines"},
	}
	for _, tt := range tests {
		e := tt.fe.ToError("f.yaml")
		if e.Message != tt.want {
			t.Errorf("ToError(%+v).Message = %q, want %q", tt.fe, e.Message, tt.want)
		}
		if e.Code != gpuwarden.EInvalid || e.Hint != tt.fe.Hint {
			t.Errorf("ToError(%+v) = code %v hint %q", tt.fe, e.Code, e.Hint)
		}
	}
}

func TestOneLine(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"  padded \n", "padded"},
		{"a\nb\r\nc", "a b  c"},
		{"tab\there", `tab\there`},
		{"nul\x00del\x7f", `nul\x00del\x7f`},
		{"ls\u2028ps\u2029nel\u0085x", "ls ps nel x"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := OneLine(tt.in); got != tt.want {
			t.Errorf("OneLine(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestSyntaxPosIsTheLineOfTheMistake: a key indented one space too far is
// read as more words of the value above it, and the library reports the
// error on that value's line, one line early. SyntaxPos names the key's.
func TestSyntaxPosIsTheLineOfTheMistake(t *testing.T) {
	tests := []struct {
		name, src string
		want      Pos
	}{
		{"key indented too far", "name: x\nworkload:\n  kind: inference\n   params_b: 7\nwork_hours: 3\n", Pos{4, 4}},
		{"two lines on", "a: b c\n  d e\n  f: g\n", Pos{3, 3}},
		{"nested", "a:\n  b: c\n    d: e\n", Pos{3, 5}},
		{"one line", "work_hours: 3 3: 4\n", Pos{1, 13}},
		{"tab", "a: 1\n\tb: 2\n", Pos{2, 1}},
		{"unclosed quote", "a: \"x\nb: 2\n", Pos{1, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parser.ParseBytes([]byte(tt.src), 0)
			var ye yaml.Error
			if !errors.As(err, &ye) {
				t.Fatalf("parse %q: %v, want a syntax error", tt.src, err)
			}
			if got := SyntaxPos(ye.GetToken()); got != tt.want {
				t.Errorf("SyntaxPos = %d:%d, want %d:%d (%s)", got.Line, got.Col, tt.want.Line, tt.want.Col, ye.GetMessage())
			}
		})
	}
}
