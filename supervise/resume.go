package supervise

import (
	"path/filepath"
	"strings"
)

// substituteResume replaces ResumePlaceholder in the job's argv with the
// resume path. In a plain argv it goes in raw: exec hands each argument
// over as it is, so quoting would only corrupt the path. In the script of a
// shell's -c (sh -c 'python train.py --resume {resume}') the shell parses
// the path as code, so there it is quoted for the spot it lands in: a path
// with a space or a quote stays one word, and a name that reached the box
// from a store can never run as a command. A path of only safe characters
// (gpuwarden's own names under an ordinary directory) goes in bare, so the
// ordinary command looks exactly as written. The fresh start's empty path
// stays empty, as it always did.
func substituteResume(argv []string, resume string) []string {
	script := shellScript(argv)
	out := make([]string, len(argv))
	for i, a := range argv {
		if i == script {
			out[i] = substituteInScript(a, resume)
			continue
		}
		out[i] = strings.ReplaceAll(a, ResumePlaceholder, resume)
	}
	return out
}

// posixShells are the shells whose -c script is parsed with the POSIX
// quoting rules that substituteInScript follows (zsh and the ksh family
// add to them but agree on ', ", \ and $(...)).
var posixShells = map[string]bool{
	"sh": true, "bash": true, "dash": true, "ash": true, "zsh": true,
	"ksh": true, "ksh93": true, "mksh": true, "lksh": true, "pdksh": true, "oksh": true,
	"yash": true, "posh": true,
}

// shellScript returns the index in argv of the script a POSIX shell runs
// with -c (sh -c SCRIPT, bash -euc SCRIPT, busybox sh -c SCRIPT, bash -o
// pipefail -c SCRIPT), or -1 when argv does not run one. Arguments after
// the script become $0, $1… without being parsed, so they stay raw.
func shellScript(argv []string) int {
	if len(argv) == 0 {
		return -1
	}
	i := 1
	switch base := filepath.Base(argv[0]); {
	case base == "busybox" || base == "toybox":
		if len(argv) < 2 || !posixShells[argv[1]] {
			return -1
		}
		i = 2
	case !posixShells[base]:
		return -1
	}
	command := false
	for ; i < len(argv); i++ {
		a := argv[i]
		if a == "--" || a == "-" {
			i++
			break
		}
		if len(a) < 2 || (a[0] != '-' && a[0] != '+') {
			break
		}
		if strings.HasPrefix(a, "--") {
			if a == "--rcfile" || a == "--init-file" {
				i++ // their file is the next argument
			}
			continue
		}
		for _, ch := range a[1:] {
			switch ch {
			case 'c':
				command = command || a[0] == '-'
			case 'o', 'O':
				i++ // -o pipefail, -O extglob: the option's name is the next argument
			}
		}
	}
	if !command || i >= len(argv) {
		return -1
	}
	return i
}

// The quoting contexts of a shell script, as far as substituteInScript
// follows them.
const (
	inCode    = iota // unquoted, at the top or inside $(...) or `...`
	inSingle         // '...'
	inDouble         // "..."
	inDollarQ        // $'...'
)

// frame is one open context; depth counts the parentheses of a $(...)
// frame, and tick marks a `...` one.
type frame struct {
	kind  int
	depth int
	tick  bool
}

// substituteInScript replaces every ResumePlaceholder in a shell script
// with path quoted for its context: single-quoted in code, backslash-escaped
// inside double quotes, closed and reopened inside single quotes. It
// follows quotes, backslashes, $(...), `...` and comments; a placeholder
// inside a here-document is treated as code, which is still one literal
// word for a path of safe characters, the only kind gpuwarden's names make.
func substituteInScript(script, path string) string {
	if !strings.Contains(script, ResumePlaceholder) {
		return script
	}
	var b strings.Builder
	stack := []frame{{kind: inCode}}
	wordStart := true
	for i := 0; i < len(script); {
		top := &stack[len(stack)-1]
		if strings.HasPrefix(script[i:], ResumePlaceholder) {
			b.WriteString(quoteFor(top.kind, path))
			i += len(ResumePlaceholder)
			wordStart = false
			continue
		}
		c := script[i]
		next := byte(0)
		if i+1 < len(script) {
			next = script[i+1]
		}
		n := 1
		switch top.kind {
		case inSingle:
			if c == '\'' {
				stack = stack[:len(stack)-1]
			}
		case inDollarQ:
			switch c {
			case '\\':
				n = 2
			case '\'':
				stack = stack[:len(stack)-1]
			}
		case inDouble:
			switch {
			case c == '\\':
				n = 2
			case c == '"':
				stack = stack[:len(stack)-1]
			case c == '$' && next == '(':
				stack = append(stack, frame{kind: inCode, depth: 1})
				n = 2
			case c == '`':
				stack = append(stack, frame{kind: inCode, tick: true})
			}
		default: // inCode
			switch {
			case c == '\\':
				n = 2
			case c == '#' && wordStart:
				// A comment runs to the end of the line; a placeholder in
				// it is left as it is, since the shell never reads it.
				end := strings.IndexByte(script[i:], '\n')
				if end < 0 {
					end = len(script) - i
				}
				n = end
			case c == '\'':
				stack = append(stack, frame{kind: inSingle})
			case c == '"':
				stack = append(stack, frame{kind: inDouble})
			case c == '$' && next == '\'':
				stack = append(stack, frame{kind: inDollarQ})
				n = 2
			case c == '$' && next == '(':
				stack = append(stack, frame{kind: inCode, depth: 1})
				n = 2
			case c == '`' && top.tick:
				stack = stack[:len(stack)-1]
			case c == '`':
				stack = append(stack, frame{kind: inCode, tick: true})
			case c == '(' && top.depth > 0:
				top.depth++
			case c == ')' && top.depth > 0:
				top.depth--
				if top.depth == 0 && len(stack) > 1 {
					stack = stack[:len(stack)-1]
				}
			}
		}
		n = min(n, len(script)-i)
		b.WriteString(script[i : i+n])
		wordStart = strings.IndexByte(" \t\n;&|()", script[i+n-1]) >= 0
		i += n
	}
	return b.String()
}

// quoteFor renders path for a spot in a shell script of the given context.
func quoteFor(kind int, path string) string {
	if path == "" || shellSafe(path) {
		return path
	}
	switch kind {
	case inSingle:
		return "'" + singleQuote(path) + "'"
	case inDollarQ:
		return "'" + singleQuote(path) + "$'"
	case inDouble:
		var b strings.Builder
		for _, r := range path {
			if strings.ContainsRune("$`\"\\", r) {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		return b.String()
	}
	return singleQuote(path)
}

// singleQuote is path as one single-quoted shell word.
func singleQuote(path string) string {
	return "'" + strings.ReplaceAll(path, "'", `'\''`) + "'"
}

// shellSafe reports a string that no POSIX shell treats as anything but
// its own characters, in any quoting context.
func shellSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("_@%+=:,./-", c) >= 0) {
			return false
		}
	}
	return true
}
