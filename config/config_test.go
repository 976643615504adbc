package config

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/parser"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/yamlerr"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// usd turns whole units into Micros for readable expectations.
func usd(units float64) gpuwarden.Micros { return gpuwarden.MicrosFromFloat(units) }

func TestParseGoodFiles(t *testing.T) {
	tests := []struct {
		file string
		want gpuwarden.Plan
	}{
		{"minimal.yaml", gpuwarden.Plan{
			Workload:      gpuwarden.Workload{Kind: gpuwarden.KindInference, ParamsB: 8, Precision: gpuwarden.BF16},
			HoursPerMonth: 730,
			WorkHours:     200,
			Data:          gpuwarden.Data{StorageKind: "block"},
			Interruptions: gpuwarden.Interruptions{Tolerance: gpuwarden.TolerateNone, SpotInterruptionsPerDay: 0.5, RestartMinutes: 10},
			Budget:        gpuwarden.Budget{Currency: "USD", AlertsPercent: []int{50, 80, 100}},
		}},
		{"full.yaml", gpuwarden.Plan{
			Name: "llama-70b-serving",
			Workload: gpuwarden.Workload{Kind: gpuwarden.KindInference, ParamsB: 70.6, Precision: gpuwarden.FP8,
				Layers: 80, KVHeads: 8, HeadDim: 128, Context: 32768, Batch: 4, Optimizer: "adamw-8bit",
				AdapterPercent: 1.25, ActivationsGB: 3.5,
				Throughput: &gpuwarden.Throughput{Unit: "1k requests", PerHour: 120,
					PerHourByGPU: map[string]float64{"H100-SXM": 310.5, "A100-80GB": 150}}},
			HoursPerMonth: 720,
			WorkHours:     720,
			OnHours:       gpuwarden.OnHours{AutoShutdownIdleMinutes: 45, SessionsPerMonth: 30},
			Data: gpuwarden.Data{EgressGB: gpuwarden.EgressGB{Internet: 1500.25, InterRegion: 20, IntraRegion: 5},
				StorageGB: 400, StorageKind: "volume", CheckpointGB: 140, CheckpointIntervalMinutes: 30},
			Interruptions:   gpuwarden.Interruptions{Tolerance: gpuwarden.TolerateStateless, SpotInterruptionsPerDay: 1.5, RestartMinutes: 4},
			Budget:          gpuwarden.Budget{MonthlyLimit: 12_500_750_000, Currency: "EUR", AlertsPercent: []int{25, 50, 75, 90, 100, 120}},
			Residency:       gpuwarden.Residency{Countries: []string{"DE", "FR", "NL"}, Regions: []string{"aws:eu-central-1", "europe-west4"}},
			Providers:       gpuwarden.Providers{Prefer: []string{"aws", "gcp"}, Exclude: []string{"vast"}},
			Catalogs:        []string{"prices/own.csv"},
			EmbeddedCatalog: new(false),
			CurrencyRates:   map[gpuwarden.Currency]gpuwarden.Micros{"USD": 925_000, "GBP": 1_170_000},
		}},
		{"notebook.yaml", gpuwarden.Plan{
			Name:          "exploration: week 1",
			Workload:      gpuwarden.Workload{Kind: gpuwarden.KindNotebook, Precision: gpuwarden.BF16},
			HoursPerMonth: 730,
			WorkHours:     40,
			OnHours:       gpuwarden.OnHours{AutoShutdownIdleMinutes: 15, SessionsPerMonth: 5},
			Data:          gpuwarden.Data{StorageGB: 50, StorageKind: "object"},
			// Written as 0 on purpose, so kept rather than defaulted.
			Interruptions: gpuwarden.Interruptions{Tolerance: gpuwarden.TolerateNone},
			Budget:        gpuwarden.Budget{Currency: "GBP", AlertsPercent: []int{}},
			Residency:     gpuwarden.Residency{Countries: []string{"DE", "FR"}, Regions: []string{"aws:eu-west-2"}},
			Providers:     gpuwarden.Providers{Prefer: []string{"runpod"}, Exclude: []string{"vast"}},
			CurrencyRates: map[gpuwarden.Currency]gpuwarden.Micros{"USD": 790_000},
		}},
		{"finetune.yaml", gpuwarden.Plan{
			Workload: gpuwarden.Workload{Kind: gpuwarden.KindFinetuneFull, ParamsB: 13, Precision: gpuwarden.BF16, Optimizer: "adamw",
				Throughput: &gpuwarden.Throughput{Unit: "epoch", PerHour: 0.25,
					PerHourByGPU: map[string]float64{"H100-SXM": 0.6, "A100-80GB": 0.25}}},
			HoursPerMonth: 730,
			WorkHours:     100,
			OnHours:       gpuwarden.OnHours{AutoShutdownIdleMinutes: 20, SessionsPerMonth: 13},
			Data:          gpuwarden.Data{StorageKind: "block", CheckpointGB: 78, CheckpointIntervalMinutes: 60},
			Interruptions: gpuwarden.Interruptions{Tolerance: gpuwarden.TolerateCheckpointed, SpotInterruptionsPerDay: 0.5, RestartMinutes: 10},
			Budget:        gpuwarden.Budget{MonthlyLimit: usd(4000), Currency: "USD", AlertsPercent: []int{90, 100}},
		}},
		{"render.yaml", gpuwarden.Plan{
			Workload: gpuwarden.Workload{Kind: gpuwarden.KindRender, Precision: gpuwarden.BF16, VRAMGB: 24,
				Throughput: &gpuwarden.Throughput{Unit: "frame", PerHourByGPU: map[string]float64{"L40S": 95, "RTX-4090": 80}}},
			HoursPerMonth: 730,
			WorkHours:     300,
			Data:          gpuwarden.Data{StorageKind: "block"},
			Interruptions: gpuwarden.Interruptions{Tolerance: gpuwarden.TolerateStateless, SpotInterruptionsPerDay: 0.5, RestartMinutes: 10},
			Budget:        gpuwarden.Budget{MonthlyLimit: usd(900), Currency: "USD", AlertsPercent: []int{50, 80, 100}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := Load(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatalf("Load: %v (hint: %s)", err, gpuwarden.ErrorHint(err))
			}
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("plan mismatch\n got: %s\nwant: %s", asJSON(t, *got), asJSON(t, tt.want))
			}
		})
	}
}

