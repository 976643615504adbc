package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/gpusim"
	"github.com/gpuwarden/gpuwarden/nvml"
	"github.com/spf13/cobra"
)

// gpuFlags are the flags of every command that touches the GPUs.
type gpuFlags struct {
	simulate string
	cpuOK    bool
	timeout  time.Duration
}

func (f *gpuFlags) register(c *cobra.Command, timeout time.Duration) {
	c.Flags().StringVar(&f.simulate, "simulate", "", "use simulated GPUs: `SPEC` such as 2xH100, 1xH100,fault=xid, nodriver")
	c.Flags().BoolVar(&f.cpuOK, "cpu-ok", false, "pass on a host without an NVIDIA driver (CPU smoke-test hosts)")
	c.Flags().DurationVar(&f.timeout, "timeout", timeout, "give up on the GPU after this long and say which call hung")
}

// open returns the GPU backend: the simulation when asked, else NVML. A
// missing driver comes back as an environment error for the caller to judge.
func (f *gpuFlags) open(a *app) (gpuwarden.GPUs, error) {
	if f.simulate != "" {
		spec, err := gpusim.ParseSpec(f.simulate)
		if err != nil {
			return nil, err
		}
		return gpusim.New(spec), nil
	}
	return nvml.New(a.log.With("component", "nvml"))
}

// probeGPU runs the CUDA live checks of one GPU in a child process of this
// binary (`gpuwarden __probe`), so that a driver call that never returns
// leaves the canary with an answer instead of hanging it. The child finds
// the GPU by its NVML UUID, not by a CUDA ordinal that may count otherwise.
func (a *app) probeGPU(ctx context.Context, simulate string, req gpuwarden.ProbeRequest) (gpuwarden.ProbeResult, error) {
	args := []string{"__probe", "--index", strconv.Itoa(req.Index), "--alloc-bytes", strconv.FormatUint(req.AllocBytes, 10),
		"--seed", strconv.FormatUint(req.Seed, 10)}
	if req.UUID != "" {
		args = append(args, "--uuid", req.UUID)
	}
	if req.VerifySeed != 0 {
		args = append(args, "--verify-seed", strconv.FormatUint(req.VerifySeed, 10))
	}
	var r gpuwarden.ProbeResult
	err := a.runGPUChild(ctx, req.Index, "CUDA work", simulate, args, &r)
	return r, err
}

// Bounds of a GPU child. After ctx ends the child's process group is
// killed; childPipeDelay later its output pipes are closed even if some
// descendant still holds them; childGrace after the kill the parent stops
// waiting altogether, because a child stuck in the kernel (uninterruptible
// sleep inside the NVIDIA module) is not reaped until the driver lets go,
// which may be never. Variables so that tests can shorten them.
var (
	childPipeDelay = 500 * time.Millisecond
	childGrace     = 2 * time.Second
)

// childOutputLimit caps what the parent keeps of a child's stdout and of
// its stderr: results are a few KiB, and a babbling child must not grow
// the parent without bound.
const childOutputLimit = 4 << 20

// runGPUChild runs this binary with args as the GPU work of one GPU and
// decodes its JSON result into out. It never blocks past ctx's end plus
// childGrace (see runBounded). A child that found no driver exits 3, which
// comes back as an environment error.
func (a *app) runGPUChild(ctx context.Context, index int, what, simulate string, args []string, out any) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary: %w", err)
	}
	if simulate != "" {
		args = append(args, "--simulate", simulate)
	}
	cmd := exec.Command(self, args...)
	cmd.Env = a.gpuChildEnv(os.Environ())
	return childResult(index, what, runBounded(ctx, cmd, childPipeDelay, childGrace), out)
}

// childResult turns how a GPU child ended into its decoded result or an
// error that says what happened to it.
func childResult(index int, what string, r boundedResult, out any) error {
	stderr := string(r.stderr)
	switch {
	case r.stuck != nil:
		return gpuwarden.Errorf(gpuwarden.EEnvironment, "GPU %d: %s did not finish within %s; killed, but %s (%s)",
			index, what, r.elapsed.Round(100*time.Millisecond), r.stuck, lastLine(stderr, "a driver call hung")).
			WithHint("a process the kernel cannot kill is stuck in the NVIDIA driver: check dmesg for Xid errors; the GPU likely needs a reset or the box a reboot")
	case r.timedOut:
		return gpuwarden.Errorf(gpuwarden.EEnvironment, "GPU %d: %s did not finish within %s and was killed (%s)",
			index, what, r.elapsed.Round(100*time.Millisecond), lastLine(stderr, "a driver call hung"))
	case r.err != nil:
		var ee *exec.ExitError
		if errors.As(r.err, &ee) && ee.ExitCode() == exitEnvironment {
			return gpuwarden.Errorf(gpuwarden.EEnvironment, "%s", lastLine(stderr, "no CUDA driver"))
		}
		return fmt.Errorf("GPU %d: %s", index, lastLine(stderr, r.err.Error()))
	}
	if r.truncated {
		return fmt.Errorf("GPU %d: the %s result is over %d MiB: not a result", index, what, childOutputLimit>>20)
	}
	if err := json.Unmarshal(r.stdout, out); err != nil {
		return fmt.Errorf("GPU %d: read the %s result: %w", index, what, err)
	}
	return nil
}

