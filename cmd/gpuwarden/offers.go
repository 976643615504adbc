package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/catalog"
	"github.com/gpuwarden/gpuwarden/internal/textsafe"
	"github.com/spf13/cobra"
)

func (a *app) offersCommand() *cobra.Command {
	var (
		cats     catalogFlags
		f        catalog.Filter
		maxPrice string
		output   string
	)
	c := &cobra.Command{
		Use:   "offers",
		Short: "List and filter the offers in the price catalogs",
		Long: `offers lists the catalog's offers, cheapest hourly price first, with where each
price came from and when it was read. Filters combine; --max-price compares the
cheaper of on-demand and spot, in the offer's own currency.

` + exitCodes("0  listed, also when no offer matches a known GPU, provider, region or country",
			"2  bad input or usage: a flag, an unknown GPU, provider, region or country, a missing or malformed price file",
			"4  internal error"),
		Example: `  gpuwarden offers --gpu H100 --max-price 3
  gpuwarden offers --min-vram 80 --country DE,FR -o json
  gpuwarden offers --catalog aws/vms.csv --no-embedded --provider aws`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := outputFormat(output, "table", "json", "csv"); err != nil {
				return err
			}
			if maxPrice != "" {
				m, err := gpuwarden.ParseMicros(maxPrice)
				if err != nil || m <= 0 {
					return gpuwarden.Errorf(gpuwarden.EInvalid, "--max-price: %q is not a positive price", maxPrice).WithHint("an hourly price such as 2.50")
				}
				f.MaxHourly = m
			}
			if f.MinVRAMGB < 0 {
				return gpuwarden.Errorf(gpuwarden.EInvalid, "--min-vram: must be 0 or more, got %g", f.MinVRAMGB)
			}
			if f.Country != "" {
				// A name ("germany") is read as its code; a word that is
				// no country is an error, not a filter matching nothing.
				codes, err := catalog.CountryCodes(f.Country)
				if err != nil {
					return flagError("--country", err)
				}
				f.Country = strings.Join(codes, ",")
			}
			defer pricingGC()()
			cat, err := cats.load(a.now())
			if err != nil {
				return err
			}
			if err := checkFilterNames(catalog.KnownNames(cat), f); err != nil {
				return err
			}
			priceAges(a.stderr, a.now(), cat, countryList(f.Country))
			warnAll(a.stderr, cat.Warnings)
			offers := filterOffers(&cat.Offers, f)
			switch output {
			case "json":
				return writeJSON(a.stdout, "offers", map[string]any{"offers": offers, "warnings": nonNil(cat.Warnings), "price_sources": nonNilSources(cat.Sources)})
			case "csv":
				return offersCSV(a.stdout, offers)
			}
			return offersTable(a.stdout, offers)
		},
	}
	cats.registerDownloads(c)
	c.Flags().StringVar(&f.GPU, "gpu", "", "GPU model, any alias (H100, A100-80GB, RTX4090)")
	c.Flags().Float64Var(&f.MinVRAMGB, "min-vram", 0, "least VRAM per box in `GB`")
	c.Flags().StringVar(&f.Provider, "provider", "", "provider name (aws, gcp, lambda, …)")
	c.Flags().StringVar(&f.Region, "region", "", "provider region")
	c.Flags().StringVar(&f.Country, "country", "", "countries, comma-separated: ISO codes or names (DE,FR or Germany,France)")
	c.Flags().StringVar(&maxPrice, "max-price", "", "highest hourly `PRICE` in the offer's currency")
	c.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or csv")
	return c
}

// checkFilterNames refuses a GPU, provider or region the catalog does not
// know, so that a typo ("H1OO") is an error with a suggestion rather than
// "no offers match"; a known name that matches nothing still gets that.
func checkFilterNames(names *catalog.Names, f catalog.Filter) error {
	if err := names.CheckGPU(f.GPU); err != nil {
		return flagError("--gpu", err)
	}
	if err := names.CheckProvider(f.Provider); err != nil {
		return flagError("--provider", err)
	}
	if err := names.CheckRegion(f.Provider, f.Region); err != nil {
		return flagError("--region", err)
	}
	return nil
}

