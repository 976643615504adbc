package canary

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/yamlerr"
	"github.com/gpuwarden/gpuwarden/internal/yamlread"
)

// LockVersion is the lock format this package writes and reads; ReadLock
// refuses any other rather than guess at fields it does not know.
const LockVersion = 1

// MaxLockSize is the largest lock file ReadLock accepts, 256 KiB; a lock
// lists a few dozen facts in a few KiB, so anything bigger is the wrong file.
// The cap also bounds what reading a hostile file costs; yamlread holds the
// limits on nesting and size that every YAML file gpuwarden reads shares.
const MaxLockSize = 256 << 10

// lockFile is how yamlread reads a lock: its limits and their words.
var lockFile = yamlread.File{Kind: "lock file", MaxBytes: MaxLockSize,
	SizeHint: "a lock lists a few dozen facts; check that this is the right file"}

// lockHeader tells a reviewer what the file is and how to change a check
// without reading the code.
const lockHeader = `# gpuwarden.lock: the software stack a job was proven on. "gpuwarden lock"
# recorded it; "gpuwarden canary" checks it on every new box.
#
# Each field is a fact of the recorded box and a match rule that says how
# strictly another box must agree. To relax or tighten a check, edit its
# rule, for example:
#   driver.version: {value: "580.159.04", match: at-least}
# Rules: exact (the same value), same-major (the same part before the first
# dot), at-least (this version or newer), ignore (recorded, never checked).
# Delete a line to stop checking that fact.
`

// NewLock records facts as a version 1 lock, each with its DefaultMatch.
// The time is kept in UTC to the second, as the file shows it.
func NewLock(f gpuwarden.Facts, host string, now time.Time) *gpuwarden.Lock {
	l := &gpuwarden.Lock{Version: LockVersion, Created: now.UTC().Truncate(time.Second), Host: host,
		Fields: make(map[string]gpuwarden.LockField, len(f))}
	for k, v := range f {
		l.Fields[k] = gpuwarden.LockField{Value: v, Match: DefaultMatch(k)}
	}
	return l
}

// WriteLock writes l as gpuwarden.lock: a comment header, then version,
// created, host and one field per line, sorted, so that two locks diff line
// by line. Values are always quoted so that "13.0" stays text. It refuses a
// lock that ReadLock would refuse, so that a written file always reads back.
func WriteLock(w io.Writer, l *gpuwarden.Lock) error {
	if l == nil {
		return errors.New("write lock: no lock")
	}
	if l.Version != LockVersion {
		return fmt.Errorf("write lock: version %d: only version %d can be written", l.Version, LockVersion)
	}
	keys := make([]string, 0, len(l.Fields))
	for k, f := range l.Fields {
		if k == "" {
			return errors.New("write lock: a field has no name")
		}
		if !f.Match.Valid() {
			return fmt.Errorf("write lock: field %s: unknown rule %q", k, f.Match)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)

	var b bytes.Buffer
	b.WriteString(lockHeader)
	fmt.Fprintf(&b, "version: %d\n", l.Version)
	fmt.Fprintf(&b, "created: %s\n", l.Created.UTC().Format(time.RFC3339Nano))
	if l.Host != "" {
		fmt.Fprintf(&b, "host: %s\n", quote(l.Host))
	}
	if len(keys) == 0 {
		b.WriteString("fields: {}\n")
	} else {
		b.WriteString("fields:\n")
	}
	for _, k := range keys {
		f := l.Fields[k]
		fmt.Fprintf(&b, "  %s: {value: %s, match: %s}\n", yamlKey(k), quote(f.Value), f.Match)
	}
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("write lock: %w", err)
	}
	return nil
}

var (
	plainKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_./-]*$`)
	// yamlWords are plain scalars YAML reads as something other than text.
	yamlWords = map[string]bool{"true": true, "false": true, "null": true, "yes": true, "no": true, "on": true,
		"off": true, "y": true, "n": true}
)

// yamlKey writes a fact key plain when YAML reads it back as the same text,
// and quoted otherwise.
func yamlKey(k string) string {
	if plainKey.MatchString(k) && !yamlWords[strings.ToLower(k)] {
		return k
	}
	return quote(k)
}

// quote writes s as a YAML double-quoted scalar on one line: printable
// characters as they are, everything else escaped. Invalid UTF-8, which YAML
// cannot hold, becomes U+FFFD.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == utf8.RuneError || r == '\ufeff' || !unicode.IsPrint(r):
			if r > 0xffff {
				fmt.Fprintf(&b, `\U%08x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// rulesHint lists the match rules for error hints.
