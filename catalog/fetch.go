package catalog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// SkyPilot publishes its catalogs as one vms.csv per cloud under a schema
// version; these are the values of HOSTED_CATALOG_DIR_URL,
// HOSTED_CATALOG_DIR_URL_S3_MIRROR and CATALOG_SCHEMA_VERSION in SkyPilot's
// sky/skylet/constants.py, which its own client refreshes from every few
// hours. A schema version is a column layout: v8 files are what the
// embedded snapshot holds and what the reader is tested on.
const (
	SkyPilotCatalogURL = "https://raw.githubusercontent.com/skypilot-org/skypilot-catalog/master/catalogs"
	// SkyPilotMirrorURL holds the same files; SkyPilot's client falls back
	// to it, and so does an update that uses the default host.
	SkyPilotMirrorURL = "https://skypilot-catalog.s3.us-east-1.amazonaws.com/catalogs"
	SkyPilotSchema    = "v8"
	// AzureRetailURL is Azure's public Retail Prices API: no key, paged
	// answers linked by NextPageLink.
	AzureRetailURL = "https://prices.azure.com/api/retail/prices"
	// MaxFetchBytes bounds one downloaded file or one Azure page: the
	// biggest SkyPilot file (AWS) is about 25 MB, so 64 MB is room to grow,
	// not room for a runaway answer to fill the disk.
	MaxFetchBytes = 64 << 20
	// maxAzurePages bounds how many NextPageLink hops one update follows
	// (up to 1,000 items a page; the GPU sizes are a few thousand items).
	maxAzurePages = 500
)

// SkyPilotClouds are the clouds with a vms.csv under catalogs/v8 of
// skypilot-org/skypilot-catalog. Azure is fetched from its own price API
// instead, which is fresher than SkyPilot's copy of it (and v8 has no
// azure/vms.csv). Left out: kubernetes and slurm, which publish no
// vms.csv (slurm has a pricing.csv of another layout), and simplepod,
// whose file is in v7 only.
var SkyPilotClouds = []string{"aws", "cudo", "daytona", "gcp", "hyperbolic", "hyperstack", "jarvislabs",
	"lambda", "lium", "mithril", "nebius", "oci", "primeintellect", "runpod", "seeweb", "shadeform",
	"spheron", "vast", "verda", "yotta"}

// Azure is the source name of the Azure Retail Prices download.
const Azure = "azure"

// Source is what gpuwarden keeps about one downloaded catalog, beside it as
// source.json: where it came from, when, and the validators that let the
// next update ask "changed since?" instead of downloading it again.
type Source struct {
	Cloud string `json:"cloud"`
	URL   string `json:"url"`
	// ServedBy is where the bytes came from when a redirect moved the
	// request to another URL; empty when URL served them.
	ServedBy string `json:"served_by,omitempty"`
	// File is the catalog file, relative to the catalogs folder.
	File string `json:"file"`
	// FetchedAt is when the content now on disk was downloaded.
	FetchedAt time.Time `json:"fetched_at"`
	// CheckedAt is the last time the server confirmed it current (a 200
	// or a 304).
	CheckedAt    time.Time `json:"checked_at"`
	ETag         string    `json:"etag,omitempty"`
	LastModified string    `json:"last_modified,omitempty"`
	Bytes        int64     `json:"bytes"`
	SHA256       string    `json:"sha256"`
	Offers       int       `json:"offers"`
}

// Age is how long ago the server last confirmed the file current.
func (s Source) Age(now time.Time) time.Duration { return now.Sub(s.CheckedAt) }

// FetchResult is the outcome of one source in an update.
type FetchResult struct {
	Cloud string `json:"cloud"`
	URL   string `json:"url"`
	// ServedBy is the URL a redirect led to, when one did.
	ServedBy string `json:"served_by,omitempty"`
	// Status is "updated" (new content stored), "unchanged" (the server
	// answered 304 or sent the same bytes) or "failed" (the old file, if
	// any, is kept).
	Status string `json:"status"`
	Bytes  int64  `json:"bytes"`
	Offers int    `json:"offers,omitempty"`
	Error  string `json:"error,omitempty"`
}

// Fetcher downloads catalogs into Dir.
type Fetcher struct {
	Client *http.Client
	// Dir is the catalogs folder, DATA_DIR/catalogs.
	Dir string
	// BaseURL holds <cloud>/vms.csv; DefaultBaseURL() when empty.
	BaseURL string
	// MirrorURL holds the same files and is tried when BaseURL fails;
	// DefaultMirrorURL() when BaseURL is empty too, none when BaseURL is
	// set: a host the user named is not second-guessed.
	MirrorURL string
	// AzureURL is the Retail Prices endpoint; AzureRetailURL by default.
	AzureURL string
	Now      func() time.Time
	// MaxBytes bounds each file and page; MaxFetchBytes when 0.
	MaxBytes int64
}

