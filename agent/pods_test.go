package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

var errAbsent = errors.New("no kubelet pod-resources socket")

// watch runs WatchPods until stop is called, which waits for it to return.
func watch(a *Agent, read PodAttribution) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.WatchPods(ctx, read, errAbsent, 10*time.Millisecond); close(done) }()
	return func() { cancel(); <-done }
}

// waitFor polls the status until cond holds, or fails after 3 s.
func waitFor(t *testing.T, a *Agent, cond func([]gpuwarden.GPU) bool) []gpuwarden.GPU {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		gpus := a.Status().GPUs
		if cond(gpus) {
			return gpus
		}
		if time.Now().After(deadline) {
			t.Fatalf("status GPUs never matched: %+v", gpus)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWatchPodsLabelsGPUs(t *testing.T) {
	h := newHarness(t)
	a := h.agent("3xH100", Config{}, gpuwarden.HostSample{})
	before := a.Status().GPUs
	trainer := gpuwarden.PodRef{Namespace: "ml", Pod: "train-0", Container: "trainer"}
	legacy := gpuwarden.PodRef{Namespace: "default", Pod: "legacy", Container: "app"}
	var mu sync.Mutex
	refs := map[string][]gpuwarden.PodRef{
		before[0].UUID: {trainer},
		"1":            {legacy}, // deviceIDStrategy=index
		"MIG-cccccccc-0000-0000-0000-000000000000": {{Namespace: "ana", Pod: "nb", Container: "jupyter"}},
	}
	read := func(context.Context) (map[string][]gpuwarden.PodRef, error) {
		mu.Lock()
		defer mu.Unlock()
		return refs, nil
	}
	stop := watch(a, read)
	defer stop()
	gpus := waitFor(t, a, func(g []gpuwarden.GPU) bool { return len(g[0].Pods) == 1 && len(g[1].Pods) == 1 })
	if !reflect.DeepEqual(gpus[0].Pods, []gpuwarden.PodRef{trainer}) || !reflect.DeepEqual(gpus[1].Pods, []gpuwarden.PodRef{legacy}) || gpus[2].Pods != nil {
		t.Errorf("pods %v / %v / %v", gpus[0].Pods, gpus[1].Pods, gpus[2].Pods)
	}
	for _, g := range before {
		if g.Pods != nil {
			t.Errorf("a Status copy taken before changed under its reader: %+v", g)
		}
	}
	// The pod goes away: so does the label.
	mu.Lock()
	refs = map[string][]gpuwarden.PodRef{}
	mu.Unlock()
	waitFor(t, a, func(g []gpuwarden.GPU) bool { return g[0].Pods == nil && g[1].Pods == nil })
}

func TestWatchPodsFailures(t *testing.T) {
	h := newHarness(t)
	a := h.agent("1xH100", Config{}, gpuwarden.HostSample{})
	var logs bytes.Buffer
	a.log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	uuid := a.Status().GPUs[0].UUID
	ref := gpuwarden.PodRef{Namespace: "ml", Pod: "p", Container: "c"}

	var mu sync.Mutex
	calls := 0
	// The kubelet answers twice, then fails the same way for a while,
	// then another way, then is gone.
	read := func(context.Context) (map[string][]gpuwarden.PodRef, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		switch {
		case calls <= 2:
			return map[string][]gpuwarden.PodRef{uuid: {ref}}, nil
		case calls <= 6:
			return nil, errors.New("kubelet pod resources: list: Unavailable")
		case calls <= 8:
			return nil, errors.New("kubelet pod resources: list: PermissionDenied")
		}
		return nil, fmt.Errorf("kubelet pod resources: /x.sock: %w", errAbsent)
	}
	stop := watch(a, read)
	// While the kubelet fails, the labels stay as last read.
	waitFor(t, a, func(g []gpuwarden.GPU) bool {
		mu.Lock()
		defer mu.Unlock()
		return calls >= 5 && len(g[0].Pods) == 1
	})
	// Once it is gone, there is nothing to say who holds the GPU.
	waitFor(t, a, func(g []gpuwarden.GPU) bool {
		mu.Lock()
		defer mu.Unlock()
		return calls >= 12 && g[0].Pods == nil
	})
	stop()
	out := logs.String()
	for _, tc := range []struct {
		what string
		n    int
	}{
		{"level=WARN msg=\"read pod attribution\" err=\"kubelet pod resources: list: Unavailable\"", 1},
		{"level=WARN msg=\"read pod attribution\" err=\"kubelet pod resources: list: PermissionDenied\"", 1},
		{"level=DEBUG msg=\"no pod attribution\"", 1},
	} {
		if got := strings.Count(out, tc.what); got != tc.n {
			t.Errorf("%d lines of %s, want %d:\n%s", got, tc.what, tc.n, out)
		}
	}
}
