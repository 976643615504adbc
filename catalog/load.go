package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unsafe"

	"github.com/gpuwarden/gpuwarden"
)

// Load builds the catalog the planner prices with: the embedded snapshot's
// offers when withEmbedded is set, followed by the offers of each file in
// order. Egress tiers, storage rates and the GPU table always come from the
// snapshot, since no importer reads them and a plan without them cannot
// price egress or size VRAM. Warnings are prefixed with the file they are
// about. A file that cannot be opened is ENotFound; a bad one stops the load
// with its EInvalid error.
func Load(files []string, withEmbedded bool) (*gpuwarden.Catalog, error) {
	return LoadWith(Options{Files: files, Embedded: withEmbedded})
}

// Options says where LoadWith takes prices from.
type Options struct {
	// Files are price files given by the user, read after everything else.
	Files []string
	// Embedded adds the snapshot built into the binary.
	Embedded bool
	// StoreDir is the folder `catalog update` downloads into
	// (DATA_DIR/catalogs); "" reads no downloaded catalog.
	StoreDir string
	// CacheDir keeps the parses of big price files (DATA_DIR/cache), so
	// that an unchanged one is not parsed twice; "" caches nothing.
	CacheDir string
	// Now dates the age warnings of downloaded catalogs.
	Now time.Time
}

// storedMaxAge is the age past which a downloaded catalog is called old:
// SkyPilot republishes its files every few hours, so a week without an
// update is a machine that stopped updating.
const storedMaxAge = 7 * 24 * time.Hour

// LoadWith is Load with downloaded catalogs: each good one replaces the
// embedded offers of its provider, since it is fresher. One that cannot be
// read is a warning and the snapshot's offers stay; with no downloaded
// catalog at all the snapshot is used with a warning that says how to get
// fresh prices.
func LoadWith(opt Options) (*gpuwarden.Catalog, error) {
	snap, err := EmbeddedTables()
	if err != nil {
		return nil, err
	}
	cat := &gpuwarden.Catalog{Egress: snap.Egress, Storage: snap.Storage, GPUs: snap.GPUs}
	var offers gpuwarden.OffersBuilder
	cache := newParseCache(opt.CacheDir)
	var (
		stored      gpuwarden.OffersBuilder
		replaced    = map[string]bool{}
		storedWarns []string
	)
	if opt.StoreDir != "" {
		sources, warns := Stored(opt.StoreDir)
		storedWarns = append(storedWarns, warns...)
		for _, s := range sources {
			first := stored.Len()
			warns, err := readStored(opt.StoreDir, s, cache, &stored)
			if err != nil {
				storedWarns = append(storedWarns, fmt.Sprintf("downloaded catalog %s cannot be read (%v): using the embedded snapshot for %s; run `gpuwarden catalog update`", s.Cloud, err, s.Cloud))
				continue
			}
			storedWarns = append(storedWarns, warns...)
			replaced[s.Cloud] = true
			cat.Sources = append(cat.Sources, gpuwarden.PriceSource{Provider: s.Cloud, URL: s.URL,
				FetchedAt: s.FetchedAt, CheckedAt: s.CheckedAt, Offers: stored.Len() - first})
			if !opt.Now.IsZero() && s.Age(opt.Now) > storedMaxAge {
				storedWarns = append(storedWarns, fmt.Sprintf("downloaded catalog %s was last checked %s ago: run `gpuwarden catalog update`",
					s.Cloud, FormatAge(s.Age(opt.Now))))
			}
		}
		// A box that never ran `catalog update` prices with the snapshot as
		// it always has (its own age check warns once it is old); one whose
		// update left nothing usable is told, since it expected downloads.
		if len(cat.Sources) == 0 && opt.Embedded && dirExists(opt.StoreDir) {
			storedWarns = append(storedWarns, fmt.Sprintf("no downloaded catalog in %s: prices are the embedded snapshot; run `gpuwarden catalog update` for fresh ones", opt.StoreDir))
		}
	}
	if opt.Embedded {
		snapOffers, err := cachedSnapshot(cache)
		if err != nil {
			return nil, err
		}
		for _, o := range snapOffers.All() {
			if !replaced[o.Provider] {
				offers.Append(&o)
			}
		}
	}
	offers.AppendBuilder(&stored)
	cat.Warnings = append(cat.Warnings, storedWarns...)
	for _, name := range opt.Files {
		// Each file's offers are read into the table after those before
		// it: a big file is not copied again to join them.
		warns, err := cache.readFile(name, &offers)
		if err != nil {
			return nil, err
		}
		for _, w := range warns {
			cat.Warnings = append(cat.Warnings, name+": "+w)
		}
	}
	cat.Offers = offers.Offers()
	return cat, nil
}

// readStored reads one downloaded catalog and dates its offers by the last
// time the server confirmed the file: SkyPilot files carry no date, but a
// file fetched today is today's published price list.
func readStored(dir string, s Source, cache parseCache, dst *gpuwarden.OffersBuilder) ([]string, error) {
	name := filepath.Join(dir, s.File)
	raw, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	content := sha256.Sum256(raw)
	if hex.EncodeToString(content[:]) != s.SHA256 {
		return nil, fmt.Errorf("%s does not match the checksum recorded at download", name)
	}
	provider := normalizeProvider(s.Cloud)
	var read gpuwarden.OffersBuilder
	warns, ok := cache.lookup(name, provider, content, len(raw), &read)
	if !ok {
		if warns, err = parseOffers(name, provider, unsafe.String(unsafe.SliceData(raw), len(raw)), &read); err != nil {
			return nil, err
		}
		cache.store(name, provider, content, len(raw), &read, 0, warns)
	}
	offers := read.Offers()
	asOf := s.CheckedAt.UTC().Format("2006-01-02")
	source := fmt.Sprintf("%s, downloaded %s", s.URL, s.FetchedAt.UTC().Format("2006-01-02 15:04 UTC"))
	dst.Grow(offers.Len())
	for _, o := range offers.All() {
		if o.AsOf == "" {
			o.AsOf = asOf
		}
		if !strings.HasPrefix(o.Source, "Azure") {
			o.Source = "SkyPilot catalog " + source
		}
		dst.Append(&o)
	}
	out := warns[:0]
	for _, w := range warns {
		if strings.HasPrefix(w, "SkyPilot catalogs carry no date") {
			continue // dated above, by the download
		}
		out = append(out, s.Cloud+" (downloaded): "+w)
	}
	return out, nil
}

// FormatAge writes a duration as people read an age: "40 min", "3 h", "5 days".
func FormatAge(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "under a minute"
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h", int(d.Hours()))
	}
	return fmt.Sprintf("%d days", int(d.Hours()/24))
}

// readPriceFile reads a price file whole, in one allocation of its size
// (up to maxPriceFile), as a string that nothing else holds. A file that
// cannot be opened is ENotFound.
func readPriceFile(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", &gpuwarden.Error{Code: gpuwarden.ENotFound, Message: "read catalog", Err: err,
			Hint: "check the path of the price file given with --catalog"}
	}
	defer f.Close()
	size := 0
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		size = int(min(fi.Size(), maxPriceFile))
	}
	return readAll(name, f, size)
}

func dirExists(dir string) bool {
	_, err := os.Stat(dir)
	return err == nil
}
