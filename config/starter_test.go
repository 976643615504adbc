package config

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

func TestStarterGolden(t *testing.T) {
	got := DefaultStarter().Render()
	golden := filepath.Join("testdata", "starter.golden.yaml")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./config -run TestStarterGolden -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("Render() differs from %s; run with -update if the change is intended\n got:\n%s", golden, got)
	}
}

func TestStarterRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		s    Starter
	}{
		{"default", DefaultStarter()},
		{"inference with countries", Starter{Name: "serve", Kind: gpuwarden.KindInference, ParamsB: 70, Precision: gpuwarden.FP8,
			WorkHours: 730, BudgetLimit: 12_345_670_000, Currency: "EUR", Countries: []string{"DE", "FR"}}},
		{"notebook without size, name or limit", Starter{Kind: gpuwarden.KindNotebook, WorkHours: 12.5, IdleMinutes: 15}},
		{"name that needs quotes", Starter{Name: "team: \"vision\" #1\t é", Kind: gpuwarden.KindRender, WorkHours: 1,
			Currency: "GBP", BudgetLimit: 1}},
		{"name that looks like a boolean", Starter{Name: "yes", Kind: gpuwarden.KindNotebook, WorkHours: 1}},
		{"name that looks like a number", Starter{Name: "7e3", Kind: gpuwarden.KindNotebook, WorkHours: 1}},
		{"Norway", Starter{Kind: gpuwarden.KindNotebook, WorkHours: 8, Countries: []string{"NO"}}},
		{"fractions", Starter{Kind: gpuwarden.KindFinetuneLoRA, ParamsB: 0.135, WorkHours: 0.25, IdleMinutes: 2.5,
			BudgetLimit: 1_500_001}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse("starter.yaml", tt.s.Render())
			if err != nil {
				t.Fatalf("Parse(Render()): %v (hint: %s)\n%s", err, gpuwarden.ErrorHint(err), tt.s.Render())
			}
			got := Starter{Name: p.Name, Kind: p.Workload.Kind, ParamsB: p.Workload.ParamsB, Precision: p.Workload.Precision,
				WorkHours: p.WorkHours, IdleMinutes: p.OnHours.AutoShutdownIdleMinutes, BudgetLimit: p.Budget.MonthlyLimit,
				Currency: p.Budget.Currency, Countries: p.Residency.Countries}
			want := tt.s
			// What the starter leaves out comes back as the defaults.
			if want.Precision == "" {
				want.Precision = defaultPrecision(want.Kind)
			}
			if want.Currency == "" {
				want.Currency = DefaultCurrency
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("round trip\n got: %+v\nwant: %+v", got, want)
			}
		})
	}
}

// TestStarterDocumentsEveryField keeps the starter in step with the Plan: a
// field added to the Plan must be shown, live or commented out, in the file.
func TestStarterDocumentsEveryField(t *testing.T) {
	out := string(DefaultStarter().Render())
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for _, name := range fieldNames(typ) {
			f := structFields(typ)[name]
			if !regexp.MustCompile(`(?m)^\s*(# )?\s*` + regexp.QuoteMeta(name) + `:`).MatchString(out) {
				t.Errorf("starter does not show %s%s", prefix, name)
			}
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct && ft != microsType {
				walk(prefix+name+".", ft)
			}
		}
	}
	walk("", planType)

	// Each top-level section opens with a comment naming it.
	for _, name := range fieldNames(planType) {
		if !strings.Contains(out, "\n# "+name+": ") {
			t.Errorf("section %s has no explaining comment", name)
		}
	}
}

func TestStarterLinesFit(t *testing.T) {
	for i, line := range strings.Split(string(DefaultStarter().Render()), "\n") {
		if n := len([]rune(line)); n > 110 {
			t.Errorf("line %d is %d characters: %s", i+1, n, line)
		}
	}
}

func TestYAMLString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"inference", "inference"},
		{"finetune-qlora", "finetune-qlora"},
		{"", `""`},
		{"yes", `"yes"`},
		{"Null", `"Null"`},
		{"7b", `"7b"`},
		{"a: b", `"a: b"`},
		{"x #y", `"x #y"`},
		{"<tag>&", `"<tag>&"`},
		{"line\nbreak", `"line\nbreak"`},
	}
	for _, tt := range tests {
		if got := yamlString(tt.in); got != tt.want {
			t.Errorf("yamlString(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestYAMLNumber(t *testing.T) {
	tests := []struct {
		in   float64
		want string
	}{
		{0, "0"}, {120, "120"}, {0.5, "0.5"}, {12.25, "12.25"}, {-3, "-3"}, {1e-7, "1e-07"}, {2e20, "2e+20"},
	}
	for _, tt := range tests {
		if got := yamlNumber(tt.in); got != tt.want {
			t.Errorf("yamlNumber(%v) = %s, want %s", tt.in, got, tt.want)
		}
	}
}
