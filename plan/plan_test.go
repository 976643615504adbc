package plan

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/gpuwarden/gpuwarden"
)

func mustMicros(t testing.TB, s string) gpuwarden.Micros {
	t.Helper()
	m, err := gpuwarden.ParseMicros(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSize(t *testing.T) {
	tests := []struct {
		name   string
		w      gpuwarden.Workload
		want   float64
		oneGPU bool
	}{
		{"qlora 7B", gpuwarden.Workload{Kind: gpuwarden.KindFinetuneQLoRA, ParamsB: 7, Precision: gpuwarden.NF4}, 3.85 + 0.56 + 6, false},
		{"lora 7B bf16", gpuwarden.Workload{Kind: gpuwarden.KindFinetuneLoRA, ParamsB: 7, Precision: gpuwarden.BF16, AdapterPercent: 1}, 14 + 1.12 + 6, false},
		{"llama 3.1 8B with 8K KV", gpuwarden.Workload{Kind: gpuwarden.KindInference, ParamsB: 8, Precision: gpuwarden.BF16,
			Layers: 32, KVHeads: 8, HeadDim: 128, Context: 8192, Batch: 1}, 19.2 + 1.07, false},
		{"13B int4 no KV", gpuwarden.Workload{Kind: gpuwarden.KindInference, ParamsB: 13, Precision: gpuwarden.INT4}, 7.8, false},
		{"full 7B adamw", gpuwarden.Workload{Kind: gpuwarden.KindFinetuneFull, ParamsB: 7, Precision: gpuwarden.BF16, Optimizer: "adamw"}, 112 + 6, false},
		{"pretrain 1B 8-bit adam batch 4", gpuwarden.Workload{Kind: gpuwarden.KindPretrain, ParamsB: 1, Precision: gpuwarden.BF16,
			Optimizer: "adamw-8bit", Batch: 4}, 10 + 24, false},
		{"notebook default", gpuwarden.Workload{Kind: gpuwarden.KindNotebook}, 16, true},
		{"render stated", gpuwarden.Workload{Kind: gpuwarden.KindRender, VRAMGB: 40}, 40, true},
		{"activations given", gpuwarden.Workload{Kind: gpuwarden.KindFinetuneQLoRA, ParamsB: 65, ActivationsGB: 2}, 35.75 + 5.2 + 2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Size(tt.w)
			if err != nil {
				t.Fatal(err)
			}
			if got.NeedGB != round2(tt.want) || got.OneGPU != tt.oneGPU {
				t.Errorf("need = %v GB one-gpu %v, want %v GB %v; lines %+v", got.NeedGB, got.OneGPU, round2(tt.want), tt.oneGPU, got.Lines)
			}
			var sum float64
			for _, l := range got.Lines {
				sum = round2(sum + l.GB)
			}
			if sum != got.NeedGB {
				t.Errorf("lines add up to %v, need says %v", sum, got.NeedGB)
			}
		})
	}
}

func TestSizeUnknownPrecision(t *testing.T) {
	_, err := Size(gpuwarden.Workload{Kind: gpuwarden.KindInference, ParamsB: 7, Precision: "int3"})
	if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
		t.Fatalf("err = %v, want invalid", err)
	}
}

func TestSmallestCard(t *testing.T) {
	gpus := []gpuwarden.GPUSpec{{Model: "T4", VRAMGB: 16}, {Model: "L4", VRAMGB: 24}, {Model: "A100-80GB", VRAMGB: 80},
		{Model: "H200", VRAMGB: 141}, {Model: "L40S", VRAMGB: 48}}
	tests := []struct {
		need   float64
		oneGPU bool
		want   string
	}{
		{10.41, false, "1× T4 (16 GB)"},
		{20.27, false, "1× L4 (24 GB)"},
		{118, false, "1× H200 (141 GB)"},
		{211, false, "2× H200 (282 GB)"},
		{300, true, ""},
		{90, false, "1× H200 (141 GB)"},
	}
	for _, tt := range tests {
		c, ok := Sizing{NeedGB: tt.need, OneGPU: tt.oneGPU}.SmallestCard(gpus)
		got := ""
		if ok {
			got = c.String()
		}
		if got != tt.want {
			t.Errorf("need %v: got %q, want %q", tt.need, got, tt.want)
		}
	}
}

