package plan

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// The bases of a box's hours: where the figure came from.
const (
	// BasisWorkHours: the plan states work_hours, the same on every card.
	BasisWorkHours = "work_hours"
	// BasisModel: the throughput model (datasheet × MFU × scaling).
	BasisModel = "model"
	// BasisThroughput: the plan's throughput.per_hour(_by_gpu) figure.
	BasisThroughput = "throughput"
	// BasisMeasured: a run's recorded progress on this card and count.
	BasisMeasured = "measured"
	// BasisMeasuredScaled: a run's progress on another card or count,
	// scaled by the model's ratio between the two.
	BasisMeasuredScaled = "measured-scaled"
)

// Measurement is a throughput a run recorded (`gpuwarden progress` with
// --gpu): Unit per box hour on GPUs × GPU, over the span ending At.
type Measurement struct {
	GPU     string    `json:"gpu"`
	GPUs    float64   `json:"gpus"`
	Unit    string    `json:"unit"`
	PerHour float64   `json:"per_hour"`
	At      time.Time `json:"at"`
	// Source names where it was read: the ledger file.
	Source string `json:"source"`
}

// Inputs are what Rank reads besides the plan and the catalog.
type Inputs struct {
	// Measured are throughputs recorded by runs; the newest per card wins.
	Measured []Measurement
}

// Speed is how long one box takes to finish the plan's work, worked out
// once per GPU model and count, never per offer.
type Speed struct {
	// GPU and GPUs name the box; empty with work_hours, which holds on any.
	GPU  string  `json:"gpu,omitempty"`
	GPUs float64 `json:"gpus,omitempty"`
	// vram is the memory of one GPU, GB.
	vram float64
	// Hours is the box hours to finish the work; for an inference load,
	// the box hours to serve it (serving hours × Replicas).
	Hours float64 `json:"work_hours"`
	// Basis is one of the Basis constants; Detail says it in words.
	Basis  string `json:"basis"`
	Detail string `json:"detail"`
	// PerBoxHour is the results one box makes per hour, in Unit.
	PerBoxHour float64 `json:"per_box_hour,omitempty"`
	Unit       string  `json:"unit,omitempty"`
	// The model's terms, for --explain.
	PeakTFLOPs float64             `json:"peak_tflops_per_gpu,omitempty"`
	Compute    gpuwarden.Precision `json:"compute_precision,omitempty"`
	MFU        float64             `json:"mfu,omitempty"`
	Scaling    float64             `json:"scaling,omitempty"`
	Link       string              `json:"interconnect,omitempty"`
	// Inference: boxes the load needs, the batch per replica, the decode
	// rate of one box and a request's modelled latency.
	Replicas       int     `json:"replicas,omitempty"`
	Batch          int     `json:"batch,omitempty"`
	DecodeTokensPS float64 `json:"decode_tokens_per_s,omitempty"`
	LatencyS       float64 `json:"latency_s,omitempty"`
	// MeasuredAt is when the measurement behind a measured basis ended.
	MeasuredAt *time.Time `json:"measured_at,omitempty"`
	// unknown says why no figure could be made; the box is left out.
	unknown string
	hours   hoursModel
}

// speedKey is what a box's speed depends on.
type speedKey struct {
	gpu         string
	count, vram float64
}

// amount is the plan's work in the units the model counts.
type amount struct {
	tokens   float64 // training
	frames   float64 // render
	rps, tps float64 // inference load
	serving  float64 // inference hours served
	text     string  // the amount in words
	unit     string  // one result, for cost per result
	results  float64 // results in the whole work
}