var rulesHint = func() string {
	names := make([]string, len(gpuwarden.Matches))
	for i, m := range gpuwarden.Matches {
		names[i] = string(m)
	}
	return "use one of: " + strings.Join(names, ", ")
}()

const relockHint = "record a new lock with: gpuwarden lock"

// ReadLock decodes a lock file's contents. It is strict, because a lock
// that silently checks less than its author meant is worse than none:
// unknown keys, values that are not text, unknown rules and versions other
// than 1 are errors, and so is a file over MaxLockSize or past yamlread's
// limits on nesting (which the YAML library would otherwise take gigabytes
// to parse). Every error is an EInvalid *gpuwarden.Error whose message reads
// NAME:LINE:COL: FIELD: what is wrong; name is used only in messages
// (usually the path).
func ReadLock(name string, data []byte) (*gpuwarden.Lock, error) {
	// Duplicate keys are let through the parser and caught by the reader,
	// which knows the field's path and both positions.
	file, err := lockFile.Parse(data, parser.AllowDuplicateMapKey())
	if err != nil {
		var fe *yamlerr.FieldError
		if !errors.As(err, &fe) {
			fe = syntaxError(err)
		}
		return nil, fe.ToError(name)
	}
	body, fe := documentBody(file)
	if fe == nil {
		var l *gpuwarden.Lock
		if l, fe = readLock(body); fe == nil {
			return l, nil
		}
	}
	return nil, fe.ToError(name)
}

// syntaxError converts a parser error; the library's own Error() appends a
// multi-line source excerpt, so only its message and position are kept.
func syntaxError(err error) *yamlerr.FieldError {
	fe := &yamlerr.FieldError{At: yamlerr.Pos{Line: 1, Col: 1}, Field: "syntax error", Msg: err.Error(),
		Hint: "fix the YAML near here, or " + relockHint}
	var ye yaml.Error
	if errors.As(err, &ye) {
		fe.Msg = ye.GetMessage()
		if p := yamlerr.SyntaxPos(ye.GetToken()); p.Line > 0 && p.Col > 0 {
			fe.At = p
		}
	}
	if strings.Contains(fe.Msg, "'\t'") || strings.Contains(fe.Msg, "tab character") {
		fe.Hint = "indent with spaces; YAML does not allow tabs for indentation"
	}
	return fe
}

// documentBody returns the body of the one document in file.
func documentBody(file *ast.File) (ast.Node, *yamlerr.FieldError) {
	var body ast.Node
	for _, doc := range file.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		switch doc.Body.(type) {
		case *ast.NullNode, *ast.DirectiveNode, *ast.CommentGroupNode, *ast.CommentNode:
			continue
		}
		if body != nil {
			at := yamlerr.PosOr(doc.Body, yamlerr.Pos{Line: 1, Col: 1})
			if doc.Start != nil {
				at = yamlerr.TokenPos(doc.Start)
			}
			return nil, &yamlerr.FieldError{At: at, Msg: "lock file holds more than one YAML document",
				Hint: "keep one lock per file: remove the second \"---\" and what follows it"}
		}
		body = doc.Body
	}
	if body == nil {
		return nil, &yamlerr.FieldError{At: yamlerr.Pos{Line: 1, Col: 1}, Msg: "lock file is empty", Hint: relockHint}
	}
	return body, nil
}

