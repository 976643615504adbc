package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The embedded snapshot on the real binary: every plan, offers and
// preflight names its date on a prices: line, and says so, with the fix,
// when it is old or leaves fewer than three providers where the work may
// run (issue #31, done-when 5).
func TestPricesLineNamesTheSnapshot(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	write := func(name, countries string) string {
		p := filepath.Join(dir, name)
		plan := "workload: {kind: notebook}\nwork_hours: 10\nresidency: {countries: [" + countries + "]}\n"
		if err := os.WriteFile(p, []byte(plan), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	eu, pl := write("eu.yaml", "DE, FR"), write("pl.yaml", "PL")
	const (
		snap = "prices: embedded snapshot of 2026-12-03 (SkyPilot catalog v8): 3,106 offers from 20 providers"
		fix  = "run `gpuwarden catalog update` for every cloud's current prices"
		thin = "prices: only 2 providers have offers in PL (shadeform, spheron): few plan Bs on another provider;"
	)
	tests := []struct {
		name       string
		args       []string
		want, not  []string
		exitCodeOK func(int) bool
	}{
		{"plan, fresh, EU", []string{"plan", eu}, []string{snap + "\n"}, []string{"days old", "only "}, nil},
		{"plan, 43 days on", []string{"--now", "2027-01-15", "plan", eu}, []string{snap + ", 43 days old: " + fix}, nil, nil},
		{"plan, thin residency", []string{"plan", pl}, []string{snap + "\n", thin}, nil, nil},
		{"offers, thin country", []string{"offers", "--country", "PL"}, []string{snap, thin}, nil, nil},
		{"offers, anywhere", []string{"offers", "--gpu", "H100"}, []string{snap + "\n"}, []string{"only "}, nil},
		{"preflight, thin", []string{"preflight", pl, "--offline", "--no-canary"}, []string{snap + "\n", thin}, nil,
			func(c int) bool { return c == 0 || c == 1 }},
		{"no snapshot, one file", []string{"offers", "--no-embedded", "--catalog", writeOneProvider(t, dir)},
			[]string{"prices: only 1 provider has offers in these prices (lambda): no plan B on another provider; " + fix}, []string{"embedded snapshot"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := gw(t, dir, append(tt.args, "--data-dir", data)...)
			ok := r.code == 0
			if tt.exitCodeOK != nil {
				ok = tt.exitCodeOK(r.code)
			}
			if !ok {
				t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			// The prices: lines are wrapped at the page width: join them back.
			stderr := strings.ReplaceAll(r.stderr, "\n        ", " ")
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(stderr, n) {
					t.Errorf("stderr has %q:\n%s", n, r.stderr)
				}
			}
		})
	}
}

func writeOneProvider(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "lambda.csv")
	rows := "provider,region,gpu,gpu_count,vram_gb_per_gpu,currency,on_demand_hourly\nlambda,us-east-1,H100,1,80,USD,2.49\n"
	if err := os.WriteFile(p, []byte(rows), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEUPlanHasPlanBElsewhere: on the embedded snapshot alone, a plan that
// must stay in Germany and France gets a plan B on another provider than
// plan A's, so a capacity error at one provider does not stop the work.
func TestEUPlanHasPlanBElsewhere(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct{ name, countries, kind string }{
		{"DE+FR notebook", "DE, FR", "{kind: notebook}\nwork_hours: 40"},
		{"DE fine-tune", "DE", "{kind: finetune-lora, params_b: 7}\nwork_hours: 100"},
		{"FR inference", "FR", "{kind: inference, params_b: 13}\nwork_hours: 200"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".yaml")
			plan := "workload: " + tt.kind + "\nresidency: {countries: [" + tt.countries + "]}\n"
			if err := os.WriteFile(p, []byte(plan), 0o644); err != nil {
				t.Fatal(err)
			}
			r := gw(t, dir, "plan", p, "-o", "json", "--data-dir", filepath.Join(dir, "data"))
			if r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, r.stderr)
			}
			var v struct {
				Ranked []struct {
					Role  string `json:"role"`
					Offer struct {
						Provider, Country string
					} `json:"offer"`
				} `json:"ranked"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
				t.Fatal(err)
			}
			roles := map[string]string{}
			for _, c := range v.Ranked {
				if c.Role != "" {
					roles[c.Role] = c.Offer.Provider
				}
				if !strings.Contains(tt.countries, c.Offer.Country) {
					t.Errorf("a candidate in %s, outside %s", c.Offer.Country, tt.countries)
				}
			}
			if roles["best"] == "" || roles["plan-b"] == "" || roles["best"] == roles["plan-b"] {
				t.Errorf("plan A on %q, plan B on %q: want both, on different providers", roles["best"], roles["plan-b"])
			}
		})
	}
}
