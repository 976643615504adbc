package catalog

import (
	"bytes"
	"encoding/csv"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// azurePage is one answer of the Azure Retail Prices API.
type azurePage struct {
	BillingCurrency string      `json:"BillingCurrency"`
	Items           []azureItem `json:"Items"`
	NextPageLink    string      `json:"NextPageLink"`
	Count           int         `json:"Count"`
}

// azureItem is one meter of the answer; only the fields read are kept.
type azureItem struct {
	CurrencyCode       string  `json:"currencyCode"`
	RetailPrice        float64 `json:"retailPrice"`
	UnitPrice          float64 `json:"unitPrice"`
	ArmRegionName      string  `json:"armRegionName"`
	ArmSkuName         string  `json:"armSkuName"`
	SkuName            string  `json:"skuName"`
	ProductName        string  `json:"productName"`
	MeterName          string  `json:"meterName"`
	ServiceName        string  `json:"serviceName"`
	Type               string  `json:"type"`
	PriceType          string  `json:"priceType"`
	UnitOfMeasure      string  `json:"unitOfMeasure"`
	EffectiveStartDate string  `json:"effectiveStartDate"`
}

// azureSize is what an Azure GPU VM size carries (Azure's N-series docs).
type azureSize struct {
	gpu   string
	count float64
	vram  float64
	vcpus int
	ram   float64
}

// azureGPUSizes are the NVIDIA GPU VM sizes rented for ML work. Partial
// sizes (NV*ads_A10_v5 below a whole card) are left out: a slice of a card
// is not what plan sizes VRAM for.
var azureGPUSizes = map[string]azureSize{
	"Standard_NC4as_T4_v3":       {"T4", 1, 16, 4, 28},
	"Standard_NC8as_T4_v3":       {"T4", 1, 16, 8, 56},
	"Standard_NC16as_T4_v3":      {"T4", 1, 16, 16, 110},
	"Standard_NC64as_T4_v3":      {"T4", 4, 16, 64, 440},
	"Standard_NC6s_v3":           {"V100", 1, 16, 6, 112},
	"Standard_NC12s_v3":          {"V100", 2, 16, 12, 224},
	"Standard_NC24s_v3":          {"V100", 4, 16, 24, 448},
	"Standard_ND40rs_v2":         {"V100-32GB", 8, 32, 40, 672},
	"Standard_NV36ads_A10_v5":    {"A10", 1, 24, 36, 440},
	"Standard_NV72ads_A10_v5":    {"A10", 2, 24, 72, 880},
	"Standard_NC24ads_A100_v4":   {"A100-80GB-PCIe", 1, 80, 24, 220},
	"Standard_NC48ads_A100_v4":   {"A100-80GB-PCIe", 2, 80, 48, 440},
	"Standard_NC96ads_A100_v4":   {"A100-80GB-PCIe", 4, 80, 96, 880},
	"Standard_ND96asr_v4":        {"A100-40GB", 8, 40, 96, 900},
	"Standard_ND96amsr_A100_v4":  {"A100-80GB-SXM", 8, 80, 96, 1900},
	"Standard_NC40ads_H100_v5":   {"H100-NVL", 1, 94, 40, 320},
	"Standard_NC80adis_H100_v5":  {"H100-NVL", 2, 94, 80, 640},
	"Standard_ND96isr_H100_v5":   {"H100-SXM", 8, 80, 96, 1900},
	"Standard_ND96isr_H200_v5":   {"H200", 8, 141, 96, 1850},
	"Standard_NC8ads_A10_v4":     {"A10", 1, 24, 8, 110},
	"Standard_NC16ads_A10_v4":    {"A10", 1, 24, 16, 220},
	"Standard_NC32ads_A10_v4":    {"A10", 2, 24, 32, 440},
	"Standard_NC4as_L4_v5":       {"L4", 1, 24, 4, 32},
	"Standard_ND96isr_MI300X_v5": {}, // AMD: listed so that it is skipped on purpose
}

// AzureFilter is the $filter the update sends: Linux and Windows meters
// of the GPU sizes, consumption prices only.
func AzureFilter() string {
	names := make([]string, 0, len(azureGPUSizes))
	for n, s := range azureGPUSizes {
		if s.gpu != "" {
			names = append(names, "armSkuName eq '"+n+"'")
		}
	}
	sort.Strings(names)
	return "serviceName eq 'Virtual Machines' and priceType eq 'Consumption' and (" + strings.Join(names, " or ") + ")"
}

// azureCSV turns Retail Prices items into a gpuwarden prices.csv: one row
// per region and size, with the Linux pay-as-you-go price as on-demand and
// the Linux Spot meter as spot. Windows meters (they include the licence)
// and Low Priority meters (retired) are skipped; so are prices not per
// hour. It returns the file and the number of offers in it.
func azureCSV(items []azureItem, now time.Time) ([]byte, int) {
	type key struct{ region, size string }
	type row struct {
		currency       string
		onDemand, spot float64
		asOf           string
	}
	rowsBy := map[key]*row{}
	for _, it := range items {
		size, ok := azureGPUSizes[it.ArmSkuName]
		if !ok || size.gpu == "" || it.ArmRegionName == "" {
			continue
		}
		if !strings.EqualFold(it.Type, "Consumption") || it.UnitOfMeasure != "1 Hour" ||
			strings.Contains(it.ProductName, "Windows") || strings.Contains(it.SkuName, "Low Priority") ||
			strings.Contains(it.MeterName, "Low Priority") {
			continue
		}
		price := it.RetailPrice
		if price <= 0 {
			price = it.UnitPrice
		}
		// What the file cannot hold is not stored: a price under a micro
		// or past a million an hour, a currency or region that is not a
		// plain code.
		if m := gpuwarden.MicrosFromFloat(price); m <= 0 || price >= 1e6 ||
			!isCurrencyCode(it.CurrencyCode) || !isARMName(it.ArmRegionName) {
			continue
		}
		k := key{it.ArmRegionName, it.ArmSkuName}
		r := rowsBy[k]
		if r == nil {
			r = &row{currency: it.CurrencyCode}
			rowsBy[k] = r
		}
		if r.currency != it.CurrencyCode {
			continue // one currency per row; the API answers in one anyway
		}
		spot := strings.Contains(it.SkuName, "Spot") || strings.Contains(it.MeterName, "Spot")
		if spot {
			if r.spot == 0 || price < r.spot {
				r.spot = price
			}
		} else if r.onDemand == 0 || price < r.onDemand {
			r.onDemand = price
		}
		if d := dateOf(it.EffectiveStartDate); d > r.asOf {
			r.asOf = d
		}
	}
	keys := make([]key, 0, len(rowsBy))
	for k := range rowsBy {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].region != keys[j].region {
			return keys[i].region < keys[j].region
		}
		return keys[i].size < keys[j].size
	})
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	_ = w.Write([]string{"provider", "region", "country", "instance", "gpu", "gpu_count", "vram_gb_per_gpu",
		"vcpus", "ram_gb", "currency", "on_demand_hourly", "spot_hourly", "as_of", "source"})
	n := 0
	fetched := now.UTC().Format("2006-01-02")
	for _, k := range keys {
		r := rowsBy[k]
		if r.onDemand == 0 && r.spot == 0 {
			continue
		}
		s := azureGPUSizes[k.size]
		// The as_of is the day the prices were read: effectiveStartDate
		// says since when a price holds, not that anybody checked it since.
		_ = w.Write([]string{"azure", k.region, CountryOf("azure", k.region), k.size, s.gpu,
			strconv.FormatFloat(s.count, 'f', -1, 64), strconv.FormatFloat(s.vram, 'f', -1, 64),
			strconv.Itoa(s.vcpus), strconv.FormatFloat(s.ram, 'f', -1, 64), r.currency,
			price6(r.onDemand), price6(r.spot), fetched,
			"Azure Retail Prices API (effective " + orUnknown(r.asOf) + ")"})
		n++
	}
	w.Flush()
	return b.Bytes(), n
}

// price6 writes a price with at most six decimals, as prices.csv wants;
// 0 (not offered) is an empty cell.
func price6(v float64) string {
	if v == 0 {
		return ""
	}
	return gpuwarden.MicrosFromFloat(v).String()
}

func dateOf(ts string) string {
	if len(ts) >= 10 {
		return ts[:10]
	}
	return ""
}

func orUnknown(s string) string {
	if s == "" {
		return "date unknown"
	}
	return s
}

// isARMName reports an Azure region name: lower-case letters and digits.
func isARMName(s string) bool {
	if s == "" || len(s) > 40 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if (s[i] < 'a' || s[i] > 'z') && (s[i] < '0' || s[i] > '9') {
			return false
		}
	}
	return true
}