// asJSON prints a plan for a readable mismatch report; %+v hides pointers.
func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// base is a valid plan that bad cases extend; it takes lines 1–4, so a line
// appended to it is line 5.
const base = "workload:\n  kind: inference\n  params_b: 7\nwork_hours: 100\n"

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name     string
		doc      string
		want     string // the exact Message
		wantHint string // a part of the Hint, when it matters
	}{
		// The YAML itself.
		{"syntax error", "workload:\n  kind: [inference\n",
			"bad.yaml:2:9: syntax error: sequence end token ']' not found", "indent with spaces"},
		// A key one space too far right reads as more words of the value
		// above it; the library names that value's line, one too early.
		{"key indented too far", "workload:\n  kind: inference\n   params_b: 7\n",
			"bad.yaml:3:4: syntax error: mapping value is not allowed in this context", "indent with spaces"},
		{"tab indentation", "workload:\n\tkind: inference\n",
			`bad.yaml:2:1: syntax error: found character '\t' that cannot start any token`, "not allow tabs"},
		{"empty file", "", "bad.yaml:1:1: plan file is empty", "gpuwarden init > gpuwarden.yaml"},
		{"only comments", "# nothing yet\n", "bad.yaml:1:1: plan file is empty", ""},
		{"only null", "~\n", "bad.yaml:1:1: plan file is empty", ""},
		{"two documents", base + "---\nwork_hours: 5\n",
			"bad.yaml:5:1: plan file holds more than one YAML document", "one plan per file"},
		{"a list, not a mapping", "- workload\n",
			"bad.yaml:1:1: plan file must be a mapping of fields such as workload: and work_hours:, not a list", ""},
		{"duplicate key", base + "work_hours: 5\n", "bad.yaml:5:1: work_hours: given twice (first at 4:1)", "appear once"},
		{"alias without anchor", base + "name: *nothing\n", "bad.yaml:5:7: name: alias *nothing refers to no anchor &nothing above it",
			"define the anchor"},
		{"tag", base + "name: !!str 12\n", `bad.yaml:5:7: name: YAML tag "!!str" is not supported in a plan file`, ""},
		{"merge key", base + "budget:\n  <<: {currency: EUR}\n",
			"bad.yaml:6:3: budget.<<: merge keys are not supported in a plan file", ""},

		// Types.
		{"string for a number", "workload:\n  kind: inference\n  params_b: seven\n",
			`bad.yaml:3:13: workload.params_b: must be a number, not text "seven"`, "plain number"},
		{"quoted number", base + "hours_per_month: \"720\"\n",
			`bad.yaml:5:18: hours_per_month: must be a number, not text "720"`, "without quotes"},
		{"fraction for a whole number", "workload:\n  kind: inference\n  params_b: 7\n  layers: 1.5\n",
			"bad.yaml:4:11: workload.layers: must be a whole number, not 1.5", "whole number"},
		{"integer overflow", "workload:\n  context: 99999999999999999999\n",
			"bad.yaml:2:12: workload.context: 99999999999999999999 is too large", ""},
		{"infinity", base + "hours_per_month: .inf\n", "bad.yaml:5:18: hours_per_month: must be a finite number, not .inf", ""},
		{"hexadecimal", base + "hours_per_month: 0x2D0\n",
			"bad.yaml:5:18: hours_per_month: must be a plain decimal number, not 0x2D0", "decimal"},
		{"leading zero", base + "budget:\n  alerts_percent: [050]\n",
			"bad.yaml:6:20: budget.alerts_percent[0]: must be a plain decimal number, not 050", "octal"},
		{"text for a boolean", base + "embedded_catalog: \"no\"\n",
			`bad.yaml:5:19: embedded_catalog: must be true or false, not text "no"`, "write true or false"},
		{"mapping for a number", "work_hours:\n  hours: 5\n", "bad.yaml:2:3: work_hours: must be a number, not a mapping", ""},
		{"list for a section", "workload: [inference, 7]\n", "bad.yaml:1:11: workload: must be a mapping, not a list",
			"kind, params_b"},
		{"number for text", base + "name: 2025\n", `bad.yaml:5:7: name: must be text, not 2025`, `put it in quotes: "2025"`},
		{"boolean in a list of text", base + "residency:\n  countries: [DE, true]\n",
			"bad.yaml:6:19: residency.countries[1]: must be text, not true", ""},
		{"null list item", base + "budget:\n  alerts_percent:\n    - 50\n    -\n",
			"bad.yaml:8:5: budget.alerts_percent[1]: must be a whole number, not empty", ""},
		{"amount not a number", base + "budget:\n  monthly_limit: lots\n",
			`bad.yaml:6:18: budget.monthly_limit: must be a number, not text "lots"`, "plain decimal"},
		{"amount too precise", base + "budget:\n  monthly_limit: 1.0000001\n",
			`bad.yaml:6:18: budget.monthly_limit: "1.0000001" has more than 6 decimal places`, "at most 6 decimal places"},
		{"amount in exponent form", base + "currency_rates:\n  EUR: 1.1e0\n",
			`bad.yaml:6:8: currency_rates.EUR: "1.1e0" is not a plain decimal number`, ""},

		// Unknown fields.
		{"typo at the top", "workload:\n  kind: inference\n  params_b: 7\nwork_hour: 100\n",
			"bad.yaml:4:1: work_hour: unknown field; did you mean work_hours?", "top-level fields: name, workload,"},
		{"typo in a section", "workload:\n  kind: inference\n  parms_b: 7\n",
			"bad.yaml:3:3: workload.parms_b: unknown field; did you mean params_b?", "fields under workload: kind,"},
		{"wrong case", base + "Budget:\n  monthly_limit: 5\n", "bad.yaml:5:1: Budget: unknown field; did you mean budget?", ""},
		{"nothing close", base + "colour: red\n", "bad.yaml:5:1: colour: unknown field", ""},
		{"unknown in throughput", "workload:\n  kind: render\n  vram_gb: 8\n  throughput:\n    units: frame\n",
			"bad.yaml:5:5: workload.throughput.units: unknown field; did you mean unit?", "fields under workload.throughput: unit,"},

		// Required fields point at the parent mapping, or the document start.
		{"no workload", "# a plan with hours only\nwork_hours: 100\n", "bad.yaml:1:1: workload.kind: required",
			"one of: inference, finetune-lora, finetune-qlora, finetune-full, pretrain, notebook, render"},
		{"no kind", "name: x\nworkload:\n  params_b: 7\nwork_hours: 100\n", "bad.yaml:2:1: workload.kind: required", ""},
		{"no work_hours", "workload:\n  kind: notebook\n", "bad.yaml:1:1: work_hours: required", "hours per month"},

		// Validation, in the order of the file's sections.
		{"multi-line name", "name: |\n  two\n  lines\n" + "workload:\n  kind: notebook\nwork_hours: 5\n",
			"bad.yaml:1:7: name: must be one line", ""},
		{"unknown kind", "workload:\n  kind: training\n", `bad.yaml:2:9: workload.kind: "training" is not a workload kind`,
			"one of: inference, finetune-lora,"},
		{"kind in capitals", "workload:\n  kind: Inference\n", `bad.yaml:2:9: workload.kind: "Inference" is not a workload kind`, ""},
		{"params_b missing", "workload:\n  kind: finetune-lora\nwork_hours: 10\n",
			"bad.yaml:1:1: workload.params_b: required for kind finetune-lora", "vram_gb"},
		{"params_b zero", "workload:\n  kind: pretrain\n  params_b: 0\nwork_hours: 10\n",
			"bad.yaml:3:13: workload.params_b: must be greater than 0", ""},
		{"params_b negative", "workload:\n  kind: notebook\n  params_b: -1\n",
			"bad.yaml:3:13: workload.params_b: must be greater than 0", "billions"},
		{"params_b not in billions", "workload:\n  kind: inference\n  params_b: 7000000000\n",
			"bad.yaml:3:13: workload.params_b: must be at most 100000 (it counts billions)", "7 for a 7B model"},
		{"unknown precision", "workload:\n  kind: inference\n  params_b: 7\n  precision: fp4\n",
			`bad.yaml:4:14: workload.precision: "fp4" is not a precision`, "one of: fp32, bf16, fp16, fp8, int8, int4, nf4"},
		{"negative layers", "workload:\n  kind: inference\n  params_b: 7\n  layers: -32\n",
			"bad.yaml:4:11: workload.layers: must not be negative", ""},
		{"negative batch", "workload:\n  kind: inference\n  params_b: 7\n  batch: -1\n",
			"bad.yaml:4:10: workload.batch: must not be negative", ""},
		{"KV shape missing a field", "workload:\n  kind: inference\n  params_b: 7\n  layers: 32\n  kv_heads: 8\n  context: 8192\n",
			"bad.yaml:1:1: workload.head_dim: required with layers, kv_heads and context to size the KV cache", "or none"},
		{"KV shape with a zero", "workload:\n  kind: inference\n  params_b: 7\n  layers: 32\n  kv_heads: 0\n",
			"bad.yaml:5:13: workload.kv_heads: required with layers to size the KV cache", ""},
		{"unknown optimizer", "workload:\n  kind: finetune-full\n  params_b: 7\n  optimizer: sgd\n",
			`bad.yaml:4:14: workload.optimizer: "sgd" is not an optimizer`, "one of: adamw, adamw-8bit"},
		{"adapter_percent zero", "workload:\n  kind: finetune-lora\n  params_b: 7\n  adapter_percent: 0\n",
			"bad.yaml:4:20: workload.adapter_percent: must be greater than 0 and at most 100", ""},
		{"adapter_percent over 100", "workload:\n  kind: finetune-lora\n  params_b: 7\n  adapter_percent: 150\n",
			"bad.yaml:4:20: workload.adapter_percent: must be greater than 0 and at most 100", ""},
		{"negative activations", "workload:\n  kind: finetune-lora\n  params_b: 7\n  activations_gb: -2\n",
			"bad.yaml:4:19: workload.activations_gb: must not be negative", ""},
		{"negative vram", "workload:\n  kind: notebook\n  vram_gb: -16\n", "bad.yaml:3:12: workload.vram_gb: must not be negative", ""},
		{"throughput without unit", "workload:\n  kind: render\n  throughput:\n    per_hour: 10\n",
			"bad.yaml:3:3: workload.throughput.unit: required", `"frame"`},
		{"throughput without figures", "workload:\n  kind: render\n  throughput:\n    unit: frame\n",
			"bad.yaml:3:3: workload.throughput: give per_hour, per_hour_by_gpu or both", ""},
		{"throughput negative", "workload:\n  kind: render\n  throughput:\n    unit: frame\n    per_hour: -3\n",
			"bad.yaml:5:15: workload.throughput.per_hour: must not be negative", ""},
		{"throughput zero for a GPU", "workload:\n  kind: render\n  throughput:\n    unit: frame\n    per_hour_by_gpu:\n      L4: 3\n      T4: 0\n",
			"bad.yaml:7:11: workload.throughput.per_hour_by_gpu.T4: must be greater than 0", ""},
		{"hours_per_month zero", base + "hours_per_month: 0\n",
			"bad.yaml:5:18: hours_per_month: must be greater than 0 and at most 744", "730"},
		{"hours_per_month too long", base + "hours_per_month: 745\n",
			"bad.yaml:5:18: hours_per_month: must be greater than 0 and at most 744", ""},
		{"work_hours zero", "workload:\n  kind: notebook\nwork_hours: 0\n", "bad.yaml:3:13: work_hours: must be greater than 0", ""},
		{"work_hours negative", "workload:\n  kind: notebook\nwork_hours: -5\n", "bad.yaml:3:13: work_hours: must be greater than 0", ""},
		{"work_hours beyond the month", "workload:\n  kind: notebook\nwork_hours: 731\n",
			"bad.yaml:3:13: work_hours: 731 is more than the 730 hours of a month (hours_per_month)", ""},
		{"work_hours beyond a short month", "workload:\n  kind: notebook\nhours_per_month: 720\nwork_hours: 730\n",
			"bad.yaml:4:13: work_hours: 730 is more than the 720 hours of a month (hours_per_month)", ""},
		{"idle minutes negative", base + "on_hours:\n  auto_shutdown_idle_minutes: -1\n",
			"bad.yaml:6:31: on_hours.auto_shutdown_idle_minutes: must be at least 0 and less than 1440", "0 turns auto-shutdown off"},
		{"idle minutes a day", base + "on_hours:\n  auto_shutdown_idle_minutes: 1440\n",
			"bad.yaml:6:31: on_hours.auto_shutdown_idle_minutes: must be at least 0 and less than 1440", ""},
		{"sessions negative", base + "on_hours:\n  sessions_per_month: -2\n",
			"bad.yaml:6:23: on_hours.sessions_per_month: must not be negative", ""},
		{"egress negative", base + "data:\n  egress_gb:\n    inter_region: -1\n",
			"bad.yaml:7:19: data.egress_gb.inter_region: must not be negative", "GB"},
		{"storage negative", base + "data:\n  storage_gb: -1\n", "bad.yaml:6:15: data.storage_gb: must not be negative", ""},
		{"unknown storage kind", base + "data:\n  storage_kind: nfs\n", `bad.yaml:6:17: data.storage_kind: "nfs" is not a storage kind`,
			"one of: block, object, volume"},
		{"checkpoint negative", base + "data:\n  checkpoint_gb: -1\n", "bad.yaml:6:18: data.checkpoint_gb: must not be negative", ""},
		{"checkpoint interval negative", base + "data:\n  checkpoint_interval_minutes: -60\n",
			"bad.yaml:6:32: data.checkpoint_interval_minutes: must not be negative", ""},
		{"unknown tolerance", base + "interruptions:\n  tolerance: resumable\n",
			`bad.yaml:6:14: interruptions.tolerance: "resumable" is not a tolerance`, "one of: none, checkpointed, stateless"},
		{"spot rate too high", base + "interruptions:\n  spot_interruptions_per_day: 25\n",
			"bad.yaml:6:31: interruptions.spot_interruptions_per_day: must be between 0 and 24", ""},
		{"spot rate negative", base + "interruptions:\n  spot_interruptions_per_day: -0.5\n",
			"bad.yaml:6:31: interruptions.spot_interruptions_per_day: must be between 0 and 24", ""},
		{"restart negative", base + "interruptions:\n  restart_minutes: -1\n",
			"bad.yaml:6:20: interruptions.restart_minutes: must not be negative", ""},
		{"negative budget", base + "budget:\n  monthly_limit: -100\n", "bad.yaml:6:18: budget.monthly_limit: must not be negative",
			"0 means no limit"},
		{"currency too short", base + "budget:\n  currency: US\n", `bad.yaml:6:13: budget.currency: "US" is not a three-letter currency code`,
			"ISO 4217"},
		{"currency not letters", base + "budget:\n  currency: U$D\n", `bad.yaml:6:13: budget.currency: "U$D" is not a three-letter currency code`, ""},
		{"alert zero", base + "budget:\n  alerts_percent: [0, 50]\n",
			"bad.yaml:6:20: budget.alerts_percent[0]: must be between 1 and 1000, not 0", "ascending"},
		{"alert too high", base + "budget:\n  alerts_percent: [50, 1001]\n",
			"bad.yaml:6:24: budget.alerts_percent[1]: must be between 1 and 1000, not 1001", ""},
		{"alerts out of order", base + "budget:\n  alerts_percent: [80, 50]\n",
			"bad.yaml:6:24: budget.alerts_percent[1]: 50 must be greater than the threshold before it (80)", ""},
		{"alerts repeated", base + "budget:\n  alerts_percent:\n    - 50\n    - 50\n",
			"bad.yaml:8:7: budget.alerts_percent[1]: 50 must be greater than the threshold before it (50)", ""},
		{"country of three letters", base + "residency:\n  countries: [DE, DEU]\n",
			`bad.yaml:6:19: residency.countries[1]: "DEU" is not a two-letter country code`, "DE, FR or US"},
		{"empty region", base + "residency:\n  regions: [\"aws:\"]\n", `bad.yaml:6:13: residency.regions[0]: "aws:" is not a region`, ""},
		{"empty provider", base + "providers:\n  prefer: [\"\"]\n", "bad.yaml:6:12: providers.prefer[0]: must not be empty", ""},
		{"provider preferred and excluded", base + "providers:\n  prefer: [AWS, gcp]\n  exclude: [lambda, aws]\n",
			`bad.yaml:7:21: providers.exclude[1]: "aws" is also in providers.prefer`, "not both"},
		{"empty catalog path", base + "catalogs: [prices.csv, \" \"]\n", "bad.yaml:5:24: catalogs[1]: must not be empty", ""},
		{"rate for a long code", base + "currency_rates:\n  EUR: 1.08\n  EURO: 1.08\n",
			`bad.yaml:7:3: currency_rates.EURO: "EURO" is not a three-letter currency code`, ""},
		{"rate zero", base + "currency_rates:\n  EUR: 0\n", "bad.yaml:6:8: currency_rates.EUR: must be greater than 0", ""},
		{"rate negative", base + "currency_rates:\n  GBP: -1.2\n", "bad.yaml:6:8: currency_rates.GBP: must be greater than 0", ""},
		{"rate given twice in two cases", base + "currency_rates:\n  EUR: 1.08\n  eur: 1.09\n",
			"bad.yaml:7:3: currency_rates.eur: same currency as EUR", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse("bad.yaml", []byte(tt.doc))
			if err == nil {
				t.Fatalf("Parse succeeded with %s, want error %q", asJSON(t, p), tt.want)
			}
			var e *gpuwarden.Error
			if !errors.As(err, &e) {
				t.Fatalf("error is %T, want *gpuwarden.Error: %v", err, err)
			}
			if e.Code != gpuwarden.EInvalid {
				t.Errorf("Code = %q, want %q", e.Code, gpuwarden.EInvalid)
			}
			if e.Message != tt.want {
				t.Errorf("Message\n got: %s\nwant: %s", e.Message, tt.want)
			}
			if e.Hint == "" {
				t.Errorf("Hint is empty for %q", e.Message)
			}
			if !strings.Contains(e.Hint, tt.wantHint) {
				t.Errorf("Hint = %q, want it to contain %q", e.Hint, tt.wantHint)
			}
		})
	}
}

