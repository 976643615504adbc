// Package plan sizes a workload, prices every catalog offer for a whole month
// and ranks them. It is pure: plan files and catalogs come in as root types,
// a Report goes out, and nothing here reads files, clocks or the network.
package plan

import (
	"fmt"
	"math"

	"github.com/gpuwarden/gpuwarden"
)

// Rules of thumb from docs/sizing.md; each is shown by --explain.
const (
	// inferenceOverhead is the ≈20 % that public calculators add to inference
	// weights (Hugging Face's estimator, citing EleutherAI).
	inferenceOverhead = 1.2
	// qloraBytesPerParam is NF4 with double quantisation: Llama-2-7B's
	// published 3.60 GB of weights over 6.74 B parameters is 0.534, rounded up.
	qloraBytesPerParam = 0.55
	// adapterBytesPerParam is mixed-precision Adam on each adapter weight.
	adapterBytesPerParam = 16
	// trainingActivationsGB is activation memory at batch 1 with gradient
	// checkpointing, fitted to the two published QLoRA points: a 7B peaks at
	// 12.31 GB, a 65B trains on one 48 GB card.
	trainingActivationsGB = 6
	notebookDefaultGB     = 16
	renderDefaultGB       = 24
)

// SizingLine is one term of the VRAM sum with the arithmetic behind it.
type SizingLine struct {
	Item    string  `json:"item"`
	GB      float64 `json:"gb"`
	Formula string  `json:"formula"`
}

// Sizing is the VRAM a workload needs and how that figure was reached.
type Sizing struct {
	NeedGB float64      `json:"need_gb"`
	Lines  []SizingLine `json:"lines"`
	// OneGPU is true when the work cannot be split over several cards.
	OneGPU bool     `json:"one_gpu"`
	Notes  []string `json:"notes,omitempty"`
}

// Size applies the rules of thumb to the workload. GB here is 10^9 bytes and
// cards are compared at their marketed size, which leaves a margin of about
// 7 % on cards whose "80 GB" is really 80 GiB.
func Size(w gpuwarden.Workload) (Sizing, error) {
	s := Sizing{OneGPU: !w.Kind.Shards()}
	if w.VRAMGB > 0 {
		s.add("stated need", w.VRAMGB, "workload.vram_gb")
		return s, nil
	}
	switch w.Kind {
	case gpuwarden.KindNotebook, gpuwarden.KindRender:
		if w.ParamsB == 0 {
			gb := float64(notebookDefaultGB)
			if w.Kind == gpuwarden.KindRender {
				gb = renderDefaultGB
			}
			s.add("default for "+string(w.Kind), gb, "no params_b or vram_gb given; set vram_gb to be exact")
			return s, nil
		}
		return s, s.inference(w)
	case gpuwarden.KindInference:
		return s, s.inference(w)
	case gpuwarden.KindFinetuneLoRA, gpuwarden.KindFinetuneQLoRA:
		return s, s.lora(w)
	case gpuwarden.KindFinetuneFull, gpuwarden.KindPretrain:
		return s, s.full(w)
	}
	return s, gpuwarden.Errorf(gpuwarden.EInvalid, "workload.kind: unknown kind %q", w.Kind)
}

func (s *Sizing) add(item string, gb float64, formula string) {
	s.Lines = append(s.Lines, SizingLine{Item: item, GB: round2(gb), Formula: formula})
	s.NeedGB = round2(s.NeedGB + round2(gb))
}

func (s *Sizing) inference(w gpuwarden.Workload) error {
	b, err := w.Precision.BytesPerParam()
	if err != nil {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "workload.precision: %v", err)
	}
	s.add("weights + 20% overhead", w.ParamsB*b*inferenceOverhead,
		fmt.Sprintf("%g B params × %g bytes (%s) × %g", w.ParamsB, b, w.Precision, inferenceOverhead))
	s.kvCache(w)
	return nil
}

// kvCache adds 2 × bytes × layers × kv_heads × head_dim × context × batch. The
// cache is kept in 16-bit even when weights are quantised, unless fp8/fp32.
func (s *Sizing) kvCache(w gpuwarden.Workload) {
	if w.Layers == 0 || w.KVHeads == 0 || w.HeadDim == 0 || w.Context == 0 {
		s.Notes = append(s.Notes, "KV cache not sized: give layers, kv_heads, head_dim and context to include it")
		return
	}
	el := 2.0
	switch w.Precision {
	case gpuwarden.FP32:
		el = 4
	case gpuwarden.FP8:
		el = 1
	}
	batch := max(w.Batch, 1)
	bytes := 2 * el * float64(w.Layers) * float64(w.KVHeads) * float64(w.HeadDim) * float64(w.Context) * float64(batch)
	s.add("KV cache", bytes/1e9, fmt.Sprintf("2 × %g bytes × %d layers × %d kv_heads × %d head_dim × %d context × %d batch",
		el, w.Layers, w.KVHeads, w.HeadDim, w.Context, batch))
}

