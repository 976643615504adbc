package preempt

import (
	"context"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// MaxBackoff is the longest wait between failing polls: long enough to stop
// hammering a broken metadata service, short enough that a notice that
// appears after it recovers still arrives well inside a spot instance's
// two-minute warning.
const MaxBackoff = 5 * time.Second

// Watch polls s every `every` (the agent uses 1 s, inside its 2 s promise) from
// the moment it starts, calls notify once per notice ID for as long as it
// runs, backs off up to MaxBackoff while polls fail, and returns when ctx
// ends. It logs nothing: onError, when given, receives each failed poll's
// error, so the agent decides what a log line looks like. notify runs on
// Watch's goroutine, so it should hand off and return.
func Watch(ctx context.Context, s Source, every time.Duration, notify func(gpuwarden.Notice), onError ...func(error)) {
	if every <= 0 {
		every = time.Second
	}
	// A poll that hangs must not hold the loop past the next tick's budget.
	pollTimeout := min(max(2*every, time.Second), MaxBackoff)

	seen := make(map[string]bool)
	failures := 0
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		pctx, cancel := context.WithTimeout(ctx, pollTimeout)
		notices, err := s.Poll(pctx)
		cancel()
		for _, n := range notices {
			key := noticeKey(n)
			if seen[key] {
				continue
			}
			seen[key] = true
			notify(n)
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			failures++
			for _, fn := range onError {
				if fn != nil {
					fn(err)
				}
			}
		} else {
			failures = 0
		}
		timer.Reset(backoff(every, failures, MaxBackoff))
	}
}

// noticeKey is the notice's ID; a source that leaves it empty still gets
// each distinct notice once.
func noticeKey(n gpuwarden.Notice) string {
	if n.ID != "" {
		return n.ID
	}
	return n.Provider + "/" + n.Kind + "/" + n.At.String() + "/" + n.Detail
}

// backoff doubles the interval per consecutive failure up to limit (or up to
// every, when that is already longer).
func backoff(every time.Duration, failures int, limit time.Duration) time.Duration {
	limit = max(limit, every)
	d := every
	for range failures {
		d *= 2
		if d >= limit {
			return limit
		}
	}
	return d
}