// readLock reads the top-level mapping.
func readLock(body ast.Node) (*gpuwarden.Lock, *yamlerr.FieldError) {
	if fe := plain("", body, yamlerr.Pos{Line: 1, Col: 1}); fe != nil {
		return nil, fe
	}
	kvs, ok := pairs(body)
	if !ok {
		return nil, &yamlerr.FieldError{At: yamlerr.PosOr(body, yamlerr.Pos{Line: 1, Col: 1}),
			Msg:  "lock file must be a mapping with version:, created:, host: and fields:, not " + describe(body),
			Hint: relockHint}
	}
	l := &gpuwarden.Lock{}
	seen := map[string]yamlerr.Pos{}
	for _, kv := range kvs {
		key, keyAt, fe := readKey("", kv)
		if fe != nil {
			return nil, fe
		}
		if first, dup := seen[key]; dup {
			return nil, duplicate(fieldPath("", key), keyAt, first)
		}
		seen[key] = keyAt
		switch key {
		case "version":
			fe = readVersion(kv.Value, keyAt, l)
		case "created":
			fe = readCreated(kv.Value, keyAt, l)
		case "host":
			if !yamlerr.IsNull(kv.Value) {
				l.Host, fe = readText("host", kv.Value, keyAt)
			}
		case "fields":
			l.Fields, fe = readFields(kv.Value, keyAt)
		default:
			fe = &yamlerr.FieldError{At: keyAt, Field: fieldPath("", key), Msg: "unknown field",
				Hint: "a lock holds version, created, host and fields"}
		}
		if fe != nil {
			return nil, fe
		}
	}
	start := yamlerr.PosOr(body, yamlerr.Pos{Line: 1, Col: 1})
	if _, ok := seen["version"]; !ok {
		return nil, &yamlerr.FieldError{At: start, Field: "version", Msg: "missing",
			Hint: fmt.Sprintf("a lock file says which format it is in: version: %d", LockVersion)}
	}
	if _, ok := seen["fields"]; !ok {
		return nil, &yamlerr.FieldError{At: start, Field: "fields", Msg: "missing",
			Hint: "a lock lists its facts under fields:; " + relockHint}
	}
	return l, nil
}

func readVersion(n ast.Node, keyAt yamlerr.Pos, l *gpuwarden.Lock) *yamlerr.FieldError {
	if fe := plain("version", n, keyAt); fe != nil {
		return fe
	}
	i, ok := n.(*ast.IntegerNode)
	if s, isStr := n.(*ast.StringNode); isStr && !ok && s.Token != nil && s.Token.Type == token.StringType && wholeNumber.MatchString(s.Value) {
		// Digits beyond 64 bits are no number to the parser, yet a version.
		return &yamlerr.FieldError{At: yamlerr.PosOr(n, keyAt), Field: "version", Msg: "unsupported version " + clip(s.Value),
			Hint: fmt.Sprintf("this gpuwarden reads lock files of version %d; upgrade gpuwarden, or %s", LockVersion, relockHint)}
	}
	if !ok {
		return &yamlerr.FieldError{At: yamlerr.PosOr(n, keyAt), Field: "version", Msg: "must be a whole number, not " + describe(n),
			Hint: fmt.Sprintf("write version: %d", LockVersion)}
	}
	// A version too large for int64 is only ever newer.
	v, newer := int64(-1), true
	switch x := i.Value.(type) {
	case int64:
		v, newer = x, x > LockVersion
	case uint64:
		if x <= LockVersion {
			v, newer = int64(x), false
		}
	}
	if v != LockVersion {
		hint := fmt.Sprintf("this gpuwarden reads lock files of version %d; %s", LockVersion, relockHint)
		if newer {
			hint = fmt.Sprintf("this gpuwarden reads lock files of version %d; upgrade gpuwarden, or %s", LockVersion, relockHint)
		}
		return &yamlerr.FieldError{At: yamlerr.PosOr(n, keyAt), Field: "version", Msg: "unsupported version " + clip(i.GetToken().Value), Hint: hint}
	}
	l.Version = int(v)
	return nil
}

var wholeNumber = regexp.MustCompile(`^[0-9]+$`)

// createdExample is how an error shows a valid time.
const createdExample = "2026-11-29T10:00:00Z"

func readCreated(n ast.Node, keyAt yamlerr.Pos, l *gpuwarden.Lock) *yamlerr.FieldError {
	if fe := plain("created", n, keyAt); fe != nil {
		return fe
	}
	bad := &yamlerr.FieldError{At: yamlerr.PosOr(n, keyAt), Field: "created", Msg: "must be an RFC 3339 time such as " + createdExample + ", not " + describe(n),
		Hint: "write the time in UTC as " + createdExample}
	s, ok := n.(*ast.StringNode)
	if !ok {
		return bad
	}
	t, err := time.Parse(time.RFC3339Nano, s.Value)
	if err != nil {
		return bad
	}
	l.Created = t.UTC()
	return nil
}

