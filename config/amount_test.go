package config

import (
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

// TestParseAmountErrors: the work stated as an amount is checked field by
// field, each error naming the file, line, column and field.
func TestParseAmountErrors(t *testing.T) {
	const pretrain = "workload:\n  kind: pretrain\n  params_b: 7\n"
	const infer = "workload:\n  kind: inference\n  params_b: 7\n"
	tests := []struct {
		name string
		doc  string
		want string // the exact Message
	}{
		{"negative tokens", pretrain + "  tokens_b: -1\n", "bad.yaml:4:13: workload.tokens_b: must be greater than 0"},
		{"zero tokens", pretrain + "  tokens_b: 0\n", "bad.yaml:4:13: workload.tokens_b: must be greater than 0"},
		{"epochs alone", pretrain + "  epochs: 3\n", "bad.yaml:4:11: workload.epochs: needs dataset_tokens_b"},
		{"samples alone", pretrain + "  samples: 1000\n", "bad.yaml:4:12: workload.samples: needs tokens_per_sample"},
		{"two amounts", pretrain + "  tokens_b: 2\n  epochs: 1\n  dataset_tokens_b: 1\n",
			"bad.yaml:4:13: workload.tokens_b: give one of tokens_b, epochs × dataset_tokens_b or samples × tokens_per_sample"},
		{"amount and work_hours", pretrain + "  tokens_b: 2\nwork_hours: 10\n",
			"bad.yaml:5:13: work_hours: give work_hours or the work as an amount, not both"},
		{"frames for a pretrain", pretrain + "  tokens_b: 2\n  frames: 10\n",
			"bad.yaml:5:11: workload.frames: does not apply to kind pretrain"},
		{"load without shape", infer + "  requests_per_second: 5\n", "bad.yaml:4:24: workload.requests_per_second: needs output_tokens"},
		{"latency without load", infer + "  tokens_per_second: 100\n  p95_latency_s: 2\n",
			"bad.yaml:5:18: workload.p95_latency_s: needs requests_per_second"},
		{"both loads", infer + "  requests_per_second: 5\n  prompt_tokens: 10\n  output_tokens: 10\n  tokens_per_second: 100\n",
			"bad.yaml:7:22: workload.tokens_per_second: give requests_per_second or tokens_per_second, not both"},
		{"mfu over 1", pretrain + "  tokens_b: 2\n  mfu: 1.5\n", "bad.yaml:5:8: workload.mfu: must be at most 1"},
		{"frames without reference", "workload:\n  kind: render\n  frames: 100\n  seconds_per_frame: 30\n",
			"bad.yaml:3:11: workload.frames: needs reference_gpu"},
		{"unknown reference", "workload:\n  kind: render\n  frames: 100\n  seconds_per_frame: 30\n  reference_gpu: GTX-9\n",
			`bad.yaml:5:18: workload.reference_gpu: "GTX-9" is not in the GPU datasheet`},
		{"bad deadline", pretrain + "  tokens_b: 2\ndeadline: soon\n", `bad.yaml:5:11: deadline: "soon" is not a deadline`},
		{"deadline without amount", "workload:\n  kind: notebook\nwork_hours: 5\ndeadline: 72h\n",
			"bad.yaml:4:11: deadline: needs the work as an amount"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(tt.doc))
			if err == nil {
				t.Fatal("parsed; want an error")
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("error\n got: %s\nwant: %s", got, tt.want)
			}
			if code := gpuwarden.ErrorCodeOf(err); code != gpuwarden.EInvalid {
				t.Errorf("code %v, want invalid (exit 2)", code)
			}
		})
	}
}

// TestParseAmounts: amounts stand in for work_hours, which stays the hours
// an inference load is served.
func TestParseAmounts(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want float64 // training tokens, 0 where the kind has none
	}{
		{"tokens", "workload:\n  kind: pretrain\n  params_b: 7\n  tokens_b: 20\n", 20e9},
		{"epochs", "workload:\n  kind: finetune-lora\n  params_b: 7\n  epochs: 3\n  dataset_tokens_b: 0.5\ndeadline: 2d\n", 1.5e9},
		{"samples", "workload:\n  kind: finetune-full\n  params_b: 1\n  samples: 1000\n  tokens_per_sample: 512\n", 512_000},
		{"load", "workload:\n  kind: inference\n  params_b: 7\n  requests_per_second: 2\n  prompt_tokens: 100\n  output_tokens: 50\nwork_hours: 200\n", 0},
		{"render", "workload:\n  kind: render\n  frames: 100\n  seconds_per_frame: 30\n  reference_gpu: RTX-4090\n", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse("ok.yaml", []byte(tt.doc))
			if err != nil {
				t.Fatalf("Parse: %v (hint: %s)", err, gpuwarden.ErrorHint(err))
			}
			if !p.Workload.HasAmount() {
				t.Errorf("no amount: %+v", p.Workload)
			}
			if got := p.Workload.TrainingTokens(); got != tt.want {
				t.Errorf("training tokens %v, want %v", got, tt.want)
			}
		})
	}
}

// TestParseDeadline: the spellings a deadline accepts.
func TestParseDeadline(t *testing.T) {
	tests := []struct {
		in   string
		want float64
		ok   bool
	}{
		{"72h", 72, true}, {"90m", 1.5, true}, {"10d", 240, true}, {"2w", 336, true}, {"1.5d", 36, true},
		{"0h", 0, false}, {"-3d", 0, false}, {"d", 0, false}, {"soon", 0, false}, {"infd", 0, false},
	}
	for _, tt := range tests {
		got, err := gpuwarden.ParseDeadline(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseDeadline(%q) = %v, %v; want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
		if err != nil && !strings.Contains(err.Error(), tt.in) {
			t.Errorf("error %q does not name the input", err)
		}
	}
}
