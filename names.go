package gpuwarden

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Name kinds: the fields of an offer or a launch target that name a place
// or a product. Their values come from third parties (SkyPilot's catalog,
// its mirrors, any `catalog update --from`) and end up in the launch
// commands `launch` runs with sh -c, in tables and in file names, so each
// is held to the characters real names use, once, here.
const (
	NameProvider = "provider"
	NameRegion   = "region"
	NameZone     = "zone"
	NameInstance = "instance"
	NameGPU      = "gpu"
)

// maxNameBytes bounds a name: the longest in SkyPilot's v8 catalogs is a
// 59-byte instance type.
const maxNameBytes = 128

// nameRules are, per kind, the characters besides letters and digits that
// a name may hold, from what the published catalogs use: regions like
// "British Columbia" or "FI - FIN-01" (Vast, Prime Intellect), GPUs like
// "RTX PRO 6000", instance types like "p5.48xlarge", "gpu_1x_h100_pcie" or
// "Standard_NC24ads_A100_v4". None of them is special to a POSIX shell
// outside quotes, except the space, which the launch renderer quotes; none
// starts or ends a name, so that no name can read as a command-line option.
// Places may have letters outside ASCII ("Bács-Kiskun"); products and
// providers may not.
var (
	providerRule = newNameRule("-_.", false)
	placeRule    = newNameRule("-_., :/+@", true)
	instanceRule = newNameRule("-_.:/+@=", false)
	gpuRule      = newNameRule("-_. +/", false)
)

// ruleOf is a switch, not a map: a price file checks a million names.
func ruleOf(kind string) *nameRule {
	switch kind {
	case NameProvider:
		return providerRule
	case NameRegion, NameZone:
		return placeRule
	case NameInstance:
		return instanceRule
	case NameGPU:
		return gpuRule
	}
	return nil
}

type nameRule struct {
	symbols string
	ascii   [utf8.RuneSelf]byte // 1: letter or digit, 2: symbol
	unicode bool
}

func newNameRule(symbols string, unicodeLetters bool) *nameRule {
	r := &nameRule{symbols: symbols, unicode: unicodeLetters}
	for c := 0; c < utf8.RuneSelf; c++ {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			r.ascii[c] = 1
		}
	}
	for _, c := range symbols {
		r.ascii[c] = 2
	}
	return r
}

// plainASCII: every byte of a non-empty v is allowed, and the first and
// last are letters or digits.
func (r *nameRule) plainASCII(v string) bool {
	for i := 0; i < len(v); i++ {
		if r.ascii[v[i]&0x7f] == 0 || v[i] >= utf8.RuneSelf {
			return false
		}
	}
	return r.ascii[v[0]&0x7f] == 1 && r.ascii[v[len(v)-1]&0x7f] == 1
}

// CheckName reports whether value may be used as a name of the given kind
// (NameProvider, NameRegion …): letters and digits, a few symbols real
// names use, a letter or digit first and last, at most 128 bytes. The error
// names the first character that is not allowed, so that a row from a
// third-party catalog with shell syntax in a cell is refused where it is
// read, with its file and line. An empty value is allowed: whether a field
// is required is the caller's rule.
func CheckName(kind, value string) error {
	rule := ruleOf(kind)
	if rule == nil {
		return fmt.Errorf("check name: unknown kind %q", kind)
	}
	if value == "" {
		return nil
	}
	if len(value) > maxNameBytes {
		return fmt.Errorf("%s name is %d bytes long; names are at most %d", kind, len(value), maxNameBytes)
	}
	// The common name is ASCII letters, digits and symbols: one table
	// look-up a byte, since a price file checks a million of them.
	if rule.plainASCII(value) {
		return nil
	}
	if !utf8.ValidString(value) {
		return fmt.Errorf("%s name %q is not valid UTF-8", kind, value)
	}
	for i, r := range value {
		if r < utf8.RuneSelf && rule.ascii[r] == 1 || r >= utf8.RuneSelf && rule.unicode && isLetterOrDigit(r) {
			continue
		}
		if r >= utf8.RuneSelf || rule.ascii[r] != 2 {
			return fmt.Errorf("%s name %q has %s, which no %s name has (allowed: letters, digits and %s)",
				kind, value, describeRune(r), kind, describeSymbols(rule.symbols))
		}
		if i == 0 || i+utf8.RuneLen(r) == len(value) {
			return fmt.Errorf("%s name %q starts or ends with %s; a name starts and ends with a letter or digit",
				kind, value, describeRune(r))
		}
	}
	return nil
}

func isLetterOrDigit(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r)
}

// describeRune writes r so that a control or invisible character is seen.
func describeRune(r rune) string {
	switch {
	case r == ' ':
		return "a space"
	case r == '\'':
		return `"'"`
	case unicode.IsGraphic(r) && !unicode.IsSpace(r):
		return fmt.Sprintf("%q", string(r))
	default:
		return fmt.Sprintf("the character %U", r)
	}
}

func describeSymbols(symbols string) string {
	var parts []string
	for _, r := range symbols {
		if r == ' ' {
			parts = append(parts, "space")
			continue
		}
		parts = append(parts, string(r))
	}
	return strings.Join(parts, " ")
}
