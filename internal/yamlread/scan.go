package yamlread

import (
	"strings"
	"unicode/utf8"

	"github.com/gpuwarden/gpuwarden/internal/yamlerr"
)

// Scan checks data without the YAML library: it refuses a file larger than
// f.MaxBytes, nested deeper than MaxDepth, with a block mapping of more than
// MaxKeys keys or with more than MaxTokens brackets, commas, dashes and
// colons, in one pass and without allocating more than a few words per open
// block level. It follows the library's reading of what hides brackets and
// indentation (quotes, comments, block scalars, plain scalars that run on
// over lines, anchors, tags) closely enough that real files and the plain
// hostile ones read the same both ways (FuzzParse holds it to that);
// CheckTokens, which is exact, covers whatever reads differently.
func (f File) Scan(data []byte) *yamlerr.FieldError {
	if f.MaxBytes > 0 && len(data) > f.MaxBytes {
		return f.sizeError()
	}
	s := scanner{}
	line := 0
	for i := 0; i < len(data); {
		line++
		end := i
		for end < len(data) && data[end] != '\n' && data[end] != '\r' {
			end++
		}
		if col := s.line(data[i:end]); col > 0 {
			return f.limitError(s.fault, yamlerr.Pos{Line: line, Col: col})
		}
		// "\r\n", "\n" and a lone "\r" each end a line, as in the library.
		i = end + 1
		if end+1 < len(data) && data[end] == '\r' && data[end+1] == '\n' {
			i++
		}
	}
	return nil
}

// scanner is the state of one Scan between lines. Columns are 1-based and
// count runes, as the library's do.
type scanner struct {
	// flowSeq and flowMap count the open [ and { collections.
	flowSeq, flowMap int
	// block holds the open block collections, by increasing column.
	block []level
	// indicators counts the punctuation read so far (brackets, commas, "-"
	// and ":"), each of which is a token to the library.
	indicators int
	// fault is what the column line returned broke.
	fault fault
	// quote is the quote character of the quoted scalar being read, or 0.
	quote byte
	// literal is set inside the content of a block scalar (| or >), which
	// goes on while lines start right of literalCol; -1 means up to the
	// next document marker.
	literal    bool
	literalCol int
	// inToken is set while a plain scalar is being read; as in the library
	// it may run on over lines, and quotes and brackets inside it are text.
	inToken bool
	// anchor is set while an anchor's or alias's name is being read.
	anchor bool
	// tokenCol is where the plain or quoted scalar being read started, or
	// 0: the library's column for a key, which block scalars and plain
	// scalars end by.
	tokenCol int
	// node is where the node being read started on this line, anchor or
	// tag included, or 0: the column of its key's mapping.
	node int
	// lastDelim is the column of the last key or "-" entry (0: none); a
	// line that starts at or left of it ends the plain scalar being read
	// and any block scalar, as in the library.
	lastDelim int
}

// flow is the number of open flow collections.
func (s *scanner) flow() int { return max(s.flowSeq, 0) + s.flowMap }

// line scans one line, without its line break, and returns the column at
// which the file breaks a limit (s.fault says which), or 0.
func (s *scanner) line(l []byte) int {
	lead := 0 // leading blanks
	for lead < len(l) && (l[lead] == ' ' || l[lead] == '\t') {
		lead++
	}
	s.node = 0
	if lead == len(l) || s.quote != 0 {
		// Blank lines change nothing, not even where a block scalar ends;
		// a quoted scalar goes on regardless of indentation.
		return s.chars(l, 0, 1)
	}
	first := lead + 1 // the column of the first character
	marker := len(l) >= 3 && (string(l[:3]) == "---" && (len(l) == 3 || l[3] == ' ' || l[3] == '\t') ||
		string(l[:3]) == "..." && (len(l) == 3 || l[3] != '.'))
	if s.literal {
		if !marker && (s.literalCol < 0 || first > s.literalCol) {
			return 0
		}
		s.literal = false
	}
	if s.lastDelim > 0 && first <= s.lastDelim {
		// The library cuts a plain scalar where indentation goes back.
		s.inToken, s.tokenCol = false, 0
	}
	if marker {
		s.flowSeq, s.flowMap, s.block, s.inToken, s.tokenCol, s.lastDelim = 0, 0, s.block[:0], false, 0, 0
		return s.chars(l, 3, 4)
	}
	return s.chars(l, lead, first)
}