// notebookPlan is the case: an A100 at €3.50/h left on for a 720 h
// month with 40 h of real work and nobody turning it off.
func notebookPlan() *gpuwarden.Plan {
	return &gpuwarden.Plan{
		Workload:      gpuwarden.Workload{Kind: gpuwarden.KindNotebook},
		HoursPerMonth: 720, WorkHours: 40,
		OnHours:       gpuwarden.OnHours{SessionsPerMonth: 20},
		Data:          gpuwarden.Data{StorageKind: "block"},
		Interruptions: gpuwarden.Interruptions{Tolerance: gpuwarden.TolerateNone, SpotInterruptionsPerDay: 0.5, RestartMinutes: 10},
		Budget:        gpuwarden.Budget{MonthlyLimit: 3000 * gpuwarden.MicrosPerUnit, Currency: "EUR"},
	}
}

func TestNotebookLeftOn(t *testing.T) {
	p := notebookPlan()
	cat := &gpuwarden.Catalog{Offers: gpuwarden.OffersOf(gpuwarden.Offer{Provider: "hostco", Region: "fra1", Country: "DE", Instance: "a100.1x",
		GPU: "A100-80GB", GPUCount: 1, VRAMGBPerGPU: 80, Currency: "EUR", OnDemandHourly: mustMicros(t, "3.50")})}
	r, err := Rank(p, cat)
	if err != nil {
		t.Fatal(err)
	}
	if r.RankedCount() != 1 {
		t.Fatalf("ranked %d, want 1", r.RankedCount())
	}
	c := r.RankedAt(0)
	if got, want := c.Total.Decimal(), "2520.00"; got != want {
		t.Errorf("total = %s, want %s", got, want)
	}
	if got := lineAmount(c.Lines(), ItemIdle).Decimal(); got != "2380.00" {
		t.Errorf("idle = %s, want 2380.00", got)
	}
	if r.IdleSaving == nil || r.IdleSaving.WithIdleHours != 10 || r.IdleSaving.Saves.Decimal() != "2345.00" {
		t.Errorf("idle saving = %+v, want 10 h left and €2,345.00 saved", r.IdleSaving)
	}
	if c.Role != PlanA || r.PlanB != nil {
		t.Errorf("role %q plan B %v, want best and none", c.Role, r.PlanB)
	}
	if !hasFinding(r, "no-plan-b") || !hasFinding(r, "idle") {
		t.Errorf("findings = %+v", r.Findings)
	}
}

func hasFinding(r *Report, kind string) bool {
	for _, f := range r.Findings {
		if f.Kind == kind {
			return true
		}
	}
	return false
}

func testCatalog(t testing.TB) *gpuwarden.Catalog {
	m := func(s string) gpuwarden.Micros { return mustMicros(t, s) }
	return &gpuwarden.Catalog{
		Offers: gpuwarden.OffersOf([]gpuwarden.Offer{
			{Provider: "aws", Region: "us-east-1", Country: "US", Instance: "g6.xlarge", GPU: "L4", GPUCount: 1, VRAMGBPerGPU: 24,
				Currency: "USD", OnDemandHourly: m("0.8048"), SpotHourly: m("0.3490")},
			{Provider: "aws", Region: "eu-central-1", Country: "DE", Instance: "g6.xlarge", GPU: "L4", GPUCount: 1, VRAMGBPerGPU: 24,
				Currency: "USD", OnDemandHourly: m("0.9"), SpotHourly: m("0.40")},
			{Provider: "runpod", Region: "US-TX-1", Country: "US", Instance: "1x_A100", GPU: "A100-80GB", GPUCount: 1, VRAMGBPerGPU: 80,
				Currency: "USD", OnDemandHourly: m("1.39")},
			{Provider: "gcp", Region: "asia-east1", Country: "TW", Instance: "a2-highgpu-1g", GPU: "A100-40GB", GPUCount: 1, VRAMGBPerGPU: 40,
				Currency: "USD", OnDemandHourly: m("3.790142"), SpotHourly: m("0.7563"), Monthly: m("2766.80")},
			{Provider: "aws", Region: "us-east-1", Country: "US", Instance: "g4dn.xlarge", GPU: "T4", GPUCount: 1, VRAMGBPerGPU: 16,
				Currency: "USD", OnDemandHourly: m("0.526")},
			{Provider: "hostco", Region: "fra1", Country: "DE", Instance: "a100.1x", GPU: "A100-80GB", GPUCount: 1, VRAMGBPerGPU: 80,
				Currency: "EUR", OnDemandHourly: m("3.50")},
		}...),
		Egress: []gpuwarden.EgressTier{
			{Provider: "aws", Scope: "internet", FromGB: 0, ToGB: m("10240"), Currency: "USD", PerGB: m("0.09"), Unit: "GiB"},
			{Provider: "aws", Scope: "internet", FromGB: m("10240"), ToGB: m("51200"), Currency: "USD", PerGB: m("0.085"), Unit: "GiB"},
			{Provider: "aws", Scope: "inter-region", Currency: "USD", PerGB: m("0.02"), Unit: "GiB"},
			{Provider: "runpod", Scope: "internet", Currency: "USD", PerGB: 0, Unit: "GB"},
		},
		Storage: []gpuwarden.StorageRate{
			{Provider: "aws", Kind: "object (S3 standard)", Currency: "USD", PerGBMonth: m("0.023")},
			{Provider: "aws", Kind: "block (EBS gp3)", Currency: "USD", PerGBMonth: m("0.08")},
			{Provider: "runpod", Kind: "pod volume (running)", Currency: "USD", PerGBMonth: m("0.10")},
		},
	}
}

