package catalog

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

var (
	regionsOnce sync.Once
	regions     map[string]string // "provider\x00region", lower case → ISO country
	regionsErr  error
)

// regionTable parses regions.csv once.
func regionTable() (map[string]string, error) {
	regionsOnce.Do(func() {
		var rowsIn []map[string]string
		if rowsIn, regionsErr = simpleTable("regions.csv", "provider", "region", "country"); regionsErr != nil {
			return
		}
		regions = make(map[string]string, len(rowsIn))
		for _, r := range rowsIn {
			if !isCountryCode(r["country"]) {
				regionsErr = sideTableErr("regions.csv", r, "country", "is not a two-letter ISO 3166 code")
				return
			}
			regions[regionKey(r["provider"], r["region"])] = r["country"]
		}
	})
	return regions, regionsErr
}

func regionKey(provider, region string) string {
	return strings.ToLower(strings.TrimSpace(provider)) + "\x00" + strings.ToLower(strings.TrimSpace(region))
}

// CountryOf returns the ISO 3166 alpha-2 country of a provider's region from
// the embedded region table ("aws", "eu-central-1" → "DE"), ignoring case, or
// "" when the table does not know the region.
func CountryOf(provider, region string) string {
	table, err := regionTable()
	if err != nil {
		return ""
	}
	p := normalizeProvider(provider)
	if c := table[regionKey(p, region)]; c != "" {
		return c
	}
	switch p {
	case "runpod", "lium", "primeintellect":
		// RunPod and Lium name a region by its country ("US", "CZ"), and
		// so does Prime Intellect in v8 (the place moved to its
		// AvailabilityZone column): any new one is its own country,
		// without waiting for the table.
		if cc := strings.ToUpper(strings.TrimSpace(region)); isCountryCode(cc) {
			return cc
		}
	case "simplepod":
		// SimplePod writes Continent-CC ("Europe-PL", "North America-CA").
		if i := strings.LastIndexByte(region, '-'); i >= 0 {
			if cc := strings.TrimSpace(region[i+1:]); isCountryCode(cc) {
				return cc
			}
		}
	case "shadeform", "spheron":
		// Shadeform and Spheron write city-country-N ("kansascity-usa-2",
		// "helsinki-finland-4") for the clouds they resell; Spheron's
		// other regions ("Finland 3", "CANADA-1") are in the table.
		parts := strings.Split(strings.ToLower(strings.TrimSpace(region)), "-")
		if len(parts) >= 3 {
			return countryWords[parts[len(parts)-2]]
		}
	}
	return ""
}

// countryWords are the country names Shadeform's regions end with.
var countryWords = map[string]string{
	"usa": "US", "canada": "CA", "mexico": "MX", "brazil": "BR", "uk": "GB", "ireland": "IE",
	"france": "FR", "germany": "DE", "netherlands": "NL", "belgium": "BE", "spain": "ES",
	"portugal": "PT", "italy": "IT", "switzerland": "CH", "austria": "AT", "poland": "PL",
	"czechia": "CZ", "sweden": "SE", "norway": "NO", "finland": "FI", "denmark": "DK",
	"iceland": "IS", "israel": "IL", "uae": "AE", "india": "IN", "singapore": "SG",
	"japan": "JP", "korea": "KR", "taiwan": "TW", "australia": "AU", "southafrica": "ZA",
}

// splitLocation reads marketplace locations written "City, CC, Continent"
// (Vast.ai's "Czechia, CZ, EU", ", US, NA") as the place and its country.
func splitLocation(loc string) (place, country string, ok bool) {
	first := strings.IndexByte(loc, ',')
	if first < 0 {
		return "", "", false
	}
	rest := loc[first+1:]
	second := strings.IndexByte(rest, ',')
	if second < 0 {
		return "", "", false
	}
	cc := strings.ToUpper(strings.TrimSpace(rest[:second]))
	if !isCountryCode(cc) {
		return "", "", false
	}
	place = strings.TrimSpace(loc[:first])
	if place == "" {
		place = cc
	}
	return place, cc, true
}

// placeOf resolves a catalog location to the region an offer shows and its
// country.
func placeOf(provider, loc string) (region, country string) {
	if place, cc, ok := splitLocation(loc); ok {
		return place, cc
	}
	// Prime Intellect writes "CC - region" ("FI - FIN-01", "US - us-east1-a").
	if cc, _, ok := strings.Cut(loc, " - "); ok && isCountryCode(cc) {
		return loc, cc
	}
	return loc, CountryOf(provider, loc)
}

// unknownRegionWarning names the regions of a provider that the region
// table has no country for, so that a residency rule excluding them is
// explained where the prices are read, not discovered as a silent gap.
func unknownRegionWarning(provider string, regions []string) string {
	sorted := append([]string(nil), regions...)
	sort.Strings(sorted)
	shown := sorted
	if len(shown) > 8 {
		shown = shown[:8]
	}
	list := strings.Join(shown, ", ")
	if len(sorted) > len(shown) {
		list += fmt.Sprintf(" and %d more", len(sorted)-len(shown))
	}
	return fmt.Sprintf("%s %s %s not in the region table: no country, so residency rules cannot place %s (%s)",
		plural(len(sorted), "region", "regions"), "of "+provider, isAre(len(sorted)), itThem(len(sorted)), list)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

func itThem(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}
