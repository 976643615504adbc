package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/yamlerr"
)

// The editor changes a plan file the way a careful person would: it finds
// the value in the syntax tree, and then splices new text into the original
// bytes at the token positions, so every byte it was not asked to change
// (comments, key order, blank lines, quoting, line endings) comes out as it
// went in. Printing the tree back would be simpler, but the YAML library's
// printer moves and drops comments. Each edit is checked by reading the
// result back: the document must parse and decode to the old document with
// exactly that one change, or the edit is refused rather than written.

// Edit is one change to a plan file: set the value at a dotted path (creating missing parent mappings), or append to the list at the path.
type Edit struct {
	// Path names the field with dots, and a list item with [N]:
	// "budget.alerts_percent", "targets[0].offer". A name that holds a dot
	// is written in double quotes: currency_rates."A.B".
	Path string `json:"path"`
	// Value is written as YAML: scalars, lists, maps, and structs with yaml tags.
	Value any `json:"value"`
	// Append adds Value as one item to the list at Path (creating the list
	// if missing) instead of replacing the value; an item already in the
	// list is not added twice, so a fix can be applied again safely.
	Append bool `json:"append,omitempty"`
	// Why says what the edit fixes; Describe leaves it to the caller, which
	// lays it out next to the change.
	Why string `json:"why,omitempty"`
}

// ApplyEdits returns src with the edits applied in order; it never writes, so the caller can show a diff first.
func ApplyEdits(src []byte, edits []Edit) ([]byte, error) {
	out := bytes.Clone(src)
	for _, e := range edits {
		r, err := applyEdit(out, e)
		if err != nil {
			return nil, err
		}
		out = r.out
	}
	return out, nil
}

// Describe returns one line per edit, such as "budget.alerts_percent: (unset) → [50, 80, 100]", to show before applying them.
func Describe(src []byte, edits []Edit) ([]string, error) {
	lines := make([]string, 0, len(edits))
	cur := src
	// Each edit is described against the file the earlier ones produce, so
	// two edits of one field show the value each of them really replaces.
	for _, e := range edits {
		r, err := applyEdit(cur, e)
		if err != nil {
			return nil, err
		}
		lines = append(lines, r.line)
		cur = r.out
	}
	return lines, nil
}

// WriteFileAtomic replaces the file at path with data through a temporary file in the same directory, so a crash leaves the old file or the new one, never half of one.
func WriteFileAtomic(path string, data []byte) error {
	target := path
	// Write through a symbolic link rather than replace the link with a file.
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		target = resolved
	}
	mode := fs.FileMode(0o644)
	if fi, err := os.Stat(target); err == nil {
		mode = fi.Mode().Perm()
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("write %s: %w", path, unwrapPathError(err))
	}
	dir := filepath.Dir(target)
	f, err := os.CreateTemp(dir, "."+filepath.Base(target)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, unwrapPathError(err))
	}
	tmp := f.Name()
	done := false
	defer func() {
		if !done {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, unwrapPathError(err))
	}
	// CreateTemp makes the file private; the plan keeps the mode it had.
	if err := f.Chmod(mode); err != nil {
		return fmt.Errorf("write %s: %w", path, unwrapPathError(err))
	}
	// Without the sync a crash after the rename can leave an empty file.
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, unwrapPathError(err))
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, unwrapPathError(err))
	}
	if err := os.Rename(tmp, target); err != nil {
		return fmt.Errorf("write %s: %w", path, unwrapPathError(err))
	}
	done = true
	// The rename itself is durable only once the directory is synced; some
	// systems cannot sync a directory, and the file is complete either way.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// editResult is one applied edit: the new file and the line Describe shows.
type editResult struct {
	out  []byte
	line string
}

// applyEdit applies one edit and checks the result by reading it back.
func applyEdit(src []byte, e Edit) (editResult, error) {
	if len(src) > MaxFileSize {
		return editResult{}, gpuwarden.Errorf(gpuwarden.EInvalid, "cannot edit %s: the plan file is larger than %d KiB", e.Path, MaxFileSize>>10).
			WithHint("a plan file is a page of settings; check that this is the right file")
	}
	segs, err := parsePath(e.Path)
	if err != nil {
		return editResult{}, err
	}
	// A byte-order mark is not part of the YAML; it stays where it was.
	bom := []byte{}
	if bytes.HasPrefix(src, []byte("\ufeff")) {
		bom, src = src[:3], src[3:]
	}
	what := "set " + e.Path
	if e.Append {
		what = "append to " + e.Path
	}
	d, err := loadDoc(src, what)
	if err != nil {
		return editResult{}, err
	}
	var firstErr error
	// Text with line breaks is written as a block scalar, which is easiest to
	// read, unless indented comments right after it would become part of it;
	// the read-back check notices, and the edit is made again with the text
	// in double quotes.
	for _, quoteText := range []bool{false, true} {
		ed, err := newEditor(d, e, segs)
		if err != nil {
			return editResult{}, err
		}
		ed.quoteText = quoteText
		out, err := ed.apply(src)
		if err == nil {
			return editResult{out: append(append([]byte{}, bom...), out...), line: ed.describe()}, nil
		}
		var rb *readBackError
		if !errors.As(err, &rb) {
			return editResult{}, err
		}
		if firstErr == nil {
			firstErr = rb.err
		}
	}
	return editResult{}, firstErr
}

// readBackError is an edit whose result did not read back as intended; err
// is what the user is told if no way of writing the value works.
type readBackError struct{ err error }

func (e *readBackError) Error() string { return e.err.Error() }

