package cuda

import _ "embed"

// kernelsPTX is the kernel module, hand-written so that the host needs no
// CUDA toolkit: the driver JIT-compiles it for the GPU it runs on.
//
//go:embed kernels.ptx
var kernelsPTX string

// The kernels' entry names. PTX reserves its instruction names (fma among
// them), so every entry carries a prefix.
const (
	kernelFill   = "gw_fill"   // (u64 buf, u64 nwords, u64 seed)
	kernelVerify = "gw_verify" // (u64 buf, u64 nwords, u64 seed, u64 errcount, u64 firstbad)
	kernelCopy   = "gw_copy"   // (u64 dst, u64 src, u64 n16), 16 bytes a step
	kernelFMA    = "gw_fma"    // (u64 out, u32 iters), fmaFlopsPerIter FLOPs a thread an iteration
	// The burn-in memory test: one fill and one verify for every pattern.
	kernelPatternFill   = "gw_pfill"   // (u64 buf, u64 nwords, u64 arg, u32 id)
	kernelPatternVerify = "gw_pverify" // (u64 buf, u64 nwords, u64 arg, u32 id, u64 stats)
)

// kernelNames are the entries a session resolves, in kernels.ptx order.
var kernelNames = []string{kernelFill, kernelVerify, kernelCopy, kernelFMA, kernelPatternFill, kernelPatternVerify}

// Word kinds of gw_pfill and gw_pverify; any other id means wordRandom.
const (
	wordConstant = 0 // the key itself
	wordWalking  = 1 // 1 << (i % 32)
	wordAddress  = 2 // lo32(4i) ^ key
	wordRandom   = 3 // Pattern(i, arg)
)

// verifySlots is how many bad word indices gw_pverify records, and
// verifyStatsWords the u64s of its stats block: count, minimum, slot
// counter, then the slots.
const (
	verifySlots      = 16
	verifyStatsWords = 3 + verifySlots
)

// burnWord is the word gw_pfill writes at index i of a chunk; it mirrors
// the PTX so the host can plant a wrong word and tests can check the GPU's.
func burnWord(id uint32, i, arg uint64) uint32 {
	key := SeedKey(arg)
	switch id {
	case wordConstant:
		return key
	case wordWalking:
		return 1 << (i % 32)
	case wordAddress:
		return uint32(4*i) ^ key
	}
	return Pattern(i, arg)
}

// Launch geometry shared by every kernel: all are grid-stride loops, so a
// grid of a few blocks per SM keeps every SM busy without launching a
// block per element.
const (
	threadsPerBlock = 256
	blocksPerSM     = 8
)

// fmaFlopsPerIter is the FLOPs one gw_fma thread does per iteration:
// 8 accumulators × 4 unrolled × 2 (an FMA is a multiply and an add).
const fmaFlopsPerIter = 2 * 8 * 4

// gridBlocks is the grid for n elements on a GPU with sms multiprocessors:
// enough blocks for one element per thread, capped at blocksPerSM per SM.
// Zero elements need no launch.
func gridBlocks(n uint64, sms int) uint32 {
	if n == 0 {
		return 0
	}
	if sms < 1 {
		sms = 1
	}
	need := (n + threadsPerBlock - 1) / threadsPerBlock
	limit := uint64(sms) * blocksPerSM
	return uint32(min(need, limit))
}

// SeedKey folds a 64-bit seed into the 32-bit key the pattern uses. Two
// seeds with different keys give different words at every index; seeds
// with the same key (rare: they differ by x<<32|x) give the same fill.
func SeedKey(seed uint64) uint32 {
	return uint32(seed) ^ uint32(seed>>32)
}

// Pattern is the 32-bit word gw_fill writes at word index i; it mirrors the
// PTX exactly, so the host can check words the GPU wrote:
//
//	x = lo32(i) ^ hi32(i)*0x9E3779B9 ^ SeedKey(seed)
//	x ^= x >> 16; x *= 0x7FEB352D; x ^= x >> 15; x *= 0x846CA68B; x ^= x >> 16
//
// The mixer (Wellons' lowbias32) is a bijection, which is why a wrong seed
// fails every word and why neighbouring words always differ.
func Pattern(i, seed uint64) uint32 {
	x := uint32(i) ^ uint32(i>>32)*0x9E3779B9 ^ SeedKey(seed)
	x ^= x >> 16
	x *= 0x7FEB352D
	x ^= x >> 15
	x *= 0x846CA68B
	x ^= x >> 16
	return x
}