func newAmount(p *gpuwarden.Plan) (amount, bool) {
	w := &p.Workload
	if !w.HasAmount() {
		return amount{}, false
	}
	a := amount{}
	switch {
	case w.Kind.Trains():
		a.tokens = w.TrainingTokens()
		switch {
		case w.TokensB > 0:
			a.text = fmt.Sprintf("%s B tokens", trim(w.TokensB))
			a.unit, a.results = "1B tokens", w.TokensB
		case w.Epochs > 0:
			a.text = fmt.Sprintf("%s epochs × %s B tokens", trim(w.Epochs), trim(w.DatasetTokensB))
			a.unit, a.results = "epoch", w.Epochs
		default:
			a.text = fmt.Sprintf("%s samples × %s tokens", trim(w.Samples), trim(w.TokensPerSample))
			a.unit, a.results = "1k samples", w.Samples/1000
		}
	case w.Kind == gpuwarden.KindRender:
		a.frames = w.Frames
		a.text = fmt.Sprintf("%s frames × %s s on a %s", trim(w.Frames), trim(w.SecondsPerFrame), w.ReferenceGPU)
		a.unit, a.results = "frame", w.Frames
	default:
		a.serving = p.WorkHours
		if a.serving <= 0 {
			a.serving = p.HoursPerMonth
		}
		if w.RequestsPerSecond > 0 {
			a.rps = w.RequestsPerSecond
			a.text = fmt.Sprintf("%s requests/s (%s prompt + %s output tokens) for %s h", trim(w.RequestsPerSecond),
				trim(w.PromptTokens), trim(w.OutputTokens), trim(a.serving))
			a.unit, a.results = "1k requests", a.rps*3600*a.serving/1000
		} else {
			a.tps = w.TokensPerSecond
			a.text = fmt.Sprintf("%s generated tokens/s for %s h", trim(w.TokensPerSecond), trim(a.serving))
			a.unit, a.results = "1M tokens", a.tps*3600*a.serving/1e6
		}
	}
	return a, true
}

func trim(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// speedModel works out Speeds for one plan.
type speedModel struct {
	p        *gpuwarden.Plan
	amount   amount
	has      bool
	measured []Measurement
}

// speed is the box's Speed for the plan.
func (m *speedModel) speed(k speedKey) *Speed {
	s := &Speed{GPU: k.gpu, GPUs: k.count, vram: k.vram}
	switch {
	case !m.has:
		s.Hours, s.Basis = m.p.WorkHours, BasisWorkHours
		s.Detail = "work_hours: the same hours on every card (the plan states no amount of work, so speed is ignored)"
	case m.fromThroughput(s):
	case m.fromMeasurement(s):
	default:
		m.fromModel(s)
	}
	if s.unknown == "" {
		s.Hours = roundHours(s.Hours)
		if s.Hours <= 0 {
			s.unknown = "the work takes no time on this box"
		}
		s.hours = newHoursModel(m.p, s.Hours, m.has)
	}
	return s
}

// fromThroughput applies the plan's throughput figure when its unit is the
// amount's: it wins over the model and any measurement.
func (m *speedModel) fromThroughput(s *Speed) bool {
	t := m.p.Workload.Throughput
	per := t.For(s.GPU)
	if per <= 0 {
		return false
	}
	need, ok := m.amountIn(t.Unit)
	if !ok {
		return false
	}
	s.Basis, s.PerBoxHour, s.Unit = BasisThroughput, per, t.Unit
	if m.amount.rps > 0 || m.amount.tps > 0 {
		// A load: per_hour is what one box serves, so the load needs
		// this many boxes for the serving hours.
		s.Replicas = int(math.Ceil(need/m.amount.serving/per - 1e-9))
		s.Hours = float64(s.Replicas) * m.amount.serving
		s.Detail = fmt.Sprintf("throughput: %s %s per box hour; the load needs %d box(es)", trim(per), t.Unit, s.Replicas)
		return true
	}
	s.Hours = need / per
	s.Detail = fmt.Sprintf("throughput: %s %s per box hour (the plan's figure wins over the model)", trim(per), t.Unit)
	return true
}

// amountIn is the whole work counted in a throughput unit, when the unit
// is one the amount can be counted in.
func (m *speedModel) amountIn(unit string) (float64, bool) {
	u := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(unit)), "s")
	w := &m.p.Workload
	a := m.amount
	switch u {
	case "epoch":
		return w.Epochs, w.Epochs > 0
	case "frame":
		return a.frames, a.frames > 0
	case "token":
		return a.tokens, a.tokens > 0
	case "1b token", "b token", "billion token":
		return a.tokens / 1e9, a.tokens > 0
	case "sample":
		return w.Samples, w.Samples > 0 && a.tokens > 0
	case "1k request", "k request", "thousand request":
		return a.rps * 3.6 * a.serving, a.rps > 0
	case "request":
		return a.rps * 3600 * a.serving, a.rps > 0
	}
	return 0, false
}

