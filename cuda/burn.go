package cuda

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/gpuwarden/gpuwarden"
)

var _ gpuwarden.Burner = (*Driver)(nil)

// Burn-in defaults and sizes.
const (
	defaultMemFraction   = 0.95 // a full run's share of free memory
	defaultBandwidthRuns = 9
	defaultSoakSeconds   = 10.0
	soakWarmup           = time.Second // lets the SM clock climb from idle (405 → 1980 MHz on an H200)
	bandwidthWarmups     = 2
	// soakIters is gw_fma's loop count per launch: about 1.2 ms on an
	// H200's 1,056 × 256 threads, long enough to hide launch overhead,
	// short enough that the chains have not yet contracted to their fixed
	// point, so each thread's result still depends on its own start value.
	soakIters = 4096
	// soakBatch launches run back to back into separate output slices
	// before the host syncs and checks them all.
	soakBatch = 32
	// maxChunks bounds the memory test's allocations and its stats block.
	maxChunks = 1024
	// faultWord is the word of the first chunk that InjectFault corrupts
	// (byte offset 4096*4+12): past the first page, not word-aligned to a
	// 16-byte vector, so an off-by-one in the offset arithmetic shows.
	faultWord = 4096 + 3
)

// Chunk sizes of the memory test and the copy buffer's cap; variables so
// that tests can exercise many chunks and the shrinking on a small fake
// device, and keep its CPU copies short.
var (
	burnChunkBytes    uint64 = 1 << 30
	burnMinChunkBytes uint64 = 64 << 20
	burnCopyBytes     uint64 = 1 << 30
)

// burnPattern is one memory test pattern: its name in a BurnRequest, the
// kernels' word id and, for a constant, the word.
type burnPattern struct {
	name  string
	id    uint32
	value uint32
}

// burnPatterns maps the request's pattern names to a kernel word id and,
// for the constants, the word itself; the order is the default run order.
var burnPatterns = []burnPattern{
	{"zeros", wordConstant, 0x00000000},
	{"ones", wordConstant, 0xFFFFFFFF},
	{"aa", wordConstant, 0xAAAAAAAA},
	{"55", wordConstant, 0x55555555},
	{"walking-ones", wordWalking, 0},
	{"address", wordAddress, 0},
	{"random", wordRandom, 0},
}

// patternArg is the kernel argument of pattern p for chunk c: the constant
// itself, or a per-chunk salt or seed, so that two chunks never hold the
// same words and an address line that aliases one chunk onto another is
// caught by the address and random patterns.
func patternArg(p int, c int, seed uint64) uint64 {
	switch burnPatterns[p].id {
	case wordConstant:
		return uint64(burnPatterns[p].value)
	case wordAddress:
		return uint64(SeedKey(seed) ^ uint32(c)*0x9E3779B9)
	}
	return seed ^ uint64(c)*0x9E3779B97F4A7C15
}

// Burn runs the burn-in's GPU checks on GPU req.Index: a pattern memory
// test, device copy bandwidth, a verified FP32 FMA soak and pinned PCIe
// copies. On error the result holds the phases that finished.
func (d *Driver) Burn(ctx context.Context, req gpuwarden.BurnRequest) (res gpuwarden.BurnResult, err error) {
	start := time.Now()
	res.Index = req.Index
	defer func() {
		res.Seconds = time.Since(start).Seconds()
		if err != nil {
			err = fmt.Errorf("cuda burn gpu %d: %w", req.Index, err)
		}
	}()
	patterns, err := pickPatterns(req.Patterns)
	if err != nil {
		return res, err
	}
	frac := req.MemFraction
	if frac == 0 {
		frac = defaultMemFraction
	}
	if !(frac > 0 && frac <= 1) {
		return res, gpuwarden.Errorf(gpuwarden.EInvalid, "memory fraction %v is outside (0, 1]", req.MemFraction)
	}
	runs := req.BandwidthRuns
	if runs == 0 {
		runs = defaultBandwidthRuns
	}
	soak := req.SoakSeconds
	if soak == 0 {
		soak = defaultSoakSeconds
	}
	if runs < 0 || soak < 0 || math.IsNaN(soak) || math.IsInf(soak, 0) {
		return res, gpuwarden.Errorf(gpuwarden.EInvalid, "bandwidth runs %d and soak %v s must not be negative", runs, soak)
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}

	// A context is current per OS thread: keep this goroutine on one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ordinal, err := d.Ordinal(req.Index, req.UUID)
	if err != nil {
		return res, err
	}
	s, err := d.openSession(ordinal)
	if err != nil {
		return res, err
	}
	defer s.close()

	if res.Mem, err = s.memTest(ctx, frac, patterns, req.Seed, req.InjectFault); err != nil {
		return res, fmt.Errorf("memory test: %w", err)
	}
	copyBuf, copyBytes, err := s.bandwidth(ctx, runs, &res)
	if err != nil {
		return res, fmt.Errorf("bandwidth: %w", err)
	}
	defer s.devFree(copyBuf)
	if err := s.soak(ctx, soak, &res); err != nil {
		return res, fmt.Errorf("fp32 soak: %w", err)
	}
	if err := s.pcie(ctx, copyBuf, min(copyBytes, maxTransferSize), &res); err != nil {
		return res, fmt.Errorf("host copies: %w", err)
	}
	return res, nil
}

