package cuda

import (
	"context"
	"errors"
	"math"
	"math/big"
	"slices"
	"testing"

	"github.com/ebitengine/purego"

	"github.com/gpuwarden/gpuwarden"
)

// simPatternRun fills words words with pattern p of chunk c in the
// interpreter, lets corrupt change the buffer, verifies, and returns the
// memory, the buffer and the stats block.
func simPatternRun(t *testing.T, ks map[string]*simKernel, words uint64, id uint32, arg uint64,
	corrupt func(mem *simMemory, buf uint64)) (*simMemory, uint64, []uint64) {
	t.Helper()
	mem := newSimMemory()
	buf := mem.alloc(int(words * 4))
	stats := mem.alloc(verifyStatsWords*8 + 64) // 64 guard bytes after the slots
	for w := range uint64(verifyStatsWords) {
		mem.setU64(stats+8*w, 0xDEAD)
	}
	mem.setU64(stats, 0)
	mem.setU64(stats+8, math.MaxUint64)
	mem.setU64(stats+16, 0)
	if err := ks[kernelPatternFill].launch(mem, 3, threadsPerBlock, buf, words, arg, uint64(id)); err != nil {
		t.Fatal(err)
	}
	if corrupt != nil {
		corrupt(mem, buf)
	}
	if err := ks[kernelPatternVerify].launch(mem, 3, threadsPerBlock, buf, words, arg, uint64(id), stats); err != nil {
		t.Fatal(err)
	}
	for a := stats + verifyStatsWords*8; a < stats+verifyStatsWords*8+64; a += 4 {
		if got := mem.u32(a); got != 0xA5A5A5A5 {
			t.Fatalf("verify wrote past its 16 slots: %#x = %#08x", a, got)
		}
	}
	out := make([]uint64, verifyStatsWords)
	for w := range out {
		out[w] = mem.u64(stats + 8*uint64(w))
	}
	return mem, buf, out
}

// TestPTXPatternKernels fills and verifies every burn-in pattern in the
// interpreter: each word equals burnWord, and a clean buffer verifies clean.
func TestPTXPatternKernels(t *testing.T) {
	ks := loadKernels(t)
	const words = 4100 // more than the 768 threads, not a multiple of them
	for pi, p := range burnPatterns {
		for _, c := range []int{0, 3} {
			arg := patternArg(pi, c, 0x5eed_0000_beef)
			mem, buf, st := simPatternRun(t, ks, words, p.id, arg, nil)
			for i := range uint64(words) {
				if got, want := mem.u32(buf+4*i), burnWord(p.id, i, arg); got != want {
					t.Fatalf("%s chunk %d: word %d = %#08x, want %#08x", p.name, c, i, got, want)
				}
			}
			if st[0] != 0 || st[1] != math.MaxUint64 || st[2] != 0 {
				t.Errorf("%s chunk %d: clean verify gave count %d, min %#x, slots %d", p.name, c, st[0], st[1], st[2])
			}
		}
	}
	// The words themselves, against the definitions in the request's terms.
	for i := range uint64(70) {
		if burnWord(wordWalking, i, 0) != 1<<(i%32) || burnWord(wordAddress, i, 0x1234) != uint32(4*i)^0x1234 {
			t.Fatalf("word %d: walking ones or address pattern wrong", i)
		}
	}
	if burnWord(wordConstant, 9, 0xAAAAAAAA) != 0xAAAAAAAA {
		t.Error("constant pattern is not its value")
	}
	// Address and random differ between chunks, so aliasing chunks show.
	if patternArg(5, 0, 1) == patternArg(5, 1, 1) || patternArg(6, 0, 1) == patternArg(6, 1, 1) {
		t.Error("per-chunk salt or seed repeats")
	}
}

// TestPTXPatternFault plants the fault Burn injects and checks that verify
// reports exactly that word, for every pattern.
func TestPTXPatternFault(t *testing.T) {
	ks := loadKernels(t)
	const words = faultWord + 500
	for pi, p := range burnPatterns {
		arg := patternArg(pi, 0, 7)
		_, _, st := simPatternRun(t, ks, words, p.id, arg, func(mem *simMemory, buf uint64) {
			mem.setU32(buf+4*faultWord, burnWord(p.id, faultWord, arg)^0x00010000)
		})
		if st[0] != 1 || st[1] != faultWord || st[2] != 1 || st[3] != faultWord {
			t.Errorf("%s: count %d, min %d, slots used %d, slot 0 %d; want 1, %d, 1, %d",
				p.name, st[0], st[1], st[2], st[3], faultWord, faultWord)
		}
		if st[4] != 0xDEAD {
			t.Errorf("%s: slot 1 written (%#x) for one bad word", p.name, st[4])
		}
	}
}

