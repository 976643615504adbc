package launch

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// clock is a fake Options.Now and Options.Sleep: sleeping moves it on at
// once, and each Now moves it on by tick, so that durations are exact and
// cost no wall time.
type clock struct {
	mu    sync.Mutex
	now   time.Time
	tick  time.Duration
	slept []time.Duration
}

func newClock(tick time.Duration) *clock {
	return &clock{now: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC), tick: tick}
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.now
	c.now = c.now.Add(c.tick)
	return t
}

func (c *clock) Sleep(ctx context.Context, d time.Duration) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.slept = append(c.slept, d)
	return nil
}

func (c *clock) Slept() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.slept...)
}

// recorder keeps every Record call, as the ledger does.
type recorder struct {
	mu   sync.Mutex
	recs []gpuwarden.LaunchAttempt
	// fail, when set, makes Record fail for the records it returns true for.
	fail func(a gpuwarden.LaunchAttempt) bool
}

func (r *recorder) Record(ctx context.Context, a gpuwarden.LaunchAttempt) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil && r.fail(a) {
		return errors.New("disk full")
	}
	r.recs = append(r.recs, a)
	return nil
}

func (r *recorder) Records() []gpuwarden.LaunchAttempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]gpuwarden.LaunchAttempt(nil), r.recs...)
}

// script is the command that runs testdata/name with sh, by absolute path,
// so that tests need no exec bits and no working directory.
func script(t *testing.T, name string, args ...string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return strings.Join(append([]string{"sh", shellQuote(p)}, args...), " ")
}

// env is a test's scratch directory and the marker file its scripts write
// to, so a test can prove what ran.
type env struct {
	dir    string
	marker string
	out    *bytes.Buffer
	clock  *clock
	rec    *recorder
}

func newEnv(t *testing.T, tick time.Duration) *env {
	dir := t.TempDir()
	return &env{dir: dir, marker: filepath.Join(dir, "marker"), out: &bytes.Buffer{}, clock: newClock(tick), rec: &recorder{}}
}

func (e *env) options(targets ...gpuwarden.Target) Options {
	return Options{
		Targets: targets,
		Env:     []string{"GW_MARKER=" + e.marker, "GW_STATE=" + filepath.Join(e.dir, "state"), "GW_PIDFILE=" + filepath.Join(e.dir, "pid")},
		Out:     e.out,
		Now:     e.clock.Now,
		Sleep:   e.clock.Sleep,
		Rand:    func() float64 { return 0.5 },
	}
}

// ran is what the scripts wrote to the marker file, one line each.
func (e *env) ran(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(e.marker)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func outcomes(as []gpuwarden.LaunchAttempt) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.Target+":"+a.Outcome)
	}
	return out
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func code(err error) gpuwarden.ErrorCode { return gpuwarden.ErrorCodeOf(err) }
