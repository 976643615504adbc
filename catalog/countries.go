package catalog

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gpuwarden/gpuwarden"
)

// isoCountries are the ISO 3166-1 alpha-2 codes with their English short
// names, so that a country can be given by name ("Germany") where a code is
// asked for, and a two-letter word that is no country ("XX") is an error
// rather than a filter that matches nothing.
var isoCountries = map[string]string{
	"AD": "Andorra", "AE": "United Arab Emirates", "AF": "Afghanistan", "AG": "Antigua and Barbuda",
	"AI": "Anguilla", "AL": "Albania", "AM": "Armenia", "AO": "Angola", "AQ": "Antarctica",
	"AR": "Argentina", "AS": "American Samoa", "AT": "Austria", "AU": "Australia", "AW": "Aruba",
	"AX": "Åland Islands", "AZ": "Azerbaijan", "BA": "Bosnia and Herzegovina", "BB": "Barbados",
	"BD": "Bangladesh", "BE": "Belgium", "BF": "Burkina Faso", "BG": "Bulgaria", "BH": "Bahrain",
	"BI": "Burundi", "BJ": "Benin", "BL": "Saint Barthélemy", "BM": "Bermuda", "BN": "Brunei",
	"BO": "Bolivia", "BQ": "Caribbean Netherlands", "BR": "Brazil", "BS": "Bahamas", "BT": "Bhutan",
	"BV": "Bouvet Island", "BW": "Botswana", "BY": "Belarus", "BZ": "Belize", "CA": "Canada",
	"CC": "Cocos (Keeling) Islands", "CD": "DR Congo", "CF": "Central African Republic",
	"CG": "Republic of the Congo", "CH": "Switzerland", "CI": "Côte d'Ivoire", "CK": "Cook Islands",
	"CL": "Chile", "CM": "Cameroon", "CN": "China", "CO": "Colombia", "CR": "Costa Rica", "CU": "Cuba",
	"CV": "Cabo Verde", "CW": "Curaçao", "CX": "Christmas Island", "CY": "Cyprus", "CZ": "Czechia",
	"DE": "Germany", "DJ": "Djibouti", "DK": "Denmark", "DM": "Dominica", "DO": "Dominican Republic",
	"DZ": "Algeria", "EC": "Ecuador", "EE": "Estonia", "EG": "Egypt", "EH": "Western Sahara",
	"ER": "Eritrea", "ES": "Spain", "ET": "Ethiopia", "FI": "Finland", "FJ": "Fiji",
	"FK": "Falkland Islands", "FM": "Micronesia", "FO": "Faroe Islands", "FR": "France", "GA": "Gabon",
	"GB": "United Kingdom", "GD": "Grenada", "GE": "Georgia", "GF": "French Guiana", "GG": "Guernsey",
	"GH": "Ghana", "GI": "Gibraltar", "GL": "Greenland", "GM": "Gambia", "GN": "Guinea",
	"GP": "Guadeloupe", "GQ": "Equatorial Guinea", "GR": "Greece",
	"GS": "South Georgia and the South Sandwich Islands", "GT": "Guatemala", "GU": "Guam",
	"GW": "Guinea-Bissau", "GY": "Guyana", "HK": "Hong Kong", "HM": "Heard Island and McDonald Islands",
	"HN": "Honduras", "HR": "Croatia", "HT": "Haiti", "HU": "Hungary", "ID": "Indonesia", "IE": "Ireland",
	"IL": "Israel", "IM": "Isle of Man", "IN": "India", "IO": "British Indian Ocean Territory",
	"IQ": "Iraq", "IR": "Iran", "IS": "Iceland", "IT": "Italy", "JE": "Jersey", "JM": "Jamaica",
	"JO": "Jordan", "JP": "Japan", "KE": "Kenya", "KG": "Kyrgyzstan", "KH": "Cambodia", "KI": "Kiribati",
	"KM": "Comoros", "KN": "Saint Kitts and Nevis", "KP": "North Korea", "KR": "South Korea",
	"KW": "Kuwait", "KY": "Cayman Islands", "KZ": "Kazakhstan", "LA": "Laos", "LB": "Lebanon",
	"LC": "Saint Lucia", "LI": "Liechtenstein", "LK": "Sri Lanka", "LR": "Liberia", "LS": "Lesotho",
	"LT": "Lithuania", "LU": "Luxembourg", "LV": "Latvia", "LY": "Libya", "MA": "Morocco", "MC": "Monaco",
	"MD": "Moldova", "ME": "Montenegro", "MF": "Saint Martin", "MG": "Madagascar",
	"MH": "Marshall Islands", "MK": "North Macedonia", "ML": "Mali", "MM": "Myanmar", "MN": "Mongolia",
	"MO": "Macao", "MP": "Northern Mariana Islands", "MQ": "Martinique", "MR": "Mauritania",
	"MS": "Montserrat", "MT": "Malta", "MU": "Mauritius", "MV": "Maldives", "MW": "Malawi", "MX": "Mexico",
	"MY": "Malaysia", "MZ": "Mozambique", "NA": "Namibia", "NC": "New Caledonia", "NE": "Niger",
	"NF": "Norfolk Island", "NG": "Nigeria", "NI": "Nicaragua", "NL": "Netherlands", "NO": "Norway",
	"NP": "Nepal", "NR": "Nauru", "NU": "Niue", "NZ": "New Zealand", "OM": "Oman", "PA": "Panama",
	"PE": "Peru", "PF": "French Polynesia", "PG": "Papua New Guinea", "PH": "Philippines",
	"PK": "Pakistan", "PL": "Poland", "PM": "Saint Pierre and Miquelon", "PN": "Pitcairn Islands",
	"PR": "Puerto Rico", "PS": "Palestine", "PT": "Portugal", "PW": "Palau", "PY": "Paraguay",
	"QA": "Qatar", "RE": "Réunion", "RO": "Romania", "RS": "Serbia", "RU": "Russia", "RW": "Rwanda",
	"SA": "Saudi Arabia", "SB": "Solomon Islands", "SC": "Seychelles", "SD": "Sudan", "SE": "Sweden",
	"SG": "Singapore", "SH": "Saint Helena", "SI": "Slovenia", "SJ": "Svalbard and Jan Mayen",
	"SK": "Slovakia", "SL": "Sierra Leone", "SM": "San Marino", "SN": "Senegal", "SO": "Somalia",
	"SR": "Suriname", "SS": "South Sudan", "ST": "São Tomé and Príncipe", "SV": "El Salvador",
	"SX": "Sint Maarten", "SY": "Syria", "SZ": "Eswatini", "TC": "Turks and Caicos Islands", "TD": "Chad",
	"TF": "French Southern Territories", "TG": "Togo", "TH": "Thailand", "TJ": "Tajikistan",
	"TK": "Tokelau", "TL": "Timor-Leste", "TM": "Turkmenistan", "TN": "Tunisia", "TO": "Tonga",
	"TR": "Türkiye", "TT": "Trinidad and Tobago", "TV": "Tuvalu", "TW": "Taiwan", "TZ": "Tanzania",
	"UA": "Ukraine", "UG": "Uganda", "UM": "United States Minor Outlying Islands", "US": "United States",
	"UY": "Uruguay", "UZ": "Uzbekistan", "VA": "Vatican City", "VC": "Saint Vincent and the Grenadines",
	"VE": "Venezuela", "VG": "British Virgin Islands", "VI": "U.S. Virgin Islands", "VN": "Vietnam",
	"VU": "Vanuatu", "WF": "Wallis and Futuna", "WS": "Samoa", "YE": "Yemen", "YT": "Mayotte",
	"ZA": "South Africa", "ZM": "Zambia", "ZW": "Zimbabwe",
}

