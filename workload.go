package gpuwarden

import "fmt"

// WorkloadKind names what the GPU will do; sizing and the on-hours model
// depend on it.
type WorkloadKind string

// The workload kinds a plan file may name.
const (
	KindInference     WorkloadKind = "inference"
	KindFinetuneLoRA  WorkloadKind = "finetune-lora"
	KindFinetuneQLoRA WorkloadKind = "finetune-qlora"
	KindFinetuneFull  WorkloadKind = "finetune-full"
	KindPretrain      WorkloadKind = "pretrain"
	KindNotebook      WorkloadKind = "notebook"
	KindRender        WorkloadKind = "render"
)

// WorkloadKinds lists every valid kind, in the order help texts show them.
var WorkloadKinds = []WorkloadKind{KindInference, KindFinetuneLoRA, KindFinetuneQLoRA,
	KindFinetuneFull, KindPretrain, KindNotebook, KindRender}

// Valid reports whether k is one of WorkloadKinds.
func (k WorkloadKind) Valid() bool {
	for _, v := range WorkloadKinds {
		if v == k {
			return true
		}
	}
	return false
}

// Trains reports whether the kind keeps gradients and optimizer state.
func (k WorkloadKind) Trains() bool {
	switch k {
	case KindFinetuneLoRA, KindFinetuneQLoRA, KindFinetuneFull, KindPretrain:
		return true
	}
	return false
}

// Shards reports whether the kind's model can be split over several GPUs of
// one box (tensor or pipeline parallel); notebooks and renders need it on one.
func (k WorkloadKind) Shards() bool { return k != KindNotebook && k != KindRender }

// Precision is how model weights are stored.
type Precision string

// The precisions a plan file may name.
const (
	FP32 Precision = "fp32"
	BF16 Precision = "bf16"
	FP16 Precision = "fp16"
	FP8  Precision = "fp8"
	INT8 Precision = "int8"
	INT4 Precision = "int4"
	NF4  Precision = "nf4"
)

// Precisions lists every valid precision.
var Precisions = []Precision{FP32, BF16, FP16, FP8, INT8, INT4, NF4}

// BytesPerParam is the storage of one weight: fp32 4, fp16/bf16 2, int8/fp8 1,
// int4/nf4 0.5 (the figures Hugging Face accelerate's estimator uses).
func (p Precision) BytesPerParam() (float64, error) {
	switch p {
	case FP32:
		return 4, nil
	case BF16, FP16:
		return 2, nil
	case FP8, INT8:
		return 1, nil
	case INT4, NF4:
		return 0.5, nil
	}
	return 0, fmt.Errorf("unknown precision %q", p)
}

