// Package yamlread is the one way gpuwarden's YAML files (the plan, the lock
// file, the launch rules) reach the YAML library, with limits the library
// does not have.
//
// goccy/go-yaml's parser recurses once per nesting level and once per
// sibling key of a block mapping, copying its path as it goes: 200 KB of "["
// ran out of memory past 6 GB, 40 KB of it took 680 MB, and 100,000 keys in
// one mapping allocate tens of gigabytes over a minute and a half. No real
// gpuwarden file comes near: a plan is four levels deep and a page long. So
// every file is checked twice before the parser sees it:
//
//   - Scan reads the bytes alone, in one pass and constant memory, and
//     refuses a file over its size cap, nested deeper than MaxDepth, with a
//     block mapping of more than MaxKeys keys or with more punctuation than
//     MaxTokens; the hostile files never reach the library at all;
//   - CheckTokens counts, in the tokens the library's lexer cut (the lexer is
//     linear), the nesting, the keys of each block mapping and the tokens,
//     exactly as the parser will meet them, so that a file which reads one
//     way to Scan and another to the library still cannot blow the parser up.
//
// With the caps below, and a file cap of 256 KiB, reading any file allocates
// well under 100 MB in all and takes a fraction of a second.
package yamlread

import (
	"bytes"
	"fmt"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"

	"github.com/gpuwarden/gpuwarden/internal/yamlerr"
)

// Limits every file shares. They are far above any real file (a plan nests
// four levels, its largest mapping has a dozen keys, a lock a few dozen, and
// the commented starter plan holds 30 tokens beside its comments) and far
// below what makes the parser slow: its cost grows with the square of the
// depth and of the keys of one block mapping.
const (
	// MaxDepth is the deepest nesting of mappings and lists, block and flow
	// together.
	MaxDepth = 64
	// MaxKeys is the most keys one block mapping may have; flow mappings
	// ({a: 1, b: 2}) cost the parser nothing extra and count only as tokens.
	MaxKeys = 256
	// MaxTokens is the most keys, values and punctuation a file may hold;
	// comments do not count.
	MaxTokens = 50_000
)

// depthHint is the hint of every nesting error.
const depthHint = "gpuwarden's files nest a few levels deep: look for a run of unclosed [ or {, or check that this is the right file"

// File describes the kind of file being read, for its limits and messages.
type File struct {
	// Kind names the file in messages: "plan file", "lock file".
	Kind string
	// MaxBytes is the largest file accepted; 0 means no size cap.
	MaxBytes int
	// SizeHint is the hint of the size error.
	SizeHint string
}

// Parse is the YAML reader of gpuwarden: it drops a leading byte-order mark
// (which editors on Windows write and the library would read as part of the
// first key), checks data with Scan, cuts it into tokens, checks them with
// CheckTokens and only then parses them, with opts (such as
// parser.AllowDuplicateMapKey). A broken limit is a *yamlerr.FieldError; a
// syntax error is the library's own error, for the caller to word.
func (f File) Parse(data []byte, opts ...parser.Option) (*ast.File, error) {
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	if fe := f.Scan(data); fe != nil {
		return nil, fe
	}
	toks := lexer.Tokenize(string(data))
	// A file the lexer could not read is a syntax error, which the parser
	// reports before it builds anything.
	if toks.InvalidToken() == nil {
		if fe := f.CheckTokens(toks); fe != nil {
			return nil, fe
		}
	}
	return parser.Parse(toks, 0, opts...)
}

// sizeError is the error of a file over the cap.
func (f File) sizeError() *yamlerr.FieldError {
	return &yamlerr.FieldError{At: yamlerr.Pos{Line: 1, Col: 1},
		Msg: fmt.Sprintf("%s is larger than %d KiB", f.Kind, f.MaxBytes>>10), Hint: f.SizeHint}
}

// fault is a limit a file breaks.
type fault int

const (
	tooDeep fault = iota + 1
	tooManyKeys
	tooManyTokens
)

