package preempt

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// HealthWarnEvery is how often a source that keeps failing is logged again
// at warning level: once a minute says it is still down without a line
// every poll.
const HealthWarnEvery = time.Minute

// Health turns each poll's outcome into whether the notice source is up, for
// gpuwarden_notice_source_up{cloud}, and into log lines: a failure inside
// the source's documented warm-up (Azure's first call may take up to two
// minutes while it enables Scheduled Events) is expected and logged at debug
// level; after it a failure is a warning, the first of a run of failures
// and then once per HealthWarnEvery, because a box whose notices go unheard
// is not protected; the recovery after a warning is logged at info level.
// Its methods are safe for concurrent use.
type Health struct {
	// Cloud is the source's provider, the metric's label.
	Cloud string
	// WarmUp is how long after the first poll failures are expected.
	WarmUp time.Duration
	// Now is the clock, a field so tests can fix it.
	Now func() time.Time
	// OnChange, when set, hears every change of up, and the first poll's
	// state, so the agent can show it.
	OnChange func(up bool)

	log *slog.Logger

	mu       sync.Mutex
	first    time.Time
	known    bool
	up       bool
	failedAt time.Time // first failure of the current run; zero while up
	warnedAt time.Time // last warning of the current run
}

// NewHealth returns the Health of src, with the warm-up its provider
// documents (a source with a WarmUp method) and log for its lines.
func NewHealth(src Source, log *slog.Logger) *Health {
	h := &Health{Cloud: src.Provider(), Now: time.Now, log: log}
	if w, ok := src.(interface{ WarmUp() time.Duration }); ok {
		h.WarmUp = w.WarmUp()
	}
	if h.log == nil {
		h.log = discardLogger
	}
	return h
}

// Observe records one poll's outcome: err nil means the poll read
// everything. Pass it to Watch as its onPoll.
func (h *Health) Observe(err error) {
	now := h.Now()
	h.mu.Lock()
	if h.first.IsZero() {
		h.first = now
	}
	changed := !h.known || h.up != (err == nil)
	h.known, h.up = true, err == nil
	var level slog.Level
	var msg string
	var attrs []any
	switch {
	case err == nil:
		if !h.warnedAt.IsZero() {
			level, msg = slog.LevelInfo, "cloud metadata answers again: notices are heard"
			attrs = []any{"cloud", h.Cloud, "failed_for", now.Sub(h.failedAt).Round(time.Second)}
		}
		h.failedAt, h.warnedAt = time.Time{}, time.Time{}
	default:
		if h.failedAt.IsZero() {
			h.failedAt = now
		}
		attrs = []any{"cloud", h.Cloud, "err", err}
		switch {
		case now.Sub(h.first) < h.WarmUp:
			level, msg = slog.LevelDebug, "cloud metadata not answering yet (within the documented warm-up)"
			attrs = append(attrs, "warm_up", h.WarmUp)
		case h.warnedAt.IsZero() || now.Sub(h.warnedAt) >= HealthWarnEvery:
			level, msg = slog.LevelWarn, "cloud metadata does not answer: preemption and maintenance notices are not heard"
			attrs = append(attrs, "failing_for", now.Sub(h.failedAt).Round(time.Second))
			h.warnedAt = now
		default:
			level, msg = slog.LevelDebug, "poll cloud metadata"
		}
	}
	up := h.up
	h.mu.Unlock()
	if msg != "" {
		h.log.Log(context.Background(), level, msg, attrs...)
	}
	if changed && h.OnChange != nil {
		h.OnChange(up)
	}
}

// Up reports whether the last poll read everything; known is false before
// the first poll.
func (h *Health) Up() (up, known bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.up, h.known
}
