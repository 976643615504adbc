package supervise

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
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

// maxRestoreSkipped bounds the skipped checkpoints a report keeps; the log
// names every one.
const maxRestoreSkipped = 32

// stored is a checkpoint of the store with the sequence number of its name.
type stored struct {
	gpuwarden.Checkpoint
	seq int64
}

// newer orders checkpoints as the restore does: by the sequence number in
// the name, because the supervisor numbers checkpoints in the order the job
// wrote them, while commit times come from the clocks of different boxes
// (one a day ahead once made the next box resume step 20 with step 60
// stored), so a commit time is information, never an order. Two histories
// that both reached a sequence number tie-break by name, the order in which
// the box's own resume (Root.entries) would take them, so that what is
// restored is what is resumed; the same name on the box and in the store is
// this box's checkpoint, never newer.
func newer(a, b stored) bool {
	if a.seq != b.seq {
		return a.seq > b.seq
	}
	return a.Name > b.Name
}

// begin brings the box and the store together before the first attempt:
// a box without a valid checkpoint, or with an older one than the store's,
// pulls the newest one that verifies; a newest local checkpoint the store
// lacks (a sync that failed last time) is uploaded now. A store that cannot
// be listed, or stops answering during the restore, stops a box that has
// nothing to resume from, because starting over would silently redo work
// the store may hold.
//
// The candidates are gpuwarden's checkpoints (gpuwarden.ParseCheckpointName)
// newest first by sequence. A stored name gpuwarden does not write is never
// pulled: it would become a directory here and, through {resume}, a word in
// the job's shell. A candidate the resume would reject (a manifest listing
// no file), or whose pull fails or does not verify, is skipped with its
// reason and the next one is tried; the report names the one restored, or
// none, and every one skipped.
func (s *syncTracker) begin(ctx context.Context) error {
	c := s.c
	local, haveLocal, _, err := s.root.newest()
	if err != nil {
		return fmt.Errorf("supervise: %w", err)
	}
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	listed, err := c.Store.List(lctx)
	cancel()
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("supervise: list %s: %w", c.Store.Where(), ctx.Err())
	}
	if err != nil {
		if !haveLocal {
			return (&gpuwarden.Error{Code: gpuwarden.ErrorCodeOf(err), Message: "list " + c.Store.Where(), Err: err}).
				WithHint("this box has no checkpoint, and the store did not answer: starting now could redo work it holds; fix the store, or run without --sync to start over")
		}
		c.Log.Warn("cannot list the store; resuming from this box's checkpoint", "store", c.Store.Where(), "err", err)
		s.failed(local.Name, err)
		return nil
	}
	remote := s.candidates(listed)
	here := stored{Checkpoint: local, seq: int64(seqOf(local.Name))}
	for _, cand := range remote {
		if haveLocal && !newer(cand, here) {
			break
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("supervise: restore from %s: %w", c.Store.Where(), err)
		}
		if len(cand.Files) == 0 {
			s.skip(cand.Name, "its manifest lists no files, so nothing in it can be verified or resumed")
			continue
		}
		c.Log.Debug("restoring a checkpoint from the store", "checkpoint", cand.Name, "step", cand.Step, "bytes", cand.Bytes, "from", c.Store.Where())
		pctx, cancel := context.WithTimeout(ctx, c.SyncTimeout)
		cp, err := c.Store.Pull(pctx, cand.Name, s.root.abs(CommittedDir))
		cancel()
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("supervise: restore %s from %s: %w", cand.Name, c.Store.Where(), ctx.Err())
		}
		if err != nil {
			c.Log.Warn("skip a stored checkpoint that does not verify", "checkpoint", cand.Name, "err", err)
			s.skip(cand.Name, err.Error())
			if !errors.Is(err, context.DeadlineExceeded) {
				continue
			}
			// The store stopped answering within --sync-timeout (a hung
			// mount): the older ones would hang as long, each.
			if !haveLocal {
				return (&gpuwarden.Error{Code: gpuwarden.EUnavailable, Message: "restore " + cand.Name + " from " + c.Store.Where(), Err: err}).
					WithHint("this box has no checkpoint, and the store stopped answering: starting now could redo work it holds; fix the store, raise --sync-timeout, or run without --sync to start over")
			}
			c.Log.Warn("the store stopped answering; resuming from this box's checkpoint", "store", c.Store.Where(), "checkpoint", local.Name)
			break
		}
		c.Log.Info("restored the newest checkpoint", "checkpoint", cp.Name, "step", cp.Step, "from", c.Store.Where())
		s.mu.Lock()
		s.rep.Restored = cp.Name
		s.mu.Unlock()
		s.durable(cp, cand.Committed)
		return nil
	}
	for _, r := range remote {
		if haveLocal && r.Name == local.Name && sameFiles(r.Checkpoint, local) {
			s.durable(local, r.Committed)
			return nil
		}
	}
	for _, r := range remote {
		if len(r.Files) > 0 {
			s.durable(r.Checkpoint, r.Committed)
			break
		}
	}
	if haveLocal {
		c.Log.Info("the store lacks this box's newest checkpoint; uploading it", "checkpoint", local.Name)
		s.push(local)
	}
	return nil
}

// candidates keeps the listed checkpoints gpuwarden wrote, newest first;
// every other name is logged, quoted, and reported as skipped.
func (s *syncTracker) candidates(listed []gpuwarden.Checkpoint) []stored {
	var out []stored
	for _, cp := range listed {
		seq, _, ok := gpuwarden.ParseCheckpointName(cp.Name)
		if !ok {
			s.c.Log.Warn("not a checkpoint gpuwarden wrote; never restored", "name", fmt.Sprintf("%q", cp.Name), "store", s.c.Store.Where())
			s.skip(cp.Name, "not a name gpuwarden writes (SEQUENCE-folder, letters, digits, dots, dashes and underscores only)")
			continue
		}
		out = append(out, stored{Checkpoint: cp, seq: seq})
	}
	sort.SliceStable(out, func(i, j int) bool { return newer(out[i], out[j]) })
	return out
}

// skip records a stored checkpoint the restore passed over.
func (s *syncTracker) skip(name, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.rep.RestoreSkipped) < maxRestoreSkipped {
		s.rep.RestoreSkipped = append(s.rep.RestoreSkipped, gpuwarden.RestoreSkip{Checkpoint: name, Reason: reason})
	}
}

// resumed checks the first attempt's resume against the restore, so that
// the report never says "restored" for a checkpoint the job did not start
// from.
func (s *syncTracker) resumed(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rep.Restored == "" || s.rep.Restored == name {
		return
	}
	s.c.Log.Warn("the restored checkpoint was not the one resumed", "restored", s.rep.Restored, "resumed", name)
	if len(s.rep.RestoreSkipped) < maxRestoreSkipped {
		s.rep.RestoreSkipped = append(s.rep.RestoreSkipped, gpuwarden.RestoreSkip{Checkpoint: s.rep.Restored, Reason: "pulled, but the resume chose " + fmt.Sprintf("%q", name)})
	}
	s.rep.Restored = ""
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
	rep.RestoreSkipped = slices.Clone(rep.RestoreSkipped)
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
