// Package hdr is a small HdrHistogram-style latency histogram: values are
// counted in log-linear buckets, each power of two split into 128 linear
// sub-buckets, so that any recorded value is reported within 1/128 (0.8 %)
// of itself at a fixed memory cost (a few KB) however many values it holds.
// The load generator records every request in one of these instead of
// keeping and sorting every latency, which at 10,000 requests a second
// would cost the memory and the GC time of the thing being measured.
//
// It is written here rather than imported (github.com/HdrHistogram/hdrhistogram-go
// is on the module proxy) because the generator needs only Record, Merge and
// Quantile, about a hundred lines, not a dependency.
package hdr

import (
	"math"
	"math/bits"
	"time"
)

// subBits is log2 of the linear sub-buckets per power of two: 7 gives 128,
// so the bucket width is at most 1/64 of its values, and its midpoint is
// within 1/128.
const subBits = 7

const subCount = 1 << subBits

// Histogram counts non-negative durations. The zero value is ready to use;
// it is not safe for concurrent use (give each goroutine its own and Merge).
type Histogram struct {
	counts [64 - subBits + 1][subCount]uint64
	total  uint64
	min    int64
	max    int64
	sum    float64
}

// index is the bucket of v: below subCount values are exact; above, the
// exponent picks the row and the top subBits bits after the leading one the
// column.
func index(v uint64) (row, col int) {
	if v < subCount {
		return 0, int(v)
	}
	shift := bits.Len64(v) - subBits - 1
	return shift + 1, int(v>>uint(shift)) - subCount
}

// lowest and width are the first value a bucket holds and how many it holds.
func bucketRange(row, col int) (lowest, width uint64) {
	if row == 0 {
		return uint64(col), 1
	}
	shift := uint(row - 1)
	return uint64(col+subCount) << shift, 1 << shift
}

// Record counts one value; a negative one counts as zero, since a latency
// cannot be below it and a clock step must not corrupt the histogram.
func (h *Histogram) Record(d time.Duration) {
	v := max(int64(d), 0)
	row, col := index(uint64(v))
	h.counts[row][col]++
	if h.total == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.total++
	h.sum += float64(v)
}

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.total == 0 {
		return
	}
	for r := range o.counts {
		for c, n := range o.counts[r] {
			h.counts[r][c] += n
		}
	}
	if h.total == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.total += o.total
	h.sum += o.sum
}

// Count is how many values were recorded.
func (h *Histogram) Count() uint64 { return h.total }

// Max is the largest value recorded, exactly; zero when empty.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Min is the smallest value recorded, exactly; zero when empty.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Mean is the mean of the values recorded; zero when empty.
func (h *Histogram) Mean() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.total))
}

// Quantile is the value at or below which a fraction q (0 to 1) of the
// values fall, by nearest rank: the highest value of the bucket holding
// that rank, capped at Max, so that it never understates a latency. Zero
// when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	q = math.Min(math.Max(q, 0), 1)
	rank := uint64(math.Ceil(q * float64(h.total)))
	rank = max(rank, 1)
	var seen uint64
	for r := range h.counts {
		for c, n := range h.counts[r] {
			if n == 0 {
				continue
			}
			seen += n
			if seen >= rank {
				lo, w := bucketRange(r, c)
				return time.Duration(min(int64(lo+w-1), h.max))
			}
		}
	}
	return time.Duration(h.max)
}