func TestParseAccepts(t *testing.T) {
	// Inputs the strict checks must not refuse, each with the field it sets.
	tests := []struct {
		name  string
		doc   string
		check func(p *gpuwarden.Plan) bool
	}{
		{"byte-order mark", "\ufeff" + base, func(p *gpuwarden.Plan) bool { return p.WorkHours == 100 }},
		{"CRLF line ends", strings.ReplaceAll(base, "\n", "\r\n"), func(p *gpuwarden.Plan) bool { return p.Workload.ParamsB == 7 }},
		{"vram_gb instead of params_b", "workload:\n  kind: inference\n  vram_gb: 40\nwork_hours: 10\n",
			func(p *gpuwarden.Plan) bool { return p.Workload.VRAMGB == 40 }},
		{"exponent float", base + "hours_per_month: 7.2e2\n", func(p *gpuwarden.Plan) bool { return p.HoursPerMonth == 720 }},
		{"null section", base + "data:\n", func(p *gpuwarden.Plan) bool { return p.Data.StorageKind == "block" }},
		{"null value", base + "name:\n", func(p *gpuwarden.Plan) bool { return p.Name == "" }},
		{"explicit sessions zero", base + "on_hours:\n  auto_shutdown_idle_minutes: 10\n  sessions_per_month: 0\n",
			func(p *gpuwarden.Plan) bool { return p.OnHours.SessionsPerMonth == 0 }},
		{"Norway stays a country", base + "residency:\n  countries: [NO, no]\n",
			func(p *gpuwarden.Plan) bool { return reflect.DeepEqual(p.Residency.Countries, []string{"NO", "NO"}) }},
		{"trailing empty document", base + "---\n", func(p *gpuwarden.Plan) bool { return p.WorkHours == 100 }},
		{"leading document marker", "---\n" + base, func(p *gpuwarden.Plan) bool { return p.WorkHours == 100 }},
		{"alias to a list", base + "residency:\n  countries: &eu [DE]\nproviders:\n  prefer: *eu\n",
			func(p *gpuwarden.Plan) bool { return reflect.DeepEqual(p.Providers.Prefer, []string{"de"}) }},
		{"YAML directive", "%YAML 1.2\n---\n" + base, func(p *gpuwarden.Plan) bool { return p.WorkHours == 100 }},
		{"explicit key", "? workload\n: {kind: notebook}\nwork_hours: 5\n",
			func(p *gpuwarden.Plan) bool { return p.Workload.Kind == gpuwarden.KindNotebook }},
		{"document end marker", base + "...\n", func(p *gpuwarden.Plan) bool { return p.WorkHours == 100 }},
		{"escapes in quoted text", base + "name: \"\\x41\\u00e9 it's\"\n", func(p *gpuwarden.Plan) bool { return p.Name == "Aé it's" }},
		{"amount with cents", base + "budget:\n  monthly_limit: 1234.56\n",
			func(p *gpuwarden.Plan) bool { return p.Budget.MonthlyLimit == 1_234_560_000 }},
		{"work_hours equal to the month", "workload:\n  kind: notebook\nwork_hours: 730\n",
			func(p *gpuwarden.Plan) bool { return p.WorkHours == 730 }},
		{"pagerduty and format-named webhooks", base + "webhooks: [\"pagerduty://R0UT1NGKEY0123456789abcdefABCDEF\", \"json+https://x.example/hook\"]\n",
			func(p *gpuwarden.Plan) bool { return len(p.Webhooks) == 2 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse("ok.yaml", []byte(tt.doc))
			if err != nil {
				t.Fatalf("Parse: %v (hint: %s)", err, gpuwarden.ErrorHint(err))
			}
			if !tt.check(p) {
				t.Errorf("unexpected plan: %s", asJSON(t, p))
			}
		})
	}
}

