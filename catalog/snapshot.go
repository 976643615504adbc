package catalog

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// SnapshotSchema is the SkyPilot catalog schema the embedded snapshot was
// copied from.
const SnapshotSchema = "v8"

// PriceMaxAge is the age past which a price is called old, on every
// prices: line and by preflight: cloud prices move within a month (new
// cards, spot markets, price cuts), and `catalog update` fixes it in seconds.
const PriceMaxAge = 30 * 24 * time.Hour

// thinProviders is the fewest providers a plan's residency should leave:
// with fewer, plan B is missing or on the same provider as plan A.
const thinProviders = 3

// embeddedPrefix starts the Origin.File of every embedded offer
// ("embedded skypilot/aws/vms.csv"), so that offers from the snapshot are
// told from a user's file of the same name.
const embeddedPrefix = "embedded "

// isEmbedded says whether an offer's file is the snapshot.
func isEmbedded(file string) bool { return strings.HasPrefix(file, embeddedPrefix) }

// snapshotSource is one row of data/skypilot/sources.csv: a cloud whose
// vms.csv GPU rows are in the snapshot, the commit they were read at and
// the day they were read, which dates their offers.
type snapshotSource struct {
	cloud, commit, read string
	rows                int
}

// snapshotSources reads data/skypilot/sources.csv.
func snapshotSources() ([]snapshotSource, error) {
	rowsIn, err := simpleTable("skypilot/sources.csv", "cloud", "commit", "read", "rows")
	if err != nil {
		return nil, err
	}
	out := make([]snapshotSource, 0, len(rowsIn))
	for _, r := range rowsIn {
		s := snapshotSource{cloud: r["cloud"], commit: r["commit"], read: r["read"]}
		if len(s.commit) != 40 {
			return nil, sideTableErr("skypilot/sources.csv", r, "commit", "is not a 40-digit commit")
		}
		if _, err := time.Parse(time.DateOnly, s.read); err != nil {
			return nil, sideTableErr("skypilot/sources.csv", r, "read", "is not a date (YYYY-MM-DD)")
		}
		n, err := parseNumber(r["rows"])
		if err != nil || n < 1 || n != float64(int(n)) {
			return nil, sideTableErr("skypilot/sources.csv", r, "rows", "is not a positive whole number")
		}
		s.rows = int(n)
		out = append(out, s)
	}
	return out, nil
}

// packedName is where the gzip of a cloud's vms.csv is embedded.
func packedName(cloud string) string { return "data/snapshot/" + cloud + ".vms.csv.gz" }

// unpack reads the embedded gzip of a cloud's vms.csv.
func unpack(cloud string) (string, error) {
	raw, err := data.ReadFile(packedName(cloud))
	if err != nil {
		return "", err
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return "", fmt.Errorf("%s: %w", packedName(cloud), err)
	}
	var b strings.Builder
	// The packs are a few KB each; 8× is about what gzip saves on them.
	b.Grow(8 * len(raw))
	if _, err := io.Copy(&b, zr); err != nil {
		return "", fmt.Errorf("%s: %w", packedName(cloud), err)
	}
	return b.String(), nil
}

// snapshotOffers reads every cloud of the snapshot through the SkyPilot
// importer that `catalog update` uses, dating each offer by the day its
// file was read. The importer's warnings are about the published files
// (rows without a price, GPU memory fixed from the datasheet): they are
// returned per cloud for the tests and the snapshot's README, not shown
// on every plan, since a user can do nothing about them.
func snapshotOffers(dst *gpuwarden.OffersBuilder) (map[string][]string, error) {
	srcs, err := snapshotSources()
	if err != nil {
		return nil, err
	}
	warns := make(map[string][]string, len(srcs))
	var one gpuwarden.OffersBuilder
	for _, s := range srcs {
		text, err := unpack(s.cloud)
		if err != nil {
			return nil, embeddedErr(err)
		}
		name := embeddedPrefix + "skypilot/" + s.cloud + "/vms.csv"
		w, err := parseOffers(name, s.cloud, text, &one)
		if err != nil {
			return nil, embeddedErr(err)
		}
		warns[s.cloud] = w
		source := fmt.Sprintf("SkyPilot catalog %s %s/vms.csv at %s, read %s", SnapshotSchema, s.cloud, s.commit[:12], s.read)
		offers := one.Offers()
		dst.Grow(offers.Len())
		for _, o := range offers.All() {
			o.AsOf = s.read
			// Keep what the importer adds after its own source, such as
			// GCP's "(machine type and accelerator rows added up)".
			o.Source = source + strings.TrimPrefix(o.Source, "SkyPilot catalog "+name)
			dst.Append(&o)
		}
	}
	return warns, nil
}

// snapshotCacheName is the name the snapshot's parse is cached under; no
// file of a user can have it.
const snapshotCacheName = "\x00embedded snapshot"

// cachedSnapshot is the snapshot's offers through the parse cache: a
// cached parse is read back in about a millisecond, where parsing takes
// 12-40 ms (BenchmarkSnapshotParse), most of a plan on the snapshot. The
// entry is keyed by the packs' content and, as every entry, by the binary,
// so an importer that changed never serves an old parse.
func cachedSnapshot(cache parseCache) (gpuwarden.Offers, error) {
	if cache.dir == "" {
		return embeddedOffers()
	}
	content, err := snapshotContent()
	if err != nil {
		return gpuwarden.Offers{}, err
	}
	var hit gpuwarden.OffersBuilder
	if _, ok := cache.lookupEntry(snapshotCacheName, "", content, &hit); ok {
		return hit.Offers(), nil
	}
	o, err := embeddedOffers()
	if err != nil {
		return o, err
	}
	var enc gpuwarden.OffersBuilder
	enc.Grow(o.Len())
	for _, x := range o.All() {
		enc.Append(&x)
	}
	cache.storeEntry(snapshotCacheName, "", content, &enc, 0, nil)
	return o, nil
}

// snapshotContent hashes what the snapshot's offers are parsed from.
func snapshotContent() ([sha256.Size]byte, error) {
	h := sha256.New()
	srcs, err := snapshotSources()
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	for _, name := range append([]string{"data/skypilot/sources.csv"}, packNames(srcs)...) {
		raw, err := data.ReadFile(name)
		if err != nil {
			return [sha256.Size]byte{}, embeddedErr(err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(raw))
		h.Write(raw)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum, nil
}

func packNames(srcs []snapshotSource) []string {
	out := make([]string, len(srcs))
	for i, s := range srcs {
		out[i] = packedName(s.cloud)
	}
	return out
}