func (s *Sizing) lora(w gpuwarden.Workload) error {
	if w.Kind == gpuwarden.KindFinetuneQLoRA {
		s.add("4-bit base weights", w.ParamsB*qloraBytesPerParam,
			fmt.Sprintf("%g B params × %g bytes (NF4 + double-quantisation constants)", w.ParamsB, qloraBytesPerParam))
	} else {
		b, err := w.Precision.BytesPerParam()
		if err != nil {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "workload.precision: %v", err)
		}
		s.add("frozen base weights", w.ParamsB*b, fmt.Sprintf("%g B params × %g bytes (%s)", w.ParamsB, b, w.Precision))
	}
	pct := w.AdapterPercent
	if pct == 0 {
		pct = 0.5
	}
	s.add("adapters + optimizer", w.ParamsB*pct/100*adapterBytesPerParam,
		fmt.Sprintf("%g B params × %g%% adapters × %d bytes (mixed-precision Adam)", w.ParamsB, pct, adapterBytesPerParam))
	s.activations(w)
	return nil
}

func (s *Sizing) full(w gpuwarden.Workload) error {
	per, why := 16.0, "2 bf16 weights + 2 grads + 12 fp32 master, m, v (ZeRO §3.2)"
	if w.Optimizer == "adamw-8bit" {
		per, why = 10, "2 weights + 2 grads + 6 of 8-bit AdamW state"
	}
	s.add("weights, grads, optimizer", w.ParamsB*per, fmt.Sprintf("%g B params × %g bytes: %s", w.ParamsB, per, why))
	s.activations(w)
	return nil
}

func (s *Sizing) activations(w gpuwarden.Workload) {
	if w.ActivationsGB > 0 {
		s.add("activations", w.ActivationsGB, "workload.activations_gb")
		return
	}
	batch := max(w.Batch, 1)
	s.add("activations", float64(trainingActivationsGB*batch),
		fmt.Sprintf("%d GB × batch %d (gradient checkpointing; set activations_gb to be exact)", trainingActivationsGB, batch))
}

// Fit is how one box meets the need.
type Fit struct {
	OK     bool
	Reason string
}

// FitsOffer says whether an offer's GPUs hold the need: all its cards
// together for work that shards, one card for work that does not.
func (s Sizing) FitsOffer(o gpuwarden.Offer) Fit {
	if s.OneGPU {
		if o.VRAMGBPerGPU*min(o.GPUCount, 1) >= s.NeedGB {
			return Fit{OK: true}
		}
		return Fit{Reason: fmt.Sprintf("too small: needs %s GB on one GPU, has %s", fmtGB(s.NeedGB), fmtGB(o.VRAMGBPerGPU*min(o.GPUCount, 1)))}
	}
	if o.VRAMGB() >= s.NeedGB {
		return Fit{OK: true}
	}
	return Fit{Reason: fmt.Sprintf("too small: needs %s GB, has %s", fmtGB(s.NeedGB), fmtGB(o.VRAMGB()))}
}

// Card is a count of one GPU model.
type Card struct {
	Count  int     `json:"count"`
	Model  string  `json:"model"`
	VRAMGB float64 `json:"vram_gb"`
}

// String prints "2× A100-80GB (160 GB)".
func (c Card) String() string {
	return fmt.Sprintf("%d× %s (%s GB)", c.Count, c.Model, fmtGB(float64(c.Count)*c.VRAMGB))
}

// SmallestCard picks the smallest single card that holds the need; when none
// does, the setup of 2, 4 or 8 cards of one model with the least total VRAM.
func (s Sizing) SmallestCard(gpus []gpuwarden.GPUSpec) (Card, bool) {
	counts := []int{1, 2, 4, 8}
	if s.OneGPU {
		counts = counts[:1]
	}
	for _, n := range counts {
		var best Card
		for _, g := range gpus {
			total := float64(n) * g.VRAMGB
			if total < s.NeedGB {
				continue
			}
			if best.Count == 0 || total < float64(n)*best.VRAMGB || (total == float64(n)*best.VRAMGB && g.Model < best.Model) {
				best = Card{Count: n, Model: g.Model, VRAMGB: g.VRAMGB}
			}
		}
		if best.Count > 0 {
			return best, true
		}
	}
	return Card{}, false
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }

func fmtGB(f float64) string { return fmt.Sprintf("%g", round2(f)) }