func TestParseTooLarge(t *testing.T) {
	data := []byte(base + "# " + strings.Repeat("x", MaxFileSize) + "\n")
	_, err := Parse("big.yaml", data)
	var e *gpuwarden.Error
	if !errors.As(err, &e) || e.Code != gpuwarden.EInvalid {
		t.Fatalf("err = %v, want an EInvalid *gpuwarden.Error", err)
	}
	if want := "big.yaml:1:1: plan file is larger than 256 KiB"; e.Message != want {
		t.Errorf("Message = %q, want %q", e.Message, want)
	}
}

// TestParseHostile holds Parse to the nesting limits: a 200 KB plan of
// 100,000 nested "[" ran `gpuwarden plan` out of memory past 6 GB, and
// depth 20,000 (40 KB) took 680 MB. Each hostile file must be an EInvalid
// error at FILE:LINE:COL, and reading it must stay within a loose memory
// bound; yamlread's own tests cover the other limits.
func TestParseHostile(t *testing.T) {
	var indent strings.Builder
	for i := range 200 {
		fmt.Fprintf(&indent, "%sk%d:\n", strings.Repeat(" ", i), i)
	}
	var wide strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&wide, "  k%d: x\n", i)
	}
	tests := []struct {
		name, doc, want string
	}{
		{"depth 100000", strings.Repeat("[", 100_000), "hostile.yaml:1:65: plan file nests deeper than 64 levels"},
		{"depth 20000", strings.Repeat("[", 20_000), "hostile.yaml:1:65: plan file nests deeper than 64 levels"},
		{"depth 20000 in a field", base + "labels: " + strings.Repeat("{a: ", 20_000), "hostile.yaml:5:261: plan file nests deeper than 64 levels"},
		{"block depth", indent.String(), "hostile.yaml:65:65: plan file nests deeper than 64 levels"},
		{"wide labels", base + "labels:\n" + wide.String(), "hostile.yaml:262:3: a mapping holds more than 256 keys"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := Parse("hostile.yaml", []byte(tt.doc))
			runtime.ReadMemStats(&after)
			var e *gpuwarden.Error
			if !errors.As(err, &e) || e.Code != gpuwarden.EInvalid {
				t.Fatalf("err = %v, want an EInvalid *gpuwarden.Error", err)
			}
			if e.Message != tt.want {
				t.Errorf("Message = %q, want %q", e.Message, tt.want)
			}
			if e.Hint == "" {
				t.Error("no hint")
			}
			if used := after.TotalAlloc - before.TotalAlloc; used > 100<<20 {
				t.Errorf("allocated %d MB reading it, want under 100 MB", used>>20)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name      string
		path      string
		wantError string // err.Error()
		wantHint  string
		notExist  bool
	}{
		{"missing file", filepath.Join(dir, "gpuwarden.yaml"),
			"cannot read plan file " + filepath.Join(dir, "gpuwarden.yaml") + ": no such file or directory",
			"create one with: gpuwarden init > gpuwarden.yaml", true},
		{"a directory", dir, "cannot read plan file " + dir + ": is a directory",
			"check the path and its permissions, or create one with: gpuwarden init > gpuwarden.yaml", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.path)
			var e *gpuwarden.Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v (%T), want *gpuwarden.Error", err, err)
			}
			if e.Code != gpuwarden.ENotFound {
				t.Errorf("Code = %q, want %q", e.Code, gpuwarden.ENotFound)
			}
			if err.Error() != tt.wantError {
				t.Errorf("Error() = %q, want %q", err.Error(), tt.wantError)
			}
			if e.Hint != tt.wantHint {
				t.Errorf("Hint = %q, want %q", e.Hint, tt.wantHint)
			}
			if got := errors.Is(err, fs.ErrNotExist); got != tt.notExist {
				t.Errorf("errors.Is(err, fs.ErrNotExist) = %v, want %v", got, tt.notExist)
			}
		})
	}
}

