package supervise

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// maxFailures is how many upload failures a sync report keeps.
const maxFailures = 8

// listTimeout bounds listing the store before the job starts.
const listTimeout = 2 * time.Minute

// syncTracker copies committed checkpoints to the store and counts what
// verifiably arrived, so that a run says what is durable instead of
// assuming it: an upload that fails is a failure in the report, not a line
// in the log.
type syncTracker struct {
	c    *Supervisor
	root *Root

	mu  sync.Mutex
	rep gpuwarden.SyncReport
}

func newSyncTracker(c *Supervisor, root *Root) *syncTracker {
	return &syncTracker{c: c, root: root, rep: gpuwarden.SyncReport{Target: c.Store.Where()}}
}

// begin brings the box and the store together before the first attempt:
// a box without a valid checkpoint, or with an older one than the store's,
// pulls the newest one that verifies; a newest local checkpoint the store
// lacks (a sync that failed last time) is uploaded now. A store that cannot
// be listed stops a box that has nothing to resume from, because starting
// over would silently redo work the store may hold.
func (s *syncTracker) begin(ctx context.Context) error {
	c := s.c
	local, haveLocal, _, err := s.root.newest()
	if err != nil {
		return fmt.Errorf("supervise: %w", err)
	}
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	remote, err := c.Store.List(lctx)
	cancel()
	if err != nil {
		if !haveLocal {
			return (&gpuwarden.Error{Code: gpuwarden.ErrorCodeOf(err), Message: "list " + c.Store.Where(), Err: err}).
				WithHint("this box has no checkpoint, and the store did not answer: starting now could redo work it holds; fix the store, or run without --sync to start over")
		}
		c.Log.Warn("cannot list the store; resuming from this box's checkpoint", "store", c.Store.Where(), "err", err)
		s.failed(local.Name, err)
		return nil
	}
	if !haveLocal || (len(remote) > 0 && remote[len(remote)-1].Committed.After(local.Committed)) {
		for i := len(remote) - 1; i >= 0; i-- {
			if haveLocal && !remote[i].Committed.After(local.Committed) {
				break
			}
			pctx, cancel := context.WithTimeout(ctx, c.SyncTimeout)
			cp, err := c.Store.Pull(pctx, remote[i].Name, s.root.abs(CommittedDir))
			cancel()
			if err != nil {
				c.Log.Warn("skip a stored checkpoint that does not verify", "checkpoint", remote[i].Name, "err", err)
				continue
			}
			c.Log.Info("restored the newest checkpoint", "checkpoint", cp.Name, "step", cp.Step, "from", c.Store.Where())
			s.rep.Restored = cp.Name
			s.durable(cp, remote[i].Committed)
			return nil
		}
	}
	for i := len(remote) - 1; i >= 0; i-- {
		if haveLocal && remote[i].Name == local.Name && sameFiles(remote[i], local) {
			s.durable(local, remote[i].Committed)
			return nil
		}
	}
	if len(remote) > 0 {
		newest := remote[len(remote)-1]
		s.durable(newest, newest.Committed)
	}
	if haveLocal {
		c.Log.Info("the store lacks this box's newest checkpoint; uploading it", "checkpoint", local.Name)
		s.push(local)
	}
	return nil
}

// push uploads one committed checkpoint and records the outcome; with
// KeepRemote it then prunes the store, never the checkpoint just made durable.
func (s *syncTracker) push(cp gpuwarden.Checkpoint) {
	c := s.c
	ctx, cancel := context.WithTimeout(context.Background(), c.SyncTimeout)
	defer cancel()
	start := time.Now()
	err := c.Store.Push(ctx, cp)
	if err != nil {
		c.Log.Error("checkpoint not durable: the upload failed", "checkpoint", cp.Name, "to", c.Store.Where(), "err", err, "hint", gpuwarden.ErrorHint(err))
		s.failed(cp.Name, err)
	} else {
		c.Log.Info("checkpoint synced and verified", "checkpoint", cp.Name, "to", c.Store.Where(), "took", time.Since(start).Round(time.Millisecond))
		s.mu.Lock()
		s.rep.Uploaded++
		s.mu.Unlock()
		s.durable(cp, c.Now())
		if c.KeepRemote != nil {
			removed, err := c.KeepRemote(ctx, cp.Name)
			if err != nil {
				c.Log.Warn("prune the store", "to", c.Store.Where(), "err", err)
			}
			if len(removed) > 0 {
				c.Log.Info("pruned the store", "names", removed, "keep", c.Keep)
				s.mu.Lock()
				s.rep.RemotePruned = append(s.rep.RemotePruned, removed...)
				s.mu.Unlock()
			}
		}
	}
	if c.OnSync != nil {
		c.OnSync(s.snapshot(cp.Name))
	}
}

// durable records cp as the newest durable checkpoint.
func (s *syncTracker) durable(cp gpuwarden.Checkpoint, synced time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rep.NewestDurable = &gpuwarden.DurableCheckpoint{
		Name: cp.Name, Step: cp.Step, Committed: cp.Committed.UTC(), Synced: synced.UTC(),
		URL: s.c.Store.Where() + "/" + cp.Name,
	}
}

// failed records an upload that did not make name durable.
func (s *syncTracker) failed(name string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rep.Failed++
	s.rep.Failures = append(s.rep.Failures, gpuwarden.SyncFailure{Checkpoint: name, Time: s.c.Now().UTC(), Error: err.Error()})
	if len(s.rep.Failures) > maxFailures {
		s.rep.Failures = slices.Delete(s.rep.Failures, 0, len(s.rep.Failures)-maxFailures)
	}
}

// snapshot is the report as of now, with newest the newest committed name.
func (s *syncTracker) snapshot(newest string) gpuwarden.SyncReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	rep := s.rep
	rep.Failures = slices.Clone(rep.Failures)
	rep.RemotePruned = slices.Clone(rep.RemotePruned)
	if rep.NewestDurable != nil {
		d := *rep.NewestDurable
		rep.NewestDurable = &d
	}
	rep.NewestCommitted = newest
	rep.Durable = newest == "" || (rep.NewestDurable != nil && rep.NewestDurable.Name == newest)
	return rep
}

// settle is the final word: the newest valid checkpoint on the box gets
// one more upload when it is not durable yet, then the report says whether it is.
func (s *syncTracker) settle() gpuwarden.SyncReport {
	local, ok, _, err := s.root.newest()
	if err != nil || !ok {
		return s.snapshot("")
	}
	if rep := s.snapshot(local.Name); !rep.Durable {
		s.c.Log.Info("the newest checkpoint is not durable yet; one more upload", "checkpoint", local.Name)
		s.push(local)
	}
	return s.snapshot(local.Name)
}

// sameFiles reports whether two manifests list the same files.
func sameFiles(a, b gpuwarden.Checkpoint) bool {
	return slices.Equal(a.Files, b.Files)
}