// childVisibleDevicesOnce makes the note about an inherited
// CUDA_VISIBLE_DEVICES once per process, not once per GPU.
var childVisibleDevicesOnce sync.Once

// gpuChildEnv is the environment of a GPU child: env with the CUDA
// enumeration made explicit. CUDA_DEVICE_ORDER=PCI_BUS_ID numbers CUDA's
// devices like NVML, and an inherited CUDA_VISIBLE_DEVICES is removed: the
// canary and burn-in check every GPU NVML lists, and the child finds each
// one by UUID, so a mask meant for the user's job would only hide or
// renumber the GPU being checked.
func (a *app) gpuChildEnv(env []string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "CUDA_VISIBLE_DEVICES":
			childVisibleDevicesOnce.Do(func() {
				if a.log != nil {
					a.log.Info("ignoring CUDA_VISIBLE_DEVICES for the GPU checks: every GPU NVML lists is checked, found by UUID",
						"CUDA_VISIBLE_DEVICES", v)
				}
			})
			continue
		case "CUDA_DEVICE_ORDER":
			continue
		}
		out = append(out, kv)
	}
	return append(out, "CUDA_DEVICE_ORDER=PCI_BUS_ID")
}

// boundedResult is how a bounded child ended.
type boundedResult struct {
	stdout, stderr []byte
	// truncated says stdout or stderr went past childOutputLimit.
	truncated bool
	// err is Wait's error when the child was reaped.
	err error
	// timedOut says ctx ended first and the child was killed.
	timedOut bool
	// stuck is set when the killed child was still not reaped after the
	// grace: the parent stopped waiting for it.
	stuck   *stuckChild
	elapsed time.Duration
}

// stuckChild is a killed child the parent gave up waiting for.
type stuckChild struct {
	PID int
	// State is the kernel's word for it, from /proc/PID/status:
	// "D (disk sleep)" for a task blocked in a driver, "Z (zombie)" for
	// one that died but is not handed back yet; "" when it could not be read.
	State string
	// WaitChannel is the kernel function it sleeps in, when known.
	WaitChannel string
}

func (s *stuckChild) String() string {
	state := s.State
	if state == "" {
		state = "in an unknown state"
	} else {
		state = "in state " + state
	}
	if s.WaitChannel != "" {
		state += " in " + s.WaitChannel
	}
	return fmt.Sprintf("pid %d is still %s", s.PID, state)
}

// runBounded starts cmd in a process group of its own and waits for it in
// a goroutine. When ctx ends it kills the whole group; pipeDelay later
// (cmd.WaitDelay) exec closes the output pipes that a surviving
// descendant may hold; grace after the kill runBounded returns whether or
// not the child was reaped, naming its PID and state. The goroutine left
// behind ends when the kernel finally reaps the child, if ever.
func runBounded(ctx context.Context, cmd *exec.Cmd, pipeDelay, grace time.Duration) boundedResult {
	start := time.Now()
	stdout, stderr := &cappedBuffer{limit: childOutputLimit}, &cappedBuffer{limit: childOutputLimit}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.WaitDelay = pipeDelay
	result := func(r boundedResult) boundedResult {
		r.stdout, r.stderr = stdout.Bytes(), stderr.Bytes()
		r.truncated = stdout.Truncated() || stderr.Truncated()
		r.elapsed = time.Since(start)
		return r
	}
	if err := cmd.Start(); err != nil {
		return result(boundedResult{err: err})
	}
	pid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return result(boundedResult{err: err})
	case <-ctx.Done():
	}
	// The negative PID is the group: a helper the child forked dies too.
	// ESRCH only means it is gone already.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = cmd.Process.Kill()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-done:
		return result(boundedResult{err: err, timedOut: true})
	case <-t.C:
		state, wchan := procState(pid)
		return result(boundedResult{timedOut: true, stuck: &stuckChild{PID: pid, State: state, WaitChannel: wchan}})
	}
}

// procState reads a process's state ("D (disk sleep)") from
// /proc/PID/status and its wait channel from /proc/PID/wchan; empty
// strings for what cannot be read.
func procState(pid int) (state, wchan string) {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "State:"); ok {
				state = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid)); err == nil {
		if w := strings.TrimSpace(string(b)); w != "" && w != "0" {
			wchan = w
		}
	}
	return state, wchan
}

// cappedBuffer keeps the first limit bytes written to it and is safe to
// read while exec's copy goroutine still writes: after runBounded gives up
// on a child, that goroutine may outlive the call.
type cappedBuffer struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	limit     int
	truncated bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.limit - b.buf.Len(); len(p) > room {
		b.buf.Write(p[:max(room, 0)])
		b.truncated = true
		return len(p), nil
	}
	return b.buf.Write(p)
}

// Bytes is a copy of what was kept.
func (b *cappedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// Truncated says a write went past the limit.
func (b *cappedBuffer) Truncated() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.truncated
}

// lastLine is the last non-empty line of a child's stderr, without the
// "error: " prefix, or fallback when it said nothing.
func lastLine(s, fallback string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" && !strings.HasPrefix(l, "hint:") {
			return strings.TrimPrefix(l, "error: ")
		}
	}
	return fallback
}