// pickPatterns resolves pattern names to indexes into burnPatterns; none
// means all of them.
func pickPatterns(names []string) ([]int, error) {
	if len(names) == 0 {
		all := make([]int, len(burnPatterns))
		for i := range all {
			all[i] = i
		}
		return all, nil
	}
	var out []int
	for _, name := range names {
		i := slices.IndexFunc(burnPatterns, func(p burnPattern) bool { return p.name == name })
		if i < 0 {
			return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "unknown memory test pattern %q", name).
				WithHint("use zeros, ones, aa, 55, walking-ones, address or random")
		}
		out = append(out, i)
	}
	return out, nil
}

// devAlloc allocates device memory that the caller frees with devFree:
// the burn-in's phases each need most of the GPU, so they cannot leave
// their buffers to close.
func (s *session) devAlloc(bytes uint64) (uint64, error) {
	var p uint64
	if err := s.d.check("cuMemAlloc_v2", s.d.api.cuMemAlloc(&p, bytes)); err != nil {
		return 0, err
	}
	return p, nil
}

// devFree frees a devAlloc buffer; zero is no buffer.
func (s *session) devFree(p uint64) {
	if p != 0 {
		s.d.api.cuMemFree(p)
	}
}

// freeMem is the device memory the driver says is free now.
func (s *session) freeMem() (uint64, error) {
	var free, total uint64
	if err := s.d.check("cuMemGetInfo_v2", s.d.api.cuMemGetInfo(&free, &total)); err != nil {
		return 0, err
	}
	return free, nil
}