// apply plans the edit and returns src with it made and checked.
func (ed *editor) apply(src []byte) ([]byte, error) {
	d := ed.d
	if err := ed.plan(); err != nil {
		return nil, err
	}
	for i, op := range ed.splices {
		if op.at > op.end || op.at < 0 || op.end > len(d.src) {
			return nil, ed.unsafe()
		}
		ed.splices[i].at, ed.splices[i].end = d.orig(op.at), d.orig(op.end)
	}
	out := splice(src, ed.splices)
	if len(ed.splices) > 0 {
		if err := ed.verify(out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// pathSeg is one step of an edit path: a mapping key, or a list index.
type pathSeg struct {
	key   string
	index int // -1 for a key
}

// parsePath splits "a.b[2].c" and `a."b.c"` into steps.
func parsePath(p string) ([]pathSeg, error) {
	bad := func(why string) error {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "edit path %q: %s", p, why).
			WithHint(`write field names with dots and list items as [N]: budget.alerts_percent, targets[0].offer`)
	}
	if p == "" {
		return nil, bad("is empty")
	}
	var segs []pathSeg
	i := 0
	for {
		if p[i] == '"' {
			q, err := strconv.QuotedPrefix(p[i:])
			if err != nil {
				return nil, bad("has an unterminated quoted name")
			}
			k, err := strconv.Unquote(q)
			if err != nil {
				return nil, bad("has a bad quoted name")
			}
			segs = append(segs, pathSeg{key: k, index: -1})
			i += len(q)
		} else {
			j := i
			for j < len(p) && p[j] != '.' && p[j] != '[' {
				j++
			}
			if j == i {
				return nil, bad("has an empty field name")
			}
			segs = append(segs, pathSeg{key: p[i:j], index: -1})
			i = j
		}
		for i < len(p) && p[i] == '[' {
			j := strings.IndexByte(p[i:], ']')
			if j < 0 {
				return nil, bad("has a [ without ]")
			}
			n, err := strconv.Atoi(p[i+1 : i+j])
			if err != nil || n < 0 {
				return nil, bad("has a list index that is not a whole number")
			}
			segs = append(segs, pathSeg{index: n})
			i += j + 1
		}
		if i == len(p) {
			return segs, nil
		}
		if p[i] != '.' {
			return nil, bad("has text after a ] that does not start with a dot")
		}
		i++
		if i == len(p) {
			return nil, bad("ends with a dot")
		}
	}
}

// formatPath writes steps back as a path, for messages about a part of one.
func formatPath(segs []pathSeg) string {
	var b strings.Builder
	for i, s := range segs {
		switch {
		case s.index >= 0:
			fmt.Fprintf(&b, "[%d]", s.index)
		default:
			if i > 0 {
				b.WriteByte('.')
			}
			if s.key == "" || strings.ContainsAny(s.key, `.[]"`) {
				b.WriteString(strconv.Quote(s.key))
			} else {
				b.WriteString(s.key)
			}
		}
	}
	return b.String()
}

// yamlDoc is a parsed plan file together with what the editor needs to map
// the syntax tree back onto its bytes. The YAML library loses count of lines
// after a comment that ends in "\r\n", so the tree is built from a copy with
// "\r\n" turned into "\n", and offsets map back to the file with orig.
type yamlDoc struct {
	src       []byte // the file, with "\r\n" line endings turned into "\n"
	crs       []int  // where in src a "\r" was dropped, in order
	starts    []int  // the byte offset at which each line starts
	eol       string // the file's line ending, used for every new line
	root      ast.Node
	indent    int                  // spaces per nesting level, detected, default 2
	seqIndent bool                 // whether block lists are indented under their key
	offs      map[*token.Token]int // where each token's text starts in src
	comments  map[int]int          // lines that are only a comment: the "#" column
	anchors   bool                 // the file uses anchors or aliases
	tree      any                  // the decoded document
}

// loadDoc parses src, which must hold at most one non-empty YAML document;
// what ("set budget.currency") starts its error messages. The file is held
// to the limits Parse holds it to before the YAML library reads it.
func loadDoc(src []byte, what string) (*yamlDoc, error) {
	if fe := planFile.Scan(src); fe != nil {
		return nil, limitError(what, fe)
	}
	d := &yamlDoc{starts: []int{0}, eol: "\n", indent: 2, seqIndent: true, comments: map[int]int{}}
	if i := bytes.IndexByte(src, '\n'); i > 0 && src[i-1] == '\r' {
		d.eol = "\r\n"
	}
	if bytes.Contains(src, []byte("\r\n")) {
		norm := make([]byte, 0, len(src))
		for i := 0; i < len(src); i++ {
			if src[i] == '\r' && i+1 < len(src) && src[i+1] == '\n' {
				d.crs = append(d.crs, len(norm))
				continue
			}
			norm = append(norm, src[i])
		}
		src = norm
	}
	// The library ends a line at a lone "\r" too, and lines must be counted
	// the same way here; plan files do not have one, so it is refused.
	if i := bytes.IndexByte(src, '\r'); i >= 0 {
		l := bytes.Count(src[:i], []byte("\n")) + 1
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "cannot %s: the plan file has a carriage return that does not end a line, on line %d", what, l).
			WithHint("save the file with LF or CRLF line endings")
	}
	d.src = src
	for i, c := range src {
		if c == '\n' {
			d.starts = append(d.starts, i+1)
		}
	}
	toks := lexer.Tokenize(string(src))
	if toks.InvalidToken() == nil {
		if fe := planFile.CheckTokens(toks); fe != nil {
			return nil, limitError(what, fe)
		}
	}
	file, err := parser.Parse(toks, 0)
	if err != nil {
		return nil, invalidYAML(what, err)
	}
	d.locate(toks)
	for _, tk := range toks {
		switch tk.Type {
		case token.CommentType:
			// A comment that starts its line can mark a commented-out key.
			if off := d.tokStart(tk); off >= 0 {
				l := d.line(off)
				if strings.TrimLeft(string(src[d.starts[l]:off]), " \t") == "" {
					d.comments[l] = d.col(off)
				}
			}
		case token.AnchorType, token.AliasType:
			d.anchors = true
		}
	}
	var body ast.Node
	for _, doc := range file.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		switch b := doc.Body.(type) {
		case *ast.DirectiveNode:
			continue
		case *ast.NullNode:
			if b.Token == nil || b.Token.Type == token.ImplicitNullType {
				continue
			}
		}
		if body != nil {
			return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "cannot %s: the plan file holds more than one YAML document", what).
				WithHint("keep one plan per file: remove the second \"---\" and what follows it")
		}
		body = doc.Body
	}
	if n, ok := body.(*ast.NullNode); ok {
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "cannot %s: the plan file at %s is a null, not a mapping of fields", what, d.posOf(n.Token)).
			WithHint("replace the null with the fields, or start again with: " + initHint)
	}
	d.root = body
	if body != nil {
		if err := yaml.NodeToValue(body, &d.tree); err != nil {
			return nil, invalidYAML(what, err)
		}
		d.detectStyle(body)
	}
	return d, nil
}

// limitError reports a file past yamlread's limits, which the editor does not read.
func limitError(what string, fe *yamlerr.FieldError) error {
	return gpuwarden.Errorf(gpuwarden.EInvalid, "cannot %s: the plan file at %d:%d: %s", what, fe.At.Line, fe.At.Col, fe.Msg).
		WithHint("%s", fe.Hint)
}

// invalidYAML reports a file the editor cannot read, at the library's position.
func invalidYAML(what string, err error) error {
	msg, at := libraryParts(err)
	return gpuwarden.Errorf(gpuwarden.EInvalid, "cannot %s: the plan file is not valid YAML at %s: %s", what, at, msg).
		WithHint("fix the YAML there by hand first; gpuwarden plan explains the problem")
}

// libraryParts splits a library error into its one-line message and "LINE:COL".
func libraryParts(err error) (string, string) {
	var ye yaml.Error
	if errors.As(err, &ye) {
		at := "1:1"
		if p := yamlerr.SyntaxPos(ye.GetToken()); p.Line > 0 {
			at = fmt.Sprintf("%d:%d", p.Line, max(p.Col, 1))
		}
		return flatLine(ye.GetMessage()), at
	}
	return flatLine(err.Error()), "1:1"
}

func flatLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// orig maps an offset in src back to the file as it was read.
func (d *yamlDoc) orig(off int) int { return off + sort.SearchInts(d.crs, off) }

// line returns the 0-based line that holds byte off.
func (d *yamlDoc) line(off int) int {
	return sort.Search(len(d.starts), func(i int) bool { return d.starts[i] > off }) - 1
}

// lineEnd is where line l's text ends, before its line ending.
func (d *yamlDoc) lineEnd(l int) int {
	if l+1 >= len(d.starts) {
		return len(d.src)
	}
	return d.starts[l+1] - 1
}

// nextLine is where the line after l starts, or the end of the file.
func (d *yamlDoc) nextLine(l int) int {
	if l+1 >= len(d.starts) {
		return len(d.src)
	}
	return d.starts[l+1]
}