func finetunePlan() *gpuwarden.Plan {
	return &gpuwarden.Plan{
		Workload:      gpuwarden.Workload{Kind: gpuwarden.KindFinetuneQLoRA, ParamsB: 7, Precision: gpuwarden.NF4},
		HoursPerMonth: 730, WorkHours: 120,
		OnHours: gpuwarden.OnHours{AutoShutdownIdleMinutes: 30, SessionsPerMonth: 15},
		Data: gpuwarden.Data{EgressGB: gpuwarden.EgressGB{Internet: 50, InterRegion: 10}, StorageGB: 200, StorageKind: "block",
			CheckpointIntervalMinutes: 30},
		Interruptions: gpuwarden.Interruptions{Tolerance: gpuwarden.TolerateCheckpointed, SpotInterruptionsPerDay: 0.5, RestartMinutes: 10},
		Budget:        gpuwarden.Budget{MonthlyLimit: 500 * gpuwarden.MicrosPerUnit, Currency: "USD"},
	}
}

func TestRankFinetune(t *testing.T) {
	r, err := Rank(finetunePlan(), testCatalog(t))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range r.Ranked() {
		got = append(got, fmt.Sprintf("%s %s %s %s %s", c.Role, c.Offer.Provider, c.Offer.Region, c.Billing, c.Total.Decimal()))
	}
	// aws us-east-1 spot L4 at $0.349/h: work 120 h = 41.88, idle 15 × 30 min = 7.5 h = 2.62
	// (2.6175 rounded half up); reclaims 0.5/day × 127.5 h / 24 = 2.656, each losing
	// 15 + 10 min → 1.11 h = 0.39; egress 50 GiB × 0.09 = 4.50 and 10 × 0.02 = 0.20;
	// storage 200 × 0.08 = 16.00. Total 65.59. gcp has no egress or storage rows here,
	// and no priced provider has offers in TW, so its lines are estimated from all
	// priced providers: internet median(4.50, 0) = 2.25, inter-region 0.20 (aws
	// alone), block storage median(16.00, 20.00) = 18.00; 20.45 in all, which puts
	// gcp's on-demand row ($503.70) over the $500 budget. runpod egress is free,
	// its volume 200 × 0.10, its unpriced inter-region egress the 0.20 of aws,
	// the one priced provider in the US.
	want := []string{
		"best aws us-east-1 spot 65.59",
		" aws eu-central-1 spot 72.14",
		" aws us-east-1 on-demand 87.77",
		"plan-b gcp asia-east1 spot 117.72",
		" aws us-east-1 on-demand 123.32",
		" aws eu-central-1 on-demand 135.45",
		" runpod US-TX-1 on-demand 197.43",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("ranking:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	best := r.RankedAt(0)
	if best.Hours.Rework != 1.11 {
		t.Errorf("rework hours = %v, want 1.11", best.Hours.Rework)
	}
	if best.SpotSavings == nil || best.SpotSavings.Decimal() != "57.73" {
		t.Errorf("spot savings = %v, want 57.73", best.SpotSavings)
	}
	reasons := map[Reason]int{}
	for e := range r.Exclusions() {
		reasons[e.Reason]++
	}
	// The EUR box has no exchange rate; of gcp's three modes the monthly and,
	// with its estimated data lines, the on-demand one are over the budget.
	if reasons[ReasonCurrency] != 1 || reasons[ReasonBudget] != 2 || reasons[ReasonTooSmall] != 0 {
		t.Errorf("exclusions = %v", reasons)
	}
	if r.SpotVerdict == nil || !strings.Contains(r.SpotVerdict.Message, "against $123.32 on-demand: spot saves $57.73/month after rework") {
		t.Errorf("spot verdict = %+v", r.SpotVerdict)
	}
}

func TestRankRules(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*gpuwarden.Plan)
		best  string
		count int
	}{
		{"no spot without tolerance", func(p *gpuwarden.Plan) { p.Interruptions.Tolerance = gpuwarden.TolerateNone }, "aws us-east-1 on-demand", 4},
		{"residency DE", func(p *gpuwarden.Plan) { p.Residency.Countries = []string{"DE"} }, "aws eu-central-1 spot", 2},
		{"region list", func(p *gpuwarden.Plan) { p.Residency.Regions = []string{"runpod:US-TX-1"} }, "runpod US-TX-1 on-demand", 1},
		{"exclude aws", func(p *gpuwarden.Plan) { p.Providers.Exclude = []string{"aws"} }, "gcp asia-east1 spot", 2},
		{"tiny budget", func(p *gpuwarden.Plan) { p.Budget.MonthlyLimit = 10 * gpuwarden.MicrosPerUnit }, "", 0},
		{"eur with rate", func(p *gpuwarden.Plan) {
			p.Budget.Currency = "EUR"
			p.Budget.MonthlyLimit = 0
			p.CurrencyRates = map[gpuwarden.Currency]gpuwarden.Micros{"USD": 920_000}
		}, "aws us-east-1 spot", 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := finetunePlan()
			tt.edit(p)
			r, err := Rank(p, testCatalog(t))
			if err != nil {
				t.Fatal(err)
			}
			best := ""
			if r.Best != nil {
				best = r.Best.Offer.Provider + " " + r.Best.Offer.Region + " " + r.Best.Billing.String()
			}
			if best != tt.best || r.RankedCount() != tt.count {
				t.Errorf("best %q of %d, want %q of %d", best, r.RankedCount(), tt.best, tt.count)
			}
		})
	}
}

