package parallel

import (
	"runtime"
	"sync/atomic"
	"testing"
)

func TestDoCallsEachPieceOnce(t *testing.T) {
	for _, procs := range []int{1, 2, 7} {
		old := runtime.GOMAXPROCS(procs)
		for _, n := range []int{0, 1, 2, 3, 50} {
			calls := make([]atomic.Int32, n)
			Do(n, func(i int) { calls[i].Add(1) })
			for i := range calls {
				if got := calls[i].Load(); got != 1 {
					t.Errorf("GOMAXPROCS %d, n %d: piece %d called %d times, want 1", procs, n, i, got)
				}
			}
		}
		runtime.GOMAXPROCS(old)
	}
}