// readFields reads the facts, one mapping of value and match each.
func readFields(n ast.Node, keyAt yamlerr.Pos) (map[string]gpuwarden.LockField, *yamlerr.FieldError) {
	if fe := plain("fields", n, keyAt); fe != nil {
		return nil, fe
	}
	kvs, ok := pairs(n)
	if !ok {
		at := yamlerr.PosOr(n, keyAt)
		if yamlerr.IsNull(n) {
			at = keyAt // an empty value's position is wherever the parser gave up
		}
		return nil, &yamlerr.FieldError{At: at, Field: "fields", Msg: "must be a mapping of facts, not " + describe(n),
			Hint: `write one fact per line, indented: driver.version: {value: "580.159.04", match: same-major}; fields: {} checks nothing`}
	}
	out := make(map[string]gpuwarden.LockField, len(kvs))
	seen := map[string]yamlerr.Pos{}
	for _, kv := range kvs {
		key, at, fe := readKey("fields", kv)
		if fe != nil {
			return nil, fe
		}
		path := fieldPath("fields", key)
		if key == "" {
			return nil, &yamlerr.FieldError{At: at, Field: path, Msg: "a fact needs a name",
				Hint: "name the fact before the colon, as in driver.version:"}
		}
		if first, dup := seen[key]; dup {
			return nil, duplicate(path, at, first)
		}
		seen[key] = at
		f, fe := readField(path, kv.Value, at)
		if fe != nil {
			return nil, fe
		}
		out[key] = f
	}
	return out, nil
}

// fieldHint shows the shape of one field.
const fieldHint = `write a fact as {value: "580.159.04", match: same-major}`

// readField reads {value: "...", match: RULE}; both are required, because a
// field that omits its rule was most likely cut short while editing.
func readField(path string, n ast.Node, keyAt yamlerr.Pos) (gpuwarden.LockField, *yamlerr.FieldError) {
	var f gpuwarden.LockField
	if fe := plain(path, n, keyAt); fe != nil {
		return f, fe
	}
	kvs, ok := pairs(n)
	if !ok {
		at := yamlerr.PosOr(n, keyAt)
		if yamlerr.IsNull(n) {
			at = keyAt
		}
		return f, &yamlerr.FieldError{At: at, Field: path, Msg: "must be a mapping of value and match, not " + describe(n), Hint: fieldHint}
	}
	seen := map[string]yamlerr.Pos{}
	for _, kv := range kvs {
		key, at, fe := readKey(path, kv)
		if fe != nil {
			return f, fe
		}
		child := fieldPath(path, key)
		if first, dup := seen[key]; dup {
			return f, duplicate(child, at, first)
		}
		seen[key] = at
		switch key {
		case "value":
			f.Value, fe = readText(child, kv.Value, at)
		case "match":
			f.Match, fe = readRule(child, kv.Value, at)
		default:
			fe = &yamlerr.FieldError{At: at, Field: child, Msg: "unknown field", Hint: "a fact holds value and match; " + fieldHint}
		}
		if fe != nil {
			return f, fe
		}
	}
	for _, k := range []string{"value", "match"} {
		if _, ok := seen[k]; !ok {
			return f, &yamlerr.FieldError{At: keyAt, Field: path, Msg: "missing " + k, Hint: fieldHint}
		}
	}
	return f, nil
}

// readText reads a text value. Numbers and booleans are refused rather than
// converted, because YAML would rewrite them ("13.0" → 13) and the lock
// would no longer say what the file says.
func readText(path string, n ast.Node, keyAt yamlerr.Pos) (string, *yamlerr.FieldError) {
	if fe := plain(path, n, keyAt); fe != nil {
		return "", fe
	}
	switch s := n.(type) {
	case *ast.StringNode:
		return s.Value, nil
	case *ast.LiteralNode:
		if s.Value != nil {
			return s.Value.Value, nil
		}
		return "", nil
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
		return "", &yamlerr.FieldError{At: yamlerr.PosOr(n, keyAt), Field: path, Msg: "must be text, not " + describe(n),
			Hint: fmt.Sprintf("put it in quotes: %s", quote(n.GetToken().Value))}
	case *ast.NullNode:
		// The parser makes "value:", "value: null" and "value: ~" the same
		// node, so one hint covers all three.
		return "", &yamlerr.FieldError{At: keyAt, Field: path, Msg: "must be text, not empty",
			Hint: `write "" for an empty value, or put a value such as "null" in quotes`}
	}
	return "", &yamlerr.FieldError{At: yamlerr.PosOr(n, keyAt), Field: path, Msg: "must be text, not " + describe(n),
		Hint: "write the value in double quotes"}
}

