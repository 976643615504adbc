package preflight

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpuwarden/gpuwarden"
)

// noticeFacts are what each cloud documents about interrupting spot boxes,
// from their own pages (AWS spot instance interruption notices, GCP
// preemption/Spot VM docs, Azure Spot VM eviction and Scheduled Events).
var noticeFacts = map[string]string{
	"aws":   "AWS gives a two-minute interruption notice in instance metadata, and may send a rebalance recommendation earlier; gpuwarden up relays both",
	"gcp":   "GCP gives Spot VMs about 30 seconds (ACPI soft-off) and sets the metadata key preempted; gpuwarden up relays it",
	"azure": "Azure Spot VMs get at least 30 seconds through Scheduled Events (Preempt); gpuwarden up relays it",
}

// Questions writes, as markdown for a ticket, the contract questions to
// settle with a provider before the first click, with what the catalog
// already knows about it filled in.
func Questions(cat *gpuwarden.Catalog, provider string) (string, error) {
	var offers []gpuwarden.Offer
	for _, o := range cat.Offers.All() {
		if strings.EqualFold(o.Provider, provider) {
			offers = append(offers, o)
		}
	}
	if len(offers) == 0 {
		var known []string
		for _, o := range cat.Offers.All() {
			if !slices.Contains(known, o.Provider) {
				known = append(known, o.Provider)
			}
		}
		slices.Sort(known)
		return "", gpuwarden.Errorf(gpuwarden.EInvalid, "the catalog has no offers of %q", provider).
			WithHint("providers in the catalog: %s; add yours with --catalog FILE", strings.Join(known, ", "))
	}
	provider = offers[0].Provider
	var b strings.Builder
	fmt.Fprintf(&b, "## Questions for %s before the first rental\n\n", provider)
	fmt.Fprintf(&b, "What gpuwarden's catalog already says (%d offers; check each against the contract):\n\n", len(offers))

	gpus, regions, countries, asOf := set(), set(), set(), set()
	var spot, monthly, fractional bool
	for _, o := range offers {
		gpus.add(o.GPU)
		regions.add(o.Region)
		if o.Country != "" {
			countries.add(o.Country)
		}
		asOf.add(o.AsOf)
		spot = spot || o.SpotHourly > 0
		monthly = monthly || o.Monthly > 0
		fractional = fractional || o.GPUCount < 1
	}
	fmt.Fprintf(&b, "- GPUs: %s\n- Regions: %s\n- Countries: %s\n- Prices as of: %s\n\n",
		gpus, regions, orUnknown(countries.String()), asOf)

	q := func(title, known string, asks ...string) {
		fmt.Fprintf(&b, "### %s\n\n", title)
		if known != "" {
			fmt.Fprintf(&b, "_Known:_ %s\n\n", known)
		}
		for _, a := range asks {
			fmt.Fprintf(&b, "- [ ] %s\n", a)
		}
		b.WriteString("\n")
	}
	billing := "on-demand hourly prices"
	if spot {
		billing += ", spot prices"
	}
	if monthly {
		billing += ", monthly prices"
	}
	q("Billing granularity", "the catalog has "+billing+".",
		"Is usage billed per second, per minute or per started hour? Is there a minimum charge per start?",
		"Does a stopped box still bill (reserved GPU, disks, IPs)?",
		"For monthly terms: the commitment, the notice period, and what an early stop costs.")
	share := "every offer is a whole card"
	if fractional {
		share = "some offers are fractions of a card"
	}
	q("Dedicated or shared VRAM", share+".",
		"Is the GPU passed through whole, or a MIG slice, vGPU or time-shared card?",
		"Is the VRAM dedicated, and is ECC on?",
		"Which GPU model exactly (SXM or PCIe, memory size), and is NVLink there on multi-GPU boxes?")
	q("Region and egress to object storage", egressFacts(cat, provider),
		"What does egress cost to the internet, to another region, and to your own object storage in the same region?",
		"Is there object storage in the GPU's region, and what does it cost per GB-month?",
		"Are ingress, API calls or snapshots billed?")
	q("CUDA image and drivers", "",
		"Which NVIDIA driver version is on the box, and who updates it?",
		"Is there a CUDA / framework image, and may we bring our own (container or VM image)?",
		"Is the NVIDIA container toolkit installed for Docker?")
	notice := noticeFacts[strings.ToLower(provider)]
	q("Spot interruption notice and SLA", notice,
		"How much notice before a spot box is reclaimed, and where does it appear (metadata URL, webhook, signal)?",
		"What is the availability SLA for on-demand boxes, and the credit when it is missed?",
		"What happens to local disks on reclaim or host failure?")
	q("Quota and account approval", "",
		"What GPU quota does a new account get in each region, and how long does an increase take?",
		"Is a deposit, a card or a sales call needed before GPUs unlock?")
	q("Data residency and sub-processors", "regions in "+orUnknown(countries.String())+".",
		"In which country are the data and the backups stored, and who can access them?",
		"Is there a data processing agreement (GDPR Art. 28) and a list of sub-processors?",
		"Is the marketplace host (if any) a third party, and where is it?")
	q("Invoices with VAT", "",
		"Which legal entity invoices, in which currency, and with VAT shown (reverse charge for EU businesses)?",
		"Can invoices carry a purchase order and cost-centre tags?")
	return b.String(), nil
}

func egressFacts(cat *gpuwarden.Catalog, provider string) string {
	var parts []string
	for _, t := range cat.Egress {
		if strings.EqualFold(t.Provider, provider) && t.FromGB == 0 {
			parts = append(parts, fmt.Sprintf("%s egress from %s", t.Scope, t.Currency.FormatRate(t.PerGB, unitWord(t.Unit))))
		}
	}
	for _, s := range cat.Storage {
		if strings.EqualFold(s.Provider, provider) {
			parts = append(parts, fmt.Sprintf("%s storage %s", s.Kind, s.Currency.FormatRate(s.PerGBMonth, "GB-month")))
		}
	}
	if len(parts) == 0 {
		return "the catalog has no egress or storage prices for " + provider + ": ask for them"
	}
	return strings.Join(parts, "; ") + "."
}

func unitWord(u string) string {
	if u == "" {
		return "GB"
	}
	return u
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// stringSet keeps values in first-seen order without repeats.
type stringSet struct{ vs []string }

func set() *stringSet { return &stringSet{} }

func (s *stringSet) add(v string) {
	if v != "" && !slices.Contains(s.vs, v) {
		s.vs = append(s.vs, v)
	}
}

func (s *stringSet) String() string {
	vs := slices.Clone(s.vs)
	slices.Sort(vs)
	return strings.Join(vs, ", ")
}
