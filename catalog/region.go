package catalog

import (
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
	return table[regionKey(normalizeProvider(provider), region)]
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
	return loc, CountryOf(provider, loc)
}
