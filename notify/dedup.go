package notify

import (
	"context"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// DefaultDedupWindow is how long Dedup remembers a sent event.
const DefaultDedupWindow = time.Hour

// Dedup drops an event whose Key (or, with no key, Kind and Message) was
// sent within Window, so that a flapping condition cannot flood a channel;
// it remembers in memory only (the ledger dedups across restarts) and is
// safe for concurrent use.
type Dedup struct {
	// Next receives the events that pass.
	Next gpuwarden.Notifier
	// Window is how long a sent event blocks its twins; 0 means an hour.
	Window time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu    sync.Mutex
	sent  map[string]time.Time
	swept time.Time
}

var _ gpuwarden.Notifier = (*Dedup)(nil)

// Notify passes e on unless its twin was sent within the window; a dropped
// event returns nil, since it was (recently) delivered.
func (d *Dedup) Notify(ctx context.Context, e gpuwarden.Event) error {
	key := e.Key
	if key == "" {
		key = e.Kind + "\x00" + e.Message
	}
	window := d.Window
	if window <= 0 {
		window = DefaultDedupWindow
	}
	now := time.Now
	if d.Now != nil {
		now = d.Now
	}
	t := now()

	d.mu.Lock()
	if d.sent == nil {
		d.sent = make(map[string]time.Time)
	}
	if t.Sub(d.swept) >= window {
		// Forget expired keys once per window, so memory follows the
		// events of one window rather than of the agent's whole life.
		for k, at := range d.sent {
			if t.Sub(at) >= window {
				delete(d.sent, k)
			}
		}
		d.swept = t
	}
	prev, seen := d.sent[key]
	if seen && t.Sub(prev) < window {
		d.mu.Unlock()
		return nil
	}
	// Claim the key before sending, so that a burst of twins arriving
	// while the first is in flight is dropped rather than sent in parallel.
	d.sent[key] = t
	d.mu.Unlock()

	err := d.Next.Notify(ctx, e)
	if err != nil {
		// Not delivered: release the claim so that the next twin is tried.
		d.mu.Lock()
		if at, ok := d.sent[key]; ok && at.Equal(t) {
			if seen {
				d.sent[key] = prev
			} else {
				delete(d.sent, key)
			}
		}
		d.mu.Unlock()
	}
	return err
}
