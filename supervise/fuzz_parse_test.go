package supervise

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

// FuzzParseRetryOn checks ParseRetryOn beyond not panicking: an accepted
// list budgets exactly the retryable exit classes (gpuwarden.Exit* but ok);
// a class is retried exactly when the list names it (or, for an empty list,
// by default), with its default budget or 3 when that is 0, so every budget
// is between 0 and the largest default; the budgets then drive Policy.Next
// to retry a listed class and refuse an unlisted one. A refusal is EInvalid,
// quotes the first unknown name and lists the choices.
func FuzzParseRetryOn(f *testing.F) {
	// The rows of TestParseRetryOn and the supervisor test.
	for _, s := range []string{
		"preempted, gpu-fault,user-error", "", "none", "preempted,oom", "ok", "preempted,user-error",
		" , ,killed,", "host-oom,cuda-oom,cuda-oom", "none,preempted", "Preempted", "\tkilled\n",
	} {
		f.Add(s)
	}
	classes := []string{gpuwarden.ExitPreempted, gpuwarden.ExitHostOOM, gpuwarden.ExitCUDAOOM,
		gpuwarden.ExitGPUFault, gpuwarden.ExitSignal, gpuwarden.ExitUser}
	slices.Sort(classes)
	defaults := DefaultBudgets()
	maxBudget := slices.Max(slices.Collect(maps.Values(defaults)))
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseRetryOn(s)
		// The names the list gives, as the doc comment reads it.
		var named []string
		if list := strings.TrimSpace(s); list != "none" {
			for name := range strings.SplitSeq(list, ",") {
				if name = strings.TrimSpace(name); name != "" {
					named = append(named, name)
				}
			}
		}
		if err != nil {
			if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
				t.Fatalf("%q: error %v has code %q, want %q", s, err, gpuwarden.ErrorCodeOf(err), gpuwarden.EInvalid)
			}
			bad := slices.IndexFunc(named, func(n string) bool { return !slices.Contains(classes, n) })
			if bad < 0 {
				t.Fatalf("%q: refused though every name is a class: %v", s, err)
			}
			if want := fmt.Sprintf("unknown class %q", named[bad]); !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "--retry-on") {
				t.Fatalf("%q: error %q does not start --retry-on and say %q", s, err, want)
			}
			if hint := gpuwarden.ErrorHint(err); !strings.Contains(hint, strings.Join(retryClasses, ", ")) {
				t.Fatalf("%q: hint %q does not list the classes", s, hint)
			}
			return
		}
		if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, classes) {
			t.Fatalf("%q: budgets for %q, want %q", s, keys, classes)
		}
		for _, c := range classes {
			want := 0
			switch {
			case strings.TrimSpace(s) == "":
				want = defaults[c]
			case slices.Contains(named, c):
				want = defaults[c]
				if want == 0 {
					want = retryOnBudget
				}
			}
			if got[c] != want || got[c] < 0 || got[c] > maxBudget {
				t.Fatalf("%q: %s budget %d, want %d (at most %d)", s, c, got[c], want, maxBudget)
			}
			p := Policy{Budgets: got, Rand: func() float64 { return 0.5 }}
			retry, _, why := p.Next(c, nil, 0)
			if retry != (want > 0) {
				t.Fatalf("%q: Next(%s) retry %v (%s), want %v", s, c, retry, why, want > 0)
			}
		}
	})
}