func TestLoadNamesThePath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plans", "team.yaml")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("workload:\n  kind: nope\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	want := path + `:2:9: workload.kind: "nope" is not a workload kind`
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}
}

// TestLibraryError covers the conversion of the YAML library's own decode
// errors, which the shape check normally pre-empts.
func TestLibraryError(t *testing.T) {
	file, err := parser.ParseBytes([]byte("limit: lots\n"), 0)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Limit int `yaml:"limit"`
	}
	decodeErr := yaml.NodeToValue(file.Docs[0].Body, &v, yaml.Strict())
	if decodeErr == nil {
		t.Fatal("decode succeeded; the test needs a library type error")
	}
	idx := index{"limit": {key: yamlerr.Pos{Line: 1, Col: 1}, val: yamlerr.Pos{Line: 1, Col: 8}}}
	tests := []struct {
		name string
		err  error
		idx  index
		want string
	}{
		{"type error, field known", decodeErr, idx,
			"lib.yaml:1:8: limit: cannot unmarshal string into Go struct field .Limit of type int"},
		{"type error, no index", decodeErr, nil,
			"lib.yaml:1:8: cannot unmarshal string into Go struct field .Limit of type int"},
		{"error without a token", errors.New("bad\namount"), idx, "lib.yaml:1:1: bad amount"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := libraryError("lib.yaml", tt.err, tt.idx)
			if e.Code != gpuwarden.EInvalid || e.Message != tt.want || e.Hint == "" {
				t.Errorf("got {%s %q %q}, want {invalid %q <a hint>}", e.Code, e.Message, e.Hint, tt.want)
			}
		})
	}
}