// flagError puts the flag that gave a name in front of the error about it.
func flagError(flag string, err error) error {
	var e *gpuwarden.Error
	if !errors.As(err, &e) {
		return fmt.Errorf("%s: %w", flag, err)
	}
	c := *e
	c.Message = flag + ": " + e.Message
	return &c
}

// filterOffers applies the filter (one country at a time) and sorts by the
// cheapest hourly price.
func filterOffers(all *gpuwarden.Offers, f catalog.Filter) []gpuwarden.Offer {
	countries := []string{""}
	if f.Country != "" {
		countries = strings.Split(strings.ToUpper(f.Country), ",")
	}
	out := []gpuwarden.Offer{}
	for _, o := range all.All() {
		for _, c := range countries {
			f.Country = strings.TrimSpace(c)
			if f.Match(o) {
				out = append(out, o)
				break
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return cheapest(out[i]) < cheapest(out[j]) })
	return out
}

// cheapest is the lowest hourly price of an offer, or its monthly price
// spread over 730 h when it has no hourly one.
func cheapest(o gpuwarden.Offer) gpuwarden.Micros {
	best := o.OnDemandHourly
	if o.SpotHourly > 0 && (best == 0 || o.SpotHourly < best) {
		best = o.SpotHourly
	}
	if best == 0 {
		best = o.Monthly / gpuwarden.DefaultHoursPerMonth
	}
	return best
}

func priceCell(cur gpuwarden.Currency, m gpuwarden.Micros, unit string) string {
	if m == 0 {
		return "-"
	}
	return cur.FormatRate(m, unit)
}

func offersTable(w io.Writer, offers []gpuwarden.Offer) error {
	if len(offers) == 0 {
		_, err := fmt.Fprintln(w, "no offers match")
		return err
	}
	rows := [][]string{{"PROVIDER", "REGION", "INSTANCE", "GPUS", "VRAM", "ON-DEMAND", "SPOT", "MONTHLY", "AS OF"}}
	for _, o := range offers {
		rows = append(rows, []string{o.Provider, region(o), o.Instance, gpus(&o), trimFloat(o.VRAMGB()) + " GB",
			priceCell(o.Currency, o.OnDemandHourly, "h"), priceCell(o.Currency, o.SpotHourly, "h"),
			priceCell(o.Currency, o.Monthly, "mo"), undatedCell(o.AsOf)})
	}
	fitOfferColumn(rows, 2)
	rightAlign(rows, 4, 5, 6, 7)
	t := newTable(w)
	for _, r := range rows {
		t.row(r...)
	}
	if err := t.flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d %s\n", len(offers), plural(len(offers), "offer", "offers"))
	return err
}

func region(o gpuwarden.Offer) string {
	if o.Country == "" {
		return o.Region
	}
	return o.Region + " (" + o.Country + ")"
}

func offersCSV(w io.Writer, offers []gpuwarden.Offer) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"provider", "region", "country", "instance", "gpu", "gpu_count", "vram_gb_per_gpu", "vcpus", "ram_gb",
		"currency", "on_demand_hourly", "spot_hourly", "monthly", "as_of", "source"})
	blank := func(m gpuwarden.Micros) string {
		if m == 0 {
			return ""
		}
		return m.String()
	}
	for _, o := range offers {
		_ = cw.Write(textsafe.CSVRecord([]string{o.Provider, o.Region, o.Country, o.Instance, o.GPU, trimFloat(o.GPUCount), trimFloat(o.VRAMGBPerGPU),
			strconv.Itoa(o.VCPUs), trimFloat(o.RAMGB), string(o.Currency), blank(o.OnDemandHourly), blank(o.SpotHourly),
			blank(o.Monthly), o.AsOf, o.Source}))
	}
	cw.Flush()
	return cw.Error()
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// nonNilSources keeps "price_sources": [] in JSON when nothing was downloaded.
func nonNilSources(s []gpuwarden.PriceSource) []gpuwarden.PriceSource {
	if s == nil {
		return []gpuwarden.PriceSource{}
	}
	return s
}

// undatedCell shows an empty as_of as "undated" in tables, never as a
// blank that reads like a missing column.
func undatedCell(asOf string) string {
	if asOf == "" {
		return "undated"
	}
	return asOf
}

// countryList splits --country after CountryCodes made it codes; "" is
// anywhere, no list.
func countryList(codes string) []string {
	if codes == "" {
		return nil
	}
	return strings.Split(codes, ",")
}
