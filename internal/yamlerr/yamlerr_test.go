package yamlerr

import (
	"testing"

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
