package catalog

import (
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

func TestCountryCode(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{"DE", "DE", ""},
		{"de", "DE", ""},
		{" Germany ", "DE", ""},
		{"GERMANY", "DE", ""},
		{"united  kingdom", "GB", ""},
		{"UK", "GB", ""},
		{"usa", "US", ""},
		{"Czech Republic", "CZ", ""},
		{"germny", "", "did you mean Germany (DE)?"},
		{"XX", "", `"XX" is neither`},
		{"", "", "is neither"},
		{"narnia", "", "is neither"},
	}
	for _, tt := range tests {
		got, err := CountryCode(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
				t.Errorf("CountryCode(%q) = %q, %v; want an invalid error with %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("CountryCode(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

// TestCountryTable: ISO 3166-1 has 249 alpha-2 codes; each is two capital
// letters with a name, and every region table's country is one of them.
func TestCountryTable(t *testing.T) {
	if len(isoCountries) != 249 {
		t.Errorf("%d codes, want ISO 3166-1's 249", len(isoCountries))
	}
	for code, name := range isoCountries {
		if !isCountryCode(code) || name == "" {
			t.Errorf("%q: %q", code, name)
		}
		if got, err := CountryCode(name); err != nil || got != code {
			t.Errorf("CountryCode(%q) = %q, %v; want %s", name, got, err, code)
		}
	}
	for alias, code := range countryAliases {
		if isoCountries[code] == "" || alias != strings.ToLower(alias) {
			t.Errorf("alias %q → %q", alias, code)
		}
	}
	table, err := regionTable()
	if err != nil {
		t.Fatal(err)
	}
	for key, code := range table {
		if isoCountries[code] == "" {
			t.Errorf("regions.csv: %q has country %q, not an ISO 3166 code", key, code)
		}
	}
	for word, code := range countryWords {
		if isoCountries[code] == "" {
			t.Errorf("countryWords: %q → %q", word, code)
		}
	}
}
