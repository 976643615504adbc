package http

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// commitCounter records each heartbeat commit; only RecordHeartbeats is
// called by the writer.
type commitCounter struct {
	gpuwarden.Fleet
	mu      sync.Mutex
	commits []int
}

func (c *commitCounter) RecordHeartbeats(_ context.Context, _ time.Time, hbs []gpuwarden.Heartbeat) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.commits = append(c.commits, len(hbs))
	return nil
}

func (c *commitCounter) committed() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.commits...)
}

// Heartbeats that arrive within the linger of the first go into its
// commit, and each is answered only once that commit returned.
func TestBeatWriterLingersIntoOneCommit(t *testing.T) {
	tests := []struct {
		name   string
		linger time.Duration
		n      int
		want   []int
	}{
		// A linger far longer than the requests take to arrive: one commit.
		{"lingering", 2 * time.Second, 5, []int{5}},
		// A full group commits at once, without waiting out the linger.
		{"a full group", time.Hour, maxHeartbeatBatch, []int{maxHeartbeatBatch}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := &commitCounter{}
			b := &beatWriter{store: store, now: time.Now, in: make(chan beatRequest, 4*maxHeartbeatBatch),
				stopped: make(chan struct{}), linger: tt.linger}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go b.run(ctx)
			var wg sync.WaitGroup
			acked := make(chan []int, tt.n)
			start := time.Now()
			for i := range tt.n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := b.write(ctx, gpuwarden.Heartbeat{Node: string(rune('a' + i%26))}); err != nil {
						t.Error(err)
					}
					acked <- store.committed()
				}()
			}
			wg.Wait()
			close(acked)
			for seen := range acked {
				if len(seen) == 0 {
					t.Fatal("a heartbeat was answered before any commit")
				}
			}
			if got := store.committed(); !equalInts(got, tt.want) {
				t.Errorf("commits = %v, want %v", got, tt.want)
			}
			if tt.linger == time.Hour && time.Since(start) > time.Minute {
				t.Error("a full group waited for its linger")
			}
		})
	}
}