// TestRankNothingFits: a plan no offer fits is a finding, not a panic in
// the sort of no rows.
func TestRankNothingFits(t *testing.T) {
	p := finetunePlan()
	p.Residency.Countries = []string{"JP"}
	r, err := Rank(p, testCatalog(t))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.ExcludedCount(), testCatalog(t).Offers.Len(); r.RankedCount() != 0 || got != want || !hasFinding(r, "nothing-fits") {
		t.Errorf("%d ranked, %d excluded, findings %+v; want 0, %d and nothing-fits", r.RankedCount(), got, r.Findings, want)
	}
}

func TestMonthlyBreakEven(t *testing.T) {
	p := finetunePlan()
	p.Budget.MonthlyLimit = 0
	p.Workload = gpuwarden.Workload{Kind: gpuwarden.KindInference, ParamsB: 13, Precision: gpuwarden.BF16} // 31.2 GB: A100 only
	r, err := Rank(p, testCatalog(t))
	if err != nil {
		t.Fatal(err)
	}
	monthly := 0
	for _, c := range r.Ranked() {
		if c.Billing == Monthly {
			monthly++
			if c.BreakEvenHours != 730 {
				t.Errorf("break-even = %v h, want 730 (2766.80 / 3.790142)", c.BreakEvenHours)
			}
			// gcp's egress and storage are estimated: 2766.80 + 20.45.
			if c.Total.Decimal() != "2787.25" {
				t.Errorf("monthly total %s, want 2787.25", c.Total.Decimal())
			}
		}
	}
	if monthly != 1 {
		t.Fatalf("%d monthly rows, want 1", monthly)
	}
	// A break-even at the month's 730 h is never passed: no finding.
	if hasFinding(r, "monthly") {
		t.Errorf("a monthly finding for a break-even at the month's hours: %+v", r.Findings)
	}
	// In a 744 h month the same break-even is reached, and said.
	p.HoursPerMonth = 744
	if r, err = Rank(p, testCatalog(t)); err != nil {
		t.Fatal(err)
	}
	if !hasFinding(r, "monthly") {
		t.Errorf("no monthly finding in a 744 h month: %+v", r.Findings)
	}
}

