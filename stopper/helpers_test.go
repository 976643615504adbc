package stopper_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/stopper"
)

// clock is a test clock that Sleep moves, so that polling runs without
// waiting and without depending on how fast the machine is.
type clock struct {
	mu     sync.Mutex
	t      time.Time
	slept  time.Duration
	sleeps int
}

func newClock() *clock { return &clock{t: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.slept += d
	c.sleeps++
	c.mu.Unlock()
	return ctx.Err()
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// options returns Options on the test clock, with a client that never
// uses a proxy and an environment that holds only env.
func options(c *clock, env map[string]string) stopper.Options {
	return stopper.Options{
		Client: stopper.MetadataClient(),
		Now:    c.Now,
		Sleep:  c.Sleep,
		Getenv: func(k string) string { return env[k] },
	}
}

// wantProof checks a proof and its error against what a case expects:
// proven with no error, or refused with the code and a fix containing fix.
func wantProof(t *testing.T, p gpuwarden.StopProof, err error, method string, proven bool, code gpuwarden.ErrorCode, fix string) {
	t.Helper()
	if p.Method != method {
		t.Errorf("proof method = %q, want %q", p.Method, method)
	}
	if p.Proven != proven {
		t.Errorf("proven = %v (reason %q), want %v", p.Proven, p.Reason, proven)
	}
	if proven {
		if err != nil {
			t.Errorf("err = %v, want nil for a proven stop", err)
		}
		if len(p.Checked) == 0 {
			t.Error("a proven stop lists nothing it checked")
		}
		return
	}
	if err == nil {
		t.Fatal("err = nil for an unproven stop")
	}
	if got := gpuwarden.ErrorCodeOf(err); got != code {
		t.Errorf("error code = %s, want %s (%v)", got, code, err)
	}
	if p.Reason == "" || p.Fix == "" {
		t.Errorf("unproven stop without reason and fix: %+v", p)
	}
	if !strings.Contains(p.Fix, fix) {
		t.Errorf("fix = %q, want it to contain %q", p.Fix, fix)
	}
	if gpuwarden.ErrorHint(err) != p.Fix {
		t.Errorf("error hint %q differs from the proof's fix %q", gpuwarden.ErrorHint(err), p.Fix)
	}
}

// wantOutcome checks the billing state and the state read back.
func wantOutcome(t *testing.T, out gpuwarden.StopOutcome, err error, method, billing, state string) {
	t.Helper()
	if err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if out.Method != method || out.Billing != billing || out.State != state {
		t.Errorf("outcome = method %q billing %q state %q (%s); want %q %q %q",
			out.Method, out.Billing, out.State, out.Detail, method, billing, state)
	}
	if out.At.IsZero() {
		t.Error("outcome has no time")
	}
}

// errCode returns the application error code of err, or "" for nil.
func errCode(err error) gpuwarden.ErrorCode {
	var e *gpuwarden.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return gpuwarden.ErrorCodeOf(err)
}
