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
// binary (`gpuwarden __probe`), so that a driver call that never returns is
// killed with the child when ctx ends instead of hanging the canary.
func (a *app) probeGPU(ctx context.Context, simulate string, req gpuwarden.ProbeRequest) (gpuwarden.ProbeResult, error) {
	args := []string{"__probe", "--index", strconv.Itoa(req.Index), "--alloc-bytes", strconv.FormatUint(req.AllocBytes, 10),
		"--seed", strconv.FormatUint(req.Seed, 10)}
	if req.VerifySeed != 0 {
		args = append(args, "--verify-seed", strconv.FormatUint(req.VerifySeed, 10))
	}
	var r gpuwarden.ProbeResult
	err := runGPUChild(ctx, req.Index, "CUDA work", simulate, args, &r)
	return r, err
}

// runGPUChild runs this binary with args as the GPU work of one GPU, kills it
// when ctx ends, and decodes its JSON result into out. A child that found no
// driver exits 3, which comes back as an environment error.
func runGPUChild(ctx context.Context, index int, what, simulate string, args []string, out any) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary: %w", err)
	}
	if simulate != "" {
		args = append(args, "--simulate", simulate)
	}
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.WaitDelay = 500 * time.Millisecond
	// CUDA numbers GPUs fastest first; NVML and the user count by PCI bus.
	cmd.Env = append(os.Environ(), "CUDA_DEVICE_ORDER=PCI_BUS_ID")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	if ctx.Err() != nil {
		return gpuwarden.Errorf(gpuwarden.EEnvironment, "GPU %d: %s did not finish within %s and was killed (%s)",
			index, what, time.Since(start).Round(100*time.Millisecond), lastLine(stderr.String(), "a driver call hung"))
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == exitEnvironment {
			return gpuwarden.Errorf(gpuwarden.EEnvironment, "%s", lastLine(stderr.String(), "no CUDA driver"))
		}
		return fmt.Errorf("GPU %d: %s", index, lastLine(stderr.String(), err.Error()))
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		return fmt.Errorf("GPU %d: read the %s result: %w", index, what, err)
	}
	return nil
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
