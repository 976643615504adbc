package gpuwarden

import (
	"math"
	"strings"
)

// Interconnect is how the GPUs of one box talk to each other; it sets how
// much of each added GPU a multi-GPU job keeps (ScalingEfficiency).
type Interconnect string

// The interconnects of the boxes clouds rent.
const (
	// LinkNVSwitch joins every GPU of the box at full NVLink bandwidth
	// (HGX/DGX SXM boards).
	LinkNVSwitch Interconnect = "nvswitch"
	// LinkNVLinkBridge joins cards in pairs with a bridge; pairs talk over PCIe.
	LinkNVLinkBridge Interconnect = "nvlink-bridge"
	// LinkPCIe is PCIe only: every all-reduce crosses the host's PCIe switches.
	LinkPCIe Interconnect = "pcie"
)

// Datasheet is what a GPU model can do, as its maker publishes it: dense
// tensor TFLOP/s per precision (without the 2:4 sparsity that datasheets
// print first), FP32 on the CUDA cores, memory bandwidth and the
// interconnect of the boxes it ships in. A zero TFLOP/s means the card has
// no such tensor path (a T4 has no bf16, an A100 no fp8).
type Datasheet struct {
	Model string
	BF16  float64
	FP16  float64
	FP8   float64
	FP32  float64
	// MemBWTBs is the memory bandwidth in TB/s (10^12 bytes per second).
	MemBWTBs float64
	Link     Interconnect
	// NVLinkGen is the NVLink generation, 0 for none.
	NVLinkGen int
	// Source names the datasheet each figure was copied from.
	Source string
}