// measurementUnit is the progress unit a measurement must be in to stand
// for the plan's work: tokens for training, frames for renders. Served
// requests measure the load that came, not what the box could serve, so
// inference is not calibrated from them.
func (m *speedModel) measurementUnit() string {
	switch {
	case m.amount.tokens > 0:
		return "tokens"
	case m.amount.frames > 0:
		return "frames"
	}
	return ""
}

// fromMeasurement applies the newest measurement on the same card (and the
// nearest count), or else the newest on any card scaled by the model's
// ratio between the two boxes.
func (m *speedModel) fromMeasurement(s *Speed) bool {
	unit := m.measurementUnit()
	if unit == "" {
		return false
	}
	var same, any *Measurement
	for i := range m.measured {
		x := &m.measured[i]
		if x.Unit != unit || x.PerHour <= 0 {
			continue
		}
		if any == nil || x.At.After(any.At) {
			any = x
		}
		if strings.EqualFold(x.GPU, s.GPU) {
			if same == nil || math.Abs(x.GPUs-s.GPUs) < math.Abs(same.GPUs-s.GPUs) ||
				(x.GPUs == same.GPUs && x.At.After(same.At)) {
				same = x
			}
		}
	}
	ref := same
	if ref == nil {
		ref = any
	}
	if ref == nil {
		return false
	}
	total := m.amount.tokens
	if unit == "frames" {
		total = m.amount.frames
	}
	at := ref.At
	s.MeasuredAt, s.Unit = &at, unit
	when := ref.At.UTC().Format("2006-01-02 15:04 UTC")
	if strings.EqualFold(ref.GPU, s.GPU) && ref.GPUs == s.GPUs {
		s.Basis, s.PerBoxHour = BasisMeasured, ref.PerHour
		s.Hours = total / ref.PerHour
		s.Detail = fmt.Sprintf("measured: %s %s per box hour on %s× %s, recorded %s (%s)", fmtRate(ref.PerHour), unit, trim(ref.GPUs), ref.GPU, when, ref.Source)
		return true
	}
	mine, there := m.modelRate(s.GPU, s.GPUs, s.vram), m.modelRate(ref.GPU, ref.GPUs, s.vram)
	if mine <= 0 || there <= 0 {
		return false
	}
	m.fromModel(s) // for the model's terms in --explain
	s.Basis, s.PerBoxHour, s.Unit = BasisMeasuredScaled, ref.PerHour*mine/there, unit
	s.Hours = total / s.PerBoxHour
	s.Detail = fmt.Sprintf("measured: %s %s per box hour on %s× %s, recorded %s (%s), × %.3g (the model's ratio of this box to that one)",
		fmtRate(ref.PerHour), unit, trim(ref.GPUs), ref.GPU, when, ref.Source, mine/there)
	return true
}

// modelRate is the model's results per box hour: tokens for training,
// frames for renders; 0 when the card is unknown.
func (m *speedModel) modelRate(gpu string, count, vram float64) float64 {
	s := &Speed{GPU: gpu, GPUs: count, vram: vram}
	m.fromModel(s)
	if s.unknown != "" {
		return 0
	}
	return s.PerBoxHour
}

// fromModel fills the speed from the datasheet.
func (m *speedModel) fromModel(s *Speed) {
	ds, ok := gpuwarden.DatasheetOf(s.GPU)
	if !ok {
		s.unknown = "no datasheet for " + s.GPU + ": add throughput.per_hour_by_gpu for it to the plan"
		return
	}
	s.Basis, s.Link = BasisModel, string(ds.Link)
	switch {
	case m.amount.tokens > 0:
		m.training(s, ds)
	case m.amount.frames > 0:
		m.render(s, ds)
	default:
		m.inference(s, ds)
	}
}

// gpusUsed is the GPU count as a number of whole cards for scaling, and the
// share of one card for a fractional offer.
func gpusUsed(count float64) float64 { return math.Max(count, 0) }

// mfu is the plan's override or the default for the kind and precision.
func (m *speedModel) mfu(compute gpuwarden.Precision) float64 {
	if v := m.p.Workload.MFU; v > 0 {
		return v
	}
	return gpuwarden.DefaultMFU(m.p.Workload.Kind, compute)
}

