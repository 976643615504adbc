package agent

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// PodAttribution reads which Kubernetes containers hold which GPU device
// IDs (kubelet.Attribution); an error that wraps absent says there is no
// kubelet to ask, which is no fault.
type PodAttribution func(ctx context.Context) (map[string][]gpuwarden.PodRef, error)

// WatchPods labels the status's GPUs with the containers that hold them:
// it reads attribution every `every` until ctx ends, and sets each GPU's
// Pods from the refs of its NVML UUID, or of its index where the device
// plugin names devices by index. An absent kubelet is said once at debug
// level; any other failure is a warning each time it changes, and the
// labels stay as last read. MIG devices are listed under their own UUIDs,
// which the inventory does not map to a parent GPU, so they label nothing.
//
// It keeps to this file and touches the status only to swap in a new GPU
// slice, so a Status copy handed out earlier never changes under a reader.
func (a *Agent) WatchPods(ctx context.Context, read PodAttribution, absent error, every time.Duration) {
	var (
		refs       map[string][]gpuwarden.PodRef
		lastErr    string
		saidAbsent bool
	)
	poll := func() {
		rctx, cancel := context.WithTimeout(ctx, every)
		defer cancel()
		got, err := read(rctx)
		switch {
		case err == nil:
			refs, lastErr = got, ""
		case absent != nil && errors.Is(err, absent):
			if !saidAbsent {
				a.log.Debug("no pod attribution", "reason", err)
				saidAbsent = true
			}
			refs = nil
		case err.Error() != lastErr:
			lastErr = err.Error()
			a.log.Warn("read pod attribution", "err", err)
		}
	}
	poll()
	readTick := time.NewTicker(every)
	defer readTick.Stop()
	// The labels go on every second as well: start lists the GPUs afresh
	// after this loop may have labelled an earlier list.
	apply := time.NewTicker(time.Second)
	defer apply.Stop()
	a.labelPods(refs)
	for {
		select {
		case <-ctx.Done():
			return
		case <-readTick.C:
			poll()
		case <-apply.C:
		}
		a.labelPods(refs)
	}
}

// labelPods sets each GPU's Pods from refs, swapping in a new slice when
// anything changes.
func (a *Agent) labelPods(refs map[string][]gpuwarden.PodRef) {
	a.mu.Lock()
	defer a.mu.Unlock()
	gpus := slices.Clone(a.status.GPUs)
	changed := false
	for i, g := range gpus {
		pods := slices.Concat(refs[g.UUID], refs[strconv.Itoa(g.Index)])
		if !slices.Equal(pods, g.Pods) {
			gpus[i].Pods, changed = pods, true
		}
	}
	if changed {
		a.status.GPUs = gpus
	}
}
