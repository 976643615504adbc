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

// Watch polls s every `every` (the agent uses 1 s, inside its 2 s promise)
// from the moment it starts, backs off up to MaxBackoff while polls fail, and
// returns when ctx ends. It calls notify once per event, not once per poll:
//   - a notice whose ID it has not delivered is delivered;
//   - a delivered ID is delivered again only when its At moves earlier (or
//     becomes known), because a tighter deadline changes what the job must
//     do; an At that moves later, as amazon-ec2-metadata-mock's spot time
//     does on every request, or any other change is not delivered;
//   - a delivered ID that comes back Canceled is delivered once more and then
//     forgotten, so that a later active notice under it is a new event; a
//     cancellation of an ID never delivered has nothing to call off and is
//     dropped.
//
// It logs nothing: onPoll, when given, receives each poll's error, nil
// after a poll that read everything, so the caller decides what a log line
// looks like and whether the source is up (Health.Observe does both).
// notify runs on Watch's goroutine, so it should hand off and return.
func Watch(ctx context.Context, s Source, every time.Duration, notify func(gpuwarden.Notice), onPoll ...func(error)) {
	if every <= 0 {
		every = time.Second
	}
	// A poll that hangs must not hold the loop past the next tick's budget.
	pollTimeout := min(max(2*every, time.Second), MaxBackoff)

	var d deliveries
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
			if d.admit(n) {
				notify(n)
			}
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			failures++
		} else {
			failures = 0
		}
		for _, fn := range onPoll {
			if fn != nil {
				fn(err)
			}
		}
		timer.Reset(backoff(every, failures, MaxBackoff))
	}
}

// deliveries is Watch's memory: the At last delivered for each live ID. A
// canceled ID is dropped, so it holds only events the provider still lists.
type deliveries struct {
	at map[string]time.Time
}

// admit applies Watch's rule to n and says whether to deliver it.
func (d *deliveries) admit(n gpuwarden.Notice) bool {
	if d.at == nil {
		d.at = make(map[string]time.Time)
	}
	key := noticeKey(n)
	last, known := d.at[key]
	switch {
	case n.Canceled:
		delete(d.at, key)
		return known
	case !known:
		d.at[key] = n.At
		return true
	case !n.At.IsZero() && (last.IsZero() || n.At.Before(last)):
		d.at[key] = n.At
		return true
	}
	return false
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