// col is the 0-based column of byte off, in characters as YAML counts them.
func (d *yamlDoc) col(off int) int {
	return utf8.RuneCount(d.src[d.starts[d.line(off)]:off])
}

// posOf is a token's "LINE:COL" for messages.
func (d *yamlDoc) posOf(tk *token.Token) string {
	if tk == nil || tk.Position == nil {
		return "1:1"
	}
	return fmt.Sprintf("%d:%d", max(tk.Position.Line, 1), max(tk.Position.Column, 1))
}

// tokStart is the byte offset where tk's text starts, or -1 when locate
// could not find it.
func (d *yamlDoc) tokStart(tk *token.Token) int {
	if off, ok := d.offs[tk]; ok {
		return off
	}
	return -1
}

// locate finds where each token's text is in src. The library's columns
// skip some tabs and not others, so rather than trust them the tokens are
// found in order: each one's text, as its Origin keeps it, on the line the
// library gives, after the token before it.
func (d *yamlDoc) locate(toks token.Tokens) {
	d.offs = make(map[*token.Token]int, len(toks))
	cursor := 0
	var prev *token.Token
	for _, tk := range toks {
		p := prev
		prev = tk
		if tk.Position == nil || tk.Type == token.ImplicitNullType {
			continue
		}
		raw := strings.TrimSpace(tk.Origin)
		if raw == "" {
			continue
		}
		if p != nil && (p.Type == token.LiteralType || p.Type == token.FoldedType) && tk.Type == token.StringType {
			// A block scalar's text starts on the line after its header; its
			// token's line is sometimes that of its last line. span finds it.
			if hs, ok := d.offs[p]; ok {
				from := d.nextLine(d.line(hs))
				r := strings.TrimRight(tk.Origin, " \t\n")
				if bytes.HasPrefix(d.src[from:], []byte(r)) {
					cursor = from + len(r)
				}
			}
			continue
		}
		l := tk.Position.Line - 1
		if l < 0 || l >= len(d.starts) {
			continue
		}
		from, end := max(cursor, d.starts[l]), d.lineEnd(l)
		if from > end {
			continue
		}
		first, _, _ := strings.Cut(raw, "\n")
		i := bytes.Index(d.src[from:end], []byte(first))
		if i < 0 || !bytes.HasPrefix(d.src[from+i:], []byte(raw)) {
			continue
		}
		d.offs[tk] = from + i
		cursor = from + i + len(raw)
	}
}

// errUnsafe is returned when the tree and the bytes do not line up; the edit
// is refused rather than guessed.
var errUnsafe = errors.New("token positions do not match the file")

// tokEnd is the byte offset just after tk's text. The token keeps its source
// text, with the blanks around it, in Origin; the trimmed text must be found
// where the token starts, or the edit is refused.
func (d *yamlDoc) tokEnd(tk *token.Token) (int, error) {
	start := d.tokStart(tk)
	raw := strings.TrimSpace(tk.Origin)
	if start < 0 || raw == "" || !bytes.HasPrefix(d.src[start:], []byte(raw)) {
		return 0, errUnsafe
	}
	return start + len(raw), nil
}

// span returns the bytes a node's text takes; ok is false for a value that
// has no text (a key with nothing after its colon).
func (d *yamlDoc) span(n ast.Node) (start, end int, ok bool, err error) {
	tokSpan := func(tk *token.Token) (int, int, bool, error) {
		e, err := d.tokEnd(tk)
		return d.tokStart(tk), e, err == nil, err
	}
	// from is a span that starts at tk and ends where the node last ends.
	from := func(tk *token.Token, last ast.Node, fallback *token.Token) (int, int, bool, error) {
		s := d.tokStart(tk)
		if s < 0 {
			return 0, 0, false, errUnsafe
		}
		_, e, ok, err := d.span(last)
		if err != nil {
			return 0, 0, false, err
		}
		if !ok {
			if e, err = d.tokEnd(fallback); err != nil {
				return 0, 0, false, err
			}
		}
		return s, e, true, nil
	}
	switch x := n.(type) {
	case nil:
		return 0, 0, false, nil
	case *ast.NullNode:
		if x.Token == nil || x.Token.Type == token.ImplicitNullType {
			return 0, 0, false, nil
		}
		return tokSpan(x.Token)
	case *ast.StringNode, *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode, *ast.MergeKeyNode:
		return tokSpan(x.GetToken())
	case *ast.LiteralNode:
		s := d.tokStart(x.Start)
		e, err := d.tokEnd(x.Start)
		if err != nil {
			return 0, 0, false, err
		}
		// The content starts on the line after the header; its token's own
		// line is sometimes that of its last line. An empty block scalar
		// ends with its header.
		if x.Value != nil && x.Value.Token != nil && strings.TrimSpace(x.Value.Token.Origin) != "" {
			raw := strings.TrimRight(x.Value.Token.Origin, " \t\r\n")
			from := d.nextLine(d.line(e))
			if !bytes.HasPrefix(d.src[from:], []byte(raw)) {
				return 0, 0, false, errUnsafe
			}
			e = from + len(raw)
		}
		return s, e, true, nil
	case *ast.SequenceNode:
		if x.IsFlowStyle {
			s, e := d.tokStart(x.Start), d.tokStart(x.End)
			if s < 0 || e < 0 {
				return 0, 0, false, errUnsafe
			}
			return s, e + 1, true, nil
		}
		if len(x.Values) == 0 || len(x.Entries) != len(x.Values) {
			return 0, 0, false, errUnsafe
		}
		last := len(x.Values) - 1
		return from(x.Entries[0].Start, x.Values[last], x.Entries[last].Start)
	case *ast.MappingNode:
		if x.IsFlowStyle {
			s, e := d.tokStart(x.Start), d.tokStart(x.End)
			if s < 0 || e < 0 {
				return 0, 0, false, errUnsafe
			}
			return s, e + 1, true, nil
		}
		if len(x.Values) == 0 {
			return 0, 0, false, errUnsafe
		}
		s, _, _, err := d.span(x.Values[0])
		if err != nil {
			return 0, 0, false, err
		}
		_, e, _, err := d.span(x.Values[len(x.Values)-1])
		return s, e, true, err
	case *ast.MappingValueNode:
		ks, _, ok, err := d.span(x.Key)
		if err != nil || !ok {
			return 0, 0, false, errUnsafe
		}
		_, e, ok, err := d.span(x.Value)
		if err != nil {
			return 0, 0, false, err
		}
		if !ok {
			if e, err = d.tokEnd(x.Start); err != nil {
				return 0, 0, false, err
			}
		}
		return ks, e, true, nil
	case *ast.MappingKeyNode:
		return from(x.Start, x.Value, x.Start)
	case *ast.AnchorNode:
		return from(x.Start, x.Value, x.Name.GetToken())
	case *ast.AliasNode:
		return from(x.Start, x.Value, x.Start)
	case *ast.TagNode:
		return from(x.Start, x.Value, x.Start)
	}
	return 0, 0, false, errUnsafe
}

