package nvml

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuwarden/gpuwarden"
)

// call is one method's run of NVML queries on its own goroutine. The
// goroutine owns index and err; fn is shared with the waiter so that a
// timeout can name the function the driver is stuck in.
type call struct {
	g     *GPUs
	index int   // the GPU being read, -1 for system queries
	err   error // the first failure; later queries are skipped
	// why is the gpuwarden.Unknown reason of the last query that gave no
	// value, for the caller to mark its field unknown.
	why   string
	fn    atomic.Pointer[string]
	start time.Time

	mu        sync.Mutex
	finished  bool
	abandoned bool
	stuckIn   string // the function the call was in when abandoned
}

// enter records the NVML function about to be called.
func (c *call) enter(fn string) { c.fn.Store(&fn) }

// current is the NVML function in progress, or "nvml" before the first one.
func (c *call) current() string {
	if p := c.fn.Load(); p != nil {
		return *p
	}
	return "nvml"
}

// fail wraps an NVML error with the GPU and the function that returned it.
func (c *call) fail(fn string, ret gonvml.Return) error {
	var err error
	if c.index >= 0 {
		err = fmt.Errorf("nvml: gpu %d: %s: %w", c.index, fn, ret)
	} else {
		err = fmt.Errorf("nvml: %s: %w", fn, ret)
	}
	switch ret {
	case gonvml.ERROR_GPU_IS_LOST, gonvml.ERROR_RESET_REQUIRED:
		return &gpuwarden.Error{Code: gpuwarden.EEnvironment, Err: err,
			Hint: "the GPU needs a reset or the host a reboot; look for Xid 79 or 48 in dmesg"}
	case gonvml.ERROR_DRIVER_NOT_LOADED, gonvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return &gpuwarden.Error{Code: gpuwarden.EEnvironment, Err: err,
			Hint: "the driver changed under the running process: reboot or reload the nvidia module, then restart"}
	}
	return err
}

// get runs one NVML query named after its C function. It reports ok only on
// success; ERROR_NOT_SUPPORTED, a missing symbol and ERROR_NO_PERMISSION
// give the zero value and no error, with c.why saying which, so that the
// caller marks the field unknown rather than zero; any other failure is
// kept in c.err and skips the queries after it.
func get[T any](c *call, fn string, query func() (T, gonvml.Return)) (T, bool) {
	var zero T
	if c.err != nil {
		c.why = gpuwarden.UnknownError
		return zero, false
	}
	if !c.g.has(fn) {
		c.why = gpuwarden.UnknownNotSupported
		return zero, false
	}
	c.enter(fn)
	v, ret := query()
	switch ret {
	case gonvml.SUCCESS:
		c.why = ""
		return v, true
	case gonvml.ERROR_NOT_SUPPORTED, gonvml.ERROR_FUNCTION_NOT_FOUND:
		c.why = gpuwarden.UnknownNotSupported
		return zero, false
	case gonvml.ERROR_NO_PERMISSION:
		c.why = gpuwarden.UnknownNoPermission
		return zero, false
	}
	c.why = gpuwarden.UnknownError
	c.err = c.fail(fn, ret)
	return zero, false
}

// try is get for optional extras (GPM): any failure only leaves the value
// unknown, with c.why saying why, and never fails the whole call, so that
// a counter the card does badly cannot blind the agent to the rest.
func try[T any](c *call, fn string, query func() (T, gonvml.Return)) (T, bool) {
	if c.err != nil {
		var zero T
		c.why = gpuwarden.UnknownError
		return zero, false
	}
	v, ok := get(c, fn, query)
	if c.err != nil {
		c.g.log.Debug("optional nvml query failed", "gpu", c.index, "err", c.err)
		c.err = nil
	}
	return v, ok
}

// result carries a call's outcome back to the waiting method.
type result[T any] struct {
	v   T
	err error
}

// run executes body on a goroutine and waits for it or for ctx, whichever
// comes first. cgo cannot interrupt a driver call, so on timeout the
// goroutine is abandoned and registered as stuck: later calls fail at once
// until it returns, rather than each pinning another OS thread in the driver.
func run[T any](ctx context.Context, g *GPUs, op string, index int, body func(*call) (T, error)) (T, error) {
	var zero T
	if g.closed.Load() {
		return zero, errClosed
	}
	if name, since, stuck := g.stuckCall(); stuck {
		return zero, &gpuwarden.Error{
			Code:    gpuwarden.EEnvironment,
			Message: fmt.Sprintf("nvml is stuck in %s for %s", name, since.Round(time.Millisecond)),
			Hint:    "the driver stopped answering; restart the process, and reset the GPU if it recurs",
			Err:     gpuwarden.ErrNoAnswer,
		}
	}
	if err := ctx.Err(); err != nil {
		return zero, timeoutError("nvml", err)
	}
	c := &call{g: g, index: index, start: time.Now()}
	done := make(chan result[T], 1) // buffered: an abandoned goroutine must not block on send
	go func() {
		var r result[T]
		defer func() {
			if p := recover(); p != nil {
				r = result[T]{err: fmt.Errorf("nvml: panic in %s: %v", c.current(), p)}
			}
			done <- r
			c.finish()
		}()
		r.v, r.err = body(c)
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
	}
	name, abandoned := c.abandon()
	if !abandoned {
		r := <-done // finished while we looked away; the result is already sent
		return r.v, r.err
	}
	g.log.Warn("nvml call abandoned", "op", op, "gpu", index, "call", name, "err", ctx.Err())
	return zero, timeoutError(name, ctx.Err())
}

// timeoutError is the environment error for a call the context gave up on.
func timeoutError(fn string, err error) error {
	msg := "nvml call timed out: " + fn
	if !errors.Is(err, context.DeadlineExceeded) {
		msg = "nvml call cancelled: " + fn
	}
	return &gpuwarden.Error{
		Code:    gpuwarden.EEnvironment,
		Message: msg,
		Hint:    "the driver did not answer in time; check nvidia-smi and dmesg for Xid errors",
		Err:     fmt.Errorf("%w: %w", gpuwarden.ErrNoAnswer, err),
	}
}

// finish marks the call done and, if it had been abandoned, unblocks later
// calls.
func (c *call) finish() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.finished = true
	if c.abandoned {
		c.g.mu.Lock()
		delete(c.g.stuck, c)
		c.g.mu.Unlock()
		c.g.log.Info("abandoned nvml call returned", "call", c.stuckIn, "after", time.Since(c.start))
	}
}

// abandon registers the call as stuck, unless it has finished already, and
// names the function it is stuck in.
func (c *call) abandon() (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finished {
		return "", false
	}
	c.abandoned = true
	c.stuckIn = c.current()
	c.g.mu.Lock()
	c.g.stuck[c] = struct{}{}
	c.g.mu.Unlock()
	return c.stuckIn, true
}

// stuckCall names the oldest abandoned call still inside the driver.
func (g *GPUs) stuckCall() (name string, since time.Duration, stuck bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var oldest *call
	for c := range g.stuck {
		if oldest == nil || c.start.Before(oldest.start) {
			oldest = c
		}
	}
	if oldest == nil {
		return "", 0, false
	}
	return oldest.stuckIn, time.Since(oldest.start), true
}