func TestIndexAt(t *testing.T) {
	idx := index{
		"workload":          {key: yamlerr.Pos{Line: 2, Col: 1}, val: yamlerr.Pos{Line: 2, Col: 1}},
		"workload.params_b": {key: yamlerr.Pos{Line: 3, Col: 3}, val: yamlerr.Pos{Line: 3, Col: 13}},
		"budget.x":          {key: yamlerr.Pos{Line: 9, Col: 3}, val: yamlerr.Pos{Line: 9, Col: 6}},
	}
	tests := []struct {
		path string
		want yamlerr.Pos
	}{
		{"workload.params_b", yamlerr.Pos{Line: 3, Col: 13}},       // the value itself
		{"workload.kind", yamlerr.Pos{Line: 2, Col: 1}},            // missing: its parent's key
		{"workload.throughput.unit", yamlerr.Pos{Line: 2, Col: 1}}, // missing two levels deep
		{"work_hours", yamlerr.Pos{Line: 1, Col: 1}},               // missing at the top: the document
		{"residency.countries[3]", yamlerr.Pos{Line: 1, Col: 1}},
	}
	for _, tt := range tests {
		if got := idx.at(tt.path); got != tt.want {
			t.Errorf("at(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
}

func TestParentPath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"a.b.c", "a.b"},
		{"a.b[2]", "a.b"},
		{"a", ""},
		{`rates."a.b"`, "rates"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := parentPath(tt.in); got != tt.want {
			t.Errorf("parentPath(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestWalkerKnowsEveryPlanType fails when a Plan field gains a Go type the
// shape check cannot read, before any user writes that field.
func TestWalkerKnowsEveryPlanType(t *testing.T) {
	if !walkable(planType) {
		for name, f := range structFields(planType) {
			if !walkable(f.Type) {
				t.Errorf("Plan field %s has type %s, which the shape check does not read", name, f.Type)
			}
		}
	}
	if walkable(reflect.TypeOf(struct{ C chan int }{})) {
		t.Error("walkable accepts a channel")
	}
}
