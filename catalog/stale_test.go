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
	cat := &gpuwarden.Catalog{Offers: gpuwarden.OffersOf([]gpuwarden.Offer{
		offer("aws", "2026-07", embeddedPrices+":2"),
		offer("aws", "2026-06-15", embeddedPrices+":3"),
		// One fresh gcp price makes gcp fresh.
		offer("gcp", "2026-05", embeddedPrices+":4"),
		offer("gcp", "2026-10-20", embeddedPrices+":5"),
		offer("runpod", "", embeddedPrices+":6"), // undated: warned about at import
		offer("aws", "2026-03", "mine/aws.csv:2"),
		offer("lambda", "2026-10", "mine/lambda.csv:7"),
	}...)}
	now := time.Date(2026, 10, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		maxAge time.Duration
		want   []string
	}{
		{"90 days", 90 * 24 * time.Hour, []string{
			"prices of aws are from 2026-07, 121 days old: refresh with --catalog",
			"prices of aws in mine/aws.csv are from 2026-03, 243 days old: refresh the file",
		}},
		{"a year", 365 * 24 * time.Hour, nil},
		{"a week", 7 * 24 * time.Hour, []string{
			"prices of aws are from 2026-07, 121 days old: refresh with --catalog",
			"prices of gcp are from 2026-10-20, 10 days old: refresh with --catalog",
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

func TestStaleEmbeddedSnapshot(t *testing.T) {
	c, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	fresh := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	if got := Stale(c, fresh, 90*24*time.Hour); len(got) != 0 {
		t.Errorf("snapshot stale on its own day: %q", got)
	}
	later := time.Date(2027, 6, 1, 0, 0, 0, 0, time.UTC)
	got := Stale(c, later, 90*24*time.Hour)
	if len(got) != 6 { // aws, azure, gcp, lambda, runpod, vast
		t.Errorf("got %d stale providers, want 6: %q", len(got), got)
	}
	if want := "prices of aws are from 2026-11-09, 204 days old: refresh with --catalog"; len(got) == 0 || got[0] != want {
		t.Errorf("first line %q, want %q", got, want)
	}
}
