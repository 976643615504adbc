package config

import (
	"reflect"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

func TestApplyDefaults(t *testing.T) {
	// defaulted is what every field-less plan of kind k becomes.
	defaulted := func(k gpuwarden.WorkloadKind, prec gpuwarden.Precision) gpuwarden.Plan {
		return gpuwarden.Plan{
			Workload:      gpuwarden.Workload{Kind: k, Precision: prec},
			HoursPerMonth: 730,
			Data:          gpuwarden.Data{StorageKind: "block"},
			Interruptions: gpuwarden.Interruptions{Tolerance: gpuwarden.TolerateNone, SpotInterruptionsPerDay: 0.5, RestartMinutes: 10},
			Budget:        gpuwarden.Budget{Currency: "USD", AlertsPercent: []int{50, 80, 100}},
		}
	}
	tests := []struct {
		name string
		in   gpuwarden.Plan
		want func() gpuwarden.Plan
	}{
		{"inference gets bf16", gpuwarden.Plan{Workload: gpuwarden.Workload{Kind: gpuwarden.KindInference}},
			func() gpuwarden.Plan { return defaulted(gpuwarden.KindInference, gpuwarden.BF16) }},
		{"notebook gets bf16", gpuwarden.Plan{Workload: gpuwarden.Workload{Kind: gpuwarden.KindNotebook}},
			func() gpuwarden.Plan { return defaulted(gpuwarden.KindNotebook, gpuwarden.BF16) }},
		{"qlora gets nf4 and an adapter", gpuwarden.Plan{Workload: gpuwarden.Workload{Kind: gpuwarden.KindFinetuneQLoRA}},
			func() gpuwarden.Plan {
				p := defaulted(gpuwarden.KindFinetuneQLoRA, gpuwarden.NF4)
				p.Workload.AdapterPercent = 0.5
				return p
			}},
		{"lora gets an adapter", gpuwarden.Plan{Workload: gpuwarden.Workload{Kind: gpuwarden.KindFinetuneLoRA}},
			func() gpuwarden.Plan {
				p := defaulted(gpuwarden.KindFinetuneLoRA, gpuwarden.BF16)
				p.Workload.AdapterPercent = 0.5
				return p
			}},
		{"full fine-tune gets adamw", gpuwarden.Plan{Workload: gpuwarden.Workload{Kind: gpuwarden.KindFinetuneFull}},
			func() gpuwarden.Plan {
				p := defaulted(gpuwarden.KindFinetuneFull, gpuwarden.BF16)
				p.Workload.Optimizer = "adamw"
				return p
			}},
		{"pretrain gets adamw", gpuwarden.Plan{Workload: gpuwarden.Workload{Kind: gpuwarden.KindPretrain}},
			func() gpuwarden.Plan {
				p := defaulted(gpuwarden.KindPretrain, gpuwarden.BF16)
				p.Workload.Optimizer = "adamw"
				return p
			}},
		{"render is stateless", gpuwarden.Plan{Workload: gpuwarden.Workload{Kind: gpuwarden.KindRender}},
			func() gpuwarden.Plan {
				p := defaulted(gpuwarden.KindRender, gpuwarden.BF16)
				p.Interruptions.Tolerance = gpuwarden.TolerateStateless
				return p
			}},
		{"checkpoints make it checkpointed", gpuwarden.Plan{Workload: gpuwarden.Workload{Kind: gpuwarden.KindRender},
			Data: gpuwarden.Data{CheckpointIntervalMinutes: 30}},
			func() gpuwarden.Plan {
				p := defaulted(gpuwarden.KindRender, gpuwarden.BF16)
				p.Data.CheckpointIntervalMinutes = 30
				p.Interruptions.Tolerance = gpuwarden.TolerateCheckpointed
				return p
			}},
		{"unknown kind gets no precision", gpuwarden.Plan{Workload: gpuwarden.Workload{Kind: "training"}},
			func() gpuwarden.Plan { return defaulted("training", "") }},
		{"full KV shape gets batch 1", gpuwarden.Plan{Workload: gpuwarden.Workload{Kind: gpuwarden.KindInference,
			Layers: 32, KVHeads: 8, HeadDim: 128, Context: 8192}},
			func() gpuwarden.Plan {
				p := defaulted(gpuwarden.KindInference, gpuwarden.BF16)
				p.Workload.Layers, p.Workload.KVHeads, p.Workload.HeadDim, p.Workload.Context = 32, 8, 128, 8192
				p.Workload.Batch = 1
				return p
			}},
		{"partial KV shape gets no batch", gpuwarden.Plan{Workload: gpuwarden.Workload{Kind: gpuwarden.KindInference, Layers: 32}},
			func() gpuwarden.Plan {
				p := defaulted(gpuwarden.KindInference, gpuwarden.BF16)
				p.Workload.Layers = 32
				return p
			}},
		{"auto-shutdown gets a session per 8 hours, rounded up", gpuwarden.Plan{Workload: gpuwarden.Workload{Kind: gpuwarden.KindNotebook},
			WorkHours: 100, OnHours: gpuwarden.OnHours{AutoShutdownIdleMinutes: 30}},
			func() gpuwarden.Plan {
				p := defaulted(gpuwarden.KindNotebook, gpuwarden.BF16)
				p.WorkHours = 100
				p.OnHours = gpuwarden.OnHours{AutoShutdownIdleMinutes: 30, SessionsPerMonth: 13}
				return p
			}},
		{"no auto-shutdown, no sessions", gpuwarden.Plan{Workload: gpuwarden.Workload{Kind: gpuwarden.KindNotebook}, WorkHours: 100},
			func() gpuwarden.Plan {
				p := defaulted(gpuwarden.KindNotebook, gpuwarden.BF16)
				p.WorkHours = 100
				return p
			}},
		{"given values stay", gpuwarden.Plan{
			Workload:      gpuwarden.Workload{Kind: gpuwarden.KindFinetuneQLoRA, Precision: gpuwarden.INT4, Optimizer: "adamw-8bit", AdapterPercent: 2},
			HoursPerMonth: 720, WorkHours: 16,
			OnHours:       gpuwarden.OnHours{AutoShutdownIdleMinutes: 5, SessionsPerMonth: 40},
			Data:          gpuwarden.Data{StorageKind: "object"},
			Interruptions: gpuwarden.Interruptions{Tolerance: gpuwarden.TolerateStateless, SpotInterruptionsPerDay: 3, RestartMinutes: 2},
			Budget:        gpuwarden.Budget{MonthlyLimit: 100, Currency: "EUR", AlertsPercent: []int{90}},
		}, func() gpuwarden.Plan {
			return gpuwarden.Plan{
				Workload:      gpuwarden.Workload{Kind: gpuwarden.KindFinetuneQLoRA, Precision: gpuwarden.INT4, Optimizer: "adamw-8bit", AdapterPercent: 2},
				HoursPerMonth: 720, WorkHours: 16,
				OnHours:       gpuwarden.OnHours{AutoShutdownIdleMinutes: 5, SessionsPerMonth: 40},
				Data:          gpuwarden.Data{StorageKind: "object"},
				Interruptions: gpuwarden.Interruptions{Tolerance: gpuwarden.TolerateStateless, SpotInterruptionsPerDay: 3, RestartMinutes: 2},
				Budget:        gpuwarden.Budget{MonthlyLimit: 100, Currency: "EUR", AlertsPercent: []int{90}},
			}
		}},
		{"empty alert list stays empty", gpuwarden.Plan{Workload: gpuwarden.Workload{Kind: gpuwarden.KindNotebook},
			Budget: gpuwarden.Budget{AlertsPercent: []int{}}},
			func() gpuwarden.Plan {
				p := defaulted(gpuwarden.KindNotebook, gpuwarden.BF16)
				p.Budget.AlertsPercent = []int{}
				return p
			}},
		{"codes and names change case", gpuwarden.Plan{Workload: gpuwarden.Workload{Kind: gpuwarden.KindNotebook},
			Budget:        gpuwarden.Budget{Currency: " eur"},
			Residency:     gpuwarden.Residency{Countries: []string{"de", " Fr "}, Regions: []string{"AWS:eu-West-1", "  westeurope "}},
			Providers:     gpuwarden.Providers{Prefer: []string{"RunPod"}, Exclude: []string{" AWS "}},
			CurrencyRates: map[gpuwarden.Currency]gpuwarden.Micros{"usd": 920_000, "GBP": 1_170_000},
		}, func() gpuwarden.Plan {
			p := defaulted(gpuwarden.KindNotebook, gpuwarden.BF16)
			p.Budget.Currency = "EUR"
			p.Residency = gpuwarden.Residency{Countries: []string{"DE", "FR"}, Regions: []string{"aws:eu-West-1", "westeurope"}}
			p.Providers = gpuwarden.Providers{Prefer: []string{"runpod"}, Exclude: []string{"aws"}}
			p.CurrencyRates = map[gpuwarden.Currency]gpuwarden.Micros{"USD": 920_000, "GBP": 1_170_000}
			return p
		}},
		{"two spellings of a rate keep the canonical one", gpuwarden.Plan{Workload: gpuwarden.Workload{Kind: gpuwarden.KindNotebook},
			CurrencyRates: map[gpuwarden.Currency]gpuwarden.Micros{"eur": 1, "EUR": 2, "Eur": 3}},
			func() gpuwarden.Plan {
				p := defaulted(gpuwarden.KindNotebook, gpuwarden.BF16)
				p.CurrencyRates = map[gpuwarden.Currency]gpuwarden.Micros{"EUR": 2}
				return p
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in
			ApplyDefaults(&got)
			if want := tt.want(); !reflect.DeepEqual(got, want) {
				t.Errorf("ApplyDefaults\n got: %s\nwant: %s", asJSON(t, got), asJSON(t, want))
			}
			// A defaulted plan is a fixed point: a second call changes nothing.
			again := got
			ApplyDefaults(&again)
			if !reflect.DeepEqual(again, got) {
				t.Errorf("second ApplyDefaults changed the plan\n got: %s\nwant: %s", asJSON(t, again), asJSON(t, got))
			}
		})
	}
}

func TestApplyDefaultsNil(t *testing.T) {
	ApplyDefaults(nil) // must not panic: the CLI may pass a plan it failed to build
}

func TestApplyDefaultsDoesNotShareSlices(t *testing.T) {
	// A YAML alias decodes into two fields sharing one backing array.
	shared := []string{"De"}
	p := gpuwarden.Plan{Residency: gpuwarden.Residency{Countries: shared}, Providers: gpuwarden.Providers{Prefer: shared}}
	ApplyDefaults(&p)
	if p.Residency.Countries[0] != "DE" || p.Providers.Prefer[0] != "de" {
		t.Errorf("countries %q, prefer %q; want [DE] and [de]", p.Residency.Countries, p.Providers.Prefer)
	}
	if shared[0] != "De" {
		t.Errorf("the caller's slice changed to %q", shared)
	}
}

func TestDefaultAlertsPercentIsFresh(t *testing.T) {
	a := DefaultAlertsPercent()
	a[0] = 1
	if got := DefaultAlertsPercent(); got[0] != 50 {
		t.Errorf("DefaultAlertsPercent()[0] = %d after a caller changed its copy", got[0])
	}
}