// DefaultBaseURL is where `catalog update` fetches SkyPilot files from.
func DefaultBaseURL() string { return SkyPilotCatalogURL + "/" + SkyPilotSchema }

// DefaultMirrorURL is where `catalog update` fetches SkyPilot files from
// when DefaultBaseURL fails.
func DefaultMirrorURL() string { return SkyPilotMirrorURL + "/" + SkyPilotSchema }

// Update fetches each named source ("azure" or a SkyPilot cloud) and
// stores what changed. A source that fails keeps its previous file; the
// others go on. The results come in the order asked.
func (f *Fetcher) Update(ctx context.Context, sources []string) []FetchResult {
	if err := os.MkdirAll(f.Dir, 0o755); err != nil {
		out := make([]FetchResult, len(sources))
		for i, s := range sources {
			out[i] = FetchResult{Cloud: s, Status: "failed", Error: err.Error()}
		}
		return out
	}
	out := make([]FetchResult, 0, len(sources))
	for _, s := range sources {
		var r FetchResult
		if s == Azure {
			r = f.fetchAzure(ctx)
		} else {
			r = f.fetchSkyPilot(ctx, s)
		}
		out = append(out, r)
	}
	return out
}

func (f *Fetcher) now() time.Time {
	if f.Now != nil {
		return f.Now().UTC()
	}
	return time.Now().UTC()
}

func (f *Fetcher) client() *http.Client {
	if f.Client != nil {
		return f.Client
	}
	return &http.Client{Timeout: 2 * time.Minute, CheckRedirect: sameSchemeRedirect}
}

// sameSchemeRedirect follows at most 5 redirects, never from https to
// http: a mirror may send a request to its regional endpoint, and the URL
// that served the bytes is recorded (Source.ServedBy), so a catalog's
// provenance is where it really came from.
func sameSchemeRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 5 {
		return fmt.Errorf("stopped after 5 redirects")
	}
	if via[0].URL.Scheme == "https" && req.URL.Scheme != "https" {
		return fmt.Errorf("refused a redirect from https to %s", req.URL.Redacted())
	}
	return nil
}

// servedBy is the final URL of resp when a redirect moved it from asked.
func servedBy(resp *http.Response, asked string) string {
	if resp.Request == nil || resp.Request.URL == nil || resp.Request.URL.String() == asked {
		return ""
	}
	return resp.Request.URL.Redacted()
}

func (f *Fetcher) maxBytes() int64 {
	if f.MaxBytes > 0 {
		return f.MaxBytes
	}
	return MaxFetchBytes
}

// fetchSkyPilot downloads <cloud>/vms.csv from the base URL, or from the
// mirror when the base fails: a host that is down or rate-limits must not
// leave the prices stale while the same file is published elsewhere.
func (f *Fetcher) fetchSkyPilot(ctx context.Context, cloud string) FetchResult {
	base, mirror := f.BaseURL, f.MirrorURL
	if base == "" {
		base = DefaultBaseURL()
		if mirror == "" {
			mirror = DefaultMirrorURL()
		}
	}
	r := f.fetchSkyPilotFrom(ctx, cloud, base)
	if r.Status != "failed" || mirror == "" || ctx.Err() != nil {
		return r
	}
	m := f.fetchSkyPilotFrom(ctx, cloud, mirror)
	if m.Status == "failed" {
		m.Error = r.Error + "; mirror: " + m.Error
	}
	return m
}

