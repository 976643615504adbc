// Package parallel spreads the independent pieces of one job over the
// processors: the catalog's readers and the planner split a million
// offers this way.
package parallel

import (
	"runtime"
	"sync"
)

// Do calls f(i) for every i in [0, n), spread over one goroutine per
// processor (at most n; inline when that is one), and returns when every
// call has returned. Worker w takes pieces w, w+workers, …, so the calls
// must not depend on one another.
func Do(n int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				f(i)
			}
		})
	}
	wg.Wait()
}
