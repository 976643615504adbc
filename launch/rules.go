package launch

import (
	_ "embed"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/goccy/go-yaml"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/yamlread"
)

//go:embed rules.yaml
var rulesYAML []byte

// ruleFile is the shape of rules.yaml; decoding is strict so that a typo
// in a built-in rule fails the tests instead of silently matching nothing.
type ruleFile struct {
	Rules []gpuwarden.LaunchRule `yaml:"rules"`
}

// rulesFile is how yamlread reads rules.yaml, with the limits every YAML
// file gpuwarden reads shares; the file is compiled in, so a broken limit is
// a build defect the tests catch.
var rulesFile = yamlread.File{Kind: "rules file", MaxBytes: 256 << 10, SizeHint: "keep the built-in rules short"}

var defaultRules = sync.OnceValues(func() ([]gpuwarden.LaunchRule, error) {
	var f ruleFile
	file, err := rulesFile.Parse(rulesYAML)
	if err != nil {
		return nil, fmt.Errorf("rules.yaml: %w", err)
	}
	if len(file.Docs) != 1 || file.Docs[0].Body == nil {
		return nil, fmt.Errorf("rules.yaml: want one YAML document, not %d", len(file.Docs))
	}
	if err := yaml.NodeToValue(file.Docs[0].Body, &f, yaml.Strict(), yaml.DisallowUnknownField()); err != nil {
		return nil, fmt.Errorf("rules.yaml: %w", err)
	}
	for i, r := range f.Rules {
		if err := ValidateRule(r); err != nil {
			return nil, fmt.Errorf("rules.yaml: rule %d: %w", i+1, err)
		}
	}
	return f.Rules, nil
})

// DefaultRules returns the built-in rule table from the embedded rules.yaml,
// a fresh copy each call so that callers may append to it.
func DefaultRules() []gpuwarden.LaunchRule {
	rules, err := defaultRules()
	if err != nil {
		// The file is compiled in and checked by the tests; a broken one is
		// a build defect, not something a user can act on.
		panic(err)
	}
	out := make([]gpuwarden.LaunchRule, len(rules))
	copy(out, rules)
	return out
}

// Classify returns the first rule whose provider matches (empty: any), whose
// exit code matches (unset: any) and whose pattern is found in output.
func Classify(rules []gpuwarden.LaunchRule, provider string, exitCode int, output string) (gpuwarden.LaunchRule, bool) {
	r, _, ok := classify(rules, provider, exitCode, output)
	return r, ok
}

// classify is Classify that also returns the text the pattern matched, which
// the attempt's line shows as the provider's own word for the failure.
func classify(rules []gpuwarden.LaunchRule, provider string, exitCode int, output string) (gpuwarden.LaunchRule, string, bool) {
	joined := "" // output unwrapped, made when a rule first needs it
	for _, r := range rules {
		if r.Provider != "" && !strings.EqualFold(r.Provider, provider) {
			continue
		}
		if r.ExitCode != nil && *r.ExitCode != exitCode {
			continue
		}
		re, err := compile(r.Pattern)
		if err != nil {
			// ValidateRule rejects these before a launch; a rule that slips
			// through must not stop the others from being tried.
			continue
		}
		if loc := re.FindStringIndex(output); loc != nil {
			return r, clip(output[loc[0]:loc[1]], 80), true
		}
		if joined == "" {
			joined = unwrap(output)
		}
		if loc := re.FindStringIndex(joined); loc != nil {
			return r, clip(joined[loc[0]:loc[1]], 80), true
		}
	}
	return gpuwarden.LaunchRule{}, "", false
}

// unwrap joins a CLI's folded lines back into one: gcloud folds long
// messages at about 80 columns with an indent ("is currently\n
// unavailable in the us-central1-a zone"), which no pattern written from
// the documented message would match.
func unwrap(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// The compiled patterns, kept because every failed attempt is matched
// against the whole table; bounded so that callers passing arbitrary
// patterns (a fuzzer, a long-lived server) cannot grow it without end.
var (
	reMu    sync.Mutex
	reCache = map[string]*regexp.Regexp{}
)

const reCacheMax = 1024

func compile(pattern string) (*regexp.Regexp, error) {
	reMu.Lock()
	re, ok := reCache[pattern]
	reMu.Unlock()
	if ok {
		return re, nil
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, err
	}
	reMu.Lock()
	if len(reCache) < reCacheMax {
		reCache[pattern] = re
	}
	reMu.Unlock()
	return re, nil
}

// classes and scopes a rule may name.
var (
	knownClasses = []string{gpuwarden.FailCapacity, gpuwarden.FailQuota, gpuwarden.FailAuth, gpuwarden.FailConfig, gpuwarden.FailUnknown}
	knownScopes  = []string{gpuwarden.ScopeZone, gpuwarden.ScopeRegion, gpuwarden.ScopeProvider}
)

// ValidateRule checks a launch rule as the plan-file validator needs it:
// the pattern compiles, the class and scope are known and the why template
// renders; the error names the field.
func ValidateRule(r gpuwarden.LaunchRule) error {
	if r.Pattern == "" {
		return fieldError("pattern", "required")
	}
	if _, err := regexp.Compile(r.Pattern); err != nil {
		return fieldError("pattern", err.Error())
	}
	if r.Class == "" {
		return fieldError("class", "required: one of "+strings.Join(knownClasses, ", "))
	}
	if !contains(knownClasses, r.Class) {
		return fieldError("class", fmt.Sprintf("%q is not one of %s", r.Class, strings.Join(knownClasses, ", ")))
	}
	if r.Scope != "" {
		if !contains(knownScopes, r.Scope) {
			return fieldError("scope", fmt.Sprintf("%q is not one of %s", r.Scope, strings.Join(knownScopes, ", ")))
		}
		if r.Class != gpuwarden.FailCapacity && r.Class != gpuwarden.FailQuota && r.Class != gpuwarden.FailAuth {
			return fieldError("scope", "only capacity, quota and auth failures rule anything out")
		}
	}
	if r.ExitCode != nil && *r.ExitCode == 0 {
		return fieldError("exit_code", "0 is a successful launch and is never classified")
	}
	if _, err := RenderText(r.Why, sampleVars); err != nil {
		return fieldError("why", err.Error())
	}
	return nil
}

// scopeOf is what a failure under rule r rules out for target t: the
// rule's scope, else zone for capacity and region for quota; a zone scope
// on a target without a zone widens to its region.
func scopeOf(r gpuwarden.LaunchRule, t gpuwarden.Target) string {
	s := r.Scope
	if s == "" {
		if r.Class == gpuwarden.FailQuota {
			s = gpuwarden.ScopeRegion
		} else {
			s = gpuwarden.ScopeZone
		}
	}
	if s == gpuwarden.ScopeZone && t.Zone == "" {
		s = gpuwarden.ScopeRegion
	}
	return s
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// clip makes s one line of at most n runes, for a line a person reads.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