// TestPlanANotOnAnOmission: an offer whose storage and egress nobody
// priced must not beat a fully priced one just because the omitted lines
// count as zero (issue #20: $29.33* ranked above $44.44).
func TestPlanANotOnAnOmission(t *testing.T) {
	m := func(s string) gpuwarden.Micros { v, _ := gpuwarden.ParseMicros(s); return v }
	cat := &gpuwarden.Catalog{
		Offers: gpuwarden.OffersOf([]gpuwarden.Offer{
			{Provider: "hyperbolic", Region: "default", Country: "US", Instance: "1x-RTX4090", GPU: "RTX-4090", GPUCount: 1,
				VRAMGBPerGPU: 24, Currency: "USD", OnDemandHourly: m("0.23")},
			{Provider: "aws", Region: "us-east-1", Country: "US", Instance: "g6.xlarge", GPU: "L4", GPUCount: 1,
				VRAMGBPerGPU: 24, Currency: "USD", OnDemandHourly: m("0.19")},
			{Provider: "lambda", Region: "us-east-1", Country: "US", Instance: "gpu_1x_a10", GPU: "A10", GPUCount: 1,
				VRAMGBPerGPU: 24, Currency: "USD", OnDemandHourly: m("0.20")},
		}...),
		Storage: []gpuwarden.StorageRate{
			{Provider: "aws", Kind: "block (EBS gp3)", Currency: "USD", PerGBMonth: m("0.08")},
			{Provider: "lambda", Kind: "block (filesystem)", Currency: "USD", PerGBMonth: m("0.20")},
		},
	}
	p := finetunePlan()
	p.Interruptions.Tolerance = gpuwarden.TolerateNone
	p.Data = gpuwarden.Data{StorageGB: 200, StorageKind: "block"}
	r, err := Rank(p, cat)
	if err != nil {
		t.Fatal(err)
	}
	// hyperbolic: what ends its bill is unknown, so auto-shutdown saves
	// nothing there and the whole month bills (issue #27): 730 h × 0.23 =
	// 167.90 + storage estimated at the median of aws 16.00 and lambda
	// 40.00 = 28.00 → 195.90; aws: 24.23 + 16.00.
	if got := r.Best.Offer.Provider; got != "aws" {
		t.Errorf("plan A is %s at %s, want aws (fully priced, cheaper once storage is counted)", got, r.Best.Total.Decimal())
	}
	for _, c := range r.Ranked() {
		if c.Offer.Provider != "hyperbolic" {
			continue
		}
		lines := c.Lines()
		st := lines[len(lines)-1]
		if !st.Estimated || st.Unpriced || st.Amount.Decimal() != "28.00" || !strings.Contains(st.Basis, "median of 2 priced providers in US") {
			t.Errorf("hyperbolic storage line %+v, want estimated 28.00 from 2 US providers", st)
		}
		if c.Total.Decimal() != "195.90" {
			t.Errorf("hyperbolic total %s, want 195.90", c.Total.Decimal())
		}
	}
}

func TestPriceEgressTiers(t *testing.T) {
	tiers := testCatalog(t).Egress
	tests := []struct {
		gb, want string
		bands    int
	}{
		{"0", "0", 0},
		{"100", "9", 1},
		{"10240", "921.6", 1},
		{"20000", "1751.2", 2}, // 10240 × 0.09 + 9760 × 0.085
	}
	for _, tt := range tests {
		q, ok := PriceEgress(tiers, "aws", gpuwarden.EgressInternet, mustMicros(t, tt.gb))
		if !ok || q.Amount.String() != tt.want || len(q.Bands) != tt.bands || q.Unit != "GiB" {
			t.Errorf("%s GB: got %s in %d bands (%v), want %s in %d", tt.gb, q.Amount, len(q.Bands), ok, tt.want, tt.bands)
		}
	}
	if _, ok := PriceEgress(tiers, "vast", gpuwarden.EgressInternet, 1); ok {
		t.Error("vast has no tiers but was priced")
	}
}

