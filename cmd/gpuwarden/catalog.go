package main

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/catalog"
	"github.com/spf13/cobra"
)

func (a *app) catalogCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "catalog",
		Short: "Download fresh price catalogs and show how old they are",
		Long: `catalog keeps the prices plan, offers and preflight rank with fresh: update
downloads the catalogs SkyPilot publishes for each cloud and Azure's retail
prices into DATA_DIR/catalogs; list shows each one and its age. Without a
download the embedded snapshot is used (SkyPilot's v8 GPU rows, dated): the
prices: line of every plan, offers and preflight gives its date, and says so
when it is over 30 days old or leaves fewer than 3 providers where the work
may run.

` + exitCodes("0  done", "2  bad usage", "3  a source could not be fetched (update)", "4  internal error"),
		Example: `  gpuwarden catalog update
  gpuwarden catalog update --cloud lambda --cloud runpod
  gpuwarden catalog list -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	c.AddCommand(a.catalogUpdateCommand(), a.catalogListCommand())
	return c
}

func (a *app) catalogUpdateCommand() *cobra.Command {
	var (
		dataDir, from, azureURL, output string
		clouds                          []string
		timeout                         time.Duration
	)
	c := &cobra.Command{
		Use:   "update",
		Short: "Download the published price catalogs (only what changed)",
		Long: `update fetches BASE_URL/<cloud>/vms.csv for every cloud SkyPilot publishes,
` + wrap(strings.Join(catalog.SkyPilotClouds, ", "), "  ", 80) + `and the GPU VM sizes of the Azure Retail Prices API, and stores them in
DATA_DIR/catalogs with the fetch time and the server's ETag and
Last-Modified. The next update asks "changed since?" (If-None-Match,
If-Modified-Since): a file that did not change is not downloaded again. A
file is checked before it is stored and written through a temporary file and
a rename, so a failed or truncated fetch never replaces a good one. Each
file is limited to 64 MiB.

The default BASE_URL is SkyPilot's published catalog, schema ` + catalog.SkyPilotSchema + `:
` + catalog.DefaultBaseURL() + `
and a file it cannot serve is fetched from SkyPilot's mirror instead:
` + catalog.DefaultMirrorURL() + `
A --from BASE_URL is used alone.

` + exitCodes("0  every source was fetched or is unchanged",
			"2  bad usage: an unknown cloud, a bad flag",
			"3  one or more sources could not be fetched; the others were updated and the old files kept",
			"4  internal error"),
		Example: `  gpuwarden catalog update
  gpuwarden catalog update --cloud lambda --cloud azure --data-dir ~/.local/state/gpuwarden
  gpuwarden catalog update --from http://mirror.internal/catalogs/v8 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := outputFormat(output, "table", "json"); err != nil {
				return err
			}
			sources, err := catalogSources(clouds)
			if err != nil {
				return err
			}
			for flag, u := range map[string]string{"--from": from, "--azure-url": azureURL} {
				if err := checkHTTPURL(flag, u); err != nil {
					return err
				}
			}
			f := &catalog.Fetcher{Dir: filepath.Join(dataDir, "catalogs"), BaseURL: from, AzureURL: azureURL, Now: a.now}
			if !cmd.Flags().Changed("from") {
				f.MirrorURL = catalog.DefaultMirrorURL()
			}
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel func()
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			results := f.Update(ctx, sources)
			failed := 0
			for _, r := range results {
				if r.Status == "failed" {
					failed++
				}
			}
			if output == "json" {
				err = writeJSON(a.stdout, "catalog-update", map[string]any{"dir": f.Dir, "results": results})
			} else {
				t := newTable(a.stdout)
				t.row("SOURCE", "STATUS", "OFFERS", "DOWNLOADED", "URL")
				for _, r := range results {
					t.row(r.Cloud, r.Status, strconv.Itoa(r.Offers), byteSize(r.Bytes), viaRedirect(r.URL, r.ServedBy))
				}
				err = t.flush()
				for _, r := range results {
					if r.Error != "" {
						fmt.Fprint(a.stderr, wrap(r.Cloud+": "+r.Error, "error: ", pageWidth))
					}
				}
			}
			if err != nil {
				return fmt.Errorf("write results: %w", err)
			}
			if failed > 0 {
				return gpuwarden.Errorf(gpuwarden.EUnavailable, "%d of %d sources could not be fetched", failed, len(results)).
					WithHint("the previous files are kept; check the network or --from, and run it again")
			}
			return nil
		},
	}
	fl := c.Flags()
	fl.StringVar(&dataDir, "data-dir", defaultDataDir(), "`DIR` whose catalogs/ folder holds the downloads")
	fl.StringVar(&from, "from", catalog.DefaultBaseURL(), "`BASE_URL` holding <cloud>/vms.csv (a mirror, a local server)")
	fl.StringVar(&azureURL, "azure-url", catalog.AzureRetailURL, "Azure Retail Prices API `URL`")
	fl.StringArrayVar(&clouds, "cloud", nil, "`NAME` of a source to update (a SkyPilot cloud or azure); repeatable; default all")
	fl.DurationVar(&timeout, "timeout", 10*time.Minute, "give up on the whole update after this long")
	fl.StringVarP(&output, "output", "o", "table", "output format: table or json")
	return c
}

