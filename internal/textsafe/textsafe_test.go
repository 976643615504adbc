package textsafe

import (
	"testing"
)

func TestTerminal(t *testing.T) {
	tests := []struct {
		in, want string
		newlines bool
	}{
		{"plain text", "plain text", false},
		{"Bács-Kiskun", "Bács-Kiskun", false},
		{"red\x1b[31malert\x1b[0m", `red\x1b[31malert\x1b[0m`, false},
		{"over\rwrite", `over\x0dwrite`, false},
		{"two\nlines", `two\x0alines`, false},
		{"two\nlines", "two\nlines", true},
		{"tab\there", `tab\x09here`, false},
		{"c1\u009bcsi", `c1\x9bcsi`, false},
		{"bidi\u202eevil", `bidi\u202eevil`, false},
		{"bad\xffbyte", `bad\xffbyte`, false},
	}
	for _, tt := range tests {
		if got := Terminal(tt.in, tt.newlines); got != tt.want {
			t.Errorf("Terminal(%q, %v) = %q, want %q", tt.in, tt.newlines, got, tt.want)
		}
	}
}

func TestCSVCell(t *testing.T) {
	tests := []struct{ in, want string }{
		{"SkyPilot catalog", "SkyPilot catalog"},
		{"=HYPERLINK(\"http://x\",\"y\")", "'=HYPERLINK(\"http://x\",\"y\")"},
		{"+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"},
		{"@SUM(1)", "'@SUM(1)"},
		{"-2+3", "'-2+3"},
		{"-0.5", "-0.5"},
		{"\tx", "'\tx"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := CSVCell(tt.in); got != tt.want {
			t.Errorf("CSVCell(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestMarkdownCell(t *testing.T) {
	tests := []struct{ in, want string }{
		{"aws us-east-1", "aws us-east-1"},
		{"a|b", `a\|b`},
		{"two\nlines", "two lines"},
		{"<img src=x onerror=alert(1)>", "&lt;img src=x onerror=alert(1)&gt;"},
		{"\x1b[2J", `\x1b[2J`},
		{"", " "},
	}
	for _, tt := range tests {
		if got := MarkdownCell(tt.in); got != tt.want {
			t.Errorf("MarkdownCell(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