// Datasheets is the GPU table the throughput model reads: one row per
// canonical model name (the catalog's names), each with its source. The
// catalog's gpus.csv adds memory and power for the cards burn-in and the
// simulator know, and takes every speed figure from here.
var Datasheets = []Datasheet{
	{Model: "B200", BF16: 2250, FP16: 2250, FP8: 4500, FP32: 75, MemBWTBs: 8, Link: LinkNVSwitch, NVLinkGen: 5,
		Source: "NVIDIA DGX B200 datasheet: 72 PFLOPS fp8 training and 64 TB/s HBM3e for 8 GPUs; dense is half the sparse figure"},
	{Model: "B300", BF16: 2250, FP16: 2250, FP8: 4500, FP32: 75, MemBWTBs: 8, Link: LinkNVSwitch, NVLinkGen: 5,
		Source: "NVIDIA DGX B300 datasheet: 72 PFLOPS fp8 training for 8 GPUs, as the DGX B200 (Blackwell Ultra adds fp4 and attention throughput, not bf16), HBM3e at 8 TB/s a GPU; dense is half the sparse figure"},
	{Model: "GB200", BF16: 2500, FP16: 2500, FP8: 5000, FP32: 75, MemBWTBs: 8, Link: LinkNVSwitch, NVLinkGen: 5,
		Source: "NVIDIA GB200 NVL72 specifications: FP16/BF16 360 PFLOPS, FP8 720 PFLOPS and HBM3e 576 TB/s for 72 Blackwell GPUs; dense is half the sparse figure; FP32 as the B200"},
	{Model: "GB300", BF16: 2500, FP16: 2500, FP8: 5000, FP32: 80, MemBWTBs: 8, Link: LinkNVSwitch, NVLinkGen: 5,
		Source: "NVIDIA GB300 NVL72 specifications: FP16/BF16 360 PFLOPS, FP8 720 PFLOPS and HBM3e 576 TB/s for 72 Blackwell Ultra GPUs; dense is half the sparse figure; FP32 80 TFLOPS per GPU (Verda's GB300 NVL72 architecture post)"},
	{Model: "H200", BF16: 989, FP16: 989, FP8: 1979, FP32: 67, MemBWTBs: 4.8, Link: LinkNVSwitch, NVLinkGen: 4,
		Source: "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column; dense is half the sparse figure"},
	{Model: "H200-NVL", BF16: 835, FP16: 835, FP8: 1671, FP32: 60, MemBWTBs: 4.8, Link: LinkNVLinkBridge, NVLinkGen: 4,
		Source: "NVIDIA H200 Tensor Core GPU datasheet, H200 NVL column; dense is half the sparse figure"},
	{Model: "GH200", BF16: 989, FP16: 989, FP8: 1979, FP32: 67, MemBWTBs: 4, Link: LinkNVSwitch, NVLinkGen: 4,
		Source: "NVIDIA GH200 Grace Hopper Superchip datasheet (96 GB HBM3 at 4 TB/s); dense is half the sparse figure"},
	{Model: "H100-SXM", BF16: 989, FP16: 989, FP8: 1979, FP32: 67, MemBWTBs: 3.35, Link: LinkNVSwitch, NVLinkGen: 4,
		Source: "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column; dense is half the sparse figure"},
	{Model: "H100-NVL", BF16: 835, FP16: 835, FP8: 1671, FP32: 60, MemBWTBs: 3.9, Link: LinkNVLinkBridge, NVLinkGen: 4,
		Source: "NVIDIA H100 Tensor Core GPU datasheet, H100 NVL column; dense is half the sparse figure"},
	{Model: "H100-PCIe", BF16: 756, FP16: 756, FP8: 1513, FP32: 51, MemBWTBs: 2, Link: LinkPCIe,
		Source: "NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe column; dense is half the sparse figure"},
	{Model: "A100-80GB", BF16: 312, FP16: 312, FP32: 19.5, MemBWTBs: 2.039, Link: LinkNVSwitch, NVLinkGen: 3,
		Source: "NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column (a form-less A100 is the SXM board clouds rent in 8s)"},
	{Model: "A100-80GB-SXM", BF16: 312, FP16: 312, FP32: 19.5, MemBWTBs: 2.039, Link: LinkNVSwitch, NVLinkGen: 3,
		Source: "NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column"},
	{Model: "A100-80GB-PCIe", BF16: 312, FP16: 312, FP32: 19.5, MemBWTBs: 1.935, Link: LinkPCIe,
		Source: "NVIDIA A100 Tensor Core GPU datasheet, A100 80GB PCIe column"},
	{Model: "A100-40GB", BF16: 312, FP16: 312, FP32: 19.5, MemBWTBs: 1.555, Link: LinkNVSwitch, NVLinkGen: 3,
		Source: "NVIDIA A100 Tensor Core GPU datasheet, A100 40GB column"},
	{Model: "A100-40GB-SXM", BF16: 312, FP16: 312, FP32: 19.5, MemBWTBs: 1.555, Link: LinkNVSwitch, NVLinkGen: 3,
		Source: "NVIDIA A100 Tensor Core GPU datasheet, A100 40GB SXM column"},
	{Model: "A100-40GB-PCIe", BF16: 312, FP16: 312, FP32: 19.5, MemBWTBs: 1.555, Link: LinkPCIe,
		Source: "NVIDIA A100 Tensor Core GPU datasheet, A100 40GB PCIe column"},
	{Model: "A800", BF16: 312, FP16: 312, FP32: 19.5, MemBWTBs: 2.039, Link: LinkNVSwitch, NVLinkGen: 3,
		Source: "NVIDIA A800 80GB datasheet (the A100 with NVLink cut to 400 GB/s)"},
	{Model: "L40S", BF16: 362, FP16: 362, FP8: 733, FP32: 91.6, MemBWTBs: 0.864, Link: LinkPCIe,
		Source: "NVIDIA L40S datasheet; dense is half the sparse figure"},
	{Model: "L40", BF16: 181, FP16: 181, FP8: 362, FP32: 90.5, MemBWTBs: 0.864, Link: LinkPCIe,
		Source: "NVIDIA L40 datasheet; dense is half the sparse figure"},
	{Model: "L4", BF16: 121, FP16: 121, FP8: 242, FP32: 30.3, MemBWTBs: 0.3, Link: LinkPCIe,
		Source: "NVIDIA L4 datasheet; dense is half the sparse figure"},
	{Model: "A10G", BF16: 125, FP16: 125, FP32: 31.2, MemBWTBs: 0.6, Link: LinkPCIe,
		Source: "NVIDIA A10 datasheet: AWS publishes no tensor figure for its A10G variant, so the A10's stands in"},
	{Model: "A10", BF16: 125, FP16: 125, FP32: 31.2, MemBWTBs: 0.6, Link: LinkPCIe,
		Source: "NVIDIA A10 datasheet; dense is half the sparse figure"},
	{Model: "A40", BF16: 149.7, FP16: 149.7, FP32: 37.4, MemBWTBs: 0.696, Link: LinkNVLinkBridge, NVLinkGen: 3,
		Source: "NVIDIA A40 datasheet; dense is half the sparse figure"},
	{Model: "A30", BF16: 165, FP16: 165, FP32: 10.3, MemBWTBs: 0.933, Link: LinkNVLinkBridge, NVLinkGen: 3,
		Source: "NVIDIA A30 datasheet; dense is half the sparse figure"},
	{Model: "T4", FP16: 65, FP32: 8.1, MemBWTBs: 0.32, Link: LinkPCIe,
		Source: "NVIDIA T4 datasheet: 65 TFLOP/s mixed fp16; Turing has no bf16"},
	{Model: "T4G", FP16: 65, FP32: 8.1, MemBWTBs: 0.32, Link: LinkPCIe,
		Source: "AWS EC2 G5g: NVIDIA T4G Tensor Core GPUs, the T4 (NVIDIA T4 datasheet: 65 TFLOP/s mixed fp16) for Graviton hosts; Turing has no bf16"},
	{Model: "RTX-6000", FP16: 130.5, FP32: 16.3, MemBWTBs: 0.672, Link: LinkPCIe,
		Source: "NVIDIA Quadro RTX 6000 datasheet: 130.5 TFLOP/s fp16 tensor, 16.3 TFLOP/s fp32, 672 GB/s GDDR6; Turing has no bf16"},
	{Model: "V100-32GB", FP16: 125, FP32: 15.7, MemBWTBs: 0.9, Link: LinkNVSwitch, NVLinkGen: 2,
		Source: "NVIDIA V100 datasheet, SXM2 column: 125 TFLOP/s fp16 tensor; Volta has no bf16"},
	{Model: "V100", FP16: 125, FP32: 15.7, MemBWTBs: 0.9, Link: LinkNVSwitch, NVLinkGen: 2,
		Source: "NVIDIA V100 datasheet, SXM2 column: 125 TFLOP/s fp16 tensor; Volta has no bf16"},
	{Model: "RTX-PRO-6000", BF16: 500, FP16: 500, FP8: 1000, FP32: 125, MemBWTBs: 1.792, Link: LinkPCIe,
		Source: "NVIDIA RTX PRO 6000 Blackwell (GTC 2025): 125 TFLOP/s fp32, 4,000 AI TOPS fp4 sparse, 96 GB GDDR7 at 1,792 GB/s; dense bf16 is an eighth of the fp4 sparse figure (sparse ÷ 2, then ÷ 2 per precision step, full-rate accumulate on the professional cards)"},
	{Model: "RTX-5090", BF16: 209.5, FP16: 209.5, FP8: 419, FP32: 104.8, MemBWTBs: 1.792, Link: LinkPCIe,
		Source: "NVIDIA RTX Blackwell GPU architecture whitepaper, GeForce RTX 5090 (fp32 accumulate, dense)"},
	{Model: "RTX-4090", BF16: 165.2, FP16: 165.2, FP8: 330.3, FP32: 82.6, MemBWTBs: 1.008, Link: LinkPCIe,
		Source: "NVIDIA Ada Lovelace architecture whitepaper, GeForce RTX 4090 (fp32 accumulate, dense)"},
	{Model: "RTX-3090", BF16: 71, FP16: 71, FP32: 35.6, MemBWTBs: 0.936, Link: LinkPCIe,
		Source: "NVIDIA Ampere GA102 whitepaper, GeForce RTX 3090 (fp32 accumulate, dense)"},
	{Model: "RTX-6000-ADA", BF16: 364.2, FP16: 364.2, FP8: 728.5, FP32: 91.1, MemBWTBs: 0.96, Link: LinkPCIe,
		Source: "NVIDIA RTX 6000 Ada Generation datasheet; dense is half the sparse figure"},
	{Model: "RTX-A6000", BF16: 154.8, FP16: 154.8, FP32: 38.7, MemBWTBs: 0.768, Link: LinkNVLinkBridge, NVLinkGen: 3,
		Source: "NVIDIA RTX A6000 datasheet; dense is half the sparse figure"},
	{Model: "RTX-A5000", BF16: 111.1, FP16: 111.1, FP32: 27.8, MemBWTBs: 0.768, Link: LinkNVLinkBridge, NVLinkGen: 3,
		Source: "NVIDIA RTX A5000 datasheet; dense is half the sparse figure"},
	{Model: "RTX-A4000", BF16: 76.7, FP16: 76.7, FP32: 19.2, MemBWTBs: 0.448, Link: LinkPCIe,
		Source: "NVIDIA RTX A4000 datasheet; dense is half the sparse figure"},
	{Model: "RTX-A2000", BF16: 32, FP16: 32, FP32: 8, MemBWTBs: 0.288, Link: LinkPCIe,
		Source: "NVIDIA RTX A2000 datasheet: 63.9 TFLOP/s tensor (sparse), 8.0 TFLOP/s fp32, 288 GB/s; dense is half the sparse figure"},
	{Model: "A16", BF16: 17.9, FP16: 17.9, FP32: 4.5, MemBWTBs: 0.2, Link: LinkPCIe,
		Source: "NVIDIA A16 datasheet: four GPUs a board, each 17.9 TFLOP/s fp16/bf16 tensor dense (35.9 sparse), 4.5 TFLOP/s fp32, 200 GB/s; clouds count each of the four as a GPU"},
	{Model: "A16-PCIE", BF16: 17.9, FP16: 17.9, FP32: 4.5, MemBWTBs: 0.2, Link: LinkPCIe,
		Source: "NVIDIA A16 datasheet (the A16 is a PCIe board): four GPUs a board, each 17.9 TFLOP/s fp16/bf16 tensor dense, 4.5 TFLOP/s fp32, 200 GB/s"},
	{Model: "RTX-3080", BF16: 59.5, FP16: 59.5, FP32: 29.8, MemBWTBs: 0.76, Link: LinkPCIe,
		Source: "NVIDIA Ampere GA102 whitepaper, GeForce RTX 3080 (fp32 accumulate, dense), 760 GB/s GDDR6X"},
	{Model: "RTX-3070", BF16: 40.6, FP16: 40.6, FP32: 20.3, MemBWTBs: 0.448, Link: LinkPCIe,
		Source: "NVIDIA Ampere GA102 whitepaper, GeForce RTX 3070 appendix (fp32 accumulate, dense), 448 GB/s GDDR6"},
	{Model: "RTX-3060", BF16: 25.4, FP16: 25.4, FP32: 12.7, MemBWTBs: 0.36, Link: LinkPCIe,
		Source: "GeForce RTX 3060 spec page (28 SMs at 1.78 GHz boost, 360 GB/s) × the GA102 whitepaper's per-SM tensor rate (RTX 3090: 71 TFLOP/s fp32-accumulate dense from 82 SMs at 1.70 GHz)"},
	{Model: "RTX-4070", BF16: 58.3, FP16: 58.3, FP8: 116.6, FP32: 29.1, MemBWTBs: 0.504, Link: LinkPCIe,
		Source: "GeForce RTX 4070 spec page (46 SMs at 2.48 GHz boost, 504 GB/s) × the Ada whitepaper's per-SM tensor rate (RTX 4090: 165.2 TFLOP/s fp32-accumulate dense from 128 SMs at 2.52 GHz)"},
	{Model: "RTX-4060", BF16: 30.2, FP16: 30.2, FP8: 60.4, FP32: 15.1, MemBWTBs: 0.272, Link: LinkPCIe,
		Source: "GeForce RTX 4060 spec page (24 SMs at 2.46 GHz boost, 272 GB/s) × the Ada whitepaper's per-SM tensor rate (RTX 4090: 165.2 TFLOP/s fp32-accumulate dense from 128 SMs at 2.52 GHz)"},
}