// detectStyle learns the file's indentation step and list style from its
// nested block mappings, so new lines look like their neighbours.
func (d *yamlDoc) detectStyle(root ast.Node) {
	indentSeen, seqSeen := false, false
	var walk func(n ast.Node, depth int)
	walk = func(n ast.Node, depth int) {
		if depth > maxDepth || indentSeen && seqSeen {
			return
		}
		switch x := unwrapValue(n).(type) {
		case *ast.MappingNode:
			for _, mv := range x.Values {
				if !x.IsFlowStyle {
					kc := d.nodeCol(mv.Key)
					switch v := unwrapValue(mv.Value).(type) {
					case *ast.MappingNode:
						if c := d.nodeCol(v); !v.IsFlowStyle && !indentSeen && kc >= 0 && c > kc && c-kc <= 8 {
							d.indent, indentSeen = c-kc, true
						}
					case *ast.SequenceNode:
						if c := d.nodeCol(v); !v.IsFlowStyle && !seqSeen && kc >= 0 && c >= kc {
							d.seqIndent, seqSeen = c > kc, true
						}
					}
				}
				walk(mv.Value, depth+1)
			}
		case *ast.SequenceNode:
			for _, v := range x.Values {
				walk(v, depth+1)
			}
		}
	}
	walk(root, 0)
}

// nodeCol is the column where a node's text starts, or -1.
func (d *yamlDoc) nodeCol(n ast.Node) int {
	s, _, ok, err := d.span(n)
	if err != nil || !ok {
		return -1
	}
	return d.col(s)
}

// unwrapValue looks through an anchor or a tag to the value it labels.
func unwrapValue(n ast.Node) ast.Node {
	for range maxDepth {
		switch x := n.(type) {
		case *ast.AnchorNode:
			n = x.Value
		case *ast.TagNode:
			n = x.Value
		default:
			return n
		}
	}
	return n
}

// isEmpty reports whether n is no value or a null.
func isEmpty(n ast.Node) bool {
	switch n.(type) {
	case nil, *ast.NullNode:
		return true
	}
	return false
}

// slot is a place that holds a value: after a key's colon or a list's dash.
type slot struct {
	path      string
	owner     *token.Token // the ':' or '-'
	ownerCol  int          // column of the key, or of the dash
	item      bool         // a list item, not a mapping value
	flow      bool         // inside [ ] or { }
	prefixEnd int          // byte after the colon, dash or anchor name
	value     ast.Node     // nil when empty; anchors are looked through
}

// editor plans one edit: the splices and what Describe says about them.
type editor struct {
	d       *yamlDoc
	e       Edit
	segs    []pathSeg
	norm    any // Value as the file will decode it
	splices []spliceOp

	status    string // "set", "unchanged", "append", "listed"
	oldText   string // the old value as shown, "" when unset
	quoteText bool   // write text with line breaks in double quotes
}

// spliceOp replaces src[at:end] with text.
type spliceOp struct {
	at, end int
	text    string
}

func newEditor(d *yamlDoc, e Edit, segs []pathSeg) (*editor, error) {
	ed := &editor{d: d, e: e, segs: segs}
	b, err := ed.marshal(e.Value, false)
	if err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal([]byte(b), &ed.norm); err != nil {
		return nil, ed.badValue(err)
	}
	return ed, nil
}

// fail is an EInvalid error about this edit's path.
func (ed *editor) fail(format string, args ...any) *gpuwarden.Error {
	return gpuwarden.Errorf(gpuwarden.EInvalid, "cannot %s %s: %s", ed.verb(), ed.e.Path, fmt.Sprintf(format, args...))
}

func (ed *editor) verb() string {
	if ed.e.Append {
		return "append to"
	}
	return "set"
}

// unsafe refuses an edit whose text the editor cannot place with certainty.
func (ed *editor) unsafe() error {
	return ed.fail("the file's layout there is beyond what the editor rewrites safely").
		WithHint("make this change by hand")
}

// plan walks the path and records the splices for the edit.
func (ed *editor) plan() error {
	d := ed.d
	var cur *slot // nil: the document itself
	node := d.root
	for i, seg := range ed.segs {
		here := formatPath(ed.segs[:i])
		if _, ok := node.(*ast.AliasNode); ok {
			return ed.fail("%s at %s is an alias (*name) of a value written elsewhere", here, d.posOf(node.GetToken())).
				WithHint("edit the value where its anchor (&name) is, or replace the alias first")
		}
		inner := unwrapValue(node)
		var next *slot
		var err error
		if seg.index >= 0 {
			seq, ok := inner.(*ast.SequenceNode)
			if !ok {
				return ed.notA(here, node, "list")
			}
			if seg.index >= len(seq.Values) {
				return ed.fail("%s has %d items; there is no item %d", here, len(seq.Values), seg.index).
					WithHint("items count from 0; to add one, append to %s", here)
			}
			if next, err = ed.itemSlot(here+fmt.Sprintf("[%d]", seg.index), seq, seg.index, cur); err != nil {
				return err
			}
		} else {
			switch m := inner.(type) {
			case *ast.MappingNode:
				mv := findKey(m, seg.key)
				if mv == nil {
					return ed.insertKey(m, cur, i)
				}
				if next, err = ed.pairSlot(formatPath(ed.segs[:i+1]), m, mv, cur); err != nil {
					return err
				}
			default:
				if !isEmpty(inner) {
					return ed.notA(here, node, "mapping")
				}
				if cur == nil {
					return ed.insertRoot(i)
				}
				// A parent written as "key:" or "key: ~" gets the fields.
				keys, err := ed.keysFrom(i)
				if err != nil {
					return err
				}
				return ed.setSlot(cur, keys, ed.leaf())
			}
		}
		cur, node = next, next.value
	}
	if ed.e.Append {
		return ed.appendTo(cur)
	}
	old, _ := getIn(d.tree, ed.segs)
	ed.oldText = ed.show(cur.value, old)
	if !isEmpty(cur.value) && sameValue(old, ed.norm) {
		// Already right: leave the user's spelling of it alone.
		ed.status = "unchanged"
		return nil
	}
	return ed.setSlot(cur, nil, ed.e.Value)
}

// notA reports a path that runs through a value of the wrong kind.
func (ed *editor) notA(here string, n ast.Node, want string) error {
	if here == "" {
		return ed.fail("the plan file's top level is %s, not a mapping of fields", kindOf(n)).
			WithHint("a plan file is a mapping of fields such as workload: and work_hours:")
	}
	hint := fmt.Sprintf("%s holds %s; only a mapping has fields", here, kindOf(n))
	if want == "list" {
		hint = fmt.Sprintf("%s holds %s; only a list has items", here, kindOf(n))
	} else if _, ok := unwrapValue(n).(*ast.SequenceNode); ok {
		hint = fmt.Sprintf("address an item of %s as %s[0]", here, here)
	}
	return ed.fail("%s at %s is %s, not a %s", here, ed.d.posOf(n.GetToken()), kindOf(n), want).WithHint("%s", hint)
}

// kindOf names a node's kind for messages.
func kindOf(n ast.Node) string {
	switch unwrapValue(n).(type) {
	case *ast.MappingNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.AliasNode:
		return "an alias"
	case *ast.NullNode, nil:
		return "empty"
	case *ast.StringNode, *ast.LiteralNode:
		return "text"
	case *ast.IntegerNode, *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
		return "a number"
	case *ast.BoolNode:
		return "a boolean"
	}
	return "a scalar value"
}

// leaf is what the path's last step holds after the edit when the path is
// being created: the value, or a one-item list for an append.
func (ed *editor) leaf() any {
	if ed.e.Append {
		ed.status = "append"
		return []any{ed.e.Value}
	}
	ed.status = "set"
	return ed.e.Value
}

