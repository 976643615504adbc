package config

import (
	"testing"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/catalog"
)

// TestCheckNames: a provider or region the catalog does not know is an
// error at its line, with a suggestion; a known one that matches no offer
// is fine, and is the planner's to report.
func TestCheckNames(t *testing.T) {
	cat, err := catalog.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	names := catalog.KnownNames(cat)
	tests := []struct {
		name, doc, want string
	}{
		{"known names", base + "residency:\n  regions: [aws:us-east-1, europe-west4]\nproviders:\n  prefer: [LambdaLabs]\n  exclude: [vultr]\n", ""},
		{"provider typo", base + "providers:\n  prefer: [aws, awz]\n",
			`plan.yaml:6:17: providers.prefer[1]: unknown provider "awz"; did you mean aws?`},
		{"excluded provider typo", base + "providers:\n  exclude:\n    - runpd\n",
			`plan.yaml:7:7: providers.exclude[0]: unknown provider "runpd"; did you mean runpod?`},
		{"region typo", base + "residency:\n  regions: [aws:us-est-1]\n",
			`plan.yaml:6:13: residency.regions[0]: unknown aws region "us-est-1"; did you mean us-east-1?`},
		{"provider of a region", base + "residency:\n  regions: [amz:us-east-1]\n",
			`plan.yaml:6:13: residency.regions[0]: unknown provider "amz"; did you mean aws?`},
		{"region alone", base + "residency:\n  regions: [eu-centrl-1]\n",
			`plan.yaml:6:13: residency.regions[0]: unknown region "eu-centrl-1"; did you mean eu-central-1?`},
		{"box from the catalog", base + "box: {provider: aws, region: us-est-1, instance: g6.xlarge}\n",
			`plan.yaml:5:30: box.region: unknown aws region "us-est-1"; did you mean us-east-1?`},
		{"box with its own rate", base + "box: {hourly_rate: 0.8, provider: my-colo, region: rack-7}\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := ParseFile("plan.yaml", []byte(tt.doc))
			if err != nil {
				t.Fatalf("ParseFile: %v", err)
			}
			got := ""
			if err := f.CheckNames(names); err != nil {
				got = err.Error()
				if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid || gpuwarden.ErrorHint(err) == "" {
					t.Errorf("code %s, hint %q; want invalid, with a hint", gpuwarden.ErrorCodeOf(err), gpuwarden.ErrorHint(err))
				}
			}
			if got != tt.want {
				t.Errorf("CheckNames:\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}
