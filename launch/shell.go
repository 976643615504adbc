package launch

import (
	"fmt"
	"strings"
	"text/template"
	"text/template/parse"
)

// A command template's values come from third parties (a price catalog's
// region, an instance ID read from a launcher's output), and the command
// runs with sh -c. So every value is escaped for the shell by the renderer,
// never by the template's author: before the template runs, escapeShell
// walks its parse tree, follows the shell's quoting through the literal
// text (as html/template follows HTML), and ends each {{…}} that prints
// with the escaper of the quoting it sits in. A value with only safe
// characters comes out unchanged, so ordinary commands read as written.

// shellCtx is where in the shell's grammar a piece of text sits.
type shellCtx uint8

const (
	ctxPlain    shellCtx = iota // outside quotes: a value becomes one shell word
	ctxSingle                   // inside '…': nothing is special but '
	ctxDouble                   // inside "…": $ ` " \ are special
	ctxComment                  // after # up to the end of the line
	ctxBacktick                 // inside `…`, whose quoting nests unreadably
	ctxParam                    // inside ${…}, whose quoting depends on the shell
	ctxHeredoc                  // after << : the body's quoting depends on its delimiter
)

var ctxNames = [...]string{"outside quotes", "inside '…'", `inside "…"`, "in a # comment",
	"inside `…`", "inside ${…}", "after a here-document (<<)"}

func (c shellCtx) String() string { return ctxNames[c] }

// shellFrame is one level of $( … ) nesting: the quoting inside it and the
// parentheses opened in it, so that its closing ) is found.
type shellFrame struct {
	ctx    shellCtx
	parens int
	// braces counts the { of a ${…} still open.
	braces int
}

// shellState is the quoting at a point of the command: a stack, since
// "$( … )" starts a fresh plain context inside double quotes.
type shellState struct {
	stack []shellFrame
	// escaped: the last byte was a backslash that escapes the next one.
	escaped bool
	// wordStart: the next byte starts a word, where # starts a comment.
	wordStart bool
	// dollar: the text so far ends with a $ that would take what follows
	// as a parameter's name.
	dollar bool
}

func newShellState() shellState {
	return shellState{stack: []shellFrame{{ctx: ctxPlain}}, wordStart: true}
}

func (s *shellState) top() *shellFrame { return &s.stack[len(s.stack)-1] }

func (s shellState) clone() shellState {
	s.stack = append([]shellFrame(nil), s.stack...)
	return s
}

func (s shellState) equal(o shellState) bool {
	if s.escaped != o.escaped || s.dollar != o.dollar || len(s.stack) != len(o.stack) {
		return false
	}
	for i := range s.stack {
		if s.stack[i] != o.stack[i] {
			return false
		}
	}
	return true
}

// advance moves the state over literal text.
func (s *shellState) advance(text string) {
	for i := 0; i < len(text); i++ {
		c := text[i]
		f := s.top()
		s.dollar = false
		wordStart := s.wordStart
		s.wordStart = false
		if s.escaped {
			s.escaped = false
			continue
		}
		switch f.ctx {
		case ctxPlain:
			switch {
			case c == '\\':
				s.escaped = true
			case c == '\'':
				s.push(ctxSingle)
			case c == '"':
				s.push(ctxDouble)
			case s.expansion(text, &i):
			case c == '#' && wordStart:
				s.push(ctxComment)
			case c == '<' && strings.HasPrefix(text[i:], "<<") && !strings.HasPrefix(text[i:], "<<<"):
				// The body's quoting depends on the delimiter and
				// lines to come; no value is placed in it.
				s.push(ctxHeredoc)
				i++
			case c == '(':
				f.parens++
				s.wordStart = true
			case c == ')':
				if f.parens > 0 {
					f.parens--
				} else if len(s.stack) > 1 {
					s.pop() // the end of a $( … )
				}
			default:
				s.wordStart = strings.IndexByte(" \t\n;&|<>", c) >= 0
			}
		case ctxSingle:
			if c == '\'' {
				s.pop()
			}
		case ctxDouble:
			switch {
			case c == '\\':
				if i+1 < len(text) && strings.IndexByte("$`\"\\\n", text[i+1]) >= 0 {
					s.escaped = true
				}
			case c == '"':
				s.pop()
			case s.expansion(text, &i):
			}
		case ctxComment:
			if c == '\n' {
				s.pop()
				s.wordStart = true
			}
		case ctxBacktick:
			switch c {
			case '\\':
				s.escaped = true
			case '`':
				s.pop()
			}
		case ctxParam:
			switch c {
			case '\\':
				s.escaped = true
			case '{':
				f.braces++
			case '}':
				if f.braces > 0 {
					f.braces--
				} else {
					s.pop()
				}
			}
		case ctxHeredoc:
			// Stays to the end: see the push.
		}
	}
}

// expansion steps into `…`, $(…) or ${…} starting at text[*i], where
// quoting starts afresh, and reports whether it did. A $ that ends the
// text is remembered: a value right after it would be a parameter name.
func (s *shellState) expansion(text string, i *int) bool {
	c := text[*i]
	switch {
	case c == '`':
		s.push(ctxBacktick)
	case c == '$' && *i+1 == len(text):
		s.dollar = true
	case c == '$' && text[*i+1] == '(':
		*i++
		s.push(ctxPlain)
		s.wordStart = true
	case c == '$' && text[*i+1] == '{':
		*i++
		s.push(ctxParam)
	default:
		return false
	}
	return true
}