// keysFrom returns the path's keys from step i on, which are to be created;
// list items cannot be, since there is nothing to put before them.
func (ed *editor) keysFrom(i int) ([]string, error) {
	var keys []string
	for j, s := range ed.segs[i:] {
		if s.index >= 0 {
			return nil, ed.fail("%s does not exist, so it has no item %d", formatPath(ed.segs[:i+j]), s.index).
				WithHint("append to %s instead", formatPath(ed.segs[:i+j]))
		}
		keys = append(keys, s.key)
	}
	return keys, nil
}

// findKey returns the pair whose key is k.
func findKey(m *ast.MappingNode, k string) *ast.MappingValueNode {
	for _, mv := range m.Values {
		key := ast.Node(mv.Key)
		if mk, ok := key.(*ast.MappingKeyNode); ok {
			key = mk.Value
		}
		switch x := key.(type) {
		case *ast.StringNode:
			if x.Value == k {
				return mv
			}
		case nil:
		default:
			if tk := x.GetToken(); tk != nil && tk.Value == k {
				return mv
			}
		}
	}
	return nil
}

// pairSlot is the value side of a key.
func (ed *editor) pairSlot(path string, m *ast.MappingNode, mv *ast.MappingValueNode, parent *slot) (*slot, error) {
	d := ed.d
	ks, _, ok, err := d.span(mv.Key)
	if err != nil || !ok {
		return nil, ed.unsafe()
	}
	pe, err := d.tokEnd(mv.Start)
	if err != nil {
		return nil, ed.unsafe()
	}
	s := &slot{path: path, owner: mv.Start, ownerCol: d.col(ks), flow: m.IsFlowStyle || parent != nil && parent.flow,
		prefixEnd: pe, value: mv.Value}
	return ed.lookThroughAnchor(s)
}

// itemSlot is one item of a list.
func (ed *editor) itemSlot(path string, seq *ast.SequenceNode, i int, parent *slot) (*slot, error) {
	d := ed.d
	s := &slot{path: path, item: true, flow: seq.IsFlowStyle || parent != nil && parent.flow, value: seq.Values[i]}
	if seq.IsFlowStyle {
		// A flow item has no dash; it is only ever replaced in place.
		start, _, ok, err := d.span(seq.Values[i])
		if err != nil || !ok {
			return nil, ed.unsafe()
		}
		s.prefixEnd = start
		return ed.lookThroughAnchor(s)
	}
	if len(seq.Entries) != len(seq.Values) {
		return nil, ed.unsafe()
	}
	s.owner = seq.Entries[i].Start
	pe, err := d.tokEnd(s.owner)
	if err != nil {
		return nil, ed.unsafe()
	}
	s.prefixEnd, s.ownerCol = pe, d.col(pe-1)
	return ed.lookThroughAnchor(s)
}

// lookThroughAnchor keeps an anchor (&name) where it is and edits the value
// it labels, so that aliases elsewhere keep referring to something.
func (ed *editor) lookThroughAnchor(s *slot) (*slot, error) {
	if a, ok := s.value.(*ast.AnchorNode); ok {
		_, e, ok, err := ed.d.span(a.Name)
		if err != nil || !ok {
			return nil, ed.unsafe()
		}
		s.prefixEnd, s.value = e, a.Value
	}
	return s, nil
}

// Rendered values.

// form is how a rendered value sits in the file.
type form int

const (
	inline   form = iota // after "key: " or "- "; more lines keep their relative indent
	blockMap             // lines below the key, indented as a mapping
	blockSeq             // lines below the key, indented as a list
)

// rendered is a value as lines of YAML starting at column 0.
type rendered struct {
	lines []string
	form  form
}

// marshal writes v as YAML: in block style as the library writes it, or in
// flow style on one line. Numbers are written as people write them (30, not
// 30.0), and money exactly.
func (ed *editor) marshal(v any, flow bool) (string, error) {
	if flow {
		tree, err := ed.ordered(v)
		if err != nil {
			return "", err
		}
		return flowText(tree), nil
	}
	b, err := yaml.MarshalWithOptions(v, yaml.Indent(ed.d.indent), yaml.UseLiteralStyleIfMultiline(true),
		yaml.CustomMarshaler[float64](func(f float64) ([]byte, error) { return []byte(editFloat(f)), nil }),
		yaml.CustomMarshaler[gpuwarden.Micros](func(m gpuwarden.Micros) ([]byte, error) { return []byte(m.String()), nil }))
	if err != nil {
		return "", ed.badValue(err)
	}
	return strings.TrimRight(string(b), "\n"), nil
}

// ordered is v as the file will decode it, with mappings in their order.
func (ed *editor) ordered(v any) (any, error) {
	b, err := ed.marshal(v, false)
	if err != nil {
		return nil, err
	}
	var tree any
	if err := yaml.UnmarshalWithOptions([]byte(b), &tree, yaml.UseOrderedMap()); err != nil {
		return nil, ed.badValue(err)
	}
	return tree, nil
}

// badValue reports a Value that YAML cannot hold.
func (ed *editor) badValue(err error) error {
	return ed.fail("cannot write the value: %s", flatLine(err.Error())).
		WithHint("give a value YAML can hold: text, a number, a list, a map or a struct with yaml tags")
}

// editFloat writes a float so that YAML reads the same number back.
func editFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return ".nan"
	case math.IsInf(f, 1):
		return ".inf"
	case math.IsInf(f, -1):
		return "-.inf"
	}
	return yamlNumber(f)
}