// fetchSkyPilotFrom downloads BASE/<cloud>/vms.csv with a conditional
// request.
func (f *Fetcher) fetchSkyPilotFrom(ctx context.Context, cloud, base string) FetchResult {
	u := strings.TrimRight(base, "/") + "/" + cloud + "/vms.csv"
	r := FetchResult{Cloud: cloud, URL: u}
	fail := func(err error) FetchResult {
		r.Status, r.Error = "failed", err.Error()
		return r
	}
	prev, _ := readSource(f.Dir, cloud)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fail(err)
	}
	// Validators only count for a file still on disk: a deleted file must
	// be downloaded again even if the server says it has not changed.
	if prev != nil && prev.URL == u && fileExists(filepath.Join(f.Dir, prev.File)) {
		if prev.ETag != "" {
			req.Header.Set("If-None-Match", prev.ETag)
		}
		if prev.LastModified != "" {
			req.Header.Set("If-Modified-Since", prev.LastModified)
		}
	}
	resp, err := f.client().Do(req)
	if err != nil {
		return fail(err)
	}
	defer resp.Body.Close()
	now := f.now()
	switch {
	case resp.StatusCode == http.StatusNotModified && prev != nil:
		prev.CheckedAt = now
		r.Status, r.Offers = "unchanged", prev.Offers
		if err := writeSource(f.Dir, prev); err != nil {
			return fail(err)
		}
		return r
	case resp.StatusCode != http.StatusOK:
		return fail(fmt.Errorf("GET %s: %s", u, resp.Status))
	}
	body, err := readBounded(resp.Body, f.maxBytes())
	if err != nil {
		return fail(fmt.Errorf("GET %s: %w", u, err))
	}
	r.Bytes = int64(len(body))
	r.ServedBy = servedBy(resp, u)
	file := filepath.Join(cloud, "vms.csv")
	// Parse before storing: a truncated or changed-format file must not
	// replace one that plan can read.
	// Read under its URL, so that an error's FILE:LINE names the bytes
	// that were refused, not a local file that was never written.
	offers, _, err := ReadOffersAs(u, cloud, bytes.NewReader(body))
	if err != nil {
		return fail(fmt.Errorf("not a readable SkyPilot catalog, kept the previous file: %w", err))
	}
	src := &Source{Cloud: cloud, URL: u, ServedBy: servedBy(resp, u), File: file, FetchedAt: now, CheckedAt: now,
		ETag: resp.Header.Get("ETag"), LastModified: resp.Header.Get("Last-Modified"),
		Bytes: r.Bytes, SHA256: sum(body), Offers: len(offers)}
	r.Offers = len(offers)
	if prev != nil && prev.SHA256 == src.SHA256 && fileExists(filepath.Join(f.Dir, prev.File)) {
		src.FetchedAt = prev.FetchedAt
		r.Status = "unchanged"
		if err := writeSource(f.Dir, src); err != nil {
			return fail(err)
		}
		return r
	}
	if err := writeAtomic(filepath.Join(f.Dir, file), body); err != nil {
		return fail(err)
	}
	if err := writeSource(f.Dir, src); err != nil {
		return fail(err)
	}
	r.Status = "updated"
	return r
}

// readBounded reads at most limit bytes and fails past it, so that a
// runaway answer costs bounded memory.
func readBounded(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("answer is over the %d MiB limit", limit>>20)
	}
	return b, nil
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// writeAtomic writes a file through a temporary one in the same folder and
// a rename, so that a reader sees the old file or the new one, never half.
func writeAtomic(name string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return fmt.Errorf("store catalog: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return fmt.Errorf("store catalog: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("store catalog: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("store catalog: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("store catalog: %w", err)
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		return fmt.Errorf("store catalog: %w", err)
	}
	return nil
}

const sourceFile = "source.json"

func readSource(dir, cloud string) (*Source, error) {
	b, err := os.ReadFile(filepath.Join(dir, cloud, sourceFile))
	if err != nil {
		return nil, err
	}
	var s Source
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, cloud, sourceFile), err)
	}
	if s.Cloud != cloud || s.File == "" || filepath.IsAbs(s.File) || strings.Contains(s.File, "..") {
		return nil, fmt.Errorf("%s: not a catalog record for %s", filepath.Join(dir, cloud, sourceFile), cloud)
	}
	return &s, nil
}

func writeSource(dir string, s *Source) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, s.Cloud, sourceFile), append(b, '\n'))
}

// Stored lists the downloaded catalogs in dir, by cloud name, with
// warnings about records that cannot be read. A missing dir is no
// catalogs and no warning.
func Stored(dir string) ([]Source, []string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, []string{fmt.Sprintf("downloaded catalogs: %v", err)}
	}
	var (
		out   []Source
		warns []string
	)
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		s, err := readSource(dir, e.Name())
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				warns = append(warns, fmt.Sprintf("downloaded catalog %s: %v: left out", e.Name(), err))
			}
			continue
		}
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cloud < out[j].Cloud })
	return out, warns
}