// memTest allocates frac of free memory in chunks and runs every pattern
// over all of it: fill every chunk, then verify every chunk, so that a
// pattern sits in DRAM for a whole pass before it is read back.
func (s *session) memTest(ctx context.Context, frac float64, patterns []int, seed uint64, inject bool) (res gpuwarden.MemTestResult, err error) {
	// The stats block goes first: it is tiny, and without it nothing else
	// can be checked.
	stats, err := s.devAlloc(maxChunks * verifyStatsWords * 8)
	if err != nil {
		return res, err
	}
	defer s.devFree(stats)
	free, err := s.freeMem()
	if err != nil {
		return res, err
	}
	target := uint64(frac*float64(free)) &^ 4095
	var chunks, sizes []uint64
	defer func() {
		for _, p := range chunks {
			s.devFree(p)
		}
	}()
	chunk := burnChunkBytes
	for res.Bytes < target && len(chunks) < maxChunks {
		size := min(chunk, target-res.Bytes) &^ 4095
		if size == 0 {
			break
		}
		p, err := s.devAlloc(size)
		if err != nil {
			var ce *Error
			oom := errors.As(err, &ce) && ce.Code == ErrOutOfMemory
			if oom && size > burnMinChunkBytes {
				// Free memory is fragmented or shared: try smaller pieces.
				chunk = max(size/2, burnMinChunkBytes)
				continue
			}
			if oom && len(chunks) > 0 {
				break // as much as fits: test that
			}
			return res, fmt.Errorf("allocate %d MiB (%d MiB held, %d MiB free at the start): %w",
				size>>20, res.Bytes>>20, free>>20, err)
		}
		chunks = append(chunks, p)
		sizes = append(sizes, size)
		res.Bytes += size
	}
	if len(chunks) == 0 {
		return res, fmt.Errorf("nothing to test: %d bytes free", free)
	}

	host := make([]uint64, len(chunks)*verifyStatsWords)
	seen := map[uint64]bool{}
	var secs float64
	for pi, p := range patterns {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		res.Patterns = append(res.Patterns, burnPatterns[p].name)
		// Every chunk's block: count 0, minimum ~0, slot counter 0.
		for c := range chunks {
			b := stats + uint64(c*verifyStatsWords*8)
			if err := s.memsetD32(b, 0, 6); err != nil {
				return res, err
			}
			if err := s.memsetD32(b+8, 0xFFFFFFFF, 2); err != nil {
				return res, err
			}
		}
		id := burnPatterns[p].id
		t, err := s.timed(func() error {
			for c, buf := range chunks {
				arg := patternArg(p, c, seed)
				if err := s.launch(kernelPatternFill, sizes[c]/4, buf, sizes[c]/4, arg, id); err != nil {
					return err
				}
				if inject && pi == 0 && c == 0 && sizes[0] >= 4*(faultWord+1) {
					// The copy is ordered after the fill on the default
					// stream, so the kernel cannot overwrite it.
					bad := burnWord(id, faultWord, arg) ^ 0x00010000
					b := unsafe.Slice((*byte)(unsafe.Pointer(&bad)), 4)
					if err := s.htod(buf+4*faultWord, b); err != nil {
						return fmt.Errorf("inject fault: %w", err)
					}
				}
			}
			for c, buf := range chunks {
				b := stats + uint64(c*verifyStatsWords*8)
				if err := s.launch(kernelPatternVerify, sizes[c]/4, buf, sizes[c]/4, patternArg(p, c, seed), id, b); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return res, fmt.Errorf("pattern %s: %w", burnPatterns[p].name, err)
		}
		secs += t
		if err := s.dtoh(unsafe.Slice((*byte)(unsafe.Pointer(&host[0])), len(host)*8), stats); err != nil {
			return res, err
		}
		base := uint64(0)
		for c := range chunks {
			st := host[c*verifyStatsWords : (c+1)*verifyStatsWords]
			res.Errors += st[0]
			if st[0] > 0 {
				// The slots hold the first indexes recorded, in no order;
				// the minimum is exact, so it always leads.
				idx := append([]uint64{st[1]}, st[3:3+min(st[2], verifySlots)]...)
				slices.Sort(idx)
				for _, i := range idx {
					off := base + 4*i
					if len(res.BadOffsets) < verifySlots && !seen[off] {
						seen[off] = true
						res.BadOffsets = append(res.BadOffsets, off)
					}
				}
			}
			base += sizes[c]
		}
	}
	res.Seconds = secs
	// Every pattern writes every byte once and reads it once.
	res.GBs = gbPerSecond(2*res.Bytes*uint64(len(patterns)), secs)
	return res, nil
}

// bandwidth times the copy kernel over min(1 GiB, a quarter of free
// memory) and keeps the destination buffer for the PCIe phase; the caller
// frees it.
func (s *session) bandwidth(ctx context.Context, runs int, res *gpuwarden.BurnResult) (buf, n uint64, err error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	free, err := s.freeMem()
	if err != nil {
		return 0, 0, err
	}
	n = min(burnCopyBytes, free/4) &^ 4095
	if n == 0 {
		return 0, 0, fmt.Errorf("only %d bytes free", free)
	}
	src, err := s.devAlloc(n)
	if err != nil {
		return 0, 0, err
	}
	defer s.devFree(src)
	dst, err := s.devAlloc(n)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		if err != nil {
			s.devFree(dst)
		}
	}()
	if err := s.memsetD32(src, 0x5A5A5A5A, n/4); err != nil {
		return 0, 0, err
	}
	copyOnce := func() error { return s.launch(kernelCopy, n/16, dst, src, n/16) }
	for range bandwidthWarmups {
		if err := copyOnce(); err != nil {
			return 0, 0, err
		}
	}
	if err := s.sync(); err != nil {
		return 0, 0, err
	}
	for range runs {
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		secs, err := s.timed(copyOnce)
		if err != nil {
			return 0, 0, err
		}
		// Every byte is read once and written once.
		res.BandwidthRuns = append(res.BandwidthRuns, gbPerSecond(2*n, secs))
	}
	if runs > 0 {
		res.BandwidthGBs = median(res.BandwidthRuns)
	}
	return dst, n, nil
}

// soak runs gw_fma for soakWarmup (shortened to secs for a shorter soak)
// and then for secs, checking every thread's result of every launch,
// warm-up included, against the exact CPU value: a wrong result is a
// fault whenever it happens, while only the timed part counts for speed.
func (s *session) soak(ctx context.Context, secs float64, res *gpuwarden.BurnResult) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	threads := uint64(max(s.sms, 1)) * blocksPerSM * threadsPerBlock
	out, err := s.devAlloc(soakBatch * threads * 4)
	if err != nil {
		return err
	}
	defer s.devFree(out)
	want := soakExpected()
	host := make([]float32, soakBatch*threads)
	hostBytes := unsafe.Slice((*byte)(unsafe.Pointer(&host[0])), len(host)*4)
	batch := func() (float64, error) {
		t, err := s.timed(func() error {
			for k := range uint64(soakBatch) {
				if err := s.launch(kernelFMA, threads, out+4*k*threads, uint32(soakIters)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
		if err := s.dtoh(hostBytes, out); err != nil {
			return 0, err
		}
		for g, v := range host {
			// The thread index inside its block is what seeds the chains.
			if math.Float32bits(v) != math.Float32bits(want[g%threadsPerBlock]) {
				res.FMAErrors++
			}
		}
		return t, nil
	}
	warm := min(soakWarmup, time.Duration(secs*float64(time.Second)))
	for t0 := time.Now(); time.Since(t0) < warm; {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := batch(); err != nil {
			return err
		}
	}
	var gpuSecs float64
	var flops float64
	t0 := time.Now()
	for first := true; first || time.Since(t0).Seconds() < secs; first = false {
		if err := ctx.Err(); err != nil {
			return err
		}
		t, err := batch()
		if err != nil {
			return err
		}
		gpuSecs += t
		flops += float64(soakBatch) * float64(threads) * fmaFlopsPerIter * soakIters
	}
	res.SoakSeconds = time.Since(t0).Seconds()
	// The GPU's own time of the launches: the host's checks between
	// batches are not the GPU's arithmetic rate.
	if gpuSecs > 0 {
		res.FP32TFLOPs = flops / gpuSecs / 1e12
	}
	return nil
}

// pcie times pinned copies of n bytes each way between the host and buf.
func (s *session) pcie(ctx context.Context, buf, n uint64, res *gpuwarden.BurnResult) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	host, err := s.allocHost(n)
	if err != nil {
		return err
	}
	secs, err := s.timeRuns(ctx, transferRuns, func() error { return s.htod(buf, host) })
	if err != nil {
		return fmt.Errorf("host to device: %w", err)
	}
	res.HostToDeviceGBs = gbPerSecond(n, secs)
	secs, err = s.timeRuns(ctx, transferRuns, func() error { return s.dtoh(host, buf) })
	if err != nil {
		return fmt.Errorf("device to host: %w", err)
	}
	res.DeviceToHostGBs = gbPerSecond(n, secs)
	return nil
}

// soakExpected is fmaExpected(soakIters), computed once per process: it
// costs about 34 million FMAs on the CPU.
var soakExpected = sync.OnceValue(func() []float32 { return fmaExpected(soakIters) })

// fmaExpected is gw_fma's output for each thread index within a block
// (0..255) after iters iterations, computed on the CPU exactly as the GPU
// must compute it, so that every result can be compared bit for bit.
//
// Why float64 math.FMA gives the float32 fma.rn exactly: a chain starts at
// a0 = tid·2^-10 + k (k = 0..7), in [0, 8). The exact a·b + c with
// b = 1-2^-12, c = 2^-12 equals 1 + (a-1)·b, between a and the fixed point
// 1, and rounding to nearest cannot leave an interval whose ends are
// floats, so every later a stays in [min(a0, 1), 8); only thread 0's first
// chain starts at 0, and one step takes it to c = 2^-12. So a = 0 or
// a ≥ 2^-12: with a in [2^e, 2^(e+1)), e ≥ -12, a's lowest bit is at
// 2^(e-23) and a·b's (b has 12 significant bits) at 2^(e-35) ≥ 2^-47, c
// sits at 2^-12 and the sum is below 2^4, so the exact a·b + c spans at
// most 51 bits. A float64 holds it, math.FMA is exact, and the float32
// conversion is the single round-to-nearest-even that fma.rn.f32 does.
// The final sums are float32 additions, each rounded once.
func fmaExpected(iters uint32) []float32 {
	out := make([]float32, threadsPerBlock)
	for tid := range uint32(threadsPerBlock) {
		var acc [8]float32
		acc[0] = float32(tid) * float32(1.0/1024)
		for k := 1; k < 8; k++ {
			acc[k] = float32(acc[0] + float32(k))
		}
		const b, c = float32(1 - 1.0/4096), float32(1.0 / 4096)
		for range iters * 4 {
			for k := range acc {
				acc[k] = float32(math.FMA(float64(acc[k]), float64(b), float64(c)))
			}
		}
		sum := acc[0]
		for k := 1; k < 8; k++ {
			sum = float32(sum + acc[k])
		}
		out[tid] = sum
	}
	return out
}