// flowText writes a decoded value on one line in flow style. The library's
// flow output puts multi-line text in a block scalar, which flow style does
// not allow, so the few shapes a decoded value has are written here.
func flowText(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case uint64:
		return strconv.FormatUint(x, 10)
	case int64:
		return strconv.FormatInt(x, 10)
	case int:
		return strconv.Itoa(x)
	case float64:
		return editFloat(x)
	case string:
		return flowString(x)
	case []any:
		parts := make([]string, len(x))
		for i, it := range x {
			parts[i] = flowText(it)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case yaml.MapSlice:
		parts := make([]string, len(x))
		for i, it := range x {
			parts[i] = flowText(fmt.Sprint(it.Key)) + ": " + flowText(it.Value)
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = flowText(k) + ": " + flowText(x[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return flowString(fmt.Sprint(v))
}

// flowString writes text plain where the library would in block style and
// flow style allows it (72h, g6.xlarge, eu-west-1), and quoted otherwise.
func flowString(s string) string {
	b, err := yaml.Marshal(s)
	plain := strings.TrimSuffix(string(b), "\n")
	if err == nil && plain == s && !strings.ContainsAny(s, ",[]{}\n\r") {
		return s
	}
	return doubleQuoted(s)
}

// render writes a value for a slot. Lists of plain values are written in
// flow style ([50, 80, 100]), as the starter file writes them, unless they
// replace a block list; mappings and lists of mappings are written as blocks.
func (ed *editor) render(v any, keepBlockList bool) (rendered, error) {
	tree, err := ed.ordered(v)
	if err != nil {
		return rendered{}, err
	}
	return ed.renderTree(tree, keepBlockList)
}

// renderTree writes a decoded value as lines starting at column 0.
func (ed *editor) renderTree(t any, keepBlockList bool) (rendered, error) {
	switch x := t.(type) {
	case yaml.MapSlice:
		if len(x) == 0 {
			return rendered{lines: []string{"{}"}, form: inline}, nil
		}
		var lines []string
		for _, it := range x {
			k := flowText(fmt.Sprint(it.Key))
			sub, err := ed.renderTree(it.Value, false)
			if err != nil {
				return rendered{}, err
			}
			switch sub.form {
			case blockMap:
				lines = append(append(lines, k+":"), indentLines(sub.lines, ed.d.indent)...)
			case blockSeq:
				lines = append(append(lines, k+":"), indentLines(sub.lines, ed.seqStep())...)
			default:
				lines = append(append(lines, k+": "+sub.lines[0]), sub.lines[1:]...)
			}
		}
		return rendered{lines: lines, form: blockMap}, nil
	case []any:
		if len(x) == 0 {
			return rendered{lines: []string{"[]"}, form: inline}, nil
		}
		if !keepBlockList && plainItems(x) {
			return rendered{lines: []string{flowText(x)}, form: inline}, nil
		}
		var lines []string
		for _, it := range x {
			sub, err := ed.renderTree(it, false)
			if err != nil {
				return rendered{}, err
			}
			lines = append(append(lines, "- "+sub.lines[0]), indentLines(sub.lines[1:], 2)...)
		}
		return rendered{lines: lines, form: blockSeq}, nil
	case string:
		if ed.quoteText && strings.ContainsAny(x, "\n\r") {
			return rendered{lines: []string{flowString(x)}, form: inline}, nil
		}
		// The library knows which text needs quotes in block style, and
		// writes text with line breaks as a block scalar.
		b, err := ed.marshal(x, false)
		if err != nil {
			return rendered{}, err
		}
		return rendered{lines: strings.Split(b, "\n"), form: inline}, nil
	}
	return rendered{lines: []string{flowText(t)}, form: inline}, nil
}

// plainItems reports whether every item of a list is a one-line scalar.
func plainItems(items []any) bool {
	for _, it := range items {
		switch x := it.(type) {
		case yaml.MapSlice, []any, map[string]any:
			return false
		case string:
			if strings.ContainsAny(x, "\n\r") {
				return false
			}
		}
	}
	return true
}

// pairLines writes "k1:\n  k2: value" for keys to be created, at column 0.
func (ed *editor) pairLines(keys []string, leaf any) ([]string, error) {
	k := flowText(keys[0])
	if len(keys) > 1 {
		sub, err := ed.pairLines(keys[1:], leaf)
		if err != nil {
			return nil, err
		}
		return append([]string{k + ":"}, indentLines(sub, ed.d.indent)...), nil
	}
	r, err := ed.render(leaf, false)
	if err != nil {
		return nil, err
	}
	switch r.form {
	case blockMap:
		return append([]string{k + ":"}, indentLines(r.lines, ed.d.indent)...), nil
	case blockSeq:
		return append([]string{k + ":"}, indentLines(r.lines, ed.seqStep())...), nil
	}
	return append([]string{k + ": " + r.lines[0]}, r.lines[1:]...), nil
}

// seqStep is how far a new block list's dashes sit right of its key.
func (ed *editor) seqStep() int {
	if ed.d.seqIndent {
		return ed.d.indent
	}
	return 0
}

// chain is the value for keys to be created, as one mapping value.
func chain(keys []string, leaf any) any {
	if len(keys) == 0 {
		return leaf
	}
	return yaml.MapSlice{{Key: keys[0], Value: chain(keys[1:], leaf)}}
}

// indentLines moves lines right by n spaces; empty lines stay empty, as a
// block scalar's blank lines need no indentation.
func indentLines(lines []string, n int) []string {
	out := make([]string, len(lines))
	pad := strings.Repeat(" ", n)
	for i, l := range lines {
		if l != "" {
			out[i] = pad + l
		}
	}
	return out
}

// joinFrom joins a value's lines, indenting the lines after the first by n.
func (ed *editor) joinFrom(lines []string, n int) string {
	return strings.Join(append(lines[:1:1], indentLines(lines[1:], n)...), ed.d.eol)
}

// Splices.

func (ed *editor) add(at, end int, text string) {
	ed.splices = append(ed.splices, spliceOp{at: at, end: end, text: text})
}

// setSlot replaces the value in s with keys (to be created) holding leaf,
// or with leaf itself when keys is empty.
func (ed *editor) setSlot(s *slot, keys []string, leaf any) error {
	d := ed.d
	if ed.status == "" {
		ed.status = "set"
	}
	vs, ve, has, err := d.span(s.value)
	if err != nil {
		return ed.unsafe()
	}
	if s.flow {
		t, err := ed.marshal(chain(keys, leaf), true)
		if err != nil {
			return err
		}
		if has {
			ed.add(vs, ve, t)
		} else {
			ed.add(s.prefixEnd, s.prefixEnd, " "+t)
		}
		return nil
	}
	var r rendered
	if len(keys) > 0 {
		lines, err := ed.pairLines(keys, leaf)
		if err != nil {
			return err
		}
		r = rendered{lines: lines, form: blockMap}
	} else {
		old, isSeq := unwrapValue(s.value).(*ast.SequenceNode)
		if r, err = ed.render(leaf, isSeq && !old.IsFlowStyle); err != nil {
			return err
		}
	}
	sameLine := has && d.line(vs) == d.line(s.prefixEnd)
	if has && !sameLine && strings.TrimLeft(string(d.src[d.starts[d.line(vs)]:vs]), " ") != "" {
		return ed.unsafe()
	}
	if s.item {
		// An item's value starts after its dash, whatever its shape; its
		// further lines line up with its first.
		switch {
		case sameLine:
			ed.putInline(vs, ve, "", r.lines, d.col(vs))
		case has:
			ed.putInline(s.prefixEnd, d.lineEnd(d.line(ve)), " ", r.lines, d.col(s.prefixEnd)+1)
		default:
			ed.putInline(s.prefixEnd, s.prefixEnd, " ", r.lines, d.col(s.prefixEnd)+1)
		}
		return nil
	}
	if r.form == inline {
		switch {
		case sameLine:
			ed.putInline(vs, ve, "", r.lines, s.ownerCol)
		case has:
			// A block value below the key becomes a value on the key's line;
			// comments between them stay.
			ed.putInline(s.prefixEnd, s.prefixEnd, " ", r.lines, s.ownerCol)
			ed.deleteLines(d.line(vs), d.line(ve))
		default:
			ed.putInline(s.prefixEnd, s.prefixEnd, " ", r.lines, s.ownerCol)
		}
		return nil
	}
	block := strings.Join(indentLines(r.lines, ed.childCol(s, r.form)), d.eol)
	switch {
	case sameLine:
		// The old value goes; a comment after it stays on the key's line.
		ed.add(s.prefixEnd, ve, "")
		ed.add(d.lineEnd(d.line(ve)), d.lineEnd(d.line(ve)), d.eol+block)
	case has:
		ed.add(d.starts[d.line(vs)], d.lineEnd(d.line(ve)), block)
	default:
		at := d.lineEnd(d.line(s.prefixEnd))
		ed.add(at, at, d.eol+block)
	}
	return nil
}

// putInline writes a value's lines in place of src[at:end] (after prefix):
// the first line there, the others after the end of that line, so that a
// comment after the old value stays on the first line rather than landing
// inside a block scalar. The other lines are indented by cont.
func (ed *editor) putInline(at, end int, prefix string, lines []string, cont int) {
	end, pad := ed.d.keepCommentColumn(at, end, prefix+lines[0])
	ed.add(at, end, prefix+lines[0]+pad)
	if len(lines) > 1 {
		le := ed.d.lineEnd(ed.d.line(end))
		ed.add(le, le, ed.d.eol+strings.Join(indentLines(lines[1:], cont), ed.d.eol))
	}
}

// keepCommentColumn keeps a comment after a value where it was when the
// value's text src[at:end] becomes text: "limit: 0      # per month" set to
// 100 is "limit: 100    # per month", the comment's column unmoved, as a
// person would edit it (at least one space stays). It returns the end of
// the bytes to replace, past the blanks it takes away, and the blanks to
// add after text.
func (d *yamlDoc) keepCommentColumn(at, end int, text string) (int, string) {
	blanks := 0
	for end+blanks < len(d.src) && d.src[end+blanks] == ' ' {
		blanks++
	}
	if blanks == 0 || end+blanks >= len(d.src) || d.src[end+blanks] != '#' {
		return end, ""
	}
	grow := utf8.RuneCountInString(text) - utf8.RuneCount(d.src[at:end])
	switch {
	case grow > 0:
		return end + min(grow, blanks-1), ""
	case grow < 0:
		return end, strings.Repeat(" ", -grow)
	}
	return end, ""
}

// childCol is the column of a new block value's lines: where the old block
// value's lines were, or one step right of the key.
func (ed *editor) childCol(s *slot, f form) int {
	old := unwrapValue(s.value)
	switch f {
	case blockMap:
		if m, ok := old.(*ast.MappingNode); ok && !m.IsFlowStyle {
			if c := ed.d.nodeCol(m); c > s.ownerCol {
				return c
			}
		}
		return s.ownerCol + ed.d.indent
	default:
		if q, ok := old.(*ast.SequenceNode); ok && !q.IsFlowStyle {
			if c := ed.d.nodeCol(q); c >= s.ownerCol {
				return c
			}
		}
		return s.ownerCol + ed.seqStep()
	}
}

// deleteLines removes lines first..last whole, with one line ending.
func (ed *editor) deleteLines(first, last int) {
	d := ed.d
	if last+1 < len(d.starts) {
		ed.add(d.starts[first], d.starts[last+1], "")
		return
	}
	// The last line has no line ending: take the one before the first.
	at := d.starts[first]
	if first > 0 {
		at = d.lineEnd(first - 1)
	}
	ed.add(at, len(d.src), "")
}

// appendTo adds the value as one item to the list in s.
func (ed *editor) appendTo(s *slot) error {
	d := ed.d
	old, _ := getIn(d.tree, ed.segs)
	ed.oldText = ed.show(s.value, old)
	if isEmpty(s.value) {
		return ed.setSlot(s, nil, ed.leaf())
	}
	seq, ok := unwrapValue(s.value).(*ast.SequenceNode)
	if !ok {
		return ed.notA(s.path, s.value, "list")
	}
	ed.status = "append"
	if items, ok := old.([]any); ok {
		for _, it := range items {
			if sameValue(it, ed.norm) {
				ed.status = "listed"
				return nil
			}
		}
	}
	if seq.IsFlowStyle || s.flow {
		t, err := ed.marshal(ed.e.Value, true)
		if err != nil {
			return err
		}
		if len(seq.Values) == 0 {
			at := d.tokStart(seq.End)
			if at < 0 {
				return ed.unsafe()
			}
			ed.add(at, at, t)
			return nil
		}
		_, e, ok, err := d.span(seq.Values[len(seq.Values)-1])
		if err != nil || !ok {
			return ed.unsafe()
		}
		ed.add(e, e, ", "+t)
		return nil
	}
	last := len(seq.Values) - 1
	if len(seq.Entries) != len(seq.Values) {
		return ed.unsafe()
	}
	_, end, has, err := d.span(seq.Values[last])
	if err != nil {
		return ed.unsafe()
	}
	if !has {
		if end, err = d.tokEnd(seq.Entries[last].Start); err != nil {
			return ed.unsafe()
		}
	}
	dash := d.tokStart(seq.Entries[last].Start)
	if dash < 0 {
		return ed.unsafe()
	}
	r, err := ed.render(ed.e.Value, false)
	if err != nil {
		return err
	}
	dc := d.col(dash)
	at := d.lineEnd(d.line(end))
	ed.add(at, at, d.eol+strings.Repeat(" ", dc)+"- "+ed.joinFrom(r.lines, dc+2))
	return nil
}

// insertKey adds the path from step i on to mapping m, which lacks it.
func (ed *editor) insertKey(m *ast.MappingNode, owner *slot, i int) error {
	d := ed.d
	keys, err := ed.keysFrom(i)
	if err != nil {
		return err
	}
	leaf := ed.leaf()
	if m.IsFlowStyle || owner != nil && owner.flow {
		t, err := ed.marshal(chain(keys[1:], leaf), true)
		if err != nil {
			return err
		}
		pair := flowText(keys[0]) + ": " + t
		if len(m.Values) == 0 {
			at := d.tokStart(m.End)
			if at < 0 {
				return ed.unsafe()
			}
			ed.add(at, at, pair)
			return nil
		}
		_, e, ok, err := d.span(m.Values[len(m.Values)-1])
		if err != nil || !ok {
			return ed.unsafe()
		}
		ed.add(e, e, ", "+pair)
		return nil
	}
	if len(m.Values) == 0 {
		return ed.unsafe()
	}
	cc := d.nodeCol(m)
	_, end, ok, err := d.span(m.Values[len(m.Values)-1])
	if err != nil || !ok || cc < 0 {
		return ed.unsafe()
	}
	lines, err := ed.pairLines(keys, leaf)
	if err != nil {
		return err
	}
	from := 0
	if owner != nil && owner.owner != nil {
		from = d.line(d.tokStart(owner.owner)) + 1
	}
	at := d.lineEnd(d.line(end))
	if l, ok := d.commentedKey(keys[0], cc, from, d.line(end)); ok {
		at = d.lineEnd(l)
	}
	ed.add(at, at, d.eol+strings.Join(indentLines(lines, cc), d.eol))
	return nil
}

// insertRoot adds the path from step i on to a document with no fields yet.
func (ed *editor) insertRoot(i int) error {
	d := ed.d
	keys, err := ed.keysFrom(i)
	if err != nil {
		return err
	}
	lines, err := ed.pairLines(keys, ed.leaf())
	if err != nil {
		return err
	}
	text := strings.Join(lines, d.eol)
	if l, ok := d.commentedKey(keys[0], 0, 0, len(d.starts)-1); ok {
		ed.add(d.lineEnd(l), d.lineEnd(l), d.eol+text)
		return nil
	}
	n := len(d.src)
	switch {
	case n == 0:
		ed.add(0, 0, text+d.eol)
	case d.src[n-1] == '\n':
		ed.add(n, n, text+d.eol)
	default:
		ed.add(n, n, d.eol+text)
	}
	return nil
}

// commentedKey finds where key is written commented out ("# key: 30") among
// a mapping's lines, whose keys start at column cc; the mapping's lines run
// from line from to line last and on through the comments right after it.
// The new key goes after the last such line, and after the commented-out
// lines nested under it, so it lands where the starter file documents it.
func (d *yamlDoc) commentedKey(key string, cc, from, last int) (int, bool) {
	for l := last + 1; l < len(d.starts); l++ {
		if c, ok := d.comments[l]; ok && c >= cc {
			last = l
			continue
		}
		if strings.TrimSpace(string(d.src[d.starts[l]:d.lineEnd(l)])) != "" {
			break
		}
	}
	re := regexp.MustCompile(`^#( ?)` + regexp.QuoteMeta(key) + `:(\s|$)`)
	for l := last; l >= from; l-- {
		if c, ok := d.comments[l]; !ok || c != cc {
			continue
		}
		text := strings.TrimLeft(string(d.src[d.starts[l]:d.lineEnd(l)]), " \t")
		m := re.FindStringSubmatch(text)
		if m == nil {
			continue
		}
		// "# data:" with its fields commented out below it, further right
		// after the "#": the new key goes after the whole example.
		if rest := strings.TrimSpace(text[len(m[0]):]); rest == "" || strings.HasPrefix(rest, "#") {
			for l+1 < len(d.starts) {
				if c, ok := d.comments[l+1]; !ok || c != cc {
					break
				}
				next := strings.TrimLeft(string(d.src[d.starts[l+1]:d.lineEnd(l+1)]), " \t")[1:]
				if len(next)-len(strings.TrimLeft(next, " ")) <= len(m[1]) || strings.TrimSpace(next) == "" {
					break
				}
				l++
			}
		}
		return l, true
	}
	return 0, false
}

// splice applies ops, which do not overlap, to src.
func splice(src []byte, ops []spliceOp) []byte {
	sort.SliceStable(ops, func(i, j int) bool {
		if ops[i].at != ops[j].at {
			return ops[i].at < ops[j].at
		}
		return ops[i].end < ops[j].end
	})
	var b bytes.Buffer
	pos := 0
	for _, op := range ops {
		b.Write(src[pos:op.at])
		b.WriteString(op.text)
		pos = op.end
	}
	b.Write(src[pos:])
	return b.Bytes()
}

// verify reads the edited file back: it must parse, and decode to the old
// document with only this edit made. An anchor shared through aliases, or a
// layout the splices misjudged, fails here instead of reaching the disk.
func (ed *editor) verify(out []byte) error {
	nd, err := loadDoc(out, "")
	if err != nil {
		return &readBackError{gpuwarden.Errorf(gpuwarden.EInternal, "cannot %s %s: the edited file would not read back", ed.verb(), ed.e.Path).
			WithHint("make this change by hand; the edit would have broken the file")}
	}
	// A fresh copy of the old tree: the decoder shares one value between an
	// anchor and its aliases, and the edit must change only its own path.
	want := deepCopy(ed.d.tree)
	v := ed.norm
	if ed.e.Append {
		old, _ := getIn(want, ed.segs)
		items, _ := old.([]any)
		v = append(items, ed.norm)
	}
	if want, ok := setIn(want, ed.segs, v); ok && sameValue(nd.tree, want) {
		return nil
	}
	if ed.d.anchors {
		return &readBackError{ed.fail("the value is shared through an anchor (&name) and its aliases, so the edit would change more than %s", ed.e.Path).
			WithHint("make this change by hand")}
	}
	return &readBackError{ed.unsafe()}
}

// deepCopy copies a decoded tree, so that no two paths share a value.
func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, w := range x {
			m[k] = deepCopy(w)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, w := range x {
			l[i] = deepCopy(w)
		}
		return l
	}
	return v
}

// getIn returns the decoded value at the path.
func getIn(tree any, segs []pathSeg) (any, bool) {
	for _, s := range segs {
		switch x := tree.(type) {
		case map[string]any:
			v, ok := x[s.key]
			if !ok || s.index >= 0 {
				return nil, false
			}
			tree = v
		case []any:
			if s.index < 0 || s.index >= len(x) {
				return nil, false
			}
			tree = x[s.index]
		default:
			return nil, false
		}
	}
	return tree, true
}

// setIn sets the decoded value at the path, making mappings on the way.
func setIn(tree any, segs []pathSeg, v any) (any, bool) {
	if len(segs) == 0 {
		return v, true
	}
	s := segs[0]
	if s.index >= 0 {
		x, ok := tree.([]any)
		if !ok || s.index >= len(x) {
			return nil, false
		}
		nv, ok := setIn(x[s.index], segs[1:], v)
		x[s.index] = nv
		return x, ok
	}
	m, ok := tree.(map[string]any)
	if !ok {
		if tree != nil {
			return nil, false
		}
		m = map[string]any{}
	}
	nv, ok := setIn(m[s.key], segs[1:], v)
	m[s.key] = nv
	return m, ok
}

// sameValue compares decoded values, numbers by value: 30 and 30.0 are the
// same setting.
func sameValue(a, b any) bool {
	if x, ok := exactNumber(a); ok {
		y, ok := exactNumber(b)
		return ok && x.Cmp(y) == 0
	}
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !sameValue(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameValue(x[i], y[i]) {
				return false
			}
		}
		return true
	case float64: // NaN, which exactNumber leaves out
		y, ok := b.(float64)
		return ok && math.IsNaN(x) && math.IsNaN(y)
	}
	return reflect.DeepEqual(a, b)
}

// number returns a decoded number exactly, or false for anything else.
func exactNumber(v any) (*big.Float, bool) {
	switch x := v.(type) {
	case uint64:
		return new(big.Float).SetUint64(x), true
	case int64:
		return new(big.Float).SetInt64(x), true
	case int:
		return new(big.Float).SetInt64(int64(x)), true
	case float64:
		if math.IsNaN(x) {
			return nil, false
		}
		return new(big.Float).SetFloat64(x), true
	}
	return nil, false
}

// Describe's wording.

// maxShown keeps a described value to about one terminal line.
const maxShown = 60

// show is a value as Describe prints it: as written when it is on one line,
// else in flow style.
func (ed *editor) show(n ast.Node, decoded any) string {
	if isEmpty(n) {
		return ""
	}
	if s, e, ok, err := ed.d.span(n); err == nil && ok && ed.d.line(s) == ed.d.line(e) {
		return clipShown(string(ed.d.src[s:e]))
	}
	return clipShown(flowText(decoded))
}

// clipShown shortens s to maxShown characters.
func clipShown(s string) string {
	if utf8.RuneCountInString(s) <= maxShown {
		return s
	}
	r := []rune(s)
	return string(r[:maxShown-1]) + "…"
}

func (ed *editor) describe() string {
	nv, err := ed.marshal(ed.e.Value, true)
	if err != nil {
		nv = fmt.Sprint(ed.e.Value)
	}
	nv = clipShown(nv)
	switch ed.status {
	case "unchanged":
		return fmt.Sprintf("%s: %s (unchanged)", ed.e.Path, ed.oldText)
	case "append":
		return fmt.Sprintf("%s: append %s", ed.e.Path, nv)
	case "listed":
		return fmt.Sprintf("%s: %s (already listed)", ed.e.Path, nv)
	}
	old := ed.oldText
	if old == "" {
		old = "(unset)"
	}
	return fmt.Sprintf("%s: %s → %s", ed.e.Path, old, nv)
}
