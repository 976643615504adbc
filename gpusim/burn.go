package gpusim

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// AllPatterns are the memory test patterns a burn-in runs when the request
// names none, in the order the real kernels run them.
var AllPatterns = []string{"zeros", "ones", "aa", "55", "walking-ones", "address", "random"}

// InjectedFaultOffset is where the word flipped by BurnRequest.InjectFault
// lands, so tests can look for it.
const InjectedFaultOffset = 0x100000

// badOffsets are where the badmem fault puts its errors: fixed, so that a
// report names the same offsets on every run.
func badOffsets(n uint64) []uint64 {
	out := []uint64{}
	for k := uint64(0); k < n && k < 16; k++ {
		switch k {
		case 0:
			out = append(out, 0x1f4000)
		case 1:
			out = append(out, 0x1f4004)
		default:
			out = append(out, 0x3e8000+(k-2)*0x1f4000)
		}
	}
	return out
}

// Burn simulates the GPU checks of a burn-in. The figures are realistic
// shares of the datasheet (device copy 0.84 × spec, FP32 0.86 × spec, the
// memory test at 0.75 × the copy rate, PCIe as in Probe), each phase sleeps
// a few milliseconds rather than the real minutes, and the planted faults
// badmem, throttle, slowbw and hang change what it finds.
func (s *Sim) Burn(ctx context.Context, req gpuwarden.BurnRequest) (gpuwarden.BurnResult, error) {
	if err := s.call(ctx, "cuInit"); err != nil {
		return gpuwarden.BurnResult{}, err
	}
	if err := s.index(req.Index); err != nil {
		return gpuwarden.BurnResult{}, err
	}
	s.setBusy(req.Index, +1)
	defer s.setBusy(req.Index, -1)
	if _, ok := s.spec.has(FaultHang, req.Index); ok {
		<-ctx.Done()
		return gpuwarden.BurnResult{}, fmt.Errorf("cuLaunchKernel: %w (simulated hang)", ctx.Err())
	}
	start := time.Now()
	pause := func(ms float64) error {
		return s.Sleep(ctx, time.Duration(ms*float64(time.Millisecond)))
	}

	// Memory test: fill and verify every pattern over the asked share of
	// the free memory.
	if err := pause(3); err != nil {
		return gpuwarden.BurnResult{}, err
	}
	frac := req.MemFraction
	if frac <= 0 || frac > 1 {
		frac = 0.95
	}
	free := s.gpu.VRAMGB * (1 << 30) * (1 - s.spec.LoadPercent/100)
	patterns := req.Patterns
	if len(patterns) == 0 {
		patterns = AllPatterns
	}
	bwFactor := 0.84
	if hasFault(s.spec, FaultSlowBW, req.Index) {
		// 0.72 of the datasheet is 80 % of the 0.9 × datasheet reference:
		// between the FAIL (75 %) and WARN (85 %) lines.
		bwFactor = 0.72
	}
	bw := s.gpu.MemBWTBs * 1000 * bwFactor
	mem := gpuwarden.MemTestResult{Bytes: uint64(free * frac), Patterns: slices.Clone(patterns), GBs: round1(bw * 0.75)}
	// Each pattern writes and reads the whole buffer once.
	mem.Seconds = round1(float64(mem.Bytes) * 2 * float64(len(patterns)) / (mem.GBs * 1e9))
	if req.InjectFault {
		mem.Errors++
		mem.BadOffsets = append(mem.BadOffsets, InjectedFaultOffset)
	}
	if f, ok := s.spec.has(FaultBadMem, req.Index); ok {
		mem.Errors += f.Value
		mem.BadOffsets = append(mem.BadOffsets, badOffsets(f.Value)...)
	}
	slices.Sort(mem.BadOffsets)
	if len(mem.BadOffsets) > 16 {
		mem.BadOffsets = mem.BadOffsets[:16]
	}

	// Bandwidth: timed device copies with the small spread of a real card.
	if err := pause(2); err != nil {
		return gpuwarden.BurnResult{}, err
	}
	runs := req.BandwidthRuns
	if runs <= 0 {
		runs = 5
	}
	r := gpuwarden.BurnResult{Index: req.Index, Mem: mem}
	for k := 0; k < runs; k++ {
		// ±1 %, fixed by the seed, so a test sees the same figures each time.
		jitter := float64(splitmix(req.Seed+uint64(req.Index)*1000+uint64(k))%2001)/100000 - 0.01
		r.BandwidthRuns = append(r.BandwidthRuns, round1(bw*(1+jitter)))
	}
	sorted := slices.Clone(r.BandwidthRuns)
	slices.Sort(sorted)
	r.BandwidthGBs = sorted[len(sorted)/2]

	// FP32 soak: a few milliseconds stand for the asked seconds, and the
	// result says how long the simulated soak was, not what was asked: a
	// 3 s simulated burn-in does not claim a 15 s soak.
	soakMS := math.Min(2+req.SoakSeconds/10, 20)
	if err := pause(soakMS); err != nil {
		return gpuwarden.BurnResult{}, err
	}
	soaked := soakMS / 1000
	fp32 := s.gpu.FP32TFLOPs * 0.86
	if hasFault(s.spec, FaultThrottle, req.Index) {
		// 0.8 lands between the FAIL and WARN lines: a hot card is a
		// warning, not a broken one.
		fp32 *= 0.8
	}
	r.FP32TFLOPs, r.SoakSeconds = round1(fp32), soaked

	// Pinned host↔device copies.
	if err := pause(1); err != nil {
		return gpuwarden.BurnResult{}, err
	}
	r.HostToDeviceGBs, r.DeviceToHostGBs = pcieGBs(s.info.pcieGen), round1(pcieGBs(s.info.pcieGen)*0.95)
	r.Seconds = time.Since(start).Seconds()
	return r, nil
}

// setBusy marks a burn starting (+1) or ending (−1) on GPU i; a card stays
// hot for two seconds after its last burn, so the sample taken right after
// one still sees the load's temperature.
func (s *Sim) setBusy(i, delta int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy == nil {
		s.busy, s.hotUntil = map[int]int{}, map[int]time.Time{}
	}
	s.busy[i] += delta
	if delta < 0 {
		s.hotUntil[i] = time.Now().Add(2 * time.Second)
	}
}

// loaded says whether a burn runs on GPU i now, and whether the card is
// still hot from one.
func (s *Sim) loaded(i int) (busy, hot bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	busy = s.busy[i] > 0
	return busy, busy || time.Now().Before(s.hotUntil[i])
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }

// splitmix is SplitMix64: a cheap, well-mixed hash of a counter.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

var _ gpuwarden.Burner = (*Sim)(nil)
