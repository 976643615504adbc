package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/catalog"
	"github.com/gpuwarden/gpuwarden/config"
	"github.com/gpuwarden/gpuwarden/launch"
	"github.com/gpuwarden/gpuwarden/plan"
)

// FuzzPlanTargets puts arbitrary provider, region and instance cells in a
// price file: whatever the reader lets through, `plan -o targets` writes a
// block that parses back as a plan file, whose every target validates, and
// whose values are plain shell words (issue #32).
func FuzzPlanTargets(f *testing.F) {
	for _, s := range [][3]string{
		{"aws", "us-east-1", "g6.xlarge"}, {"vast", "British Columbia", "1x-RTX_4090"},
		{"lambda", "us-east-1'$(touch${IFS}PWNED)'", "gpu_1x_a10"}, {"aws", "us-east-1", "-o\nx"},
		{"runpod", "EU-RO-1", "a: b"}, {"x", "#c", "'"}, {"gcp", "Bács-Kiskun", "a3-highgpu-8g"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	base, err := os.ReadFile(filepath.Join("..", "..", "examples", "qlora-7b.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	p, err := config.Parse("qlora-7b.yaml", base)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, provider, region, instance string) {
		var csv bytes.Buffer
		csv.WriteString("provider,region,instance,gpu,gpu_count,vram_gb_per_gpu,currency,on_demand_hourly\n")
		for _, cell := range []string{provider, region, instance} {
			csv.WriteString(`"` + strings.ReplaceAll(cell, `"`, `""`) + `",`)
		}
		csv.WriteString("L4,1,24,USD,0.40\n")
		offers, _, err := catalog.ReadOffers("prices.csv", &csv)
		if err != nil || len(offers) == 0 {
			return
		}
		r, err := plan.Rank(p, &gpuwarden.Catalog{Offers: gpuwarden.OffersOf(offers...)})
		if err != nil || r.RankedCount() == 0 {
			return
		}
		var out bytes.Buffer
		if err := writeTargets(&out, r, "qlora-7b.yaml", 3); err != nil {
			return // nothing fits: no block
		}
		back, err := config.Parse("plan.yaml", append(append(append([]byte(nil), base...), '\n'), out.Bytes()...))
		if err != nil {
			t.Fatalf("the targets block does not parse back: %v\n%s", err, out.String())
		}
		o := offers[0]
		if launch.PlainWord(o.Provider) && launch.PlainWord(o.Region) && launch.PlainWord(o.Instance) && len(back.Targets) != 1 {
			t.Fatalf("an offer of plain words (%q %q %q) gave %d targets, want 1:\n%s", o.Provider, o.Region, o.Instance, len(back.Targets), out.String())
		}
		for _, tg := range back.Targets {
			if err := launch.ValidateTarget(tg); err != nil {
				t.Fatalf("target %+v does not validate: %v", tg, err)
			}
			for _, v := range []string{tg.Provider, tg.Region, tg.Offer} {
				if v != "" && !launch.PlainWord(v) {
					t.Fatalf("plan -o targets wrote %q, which needs quoting:\n%s", v, out.String())
				}
			}
		}
	})
}
