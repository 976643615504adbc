// Package suggest finds the name a typo was meant to be: the one edit
// distance that config's unknown-field errors and catalog's unknown-name
// errors both use for their "did you mean".
package suggest

// Distance is the Levenshtein distance between a and b, by bytes; a is cut
// to 64 bytes, since no name gpuwarden knows is longer, so that a hostile
// input costs bounded time.
func Distance(a, b string) int {
	if len(a) > 64 {
		a = a[:64]
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
