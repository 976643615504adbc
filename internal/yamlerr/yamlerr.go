// Package yamlerr holds the positioned-error helpers shared by the YAML
// readers of the plan (config) and the lock file (canary), so that both
// report problems in the same NAME:LINE:COL: FIELD: message format.
package yamlerr

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"

	"github.com/gpuwarden/gpuwarden"
)

// Pos is a 1-based line and column in a YAML file.
type Pos struct{ Line, Col int }

// FieldError is a problem with one field, before the file name is known to it.
type FieldError struct {
	At    Pos
	Field string // dotted YAML path; "" for problems with the document itself
	Msg   string
	Hint  string
}

// Error renders the problem without a file name, LINE:COL: FIELD: message, so
// that a FieldError can travel as an error until ToError names the file.
func (fe *FieldError) Error() string {
	msg := OneLine(fe.Msg)
	if fe.Field != "" {
		msg = fe.Field + ": " + msg
	}
	at := fe.at()
	return fmt.Sprintf("%d:%d: %s", at.Line, at.Col, msg)
}

// at is the position shown: 1:1 when the problem has none.
func (fe *FieldError) at() Pos {
	if fe.At.Line < 1 || fe.At.Col < 1 {
		return Pos{1, 1}
	}
	return fe.At
}

// ToError renders the one message format every positioned error uses: NAME:LINE:COL: FIELD: what is wrong.
func (fe *FieldError) ToError(name string) *gpuwarden.Error {
	msg := OneLine(fe.Msg)
	if fe.Field != "" {
		msg = fe.Field + ": " + msg
	}
	at := fe.at()
	return &gpuwarden.Error{Code: gpuwarden.EInvalid,
		Message: fmt.Sprintf("%s:%d:%d: %s", name, at.Line, at.Col, msg), Hint: fe.Hint}
}

// OneLine keeps s on one line, turning line breaks into spaces and other control characters into escapes.
func OneLine(s string) string {
	var b strings.Builder
	for _, r := range strings.TrimSpace(s) {
		switch {
		case r == '\n' || r == '\r' || r == 0x85 || r == 0x2028 || r == 0x2029:
			b.WriteByte(' ')
		case r < 0x20 || r == 0x7f:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// IsNull reports whether n is absent or an explicit YAML null.
func IsNull(n ast.Node) bool {
	if n == nil {
		return true
	}
	_, ok := n.(*ast.NullNode)
	return ok
}

// TokenPos converts a token's position (the YAML library counts from 1), or returns the zero Pos when it has none.
func TokenPos(tk *token.Token) Pos {
	if tk == nil || tk.Position == nil {
		return Pos{}
	}
	return Pos{tk.Position.Line, tk.Position.Column}
}

// PosOr is where n starts, or def when it carries no position; a block mapping starts at its first key, not its first ":".
func PosOr(n ast.Node, def Pos) Pos {
	switch m := n.(type) {
	case nil:
		return def
	case *ast.MappingNode:
		if !m.IsFlowStyle && len(m.Values) > 0 && m.Values[0] != nil && m.Values[0].Key != nil {
			return PosOr(m.Values[0].Key, def)
		}
	case *ast.MappingValueNode:
		if m.Key != nil {
			return PosOr(m.Key, def)
		}
	}
	if p := TokenPos(n.GetToken()); p.Line > 0 && p.Col > 0 {
		return p
	}
	return def
}

// SyntaxPos is where a syntax error the library reports at tk is: tk's
// own position, except for a plain scalar that runs on over more lines
// into a ": ". The library reports such an error ("mapping value is not
// allowed in this context") at the scalar's first line, where nothing is
// wrong: a key indented too far ("  kind: inference\n   params_b: 7") is
// read as more words of the value above it. The error is the key on the
// line of the ":", so that line, at the key's first character, is shown.
func SyntaxPos(tk *token.Token) Pos {
	p := TokenPos(tk)
	if tk == nil || tk.Next == nil || tk.Next.Type != token.MappingValueType || tk.Next.Position == nil ||
		p.Line < 1 || tk.Next.Position.Line <= p.Line {
		return p
	}
	i := strings.LastIndexByte(tk.Origin, '\n')
	if i < 0 {
		return p
	}
	last := tk.Origin[i+1:]
	return Pos{Line: tk.Next.Position.Line, Col: len(last) - len(strings.TrimLeft(last, " \t")) + 1}
}
