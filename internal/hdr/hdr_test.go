package hdr

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestQuantileAgainstSort(t *testing.T) {
	tests := []struct {
		name string
		gen  func(r *rand.Rand) time.Duration
	}{
		{"uniform µs", func(r *rand.Rand) time.Duration { return time.Duration(r.Int64N(int64(time.Millisecond))) }},
		{"exponential ms", func(r *rand.Rand) time.Duration { return time.Duration(r.ExpFloat64() * float64(5*time.Millisecond)) }},
		{"bimodal with a stall", func(r *rand.Rand) time.Duration {
			if r.IntN(1000) == 0 {
				return 2 * time.Second
			}
			return time.Duration(200_000 + r.Int64N(100_000))
		}},
		{"tiny exact", func(r *rand.Rand) time.Duration { return time.Duration(r.Int64N(100)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			var h Histogram
			vals := make([]time.Duration, 20_000)
			for i := range vals {
				vals[i] = tt.gen(r)
				h.Record(vals[i])
			}
			slices.Sort(vals)
			for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999, 1} {
				rank := max(int(float64(len(vals))*q+0.999999), 1)
				want := vals[rank-1]
				got := h.Quantile(q)
				// Never below the true value, and within one bucket (1/64) above.
				if got < want || float64(got-want) > float64(want)/64+1 {
					t.Errorf("q%.3f: got %v, want %v (within 1/64 above)", q, got, want)
				}
			}
			if got, want := h.Max(), vals[len(vals)-1]; got != want {
				t.Errorf("max: got %v, want %v", got, want)
			}
			if got, want := h.Min(), vals[0]; got != want {
				t.Errorf("min: got %v, want %v", got, want)
			}
			if got, want := h.Count(), uint64(len(vals)); got != want {
				t.Errorf("count: got %d, want %d", got, want)
			}
		})
	}
}

func TestMerge(t *testing.T) {
	var a, b, all Histogram
	for i := range 1000 {
		d := time.Duration(i) * time.Microsecond
		all.Record(d)
		if i%2 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	a.Merge(&b)
	for _, q := range []float64{0.1, 0.5, 0.99, 1} {
		if got, want := a.Quantile(q), all.Quantile(q); got != want {
			t.Errorf("q%v: got %v, want %v", q, got, want)
		}
	}
	if a.Count() != all.Count() || a.Max() != all.Max() || a.Min() != all.Min() {
		t.Errorf("merged count/min/max %d/%v/%v, want %d/%v/%v", a.Count(), a.Min(), a.Max(), all.Count(), all.Min(), all.Max())
	}
}

func TestEdges(t *testing.T) {
	var h Histogram
	if h.Quantile(0.99) != 0 || h.Max() != 0 || h.Mean() != 0 {
		t.Fatal("empty histogram must answer zero")
	}
	h.Record(-5)
	h.Record(time.Duration(1<<62 + 12345))
	if got := h.Min(); got != 0 {
		t.Errorf("negative recorded as %v, want 0", got)
	}
	if got, want := h.Quantile(1), time.Duration(1<<62+12345); got != want {
		t.Errorf("q1 of a huge value: got %v, want %v", got, want)
	}
}

func BenchmarkRecord(b *testing.B) {
	var h Histogram
	for i := range b.N {
		h.Record(time.Duration(i * 7919 % 50_000_000))
	}
}