// countryAliases are other names people write for a country, lower case.
var countryAliases = map[string]string{
	"usa": "US", "united states of america": "US", "america": "US", "us of a": "US",
	"uk": "GB", "great britain": "GB", "britain": "GB", "england": "GB", "scotland": "GB", "wales": "GB",
	"czech republic": "CZ", "holland": "NL", "the netherlands": "NL", "korea": "KR",
	"republic of korea": "KR", "turkey": "TR", "uae": "AE", "ivory coast": "CI", "cape verde": "CV",
	"swaziland": "SZ", "burma": "MM", "east timor": "TL", "vatican": "VA", "russian federation": "RU",
	"deutschland": "DE", "allemagne": "DE", "españa": "ES", "espana": "ES", "italia": "IT",
	"schweiz": "CH", "suisse": "CH", "österreich": "AT", "osterreich": "AT", "polska": "PL",
	"sverige": "SE", "norge": "NO", "danmark": "DK", "suomi": "FI", "nederland": "NL",
	"belgique": "BE", "belgië": "BE", "nippon": "JP", "hongkong": "HK", "macau": "MO",
}

// countryByName maps each lower-case name and alias to its code.
var countryByName = func() map[string]string {
	m := make(map[string]string, len(isoCountries)+len(countryAliases))
	for code, name := range isoCountries {
		m[strings.ToLower(name)] = code
	}
	for alias, code := range countryAliases {
		m[alias] = code
	}
	return m
}()

// CountryCode reads a country given as its ISO 3166-1 alpha-2 code or its
// name, either in any case ("de", "DE", "Germany", "germany", "USA"), and
// returns the code; anything else is EInvalid, with the closest name when
// one is near.
func CountryCode(s string) (string, error) {
	t := strings.TrimSpace(s)
	if c := strings.ToUpper(t); isoCountries[c] != "" {
		return c, nil
	}
	key := strings.ToLower(strings.Join(strings.Fields(t), " "))
	if c, ok := countryByName[key]; ok {
		return c, nil
	}
	msg := fmt.Sprintf("%q is neither an ISO 3166 country code nor a country's name", t)
	if near := nearestCountry(key); near != "" {
		msg += fmt.Sprintf("; did you mean %s (%s)?", isoCountries[near], near)
	}
	return "", gpuwarden.Errorf(gpuwarden.EInvalid, "%s", msg).
		WithHint("give two-letter codes such as DE, FR or US, or names such as Germany")
}

// CountryCodes reads a comma-separated list of countries (see CountryCode).
func CountryCodes(list string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(list, ",") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		c, err := CountryCode(s)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// nearestCountry is the code whose name or alias is closest to typed, or "".
func nearestCountry(typed string) string {
	if len(typed) < 3 {
		return ""
	}
	names := make([]string, 0, len(countryByName))
	for n := range countryByName {
		names = append(names, n)
	}
	sort.Strings(names)
	if best := suggestName(typed, names, strings.ToLower); best != "" {
		return countryByName[best]
	}
	return ""
}