// TestTotalsAddUp prices random plans against a random catalog and checks
// that every total is exactly the sum of its lines.
func TestTotalsAddUp(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cat := randomCatalog(t, rng, 2000)
	for i := 0; i < 50; i++ {
		p := finetunePlan()
		p.WorkHours = float64(1 + rng.IntN(700))
		p.Data.EgressGB.Internet = float64(rng.IntN(100000)) / 7
		p.Data.StorageGB = float64(rng.IntN(5000)) / 3
		p.Budget.MonthlyLimit = 0
		r, err := Rank(p, cat)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range r.Ranked() {
			if c.Total != sum(c.Lines()) {
				t.Fatalf("total %s != sum of lines %s", c.Total.Decimal(), sum(c.Lines()).Decimal())
			}
		}
	}
}

func randomCatalog(tb testing.TB, rng *rand.Rand, n int) *gpuwarden.Catalog {
	cat := testCatalog(tb)
	gpus := []struct {
		name string
		gb   float64
	}{{"T4", 16}, {"L4", 24}, {"A100-80GB", 80}, {"H100-SXM", 80}, {"H200", 141}}
	providers := []string{"aws", "gcp", "runpod", "lambda", "vast"}
	countries := []string{"US", "DE", "FR", "TW"}
	offers := make([]gpuwarden.Offer, 0, n)
	for i := 0; i < n; i++ {
		g := gpus[rng.IntN(len(gpus))]
		o := gpuwarden.Offer{Provider: providers[rng.IntN(len(providers))], Region: fmt.Sprintf("r%d", rng.IntN(20)),
			Country: countries[rng.IntN(len(countries))], Instance: fmt.Sprintf("i%d", i), GPU: g.name,
			GPUCount: float64(int(1) << rng.IntN(4)), VRAMGBPerGPU: g.gb, Currency: "USD",
			OnDemandHourly: gpuwarden.Micros(100_000 + rng.IntN(90_000_000))}
		if rng.IntN(2) == 0 {
			o.SpotHourly = o.OnDemandHourly / 3
		}
		if rng.IntN(10) == 0 {
			o.Monthly = o.OnDemandHourly * 600
		}
		offers = append(offers, o)
	}
	cat.Offers = gpuwarden.OffersOf(offers...)
	return cat
}

func BenchmarkRank100k(b *testing.B) {
	cat := randomCatalog(b, rand.New(rand.NewPCG(3, 4)), 100_000)
	p := finetunePlan()
	p.Budget.MonthlyLimit = 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Rank(p, cat); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRank100kAmount is BenchmarkRank100k with the work as an
// amount: every offer is timed by its card and count.
func BenchmarkRank100kAmount(b *testing.B) {
	cat := randomCatalog(b, rand.New(rand.NewPCG(3, 4)), 100_000)
	p := finetunePlan()
	p.Budget.MonthlyLimit = 0
	p.WorkHours, p.Workload.Epochs, p.Workload.DatasetTokensB = 0, 3, 0.05
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Rank(p, cat); err != nil {
			b.Fatal(err)
		}
	}
}

func TestRadixSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 2, 17, 1000, 70000} {
		keys := make([]uint64, n)
		for i := range keys {
			keys[i] = rng.Uint64() >> uint(rng.IntN(64))
		}
		want := slices.Clone(keys)
		slices.Sort(want)
		if got := radixSort(keys, make([]uint64, n)); !slices.Equal(got, want) {
			t.Fatalf("n=%d: radixSort differs from slices.Sort", n)
		}
	}
}

// TestSortOrderMatchesCompare checks the packed-key sort against the
// comparison it stands for, ties and preferred providers included.
func TestSortOrderMatchesCompare(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	rows := make([]priced, 5000)
	for i := range rows {
		var f rowFlags
		if rng.IntN(3) == 0 {
			f = flagPreferred
		}
		rows[i] = newPriced(int32(i), gpuwarden.Cents(rng.IntN(300)), OnDemand, f)
	}
	want := make([]int32, len(rows))
	for i := range want {
		want[i] = int32(i)
	}
	slices.SortFunc(want, func(a, b int32) int { return compareRows(rows, a, b) })
	if got := sortOrder(rows); !slices.Equal(got, want) {
		t.Fatal("packed-key order differs from compareRows")
	}
}