func (s *shellState) push(c shellCtx) { s.stack = append(s.stack, shellFrame{ctx: c}) }

func (s *shellState) pop() {
	if len(s.stack) > 1 {
		s.stack = s.stack[:len(s.stack)-1]
	}
}

// Escaper names, as template functions; not meant to be written in a
// template (the leading underscore makes them unlike the Vars).
const (
	escPlain   = "_shell_word"
	escSingle  = "_shell_in_single_quotes"
	escDouble  = "_shell_in_double_quotes"
	escComment = "_shell_in_comment"
)

var escapers = template.FuncMap{
	// An empty value prints nothing, as it did before values were escaped:
	// "--zone={{.Zone}}" stays "--zone=", and a word made of values alone
	// disappears rather than becoming an empty argument.
	escPlain: func(v any) string {
		if s := fmt.Sprint(v); s != "" {
			return shellQuote(s)
		}
		return ""
	},
	escSingle: func(v any) string { return strings.ReplaceAll(fmt.Sprint(v), "'", `'\''`) },
	escDouble: func(v any) string {
		return doubleQuoteEscaper.Replace(fmt.Sprint(v))
	},
	escComment: func(v any) (string, error) {
		s := fmt.Sprint(v)
		if strings.ContainsAny(s, "\n\r") {
			return "", fmt.Errorf("a value with a line break cannot sit in a # comment: it would end the comment")
		}
		return s, nil
	},
}

var doubleQuoteEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "$", `\$`, "`", "\\`")

// escapeShell adds to every printing {{…}} of t the escaper of the shell
// quoting it sits in. It fails for a value in a place no escaper can make
// safe (inside `…`, ${…}, a here-document, right after a backslash), for
// a branch of {{if}} or {{range}} that leaves the quoting other than it
// found it, and for quotes left open at the end.
func escapeShell(t *template.Template) error {
	if t.Tree == nil || t.Root == nil {
		return nil
	}
	st := newShellState()
	end, err := escapeList(t.Root, st)
	if err != nil {
		return err
	}
	if end.top().ctx == ctxComment {
		end.pop() // a comment ends with the command
	}
	if len(end.stack) > 1 && end.top().ctx == ctxPlain {
		return fmt.Errorf("the command ends inside $( … ): close it")
	}
	if len(end.stack) != 1 {
		return fmt.Errorf("the command ends %s: close the quote", end.top().ctx)
	}
	return nil
}

func escapeList(l *parse.ListNode, st shellState) (shellState, error) {
	if l == nil {
		return st, nil
	}
	var err error
	for _, n := range l.Nodes {
		if st, err = escapeNode(n, st); err != nil {
			return st, err
		}
	}
	return st, nil
}

func escapeNode(n parse.Node, st shellState) (shellState, error) {
	switch n := n.(type) {
	case *parse.TextNode:
		st.advance(string(n.Text))
		return st, nil
	case *parse.ActionNode:
		if len(n.Pipe.Decl) > 0 {
			return st, nil // {{$x := …}} prints nothing
		}
		name, err := escaperFor(st)
		if err != nil {
			return st, fmt.Errorf("%s: %w", n, err)
		}
		n.Pipe.Cmds = append(n.Pipe.Cmds, &parse.CommandNode{NodeType: parse.NodeCommand, Pos: n.Pos,
			Args: []parse.Node{parse.NewIdentifier(name).SetPos(n.Pos)}})
		// A value ends a word: a # right after it is not a comment.
		st.wordStart, st.dollar = false, false
		return st, nil
	case *parse.IfNode:
		return escapeBranches(&n.BranchNode, st, "if")
	case *parse.WithNode:
		return escapeBranches(&n.BranchNode, st, "with")
	case *parse.RangeNode:
		end, err := escapeBranches(&n.BranchNode, st, "range")
		if err == nil && !end.equal(st) {
			err = fmt.Errorf("{{range}} changes the shell quoting from %s to %s: close every quote inside it", st.top().ctx, end.top().ctx)
		}
		return end, err
	case *parse.TemplateNode:
		return st, fmt.Errorf("%s: a command template cannot call other templates", n)
	default:
		// Comments, {{break}} and {{continue}} print nothing.
		return st, nil
	}
}

// escapeBranches escapes both branches from the same state; they must end
// in the same one, since the text after them follows either.
func escapeBranches(b *parse.BranchNode, st shellState, kind string) (shellState, error) {
	then, err := escapeList(b.List, st.clone())
	if err != nil {
		return st, err
	}
	otherwise, err := escapeList(b.ElseList, st.clone())
	if err != nil {
		return st, err
	}
	if !then.equal(otherwise) {
		return st, fmt.Errorf("{{%s}} leaves the shell quoting %s in one branch and %s in the other: close every quote inside each branch",
			kind, then.top().ctx, otherwise.top().ctx)
	}
	return then, nil
}

func escaperFor(st shellState) (string, error) {
	if st.escaped {
		return "", fmt.Errorf("a value right after a backslash cannot be quoted: remove the backslash")
	}
	if st.dollar {
		return "", fmt.Errorf("a value right after $ would name a variable: remove the $")
	}
	switch c := st.top().ctx; c {
	case ctxPlain:
		return escPlain, nil
	case ctxSingle:
		return escSingle, nil
	case ctxDouble:
		return escDouble, nil
	case ctxComment:
		return escComment, nil
	default:
		return "", fmt.Errorf("a value %s cannot be quoted safely: put it outside, or in an environment variable ($GPUWARDEN_NAME and the target's fields are set)", c)
	}
}
