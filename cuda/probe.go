package cuda

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"time"
	"unsafe"

	"github.com/gpuwarden/gpuwarden"
)

// Probe sizes: big enough for a bandwidth figure to mean something, small
// enough that the canary stays well inside its wall-time budget.
const (
	minProbeBytes   = 4 << 10   // below this the figures are all launch overhead
	maxTransferSize = 256 << 20 // each way over PCIe
	maxCopySize     = 1 << 30   // device-to-device source (and destination)
	transferRuns    = 3         // PCIe: the median drops a first-touch outlier
	copyRuns        = 5         // device copy, after one warm-up
	readbackSamples = 4096      // words of the readback checked on the host
)

var _ gpuwarden.Prober = (*Driver)(nil)

// Probe runs the live checks on GPU req.Index: a context, an allocation, a
// pattern fill and verify, host↔device copies and a device copy. On error
// the result holds the steps that finished. It honours ctx between steps;
// a driver call that hangs is the parent process's to kill.
func (d *Driver) Probe(ctx context.Context, req gpuwarden.ProbeRequest) (res gpuwarden.ProbeResult, err error) {
	res.Index = req.Index
	defer func() {
		if err != nil {
			err = fmt.Errorf("cuda probe gpu %d: %w", req.Index, err)
		}
	}()
	size := req.AllocBytes &^ 15 // the copy kernel moves 16-byte vectors
	if size < minProbeBytes {
		return res, gpuwarden.Errorf(gpuwarden.EInvalid,
			"allocation of %d bytes is below the probe's minimum of %d", req.AllocBytes, minProbeBytes)
	}
	verifySeed := req.Seed
	if req.VerifySeed != 0 {
		verifySeed = req.VerifySeed
	}
	if verifySeed != req.Seed && SeedKey(verifySeed) == SeedKey(req.Seed) {
		// The planted fault would pass silently: both seeds fill alike.
		return res, gpuwarden.Errorf(gpuwarden.EInvalid,
			"verify seed %#x gives the same pattern as seed %#x", verifySeed, req.Seed).
			WithHint("pick a verify seed whose halves xor to a different value")
	}
	if res.CUDADriverVersion, err = d.Version(); err != nil {
		return res, err
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}

	// A context is current per OS thread: keep this goroutine on one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	t := time.Now()
	ordinal, err := d.Ordinal(req.Index, req.UUID)
	if err != nil {
		return res, err
	}
	s, err := d.openSession(ordinal)
	if err != nil {
		return res, err
	}
	defer s.close()
	res.InitSeconds = time.Since(t).Seconds()
	if err := ctx.Err(); err != nil {
		return res, err
	}

	t = time.Now()
	buf, err := s.alloc(size)
	if err != nil {
		return res, err
	}
	// stats[0] counts bad words, stats[1] keeps the first bad index.
	stats, err := s.alloc(16)
	if err != nil {
		return res, err
	}
	host, err := s.allocHost(min(size, maxTransferSize))
	if err != nil {
		return res, err
	}
	res.AllocSeconds = time.Since(t).Seconds()
	if err := ctx.Err(); err != nil {
		return res, err
	}

	t = time.Now()
	words := size / 4
	bad, first, err := s.fillVerify(buf, words, req.Seed, verifySeed, stats)
	if err != nil {
		return res, err
	}
	res.KernelSeconds = time.Since(t).Seconds()
	res.VerifiedWords = words
	res.VerifyErrors = bad
	if bad > 0 {
		res.FirstBadOffset = first * 4
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}

	// Device to host first: the host copy of the filled buffer lets Go
	// check the GPU's words against Pattern, then goes back unchanged.
	secs, err := s.timeRuns(ctx, transferRuns, func() error { return s.dtoh(host, buf) })
	if err != nil {
		return res, fmt.Errorf("device to host: %w", err)
	}
	res.DeviceToHostGBs = gbPerSecond(uint64(len(host)), secs)
	// Memory that failed its own verify would fail the readback too; the
	// result already says so.
	if bad == 0 || verifySeed != req.Seed {
		if err := checkReadback(host, req.Seed); err != nil {
			return res, err
		}
	}
	secs, err = s.timeRuns(ctx, transferRuns, func() error { return s.htod(buf, host) })
	if err != nil {
		return res, fmt.Errorf("host to device: %w", err)
	}
	res.HostToDeviceGBs = gbPerSecond(uint64(len(host)), secs)

	n := min(size/2, maxCopySize) &^ 15
	copyOnce := func() error { return s.launch(kernelCopy, n/16, buf+n, buf, n/16) }
	// Warm up: the SM clock idles low and the first launch pays for it.
	if err := copyOnce(); err != nil {
		return res, err
	}
	if err := s.sync(); err != nil {
		return res, fmt.Errorf("device copy: %w", err)
	}
	secs, err = s.timeRuns(ctx, copyRuns, copyOnce)
	if err != nil {
		return res, fmt.Errorf("device copy: %w", err)
	}
	// Every byte is read once and written once.
	res.DeviceCopyGBs = gbPerSecond(2*n, secs)
	return res, nil
}

// fillVerify fills words words at buf with seed's pattern, verifies them
// against verifySeed's and returns the count of bad words and the index of
// the first one.
func (s *session) fillVerify(buf, words, seed, verifySeed, stats uint64) (bad, first uint64, err error) {
	if err := s.memsetD32(stats, 0, 2); err != nil {
		return 0, 0, err
	}
	if err := s.memsetD32(stats+8, 0xFFFFFFFF, 2); err != nil {
		return 0, 0, err
	}
	if err := s.launch(kernelFill, words, buf, words, seed); err != nil {
		return 0, 0, err
	}
	if err := s.launch(kernelVerify, words, buf, words, verifySeed, stats, stats+8); err != nil {
		return 0, 0, err
	}
	if err := s.sync(); err != nil {
		return 0, 0, fmt.Errorf("fill and verify: %w", err)
	}
	var out [2]uint64
	if err := s.dtoh(unsafe.Slice((*byte)(unsafe.Pointer(&out)), 16), stats); err != nil {
		return 0, 0, err
	}
	return out[0], out[1], nil
}

// timeRuns times op runs times and returns the median in seconds,
// checking ctx between runs.
func (s *session) timeRuns(ctx context.Context, runs int, op func() error) (float64, error) {
	times := make([]float64, 0, runs)
	for range runs {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		secs, err := s.timed(op)
		if err != nil {
			return 0, err
		}
		times = append(times, secs)
	}
	return median(times), nil
}

// median of a non-empty slice; the upper middle for an even count.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// gbPerSecond is bytes over secs in 10^9 bytes per second; a run too short
// for the GPU's clock to see reports 0 rather than infinity.
func gbPerSecond(bytes uint64, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return float64(bytes) / secs / 1e9
}

// checkReadback compares evenly spaced words of a host copy of the filled
// buffer with Pattern. The GPU verified its copy already, so a mismatch
// means the Go and PTX patterns disagree or the copy corrupted the data.
func checkReadback(host []byte, seed uint64) error {
	words := uint64(len(host) / 4)
	if words == 0 {
		return nil
	}
	step := max(words/readbackSamples, 1)
	check := func(i uint64) error {
		got := binary.LittleEndian.Uint32(host[4*i:])
		if want := Pattern(i, seed); got != want {
			return fmt.Errorf("readback: word %d holds %#08x, the pattern says %#08x", i, got, want)
		}
		return nil
	}
	for i := uint64(0); i < words; i += step {
		if err := check(i); err != nil {
			return err
		}
	}
	return check(words - 1)
}