// chars scans l from byte i, which is at column col.
func (s *scanner) chars(l []byte, i, col int) int {
	prevBlank := i == 0 || l[i-1] == ' ' || l[i-1] == '\t'
	escaped := false
	// directive is set after a "%" on a line that is not indented, which
	// the library reads as a directive up to the end of the line: there
	// spaces cut tokens, "!" starts no tag and ":" is no key's.
	directive := false
	unindented := len(l) == 0 || l[0] != ' '

	// step moves to the next rune and column; like the library, which
	// reads the file as []rune, it takes each invalid byte for one rune.
	step := func() {
		_, n := utf8.DecodeRune(l[i:])
		i += n
		col++
	}
	for ; i < len(l); step() {
		c := l[i]
		if s.quote != 0 {
			switch {
			case escaped:
				escaped = false
			case s.quote == '"' && c == '\\':
				escaped = true
			case c == s.quote && c == '\'' && i+1 < len(l) && l[i+1] == '\'':
				escaped = true // '' is a quote inside single quotes
			case c == s.quote:
				s.quote = 0
			}
			continue
		}
		blankNext := i+1 == len(l) || l[i+1] == ' ' || l[i+1] == '\t'
		flow := s.flow() > 0
		if strings.IndexByte("[]{},-?:", c) >= 0 {
			if s.indicators++; s.indicators > MaxTokens {
				s.fault = tooManyTokens
				return col
			}
		}
		switch {
		case c == ' ' || c == '\t':
			if c == '\t' && (s.inToken && s.lastDelim == 0 || s.lastDelim < col) {
				unindented = false // the library counts such a tab as indentation
			}
			if c == ' ' && (s.anchor || directive) {
				s.anchor, s.inToken = false, false // the space ends the name
			}
			prevBlank = true
			continue
		case c == '#' && (prevBlank || !s.inToken):
			s.inToken, s.tokenCol, s.node = false, 0, 0 // a comment ends the line and cuts the token
			return 0
		case (c == '[' || c == '{') && (!s.inToken || flow):
			if c == '[' {
				s.flowSeq++
			} else {
				s.flowMap++
			}
			s.inToken, s.tokenCol, s.node = false, 0, 0
			if s.flow()+len(s.block) > MaxDepth {
				s.fault = tooDeep
				return col
			}
		case c == '}' && s.flowMap > 0:
			s.flowMap--
			s.inToken, s.tokenCol, s.node = false, 0, 0
		case c == ']' && (!s.inToken || s.flowSeq > 0):
			// As in the library, a stray "]" counts below zero, and the
			// brackets after it open no flow collection until it is made up.
			s.flowSeq--
			s.inToken, s.tokenCol, s.node = false, 0, 0
		case c == ',' && flow:
			s.inToken, s.tokenCol, s.node = false, 0, 0
		case (c == '"' || c == '\'') && !s.inToken:
			s.quote, s.tokenCol = c, col
			s.begin(col)
		case c == '-' && !s.inToken && blankNext, c == '?' && !s.inToken && i+1 < len(l) && blankNext:
			if !flow {
				s.lastDelim = col
				if s.enter(col, false) {
					return col
				}
			}
			s.tokenCol, s.node = 0, 0
		case c == ':' && !s.anchor && !directive && (blankNext || s.flowMap > 0 && l[i+1] != '/'):
			if !flow {
				if s.tokenCol > 0 {
					s.lastDelim = s.tokenCol
				}
				key := s.node
				if key == 0 {
					key = col
				}
				if s.enter(key, true) {
					return key
				}
			}
			s.inToken, s.tokenCol, s.node = false, 0, 0
		case (c == '|' || c == '>') && !s.inToken:
			// A block scalar; its header runs to the end of the line.
			if col == 1 {
				s.lastDelim = 1
			}
			s.literal, s.literalCol = true, s.lastDelim
			if s.lastDelim == 0 {
				s.literalCol = -1 // as after "--- |", the library reads on to the next document
			}
			return 0
		case (c == '&' || c == '*') && !s.inToken:
			// An anchor or alias: its name is the plain text that follows,
			// up to a space, and no ":" inside it is a key's.
			s.anchor, s.tokenCol = true, 0
			s.begin(col)
		case c == '%' && !s.inToken && unindented:
			directive = true
		case c == '!' && !s.inToken && !directive:
			// A tag runs to the next space (a tab is part of it) or, in a
			// flow collection, a comma; brackets are part of it.
			s.begin(col)
			for i+1 < len(l) && l[i+1] != ' ' && !(flow && l[i+1] == ',') {
				step()
			}
			s.tokenCol = 0
			if i+1 < len(l) && l[i+1] == ' ' {
				// The library counts the space that ends a tag as no
				// column, and so places what follows one column left.
				i++
				prevBlank = true
				continue
			}
		default:
			if !s.inToken {
				s.inToken = true
				if !s.anchor {
					s.tokenCol = col // an anchor's name is not a key
				}
				s.begin(col)
			}
		}
		prevBlank = false
	}
	return 0
}

// begin notes that a node starts at col, unless one already did on this line.
func (s *scanner) begin(col int) {
	if s.node == 0 {
		s.node = col
	}
}

// enter places a block key (key set) or "-" entry at col: it closes the
// block collections to its right and opens one at col unless one is open
// there, and reports whether that breaks a limit. A list at its parent key's
// column counts as the same level here, so a key and a "-" never count as
// two, and only keys count towards MaxKeys.
func (s *scanner) enter(col int, key bool) bool {
	for len(s.block) > 0 && s.block[len(s.block)-1].col > col {
		s.block = s.block[:len(s.block)-1]
	}
	n := len(s.block)
	if n > 0 && s.block[n-1].col == col {
		if top := &s.block[n-1]; key {
			if top.keys++; top.keys > MaxKeys {
				s.fault = tooManyKeys
				return true
			}
		}
		return false
	}
	l := level{col: col}
	if key {
		l.keys = 1
	}
	s.block = append(s.block, l)
	if s.flow()+len(s.block) > MaxDepth {
		s.fault = tooDeep
		return true
	}
	return false
}
