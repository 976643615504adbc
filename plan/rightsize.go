package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpuwarden/gpuwarden"
)

// MIGProfile is one Multi-Instance GPU slice: its name as nvidia-smi lists
// it, its memory, and the sevenths of the card's compute it gets.
type MIGProfile struct {
	Name     string  `json:"name"`
	GB       float64 `json:"gb"`
	Sevenths int     `json:"sevenths"`
}

// migProfiles are the MIG slices of the cards that have them, from NVIDIA's
// MIG user guide (supported profiles per product), smallest first.
var migProfiles = map[string][]MIGProfile{
	"A100-40GB": {{"1g.5gb", 5, 1}, {"1g.10gb", 10, 1}, {"2g.10gb", 10, 2}, {"3g.20gb", 20, 3}, {"4g.20gb", 20, 4}, {"7g.40gb", 40, 7}},
	"A100-80GB": {{"1g.10gb", 10, 1}, {"1g.20gb", 20, 1}, {"2g.20gb", 20, 2}, {"3g.40gb", 40, 3}, {"4g.40gb", 40, 4}, {"7g.80gb", 80, 7}},
	"H100-SXM":  {{"1g.10gb", 10, 1}, {"1g.20gb", 20, 1}, {"2g.20gb", 20, 2}, {"3g.40gb", 40, 3}, {"4g.40gb", 40, 4}, {"7g.80gb", 80, 7}},
	"H100-PCIe": {{"1g.10gb", 10, 1}, {"1g.20gb", 20, 1}, {"2g.20gb", 20, 2}, {"3g.40gb", 40, 3}, {"4g.40gb", 40, 4}, {"7g.80gb", 80, 7}},
	"H100-NVL":  {{"1g.12gb", 12, 1}, {"1g.24gb", 24, 1}, {"2g.24gb", 24, 2}, {"3g.47gb", 47, 3}, {"4g.47gb", 47, 4}, {"7g.94gb", 94, 7}},
	"H200":      {{"1g.18gb", 18, 1}, {"1g.35gb", 35, 1}, {"2g.35gb", 35, 2}, {"3g.71gb", 71, 3}, {"4g.71gb", 71, 4}, {"7g.141gb", 141, 7}},
}

// MIGFor returns the smallest MIG slice of a card that holds needGB, and
// whether the card has one smaller than the whole card.
func MIGFor(model string, needGB float64) (MIGProfile, bool) {
	for _, p := range migProfiles[model] {
		if p.GB >= needGB && p.Sevenths < 7 {
			return p, true
		}
	}
	return MIGProfile{}, false
}

// OversizedShare is the share of a card's memory below which the work is
// said to be on too big a card: under a quarter used, three quarters paid
// for nothing.
const OversizedShare = 0.25

// RightSizing says that the work needs far less than its card, and what
// would do: a MIG slice of the same card, or a smaller card with its
// monthly saving.
type RightSizing struct {
	Card    string  `json:"card"`
	CardGB  float64 `json:"card_gb"`
	NeedGB  float64 `json:"need_gb"`
	Current *Candidate
	// MIG is the smallest slice of the card that holds the work.
	MIG *MIGProfile `json:"mig,omitempty"`
	// Smaller is the cheapest ranked offer whose card is smaller than the
	// current one; Saving is what it saves a month.
	Smaller *Candidate      `json:"-"`
	Saving  gpuwarden.Cents `json:"saving"`
}

