// Package config reads gpuwarden.yaml, the plan file: it decodes it strictly,
// fills the defaults and validates it, and it renders the commented starter
// file that `gpuwarden init` prints. Every error it returns is a
// *gpuwarden.Error whose message points at the file, line, column and field,
// so that a user can fix a plan without reading this code.
package config

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/yamlerr"
	"github.com/gpuwarden/gpuwarden/internal/yamlread"
)

// MaxFileSize is the largest plan file Parse accepts, 256 KiB; a plan is a
// page of settings (the commented starter file is 6 KiB), so anything bigger
// is the wrong file and not worth parsing. The cap also bounds what reading
// a hostile file costs; yamlread holds the limits on nesting and size that
// every YAML file gpuwarden reads shares.
const MaxFileSize = 256 << 10

// planFile is how yamlread reads a plan: its limits and their words.
var planFile = yamlread.File{Kind: "plan file", MaxBytes: MaxFileSize,
	SizeHint: "a plan file is a page of settings; check that this is the right file"}

// initHint is what to run when there is no plan file yet.
const initHint = "create one with: gpuwarden init > gpuwarden.yaml"

// Load reads, decodes, defaults and validates the plan file at path.
func Load(path string) (*gpuwarden.Plan, error) {
	f, err := LoadFile(path)
	if err != nil {
		return nil, err
	}
	return f.Plan, nil
}

// LoadFile is Load that keeps where each field was written, for CheckNames.
func LoadFile(path string) (*File, error) {
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
	return ParseFile(path, data)
}

// File is a plan file as read: the plan, and where each of its fields was
// written, so that checks which can only run once the catalogs the plan
// names are loaded (CheckNames) still point at the line.
type File struct {
	// Plan is the decoded, defaulted and validated plan.
	Plan *gpuwarden.Plan
	name string
	idx  index
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
// result. name is used only in error messages (usually the path). A file
// over MaxFileSize or past yamlread's limits on nesting is refused before
// the YAML library parses it. Explicit zeros for spot_interruptions_per_day,
// restart_minutes and sessions_per_month are kept, because there zero is a
// real answer rather than "not given"; see ApplyDefaults.
func Parse(name string, data []byte) (*gpuwarden.Plan, error) {
	f, err := ParseFile(name, data)
	if err != nil {
		return nil, err
	}
	return f.Plan, nil
}

// ParseFile is Parse that keeps where each field was written, for CheckNames.
func ParseFile(name string, data []byte) (*File, error) {
	// Duplicate keys are let through the parser and caught by the shape
	// check, which knows the field's full path and both positions.
	file, err := planFile.Parse(data, parser.AllowDuplicateMapKey())
	if err != nil {
		var fe *yamlerr.FieldError
		if errors.As(err, &fe) {
			return nil, fe.ToError(name)
		}
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
		return nil, fe.ToError(name)
	}

	p := new(gpuwarden.Plan)
	if err := yaml.NodeToValue(body, p, yaml.Strict(), yaml.DisallowUnknownField()); err != nil {
		return nil, libraryError(name, err, w.idx)
	}
	if fe := checkRaw(p, w.idx); fe != nil {
		return nil, fe.ToError(name)
	}
	if w.idx.empty("budget.alerts_percent") {
		// An explicit [] turns alerts off; ApplyDefaults only fills a nil list.
		p.Budget.AlertsPercent = []int{}
	}
	ApplyDefaults(p)
	w.idx.restoreZeros(p)
	if fe := validate(p, w.idx); fe != nil {
		return nil, fe.ToError(name)
	}
	return &File{Plan: p, name: name, idx: w.idx}, nil
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
				at = yamlerr.TokenPos(doc.Start)
			}
			return nil, docError(name, at, "plan file holds more than one YAML document",
				"keep one plan per file: remove the second \"---\" and what follows it")
		}
		body = doc.Body
	}
	if body == nil {
		return nil, docError(name, yamlerr.Pos{Line: 1, Col: 1}, "plan file is empty", initHint)
	}
	return body, nil
}

// docError is an error about the document as a whole, which has no field.
func docError(name string, at yamlerr.Pos, msg, hint string) *gpuwarden.Error {
	return (&yamlerr.FieldError{At: at, Msg: msg, Hint: hint}).ToError(name)
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
		return docError(name, yamlerr.Pos{Line: 1, Col: 1}, yamlerr.OneLine(err.Error()), "fix the value the message names")
	}
	at := yamlerr.Pos{Line: 1, Col: 1}
	if tk := ye.GetToken(); tk != nil && tk.Position != nil {
		at = yamlerr.TokenPos(tk)
		var se *yaml.SyntaxError
		if errors.As(err, &se) {
			at = yamlerr.SyntaxPos(tk)
		}
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
	return (&yamlerr.FieldError{At: at, Field: field, Msg: ye.GetMessage(), Hint: hint}).ToError(name)
}
