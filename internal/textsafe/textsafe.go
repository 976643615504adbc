// Package textsafe escapes text that came from third parties (a price
// catalog's source column, a label a box sent) for each place gpuwarden
// writes it: a terminal, a CSV file a spreadsheet will open, a markdown
// table. Issue #32 found escape sequences reaching the terminal, formulas
// reaching spreadsheets and a | breaking markdown tables.
package textsafe

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Terminal shows every control character of s (ESC starts a terminal's
// escape sequences; a carriage return overwrites a line) and every bidi
// override (which reorders what a reader sees) as a visible escape,
// keeping line breaks when keepNewlines is set. Plain text is returned as
// it is, without copying.
func Terminal(s string, keepNewlines bool) string {
	if clean(s, keepNewlines) {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !validAt(s, i):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' && keepNewlines:
			b.WriteRune(r)
		case unsafeRune(r):
			if r < 0x100 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func validAt(s string, i int) bool {
	r, size := utf8.DecodeRuneInString(s[i:])
	return r != utf8.RuneError || size > 1
}

func clean(s string, keepNewlines bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			return cleanSlow(s, keepNewlines)
		}
		if c < 0x20 && !(c == '\n' && keepNewlines) || c == 0x7f {
			return false
		}
	}
	return true
}

func cleanSlow(s string, keepNewlines bool) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unsafeRune(r) && !(r == '\n' && keepNewlines) {
			return false
		}
	}
	return true
}

// unsafeRune: C0 and C1 controls, DEL, and the bidi embeddings, overrides
// and isolates.
func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069
}

// CSVCell keeps a spreadsheet from running s as a formula: a text cell
// that starts with = + - @, a tab or a carriage return gets a leading ',
// as OWASP's CSV injection advice says. A number is left as it is, so that
// -0.5 stays a number.
func CSVCell(s string) string {
	if s == "" || !strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return s
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return s
	}
	return "'" + s
}

// CSVRecord applies CSVCell to every cell of rec, in place, and returns it.
func CSVRecord(rec []string) []string {
	for i, c := range rec {
		rec[i] = CSVCell(c)
	}
	return rec
}

// MarkdownCell makes s one cell of a markdown table: no line break, no |
// that would start another cell, no HTML a renderer would run, and no
// control character.
func MarkdownCell(s string) string {
	s = Terminal(strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s), false)
	s = strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(s)
	if s == "" {
		return " "
	}
	return s
}
