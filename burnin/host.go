package burnin

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

const (
	diskBlock = 1 << 20
	// diskSyncEvery is how much is written between fsyncs: often enough to
	// sample the device's flush latency, rarely enough to measure its rate.
	diskSyncEvery = 16 << 20
)

// diskResult is what the disk soak measured.
type diskResult struct {
	bytes          int64
	writeMBs       float64
	readMBs        float64
	fsyncP99ms     float64
	fsyncs         int
	mismatch       bool
	mismatchOffset int64
}

// fillBlock writes the seeded pattern of block n into b: xorshift words, so
// that a block moved, dropped or corrupted on disk no longer matches.
func fillBlock(b []byte, seed uint64, n int64) {
	x := splitmix(seed ^ uint64(n)*0x9e3779b97f4a7c15)
	if x == 0 {
		x = 1
	}
	var w [8]byte
	for i := 0; i < len(b); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(w[:], x)
		copy(b[i:], w[:])
	}
}

// diskSoak writes size bytes into a new file in dir in 1 MiB blocks with an
// fsync every 16 MiB, reads them back and checks every byte, then deletes
// the file. afterWrite, when set, runs between the write and the read (tests
// corrupt the file there).
func diskSoak(ctx context.Context, dir string, size int64, seed uint64, afterWrite func(path string) error,
	progress func(done, total float64)) (diskResult, error) {
	res := diskResult{bytes: size}
	f, err := os.CreateTemp(dir, "gpuwarden-burnin-*.dat")
	if err != nil {
		return res, fmt.Errorf("disk soak: %w", err)
	}
	path := f.Name()
	defer os.Remove(path)
	defer f.Close()

	buf := make([]byte, diskBlock)
	var syncs []time.Duration
	flush := func() error {
		t := time.Now()
		if err := f.Sync(); err != nil {
			return fmt.Errorf("disk soak: fsync %s: %w", path, err)
		}
		syncs = append(syncs, time.Since(t))
		return nil
	}
	start := time.Now()
	var written, sinceSync int64
	for n := int64(0); written < size; n++ {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("disk soak: %w", err)
		}
		b := buf[:min(int64(diskBlock), size-written)]
		fillBlock(buf, seed, n)
		if _, err := f.Write(b); err != nil {
			return res, fmt.Errorf("disk soak: write %s: %w", path, err)
		}
		written += int64(len(b))
		sinceSync += int64(len(b))
		if sinceSync >= diskSyncEvery {
			if err := flush(); err != nil {
				return res, err
			}
			sinceSync = 0
		}
		progress(float64(written), float64(2*size))
	}
	if sinceSync > 0 || len(syncs) == 0 {
		if err := flush(); err != nil {
			return res, err
		}
	}
	res.writeMBs = mbs(size, time.Since(start))
	res.fsyncs = len(syncs)
	res.fsyncP99ms = float64(p99(syncs)) / float64(time.Millisecond)

	if afterWrite != nil {
		if err := afterWrite(path); err != nil {
			return res, fmt.Errorf("disk soak: %w", err)
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return res, fmt.Errorf("disk soak: seek %s: %w", path, err)
	}
	start = time.Now()
	want := make([]byte, diskBlock)
	var read int64
	for n := int64(0); read < size; n++ {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("disk soak: %w", err)
		}
		b := buf[:min(int64(diskBlock), size-read)]
		if _, err := io.ReadFull(f, b); err != nil {
			return res, fmt.Errorf("disk soak: read back %s at %d: %w", path, read, err)
		}
		fillBlock(want, seed, n)
		if !res.mismatch && !bytes.Equal(b, want[:len(b)]) {
			i := 0
			for i < len(b) && b[i] == want[i] {
				i++
			}
			res.mismatch, res.mismatchOffset = true, read+int64(i)
		}
		read += int64(len(b))
		progress(float64(size+read), float64(2*size))
	}
	res.readMBs = mbs(size, time.Since(start))
	return res, nil
}

func mbs(n int64, d time.Duration) float64 {
	if d <= 0 {
		d = time.Microsecond
	}
	return float64(n) / 1e6 / d.Seconds()
}

