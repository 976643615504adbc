package plan

import (
	"fmt"
	"strings"

	"github.com/gpuwarden/gpuwarden"
)

// BoxRate is what the plan's running box costs per hour in the budget's
// currency: its rate (stated, or found in the catalog by provider, region,
// instance and billing) plus the month's storage spread over the month's
// hours. The string says where the figure came from.
func BoxRate(p *gpuwarden.Plan, cat *gpuwarden.Catalog) (gpuwarden.Micros, string, error) {
	if p.Box == nil {
		return 0, "", gpuwarden.Errorf(gpuwarden.EInvalid, "the plan has no box: the budget needs a rate").
			WithHint("add box: {hourly_rate: …} or box: {provider: …, region: …, instance: …} to the plan, or pass --rate")
	}
	conv := fx{to: p.Budget.Currency, rates: p.CurrencyRates}
	b := p.Box
	rate, why := b.HourlyRate, "box.hourly_rate"
	var provider string
	if rate == 0 {
		o, err := findOffer(cat, b)
		if err != nil {
			return 0, "", err
		}
		hourly := o.OnDemandHourly
		if b.Billing == "spot" {
			hourly = o.SpotHourly
		}
		if hourly == 0 {
			return 0, "", gpuwarden.Errorf(gpuwarden.EInvalid, "%s %s %s has no %s price in the catalog", o.Provider, o.Region, o.Instance, billingOf(b))
		}
		var ok bool
		if rate, ok = conv.convert(hourly, o.Currency); !ok {
			return 0, "", gpuwarden.Errorf(gpuwarden.EInvalid, "no exchange rate from %s to %s", o.Currency, p.Budget.Currency).
				WithHint("add currency_rates: {%s: …} to the plan", o.Currency)
		}
		provider = o.Provider
		why = fmt.Sprintf("%s %s %s %s at %s", o.Provider, o.Region, o.Instance, billingOf(b), p.Budget.Currency.FormatRate(rate, "h"))
	}
	if gb := p.Data.StorageGB; gb > 0 && provider != "" && p.HoursPerMonth > 0 {
		if sr, ok := storageRate(cat.Storage, provider, p.Data.StorageKind); ok {
			if perGB, ok := conv.convert(sr.PerGBMonth, sr.Currency); ok {
				monthly := perGB.Mul(gpuwarden.MicrosFromFloat(gb))
				rate += gpuwarden.MicrosFromFloat(monthly.Float() / p.HoursPerMonth)
				why += fmt.Sprintf(" + %g GB of %s storage", gb, sr.Kind)
			}
		}
	}
	return rate, why, nil
}

func billingOf(b *gpuwarden.Box) string {
	if b.Billing == "" {
		return "on-demand"
	}
	return b.Billing
}

func findOffer(cat *gpuwarden.Catalog, b *gpuwarden.Box) (*gpuwarden.Offer, error) {
	var found *gpuwarden.Offer
	for _, o := range cat.Offers.All() {
		if strings.EqualFold(o.Provider, b.Provider) && strings.EqualFold(o.Instance, b.Instance) &&
			(b.Region == "" || strings.EqualFold(o.Region, b.Region)) {
			if found != nil && found.Region != o.Region {
				return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "box %s %s is offered in several regions", b.Provider, b.Instance).
					WithHint("add box.region to the plan")
			}
			found = &o
		}
	}
	if found == nil {
		return nil, gpuwarden.Errorf(gpuwarden.ENotFound, "box %s %s %s is not in the catalog", b.Provider, b.Region, b.Instance).
			WithHint("check gpuwarden offers --provider %s, or give box.hourly_rate", b.Provider)
	}
	return found, nil
}