// TestPTXPatternSlots corrupts more words than there are slots: the count
// is exact, the minimum is the lowest bad word, the 16 slots hold distinct
// bad words, and nothing is written past them.
func TestPTXPatternSlots(t *testing.T) {
	ks := loadKernels(t)
	const words = 3000
	bad := map[uint64]bool{}
	for i := uint64(2999); len(bad) < 40; i -= 71 {
		bad[i] = true
	}
	lowest := slices.Min(mapsKeys(bad))
	arg := patternArg(6, 0, 99)
	_, _, st := simPatternRun(t, ks, words, wordRandom, arg, func(mem *simMemory, buf uint64) {
		for i := range bad {
			mem.setU32(buf+4*i, ^mem.u32(buf+4*i))
		}
	})
	if st[0] != 40 || st[1] != lowest {
		t.Errorf("count %d, min %d; want 40, %d", st[0], st[1], lowest)
	}
	// Each thread asks once more after a refusal at most.
	if st[2] < verifySlots || st[2] > 40 {
		t.Errorf("slot counter %d, want 16..40", st[2])
	}
	seen := map[uint64]bool{}
	for _, i := range st[3:] {
		if !bad[i] || seen[i] {
			t.Errorf("slot holds %d: not a bad word, or twice", i)
		}
		seen[i] = true
	}
}