func TestBoxRate(t *testing.T) {
	m := func(s string) gpuwarden.Micros { return mustMicros(t, s) }
	tests := []struct {
		name    string
		box     *gpuwarden.Box
		storage float64
		want    string
		wantErr string
	}{
		{"stated", &gpuwarden.Box{HourlyRate: m("3.50")}, 0, "3.5", ""},
		{"catalog on-demand", &gpuwarden.Box{Provider: "aws", Region: "us-east-1", Instance: "g6.xlarge"}, 0, "0.8048", ""},
		{"catalog spot", &gpuwarden.Box{Provider: "aws", Region: "us-east-1", Instance: "g6.xlarge", Billing: "spot"}, 0, "0.349", ""},
		// 730 GB of block storage at 0.08 = 58.40 a month = 0.08 an hour over 730 h.
		{"with storage", &gpuwarden.Box{Provider: "aws", Region: "us-east-1", Instance: "g6.xlarge"}, 730, "0.8848", ""},
		{"several regions", &gpuwarden.Box{Provider: "aws", Instance: "g6.xlarge"}, 0, "", "several regions"},
		{"unknown", &gpuwarden.Box{Provider: "aws", Region: "us-east-1", Instance: "p9.huge"}, 0, "", "not in the catalog"},
		{"no spot", &gpuwarden.Box{Provider: "runpod", Region: "US-TX-1", Instance: "1x_A100", Billing: "spot"}, 0, "", "no spot price"},
		{"no box", nil, 0, "", "no box"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := finetunePlan()
			p.Box, p.Data.StorageGB = tt.box, tt.storage
			got, _, err := BoxRate(p, testCatalog(t))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got.String() != tt.want {
				t.Errorf("rate = %s, %v; want %s", got, err, tt.want)
			}
		})
	}
}

// BenchmarkRank100kBudget is BenchmarkRank100k with the plan's $500 budget
// kept: most candidates are priced and then excluded, the path the JSON
// summary of exclusions exists for.
func BenchmarkRank100kBudget(b *testing.B) { benchmarkRankBudget(b, 100_000) }

// BenchmarkRank1MBudget is the same on 1,000,000 offers, issue #19's size.
func BenchmarkRank1MBudget(b *testing.B) { benchmarkRankBudget(b, 1_000_000) }

func benchmarkRankBudget(b *testing.B, offers int) {
	cat := randomCatalog(b, rand.New(rand.NewPCG(3, 4)), offers)
	p := finetunePlan()
	b.ReportAllocs()
	b.ResetTimer()
	var excluded int
	for b.Loop() {
		r, err := Rank(p, cat)
		if err != nil {
			b.Fatal(err)
		}
		excluded = r.ExcludedCount()
	}
	b.ReportMetric(float64(excluded), "excluded")
}

