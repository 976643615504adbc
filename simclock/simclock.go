// Package simclock is the clock a simulated box can run on: the time
// written in a file that a test or a demo steps. `up --simulate` and `run`
// read their time from it (the hidden --clock-file flag), the agent ticks
// once per step and acknowledges each, so that a month of idle stops,
// budget stops and preemptions runs in seconds and lands on exact times,
// and the test never races the processes it drives. A real box's path
// never uses it: `up` accepts it only with --simulate.
package simclock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Clock is the time in a file: one RFC 3339 line, replaced atomically by
// whoever steps it (Set).
type Clock struct {
	path string

	mu   sync.Mutex
	last time.Time
}

// Open reads the clock file once: a missing or unreadable one is an error
// naming it, so that a process never starts on a time it cannot tell.
func Open(path string) (*Clock, error) {
	c := &Clock{path: path}
	t, err := read(path)
	if err != nil {
		return nil, err
	}
	c.last = t
	return c, nil
}

// Now is the file's time. Time never runs backwards: an earlier time, or a
// file that cannot be read for a moment, keeps the last one.
func (c *Clock) Now() time.Time {
	t, err := read(c.path)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && t.After(c.last) {
		c.last = t
	}
	return c.last
}

// Ticks sends the clock's time each time it moves forward, polling the file
// every poll, until ctx ends. The first tick is the time at the call.
func (c *Clock) Ticks(ctx context.Context, poll time.Duration) <-chan time.Time {
	ch := make(chan time.Time)
	go func() {
		defer close(ch)
		var sent time.Time
		t := time.NewTicker(poll)
		defer t.Stop()
		for {
			if now := c.Now(); now.After(sent) {
				select {
				case ch <- now:
					sent = now
				case <-ctx.Done():
					return
				}
			}
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}

// Ack says that name finished its work for time t (ackPath): the stepper
// waits for it before it moves the clock on.
func (c *Clock) Ack(name string, t time.Time) error {
	return writeAtomic(AckPath(c.path, name), t)
}

// AckPath is where name acknowledges the clock file at path: beside it,
// one file per name.
func AckPath(path, name string) string {
	safe := strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, name)
	return path + ".ack-" + safe
}

// Set writes t to the clock file at path atomically (a rename), so that a
// reader sees the old time or the new one, never a torn line.
func Set(path string, t time.Time) error { return writeAtomic(path, t) }

// Acked reports whether name has acknowledged t (or a later time) on the
// clock file at path.
func Acked(path, name string, t time.Time) bool {
	got, err := read(AckPath(path, name))
	return err == nil && !got.Before(t)
}

func read(path string) (time.Time, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, fmt.Errorf("clock file: %w", err)
	}
	line := strings.TrimSpace(string(b))
	t, err := time.Parse(time.RFC3339Nano, line)
	if err != nil {
		return time.Time{}, fmt.Errorf("clock file %s: line 1: %q is not an RFC 3339 time such as 2026-11-01T00:00:00Z", path, line)
	}
	return t.UTC(), nil
}

func writeAtomic(path string, t time.Time) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("clock file: %w", err)
	}
	_, werr := tmp.WriteString(t.UTC().Format(time.RFC3339Nano) + "\n")
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("clock file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("clock file: %w", err)
	}
	return nil
}
