package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/catalog"
	"github.com/gpuwarden/gpuwarden/config"
	"github.com/gpuwarden/gpuwarden/plan"
	"github.com/spf13/cobra"
)

// location is a provider:region pair, or the public internet.
type location struct {
	Provider string `json:"provider,omitempty"`
	Region   string `json:"region,omitempty"`
	Country  string `json:"country,omitempty"`
	Internet bool   `json:"internet,omitempty"`
}

func (l location) String() string {
	switch {
	case l.Internet:
		return "the internet"
	case l.Country != "":
		return fmt.Sprintf("%s %s (%s)", l.Provider, l.Region, l.Country)
	}
	return l.Provider + " " + l.Region
}

func parseLocation(flag, s string, internetOK bool) (location, error) {
	if internetOK && strings.EqualFold(s, "internet") {
		return location{Internet: true}, nil
	}
	prov, region, ok := strings.Cut(s, ":")
	if !ok || prov == "" || region == "" {
		hint := "write PROVIDER:REGION, e.g. aws:us-east-1"
		if internetOK {
			hint += ", or internet"
		}
		return location{}, gpuwarden.Errorf(gpuwarden.EInvalid, "%s: %q is not PROVIDER:REGION", flag, s).WithHint("%s", hint)
	}
	prov = strings.ToLower(prov)
	return location{Provider: prov, Region: region, Country: catalog.CountryOf(prov, region)}, nil
}

// checkLocation refuses a provider or region gpuwarden does not know, with
// a suggestion, so that a typo is not priced or checked as a real place.
func checkLocation(names *catalog.Names, flag string, l location) error {
	if l.Internet {
		return nil
	}
	if err := names.CheckProvider(l.Provider); err != nil {
		return flagError(flag, err)
	}
	if err := names.CheckRegion(l.Provider, l.Region); err != nil {
		return flagError(flag, err)
	}
	return nil
}

// egressReport is what `egress -o json` prints.
type egressReport struct {
	From     location           `json:"from"`
	To       location           `json:"to"`
	Files    int                `json:"files"`
	Bytes    int64              `json:"bytes"`
	Scope    string             `json:"scope"`
	Unit     string             `json:"unit"`
	Quantity gpuwarden.Micros   `json:"quantity"`
	Currency gpuwarden.Currency `json:"currency"`
	Bands    []plan.EgressBand  `json:"bands"`
	Total    gpuwarden.Cents    `json:"total"`
	Note     string             `json:"note,omitempty"`
	// Residency holds problems with the plan's allowed countries; any makes the exit code 1.
	Residency []string `json:"residency"`
}

