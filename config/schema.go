package config

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"

	"github.com/gpuwarden/gpuwarden"
	namesuggest "github.com/gpuwarden/gpuwarden/internal/suggest"
	"github.com/gpuwarden/gpuwarden/internal/yamlerr"
)

// The shape check walks the YAML syntax tree alongside the Plan type (read by
// reflection from its yaml tags, so a new field needs no change here). It
// rejects what does not fit with the field's path and position, and records
// where every field was written so that later validation can point at it.

// maxDepth bounds the walk; the Plan is four levels deep, so only aliases that
// refer to themselves can go further.
const maxDepth = 32

// index maps each field path written in the file ("workload.params_b",
// "budget.alerts_percent[1]") to where it was written.
type index map[string]*entry

// entry is where one field was written and how.
type entry struct {
	key   yamlerr.Pos // the key; for list items, the item
	val   yamlerr.Pos // the scalar value; the key for mappings, lists and nulls
	zero  bool        // a number written as 0
	empty bool        // a list or mapping written as [] or {}
}

// has reports whether the file wrote the field at all.
func (ix index) has(path string) bool { return ix[path] != nil }

// zero reports whether the file wrote the field as the number 0.
func (ix index) zero(path string) bool { e := ix[path]; return e != nil && e.zero }

// empty reports whether the file wrote the field as an empty list or mapping.
func (ix index) empty(path string) bool { e := ix[path]; return e != nil && e.empty }

// at returns where an error about path should point: the value when the file
// has it, otherwise the key of the nearest ancestor the file has (a missing
// field is missing from its parent mapping), otherwise the document start.
func (ix index) at(path string) yamlerr.Pos {
	if e := ix[path]; e != nil {
		return e.val
	}
	for path != "" {
		path = parentPath(path)
		if e := ix[path]; e != nil {
			return e.key
		}
	}
	return yamlerr.Pos{Line: 1, Col: 1}
}

// fieldAt returns the path of the field whose value or key is at p, or "";
// it names the field in errors from the YAML library, which only know tokens.
func (ix index) fieldAt(p yamlerr.Pos) string {
	var byVal, byKey []string
	for path, e := range ix {
		switch p {
		case e.val:
			byVal = append(byVal, path)
		case e.key:
			byKey = append(byKey, path)
		}
	}
	for _, c := range [][]string{byVal, byKey} {
		if len(c) > 0 {
			sort.Strings(c) // aliases can put one node under several paths
			return c[0]
		}
	}
	return ""
}

// restoreZeros puts back the zeros the file wrote for fields where zero is a
// real answer (no reclaims, instant restarts, no idle windows) and which
// ApplyDefaults, seeing only the Plan, took for "not given".
func (ix index) restoreZeros(p *gpuwarden.Plan) {
	if ix.zero("interruptions.spot_interruptions_per_day") {
		p.Interruptions.SpotInterruptionsPerDay = 0
	}
	if ix.zero("interruptions.restart_minutes") {
		p.Interruptions.RestartMinutes = 0
	}
	if ix.zero("on_hours.sessions_per_month") {
		p.OnHours.SessionsPerMonth = 0
	}
}

