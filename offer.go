package gpuwarden

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Offer is one rentable box from a price catalog: a provider's instance type in
// one region with its prices. Zero prices mean "not offered" (no spot market,
// no monthly plan), never "free".
type Offer struct {
	Provider string `json:"provider"`
	Region   string `json:"region"`
	// Country is the ISO 3166 alpha-2 code of the region, "" when unknown.
	Country  string `json:"country,omitempty"`
	Instance string `json:"instance"`
	// GPU is the canonical model name from the GPU table (H100-SXM, A100-80GB).
	GPU string `json:"gpu"`
	// GPUCount may be fractional for shared cards (0.5 of an A10).
	GPUCount       float64  `json:"gpu_count"`
	VRAMGBPerGPU   float64  `json:"vram_gb_per_gpu"`
	VCPUs          int      `json:"vcpus,omitempty"`
	RAMGB          float64  `json:"ram_gb,omitempty"`
	Currency       Currency `json:"currency"`
	OnDemandHourly Micros   `json:"on_demand_hourly,omitempty"`
	SpotHourly     Micros   `json:"spot_hourly,omitempty"`
	Monthly        Micros   `json:"monthly,omitempty"`
	// Zones is how many availability zones of the region list the offer,
	// folded into this one row; 0 when the catalog names no zones.
	Zones int `json:"zones,omitempty"`
	// AsOf is when the price was read: "2026-11" or "2026-11-09".
	AsOf string `json:"as_of"`
	// Source says where the price came from, so any figure can be checked.
	Source string `json:"source"`
	// Origin is the file and line the row was read from.
	Origin Origin `json:"origin,omitzero"`
}

// Origin is the file and line an offer was read from, written "aws.csv:12".
// It is the two parts rather than that string: writing a million of them
// was a fifth of reading a big price file.
type Origin struct {
	File string
	Line int
}

func (o Origin) String() string {
	if o.Line == 0 {
		return o.File
	}
	return o.File + ":" + strconv.Itoa(o.Line)
}

// IsZero is true for an offer read from no file.
func (o Origin) IsZero() bool { return o.File == "" && o.Line == 0 }

// MarshalText writes the origin as String does, so JSON has "aws.csv:12".
func (o Origin) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// VRAMGB is the box's total GPU memory.
// It is rounded to 0.01 GB so that 7 × 79.65 prints as 557.55, not with
// the float tail of the product.
func (o Offer) VRAMGB() float64 { return math.Round(o.GPUCount*o.VRAMGBPerGPU*100) / 100 }

// Where names the offer's location for people: "aws us-east-1 (US)".
func (o Offer) Where() string {
	if o.Country == "" {
		return o.Provider + " " + o.Region
	}
	return fmt.Sprintf("%s %s (%s)", o.Provider, o.Region, o.Country)
}

// ParseAsOf reads an as_of date written as YYYY-MM or YYYY-MM-DD; a month
// counts from its first day, the oldest reading it can mean.
func ParseAsOf(s string) (time.Time, error) {
	// Pick the layout by length: trying the day layout on a month first
	// built an error per row, a tenth of reading a big price file.
	layout := ""
	switch len(s) {
	case len("2006-01-02"):
		layout = "2006-01-02"
	case len("2006-01"):
		layout = "2006-01"
	}
	if layout != "" {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("as_of %q is not YYYY-MM or YYYY-MM-DD", s)
}

// EgressScope is where bytes go relative to where they are.
type EgressScope string

// The egress scopes providers price separately.
const (
	EgressInternet    EgressScope = "internet"
	EgressInterRegion EgressScope = "inter-region"
	EgressIntraRegion EgressScope = "intra-region"
)

// EgressScopes lists the scopes in the order reports show them.
var EgressScopes = []EgressScope{EgressInternet, EgressInterRegion, EgressIntraRegion}

// EgressTier prices one band of a month's egress volume for one provider.
type EgressTier struct {
	Provider string      `json:"provider"`
	Scope    EgressScope `json:"scope"`
	// FromGB and ToGB bound the band in billing units; ToGB 0 means no upper bound.
	FromGB   Micros   `json:"from_gb"`
	ToGB     Micros   `json:"to_gb,omitempty"`
	Currency Currency `json:"currency"`
	PerGB    Micros   `json:"per_gb"`
	// Unit is how the provider counts a "GB": "GB" (10^9 bytes) or "GiB" (2^30).
	Unit   string `json:"unit"`
	Source string `json:"source"`
}

// StorageRate is the monthly price of one GB of one kind of storage.
type StorageRate struct {
	Provider string `json:"provider"`
	// Kind is "object", "block" or "volume" followed by the product in brackets.
	Kind       string   `json:"kind"`
	Currency   Currency `json:"currency"`
	PerGBMonth Micros   `json:"per_gb_month"`
	Note       string   `json:"note,omitempty"`
}

// GPUSpec is a GPU model's datasheet: what sizing fits against and what
// burn-in expects.
type GPUSpec struct {
	Model         string  `json:"model"`
	VRAMGB        float64 `json:"vram_gb"`
	MemBWTBs      float64 `json:"mem_bw_tbs"`
	FP32TFLOPs    float64 `json:"fp32_tflops"`
	BF16TFLOPs    float64 `json:"bf16_dense_tflops"`
	TDPWatts      float64 `json:"tdp_w"`
	MeasuredNotes string  `json:"measured,omitempty"`
}

// Catalog is everything the planner prices with: offers, egress tiers,
// storage rates and the GPU table, plus warnings met while reading them.
type Catalog struct {
	Offers   Offers
	Egress   []EgressTier
	Storage  []StorageRate
	GPUs     []GPUSpec
	Warnings []string
	// Sources are the downloaded catalogs the offers come from, so that a
	// report can say how old its prices are.
	Sources []PriceSource
}

// PriceSource is one downloaded price catalog (`gpuwarden catalog update`).
type PriceSource struct {
	Provider string `json:"provider"`
	URL      string `json:"url"`
	// FetchedAt is when the content in use was downloaded; CheckedAt the
	// last time its server confirmed it current.
	FetchedAt time.Time `json:"fetched_at"`
	CheckedAt time.Time `json:"checked_at"`
	Offers    int       `json:"offers"`
}