func (a *app) egressCommand() *cobra.Command {
	var from, to, planFile, output string
	c := &cobra.Command{
		Use:   "egress PATH... --from PROVIDER:REGION --to PROVIDER:REGION|internet",
		Short: "Price moving files out of a region, and check the border",
		Long: `egress adds up the sizes of the files and directories given, prices moving them
with the source provider's tiers (in the unit the provider bills: GB = 10^9
bytes or GiB = 2^30 bytes), and checks the move against the allowed countries
of the plan file (--plan, or ./gpuwarden.yaml when present).

Scope: the same provider and region is intra-region, the same provider and
another region is inter-region, anything else leaves over the internet.

` + exitCodes("0  priced, and within the plan's allowed countries",
			"1  the move leaves the plan's allowed countries",
			"2  bad input or usage: a flag, an unknown provider or region, a missing path, the plan file, no egress price for the provider",
			"4  internal error"),
		Example: `  gpuwarden egress ./checkpoints --from aws:us-east-1 --to internet
  gpuwarden egress ckpt/ data.tar --from aws:eu-central-1 --to aws:us-east-1 --plan gpuwarden.yaml -o json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, paths []string) error {
			if err := outputFormat(output, "table", "json"); err != nil {
				return err
			}
			if from == "" || to == "" {
				return gpuwarden.Errorf(gpuwarden.EInvalid, "--from and --to are required").WithHint("e.g. --from aws:us-east-1 --to internet")
			}
			src, err := parseLocation("--from", from, false)
			if err != nil {
				return err
			}
			dst, err := parseLocation("--to", to, true)
			if err != nil {
				return err
			}
			cat, err := catalog.Embedded()
			if err != nil {
				return err
			}
			names := catalog.KnownNames(cat)
			if err := checkLocation(names, "--from", src); err != nil {
				return err
			}
			if err := checkLocation(names, "--to", dst); err != nil {
				return err
			}
			var p *gpuwarden.Plan
			if planFile == "" {
				if _, err := os.Stat("gpuwarden.yaml"); err == nil {
					planFile = "gpuwarden.yaml"
				}
			}
			if planFile != "" {
				if p, err = config.Load(planFile); err != nil {
					return err
				}
			}
			files, size, err := sizeOf(paths)
			if err != nil {
				return err
			}
			r, err := priceMove(cat, src, dst, files, size)
			if err != nil {
				return err
			}
			r.Residency = checkResidency(p, src, dst)
			if output == "json" {
				err = writeJSON(a.stdout, "egress", r)
			} else {
				err = r.table(a.stdout, planFile)
			}
			if err != nil {
				return err
			}
			if len(r.Residency) > 0 {
				return gpuwarden.Errorf(gpuwarden.EFinding, "border crossed")
			}
			return nil
		},
	}
	c.Flags().StringVar(&from, "from", "", "where the files are: `PROVIDER:REGION`")
	c.Flags().StringVar(&to, "to", "", "where they go: `PROVIDER:REGION` or internet")
	c.Flags().StringVar(&planFile, "plan", "", "plan `FILE` whose residency rules apply (default ./gpuwarden.yaml if present)")
	c.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return c
}

// sizeOf walks the paths and adds up regular files; links are not followed.
func sizeOf(paths []string) (int, int64, error) {
	var files int
	var total int64
	for _, root := range paths {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.Type().IsRegular() {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			files++
			total += info.Size()
			return nil
		})
		if errors.Is(err, fs.ErrNotExist) {
			return 0, 0, gpuwarden.Errorf(gpuwarden.ENotFound, "%s: no such file or directory", root)
		}
		if err != nil {
			return 0, 0, &gpuwarden.Error{Code: gpuwarden.EInvalid, Message: "read " + root, Err: err}
		}
	}
	return files, total, nil
}

func priceMove(cat *gpuwarden.Catalog, src, dst location, files int, size int64) (*egressReport, error) {
	scope := gpuwarden.EgressInternet
	note := ""
	switch {
	case dst.Internet:
	case dst.Provider != src.Provider:
		note = "leaves " + src.Provider + "'s network, so it is billed as internet egress"
	case strings.EqualFold(dst.Region, src.Region):
		scope = gpuwarden.EgressIntraRegion
	default:
		scope = gpuwarden.EgressInterRegion
	}
	unit := "GB"
	for _, t := range cat.Egress {
		if t.Provider == src.Provider && t.Scope == scope {
			unit = t.Unit
			break
		}
	}
	per := 1e9
	if unit == "GiB" {
		per = 1 << 30
	}
	qty := gpuwarden.MicrosFromFloat(float64(size) / per)
	q, ok := plan.PriceEgress(cat.Egress, src.Provider, scope, qty)
	if !ok {
		known := map[string]bool{}
		for _, t := range cat.Egress {
			known[t.Provider] = true
		}
		names := make([]string, 0, len(known))
		for n := range known {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, gpuwarden.Errorf(gpuwarden.ENotFound, "no %s egress price for %s in the catalog", scope, src.Provider).
			WithHint("egress prices are known for: %s", strings.Join(names, ", "))
	}
	// Each band is rounded to the cent and the total is their sum, so the
	// printed bands add up to the printed total.
	var total gpuwarden.Cents
	for _, b := range q.Bands {
		total += gpuwarden.CentsOf(b.Amount)
	}
	return &egressReport{From: src, To: dst, Files: files, Bytes: size, Scope: string(scope), Unit: unit,
		Quantity: qty, Currency: q.Currency, Bands: nonNilBands(q.Bands), Total: total, Note: note,
		Residency: []string{}}, nil
}

func nonNilBands(b []plan.EgressBand) []plan.EgressBand {
	if b == nil {
		return []plan.EgressBand{}
	}
	return b
}

// checkResidency lists the ways a move breaks the plan's allowed countries.
func checkResidency(p *gpuwarden.Plan, src, dst location) []string {
	out := []string{}
	if p == nil || len(p.Residency.Countries) == 0 {
		return out
	}
	allowed := strings.Join(p.Residency.Countries, ", ")
	in := func(c string) bool { return slices.Contains(p.Residency.Countries, c) }
	switch {
	case dst.Internet:
		out = append(out, "the destination is the internet: the plan allows only "+allowed+" and nothing says where the data lands")
	case dst.Country == "":
		out = append(out, "the country of "+dst.String()+" is unknown: the plan allows only "+allowed)
	case !in(dst.Country):
		out = append(out, dst.Country+" is outside the plan's allowed countries ("+allowed+")")
	}
	if src.Country != "" && !in(src.Country) {
		out = append(out, "the source "+src.String()+" is already outside the allowed countries ("+allowed+")")
	}
	return out
}

func (r *egressReport) table(w io.Writer, planFile string) error {
	var b strings.Builder
	files := "files"
	if r.Files == 1 {
		files = "file"
	}
	fmt.Fprintf(&b, "Move      %d %s, %s bytes = %s %s, from %s to %s\n", r.Files, files, gpuwarden.GroupDigits(r.Bytes), r.Quantity, r.Unit, r.From, r.To)
	scope := r.Scope
	if r.Note != "" {
		scope += ": " + r.Note
	}
	fmt.Fprint(&b, wrap(scope, "Scope     ", pageWidth))
	unitText := "GB = 10^9 bytes"
	if r.Unit == "GiB" {
		unitText = "GiB = 2^30 bytes"
	}
	fmt.Fprintf(&b, "Unit      %s bills per %s\n", r.From.Provider, unitText)
	rows := [][]string{}
	for _, band := range r.Bands {
		rows = append(rows, []string{"  " + band.GB.String() + " " + r.Unit, "× " + r.Currency.FormatRate(band.PerGB, r.Unit),
			r.Currency.Format(gpuwarden.CentsOf(band.Amount))})
	}
	rows = append(rows, []string{"  total", "", r.Currency.Format(r.Total)})
	rightAlign(rows, 0, 2)
	t := newTable(&b)
	for _, row := range rows {
		t.row(row...)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if planFile != "" {
		if len(r.Residency) == 0 {
			fmt.Fprintf(&b, "Residency ok under %s\n", planFile)
		}
		for _, s := range r.Residency {
			fmt.Fprint(&b, wrap(s, "Residency ✗ ", pageWidth))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
