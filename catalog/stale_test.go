package catalog

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

func TestStale(t *testing.T) {
	offer := func(provider, asOf, origin string) gpuwarden.Offer {
		i := strings.LastIndexByte(origin, ':')
		line, err := strconv.Atoi(origin[i+1:])
		if err != nil {
			t.Fatal(err)
		}
		return gpuwarden.Offer{Provider: provider, AsOf: asOf, Origin: gpuwarden.Origin{File: origin[:i], Line: line}}
	}
	// The embedded offers are one source, whatever their providers.
	cat := &gpuwarden.Catalog{Offers: gpuwarden.OffersOf([]gpuwarden.Offer{
		offer("aws", "2026-07", "embedded skypilot/x/vms.csv:2"),
		offer("aws", "2026-06-15", "embedded skypilot/x/vms.csv:3"),
		// One fresh gcp price makes gcp fresh.
		offer("gcp", "2026-05", "embedded skypilot/x/vms.csv:4"),
		offer("gcp", "2026-10-20", "embedded skypilot/x/vms.csv:5"),
		offer("runpod", "", "embedded skypilot/x/vms.csv:6"), // undated: warned about at import
		offer("aws", "2026-03", "mine/aws.csv:2"),
		offer("lambda", "2026-10", "mine/lambda.csv:7"),
		offer("vast", "2026-06", ":0"), // built in code, no file
	}...)}
	now := time.Date(2026, 10, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		maxAge time.Duration
		want   []string
	}{
		{"90 days", 90 * 24 * time.Hour, []string{
			"prices of vast are from 2026-06, 151 days old: refresh with --catalog",
			"prices of aws in mine/aws.csv are from 2026-03, 243 days old: refresh the file",
		}},
		{"a year", 365 * 24 * time.Hour, nil},
		{"a week", 7 * 24 * time.Hour, []string{
			"prices of vast are from 2026-06, 151 days old: refresh with --catalog",
			"prices of the embedded snapshot are from 2026-10-20, 10 days old: run `gpuwarden catalog update`",
			"prices of aws in mine/aws.csv are from 2026-03, 243 days old: refresh the file",
			"prices of lambda in mine/lambda.csv are from 2026-10, 29 days old: refresh the file",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Stale(cat, now, tt.maxAge)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestStaleEmbeddedSnapshot: the snapshot is one source with one line
// (not 20, one per provider), and none on the day it was read.
func TestStaleEmbeddedSnapshot(t *testing.T) {
	c, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	if got := Stale(c, time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC), 90*24*time.Hour); len(got) != 0 {
		t.Errorf("snapshot stale three days after it was read: %q", got)
	}
	got := Stale(c, time.Date(2027, 6, 1, 0, 0, 0, 0, time.UTC), 90*24*time.Hour)
	want := []string{"prices of the embedded snapshot are from 2026-12-06, 177 days old: run `gpuwarden catalog update`"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestPriceNotes(t *testing.T) {
	emb := func(provider, country, asOf string) gpuwarden.Offer {
		return gpuwarden.Offer{Provider: provider, Country: country, AsOf: asOf,
			Origin: gpuwarden.Origin{File: "embedded skypilot/" + provider + "/vms.csv", Line: 2}}
	}
	mine := func(provider, country string) gpuwarden.Offer {
		return gpuwarden.Offer{Provider: provider, Country: country, AsOf: "2026-12-01",
			Origin: gpuwarden.Origin{File: "mine.csv", Line: 2}}
	}
	var many []gpuwarden.Offer
	for i := 0; i < 1200; i++ {
		many = append(many, emb("aws", "US", "2026-12-03"))
	}
	many = append(many, emb("gcp", "NL", "2026-12-03"), emb("verda", "FI", "2026-12-01"), emb("nebius", "FI", "2026-12-03"))
	fix := "run `gpuwarden catalog update` for every cloud's current prices"
	day := func(m time.Month, d int) time.Time { return time.Date(2026, m, d, 12, 0, 0, 0, time.UTC) }
	tests := []struct {
		name      string
		offers    []gpuwarden.Offer
		now       time.Time
		countries []string
		want      []string
	}{
		{"fresh, anywhere", many, day(12, 6), nil, []string{
			"embedded snapshot of 2026-12-01 (SkyPilot catalog v8): 1,203 offers from 4 providers"}},
		{"31 days after the oldest file", many, time.Date(2027, 1, 1, 13, 0, 0, 0, time.UTC), nil, []string{
			"embedded snapshot of 2026-12-01 (SkyPilot catalog v8): 1,203 offers from 4 providers, 31 days old: " + fix}},
		{"30 days is not old yet", many, time.Date(2026, 12, 31, 0, 0, 0, 0, time.UTC), nil, []string{
			"embedded snapshot of 2026-12-01 (SkyPilot catalog v8): 1,203 offers from 4 providers"}},
		{"residency with three providers", many, day(12, 6), []string{"NL", "FI", "US"}, []string{
			"embedded snapshot of 2026-12-01 (SkyPilot catalog v8): 1,203 offers from 4 providers"}},
		{"residency with two", many, day(12, 6), []string{"FI"}, []string{
			"embedded snapshot of 2026-12-01 (SkyPilot catalog v8): 1,203 offers from 4 providers",
			"only 2 providers have offers in FI (nebius, verda): few plan Bs on another provider; " + fix}},
		{"residency with one", many, day(12, 6), []string{"NL", "BE"}, []string{
			"embedded snapshot of 2026-12-01 (SkyPilot catalog v8): 1,203 offers from 4 providers",
			"only 1 provider has offers in NL, BE (gcp): no plan B on another provider; " + fix}},
		{"residency with none", many, day(12, 6), []string{"JP"}, []string{
			"embedded snapshot of 2026-12-01 (SkyPilot catalog v8): 1,203 offers from 4 providers",
			"no provider has offers in JP; " + fix}},
		{"own file only, thin", []gpuwarden.Offer{mine("aws", "US"), mine("lambda", "US")}, day(12, 6), nil, []string{
			"only 2 providers have offers in these prices (aws, lambda): few plan Bs on another provider; " + fix}},
		{"own file only, three providers", []gpuwarden.Offer{mine("aws", "US"), mine("lambda", "US"), mine("vast", "DE")}, day(12, 6), nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PriceNotes(&gpuwarden.Catalog{Offers: gpuwarden.OffersOf(tt.offers...)}, tt.now, tt.countries)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestPriceNotesEmbeddedEU: the real snapshot leaves at least three
// providers to an EU-resident plan, so it says nothing thin about DE/FR.
func TestPriceNotesEmbeddedEU(t *testing.T) {
	c, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	for _, countries := range [][]string{{"DE"}, {"FR"}, {"DE", "FR"}, {"FI"}, {"DE", "FR", "NL", "FI", "SE", "IT", "ES"}} {
		got := PriceNotes(c, now, countries)
		if len(got) != 1 || !strings.HasPrefix(got[0], "embedded snapshot of 2026-12-03 (SkyPilot catalog v8): ") {
			t.Errorf("%v: got %q, want the snapshot line alone", countries, got)
		}
	}
}
