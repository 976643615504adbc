package catalog

import (
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

func TestGPUModelsAreCanonical(t *testing.T) {
	for _, m := range gpuModels {
		name, sizes := canonicalGPU(m, 0)
		if name != m || len(sizes) == 0 {
			t.Errorf("canonicalGPU(%q) = %q, %v; want the name back, with its sizes", m, name, sizes)
		}
	}
	table, err := gpuTable()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range table {
		found := false
		for _, m := range gpuModels {
			found = found || m == g.Model
		}
		if !found {
			t.Errorf("gpus.csv model %s is not in gpuModels", g.Model)
		}
	}
}

func TestNames(t *testing.T) {
	cat, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	// A user's own file adds a provider, a region and a model.
	cat.Offers = gpuwarden.OffersOf(append(cat.Offers.Slice(), gpuwarden.Offer{Provider: "hostco", Region: "fra1", GPU: "B300", GPUCount: 1})...)
	n := KnownNames(cat)
	tests := []struct {
		name string
		err  error
		want string // the message, "" for known
	}{
		{"model", n.CheckGPU("H100-SXM"), ""},
		{"family", n.CheckGPU("H100"), ""},
		{"any case and spelling", n.CheckGPU("geforce rtx 4090"), ""},
		{"a family of the RTX cards", n.CheckGPU("rtx"), ""},
		{"a model no offer has", n.CheckGPU("K80"), ""},
		{"a model only the user's file has", n.CheckGPU("b300"), ""},
		{"no GPU given", n.CheckGPU(""), ""},
		{"letter O for zero", n.CheckGPU("H1OO"), `unknown GPU "H1OO"; did you mean H100?`},
		{"part of a name", n.CheckGPU("4090"), `unknown GPU "4090"; did you mean RTX-4090?`},
		{"nothing close", n.CheckGPU("Voodoo5"), `unknown GPU "Voodoo5"`},
		{"provider", n.CheckProvider("AWS"), ""},
		{"provider alias", n.CheckProvider("LambdaLabs"), ""},
		{"provider without offers", n.CheckProvider("vultr"), ""},
		{"provider of the user's file", n.CheckProvider("hostco"), ""},
		{"provider typo", n.CheckProvider("awz"), `unknown provider "awz"; did you mean aws?`},
		{"region", n.CheckRegion("aws", "US-EAST-1"), ""},
		{"region of any provider", n.CheckRegion("", "europe-west4"), ""},
		{"region of the user's file", n.CheckRegion("hostco", "fra1"), ""},
		{"region typo", n.CheckRegion("aws", "us-est-1"), `unknown aws region "us-est-1"; did you mean us-east-1?`},
		{"region of another provider", n.CheckRegion("aws", "europe-west4"), `unknown aws region "europe-west4" (it is a region of gcp)`},
		{"region typo of any provider", n.CheckRegion("", "eu-centrl-1"), `unknown region "eu-centrl-1"; did you mean eu-central-1?`},
		{"region of an unknown provider is not checked", n.CheckRegion("awz", "x"), ""},
		{"long name cut", n.CheckProvider(strings.Repeat("z", 500)), `unknown provider "` + strings.Repeat("z", maxQuoted) + `…"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if tt.err != nil {
				got = tt.err.Error()
				if gpuwarden.ErrorCodeOf(tt.err) != gpuwarden.EInvalid || gpuwarden.ErrorHint(tt.err) == "" {
					t.Errorf("error %v: code %s, hint %q; want invalid, with a hint", tt.err, gpuwarden.ErrorCodeOf(tt.err), gpuwarden.ErrorHint(tt.err))
				}
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSuggestName(t *testing.T) {
	known := []string{"aws", "azure", "gcp", "lambda", "oci"}
	tests := []struct{ typed, want string }{
		{"awz", "aws"},
		{"lamda", "lambda"},
		{"gcpp", "gcp"},
		{"x", ""}, // too far from every name
		{"oc", "oci"},
		{"ab", ""}, // two away from "aws", but as long as what was typed
		{"", ""},
	}
	for _, tt := range tests {
		if got := suggestName(tt.typed, known, strings.ToLower); got != tt.want {
			t.Errorf("suggestName(%q) = %q, want %q", tt.typed, got, tt.want)
		}
	}
}
