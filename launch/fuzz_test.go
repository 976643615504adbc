package launch

import (
	"regexp"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

// FuzzClassify feeds Classify arbitrary output and a plan rule with an
// arbitrary pattern: it must never panic, and what it returns must be the
// first rule that matches.
func FuzzClassify(f *testing.F) {
	for _, s := range samples {
		f.Add(s.provider, s.exit, s.msg, "InsufficientInstanceCapacity")
	}
	f.Add("aws", 1, "\xff\xfe(InsufficientInstanceCapacity)", "(")
	f.Add("", 0, "", "")
	f.Add("AWS", -1, strings.Repeat("capacity ", 1000), `(?i)CAPACITY\b`)
	rules := DefaultRules()
	f.Fuzz(func(t *testing.T, provider string, exit int, output, pattern string) {
		all := append([]gpuwarden.LaunchRule{{Pattern: pattern, Class: "quota", Why: "plan rule"}}, rules...)
		r, ok := Classify(all, provider, exit, output)
		for i, want := range all {
			re, err := regexp.Compile(want.Pattern)
			if err != nil {
				continue // Classify skips a rule that does not compile
			}
			applies := (want.Provider == "" || strings.EqualFold(want.Provider, provider)) &&
				(want.ExitCode == nil || *want.ExitCode == exit) && re.MatchString(output)
			if !applies {
				continue
			}
			if !ok || r.Pattern != want.Pattern || r.Class != want.Class || r.Provider != want.Provider {
				t.Fatalf("Classify = %+v, %v; the first rule that applies is %d: %+v", r, ok, i, want)
			}
			return
		}
		if ok {
			t.Fatalf("Classify = %+v, but no rule applies", r)
		}
	})
}

// FuzzRender feeds Render arbitrary templates and values: it must never
// panic, must render the same twice, and quote must make any value one
// shell word that reads back as the value.
func FuzzRender(f *testing.F) {
	f.Add("aws ec2 run-instances --tag Name={{.Name}} --az {{.Zone}}", "gw-0123abcd-1")
	f.Add("stop {{quote .InstanceID}}", "it's $(reboot)")
	f.Add("{{if .InstanceID}}{{.InstanceID}}{{else}}{{.Name}}{{end}}", "")
	f.Add("{{.Regoin}}", "x")
	f.Add("{{", "")
	f.Add(`{{define "a"}}{{.Name}}{{end}}{{template "a" .}}`, "n")
	f.Fuzz(func(t *testing.T, tmpl, value string) {
		// range over a number loops as long as the number says; that is
		// the template author's to choose, not a fault to find here.
		if strings.Contains(tmpl, "range") {
			t.Skip()
		}
		v := Vars{Name: value, Provider: "aws", Region: value, InstanceID: value}
		a, errA := Render(tmpl, v)
		b, errB := Render(tmpl, v)
		if a != b || (errA == nil) != (errB == nil) {
			t.Fatalf("Render differs between calls: %q %v / %q %v", a, errA, b, errB)
		}
		q := shellQuote(value)
		if q == value {
			if value == "" || strings.ContainsAny(value, " \t\n'\"\\$`;&|<>(){}[]*?!#~") {
				t.Fatalf("quote left %q bare", value)
			}
			return
		}
		if !strings.HasPrefix(q, "'") || !strings.HasSuffix(q, "'") ||
			strings.ReplaceAll(q[1:len(q)-1], `'\''`, "'") != value {
			t.Fatalf("quote(%q) = %q does not read back", value, q)
		}
	})
}
