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
