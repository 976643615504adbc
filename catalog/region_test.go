package catalog

import "testing"

func TestCountryOf(t *testing.T) {
	tests := []struct{ provider, region, want string }{
		{"aws", "us-east-1", "US"},
		{"aws", "eu-central-1", "DE"},
		{"aws", "eu-west-1", "IE"},
		{"aws", "eu-west-3", "FR"},
		{"AWS", "EU-CENTRAL-1", "DE"},
		{"gcp", "europe-west4", "NL"},
		{"gcp", "europe-west1", "BE"},
		{"gcp", "asia-east1", "TW"},
		{"google", "europe-west3", "DE"},
		{"azure", "westeurope", "NL"},
		{"azure", "northeurope", "IE"},
		{"azure", "eastus", "US"},
		{"lambda", "europe-central-1", "DE"},
		{"runpod", "EU-RO-1", "RO"},
		{"runpod", "US", "US"},
		{"vast", "Germany", "DE"},
		{"oci", "eu-frankfurt-1", "DE"},
		{"ovh", "GRA", "FR"},
		{"scaleway", "fr-par-2", "FR"},
		{"hetzner", "fsn1", "DE"},
		{"cudo", "no-kristiansand-1", "NO"},
		{"nebius", "eu-north1", "FI"},
		{"fluidstack", "CANADA", "CA"},
		{"paperspace", "AMS1", "NL"},
		{"lambda", "australia-east-1", "AU"},
		{"lambda", "europe-south-1", "IT"},
		{"hyperbolic", "default", "US"},
		{"shadeform", "kansascity-usa-2", "US"},
		{"shadeform", "london-uk-1", "GB"},
		{"shadeform", "atlantis-nowhere-1", ""},
		{"runpod", "AU", "AU"},
		{"seeweb", "it-fr2", "IT"},
		{"simplepod", "North America-CA", "CA"},
		{"mithril", "us-central3-a", "US"},
		{"mithril", "us-central2-b", "US"},
		{"primeintellect", "IS", "IS"},
		{"lium", "HK", "HK"},
		{"spheron", "oslo-norway-3", "NO"},
		{"spheron", "Finland 3", "FI"},
		{"spheron", "TYO4", "JP"},
		{"hyperstack", "CANADA-1", "CA"},
		{"jarvislabs", "IN1", "IN"},
		{"verda", "FIN-03", "FI"},
		{"yotta", "us-east-2", "US"},
		{"daytona", "earth", ""},
		{"oci", "af-casablanca-1", "MA"},
		{"azure", "brazilsoutheast", "BR"},
		{"azure", "usgovvirginia", "US"},
		{"aws", "ap-southeast-6", "NZ"},
		{"aws", "mars-north-1", ""},
		{"nobody", "us-east-1", ""},
		{"", "", ""},
	}
	for _, tt := range tests {
		if got := CountryOf(tt.provider, tt.region); got != tt.want {
			t.Errorf("CountryOf(%q, %q) = %q, want %q", tt.provider, tt.region, got, tt.want)
		}
	}
}

func TestRegionTableSize(t *testing.T) {
	table, err := regionTable()
	if err != nil {
		t.Fatal(err)
	}
	if len(table) < 100 {
		t.Errorf("region table has %d rows, want 100 or more", len(table))
	}
	if got, want := len(table), dataRows(t, "regions.csv"); got != want {
		t.Errorf("region table has %d distinct regions, the file %d rows: duplicates?", got, want)
	}
}

func TestSplitLocation(t *testing.T) {
	tests := []struct {
		loc, place, country string
		ok                  bool
	}{
		{"Czechia, CZ, EU", "Czechia", "CZ", true},
		{", US, NA", "US", "US", true},
		{"St.-Petersburg, RU, EU", "St.-Petersburg", "RU", true},
		{"us-east-1", "", "", false},
		{"Paris, France, EU", "", "", false},
		{"a, b", "", "", false},
	}
	for _, tt := range tests {
		place, country, ok := splitLocation(tt.loc)
		if place != tt.place || country != tt.country || ok != tt.ok {
			t.Errorf("splitLocation(%q) = %q, %q, %v; want %q, %q, %v", tt.loc, place, country, ok, tt.place, tt.country, tt.ok)
		}
	}
}