// DatasheetOf returns the datasheet of a canonical GPU model.
func DatasheetOf(model string) (Datasheet, bool) {
	for _, d := range Datasheets {
		if strings.EqualFold(d.Model, model) {
			return d, true
		}
	}
	return Datasheet{}, false
}

// PeakTFLOPs is the dense peak the work runs at for weights stored in p,
// and the precision the tensor cores really compute in: weight-only
// quantisation (int8, int4, nf4) dequantises to 16 bits for every matmul,
// fp8 falls back to 16 bits on cards without fp8, bf16 to fp16 on cards
// without bf16 (T4, V100). 0 means the card cannot run it at all.
func (d Datasheet) PeakTFLOPs(p Precision) (float64, Precision) {
	sixteen := func() (float64, Precision) {
		if d.BF16 > 0 {
			return d.BF16, BF16
		}
		return d.FP16, FP16
	}
	switch p {
	case FP32:
		return d.FP32, FP32
	case FP16:
		if d.FP16 > 0 {
			return d.FP16, FP16
		}
		return d.BF16, BF16
	case FP8:
		if d.FP8 > 0 {
			return d.FP8, FP8
		}
	}
	return sixteen()
}

// Per-doubling scaling factors: each doubling of the GPUs a data-parallel
// job spreads over keeps this share of the added GPUs' speed, because the
// gradient all-reduce grows with it. On NVSwitch the all-reduce hides
// behind the backward pass, so a box of eight scales linearly; a bridge
// and PCIe do not hide it. The figures and their sources are in
// docs/sizing.md ("Multi-GPU scaling").
const (
	ScalePerDoublingNVSwitch = 1.0
	ScalePerDoublingBridge   = 0.95
	ScalePerDoublingPCIe     = 0.90
	// ScalePerDoublingAcrossBoxes is each doubling of boxes over the
	// network (InfiniBand or RoCE at 200 Gb/s and up).
	ScalePerDoublingAcrossBoxes = 0.97
)

