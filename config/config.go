// Package config reads gpuwarden.yaml, the plan file: it decodes it strictly,
// fills the defaults and validates it, and it renders the commented starter
// file that `gpuwarden init` prints. Every error it returns is a
// *gpuwarden.Error whose message points at the file, line, column and field,
// so that a user can fix a plan without reading this code.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/gpuwarden/gpuwarden"
)

// MaxFileSize is the largest plan file Parse accepts; a plan is a page of
// settings, so anything bigger is the wrong file and not worth parsing.
const MaxFileSize = 1 << 20

// initHint is what to run when there is no plan file yet.
const initHint = "create one with: gpuwarden init > gpuwarden.yaml"

// Load reads, decodes, defaults and validates the plan file at path.
func Load(path string) (*gpuwarden.Plan, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, readError(path, err)
	}
	defer f.Close()
	// Read one byte past the limit so that Parse can tell an oversized file
	// from one that is exactly at the limit, without reading all of it.
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, readError(path, err)
	}
	return Parse(path, data)
}

// readError turns an os error into the not-found application error. The
// path goes in the message, which an API response shows without the cause.
func readError(path string, err error) error {
	hint := initHint
	if !errors.Is(err, fs.ErrNotExist) {
		hint = "check the path and its permissions, or " + initHint
	}
	return &gpuwarden.Error{Code: gpuwarden.ENotFound, Message: "cannot read plan file " + path, Hint: hint,
		Err: unwrapPathError(err)}
}

// unwrapPathError drops the "open PATH:" prefix of an *fs.PathError so that
// the path appears once, in the form the user typed it.
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Parse decodes a plan file's contents, fills the defaults and validates the
// result. name is used only in error messages (usually the path). Explicit
// zeros for spot_interruptions_per_day, restart_minutes and
// sessions_per_month are kept, because there zero is a real answer rather
// than "not given"; see ApplyDefaults.
func Parse(name string, data []byte) (*gpuwarden.Plan, error) {
	if len(data) > MaxFileSize {
		return nil, docError(name, pos{1, 1}, fmt.Sprintf("plan file is larger than %d KiB", MaxFileSize>>10),
			"a plan file is a page of settings; check that this is the right file")
	}
	// Editors on Windows save a byte-order mark that the YAML library would
	// otherwise read as part of the first key.
	data = bytes.TrimPrefix(data, []byte("\ufeff"))

	// Duplicate keys are let through the parser and caught by the shape
	// check, which knows the field's full path and both positions.
	file, err := parser.ParseBytes(data, 0, parser.AllowDuplicateMapKey())
	if err != nil {
		return nil, libraryError(name, err, nil)
	}
	body, err := documentBody(name, file)
	if err != nil {
		return nil, err
	}

	// The shape check runs before the library decodes, because the library
	// is lenient where a plan must not be: it truncates 1.5 into an int,
	// turns 0x10 into the name "16" and takes "12" as a number, and its
	// errors name Go types rather than plan fields.
	w := newWalker()
	if fe := w.walkDocument(body); fe != nil {
		return nil, fe.toError(name)
	}

	p := new(gpuwarden.Plan)
	if err := yaml.NodeToValue(body, p, yaml.Strict(), yaml.DisallowUnknownField()); err != nil {
		return nil, libraryError(name, err, w.idx)
	}
	if fe := checkRaw(p, w.idx); fe != nil {
		return nil, fe.toError(name)
	}
	if w.idx.empty("budget.alerts_percent") {
		// An explicit [] turns alerts off; ApplyDefaults only fills a nil list.
		p.Budget.AlertsPercent = []int{}
	}
	ApplyDefaults(p)
	w.idx.restoreZeros(p)
	if fe := validate(p, w.idx); fe != nil {
		return nil, fe.toError(name)
	}
	return p, nil
}

// documentBody returns the body of the single non-empty document in file.
func documentBody(name string, file *ast.File) (ast.Node, error) {
	var body ast.Node
	for _, doc := range file.Docs {
		if doc == nil || doc.Body == nil {
			continue // a bare "---" or a comment-only document holds nothing
		}
		switch doc.Body.(type) {
		case *ast.NullNode, *ast.DirectiveNode: // "~" or "%YAML 1.2" before "---"
			continue
		}
		if body != nil {
			at := posOf(doc.Body)
			if doc.Start != nil {
				at = tokenPos(doc.Start)
			}
			return nil, docError(name, at, "plan file holds more than one YAML document",
				"keep one plan per file: remove the second \"---\" and what follows it")
		}
		body = doc.Body
	}
	if body == nil {
		return nil, docError(name, pos{1, 1}, "plan file is empty", initHint)
	}
	return body, nil
}

// pos is a 1-based line and column in the plan file.
type pos struct{ line, col int }

// fieldError is a problem with one field, before the file name is known to it.
type fieldError struct {
	at    pos
	field string // dotted YAML path; "" for problems with the document itself
	msg   string
	hint  string
}

// toError renders the one message format every plan error uses:
// NAME:LINE:COL: FIELD: what is wrong.
func (fe *fieldError) toError(name string) *gpuwarden.Error {
	msg := oneLine(fe.msg)
	if fe.field != "" {
		msg = fe.field + ": " + msg
	}
	at := fe.at
	if at.line < 1 || at.col < 1 {
		at = pos{1, 1}
	}
	return &gpuwarden.Error{Code: gpuwarden.EInvalid,
		Message: fmt.Sprintf("%s:%d:%d: %s", name, at.line, at.col, msg), Hint: fe.hint}
}

// docError is an error about the document as a whole, which has no field.
func docError(name string, at pos, msg, hint string) *gpuwarden.Error {
	return (&fieldError{at: at, msg: msg, hint: hint}).toError(name)
}

// libraryError converts an error from the YAML library into the plan error
// format. The library's own Error() appends a multi-line source excerpt, so
// only its one-line message and token position are used; the field comes
// from the index when the token belongs to a known node.
func libraryError(name string, err error, idx index) *gpuwarden.Error {
	var ye yaml.Error
	if !errors.As(err, &ye) {
		// Errors without a token (a custom unmarshaler's) have no position;
		// the shape check runs those unmarshalers first, so this is a
		// fallback that keeps the format rather than a path users should meet.
		return docError(name, pos{1, 1}, oneLine(err.Error()), "fix the value the message names")
	}
	at := pos{1, 1}
	if tk := ye.GetToken(); tk != nil && tk.Position != nil {
		at = tokenPos(tk)
	}
	field := idx.fieldAt(at)
	hint := "check the value's type against the starter file: gpuwarden init"
	var se *yaml.SyntaxError
	if errors.As(err, &se) {
		hint = "fix the YAML near here: indent with spaces and quote text that contains \": \" or \" #\""
		if strings.Contains(se.Message, "'\t'") {
			hint = "indent with spaces; YAML does not allow tabs for indentation"
		}
		if field == "" {
			field = "syntax error"
		}
	}
	return (&fieldError{at: at, field: field, msg: ye.GetMessage(), hint: hint}).toError(name)
}

// oneLine keeps messages on one line, because they are printed after a
// file:line:col prefix that editors and CI annotations read line by line:
// line breaks become spaces and other control characters become escapes.
func oneLine(s string) string {
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
