package supervise

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// Retry defaults.
const (
	// DefaultMaxRestarts caps restarts of all classes together, so a job
	// that fails a different way each time still stops.
	DefaultMaxRestarts = 20
	// DefaultBackoffBase is the first backoff ceiling, doubled per restart of a class.
	DefaultBackoffBase = 2 * time.Second
	// DefaultBackoffMax caps the ceiling, so a flapping job still retries every few minutes.
	DefaultBackoffMax = 5 * time.Minute
	// PreemptedWait is the pause before restarting after a notice: no
	// backoff, since nothing failed, only enough to let the old group's
	// GPU memory be released.
	PreemptedWait = time.Second
	// retryOnBudget is the budget a class off by default gets when listed.
	retryOnBudget = 3
)

// retryClasses are the classes that can be retried, in the order help lists them.
var retryClasses = []string{
	gpuwarden.ExitPreempted, gpuwarden.ExitHostOOM, gpuwarden.ExitCUDAOOM,
	gpuwarden.ExitGPUFault, gpuwarden.ExitSignal, gpuwarden.ExitUser,
}

// DefaultBudgets returns the restarts allowed per class: a notice is not the
// job's fault, a GPU fault or stray kill is often transient, running out of
// memory again is likely, and a user error repeats.
func DefaultBudgets() map[string]int {
	return map[string]int{
		gpuwarden.ExitPreempted: 100,
		gpuwarden.ExitHostOOM:   2,
		gpuwarden.ExitCUDAOOM:   1,
		gpuwarden.ExitGPUFault:  3,
		gpuwarden.ExitSignal:    3,
		gpuwarden.ExitUser:      0,
	}
}

// Policy decides whether and when to restart a job after an attempt ended.
type Policy struct {
	// Budgets is the restarts allowed per class; a class missing from it
	// gets its default budget, and nil means DefaultBudgets.
	Budgets map[string]int
	// MaxRestarts caps all restarts together; zero means DefaultMaxRestarts.
	MaxRestarts int
	// Base and Max bound the backoff; zero means 2 s and 5 min.
	Base, Max time.Duration
	// Rand returns a number in [0, 1) for the jitter; nil means math/rand.
	Rand func() float64
}

// Next says whether to restart after an attempt of class, given the
// restarts so far by class and in total, how long to wait first and why.
// The wait is exponential per class with full jitter (a random share of
// Base·2^n, at most Max), so that many boxes failing at once do not retry in step.
func (p *Policy) Next(class string, restartsByClass map[string]int, total int) (retry bool, wait time.Duration, why string) {
	if class == gpuwarden.ExitOK {
		return false, 0, "finished"
	}
	maxTotal := p.MaxRestarts
	if maxTotal <= 0 {
		maxTotal = DefaultMaxRestarts
	}
	if total >= maxTotal {
		return false, 0, fmt.Sprintf("reached the cap of %d restarts", maxTotal)
	}
	budget, known := p.budget(class)
	if !known {
		return false, 0, fmt.Sprintf("%s is not a retryable class", class)
	}
	used := restartsByClass[class]
	if used >= budget {
		if budget == 0 {
			return false, 0, fmt.Sprintf("%s is not retried (add it to --retry-on to retry it)", class)
		}
		return false, 0, fmt.Sprintf("%s used its %d restart(s)", class, budget)
	}
	if class == gpuwarden.ExitPreempted {
		return true, PreemptedWait, fmt.Sprintf("%s restart %d of %d", class, used+1, budget)
	}
	base, top := p.Base, p.Max
	if base <= 0 {
		base = DefaultBackoffBase
	}
	if top <= 0 {
		top = DefaultBackoffMax
	}
	ceiling := base
	for i := 0; i < used && ceiling < top; i++ {
		ceiling *= 2
	}
	ceiling = min(ceiling, top)
	r := p.Rand
	if r == nil {
		r = rand.Float64
	}
	wait = time.Duration(r() * float64(ceiling))
	return true, wait, fmt.Sprintf("%s restart %d of %d after %s", class, used+1, budget, wait.Round(time.Millisecond))
}

func (p *Policy) budget(class string) (int, bool) {
	if b, ok := p.Budgets[class]; ok {
		return b, true
	}
	b, ok := DefaultBudgets()[class]
	return b, ok
}

// ParseRetryOn turns a --retry-on list ("preempted,gpu-fault,user-error")
// into budgets: the listed classes are retried, with their default budget or
// 3 when they are off by default (user-error), and the others are not.
// "none" retries nothing; an empty list means the defaults.
func ParseRetryOn(s string) (map[string]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return DefaultBudgets(), nil
	}
	defaults := DefaultBudgets()
	out := map[string]int{}
	for _, c := range retryClasses {
		out[c] = 0
	}
	if s == "none" {
		return out, nil
	}
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		b, ok := defaults[name]
		if !ok {
			return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "--retry-on: unknown class %q", name).
				WithHint("choose from %s, or none", strings.Join(retryClasses, ", "))
		}
		if b == 0 {
			b = retryOnBudget
		}
		out[name] = b
	}
	return out, nil
}
