package objstore

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	"github.com/gpuwarden/gpuwarden"
)

// sequenceOf returns the sequence number of a committed checkpoint's name,
// without leading zeros, and false for a name gpuwarden did not give
// (gpuwarden.ParseCheckpointName, the one definition of the form the
// supervisor commits: "000007-step-000140"). Retention touches only names
// of this form, because a store is often shared and anything else there is
// someone else's.
func sequenceOf(name string) (string, bool) {
	seq, _, ok := gpuwarden.ParseCheckpointName(name)
	if !ok {
		return "", false
	}
	return strconv.FormatInt(seq, 10), true
}

// Keep applies retention to store: of the checkpoints whose name has
// gpuwarden's committed form and whose manifest is valid (List offers no
// other), it keeps the newest keep by sequence number plus protect, and
// deletes the rest with store.Delete, oldest first. It returns the names it
// deleted.
//
// The order is the sequence in the name, not the commit time, because the
// supervisor numbers checkpoints in the order the job wrote them while
// clocks of successive boxes may disagree. protect is the newest durable
// checkpoint, which must survive even when newer ones by sequence exist
// (their push may not have finished, or they may not have been verified);
// "" protects nothing beyond the newest keep. keep below 1 is EInvalid,
// since a retention that may delete every copy is a mistake. A failed List
// deletes nothing; a failed Delete stops the pass and is returned with the
// names deleted before it, so the next pass resumes where this one stopped.
func Keep(ctx context.Context, store gpuwarden.CheckpointStore, keep int, protect string) ([]string, error) {
	if keep < 1 {
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "keep %d checkpoints: must keep at least 1", keep).
			WithHint("--keep counts the checkpoints to keep, the newest first; give 1 or more")
	}
	cps, err := store.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("keep %d in %s: %w", keep, store.Where(), err)
	}
	type ranked struct{ seq, name string }
	var ours []ranked
	for _, cp := range cps {
		if seq, ok := sequenceOf(cp.Name); ok {
			ours = append(ours, ranked{seq, cp.Name})
		}
	}
	// Newest first: a longer number without leading zeros is larger, and
	// equal lengths compare as strings, which holds for any number of
	// digits; the name breaks a tie so that every pass agrees.
	sort.Slice(ours, func(i, j int) bool {
		a, b := ours[i], ours[j]
		if len(a.seq) != len(b.seq) {
			return len(a.seq) > len(b.seq)
		}
		if a.seq != b.seq {
			return a.seq > b.seq
		}
		return a.name > b.name
	})
	deleted := []string{}
	for i := len(ours) - 1; i >= keep; i-- {
		name := ours[i].name
		if name == protect {
			continue
		}
		if err := store.Delete(ctx, name); err != nil {
			return deleted, fmt.Errorf("keep %d in %s: %w", keep, store.Where(), err)
		}
		deleted = append(deleted, name)
	}
	return deleted, nil
}
