package report

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// ProvisioningReport is how long launches took, per provider, region and
// offer, from `gpuwarden launch`'s recorded attempts: the launch command's
// start until the box was ready.
type ProvisioningReport struct {
	From time.Time `json:"from"`
	Now  time.Time `json:"now"`
	// Rows are sorted by provider, region, offer.
	Rows []ProvisioningRow `json:"rows"`
}

// ProvisioningRow is one provider, region and offer: how often a launch
// there worked, why it failed, and the times of those that worked.
type ProvisioningRow struct {
	Provider string `json:"provider"`
	Region   string `json:"region"`
	Offer    string `json:"offer"`
	Attempts int    `json:"attempts"`
	Launched int    `json:"launched"`
	// Failures counts failed attempts by class (capacity, quota, …).
	Failures     map[string]int `json:"failures"`
	Provisioning Provisioning   `json:"provisioning"`
}

// Launches summarises launch attempts started in [from, now]; skipped
// attempts never ran a command and are left out. An outlier's "node" is the
// attempt's ID, to find it in `launch --list`.
func Launches(attempts []gpuwarden.LaunchAttempt, from, now time.Time) ProvisioningReport {
	type key struct{ provider, region, offer string }
	type acc struct {
		row     ProvisioningRow
		samples []ProvisioningOutlier
	}
	by := map[key]*acc{}
	for _, a := range attempts {
		if a.Outcome == gpuwarden.AttemptSkipped || a.Outcome == "" || a.Start.Before(from) || a.Start.After(now) {
			continue
		}
		k := key{orNone(a.Provider), orNone(a.Region), orNone(a.Offer)}
		r := by[k]
		if r == nil {
			r = &acc{row: ProvisioningRow{Provider: k.provider, Region: k.region, Offer: k.offer, Failures: map[string]int{}}}
			by[k] = r
		}
		r.row.Attempts++
		switch a.Outcome {
		case gpuwarden.AttemptLaunched:
			r.row.Launched++
			if a.ProvisionSeconds > 0 {
				r.samples = append(r.samples, ProvisioningOutlier{Node: a.ID, Seconds: a.ProvisionSeconds})
			}
		default:
			r.row.Failures[cmp.Or(a.Class, gpuwarden.FailUnknown)]++
		}
	}
	out := ProvisioningReport{From: from.UTC(), Now: now.UTC(), Rows: []ProvisioningRow{}}
	for _, r := range by {
		r.row.Provisioning = provisioning(r.samples)
		out.Rows = append(out.Rows, r.row)
	}
	slices.SortFunc(out.Rows, func(a, b ProvisioningRow) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.Region, b.Region), cmp.Compare(a.Offer, b.Offer))
	})
	return out
}

// WriteProvisioningTable prints the provisioning report.
func WriteProvisioningTable(w io.Writer, r ProvisioningReport) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Provisioning, %s to %s (launch command to ready; nearest-rank percentiles)\n\n",
		r.From.Format("2006-01-02"), r.Now.Format("2006-01-02 15:04 UTC"))
	if len(r.Rows) == 0 {
		b.WriteString("No launches recorded: `gpuwarden launch` records every attempt.\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	t := newTable("PROVIDER", "REGION", "OFFER", "TRIES", "OK", "MEAN", "P50", "P95", "OUTLIERS", "FAILURES").alignRight(3, 4, 5, 6, 7, 8)
	for _, row := range r.Rows {
		p := row.Provisioning
		mean, p50, p95 := "-", "-", "-"
		if p.Samples > 0 {
			mean, p50, p95 = secs(p.MeanSeconds), secs(p.P50Seconds), secs(p.P95Seconds)
		}
		var fails []string
		for _, class := range sortedKeys(row.Failures) {
			fails = append(fails, fmt.Sprintf("%s %d", class, row.Failures[class]))
		}
		t.add(row.Provider, row.Region, row.Offer, fmt.Sprint(row.Attempts), fmt.Sprint(row.Launched), mean, p50, p95,
			fmt.Sprint(len(p.Outliers)), cmp.Or(strings.Join(fails, ", "), "-"))
	}
	if err := t.write(&b); err != nil {
		return err
	}
	for _, row := range r.Rows {
		for _, o := range row.Provisioning.Outliers {
			fmt.Fprintf(&b, "outlier: %s %s %s took %s (above %s)\n", row.Provider, row.Region, o.Node, secs(o.Seconds),
				secs(row.Provisioning.OutlierAboveSeconds))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