// fetchAzure pages through the Retail Prices API for the GPU VM sizes and
// stores them as a gpuwarden prices.csv. The API sends no validators worth
// trusting across pages, so every update downloads it again; an answer that
// prices nothing keeps the previous file.
func (f *Fetcher) fetchAzure(ctx context.Context) FetchResult {
	base := f.AzureURL
	if base == "" {
		base = AzureRetailURL
	}
	first, err := url.Parse(base)
	if err != nil {
		return FetchResult{Cloud: Azure, URL: base, Status: "failed", Error: err.Error()}
	}
	q := first.Query()
	q.Set("$filter", AzureFilter())
	first.RawQuery = q.Encode()
	r := FetchResult{Cloud: Azure, URL: base}
	fail := func(err error) FetchResult {
		r.Status, r.Error = "failed", err.Error()
		return r
	}
	var items []azureItem
	next := first.String()
	for page := 0; next != ""; page++ {
		if page == maxAzurePages {
			return fail(fmt.Errorf("more than %d pages: stopped", maxAzurePages))
		}
		u, err := url.Parse(next)
		if err != nil || u.Scheme != first.Scheme || u.Host != first.Host {
			// A NextPageLink elsewhere is not followed: the answer decides
			// the pages, not where requests go.
			return fail(fmt.Errorf("NextPageLink %q leaves %s", next, first.Host))
		}
		p, n, err := f.azurePage(ctx, next)
		if err != nil {
			return fail(err)
		}
		r.Bytes += n
		if len(items)+len(p.Items) > maxAzureKept {
			return fail(fmt.Errorf("more than %d GPU price items: not the Retail Prices API's answer", maxAzureKept))
		}
		items = append(items, p.Items...)
		next = p.NextPageLink
	}
	now := f.now()
	csvBytes, n := azureCSV(items, now)
	if n == 0 {
		return fail(fmt.Errorf("%s: the answer prices no GPU VM size (%d items): kept the previous file", base, len(items)))
	}
	file := filepath.Join(Azure, "prices.csv")
	src := &Source{Cloud: Azure, URL: base, File: file, FetchedAt: now, CheckedAt: now,
		Bytes: int64(len(csvBytes)), SHA256: sum(csvBytes), Offers: n}
	r.Offers = n
	prev, _ := readSource(f.Dir, Azure)
	r.Status = "updated"
	if prev != nil && prev.SHA256 == src.SHA256 && fileExists(filepath.Join(f.Dir, prev.File)) {
		src.FetchedAt, r.Status = prev.FetchedAt, "unchanged"
	} else if err := writeAtomic(filepath.Join(f.Dir, file), csvBytes); err != nil {
		return fail(err)
	}
	if err := writeSource(f.Dir, src); err != nil {
		return fail(err)
	}
	return r
}

func (f *Fetcher) azurePage(ctx context.Context, u string) (*azurePage, int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := f.client().Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	body := &countingReader{r: io.LimitReader(resp.Body, f.maxBytes()+1)}
	p, err := decodeAzurePage(body)
	if body.n > f.maxBytes() {
		return nil, body.n, fmt.Errorf("GET %s: larger than %d bytes", u, f.maxBytes())
	}
	if err != nil {
		return nil, body.n, fmt.Errorf("GET %s: not a Retail Prices answer: %w", u, err)
	}
	return p, body.n, nil
}

// maxAzureItems is the most items one Retail Prices page may hold: the
// API's documented page size is 1,000 records ("API response
// pagination"), and a page is decoded item by item so that a hostile one
// of 16 MiB of {} costs no more than its count (issue #32: it reached 4
// GiB when each empty item was kept).
const maxAzureItems = 1000

// maxAzureKept bounds the GPU items one update keeps over all its pages:
// the real answer has a few thousand (every region's meters of some 25
// sizes), so 50,000 is room to grow, and at most about 10 MB.
const maxAzureKept = 50_000

// decodeAzurePage reads one answer item by item, keeping only the items of
// the GPU sizes azureCSV can use, so that memory follows what is kept.
func decodeAzurePage(r io.Reader) (*azurePage, error) {
	dec := json.NewDecoder(r)
	if err := expectDelim(dec, '{'); err != nil {
		return nil, err
	}
	p := &azurePage{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := t.(string)
		switch key {
		case "Items":
			if err := decodeAzureItems(dec, p); err != nil {
				return nil, err
			}
		case "NextPageLink":
			var next *string
			if err := dec.Decode(&next); err != nil {
				return nil, fmt.Errorf("NextPageLink: %w", err)
			}
			if next != nil {
				p.NextPageLink = *next
			}
		case "BillingCurrency":
			if err := dec.Decode(&p.BillingCurrency); err != nil {
				return nil, fmt.Errorf("BillingCurrency: %w", err)
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, err
			}
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return nil, err
	}
	return p, nil
}

func decodeAzureItems(dec *json.Decoder, p *azurePage) error {
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if t == nil {
		return nil // "Items": null
	}
	if d, ok := t.(json.Delim); !ok || d != '[' {
		return fmt.Errorf("Items is not a list")
	}
	for dec.More() {
		if p.Count == maxAzureItems {
			return fmt.Errorf("more than %d items in one page, the API's page size", maxAzureItems)
		}
		var it azureItem
		if err := dec.Decode(&it); err != nil {
			return fmt.Errorf("Items[%d]: %w", p.Count, err)
		}
		p.Count++
		if s, ok := azureGPUSizes[it.ArmSkuName]; ok && s.gpu != "" {
			p.Items = append(p.Items, it)
		}
	}
	return expectDelim(dec, ']')
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := t.(json.Delim); !ok || d != want {
		return fmt.Errorf("expected %q, found %v", want, t)
	}
	return nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
