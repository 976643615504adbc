package catalog

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// bigOwnFile writes an own-format price file just over minCachedFile, so
// that the cache takes it, and returns its path.
func bigOwnFile(t *testing.T, dir string) string {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("provider,region,country,instance,gpu,gpu_count,vram_gb_per_gpu,currency,on_demand_hourly,spot_hourly,monthly,as_of,source\n")
	for i := 0; b.Len() <= minCachedFile; i++ {
		fmt.Fprintf(&b, "aws,us-east-1,US,box-%d,H100-SXM,%d,80,USD,%d.25,,,2026-11,bench\n", i, 1<<(i%4), 1+i%90)
	}
	b.WriteString("lambda,us-west-1,,gpu_1x_a10,A10,1,,USD,0.75,,,,\n") // undated, no country: warnings to keep
	p := filepath.Join(dir, "prices.csv")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func cacheEntries(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "catalog-*.bin"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(m)
	return m
}

func TestCacheServesAnUnchangedFile(t *testing.T) {
	dir := t.TempDir()
	file := bigOwnFile(t, dir)
	cache := newParseCache(filepath.Join(dir, "cache"))
	want, wantWarns, err := parseCache{}.readFileSlice(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, _, err := cache.readFileSlice(file, nil)
	if err != nil || !reflect.DeepEqual(first, want) {
		t.Fatalf("first read: %v, offers equal: %v", err, reflect.DeepEqual(first, want))
	}
	if got := len(cacheEntries(t, cache.dir)); got != 1 {
		t.Fatalf("got %d cache entries after the first read, want 1", got)
	}
	content, size, ok := cache.hashFile(file)
	got, gotWarns, hit := cache.lookupSlice(file, "", content, size, nil)
	if !ok || !hit {
		t.Fatalf("hashed %v, hit %v: want the unchanged file served from the cache", ok, hit)
	}
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotWarns, wantWarns) {
		t.Errorf("cached parse differs: %d offers, warnings %q; want %d, %q", len(got), gotWarns, len(want), wantWarns)
	}
	before := []gpuwarden.Offer{{Provider: "aws", Instance: "earlier"}}
	if got, _, hit := cache.lookupSlice(file, "", content, size, before); !hit || !reflect.DeepEqual(got, append(before, want...)) {
		t.Errorf("after one offer: hit %v, %d offers; want the earlier offer first", hit, len(got))
	}

	// One byte changed is another file: parsed, and cached beside the first.
	raw, _ := os.ReadFile(file)
	raw[bytes.Index(raw, []byte("90.25"))+1] = '7'
	if err := os.WriteFile(file, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	changed, _, err := cache.readFileSlice(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(changed, want) {
		t.Error("the changed file was served the old parse")
	}
	if got := len(cacheEntries(t, cache.dir)); got != 2 {
		t.Errorf("got %d cache entries, want 2", got)
	}
}

func TestCacheTakesNoSmallFileAndNoLinkedFolder(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join("testdata", "own", "prices.csv")
	cache := newParseCache(filepath.Join(dir, "cache"))
	if _, _, err := cache.readFileSlice(small, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cache.dir); !os.IsNotExist(err) {
		t.Errorf("a small file made the cache folder (%v)", err)
	}

	// A cache folder that is a link leads out of DATA_DIR: not used.
	elsewhere := t.TempDir()
	linked := filepath.Join(dir, "linked")
	if err := os.Symlink(elsewhere, linked); err != nil {
		t.Fatal(err)
	}
	if _, _, err := newParseCache(linked).readFileSlice(bigOwnFile(t, dir), nil); err != nil {
		t.Fatal(err)
	}
	if got := cacheEntries(t, elsewhere); len(got) != 0 {
		t.Errorf("wrote %q through a link", got)
	}
}

func TestCacheDamagedEntryIsParsedAgain(t *testing.T) {
	dir := t.TempDir()
	file := bigOwnFile(t, dir)
	cache := newParseCache(filepath.Join(dir, "cache"))
	want, _, err := cache.readFileSlice(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	entry := cacheEntries(t, cache.dir)[0]
	raw, _ := os.ReadFile(entry)
	raw[len(raw)/2] ^= 0xff
	if err := os.WriteFile(entry, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	content, size, _ := cache.hashFile(file)
	if _, _, hit := cache.lookupSlice(file, "", content, size, nil); hit {
		t.Fatal("a damaged entry was served")
	}
	got, _, err := cache.readFileSlice(file, nil)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("after damage: %v, offers equal: %v", err, reflect.DeepEqual(got, want))
	}
	if _, _, hit := cache.lookupSlice(file, "", content, size, nil); !hit {
		t.Error("the entry was not written again after the damaged one")
	}
}

func TestCacheEvictsOnlyItsOwnOldest(t *testing.T) {
	dir := t.TempDir()
	cache := newParseCache(dir)
	foreign := []string{"notes.txt", "catalog-x.bin"}
	for _, name := range foreign {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A link named like an entry is left, and so is what it points to.
	target := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := cache.path(fmt.Sprintf("%064x", 0))
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= maxCacheFiles+3; i++ {
		if err := cache.write(fmt.Sprintf("%064x", i), func(w io.Writer) error { _, err := io.WriteString(w, "entry"); return err }); err != nil {
			t.Fatal(err)
		}
		// Distinct times, oldest first, whatever the file system's clock.
		at := time.Unix(int64(1_700_000_000+i), 0)
		if err := os.Chtimes(cache.path(fmt.Sprintf("%064x", i)), at, at); err != nil {
			t.Fatal(err)
		}
	}
	cache.evict()
	var kept []string
	for i := 1; i <= maxCacheFiles+3; i++ {
		if _, err := os.Lstat(cache.path(fmt.Sprintf("%064x", i))); err == nil {
			kept = append(kept, fmt.Sprint(i))
		}
	}
	if want := []string{"4", "5", "6", "7", "8", "9", "10", "11"}; !reflect.DeepEqual(kept, want) {
		t.Errorf("kept entries %v, want the newest %v", kept, want)
	}
	for _, p := range append([]string{link, target}, filepath.Join(dir, foreign[0]), filepath.Join(dir, foreign[1])) {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was removed", p)
		}
	}
}

// Every golden catalog survives the cache's layout unchanged.
func TestCacheLayoutRoundTrip(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*", "*.csv"))
	if err != nil || len(files) == 0 {
		t.Fatal(files, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		offers, warns, err := ReadOffers(f, bytes.NewReader(data))
		if err != nil {
			continue // the bad-input fixtures
		}
		key := fmt.Sprintf("%064x", sha256.Sum256(data))
		got, gotWarns, err := decodeCacheBytes(encodeCacheBytes(key, offers, warns), key, nil)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !reflect.DeepEqual(got, offers) || !reflect.DeepEqual(gotWarns, warns) {
			t.Errorf("%s: round trip changed the parse", f)
		}
		if _, _, err := decodeCacheBytes(encodeCacheBytes(key, offers, warns), fmt.Sprintf("%064x", 1), nil); err == nil {
			t.Errorf("%s: an entry was read under another key", f)
		}
	}
}

// FuzzDecodeCache feeds the reader bodies with a valid frame and checksum,
// so that damage past the checksum (a crafted file) errs, never panics.
func FuzzDecodeCache(f *testing.F) {
	key := fmt.Sprintf("%064x", 7)
	offers := []gpuwarden.Offer{{Provider: "aws", Region: "us-east-1", GPU: "H100-SXM", GPUCount: 8, VRAMGBPerGPU: 80,
		Currency: "USD", OnDemandHourly: 98_320_000, Origin: gpuwarden.Origin{File: "aws.csv", Line: 2}}}
	good := encodeCacheBytes(key, offers, []string{"a warning"})
	head := len(cacheMagic) + 1 + len(key)
	f.Add(good[head : len(good)-4])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		b := append(append([]byte(nil), good[:head]...), body...)
		b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable()))
		offers, _, err := decodeCacheBytes(b, key, nil)
		if err == nil && len(offers) > len(body)/64 { // a row is 72 bytes
			t.Fatalf("%d offers from %d bytes", len(offers), len(body))
		}
	})
}

// Many offers of many groups are read back in order.
func TestCacheLayoutRoundTripMany(t *testing.T) {
	offers := make([]gpuwarden.Offer, 50_005)
	for i := range offers {
		offers[i] = gpuwarden.Offer{Provider: []string{"aws", "gcp"}[i%2], Region: fmt.Sprintf("r%d", i%7),
			Instance: fmt.Sprintf("box-%d", i), GPU: "H100-SXM", GPUCount: float64(1 + i%8), VRAMGBPerGPU: 80,
			Currency: "USD", OnDemandHourly: gpuwarden.Micros(i), Origin: gpuwarden.Origin{File: "big.csv", Line: i + 2}}
	}
	key := fmt.Sprintf("%064x", 3)
	got, _, err := decodeCacheBytes(encodeCacheBytes(key, offers, nil), key, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, offers) {
		t.Errorf("round trip changed the offers")
	}
}