// TestRankParallelMatchesSerial ranks one catalog on one goroutine and in
// seven chunks (the parallel path forced on, whatever the machine) and
// wants the same report: the chunks' rows, exclusions and candidates are
// put back in catalog order.
func TestRankParallelMatchesSerial(t *testing.T) {
	cat := randomCatalog(t, rand.New(rand.NewPCG(9, 10)), 200_000)
	offers := cat.Offers.Slice()
	for i := range offers {
		if i%97 == 0 {
			offers[i].Currency = "EUR" // no exchange rate in the plan
		}
	}
	cat.Offers = gpuwarden.OffersOf(offers...)
	var box *gpuwarden.Offer
	for i := range offers {
		if o := &offers[i]; o.GPU == "H200" && o.GPUCount == 8 && o.Currency == "USD" {
			box = o
			break
		}
	}
	tests := []struct {
		name string
		edit func(*gpuwarden.Plan)
	}{
		{"budget kept", func(*gpuwarden.Plan) {}},
		{"no budget", func(p *gpuwarden.Plan) { p.Budget.MonthlyLimit = 0 }},
		{"no spot, residency, providers", func(p *gpuwarden.Plan) {
			p.Interruptions.Tolerance = gpuwarden.TolerateNone
			p.Residency.Countries = []string{"DE", "US"}
			p.Providers = gpuwarden.Providers{Prefer: []string{"vast"}, Exclude: []string{"lambda"}}
		}},
		{"per result, box over budget", func(p *gpuwarden.Plan) {
			p.Workload.Throughput = &gpuwarden.Throughput{Unit: "epoch", PerHour: 2, PerHourByGPU: map[string]float64{"H200": 9}}
			p.Box = &gpuwarden.Box{Provider: box.Provider, Region: box.Region, Instance: box.Instance}
		}},
		{"too small", func(p *gpuwarden.Plan) {
			p.Workload = gpuwarden.Workload{Kind: gpuwarden.KindInference, ParamsB: 70, Precision: gpuwarden.BF16}
		}},
		{"every offer over budget", func(p *gpuwarden.Plan) { p.Budget.MonthlyLimit = gpuwarden.MicrosPerUnit }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := finetunePlan()
			tt.edit(p)
			want := rankWith(t, 1, p, cat)
			got := rankWith(t, 7, p, cat)
			parts := []struct {
				name      string
				got, want any
			}{
				{"ranked", rankedOf(got), rankedOf(want)},
				{"excluded", slices.Collect(got.Exclusions()), slices.Collect(want.Exclusions())},
				{"findings", got.Findings, want.Findings},
				{"report", got, want},
			}
			walked := parts[1].got.([]Exclusion)
			if n := len(walked); n != got.ExcludedCount() {
				t.Errorf("%d exclusions walked, ExcludedCount %d", n, got.ExcludedCount())
			}
			// The counts and the first of each reason, made without
			// walking, are what the walk finds.
			counts, firsts := map[Reason]int{}, map[Reason]Exclusion{}
			for _, e := range walked {
				if counts[e.Reason] == 0 {
					firsts[e.Reason] = e
				}
				counts[e.Reason]++
			}
			if !reflect.DeepEqual(got.ExclusionCounts(), counts) {
				t.Errorf("ExclusionCounts = %v, walked %v", got.ExclusionCounts(), counts)
			}
			for _, reason := range []Reason{ReasonProvider, ReasonResidency, ReasonTooSmall, ReasonCurrency, ReasonSpot, ReasonBudget} {
				e, ok := got.FirstExclusion(reason)
				if want, wantOK := firsts[reason]; ok != wantOK || e != want {
					t.Errorf("FirstExclusion(%s) = %v, %v; walked %v, %v", reason, e.Offer.Instance, ok, want.Offer.Instance, wantOK)
				}
			}
			for _, part := range parts {
				if !reflect.DeepEqual(part.got, part.want) {
					t.Fatalf("%s differ: %d ranked, %d excluded in chunks; %d, %d on one goroutine",
						part.name, got.RankedCount(), got.ExcludedCount(), want.RankedCount(), want.ExcludedCount())
				}
			}
		})
	}
}

func rankWith(t *testing.T, procs int, p *gpuwarden.Plan, cat *gpuwarden.Catalog) *Report {
	t.Helper()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	r, err := Rank(p, cat)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func rankedOf(r *Report) []*Candidate {
	var out []*Candidate
	for _, c := range r.Ranked() {
		out = append(out, c)
	}
	return out
}

// TestPricedKeepsTotals: a priced row holds any total up to 2^47 cents,
// negative ones too, exactly.
func TestPricedKeepsTotals(t *testing.T) {
	for _, total := range []gpuwarden.Cents{0, 1, 123_456, 1<<32 - 1, 1 << 32, 1<<40 + 7, pricedTotalMax, -1, -(1 << 33), -pricedTotalMax} {
		if got := newPriced(3, total, Spot, flagPreferred|flagOverBudget).total(); got != total {
			t.Errorf("total %d kept as %d", total, got)
		}
	}
	if size := unsafe.Sizeof(priced{}); size != 12 {
		t.Errorf("a priced row is %d bytes, want 12", size)
	}
}

// TestRankRefusesTotalsItCannotKeep: a price that makes a month's total
// past what a row holds is an error naming the row, not a wrong number.
func TestRankRefusesTotalsItCannotKeep(t *testing.T) {
	cat := testCatalog(t)
	offers := cat.Offers.Slice()
	offers[1].OnDemandHourly = 90_000_000_000 * gpuwarden.MicrosPerUnit // 90 billion an hour
	offers[1].Origin = gpuwarden.Origin{File: "prices.csv", Line: 3}
	cat.Offers = gpuwarden.OffersOf(offers...)
	_, err := Rank(finetunePlan(), cat)
	if err == nil || !strings.Contains(err.Error(), "prices.csv:3: aws eu-central-1 g6.xlarge (on-demand)") {
		t.Fatalf("err = %v", err)
	}
}
