package supervise

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// DefaultPoll is how often a Watcher looks for new checkpoints: short enough
// that a checkpoint written in answer to a notice is seen well inside the
// provider's warning window.
const DefaultPoll = 200 * time.Millisecond

// Watcher commits the checkpoints a job marks complete under root/incoming
// and reports every checkpoint that appears under root/committed, including
// those the job committed itself with `gpuwarden checkpoint commit`.
type Watcher struct {
	// Interval is the polling period, DefaultPoll when zero.
	Interval time.Duration

	// mu makes Scan safe while Run runs: a stop that sees the job end
	// looks once more for the checkpoint it asked for (runner.answered)
	// before the attempt stops Run, and the two raced over lastSeq.
	mu       sync.Mutex
	root     *Root
	onCommit func(gpuwarden.Checkpoint)
	log      *slog.Logger
	now      func() time.Time
	cache    *hashCache
	lastSeq  int
	failed   map[string]time.Time
}

// NewWatcher returns a watcher of root that reports only checkpoints
// committed after it was made, so that old ones are not synced again.
func NewWatcher(root *Root, onCommit func(gpuwarden.Checkpoint), log *slog.Logger) (*Watcher, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{root: root, onCommit: onCommit, log: log, now: time.Now, failed: map[string]time.Time{}}
	es, err := root.entries()
	if err != nil {
		return nil, err
	}
	for _, e := range es {
		w.lastSeq = max(w.lastSeq, e.seq)
	}
	return w, nil
}

// Run polls until ctx is done; the caller runs Scan once more afterwards to
// catch a marker written just before the job exited.
func (w *Watcher) Run(ctx context.Context) {
	iv := w.Interval
	if iv <= 0 {
		iv = DefaultPoll
	}
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		w.Scan()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Scan commits every marked checkpoint under incoming/ and reports the new
// valid ones under committed/, oldest first, each once, also when it is
// called while Run runs.
func (w *Watcher) Scan() []gpuwarden.Checkpoint {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.commitMarked()
	es, err := w.root.entries()
	if err != nil {
		w.log.Warn("list checkpoints", "err", err)
		return nil
	}
	var out []gpuwarden.Checkpoint
	for _, e := range es {
		if e.seq <= w.lastSeq {
			continue
		}
		w.lastSeq = e.seq
		cp, err := w.root.validate(e.name, w.cache)
		if err != nil {
			w.log.Warn("torn checkpoint", "name", e.name, "reason", err)
			continue
		}
		out = append(out, cp)
		if w.onCommit != nil {
			w.onCommit(cp)
		}
	}
	return out
}

// commitMarked commits incoming directories holding a marker, lowest step
// first so that sequence order follows the job's progress.
func (w *Watcher) commitMarked() {
	des, err := w.root.readDir(IncomingDir)
	if err != nil {
		w.log.Warn("list incoming checkpoints", "err", err)
		return
	}
	type marked struct {
		name string
		step int64
		at   time.Time
	}
	var ms []marked
	for _, d := range des {
		if !d.IsDir() {
			continue
		}
		info, err := w.root.fs.Lstat(IncomingDir + "/" + d.Name() + "/" + MarkerName)
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		ms = append(ms, marked{name: d.Name(), step: stepOf(d.Name()), at: info.ModTime()})
	}
	sort.Slice(ms, func(i, j int) bool {
		if ms[i].step != ms[j].step {
			return ms[i].step < ms[j].step
		}
		if !ms[i].at.Equal(ms[j].at) {
			return ms[i].at.Before(ms[j].at)
		}
		return ms[i].name < ms[j].name
	})
	for _, m := range ms {
		// A checkpoint that failed to commit is retried only when its marker
		// is written again, so one bad directory does not flood the log.
		if at, ok := w.failed[m.name]; ok && at.Equal(m.at) {
			continue
		}
		_, err := commit(w.root, w.root.abs(IncomingDir+"/"+m.name), w.now, w.cache)
		if gpuwarden.ErrorCodeOf(err) == gpuwarden.ENotFound || isNotExist(err) {
			continue // committed by `gpuwarden checkpoint commit` meanwhile
		}
		if err != nil {
			w.failed[m.name] = m.at
			w.log.Warn("commit checkpoint", "name", m.name, "err", err, "hint", gpuwarden.ErrorHint(err))
			continue
		}
		delete(w.failed, m.name)
	}
}