// training: FLOPs = factor × params × tokens over n × peak × MFU × scaling.
func (m *speedModel) training(s *Speed, ds gpuwarden.Datasheet) {
	w := &m.p.Workload
	peak, compute := ds.PeakTFLOPs(w.Precision)
	if peak <= 0 || w.ParamsB <= 0 {
		s.unknown = fmt.Sprintf("%s has no %s throughput figure", s.GPU, w.Precision)
		return
	}
	n := gpusUsed(s.GPUs)
	s.PeakTFLOPs, s.Compute, s.MFU = peak, compute, m.mfu(compute)
	s.Scaling = gpuwarden.ScalingEfficiency(ds.Link, n)
	factor := gpuwarden.TrainingFLOPsPerParamToken(w.Kind)
	tokensPerSecond := n * peak * 1e12 * s.MFU * s.Scaling / (factor * w.ParamsB * 1e9)
	s.PerBoxHour, s.Unit = tokensPerSecond*3600, "tokens"
	s.Hours = m.amount.tokens / s.PerBoxHour
	s.Detail = fmt.Sprintf("model: %g × %s B params × %s tokens / (%s × %s TFLOP/s %s × MFU %.2f × scaling %.3f) = %s tokens/s",
		factor, trim(w.ParamsB), fmtRate(m.amount.tokens), trim(n), trim(peak), compute, s.MFU, s.Scaling, fmtRate(tokensPerSecond))
}

// render: frames scale with FP32 throughput from the reference card, and
// independent frames scale linearly over a box's GPUs.
func (m *speedModel) render(s *Speed, ds gpuwarden.Datasheet) {
	w := &m.p.Workload
	ref, ok := gpuwarden.DatasheetOf(w.ReferenceGPU)
	if !ok || ref.FP32 <= 0 || ds.FP32 <= 0 {
		s.unknown = "no FP32 figure for " + s.GPU + " or the reference " + w.ReferenceGPU
		return
	}
	n := gpusUsed(s.GPUs)
	secs := w.SecondsPerFrame * ref.FP32 / ds.FP32
	s.PeakTFLOPs, s.Compute, s.Scaling = ds.FP32, gpuwarden.FP32, 1
	s.PerBoxHour, s.Unit = n*3600/secs, "frames"
	s.Hours = m.amount.frames / s.PerBoxHour
	s.Detail = fmt.Sprintf("model: %s s a frame on a %s × %s/%s FP32 TFLOP/s = %.3g s a frame on each of %s GPUs",
		trim(w.SecondsPerFrame), w.ReferenceGPU, trim(ref.FP32), trim(ds.FP32), secs, trim(n))
}

// inferenceTerms are one replica's figures.
type inferenceTerms struct {
	weights, kvPerToken float64 // bytes
	ctx                 float64 // mean tokens held per sequence
	bw, flops           float64 // bytes/s and FLOP/s of the replica, efficiencies applied
	prefillPerRequest   float64 // seconds
}

func (t inferenceTerms) step(batch float64, params float64) float64 {
	mem := (t.weights + batch*t.kvPerToken*t.ctx) / t.bw
	compute := 2 * params * batch / t.flops
	return math.Max(mem, compute)
}