// Message says it in one sentence for people.
func (rs RightSizing) Message(cur gpuwarden.Currency) string {
	var b strings.Builder
	fmt.Fprintf(&b, "the work needs %s GB of the %s's %s GB (%.0f %%)", fmtGB(rs.NeedGB), rs.Card, fmtGB(rs.CardGB), 100*rs.NeedGB/rs.CardGB)
	var ways []string
	if rs.MIG != nil {
		ways = append(ways, fmt.Sprintf("a MIG slice %s (%d/7 of the card) holds it", rs.MIG.Name, rs.MIG.Sevenths))
	}
	if rs.Smaller != nil {
		o := rs.Smaller.Offer
		switch {
		case rs.Current != nil && rs.Current.Speed != nil && rs.Current.Speed.Basis != BasisWorkHours &&
			rs.Current.PerResult != nil && rs.Smaller.PerResult != nil:
			// With an amount of work the smaller card is compared by what a
			// result costs on it, its speed counted, not by its memory.
			unit := rs.Smaller.PerResult.Unit
			ways = append(ways, fmt.Sprintf("%s %s %s (%s) does it for %s against %s, %s less to finish",
				o.Provider, o.Region, o.Instance, o.GPU, cur.FormatRate(cents(rs.Smaller.PerResult.Amount), unit),
				cur.FormatRate(cents(rs.Current.PerResult.Amount), unit), cur.Format(rs.Saving)))
		case rs.Current != nil:
			ways = append(ways, fmt.Sprintf("%s %s %s (%s) does it for %s a month less", o.Provider, o.Region, o.Instance, o.GPU, cur.Format(rs.Saving)))
		default:
			// No priced month of the card to compare with: no saving to claim.
			ways = append(ways, fmt.Sprintf("%s %s %s (%s) does it", o.Provider, o.Region, o.Instance, o.GPU))
		}
	}
	if len(ways) > 0 {
		b.WriteString(": " + strings.Join(ways, "; "))
	}
	return b.String()
}

// Current is the candidate the work runs on: the plan's box when it names
// a priced offer (over the budget or not), else plan A; nil when neither.
func (r *Report) Current() *Candidate {
	b := r.plan.Box
	if b == nil || b.Instance == "" {
		return r.Best
	}
	for j, p := range r.rows { // the box may be over the budget: look past the ranking
		o := r.cat.Offers.At(int(p.offer))
		if o.Instance != b.Instance || !strings.EqualFold(o.Provider, b.Provider) ||
			(b.Region != "" && !strings.EqualFold(o.Region, b.Region)) || p.billing.String() != billingOf(b) {
			continue
		}
		if k := slices.Index(r.ranked, int32(j)); k >= 0 {
			return r.RankedAt(k)
		}
		c := r.candidateAt(int32(j))
		return &c
	}
	return nil
}

// RightSize checks the card the work runs on (see Current; a box the
// ranking could not price is found in the catalog) against the sizing; it
// returns nil when the card is not oversized or the sizing is unknown.
func (r *Report) RightSize() *RightSizing {
	if cur := r.Current(); cur != nil {
		return rightSizing(r, cur.Offer, cur)
	}
	if b := r.plan.Box; b != nil && b.Instance != "" {
		if o, err := findOffer(r.cat, b); err == nil {
			return rightSizing(r, o, nil)
		}
	}
	return nil
}

// RightSizeTarget checks the card a launch target rents, found in the
// catalog by its provider, region and offer, as RightSize checks the box's:
// nil when it fits, the sizing is unknown or the catalog lacks the offer.
func (r *Report) RightSizeTarget(t gpuwarden.Target) *RightSizing {
	if t.Offer == "" {
		return nil
	}
	o, err := findOffer(r.cat, &gpuwarden.Box{Provider: t.Provider, Region: t.Region, Instance: t.Offer})
	if err != nil {
		return nil
	}
	return rightSizing(r, o, nil)
}

func rightSizing(r *Report, o *gpuwarden.Offer, cur *Candidate) *RightSizing {
	need := r.Sizing.NeedGB
	if need <= 0 || o.VRAMGBPerGPU <= 0 || need > OversizedShare*o.VRAMGBPerGPU {
		return nil
	}
	rs := &RightSizing{Card: o.GPU, CardGB: o.VRAMGBPerGPU, NeedGB: need, Current: cur}
	if p, ok := MIGFor(o.GPU, need); ok {
		rs.MIG = &p
	}
	for i, j := range r.ranked { // cheapest first; a candidate is made only for the one found
		if c := r.cat.Offers.At(int(r.rows[j].offer)); c.VRAMGBPerGPU < o.VRAMGBPerGPU && c.VRAMGBPerGPU*c.GPUCount >= need {
			c := r.RankedAt(i)
			if cur == nil || c.Total < cur.Total {
				rs.Smaller = c
				if cur != nil {
					rs.Saving = cur.Total - c.Total
				}
			}
			break
		}
	}
	return rs
}

// cents rounds a per-result cost to the cent for a sentence.
func cents(m gpuwarden.Micros) gpuwarden.Micros { return gpuwarden.CentsOf(m).Micros() }