// ScalingEfficiency is the share of n GPUs' summed speed that a training
// job spread over them keeps on one box with the link: 1 for one GPU,
// ScalePerDoubling^log2(n) beyond. An NVLink bridge joins pairs only, so
// the first doubling is the bridge's and the rest cross PCIe.
func ScalingEfficiency(link Interconnect, n float64) float64 {
	if n <= 1 {
		return 1
	}
	doublings := math.Log2(n)
	switch link {
	case LinkNVSwitch:
		return math.Pow(ScalePerDoublingNVSwitch, doublings)
	case LinkNVLinkBridge:
		first := math.Min(doublings, 1)
		return math.Pow(ScalePerDoublingBridge, first) * math.Pow(ScalePerDoublingPCIe, doublings-first)
	}
	return math.Pow(ScalePerDoublingPCIe, doublings)
}

// Default model FLOPs utilisation (MFU): the share of the dense peak that
// published open training and serving runs reach. Each is cited in
// docs/sizing.md ("MFU defaults"); `mfu:` in the plan overrides it.
const (
	// MFUTrain16 is dense training in bf16/fp16.
	MFUTrain16 = 0.40
	// MFULoRA is LoRA fine-tuning: small matmuls of the adapters and the
	// frozen base's activation gradients run below the big GEMMs' rate.
	MFULoRA = 0.35
	// MFUQLoRA is QLoRA: every matmul dequantises NF4 weights first.
	MFUQLoRA = 0.25
	// MFUInference16 is prefill and compute-bound decode at 16 bits.
	MFUInference16 = 0.40
	// FP8MFUShare scales an MFU for fp8: fp8 kernels reach a smaller share
	// of their doubled peak.
	FP8MFUShare = 0.75
	// FP32MFU is CUDA-core fp32 training, which runs near the FMA peak's
	// share that 16-bit runs reach on tensor cores.
	FP32MFU = 0.40
	// DecodeBandwidthShare is the share of the memory bandwidth that
	// batch-1 decode reaches: the weights stream once per token.
	DecodeBandwidthShare = 0.77
)

// DefaultMFU is the MFU the model assumes for a kind computing in the given
// precision (the one PeakTFLOPs returns).
func DefaultMFU(k WorkloadKind, compute Precision) float64 {
	var m float64
	switch k {
	case KindFinetuneLoRA:
		m = MFULoRA
	case KindFinetuneQLoRA:
		m = MFUQLoRA
	case KindInference:
		m = MFUInference16
	default:
		m = MFUTrain16
	}
	switch compute {
	case FP8:
		m *= FP8MFUShare
	case FP32:
		m = FP32MFU
	}
	return m
}

// TrainingFLOPsPerParamToken is the compute of one token through one
// parameter: 6 for training every weight (2 forward, 4 backward; Kaplan et
// al. 2020, section 2.1), 4 when the base is frozen (LoRA, QLoRA): the
// backward pass still computes the activation gradients (2) but no weight
// gradients for the frozen weights.
func TrainingFLOPsPerParamToken(k WorkloadKind) float64 {
	if k == KindFinetuneLoRA || k == KindFinetuneQLoRA {
		return 4
	}
	return 6
}