// inference: decode streams the weights and every sequence's KV cache once
// per generated token (bandwidth-bound at small batches), prefill is
// compute-bound; a replica takes the fewest cards of the box that hold the
// model, and the box runs as many replicas as it has room for.
func (m *speedModel) inference(s *Speed, ds gpuwarden.Datasheet) {
	w := &m.p.Workload
	a := m.amount
	peak, compute := ds.PeakTFLOPs(w.Precision)
	bpp, err := w.Precision.BytesPerParam()
	if peak <= 0 || err != nil || w.ParamsB <= 0 || ds.MemBWTBs <= 0 {
		s.unknown = fmt.Sprintf("%s has no %s throughput figure", s.GPU, w.Precision)
		return
	}
	vram := s.vram
	params := w.ParamsB * 1e9
	t := inferenceTerms{weights: params * bpp}
	kvBytes := 2.0
	if w.Precision == gpuwarden.FP8 {
		kvBytes = 1
	}
	if w.Layers > 0 && w.KVHeads > 0 && w.HeadDim > 0 {
		t.kvPerToken = 2 * float64(w.Layers*w.KVHeads*w.HeadDim) * kvBytes
	}
	t.ctx = a.meanContext(w)
	n := gpusUsed(s.GPUs)
	k := 1.0 // cards per replica
	if vram > 0 {
		for k < n && t.weights*inferenceOverhead > k*vram*1e9 {
			k *= 2
		}
		k = math.Min(k, math.Max(n, 1))
	}
	replicasPerBox := math.Max(math.Floor(n/k), 1)
	if n < 1 {
		replicasPerBox = n // a share of one card
	}
	s.Scaling = gpuwarden.ScalingEfficiency(ds.Link, k)
	s.PeakTFLOPs, s.Compute, s.MFU = peak, compute, m.mfu(compute)
	t.bw = k * ds.MemBWTBs * 1e12 * gpuwarden.DecodeBandwidthShare * s.Scaling
	t.flops = k * peak * 1e12 * s.MFU * s.Scaling
	t.prefillPerRequest = 2 * params * w.PromptTokens / t.flops
	batch := float64(w.Batch)
	if batch <= 0 {
		batch = maxInferenceBatch
		if t.kvPerToken > 0 && vram > 0 {
			free := k*vram*1e9*0.9 - t.weights
			batch = math.Min(math.Floor(free/(t.kvPerToken*t.ctx)), maxInferenceBatch)
		}
	}
	if batch < 1 {
		s.unknown = "no room for the KV cache of one sequence next to the weights"
		return
	}
	out := math.Max(w.OutputTokens, 1)
	latency := func(b float64) float64 { return b*t.prefillPerRequest + out*t.step(b, params) }
	if target := w.P95LatencySeconds; target > 0 {
		for batch > 1 && latency(batch) > target {
			batch = math.Floor(batch / 2)
		}
		if latency(batch) > target {
			s.unknown = fmt.Sprintf("a request takes %.3g s on %s× %s even alone, over the %s s p95 target", latency(batch), trim(k), s.GPU, trim(target))
			return
		}
	}
	s.Batch = int(batch)
	s.LatencyS = math.Round(latency(batch)*1000) / 1000
	perReplicaTPS := batch / t.step(batch, params) // decode tokens/s
	s.DecodeTokensPS = math.Round(perReplicaTPS * replicasPerBox)
	var perBoxPerSecond, load float64
	if a.rps > 0 {
		perBoxPerSecond = replicasPerBox * batch / latency(batch) // requests/s
		load = a.rps
		s.Unit = "requests"
	} else {
		perBoxPerSecond = replicasPerBox * perReplicaTPS
		load = a.tps
		s.Unit = "tokens"
	}
	s.PerBoxHour = perBoxPerSecond * 3600
	s.Replicas = int(math.Ceil(load/perBoxPerSecond - 1e-9))
	s.Hours = float64(s.Replicas) * a.serving
	s.Detail = fmt.Sprintf("model: %s replica(s) of %s GPU(s) a box, batch %d, decode %s tokens/s a box "+
		"(bandwidth %s TB/s × %.2f, compute %s TFLOP/s %s × MFU %.2f), %.3g s a request → %d box(es) for the load",
		trim(replicasPerBox), trim(k), s.Batch, fmtRate(s.DecodeTokensPS), trim(ds.MemBWTBs), gpuwarden.DecodeBandwidthShare,
		trim(peak), compute, s.MFU, s.LatencyS, s.Replicas)
}

// maxInferenceBatch caps the concurrent sequences of one replica: serving
// engines schedule at most a few hundred (vLLM's default max_num_seqs is 256).
const maxInferenceBatch = 256

// meanContext is the mean tokens a sequence holds while it decodes: the
// prompt and half the output, else half the context window.
func (a amount) meanContext(w *gpuwarden.Workload) float64 {
	if w.PromptTokens > 0 || w.OutputTokens > 0 {
		return w.PromptTokens + w.OutputTokens/2
	}
	if w.Context > 0 {
		return float64(w.Context) / 2
	}
	return 1024
}

// fmtRate writes a large rate with thousands grouped: 1,234,567.
func fmtRate(f float64) string {
	if f >= 1e15 || f != f {
		return fmt.Sprintf("%.3g", f)
	}
	if f < 100 {
		return strconv.FormatFloat(math.Round(f*10)/10, 'f', -1, 64)
	}
	return gpuwarden.GroupDigits(int64(math.Round(f)))
}