// limitError is the error of breaking a limit at at.
func (f File) limitError(what fault, at yamlerr.Pos) *yamlerr.FieldError {
	fe := &yamlerr.FieldError{At: at}
	switch what {
	case tooDeep:
		fe.Msg, fe.Hint = fmt.Sprintf("%s nests deeper than %d levels", f.Kind, MaxDepth), depthHint
	case tooManyKeys:
		fe.Msg = fmt.Sprintf("a mapping holds more than %d keys", MaxKeys)
		fe.Hint = "no gpuwarden file needs that many; split it up, or check that this is the right file"
	default:
		fe.Msg = fmt.Sprintf("%s holds more than %d keys, values and brackets", f.Kind, MaxTokens)
		fe.Hint = "a gpuwarden file is a page of settings; check that this is the right file"
	}
	return fe
}

// CheckTokens checks the library's tokens of a file against MaxDepth,
// MaxKeys and MaxTokens, counting nesting the way the parser builds it:
// flow collections by their brackets, block ones by the columns of their
// keys and "-" entries. The error points at the token that broke the limit.
func (f File) CheckTokens(toks token.Tokens) *yamlerr.FieldError {
	var (
		// seq and maps count the open flow collections; as in the lexer,
		// a stray "]" takes seq below zero.
		seq, maps int
		block     []level
		counts    int
		// node is the first token of the node being read: its anchor,
		// tag or scalar; nil after punctuation.
		node *token.Token
	)
	for _, tk := range toks {
		if tk == nil || tk.Type == token.CommentType {
			continue
		}
		at := yamlerr.TokenPos(tk)
		if counts++; counts > MaxTokens {
			return f.limitError(tooManyTokens, at)
		}
		flow := max(seq, 0) + maps
		deeper := false
		switch tk.Type {
		case token.SequenceStartType:
			seq++
			deeper = true
		case token.MappingStartType:
			maps++
			deeper = true
		case token.SequenceEndType:
			seq--
		case token.MappingEndType:
			maps = max(maps-1, 0)
		case token.DocumentHeaderType, token.DocumentEndType:
			seq, maps, block = 0, 0, block[:0]
		case token.SequenceEntryType:
			if flow == 0 {
				block, deeper = entry(block, at.Col, true)
			}
		case token.MappingKeyType, token.MappingValueType:
			if flow > 0 {
				break
			}
			// A key's column is where its node starts, anchor or tag
			// included, when that is on the same line; else the
			// indicator's own.
			col := at.Col
			if tk.Type == token.MappingValueType && node != nil && node.Position != nil && node.Position.Line == at.Line {
				col = node.Position.Column
			}
			at.Col = col
			block, deeper = entry(block, col, false)
			if top := &block[len(block)-1]; !deeper {
				if top.keys++; top.keys > MaxKeys {
					return f.limitError(tooManyKeys, at)
				}
			}
		}
		if deeper && len(block)+max(seq, 0)+maps > MaxDepth {
			return f.limitError(tooDeep, at)
		}
		if punctuation(tk.Type) {
			node = nil
		} else if node == nil || node.Position == nil || node.Position.Line != at.Line {
			node = tk
		}
	}
	return nil
}

// level is one open block collection: the column of its keys or its "-"
// entries, and how many keys a mapping has so far.
type level struct {
	col  int
	seq  bool
	keys int
}

// entry places a block key (seq false) or "-" entry (seq true) at col among
// the open block collections: it closes those to its right, and those at its
// column of the other kind (a list may sit at its parent key's column), then
// joins the collection at its column or opens a new one, which deeper
// reports.
func entry(block []level, col int, seq bool) ([]level, bool) {
	for len(block) > 0 {
		top := block[len(block)-1]
		if top.col > col || (top.col == col && top.seq && !seq) {
			block = block[:len(block)-1]
			continue
		}
		break
	}
	if n := len(block); n > 0 && block[n-1].col == col && block[n-1].seq == seq {
		return block, false
	}
	keys := 0
	if !seq {
		keys = 1
	}
	return append(block, level{col: col, seq: seq, keys: keys}), true
}

// punctuation reports the tokens that end a node and start the next.
func punctuation(t token.Type) bool {
	switch t {
	case token.SequenceEntryType, token.MappingKeyType, token.MappingValueType, token.CollectEntryType,
		token.SequenceStartType, token.SequenceEndType, token.MappingStartType, token.MappingEndType,
		token.DocumentHeaderType, token.DocumentEndType:
		return true
	}
	return false
}