// readRule reads a match rule.
func readRule(path string, n ast.Node, keyAt yamlerr.Pos) (gpuwarden.Match, *yamlerr.FieldError) {
	if fe := plain(path, n, keyAt); fe != nil {
		return "", fe
	}
	switch s := n.(type) {
	case *ast.StringNode:
		if m := gpuwarden.Match(s.Value); m.Valid() {
			return m, nil
		}
		return "", &yamlerr.FieldError{At: yamlerr.PosOr(n, keyAt), Field: path, Msg: fmt.Sprintf("unknown rule %s", quote(clip(s.Value))), Hint: rulesHint}
	case *ast.NullNode:
		return "", &yamlerr.FieldError{At: keyAt, Field: path, Msg: "missing rule", Hint: rulesHint}
	}
	return "", &yamlerr.FieldError{At: yamlerr.PosOr(n, keyAt), Field: path, Msg: "must be a rule, not " + describe(n), Hint: rulesHint}
}

// plain refuses anchors, aliases and tags: a lock is written by a program
// and read by people, and none of them makes it clearer.
func plain(path string, n ast.Node, keyAt yamlerr.Pos) *yamlerr.FieldError {
	switch n.(type) {
	case *ast.AnchorNode, *ast.AliasNode:
		return &yamlerr.FieldError{At: yamlerr.PosOr(n, keyAt), Field: path, Msg: "anchors and aliases are not supported in a lock file",
			Hint: "write the value out"}
	case *ast.TagNode:
		return &yamlerr.FieldError{At: yamlerr.PosOr(n, keyAt), Field: path, Msg: "YAML tags are not supported in a lock file",
			Hint: "remove the tag; every value is text"}
	}
	return nil
}

// readKey returns the text of a mapping key; keys must be plain scalars.
func readKey(path string, kv *ast.MappingValueNode) (string, yamlerr.Pos, *yamlerr.FieldError) {
	at := yamlerr.PosOr(kv, yamlerr.Pos{})
	var keyNode ast.Node = kv.Key
	if explicit, ok := keyNode.(*ast.MappingKeyNode); ok { // "? key"
		keyNode = explicit.Value
	}
	if keyNode != nil {
		at = yamlerr.PosOr(keyNode, at)
	}
	switch k := keyNode.(type) {
	case *ast.StringNode:
		return k.Value, at, nil
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.NullNode, *ast.InfinityNode, *ast.NanNode:
		if tk := k.GetToken(); tk != nil {
			return tk.Value, at, nil
		}
		return "", at, nil
	}
	return "", at, &yamlerr.FieldError{At: at, Field: path, Msg: "keys must be plain names",
		Hint: "write each key as a name followed by a colon, as in driver.version:"}
}

func duplicate(path string, at, first yamlerr.Pos) *yamlerr.FieldError {
	return &yamlerr.FieldError{At: at, Field: path, Msg: fmt.Sprintf("given twice (first at %d:%d)", first.Line, first.Col),
		Hint: "each key may appear once; remove one of them"}
}

// pathKey matches the keys a path shows as they are; dots are kept because
// fact keys are dotted ("fields.gpu.model.match").
var pathKey = regexp.MustCompile(`^[A-Za-z0-9_./-]+$`)

// fieldPath appends key to path, quoting keys that would break the
// one-line message or hide where the key ends.
func fieldPath(path, key string) string {
	if !pathKey.MatchString(key) {
		key = strconv.Quote(clip(key))
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// pairs returns the key/value pairs of a mapping node; the library
// represents a one-pair mapping either way.
func pairs(n ast.Node) ([]*ast.MappingValueNode, bool) {
	switch m := n.(type) {
	case *ast.MappingNode:
		return m.Values, true
	case *ast.MappingValueNode:
		return []*ast.MappingValueNode{m}, true
	}
	return nil, false
}

// describe names what the file holds, for "must be X, not Y" messages.
func describe(n ast.Node) string {
	switch s := n.(type) {
	case nil, *ast.NullNode:
		return "empty"
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.StringNode:
		return "text " + strconv.Quote(clip(s.Value))
	case *ast.LiteralNode:
		return "a block of text"
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
		if tk := n.GetToken(); tk != nil {
			return clip(tk.Value)
		}
	}
	return "a " + strings.ToLower(n.Type().String())
}
