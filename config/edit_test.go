package config

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/parser"

	"github.com/gpuwarden/gpuwarden"
)

// planB is a launch target as `gpuwarden plan -o targets` writes one: a
// struct with yaml tags, some fields empty and so left out.
var planB = gpuwarden.Target{
	Name:           "plan-b",
	Provider:       "aws",
	Region:         "eu-west-1",
	Offer:          "g6.2xlarge",
	Launch:         "aws ec2 run-instances --region {{.Region}} --instance-type {{.Offer}}",
	TimeoutSeconds: 900,
}

// readEditInput reads an input from testdata/edit.
func readEditInput(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "edit", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkGolden compares got with testdata/edit/NAME.golden.yaml, or rewrites
// the file with -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "edit", name+".golden.yaml")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("ApplyEdits differs from %s (rerun with -update if the change is intended)\n got:\n%s\nwant:\n%s", path, got, want)
	}
}

func TestApplyEdits(t *testing.T) {
	tests := []struct {
		name  string // the golden file's name
		in    string // the input in testdata/edit
		edits []Edit
	}{
		{"scalar-keeps-comment", "plan.yaml", []Edit{
			{Path: "on_hours.auto_shutdown_idle_minutes", Value: 30, Why: "an hour idle costs more than the restart"},
		}},
		{"missing-parent", "plan.yaml", []Edit{
			{Path: "data.egress_gb.internet", Value: 250},
			{Path: "box.provider", Value: "aws"},
			{Path: "box.instance", Value: "g6.xlarge"},
		}},
		{"starter-commented-out", "starter.yaml", []Edit{
			{Path: "budget.alerts_percent", Value: []int{50, 80, 100}},
			{Path: "hours_per_month", Value: 720},
			{Path: "on_hours.sessions_per_month", Value: 12},
			{Path: "labels.owner", Value: "ana"},
			{Path: "box.hourly_rate", Value: gpuwarden.Micros(804_800)},
		}},
		{"replace-lists", "plan.yaml", []Edit{
			// A flow list stays flow and keeps its comment; a block list stays block.
			{Path: "budget.alerts_percent", Value: []int{50, 80, 100}},
			{Path: "residency.countries", Value: []string{"DE", "FR", "NL"}},
		}},
		{"replace-block-with-scalar", "plan.yaml", []Edit{
			{Path: "residency", Value: map[string]any{"regions": []string{"aws:eu-central-1"}}},
			{Path: "targets[0].launch", Value: "aws ec2 run-instances --region {{.Region}} --instance-type {{.Offer}} --dry-run"},
			{Path: "workload.precision", Value: "fp8"},
		}},
		{"append-target", "plan.yaml", []Edit{{Path: "targets", Value: planB, Append: true}}},
		{"append-target-flat", "flat.yaml", []Edit{
			{Path: "targets", Value: planB, Append: true},
			{Path: "providers.prefer", Value: "azure", Append: true},
			{Path: "providers.exclude", Value: "vast", Append: true},
			{Path: "budget.alerts_percent", Value: []int{90}},
		}},
		{"append-target-missing", "starter.yaml", []Edit{{Path: "targets", Value: planB, Append: true}}},
		{"multiple", "plan.yaml", []Edit{
			{Path: "name", Value: "llama-8b-serving-eu"},
			{Path: "budget.monthly_limit", Value: gpuwarden.MicrosFromFloat(1250.5)},
			{Path: "budget.currency", Value: "USD"},
			{Path: "providers.exclude", Value: "vast", Append: true},
			{Path: "targets", Value: planB, Append: true},
			{Path: "targets[0].zone", Value: "eu-central-1a"},
			{Path: "on_hours.auto_shutdown_idle_minutes", Value: 20},
			{Path: "on_hours.auto_shutdown_idle_minutes", Value: 15},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := readEditInput(t, tt.in)
			got, err := ApplyEdits(src, tt.edits)
			if err != nil {
				t.Fatalf("ApplyEdits: %v (hint: %s)", err, gpuwarden.ErrorHint(err))
			}
			checkGolden(t, tt.name, got)

			// Every input is a valid plan, and so must every result be.
			if _, err := Parse(tt.in, src); err != nil {
				t.Fatalf("input does not parse: %v", err)
			}
			if _, err := Parse(tt.name, got); err != nil {
				t.Errorf("result does not parse: %v\n%s", err, got)
			}

			again, err := ApplyEdits(got, tt.edits)
			if err != nil || !bytes.Equal(again, got) {
				t.Errorf("applying the edits twice changed the file again (err %v):\n%s", err, again)
			}

			crlf := func(b []byte) []byte { return bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n")) }
			if gotCRLF, err := ApplyEdits(crlf(src), tt.edits); err != nil || !bytes.Equal(gotCRLF, crlf(got)) {
				t.Errorf("CRLF file: err %v, got\n%q\nwant\n%q", err, gotCRLF, crlf(got))
			}

			trim := func(b []byte) []byte { return bytes.TrimSuffix(b, []byte("\n")) }
			if gotTrim, err := ApplyEdits(trim(src), tt.edits); err != nil || !bytes.Equal(gotTrim, trim(got)) {
				t.Errorf("file without a final newline: err %v, got\n%s\nwant\n%s", err, gotTrim, trim(got))
			}

			bom := append([]byte("\ufeff"), src...)
			if gotBOM, err := ApplyEdits(bom, tt.edits); err != nil || !bytes.Equal(gotBOM, append([]byte("\ufeff"), got...)) {
				t.Errorf("file with a byte-order mark: err %v, got\n%q", err, gotBOM)
			}
		})
	}
}

// TestApplyEditsUntouched checks the promise the golden files only show: an
// edit changes its own line and not one byte around it.
func TestApplyEditsUntouched(t *testing.T) {
	src := readEditInput(t, "plan.yaml")
	got, err := ApplyEdits(src, []Edit{{Path: "budget.monthly_limit", Value: 2000}})
	if err != nil {
		t.Fatal(err)
	}
	const oldLine, newLine = "  monthly_limit: 1500.00\n", "  monthly_limit: 2000\n"
	i := bytes.Index(src, []byte(oldLine))
	if i < 0 {
		t.Fatal("input changed: no monthly_limit line")
	}
	if !bytes.HasPrefix(got, src[:i]) {
		t.Errorf("bytes before the edited line changed")
	}
	if !bytes.HasSuffix(got, src[i+len(oldLine):]) {
		t.Errorf("bytes after the edited line changed")
	}
	if want := string(src[:i]) + newLine + string(src[i+len(oldLine):]); string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestApplyEditsShapes covers layouts the golden files do not: flow
// mappings, nulls, block scalars, anchors, empty files.
func TestApplyEditsShapes(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		edits []Edit
		want  string
	}{
		{"empty file", "", []Edit{{Path: "budget.currency", Value: "EUR"}},
			"budget:\n  currency: EUR\n"},
		// A comment after a value keeps its column (issue #32: preflight
		// --fix moved the example's "# per month" two columns right).
		{"comment keeps its column", "budget:\n  monthly_limit: 0           # per month\n", []Edit{{Path: "budget.monthly_limit", Value: 100}},
			"budget:\n  monthly_limit: 100         # per month\n"},
		{"comment keeps its column, shorter value", "work_hours: 1000   # a month\n", []Edit{{Path: "work_hours", Value: 5}},
			"work_hours: 5      # a month\n"},
		{"comment moves only as far as it must", "work_hours: 1 # a month\n", []Edit{{Path: "work_hours", Value: 1000}},
			"work_hours: 1000 # a month\n"},
		{"comment after an empty value", "box:\n  instance:      # soon\n", []Edit{{Path: "box.instance", Value: "g6"}},
			"box:\n  instance: g6   # soon\n"},
		{"list item keeps its comment column", "providers:\n  prefer:\n    - aws      # first\n", []Edit{{Path: "providers.prefer[0]", Value: "gcp"}},
			"providers:\n  prefer:\n    - gcp      # first\n"},
		{"comments only", "# a plan\n", []Edit{{Path: "work_hours", Value: 10}},
			"# a plan\nwork_hours: 10\n"},
		{"comments only, commented-out key", "# work_hours: 5\n# more\n", []Edit{{Path: "work_hours", Value: 10}},
			"# work_hours: 5\nwork_hours: 10\n# more\n"},
		{"flow mapping parent", "budget: {monthly_limit: 5}\n", []Edit{{Path: "budget.currency", Value: "EUR"}},
			"budget: {monthly_limit: 5, currency: EUR}\n"},
		{"empty flow mapping", "budget: {}\n", []Edit{{Path: "budget.alerts_percent", Value: []int{1, 2}}},
			"budget: {alerts_percent: [1, 2]}\n"},
		{"value inside a flow mapping", "budget: {monthly_limit: 5, currency: USD}\n", []Edit{{Path: "budget.currency", Value: "EUR"}},
			"budget: {monthly_limit: 5, currency: EUR}\n"},
		{"append to a flow list", "providers:\n  prefer: [aws] # best\n", []Edit{{Path: "providers.prefer", Value: "gcp", Append: true}},
			"providers:\n  prefer: [aws, gcp] # best\n"},
		{"append to an empty flow list", "providers:\n  prefer: []\n", []Edit{{Path: "providers.prefer", Value: "gcp", Append: true}},
			"providers:\n  prefer: [gcp]\n"},
		{"empty parent", "box: # soon\nname: x\n", []Edit{{Path: "box.instance", Value: "g6.xlarge"}},
			"box: # soon\n  instance: g6.xlarge\nname: x\n"},
		{"null parent", "box: ~ # soon\nname: x\n", []Edit{{Path: "box.instance", Value: "g6.xlarge"}},
			"box: # soon\n  instance: g6.xlarge\nname: x\n"},
		{"null list", "targets:\nname: x\n", []Edit{{Path: "targets", Value: gpuwarden.Target{Name: "a", Provider: "p", Launch: "l"}, Append: true}},
			"targets:\n  - name: a\n    provider: p\n    launch: l\nname: x\n"},
		{"scalar to block", "residency: none # for now\nname: x\n", []Edit{{Path: "residency", Value: map[string]any{"countries": []string{"DE"}}}},
			"residency: # for now\n  countries: [DE]\nname: x\n"},
		{"block to scalar", "a: # note\n  b: 1\n  # inside\n  c: 2\nd: 3\n", []Edit{{Path: "a", Value: 5}},
			"a: 5 # note\nd: 3\n"},
		{"block to scalar at the end", "d: 3\na:\n  b: 1", []Edit{{Path: "a", Value: 5}},
			"d: 3\na: 5"},
		{"block scalar", "launch: |\n  one\n  two\nname: x\n", []Edit{{Path: "launch", Value: "three"}},
			"launch: three\nname: x\n"},
		{"multi-line text", "name: x\n", []Edit{{Path: "launch", Value: "one\ntwo"}},
			"name: x\nlaunch: |-\n  one\n  two\n"},
		{"multi-line text before a comment", "a: 1 # c\nb: 2\n", []Edit{{Path: "a", Value: "one\ntwo"}},
			"a: |- # c\n  one\n  two\nb: 2\n"},
		// A block scalar here would take the comment in as text.
		{"multi-line text above an indented comment", "a:\n  # note\n  b: 1\nc: 2\n", []Edit{{Path: "a", Value: "one\ntwo"}},
			"a: \"one\\ntwo\"\n  # note\nc: 2\n"},
		{"multi-line text in a list", "l:\n  - a\n", []Edit{{Path: "l", Value: "one\ntwo", Append: true}},
			"l:\n  - a\n  - |-\n      one\n      two\n"},
		{"item of a list", "l:\n  - a # first\n  - b\n", []Edit{{Path: "l[0]", Value: "z"}},
			"l:\n  - z # first\n  - b\n"},
		{"mapping in a list item", "l:\n  - name: a\n    x: 1\n", []Edit{{Path: "l[0].zone", Value: 2}},
			"l:\n  - name: a\n    x: 1\n    zone: 2\n"},
		{"item of a flow list", "l: [a, b]\n", []Edit{{Path: "l[1]", Value: "c"}},
			"l: [a, c]\n"},
		{"anchored value", "a: &x 1\nb: 2\n", []Edit{{Path: "a", Value: 3}},
			"a: &x 3\nb: 2\n"},
		{"quoted key", "rates:\n  \"A.B\": 1\n", []Edit{{Path: `rates."A.B"`, Value: 2}},
			"rates:\n  \"A.B\": 2\n"},
		{"text that needs quotes", "a: 1\n", []Edit{{Path: "b", Value: "yes: no # maybe"}},
			"a: 1\nb: \"yes: no # maybe\"\n"},
		{"money stays exact", "a: 1\n", []Edit{{Path: "rate", Value: gpuwarden.Micros(804_800)}},
			"a: 1\nrate: 0.8048\n"},
		{"same value, other spelling", "a: [50,80 , 100]  # x\n", []Edit{{Path: "a", Value: []float64{50, 80, 100}}},
			"a: [50,80 , 100]  # x\n"},
		{"item already listed", "l:\n  - {name: a}\n", []Edit{{Path: "l", Value: map[string]string{"name": "a"}, Append: true}},
			"l:\n  - {name: a}\n"},
		{"tab before a value", "a:\t1\nb: 2\n", []Edit{{Path: "a", Value: 5}},
			"a:\t5\nb: 2\n"},
		// The YAML library's columns do not count these tabs.
		{"tabs in a flow mapping", "{\t0, a:\t[1,\t2]}\n", []Edit{{Path: "a", Value: []int{3}}, {Path: "b", Value: 4}},
			"{\t0, a:\t[3], b: 4}\n"},
		{"mixed line endings", "a: 1\r\nb: 2 # x\nc: 3\r\n", []Edit{{Path: "b", Value: 5}, {Path: "d", Value: 6}},
			"a: 1\r\nb: 5 # x\nc: 3\r\nd: 6\r\n"},
		{"wide characters", "é: ñ # ü\nx: 1\n", []Edit{{Path: "é", Value: "ö"}},
			"é: ö # ü\nx: 1\n"},
		{"document markers", "---\na: 1\n...\n", []Edit{{Path: "b", Value: 2}},
			"---\na: 1\nb: 2\n...\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ApplyEdits([]byte(tt.in), tt.edits)
			if err != nil {
				t.Fatalf("ApplyEdits: %v (hint: %s)", err, gpuwarden.ErrorHint(err))
			}
			if string(got) != tt.want {
				t.Errorf("got\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

// TestApplyEditsEverywhere sets every field of every test plan to values of
// each shape, and appends to it: the editor must manage every layout these
// files use, and each result must hold the edit and be stable when the edit
// is applied again.
func TestApplyEditsEverywhere(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("testdata", "edit", "plan.yaml"), filepath.Join("testdata", "edit", "flat.yaml"))
	values := []any{7, "two words", []int{1, 2}, map[string]any{"a": 1, "b": []string{"x"}},
		[]map[string]any{{"n": "a", "m": []string{"q"}}}, "one\ntwo", nil}
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var tree any
		if err := yaml.Unmarshal(src, &tree); err != nil {
			t.Fatal(err)
		}
		paths := append(allPaths(tree, ""), "new_field", "workload.new_field.deeper")
		for _, path := range paths {
			for _, v := range values {
				for _, app := range []bool{false, true} {
					e := Edit{Path: path, Value: v, Append: app}
					got, err := ApplyEdits(src, []Edit{e})
					if err != nil {
						if app && strings.Contains(err.Error(), "not a list") ||
							strings.Contains(err.Error(), "shared through an anchor") { // finetune.yaml's &rate
							continue
						}
						t.Errorf("%s: %+v: %v", name, e, err)
						continue
					}
					if again, err := ApplyEdits(got, []Edit{e}); err != nil || !bytes.Equal(again, got) {
						t.Errorf("%s: %+v: not stable: %v\n%s", name, e, err, again)
					}
				}
			}
		}
	}
}

// allPaths lists the edit path of every field and item in a decoded file.
func allPaths(v any, prefix string) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, w := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			out = append(append(out, p), allPaths(w, p)...)
		}
	case []any:
		for i, w := range x {
			p := prefix + "[" + strconv.Itoa(i) + "]"
			out = append(append(out, p), allPaths(w, p)...)
		}
	}
	return out
}

// TestApplyEditsStarter edits the file `gpuwarden init` writes today, not a
// frozen copy: each key must land right after its commented-out example,
// and the result must still be a valid plan.
func TestApplyEditsStarter(t *testing.T) {
	src := DefaultStarter().Render()
	tests := []struct {
		edit  Edit
		after string // the line the new one must follow
		line  string
	}{
		{Edit{Path: "budget.alerts_percent", Value: []int{50, 80, 100}}, "  # alerts_percent: [50, 80, 100]", "  alerts_percent: [50, 80, 100]"},
		{Edit{Path: "hours_per_month", Value: 720}, "# hours_per_month: 730", "hours_per_month: 720"},
		{Edit{Path: "on_hours.sessions_per_month", Value: 12}, "  # sessions_per_month: 15", "  sessions_per_month: 12"},
	}
	for _, tt := range tests {
		t.Run(tt.edit.Path, func(t *testing.T) {
			got, err := ApplyEdits(src, []Edit{tt.edit})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(got), "\n"+tt.after+"\n"+tt.line+"\n") {
				t.Errorf("%q does not follow %q:\n%s", tt.line, tt.after, got)
			}
			if _, err := Parse("starter", got); err != nil {
				t.Errorf("result does not parse: %v", err)
			}
		})
	}
}

func TestApplyEditsErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		edit Edit
		want string // the exact Message
	}{
		{"through a scalar", "budget:\n  monthly_limit: 5\n", Edit{Path: "budget.monthly_limit.x", Value: 1},
			"cannot set budget.monthly_limit.x: budget.monthly_limit at 2:18 is a number, not a mapping"},
		{"through a list", "targets:\n  - name: a\n", Edit{Path: "targets.name", Value: "b"},
			"cannot set targets.name: targets at 2:3 is a list, not a mapping"},
		{"append to a mapping", "budget:\n  monthly_limit: 5\n", Edit{Path: "budget", Value: 1, Append: true},
			"cannot append to budget: budget at 2:16 is a mapping, not a list"},
		{"append to a scalar", "name: x\n", Edit{Path: "name", Value: "y", Append: true},
			"cannot append to name: name at 1:7 is text, not a list"},
		{"invalid YAML", "workload:\n  kind: [inference\n", Edit{Path: "name", Value: "x"},
			"cannot set name: the plan file is not valid YAML at 2:9: sequence end token ']' not found"},
		{"duplicate key", "a: 1\na: 2\n", Edit{Path: "a", Value: 3},
			`cannot set a: the plan file is not valid YAML at 2:1: mapping key "a" already defined at [1:1]`},
		{"two documents", "a: 1\n---\nb: 2\n", Edit{Path: "a", Value: 3},
			"cannot set a: the plan file holds more than one YAML document"},
		{"top-level list", "- a\n", Edit{Path: "a", Value: 3},
			"cannot set a: the plan file's top level is a list, not a mapping of fields"},
		{"item out of range", "l: [a]\n", Edit{Path: "l[3]", Value: "b"},
			"cannot set l[3]: l has 1 items; there is no item 3"},
		{"index into a missing list", "a: 1\n", Edit{Path: "l[0].x", Value: "b"},
			"cannot set l[0].x: l does not exist, so it has no item 0"},
		{"through an alias", "a: &x {b: 1}\nc: *x\n", Edit{Path: "c.b", Value: 2},
			"cannot set c.b: c at 2:4 is an alias (*name) of a value written elsewhere"},
		{"shared anchor", "a: &x {b: 1}\nc: *x\n", Edit{Path: "a.b", Value: 2},
			"cannot set a.b: the value is shared through an anchor (&name) and its aliases, so the edit would change more than a.b"},
		{"empty path", "a: 1\n", Edit{Path: "", Value: 1}, `edit path "": is empty`},
		{"trailing dot", "a: 1\n", Edit{Path: "a.", Value: 1}, `edit path "a.": ends with a dot`},
		{"bad index", "a: 1\n", Edit{Path: "a[x]", Value: 1}, `edit path "a[x]": has a list index that is not a whole number`},
		{"unwritable value", "a: 1\n", Edit{Path: "a", Value: func() {}}, ""},
		{"nested 20000 deep", "a: " + strings.Repeat("[", 20_000) + "\n", Edit{Path: "b", Value: 1},
			"cannot set b: the plan file at 1:67: plan file nests deeper than 64 levels"},
		{"nested 100000 deep", strings.Repeat("[", 100_000), Edit{Path: "b", Value: 1},
			"cannot set b: the plan file at 1:65: plan file nests deeper than 64 levels"},
		{"too large", "a: 1\n# " + strings.Repeat("x", MaxFileSize) + "\n", Edit{Path: "b", Value: 1},
			"cannot edit b: the plan file is larger than 256 KiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ApplyEdits([]byte(tt.in), []Edit{tt.edit})
			if err == nil {
				t.Fatalf("no error; got\n%s", got)
			}
			var e *gpuwarden.Error
			if !errors.As(err, &e) || e.Code != gpuwarden.EInvalid {
				t.Fatalf("error %v is not an EInvalid *gpuwarden.Error", err)
			}
			if tt.want != "" && e.Message != tt.want {
				t.Errorf("Message\n got %q\nwant %q", e.Message, tt.want)
			}
			if e.Hint == "" {
				t.Errorf("no hint for %q", e.Message)
			}
			if _, err := Describe([]byte(tt.in), []Edit{tt.edit}); err == nil {
				t.Errorf("Describe accepted what ApplyEdits refused")
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	src := readEditInput(t, "plan.yaml")
	edits := []Edit{
		{Path: "budget.alerts_percent", Value: []int{50, 80, 100}},
		{Path: "on_hours.auto_shutdown_idle_minutes", Value: 30},
		{Path: "on_hours.auto_shutdown_idle_minutes", Value: 30},
		{Path: "box.instance", Value: "g6.xlarge"},
		{Path: "labels", Value: map[string]string{"owner": "ana", "ttl": "72h"}},
		{Path: "residency.countries", Value: []string{"DE"}},
		{Path: "targets", Value: gpuwarden.Target{Name: "plan-c", Provider: "gcp", Launch: "gcloud create"}, Append: true},
		{Path: "targets", Value: gpuwarden.Target{Name: "plan-c", Provider: "gcp", Launch: "gcloud create"}, Append: true},
		{Path: "targets", Value: planB, Append: true},
		{Path: "targets[0].launch", Value: "true"},
		{Path: "workload.kind", Value: "inference"},
	}
	want := []string{
		"budget.alerts_percent: [25, 50] → [50, 80, 100]",
		"on_hours.auto_shutdown_idle_minutes: 60 → 30",
		"on_hours.auto_shutdown_idle_minutes: 30 (unchanged)",
		"box.instance: (unset) → g6.xlarge",
		"labels: (unset) → {owner: ana, ttl: 72h}",
		"residency.countries: [DE, FR] → [DE]",
		"targets: append {name: plan-c, provider: gcp, launch: gcloud create}",
		"targets: {name: plan-c, provider: gcp, launch: gcloud create} (already listed)",
		"targets: append {name: plan-b, provider: aws, region: eu-west-1, offer: g6.…",
		// A value written over several lines is shown on one.
		"targets[0].launch: \"aws ec2 run-instances --region {{.Region}} --instance-type… → \"true\"",
		"workload.kind: inference (unchanged)",
	}
	got, err := Describe(src, edits)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d\n got %q\nwant %q", i, got[i], want[i])
		}
	}
	// Describe only reads.
	if !bytes.Equal(src, readEditInput(t, "plan.yaml")) {
		t.Error("Describe changed its input")
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gpuwarden.yaml")
	if err := os.WriteFile(path, []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(path, []byte("new\n")); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "new\n" {
		t.Fatalf("read back %q, %v", got, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want the old file's 0600", fi.Mode().Perm())
	}

	// A link stays a link; the file it points to gets the content.
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink(path, link); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	if err := WriteFileAtomic(link, []byte("via link\n")); err != nil {
		t.Fatal(err)
	}
	if li, err := os.Lstat(link); err != nil || li.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v %v", li, err)
	}
	if got, _ := os.ReadFile(path); string(got) != "via link\n" {
		t.Errorf("target holds %q", got)
	}

	// A new file, and no temporary file left behind.
	fresh := filepath.Join(dir, "new.yaml")
	if err := WriteFileAtomic(fresh, []byte("x: 1\n")); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "gpuwarden.yaml link.yaml new.yaml" {
		t.Errorf("directory holds %v", names)
	}

	if err := WriteFileAtomic(filepath.Join(dir, "missing", "x.yaml"), []byte("x")); err == nil {
		t.Error("no error for a missing directory")
	}
}

// FuzzApplyEdits feeds arbitrary YAML to fixed edits: the editor must never
// panic, and whatever it returns without an error must be YAML that holds
// the edit, and must not change when the edit is applied again.
func FuzzApplyEdits(f *testing.F) {
	for _, name := range []string{"plan.yaml", "flat.yaml", "starter.yaml"} {
		b, err := os.ReadFile(filepath.Join("testdata", "edit", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(0))
	}
	for _, doc := range []string{"", "# c\n", "a: 1", "budget: {x: [1, 2]}\n", "budget:\n  alerts_percent:\n  - 1\n",
		"targets: [a]\n", "targets:\n- a: |\n    x\n", "box: &b\n  x: 1\no: *b\n", "on_hours:\r\n  x: 1 # c\r\n",
		"budget: !!map {}\n", "? budget\n: x\n", "0:\r ", "{\t0}"} {
		for i := range 4 {
			f.Add([]byte(doc), uint8(i))
		}
	}
	edits := []Edit{
		{Path: "budget.alerts_percent", Value: []int{50, 80, 100}},
		{Path: "on_hours.auto_shutdown_idle_minutes", Value: 30},
		{Path: "targets", Value: planB, Append: true},
		{Path: "box.instance", Value: "g6.xlarge"},
	}
	f.Fuzz(func(t *testing.T, src []byte, which uint8) {
		e := edits[int(which)%len(edits)]
		out, err := ApplyEdits(src, []Edit{e})
		if err != nil {
			var ae *gpuwarden.Error
			if !errors.As(err, &ae) || ae.Message == "" {
				t.Fatalf("error is not a *gpuwarden.Error with a message: %v", err)
			}
			return
		}
		if _, err := parser.ParseBytes(out, 0); err != nil {
			t.Fatalf("output does not parse: %v\ninput:\n%q\noutput:\n%q", err, src, out)
		}
		var tree any
		if err := yaml.Unmarshal(bytes.TrimPrefix(out, []byte("\ufeff")), &tree); err != nil {
			t.Fatalf("output does not decode: %v\n%q", err, out)
		}
		again, err := ApplyEdits(out, []Edit{e})
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent (err %v):\n%q\n%q", err, out, again)
		}
	})
}

// BenchmarkApplyEdits is what `preflight --fix` does to the starter plan: a
// plan B appended, the budget set, the box moved; each edit re-parsed and
// checked.
func BenchmarkApplyEdits(b *testing.B) {
	src, err := os.ReadFile(filepath.Join("testdata", "edit", "starter.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	edits := []Edit{
		{Path: "targets", Append: true, Value: planB},
		{Path: "budget.monthly_limit", Value: 100.0},
		{Path: "budget.alerts_percent", Value: []int{50, 80, 100}},
		{Path: "box.instance", Value: "g6.xlarge"},
	}
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := ApplyEdits(src, edits); err != nil {
			b.Fatal(err)
		}
	}
}