// parentPath drops the last segment of a dotted path: "a.b[2]" → "a.b" → "a".
func parentPath(path string) string {
	if strings.HasSuffix(path, "]") {
		if i := strings.LastIndexByte(path, '['); i >= 0 {
			return path[:i]
		}
	}
	if strings.HasSuffix(path, `"`) { // a quoted map key may contain dots
		if i := strings.LastIndex(path, `."`); i >= 0 {
			return path[:i]
		}
	}
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i]
	}
	return ""
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// childPath appends a mapping key, quoting keys that would make the path
// ambiguous (dots, spaces) or break the one-line message (newlines).
func childPath(path, key string) string {
	if !plainKey.MatchString(key) {
		key = strconv.Quote(key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// walker carries the state of one shape check.
type walker struct {
	idx     index
	anchors map[string]ast.Node
	depth   int
}

func newWalker() *walker {
	return &walker{idx: index{}, anchors: map[string]ast.Node{}}
}

var planType = reflect.TypeOf(gpuwarden.Plan{})

// walkDocument checks the document body against the Plan.
func (w *walker) walkDocument(body ast.Node) *yamlerr.FieldError {
	n, fe := w.resolve("", body, yamlerr.Pos{Line: 1, Col: 1})
	if fe != nil {
		return fe
	}
	if _, ok := pairs(n); !ok {
		return &yamlerr.FieldError{At: yamlerr.PosOr(n, yamlerr.Pos{Line: 1, Col: 1}),
			Msg:  "plan file must be a mapping of fields such as workload: and work_hours:, not " + describe(n),
			Hint: "start from the starter file: gpuwarden init > gpuwarden.yaml"}
	}
	return w.value("", planType, n, yamlerr.Pos{Line: 1, Col: 1}, false)
}

// value checks node n written for the field at path, of Go type t. item is
// true for list items and mapping values, where null is not a way of leaving
// the field out and so is an error.
func (w *walker) value(path string, t reflect.Type, n ast.Node, keyAt yamlerr.Pos, item bool) *yamlerr.FieldError {
	w.depth++
	defer func() { w.depth-- }()
	if w.depth > maxDepth {
		return &yamlerr.FieldError{At: keyAt, Field: path, Msg: "nested too deeply",
			Hint: "check for an alias that refers to itself"}
	}
	n, fe := w.resolve(path, n, keyAt)
	if fe != nil {
		return fe
	}
	e := &entry{key: keyAt, val: keyAt}
	if path != "" {
		w.idx[path] = e
	}
	if yamlerr.IsNull(n) {
		if item {
			// A null has no text of its own to point at; its key or "-" does.
			return &yamlerr.FieldError{At: keyAt, Field: path, Msg: "must be " + typeName(t) + ", not empty",
				Hint: typeHint(t)}
		}
		return nil // a field with no value is a field left out
	}

	if reflect.PointerTo(t).Implements(bytesUnmarshaler) {
		return w.custom(path, t, n, e)
	}
	switch t.Kind() {
	case reflect.Pointer:
		return w.value(path, t.Elem(), n, keyAt, item)
	case reflect.Struct:
		return w.structure(path, t, n, e)
	case reflect.Slice:
		return w.list(path, t, n, e)
	case reflect.Map:
		return w.mapping(path, t, n, e)
	case reflect.Float64, reflect.Float32:
		return w.number(path, t, n, e)
	case reflect.Int, reflect.Int64, reflect.Int32:
		return w.integer(path, t, n, e)
	case reflect.String:
		return w.text(path, t, n, e)
	case reflect.Bool:
		if _, ok := n.(*ast.BoolNode); !ok {
			return mismatch(path, t, n, e)
		}
		e.val = yamlerr.PosOr(n, keyAt)
		return nil
	}
	// Only a Plan field of a new Go kind gets here; TestWalkerKnowsEveryPlanType
	// fails first, and a user who meets it gets an error rather than a crash.
	return &yamlerr.FieldError{At: keyAt, Field: path, Msg: fmt.Sprintf("cannot be read: type %s is not supported", t),
		Hint: "this is a bug in gpuwarden; please report it"}
}

// walkable reports whether value can check a field of type t, so a test can
// vouch for every field of the Plan without a file that sets each one.
func walkable(t reflect.Type) bool {
	if reflect.PointerTo(t).Implements(bytesUnmarshaler) {
		return true
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice:
		return walkable(t.Elem())
	case reflect.Map:
		return t.Key().Kind() == reflect.String && walkable(t.Elem())
	case reflect.Struct:
		for _, f := range structFields(t) {
			if !walkable(f.Type) {
				return false
			}
		}
		return true
	case reflect.Float64, reflect.Float32, reflect.Int, reflect.Int64, reflect.Int32, reflect.String, reflect.Bool:
		return true
	}
	return false
}

var bytesUnmarshaler = reflect.TypeOf((*yaml.BytesUnmarshaler)(nil)).Elem()

// resolve follows anchors and aliases to the node they stand for and refuses
// tags, whose effect on a typed field the plan format does not define.
func (w *walker) resolve(path string, n ast.Node, keyAt yamlerr.Pos) (ast.Node, *yamlerr.FieldError) {
	for range maxDepth {
		switch v := n.(type) {
		case *ast.AnchorNode:
			if v.Name != nil {
				w.anchors[nodeText(v.Name)] = v.Value
			}
			n = v.Value
		case *ast.AliasNode:
			name := ""
			if v.Value != nil {
				name = nodeText(v.Value)
			}
			target, ok := w.anchors[name]
			if !ok {
				return nil, &yamlerr.FieldError{At: yamlerr.PosOr(v, keyAt), Field: path,
					Msg:  fmt.Sprintf("alias *%s refers to no anchor &%s above it", name, name),
					Hint: "define the anchor (&name) before the alias (*name) that uses it"}
			}
			n = target
		case *ast.TagNode:
			tag := ""
			if v.Start != nil {
				tag = v.Start.Value
			}
			return nil, &yamlerr.FieldError{At: yamlerr.PosOr(v, keyAt), Field: path,
				Msg:  fmt.Sprintf("YAML tag %q is not supported in a plan file", tag),
				Hint: "remove the tag; each field's type is fixed"}
		default:
			return n, nil
		}
	}
	return nil, &yamlerr.FieldError{At: keyAt, Field: path, Msg: "aliases nested too deeply",
		Hint: "check for an alias that refers to itself"}
}

// structure checks a mapping against a struct's yaml fields.
func (w *walker) structure(path string, t reflect.Type, n ast.Node, e *entry) *yamlerr.FieldError {
	kvs, ok := pairs(n)
	if !ok {
		return mismatch(path, t, n, e)
	}
	e.empty = len(kvs) == 0
	fields := structFields(t)
	seen := map[string]yamlerr.Pos{}
	for _, kv := range kvs {
		key, keyAt, fe := w.key(path, kv)
		if fe != nil {
			return fe
		}
		child := childPath(path, key)
		f, known := fields[key]
		if !known {
			return unknownField(child, key, keyAt, path, t)
		}
		if first, dup := seen[key]; dup {
			return duplicate(child, keyAt, first)
		}
		seen[key] = keyAt
		if fe := w.value(child, f.Type, kv.Value, keyAt, false); fe != nil {
			return fe
		}
	}
	return nil
}

// mapping checks a mapping with free keys, such as currency_rates.
func (w *walker) mapping(path string, t reflect.Type, n ast.Node, e *entry) *yamlerr.FieldError {
	kvs, ok := pairs(n)
	if !ok {
		return mismatch(path, t, n, e)
	}
	e.empty = len(kvs) == 0
	seen := map[string]yamlerr.Pos{}
	for _, kv := range kvs {
		key, keyAt, fe := w.key(path, kv)
		if fe != nil {
			return fe
		}
		child := childPath(path, key)
		if first, dup := seen[key]; dup {
			return duplicate(child, keyAt, first)
		}
		seen[key] = keyAt
		if fe := w.value(child, t.Elem(), kv.Value, keyAt, true); fe != nil {
			return fe
		}
	}
	return nil
}

// key returns the text of a mapping key; keys must be plain scalars.
func (w *walker) key(path string, kv *ast.MappingValueNode) (string, yamlerr.Pos, *yamlerr.FieldError) {
	at := yamlerr.PosOr(kv, yamlerr.Pos{})
	if kv.Key != nil {
		at = yamlerr.PosOr(kv.Key, at)
	}
	var keyNode ast.Node = kv.Key
	if explicit, ok := keyNode.(*ast.MappingKeyNode); ok { // "? key"
		keyNode = explicit.Value
	}
	switch k := keyNode.(type) {
	case *ast.MergeKeyNode:
		field := "<<"
		if path != "" {
			field = path + ".<<"
		}
		return "", at, &yamlerr.FieldError{At: at, Field: field,
			Msg:  "merge keys are not supported in a plan file",
			Hint: "write the fields out; a plan file is short enough not to need them"}
	case *ast.StringNode:
		return k.Value, at, nil
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.NullNode, *ast.InfinityNode, *ast.NanNode:
		return nodeText(k), at, nil
	}
	return "", at, &yamlerr.FieldError{At: at, Field: path, Msg: "keys must be plain names",
		Hint: "write each key as a plain word followed by a colon"}
}

// list checks a sequence and each of its items.
func (w *walker) list(path string, t reflect.Type, n ast.Node, e *entry) *yamlerr.FieldError {
	seq, ok := n.(*ast.SequenceNode)
	if !ok {
		return mismatch(path, t, n, e)
	}
	e.empty = len(seq.Values) == 0
	for i, item := range seq.Values {
		at := yamlerr.PosOr(item, e.key)
		if i < len(seq.Entries) && seq.Entries[i] != nil && seq.Entries[i].Start != nil && yamlerr.IsNull(item) {
			at = yamlerr.TokenPos(seq.Entries[i].Start) // "- " with nothing after it
		}
		if fe := w.value(fmt.Sprintf("%s[%d]", path, i), t.Elem(), item, at, true); fe != nil {
			return fe
		}
	}
	return nil
}

// yamlFloat is the YAML 1.2 core-schema float syntax; the YAML library reads
// "1e3" as a string, yet it is a number in YAML and in a plan.
var yamlFloat = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)

// number checks a float field: a finite number, never quoted.
func (w *walker) number(path string, t reflect.Type, n ast.Node, e *entry) *yamlerr.FieldError {
	if fe := plainDecimal(path, n, e); fe != nil {
		return fe
	}
	var v float64
	switch s := n.(type) {
	case *ast.IntegerNode:
		switch iv := s.Value.(type) {
		case int64:
			v = float64(iv)
		case uint64:
			v = float64(iv)
		}
	case *ast.FloatNode:
		v = s.Value
	case *ast.StringNode:
		if s.Token == nil || s.Token.Type != token.StringType || !yamlFloat.MatchString(s.Value) {
			return mismatch(path, t, n, e)
		}
		var err error
		if v, err = strconv.ParseFloat(s.Value, 64); err != nil {
			return &yamlerr.FieldError{At: yamlerr.PosOr(n, e.key), Field: path, Msg: fmt.Sprintf("%s is out of range", s.Value),
				Hint: typeHint(t)}
		}
	case *ast.InfinityNode, *ast.NanNode:
		return &yamlerr.FieldError{At: yamlerr.PosOr(n, e.key), Field: path, Msg: "must be a finite number, not " + describe(n),
			Hint: typeHint(t)}
	default:
		return mismatch(path, t, n, e)
	}
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return &yamlerr.FieldError{At: yamlerr.PosOr(n, e.key), Field: path, Msg: "must be a finite number, not " + describe(n),
			Hint: typeHint(t)}
	}
	e.val, e.zero = yamlerr.PosOr(n, e.key), v == 0
	return nil
}

// integer checks an int field: a whole number that fits.
func (w *walker) integer(path string, t reflect.Type, n ast.Node, e *entry) *yamlerr.FieldError {
	tooLarge := &yamlerr.FieldError{At: yamlerr.PosOr(n, e.key), Field: path, Msg: describe(n) + " is too large", Hint: typeHint(t)}
	s, ok := n.(*ast.IntegerNode)
	if !ok {
		// Digits beyond 64 bits are no number to the YAML library.
		if str, isStr := n.(*ast.StringNode); isStr && str.Token != nil && str.Token.Type == token.StringType &&
			wholeDigits.MatchString(str.Value) {
			tooLarge.Msg = clip(str.Value) + " is too large"
			return tooLarge
		}
		return mismatch(path, t, n, e)
	}
	if fe := plainDecimal(path, n, e); fe != nil {
		return fe
	}
	var v int64
	switch iv := s.Value.(type) {
	case int64:
		v = iv
	case uint64:
		if iv > math.MaxInt64 {
			return tooLarge
		}
		v = int64(iv)
	}
	if reflect.New(t).Elem().OverflowInt(v) {
		return tooLarge
	}
	e.val, e.zero = yamlerr.PosOr(n, e.key), v == 0
	return nil
}

var (
	wholeDigits = regexp.MustCompile(`^[-+]?[0-9]+$`)
	// notDecimal matches the YAML integer forms that are not plain decimal:
	// 0x1F, 0o17, 0b101 and the YAML 1.1 octal 017.
	notDecimal = regexp.MustCompile(`^[-+]?0[0-9xXoObB_]`)
)

// plainDecimal refuses hexadecimal, binary and octal numbers. The YAML
// library reads 010 as 8, which nobody writing a plan means, and amounts
// accept only decimals, so every number in a plan is written the same way.
func plainDecimal(path string, n ast.Node, e *entry) *yamlerr.FieldError {
	tk := n.GetToken()
	if tk == nil || !notDecimal.MatchString(tk.Value) {
		return nil
	}
	return &yamlerr.FieldError{At: yamlerr.PosOr(n, e.key), Field: path, Msg: "must be a plain decimal number, not " + describe(n),
		Hint: "write it in decimal without leading zeros; YAML reads 010 as the octal number 8"}
}

// text checks a string field. Numbers and booleans are refused rather than
// converted because the YAML library would rewrite them ("1.50" → "1.5",
// "0x10" → "16") and the plan would no longer say what the file says.
func (w *walker) text(path string, t reflect.Type, n ast.Node, e *entry) *yamlerr.FieldError {
	switch n.(type) {
	case *ast.StringNode, *ast.LiteralNode:
		e.val = yamlerr.PosOr(n, e.key)
		return nil
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
		return &yamlerr.FieldError{At: yamlerr.PosOr(n, e.key), Field: path, Msg: "must be text, not " + describe(n),
			Hint: fmt.Sprintf("put it in quotes: %q", n.GetToken().Value)}
	}
	return mismatch(path, t, n, e)
}

// custom checks a scalar that its Go type parses itself (money: Micros), by
// running that same parser on it, so the decode that follows cannot fail
// without a position. Amounts must be unquoted numbers, like every number.
func (w *walker) custom(path string, t reflect.Type, n ast.Node, e *entry) *yamlerr.FieldError {
	switch n.(type) {
	case *ast.IntegerNode, *ast.FloatNode:
	default:
		return mismatch(path, t, n, e)
	}
	u := reflect.New(t).Interface().(yaml.BytesUnmarshaler)
	if err := u.UnmarshalYAML([]byte(n.GetToken().Value)); err != nil {
		return &yamlerr.FieldError{At: yamlerr.PosOr(n, e.key), Field: path, Msg: err.Error(), Hint: typeHint(t)}
	}
	e.val, e.zero = yamlerr.PosOr(n, e.key), reflect.ValueOf(u).Elem().IsZero()
	return nil
}

// pairs returns the key/value pairs of a mapping node; the YAML library
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

// nodeText is a scalar's text, for anchor and alias names.
func nodeText(n ast.Node) string {
	if s, ok := n.(*ast.StringNode); ok {
		return s.Value
	}
	if tk := n.GetToken(); tk != nil {
		return tk.Value
	}
	return ""
}

// posOf is the position of n, or the document start.
func posOf(n ast.Node) yamlerr.Pos { return yamlerr.PosOr(n, yamlerr.Pos{Line: 1, Col: 1}) }

// structFields maps yaml names to the struct's fields.
func structFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f
	}
	return out
}