// p99 is the nearest-rank 99th percentile: with fewer than 100 fsyncs it is
// the slowest one.
func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(math.Ceil(0.99*float64(len(s))))-1]
}

// diskChecks turns the disk soak into its checks.
func diskChecks(r diskResult, err error) []gpuwarden.BurnCheck {
	if err != nil {
		return []gpuwarden.BurnCheck{{Name: "disk", Verdict: gpuwarden.VerdictFail, Reason: err.Error()}}
	}
	mib := r.bytes >> 20
	read := gpuwarden.BurnCheck{Name: "disk-read", Value: r.readMBs, Unit: "MB/s", Verdict: gpuwarden.VerdictPass,
		Reason: fmt.Sprintf("%d MiB read back and verified", mib)}
	if r.mismatch {
		read.Verdict = gpuwarden.VerdictFail
		read.Reason = fmt.Sprintf("data read back differs from what was written, first at byte offset %#x: "+
			"the disk, its controller or memory corrupts data", r.mismatchOffset)
	}
	return []gpuwarden.BurnCheck{
		{Name: "disk-write", Value: r.writeMBs, Unit: "MB/s", Verdict: gpuwarden.VerdictPass,
			Reason: fmt.Sprintf("%d MiB in 1 MiB blocks, fsync every 16 MiB", mib)},
		read,
		{Name: "disk-fsync-p99", Value: r.fsyncP99ms, Unit: "ms", Verdict: gpuwarden.VerdictPass,
			Reason: fmt.Sprintf("99th percentile of %d fsyncs", r.fsyncs)},
	}
}

// cpuChunk is the unit of the CPU check: a SplitMix64 chain folded into one
// word. Any wrong instruction on the way changes the result.
const cpuChunkOps = 1 << 15

func cpuChunk(seed uint64) uint64 {
	var acc uint64
	x := seed
	for i := 0; i < cpuChunkOps; i++ {
		x = splitmix(x)
		acc = acc*31 + x
	}
	return acc
}

// cpuResult is what the CPU check measured.
type cpuResult struct {
	workers int
	opsPerS float64
	wrong   uint64
}

// cpuSoak keeps every core busy for d with chunks whose answers were
// computed once up front, and counts the chunks that come out different.
// corrupt, when set, alters a result (tests plant a wrong answer there).
func cpuSoak(ctx context.Context, d time.Duration, seed uint64, corrupt func(uint64) uint64, progress func(done, total float64)) cpuResult {
	const distinct = 16
	var want [distinct]uint64
	for i := range want {
		want[i] = cpuChunk(seed + uint64(i))
	}
	workers := runtime.NumCPU()
	var ops, wrong atomic.Uint64
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for k := w; time.Now().Before(deadline) && ctx.Err() == nil; k++ {
				got := cpuChunk(seed + uint64(k%distinct))
				if corrupt != nil {
					got = corrupt(got)
				}
				if got != want[k%distinct] {
					wrong.Add(1)
				}
				ops.Add(cpuChunkOps)
				if w == 0 {
					progress(math.Min(time.Since(start).Seconds(), d.Seconds()), d.Seconds())
				}
			}
		}(w)
	}
	wg.Wait()
	return cpuResult{workers: workers, opsPerS: float64(ops.Load()) / time.Since(start).Seconds(), wrong: wrong.Load()}
}

// cpuCheck turns the CPU soak into its check.
func cpuCheck(r cpuResult, d time.Duration) gpuwarden.BurnCheck {
	c := gpuwarden.BurnCheck{Name: "cpu", Value: r.opsPerS / 1e6, Unit: "Mop/s", Verdict: gpuwarden.VerdictPass,
		Reason: fmt.Sprintf("%d cores busy for %s, every result verified", r.workers, d)}
	if r.wrong > 0 {
		c.Verdict = gpuwarden.VerdictFail
		c.Reason = fmt.Sprintf("%d computations gave a wrong result on %d cores: the CPU or its memory is unreliable", r.wrong, r.workers)
	}
	return c
}

// splitmix is SplitMix64: a cheap, well-mixed hash of a counter.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
