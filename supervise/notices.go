package supervise

import (
	"fmt"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// action is what a notice asks of the running job now.
type action int

const (
	// actNone: nothing now (a repeat, a cancellation, a stop set for later).
	actNone action = iota
	// actStop: checkpoint and stop the job now.
	actStop
	// actInsurance: checkpoint now, keep the job running.
	actInsurance
)

// event is one provider event, however often it is re-sent.
type event struct {
	n      gpuwarden.Notice
	effect gpuwarden.NoticeEffect
	rec    int
	// received is when the notice first arrived.
	received time.Time
	// stopAt is when the job is to be stopped for an interrupting event in
	// the future; zero when none is set.
	stopAt time.Time
	// stopped: the job was stopped for this event.
	stopped bool
	// over: the provider reported it completed or canceled, or it expired.
	over  bool
	grace time.Duration
}

// deadline is when the box goes away: the provider's time, or, when it
// gives none, the grace and the stop after the notice.
func (e *event) deadline() time.Time {
	if !e.n.At.IsZero() {
		return e.n.At
	}
	return e.received.Add(e.grace)
}

// noticeBook keeps every event a run heard, the policy's decision for
// each (gpuwarden.NoticeEffects) and the record the report carries. It is
// used from the supervising goroutine only.
type noticeBook struct {
	c    *Supervisor
	byID map[string]*event
	recs []gpuwarden.NoticeRecord
}

func newNoticeBook(c *Supervisor) *noticeBook {
	return &noticeBook{c: c, byID: map[string]*event{}}
}

// key is the notice's ID; a source that leaves it empty still gets each
// distinct notice once.
func key(n gpuwarden.Notice) string {
	if n.ID != "" {
		return n.ID
	}
	return n.Provider + "/" + n.Kind + "/" + n.At.String() + "/" + n.Detail
}

// take decides what a notice asks of the running job, per
// gpuwarden.NoticeEffects and the time left: one event is acted on once,
// a re-sent one only moves its deadline earlier, a cancellation calls off
// its pending stop.
func (b *noticeBook) take(n gpuwarden.Notice) (*event, action) {
	c := b.c
	now := c.Now()
	ev, known := b.byID[key(n)]
	if n.Canceled {
		if known {
			b.over(ev, "the provider reports it over")
		}
		return ev, actNone
	}
	if known {
		b.update(ev, n, now)
		return ev, actNone
	}
	eff := gpuwarden.EffectOf(n.Kind)
	ev = &event{n: n, effect: eff, received: now, grace: c.Grace + c.StopWait}
	b.byID[key(n)] = ev
	rec := gpuwarden.NoticeRecord{Notice: n, Received: now.UTC(), Detail: describe(n, eff)}
	ev.rec = len(b.recs)
	switch {
	case eff.Ends:
		rec.Action = gpuwarden.NoticeActionStop
		ev.stopped = true
		b.add(rec)
		return ev, actStop
	case eff.Interrupts && (n.At.IsZero() || n.At.Sub(now) <= c.MaintenanceLead):
		rec.Action = gpuwarden.NoticeActionStop
		ev.stopped = true
		b.add(rec)
		return ev, actStop
	case eff.Interrupts:
		ev.stopAt = n.At.Add(-c.MaintenanceLead)
		rec.Action, rec.StopAt = gpuwarden.NoticeActionScheduled, ev.stopAt.UTC()
		c.Log.Warn("notice: the job will be checkpointed and stopped before the event", "provider", n.Provider, "kind", n.Kind,
			"at", n.At.UTC().Format(time.RFC3339), "stop_at", ev.stopAt.UTC().Format(time.RFC3339), "detail", n.Detail)
		b.add(rec)
		return ev, actNone
	default:
		rec.Action = gpuwarden.NoticeActionInsurance
		b.add(rec)
		return ev, actInsurance
	}
}

// absorb takes a notice that arrives while the job is being stopped or is
// stopped: a stop already under way answers whatever would ask for one now.
func (b *noticeBook) absorb(n gpuwarden.Notice) {
	_, known := b.byID[key(n)]
	ev, act := b.take(n)
	if known || ev == nil || act == actNone {
		return
	}
	b.recs[ev.rec].Action = gpuwarden.NoticeActionAnswered
	b.note(ev, "came while the job was already stopped or being stopped")
	ev.stopped = ev.stopped || ev.effect.Ends
}

// update moves a known event's time earlier when the provider brings it
// forward; a later time (AWS's simulator moves the spot time with every
// request) never postpones a decision already taken.
func (b *noticeBook) update(ev *event, n gpuwarden.Notice, now time.Time) {
	if n.At.IsZero() || (!ev.n.At.IsZero() && !n.At.Before(ev.n.At)) {
		return
	}
	ev.n.At = n.At
	b.recs[ev.rec].Notice.At = n.At
	if !ev.stopAt.IsZero() && !ev.stopped {
		ev.stopAt = n.At.Add(-b.c.MaintenanceLead)
		b.recs[ev.rec].StopAt = ev.stopAt.UTC()
	}
	b.note(ev, "moved earlier to "+n.At.UTC().Format(time.RFC3339))
}

// over ends an event; a stop set for it is called off.
func (b *noticeBook) over(ev *event, why string) {
	if ev.over {
		return
	}
	ev.over = true
	if !ev.stopped && !ev.stopAt.IsZero() {
		b.recs[ev.rec].Action = gpuwarden.NoticeActionCalledOff
		b.c.Log.Info("scheduled event over before its stop; the job keeps running", "id", ev.n.ID, "why", why)
	}
	b.note(ev, why)
}

// expire ends an event the job was stopped for when no source is left to
// report its end and its time has passed.
func (b *noticeBook) expire(ev *event) {
	b.over(ev, "no source left to report its end, and its time passed: the box is still up")
}

// nextStop is the interrupting event whose stop comes first, nil when none is set.
func (b *noticeBook) nextStop() *event {
	var first *event
	for _, ev := range b.byID {
		if ev.stopAt.IsZero() || ev.stopped || ev.over {
			continue
		}
		if first == nil || ev.stopAt.Before(first.stopAt) {
			first = ev
		}
	}
	return first
}

// stopping marks a scheduled event whose stop has come.
func (b *noticeBook) stopping(ev *event) {
	ev.stopped = true
	b.recs[ev.rec].Action = gpuwarden.NoticeActionStop
	b.emit(ev.rec)
}

// doomed returns the event that ends the box, the earliest deadline first.
func (b *noticeBook) doomed() (*event, bool) {
	var first *event
	for _, ev := range b.byID {
		if !ev.effect.Ends || !ev.stopped {
			continue
		}
		if first == nil || ev.deadline().Before(first.deadline()) {
			first = ev
		}
	}
	return first, first != nil
}

// holding returns an interrupting event the job was stopped for and that
// is not over, and, when no source can report its end, when to give up
// waiting; nil when the job may restart or the box is doomed.
func (b *noticeBook) holding(noSource bool) (*event, time.Time) {
	if _, doomed := b.doomed(); doomed {
		return nil, time.Time{}
	}
	for _, ev := range b.byID {
		if !ev.effect.Interrupts || !ev.stopped || ev.over {
			continue
		}
		if !noSource {
			return ev, time.Time{}
		}
		at := ev.n.At
		if at.IsZero() {
			at = ev.received
		}
		return ev, at.Add(b.c.MaintenanceLead)
	}
	return nil, time.Time{}
}

// signalled records what the job was sent for an event.
func (b *noticeBook) signalled(ev *event, what string, grace time.Duration) {
	if ev == nil {
		return
	}
	b.recs[ev.rec].Signal = what
	b.recs[ev.rec].GraceSeconds = grace.Seconds()
	b.emit(ev.rec)
}

// answered records the checkpoint committed for an event.
func (b *noticeBook) answered(ev *event, checkpoint string) {
	if ev == nil || checkpoint == "" {
		return
	}
	b.recs[ev.rec].Checkpoint = checkpoint
	b.emit(ev.rec)
}

// note adds a sentence to an event's record.
func (b *noticeBook) note(ev *event, text string) {
	if ev == nil {
		return
	}
	b.recs[ev.rec].Detail += "; " + text
	b.emit(ev.rec)
}

func (b *noticeBook) add(rec gpuwarden.NoticeRecord) {
	b.recs = append(b.recs, rec)
	b.emit(len(b.recs) - 1)
}

func (b *noticeBook) emit(i int) {
	if b.c.OnNotice != nil {
		b.c.OnNotice(b.recs[i])
	}
}

// records returns a copy of every record, in the order the notices came.
func (b *noticeBook) records() []gpuwarden.NoticeRecord {
	return append([]gpuwarden.NoticeRecord{}, b.recs...)
}

// describe says what a notice is, in the policy's words.
func describe(n gpuwarden.Notice, eff gpuwarden.NoticeEffect) string {
	when := "no time given"
	if !n.At.IsZero() {
		when = "at " + n.At.UTC().Format(time.RFC3339)
	}
	detail := n.Detail
	if detail == "" {
		detail = n.ID
	}
	return fmt.Sprintf("%s %s (%s), %s: %s", n.Provider, n.Kind, detail, when, eff.Summary)
}