func mapsKeys(m map[uint64]bool) []uint64 {
	var out []uint64
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestFMAExpected checks the CPU reference three ways: against the
// interpreter's run of gw_fma, against the independent test reference,
// and against exact arithmetic (math/big) rounded once to float32, which
// is what fma.rn.f32 means.
func TestFMAExpected(t *testing.T) {
	ks := loadKernels(t)
	for _, iters := range []uint32{0, 1, 3, 40} {
		want := fmaExpected(iters)
		mem := newSimMemory()
		out := mem.alloc(2 * threadsPerBlock * 4)
		if err := ks[kernelFMA].launch(mem, 2, threadsPerBlock, out, uint64(iters)); err != nil {
			t.Fatal(err)
		}
		for g := range uint64(2 * threadsPerBlock) {
			got := math.Float32frombits(mem.u32(out + 4*g))
			if math.Float32bits(got) != math.Float32bits(want[g%threadsPerBlock]) {
				t.Fatalf("iters %d thread %d: PTX %v, fmaExpected %v", iters, g, got, want[g%threadsPerBlock])
			}
		}
		for tid := range uint32(threadsPerBlock) {
			if r := fmaReference(tid, iters); math.Float32bits(r) != math.Float32bits(want[tid]) {
				t.Fatalf("iters %d tid %d: fmaReference %v, fmaExpected %v", iters, tid, r, want[tid])
			}
		}
	}
	// Exact: each step a·b + c in 200-bit arithmetic, rounded once to a
	// 24-bit significand, nearest-even.
	round32 := func(x *big.Float) float32 { f, _ := x.Float32(); return f }
	b := new(big.Float).SetPrec(200).SetFloat64(1 - 1.0/4096)
	c := new(big.Float).SetPrec(200).SetFloat64(1.0 / 4096)
	const iters = 40
	want := fmaExpected(iters)
	for _, tid := range []uint32{0, 1, 2, 100, 255} {
		var acc [8]float32
		acc[0] = float32(tid) * float32(1.0/1024)
		for k := 1; k < 8; k++ {
			acc[k] = acc[0] + float32(k)
		}
		for range iters * 4 {
			for k := range acc {
				x := new(big.Float).SetPrec(200).SetFloat64(float64(acc[k]))
				x.Mul(x, b).Add(x, c)
				acc[k] = round32(x)
			}
		}
		sum := acc[0]
		for k := 1; k < 8; k++ {
			sum = float32(sum + acc[k])
		}
		if math.Float32bits(sum) != math.Float32bits(want[tid]) {
			t.Fatalf("tid %d: exact arithmetic %v, fmaExpected %v", tid, sum, want[tid])
		}
	}
}

// smallChunks shrinks the memory test's chunks so a fake device of
// 512 MiB free exercises many chunks and the shrinking.
func smallChunks(t *testing.T, chunk, minChunk uint64) {
	oc, om, ob := burnChunkBytes, burnMinChunkBytes, burnCopyBytes
	burnChunkBytes, burnMinChunkBytes, burnCopyBytes = chunk, minChunk, 8<<20
	t.Cleanup(func() { burnChunkBytes, burnMinChunkBytes, burnCopyBytes = oc, om, ob })
}

func TestFakeBurn(t *testing.T) {
	f := loadFake(t)
	smallChunks(t, 4<<20, 256<<10)
	req := gpuwarden.BurnRequest{Index: 0, MemFraction: 0.05, SoakSeconds: 0.05, BandwidthRuns: 3, Seed: 42}
	res, err := f.d.Burn(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	free := float64(512 << 20) // what the fake's cuMemGetInfo reports
	target := uint64(req.MemFraction*free) &^ 4095
	if res.Mem.Bytes != target || len(res.Mem.Patterns) != len(burnPatterns) || res.Mem.Errors != 0 || len(res.Mem.BadOffsets) != 0 {
		t.Errorf("mem %+v, want %d bytes, 7 patterns, clean", res.Mem, target)
	}
	if res.Mem.GBs <= 0 || len(res.BandwidthRuns) != 3 || res.BandwidthGBs <= 0 || res.FP32TFLOPs <= 0 ||
		res.HostToDeviceGBs <= 0 || res.DeviceToHostGBs <= 0 || res.SoakSeconds < 0.05 || res.Seconds <= 0 {
		t.Errorf("figures missing: %+v", res)
	}
	// The fake computes gw_fma with C's fmaf: any difference from the Go
	// reference would count here.
	if res.FMAErrors != 0 {
		t.Errorf("%d FMA errors against the fake's fmaf", res.FMAErrors)
	}

	req.InjectFault = true
	req.Patterns = []string{"aa", "address"}
	res, err = f.d.Burn(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Mem.Errors != 1 || !slices.Equal(res.Mem.BadOffsets, []uint64{4 * faultWord}) ||
		!slices.Equal(res.Mem.Patterns, req.Patterns) {
		t.Errorf("injected fault: errors %d at %v, patterns %v; want 1 at [%d]", res.Mem.Errors, res.Mem.BadOffsets, res.Mem.Patterns, 4*faultWord)
	}

	// A word the "hardware" flips in every chunk: offsets are chunk base
	// plus index, capped at 16.
	req.InjectFault = false
	req.MemFraction = 0.15
	f.flip(5)
	res, err = f.d.Burn(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	target = uint64(req.MemFraction*free) &^ 4095
	chunks := (target + (4<<20 - 1)) / (4 << 20)
	if res.Mem.Errors != 2*chunks || len(res.Mem.BadOffsets) != 16 {
		t.Fatalf("flipped word: %d errors at %v; want %d, 16 offsets", res.Mem.Errors, res.Mem.BadOffsets, 2*chunks)
	}
	for k, off := range res.Mem.BadOffsets {
		if off != uint64(k)*(4<<20)+20 {
			t.Errorf("offset %d = %d, want %d", k, off, uint64(k)*(4<<20)+20)
		}
	}
}

// TestFakeBurnShrink makes 4 MiB allocations fail part way: the test
// shrinks its chunks and covers what fits.
func TestFakeBurnShrink(t *testing.T) {
	f := loadFake(t)
	smallChunks(t, 4<<20, 1<<20)
	var limit func(uint64)
	purego.RegisterLibFunc(&limit, f.d.lib, "fake_alloc_limit")
	limit(10<<20 + maxChunks*verifyStatsWords*8) // the stats block, then 4 + 4 + 2 MiB
	res, err := f.d.Burn(context.Background(), gpuwarden.BurnRequest{MemFraction: 0.05, SoakSeconds: 0.01,
		BandwidthRuns: 1, Patterns: []string{"walking-ones"}})
	if err == nil || res.Mem.Bytes != 10<<20 {
		// The bandwidth phase needs 2 × 8 MiB and must fail cleanly.
		t.Fatalf("bytes %d, err %v; want 10 MiB tested, then an allocation error", res.Mem.Bytes, err)
	}
	var ce *Error
	if !errors.As(err, &ce) || ce.Code != ErrOutOfMemory {
		t.Errorf("err = %v, want CUDA_ERROR_OUT_OF_MEMORY", err)
	}
	limit(0)
}

func TestFakeBurnInvalid(t *testing.T) {
	f := loadFake(t)
	for _, req := range []gpuwarden.BurnRequest{
		{Patterns: []string{"checkerboard"}},
		{MemFraction: 1.5},
		{MemFraction: -0.1},
		{SoakSeconds: -1},
		{BandwidthRuns: -2},
	} {
		_, err := f.d.Burn(context.Background(), req)
		if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
			t.Errorf("%+v: err %v, want EInvalid", req, err)
		}
	}
}

// TestFakeBurnCancel cancels at every context check in turn: each stops
// with context.Canceled and frees everything.
func TestFakeBurnCancel(t *testing.T) {
	f := loadFake(t)
	smallChunks(t, 4<<20, 256<<10)
	req := gpuwarden.BurnRequest{MemFraction: 0.02, SoakSeconds: 0.01, BandwidthRuns: 2}
	for n := 0; ; n++ {
		_, err := f.d.Burn(&countdownCtx{Context: context.Background(), n: n}, req)
		if live := f.live(); live != 0 {
			t.Fatalf("cancelled at check %d: %d driver objects left unreleased", n, live)
		}
		if err == nil {
			if n < 10 {
				t.Fatalf("Burn finished after only %d context checks", n)
			}
			return
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled at check %d: %v, want context.Canceled", n, err)
		}
		if n > 500 {
			t.Fatal("Burn never finishes")
		}
	}
}