// Workload describes the job a GPU must hold in memory. Zero optional fields
// mean "not given"; sizing then uses the rules in docs and says so.
type Workload struct {
	Kind      WorkloadKind `yaml:"kind" json:"kind"`
	ParamsB   float64      `yaml:"params_b,omitempty" json:"params_b,omitempty"`
	Precision Precision    `yaml:"precision,omitempty" json:"precision,omitempty"`
	// KV cache shape; all four plus context and batch are needed to size it.
	Layers  int `yaml:"layers,omitempty" json:"layers,omitempty"`
	KVHeads int `yaml:"kv_heads,omitempty" json:"kv_heads,omitempty"`
	HeadDim int `yaml:"head_dim,omitempty" json:"head_dim,omitempty"`
	Context int `yaml:"context,omitempty" json:"context,omitempty"`
	Batch   int `yaml:"batch,omitempty" json:"batch,omitempty"`
	// Optimizer is adamw (16 bytes/param with mixed precision) or adamw-8bit.
	Optimizer string `yaml:"optimizer,omitempty" json:"optimizer,omitempty"`
	// AdapterPercent is LoRA adapter parameters as a percentage of the model.
	AdapterPercent float64 `yaml:"adapter_percent,omitempty" json:"adapter_percent,omitempty"`
	// ActivationsGB overrides the activation-memory rule of thumb.
	ActivationsGB float64 `yaml:"activations_gb,omitempty" json:"activations_gb,omitempty"`
	// VRAMGB states the need outright and skips the formulas.
	VRAMGB float64 `yaml:"vram_gb,omitempty" json:"vram_gb,omitempty"`
	// Throughput, when given, prices one result (an epoch, 1,000 requests).
	Throughput *Throughput `yaml:"throughput,omitempty" json:"throughput,omitempty"`

	// The work as an amount (docs/sizing.md): plan then prices the hours
	// each box needs to finish it, not a fixed number of hours.

	// TokensB is the training tokens in billions.
	TokensB float64 `yaml:"tokens_b,omitempty" json:"tokens_b,omitempty"`
	// Epochs over DatasetTokensB (billions of tokens per epoch).
	Epochs         float64 `yaml:"epochs,omitempty" json:"epochs,omitempty"`
	DatasetTokensB float64 `yaml:"dataset_tokens_b,omitempty" json:"dataset_tokens_b,omitempty"`
	// Samples × TokensPerSample is the training tokens, for datasets
	// counted in examples (TokensPerSample is the mean, padding included).
	Samples         float64 `yaml:"samples,omitempty" json:"samples,omitempty"`
	TokensPerSample float64 `yaml:"tokens_per_sample,omitempty" json:"tokens_per_sample,omitempty"`
	// RequestsPerSecond with PromptTokens and OutputTokens per request is
	// an inference load; TokensPerSecond (generated) is one without a
	// request shape.
	RequestsPerSecond float64 `yaml:"requests_per_second,omitempty" json:"requests_per_second,omitempty"`
	PromptTokens      float64 `yaml:"prompt_tokens,omitempty" json:"prompt_tokens,omitempty"`
	OutputTokens      float64 `yaml:"output_tokens,omitempty" json:"output_tokens,omitempty"`
	TokensPerSecond   float64 `yaml:"tokens_per_second,omitempty" json:"tokens_per_second,omitempty"`
	// P95LatencySeconds caps a request's time, prefill plus decode; the
	// batch is cut until a card meets it.
	P95LatencySeconds float64 `yaml:"p95_latency_s,omitempty" json:"p95_latency_s,omitempty"`
	// Frames × SecondsPerFrame on the card ReferenceGPU is a render job.
	Frames          float64 `yaml:"frames,omitempty" json:"frames,omitempty"`
	SecondsPerFrame float64 `yaml:"seconds_per_frame,omitempty" json:"seconds_per_frame,omitempty"`
	ReferenceGPU    string  `yaml:"reference_gpu,omitempty" json:"reference_gpu,omitempty"`
	// MFU overrides the model FLOPs utilisation default (DefaultMFU).
	MFU float64 `yaml:"mfu,omitempty" json:"mfu,omitempty"`
}

// TrainingTokens is the training amount in tokens: tokens_b, epochs ×
// dataset_tokens_b, or samples × tokens_per_sample; 0 when none is given.
func (w *Workload) TrainingTokens() float64 {
	switch {
	case w.TokensB > 0:
		return w.TokensB * 1e9
	case w.Epochs > 0 && w.DatasetTokensB > 0:
		return w.Epochs * w.DatasetTokensB * 1e9
	case w.Samples > 0 && w.TokensPerSample > 0:
		return w.Samples * w.TokensPerSample
	}
	return 0
}

// HasAmount reports whether the work is stated as an amount that plan can
// turn into hours per card; without one, work_hours holds on every card.
func (w *Workload) HasAmount() bool {
	switch {
	case w.Kind.Trains():
		return w.TrainingTokens() > 0
	case w.Kind == KindInference:
		return w.RequestsPerSecond > 0 || w.TokensPerSecond > 0
	case w.Kind == KindRender:
		return w.Frames > 0 && w.SecondsPerFrame > 0
	}
	return false
}

// Throughput is how many results one box produces per working hour.
type Throughput struct {
	// Unit names one result: "epoch", "1k requests", "frame".
	Unit string `yaml:"unit" json:"unit"`
	// PerHour applies to every offer without a more specific figure.
	PerHour float64 `yaml:"per_hour,omitempty" json:"per_hour,omitempty"`
	// PerHourByGPU overrides PerHour for a GPU model (canonical name, per box).
	PerHourByGPU map[string]float64 `yaml:"per_hour_by_gpu,omitempty" json:"per_hour_by_gpu,omitempty"`
}

// For returns the results per hour for a box with the given GPU model, or 0.
func (t *Throughput) For(gpu string) float64 {
	if t == nil {
		return 0
	}
	if v, ok := t.PerHourByGPU[gpu]; ok {
		return v
	}
	return t.PerHour
}
