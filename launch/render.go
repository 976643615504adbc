package launch

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"sync"
	"text/template"
	"unicode"

	"github.com/gpuwarden/gpuwarden"
)

// Vars are the values a target's command templates may use.
type Vars struct {
	Name       string
	Provider   string
	Region     string
	Zone       string
	Offer      string
	LaunchID   string
	InstanceID string
}

// fields is Vars as the template sees it: a map, so that with
// missingkey=error a misspelt {{.Regoin}} is an error that names the key.
func (v Vars) fields() map[string]string {
	return map[string]string{
		"Name":       v.Name,
		"Provider":   v.Provider,
		"Region":     v.Region,
		"Zone":       v.Zone,
		"Offer":      v.Offer,
		"LaunchID":   v.LaunchID,
		"InstanceID": v.InstanceID,
	}
}

// funcs are the template functions. quote is kept so that plan files
// written when quoting was opt-in still parse; it changes nothing now,
// since every value is escaped for the shell (see escapeShell).
var funcs = template.FuncMap{"quote": func(v any) string { return fmt.Sprint(v) }}

// Render fills a command template with v for sh -c: every value is escaped
// for the shell quoting it sits in, so a value is always data, never
// syntax. An unknown name, or a value where no quoting is safe, is an error.
func Render(tmpl string, v Vars) (string, error) {
	t, err := template.New("command").Funcs(funcs).Funcs(escapers).Option("missingkey=error").Parse(tmpl)
	if err != nil {
		return "", fmt.Errorf("render: %w", err)
	}
	if err := escapeShell(t); err != nil {
		return "", fmt.Errorf("render: %w", err)
	}
	return execute(t, v)
}

// RenderText fills a message template (a rule's why) with v as plain text:
// it is shown, never run.
func RenderText(tmpl string, v Vars) (string, error) {
	t, err := template.New("text").Funcs(funcs).Option("missingkey=error").Parse(tmpl)
	if err != nil {
		return "", fmt.Errorf("render: %w", err)
	}
	return execute(t, v)
}

func execute(t *template.Template, v Vars) (string, error) {
	var b strings.Builder
	if err := t.Execute(&b, v.fields()); err != nil {
		return "", fmt.Errorf("render: %w", err)
	}
	return b.String(), nil
}

// sampleVars fill every name, so that checking a template by rendering it
// finds unknown names and bad function calls, not only syntax errors.
var sampleVars = Vars{
	Name: "gw-0123abcd-1", Provider: "aws", Region: "us-east-1", Zone: "us-east-1a",
	Offer: "p5.48xlarge", LaunchID: "20260101-000000-0123abcd", InstanceID: "i-0abc123def4567890",
}

func checkTemplate(tmpl string) error {
	if tmpl == "" {
		return nil
	}
	_, err := Render(tmpl, sampleVars)
	return err
}

// FieldError is a problem in one field of a target or rule, named as the
// plan file spells it, so that the plan-file validator can point at its line.
type FieldError struct {
	Field   string
	Problem string
}

// Error reads "field: problem".
func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }

func fieldError(field, problem string) error {
	return &gpuwarden.Error{Code: gpuwarden.EInvalid, Err: &FieldError{Field: field, Problem: problem}}
}

// ValidateTarget checks a target as the plan-file validator needs it: the
// required fields are there, the templates render and the instance_id
// expression compiles with a group; the error names the field.
func ValidateTarget(t gpuwarden.Target) error {
	if t.Name == "" {
		return fieldError("name", "required")
	}
	if strings.IndexFunc(t.Name, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0 {
		return fieldError("name", fmt.Sprintf("%q has spaces or control characters", t.Name))
	}
	if t.Provider == "" {
		return fieldError("provider", "required (aws, gcp, azure, runpod, lambda … or your own name)")
	}
	// The names reach the commands: held to the names real providers use
	// (gpuwarden.CheckName), as a price catalog's rows are when read, so
	// that a pasted `plan -o targets` block cannot carry shell syntax.
	for _, f := range [...]struct{ field, kind, value string }{
		{"provider", gpuwarden.NameProvider, t.Provider}, {"region", gpuwarden.NameRegion, t.Region},
		{"zone", gpuwarden.NameZone, t.Zone}, {"offer", gpuwarden.NameInstance, t.Offer},
	} {
		if err := gpuwarden.CheckName(f.kind, f.value); err != nil {
			return fieldError(f.field, err.Error())
		}
	}
	if strings.TrimSpace(t.Launch) == "" {
		return fieldError("launch", "required: the command that asks for the box")
	}
	for _, f := range []struct{ name, tmpl string }{{"launch", t.Launch}, {"stop", t.Stop}, {"ready", t.Ready}} {
		if err := checkTemplate(f.tmpl); err != nil {
			return fieldError(f.name, err.Error())
		}
	}
	if t.InstanceID != "" {
		re, err := regexp.Compile(t.InstanceID)
		if err != nil {
			return fieldError("instance_id", err.Error())
		}
		if re.NumSubexp() < 1 {
			return fieldError("instance_id", "needs a group, e.g. (i-[0-9a-f]+), around the ID")
		}
	}
	if t.TimeoutSeconds < 0 || math.IsNaN(t.TimeoutSeconds) || math.IsInf(t.TimeoutSeconds, 0) {
		return fieldError("timeout_seconds", "must be a number of seconds ≥ 0 (0: the default, 600)")
	}
	return nil
}

// safeID is what an instance ID read from a command's output may look
// like before it is put into the stop and ready commands: provider IDs are
// made of these, and anything else could be shell syntax. Compiled on
// first use: the bounded repeat compiles to some 200 KB of program, which
// every command of the binary, the agent too, paid at start (issue #19).
var safeID = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@+=-]{0,254}$`)
})

// PlainWord reports whether s is one shell word as it stands, so that it
// needs no quoting anywhere in a command.
func PlainWord(s string) bool { return s != "" && shellQuote(s) == s }

// shellQuote makes s a single POSIX shell word.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r < 128 && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("-_./:=@+,%", r)))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