// fieldNames lists a struct's yaml names in declaration order, as the hint
// for an unknown field shows them.
func fieldNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out = append(out, name)
	}
	return out
}

// unknownField reports a key the Plan does not have, suggesting the nearest
// known one, because a typo is the usual cause.
func unknownField(child, key string, at yamlerr.Pos, parent string, t reflect.Type) *yamlerr.FieldError {
	names := fieldNames(t)
	msg := "unknown field"
	if s := suggest(key, names); s != "" {
		msg += "; did you mean " + s + "?"
	}
	where := "top-level fields"
	if parent != "" {
		where = "fields under " + parent
	}
	return &yamlerr.FieldError{At: at, Field: child, Msg: msg, Hint: where + ": " + strings.Join(names, ", ")}
}

func duplicate(child string, at, first yamlerr.Pos) *yamlerr.FieldError {
	return &yamlerr.FieldError{At: at, Field: child, Msg: fmt.Sprintf("given twice (first at %d:%d)", first.Line, first.Col),
		Hint: "each field may appear once; remove one of them"}
}

// suggest returns the known name closest to key, if it is close enough to be
// a typo (edit distance at most 2, or a difference of case only).
func suggest(key string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if strings.EqualFold(n, key) {
			return n
		}
		if d := namesuggest.Distance(strings.ToLower(key), n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// mismatch reports a value of the wrong kind for its field.
func mismatch(path string, t reflect.Type, n ast.Node, e *entry) *yamlerr.FieldError {
	return &yamlerr.FieldError{At: yamlerr.PosOr(n, e.key), Field: path, Msg: "must be " + typeName(t) + ", not " + describe(n),
		Hint: typeHint(t)}
}

var microsType = reflect.TypeOf(gpuwarden.Micros(0))

// typeName says what a field holds, in the words of the plan file.
func typeName(t reflect.Type) string {
	if t == microsType {
		return "a number"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return typeName(t.Elem())
	case reflect.Struct, reflect.Map:
		return "a mapping"
	case reflect.Slice:
		return "a list"
	case reflect.Float64, reflect.Float32:
		return "a number"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "a whole number"
	case reflect.Bool:
		return "true or false"
	}
	return "text"
}

// typeHint shows how to write a value of the field's kind.
func typeHint(t reflect.Type) string {
	if t == microsType {
		return "write an amount as a plain decimal such as 500 or 12.75, at most 6 decimal places, without quotes"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return typeHint(t.Elem())
	case reflect.Struct:
		return "indent its fields under it, one per line: " + strings.Join(fieldNames(t), ", ")
	case reflect.Map:
		return "indent NAME: VALUE pairs under it, one per line"
	case reflect.Slice:
		return "write a list such as [a, b] or one \"- item\" per line"
	case reflect.Float64, reflect.Float32:
		return "write a plain number such as 7 or 0.5, without quotes"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "write a whole number such as 32, without quotes"
	case reflect.Bool:
		return "write true or false"
	}
	return "write plain text, in quotes if it looks like a number"
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

// clip shortens values quoted in messages so that one line stays one line.
func clip(s string) string {
	if len(s) <= 40 {
		return s
	}
	r := []rune(s)
	if len(r) <= 40 {
		return s
	}
	return string(r[:37]) + "..."
}
