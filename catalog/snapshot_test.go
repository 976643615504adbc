package catalog

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

// TestSnapshotPacked: each embedded gzip holds exactly the plain copy in
// data/skypilot, with the row count sources.csv records, so the binary
// never prices with rows nobody can review. `go test -run
// TestSnapshotPacked -update` repacks after the plain files change.
func TestSnapshotPacked(t *testing.T) {
	srcs, err := snapshotSources()
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := filepath.Glob(filepath.Join("data", "skypilot", "*", "vms.csv"))
	if err != nil {
		t.Fatal(err)
	}
	var listed, onDisk []string
	for _, s := range srcs {
		listed = append(listed, s.cloud)
	}
	for _, d := range dirs {
		onDisk = append(onDisk, filepath.Base(filepath.Dir(d)))
	}
	if !slices.Equal(listed, onDisk) {
		t.Errorf("sources.csv lists %q, data/skypilot holds %q", listed, onDisk)
	}
	for _, s := range srcs {
		t.Run(s.cloud, func(t *testing.T) {
			plain, err := os.ReadFile(filepath.Join("data", "skypilot", s.cloud, "vms.csv"))
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				writePack(t, s.cloud, plain)
			}
			got, err := unpack(s.cloud)
			if err != nil {
				t.Fatalf("%v (run with -update to pack it)", err)
			}
			if got != string(plain) {
				t.Errorf("%s differs from data/skypilot/%s/vms.csv: run go test ./catalog -run TestSnapshotPacked -update", packedName(s.cloud), s.cloud)
			}
			// Data rows: lines after the header; the last may lack its newline.
			rowsIn := strings.Count(strings.TrimSuffix(string(plain), "\n"), "\n")
			if rowsIn != s.rows {
				t.Errorf("vms.csv has %d rows, sources.csv says %d", rowsIn, s.rows)
			}
		})
	}
}