// catalogSources checks --cloud names against what is published.
func catalogSources(clouds []string) ([]string, error) {
	all := append(append([]string(nil), catalog.SkyPilotClouds...), catalog.Azure)
	if len(clouds) == 0 {
		return all, nil
	}
	var out []string
	for _, c := range clouds {
		for _, name := range strings.Split(c, ",") {
			name = strings.ToLower(strings.TrimSpace(name))
			if !slices.Contains(all, name) {
				return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "--cloud: %q is not a published catalog", name).
					WithHint("one of: %s", strings.Join(all, ", "))
			}
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	return out, nil
}

func (a *app) catalogListCommand() *cobra.Command {
	var dataDir, output string
	c := &cobra.Command{
		Use:   "list",
		Short: "Show the downloaded catalogs, their sources and ages",
		Long: `list shows each catalog in DATA_DIR/catalogs: where it came from, how many
offers it holds, when it was downloaded and when its server last confirmed it
current. With none, plan and offers use the embedded snapshot.

` + exitCodes("0  listed, also when nothing was downloaded", "2  bad usage", "4  internal error"),
		Example: `  gpuwarden catalog list
  gpuwarden catalog list -o json --data-dir /var/lib/gpuwarden`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := outputFormat(output, "table", "json"); err != nil {
				return err
			}
			dir := filepath.Join(dataDir, "catalogs")
			sources, warns := catalog.Stored(dir)
			warnAll(a.stderr, warns)
			now := a.now()
			type row struct {
				catalog.Source
				AgeSeconds int64 `json:"age_seconds"`
			}
			rows := make([]row, 0, len(sources))
			for _, s := range sources {
				rows = append(rows, row{Source: s, AgeSeconds: int64(s.Age(now).Seconds())})
			}
			if output == "json" {
				return writeJSON(a.stdout, "catalog-list", map[string]any{"dir": dir, "catalogs": rows})
			}
			if len(rows) == 0 {
				fmt.Fprintf(a.stdout, "no downloaded catalog in %s: plan and offers use the embedded snapshot\n", dir)
				fmt.Fprintln(a.stdout, "run `gpuwarden catalog update` for fresh prices")
				return nil
			}
			t := newTable(a.stdout)
			t.row("SOURCE", "OFFERS", "DOWNLOADED", "CHECKED", "URL")
			for _, r := range rows {
				t.row(r.Cloud, strconv.Itoa(r.Offers), r.FetchedAt.UTC().Format("2006-01-02 15:04"),
					catalog.FormatAge(r.Age(now))+" ago", viaRedirect(r.URL, r.ServedBy))
			}
			return t.flush()
		},
	}
	c.Flags().StringVar(&dataDir, "data-dir", defaultDataDir(), "`DIR` whose catalogs/ folder holds the downloads")
	c.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return c
}

// byteSize writes a download size for people: "0", "59.8 KB", "24.1 MB".
func byteSize(n int64) string {
	switch {
	case n == 0:
		return "0"
	case n < 1000:
		return fmt.Sprintf("%d B", n)
	case n < 1000*1000:
		return fmt.Sprintf("%.1f KB", float64(n)/1000)
	}
	return fmt.Sprintf("%.1f MB", float64(n)/1e6)
}

// checkHTTPURL refuses a base URL that is not http(s)://host/…: a typo
// there is a usage error, not a network failure.
func checkHTTPURL(flag, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "%s: %q is not an http(s) URL", flag, raw).
			WithHint("for example %s", catalog.DefaultBaseURL())
	}
	return nil
}

// viaRedirect is a catalog's URL, and the URL that served it when a
// redirect led elsewhere.
func viaRedirect(asked, servedBy string) string {
	if servedBy == "" {
		return asked
	}
	return asked + " → " + servedBy
}
