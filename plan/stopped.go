package plan

import (
	"fmt"

	"github.com/gpuwarden/gpuwarden"
)

// StoppedHourly is what the plan's box bills an hour once a stop ended its
// compute bill: the plan's data.storage_gb at the provider's storage rate
// from the catalog, spread over the month's hours (the disks and volumes
// that gpuwarden.StopSemantics says bill on). ok is false when the plan
// keeps no storage, names no provider, or the catalog has no rate for it:
// the agent then reports no figure rather than a guessed one.
func StoppedHourly(p *gpuwarden.Plan, cat *gpuwarden.Catalog) (rate gpuwarden.Micros, why string, ok bool) {
	if p == nil || p.Box == nil || cat == nil || p.Data.StorageGB <= 0 || p.HoursPerMonth <= 0 {
		return 0, "", false
	}
	provider := p.Box.Provider
	if provider == "" {
		return 0, "", false
	}
	sr, found := storageRate(cat.Storage, provider, p.Data.StorageKind)
	if !found {
		return 0, "", false
	}
	conv := fx{to: p.Budget.Currency, rates: p.CurrencyRates}
	perGB, converted := conv.convert(sr.PerGBMonth, sr.Currency)
	if !converted {
		return 0, "", false
	}
	monthly := perGB.Mul(gpuwarden.MicrosFromFloat(p.Data.StorageGB))
	rate = gpuwarden.MicrosFromFloat(monthly.Float() / p.HoursPerMonth)
	return rate, fmt.Sprintf("%g GB of %s storage at %s", p.Data.StorageGB, sr.Kind, p.Budget.Currency.FormatRate(perGB, "GB-month")), true
}