// writePack gzips a plain vms.csv into its embedded place; no name or
// time goes into the header, so the same rows always pack the same.
func writePack(t *testing.T, cloud string, plain []byte) {
	t.Helper()
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(plain); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join("data", "snapshot"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.FromSlash(packedName(cloud)), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotCoverage is the bar for a first run without
// `catalog update`: at least 1,500 GPU offers from 15 providers, every
// cloud of sources.csv among them, and AWS's everyday GPU families.
func TestSnapshotCoverage(t *testing.T) {
	c, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	srcs, err := snapshotSources()
	if err != nil {
		t.Fatal(err)
	}
	perProvider := map[string]int{}
	awsFamilies := map[string]int{}
	for _, o := range c.Offers.All() {
		perProvider[o.Provider]++
		if o.Provider == "aws" {
			family, _, _ := strings.Cut(o.Instance, ".")
			awsFamilies[family]++
		}
		if o.GPUCount <= 0 || o.VRAMGBPerGPU <= 0 || (o.OnDemandHourly <= 0 && o.SpotHourly <= 0) {
			t.Errorf("%s: %s %s %s has count %v, VRAM %v, prices %v/%v", o.Origin, o.Provider, o.Region, o.Instance,
				o.GPUCount, o.VRAMGBPerGPU, o.OnDemandHourly, o.SpotHourly)
		}
	}
	if got := c.Offers.Len(); got < 1500 {
		t.Errorf("%d offers, want at least 1,500", got)
	}
	if got := len(perProvider); got < 15 {
		t.Errorf("%d providers, want at least 15: %v", got, perProvider)
	}
	for _, s := range srcs {
		if perProvider[s.cloud] == 0 {
			t.Errorf("no offer of %s, which sources.csv lists", s.cloud)
		}
	}
	for _, f := range []string{"g4dn", "g5", "g6", "g6e", "p4d", "p5"} {
		if awsFamilies[f] == 0 {
			t.Errorf("no aws %s offer", f)
		}
	}
	if perProvider["azure"] != 0 {
		t.Errorf("%d azure offers: Azure comes from the Retail Prices API only", perProvider["azure"])
	}
}

// TestSnapshotDated: every embedded offer carries the day its file was
// read and names the commit, so staleness and provenance are never guessed.
func TestSnapshotDated(t *testing.T) {
	c, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	srcs, err := snapshotSources()
	if err != nil {
		t.Fatal(err)
	}
	read := map[string]snapshotSource{}
	for _, s := range srcs {
		read[s.cloud] = s
	}
	for _, o := range c.Offers.All() {
		s := read[o.Provider]
		wantFile := "embedded skypilot/" + o.Provider + "/vms.csv"
		if o.AsOf != s.read || !strings.Contains(o.Source, s.commit[:12]) || o.Origin.File != wantFile || o.Origin.Line < 2 {
			t.Fatalf("%s %s %s: as_of %q, source %q, origin %s; want %s, commit %s, %s:N",
				o.Provider, o.Region, o.Instance, o.AsOf, o.Source, o.Origin, s.read, s.commit[:12], wantFile)
		}
	}
}

// TestSnapshotKnownRows pins offers to the rows they come from in the
// plain files, zones folded and GCP's halves added up.
func TestSnapshotKnownRows(t *testing.T) {
	c, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		provider, region, instance string
		want                       gpuwarden.Offer
	}{
		// aws/vms.csv: five zones at 0.526; spot 0.2158, 0.2, 0.2039, 0.202, 0.2043.
		{"aws", "us-east-1", "g4dn.xlarge", gpuwarden.Offer{GPU: "T4", GPUCount: 1, Country: "US",
			OnDemandHourly: 526_000, SpotHourly: 200_000}},
		// gcp/vms.csv: host a2-highgpu-1g 0.81406 (spot 0.31824) plus the
		// A100 accelerator row 1.61365 (spot 1.1691) in europe-west4-a.
		{"gcp", "europe-west4", "a2-highgpu-1g", gpuwarden.Offer{GPU: "A100-40GB", GPUCount: 1, Country: "NL",
			OnDemandHourly: 2_427_710, SpotHourly: 1_487_340}},
		// vast/vms.csv: spot 0.00 is no spot market.
		{"vast", "France", "1x-H200-32-65536", gpuwarden.Offer{GPU: "H200", GPUCount: 1, Country: "FR",
			OnDemandHourly: 2_650_000}},
	}
	for _, tt := range tests {
		t.Run(tt.provider+"/"+tt.instance, func(t *testing.T) {
			var got *gpuwarden.Offer
			for _, o := range c.Offers.All() {
				if o.Provider == tt.provider && o.Region == tt.region && o.Instance == tt.instance {
					got = &o
					break
				}
			}
			if got == nil {
				t.Fatalf("no %s %s %s offer", tt.provider, tt.region, tt.instance)
			}
			if got.GPU != tt.want.GPU || got.GPUCount != tt.want.GPUCount || got.Country != tt.want.Country ||
				got.OnDemandHourly != tt.want.OnDemandHourly || got.SpotHourly != tt.want.SpotHourly {
				t.Errorf("got %s %v× %s %v/%v, want %s %v× %s %v/%v", got.Country, got.GPUCount, got.GPU, got.OnDemandHourly, got.SpotHourly,
					tt.want.Country, tt.want.GPUCount, tt.want.GPU, tt.want.OnDemandHourly, tt.want.SpotHourly)
			}
		})
	}
}

// TestSnapshotCache: with a cache folder the snapshot's parse is stored
// once and read back the same, offer for offer; a damaged entry is a miss
// that parses again, never an error or a wrong catalog.
func TestSnapshotCache(t *testing.T) {
	dir := t.TempDir()
	want, err := embeddedOffers()
	if err != nil {
		t.Fatal(err)
	}
	load := func(t *testing.T) gpuwarden.Offers {
		t.Helper()
		c, err := LoadWith(Options{Embedded: true, CacheDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return c.Offers
	}
	same := func(t *testing.T, got gpuwarden.Offers) {
		t.Helper()
		if got.Len() != want.Len() {
			t.Fatalf("%d offers, want %d", got.Len(), want.Len())
		}
		for i := range want.Len() {
			if got.At(i) != want.At(i) {
				t.Fatalf("offer %d:\n got %+v\nwant %+v", i, got.At(i), want.At(i))
			}
		}
	}
	entries := func() []string {
		m, _ := filepath.Glob(filepath.Join(dir, "catalog-*.bin"))
		return m
	}
	t.Run("first load stores", func(t *testing.T) {
		same(t, load(t))
		if n := len(entries()); n != 1 {
			t.Fatalf("%d cache entries, want 1", n)
		}
	})
	t.Run("second load reads it", func(t *testing.T) {
		var b gpuwarden.OffersBuilder
		content, err := snapshotContent()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := newParseCache(dir).lookupEntry(snapshotCacheName, "", content, &b); !ok {
			t.Fatal("no cache entry for the snapshot")
		}
		same(t, b.Offers())
		same(t, load(t))
	})
	t.Run("damaged entry", func(t *testing.T) {
		e := entries()
		if len(e) != 1 {
			t.Fatalf("%d entries", len(e))
		}
		if err := os.WriteFile(e[0], []byte("gpuwarden parsed catalog\ngarbage"), 0o600); err != nil {
			t.Fatal(err)
		}
		same(t, load(t))
	})
}

// TestSnapshotRegionsPlaced: every region of the snapshot has a country,
// so residency rules can place its offers; daytona's "earth" is no place
// and stays out of every residency (data/skypilot/README.md).
func TestSnapshotRegionsPlaced(t *testing.T) {
	var b gpuwarden.OffersBuilder
	warns, err := snapshotOffers(&b)
	if err != nil {
		t.Fatal(err)
	}
	for cloud, ws := range warns {
		for _, w := range ws {
			if strings.Contains(w, "not in the region table") && !(cloud == "daytona" && strings.HasSuffix(w, "(earth)")) {
				t.Errorf("%s: %s", cloud, w)
			}
		}
	}
}
