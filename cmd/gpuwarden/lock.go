package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/canary"
	"github.com/spf13/cobra"
)

// defaultLockFile is where lock writes and canary looks when --lock is not
// given: the working directory, beside the job.
const defaultLockFile = "gpuwarden.lock"

// stackFlags are what lock and canary share about the stack probes.
type stackFlags struct {
	gpu          gpuFlags
	lockFile     string
	pythons      []string
	noFrameworks bool
}

func (f *stackFlags) register(c *cobra.Command, timeout time.Duration) {
	f.gpu.register(c, timeout)
	c.Flags().StringVar(&f.lockFile, "lock", defaultLockFile, "lock `FILE`")
	c.Flags().StringArrayVar(&f.pythons, "python", nil, "Python `INTERPRETER` whose frameworks to probe; repeatable (default python3 when on PATH)")
	c.Flags().BoolVar(&f.noFrameworks, "no-frameworks", false, "skip the Python framework probes")
}

// interpreters are the Pythons to probe: those given, else those the lock
// names, else python3 when it is on PATH.
func (f *stackFlags) interpreters(lock *gpuwarden.Lock) []string {
	if f.noFrameworks {
		return nil
	}
	if len(f.pythons) > 0 {
		return f.pythons
	}
	var out []string
	if lock != nil {
		for k := range lock.Fields {
			if name, ok := pythonOfKey(k); ok {
				out = append(out, name)
			}
		}
		sort.Strings(out)
		if len(out) > 0 {
			return out
		}
	}
	if _, err := exec.LookPath("python3"); err == nil {
		return []string{"python3"}
	}
	return nil
}

// pythonOfKey finds the interpreter in a "python.NAME.version" key.
func pythonOfKey(k string) (string, bool) {
	const prefix, suffix = "python.", ".version"
	if len(k) <= len(prefix)+len(suffix) || k[:len(prefix)] != prefix || k[len(k)-len(suffix):] != suffix {
		return "", false
	}
	name := k[len(prefix) : len(k)-len(suffix)]
	for _, r := range name {
		if r == '.' {
			return "", false
		}
	}
	return name, true
}

func (a *app) lockCommand() *cobra.Command {
	var (
		f      stackFlags
		output string
	)
	c := &cobra.Command{
		Use:   "lock",
		Short: "Record this box's GPU stack in gpuwarden.lock",
		Long: `lock records the stack a job works on: GPU model, count, VRAM and compute
capability, driver and CUDA driver versions, ECC/MIG/persistence modes, cuDNN and
NCCL versions, OS and kernel, the container, CUDA_VISIBLE_DEVICES and NCCL_*
variables, and each Python interpreter's framework versions. It writes them to
gpuwarden.lock (human-diffable YAML, sorted keys), each with how strictly
` + "`gpuwarden canary`" + ` checks it: exact, same-major, at-least or ignore. Edit a
field's match to loosen or tighten it.

` + exitCodes("0  the lock was written", "2  bad input or usage: a flag, an unwritable --lock", "3  no driver or no GPU (--cpu-ok records the host alone)",
			"4  internal error, or a probe that hung past --timeout"),
		Example: `  gpuwarden lock
  gpuwarden lock --simulate 2xH100 --lock /tmp/gpuwarden.lock
  gpuwarden lock --python .venv/bin/python -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := outputFormat(output, "table", "json"); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), f.gpu.timeout)
			defer cancel()
			gpus, err := f.gpu.open(a)
			if err != nil && !(f.gpu.cpuOK && gpuwarden.ErrorCodeOf(err) == gpuwarden.EEnvironment) {
				return err
			}
			opts := canary.Options{Pythons: f.interpreters(nil), Timeout: f.gpu.timeout}
			if gpus != nil {
				defer gpus.Close()
				opts.GPUs = gpus
			}
			facts, notes, err := canary.Collect(ctx, opts)
			if err != nil {
				return err
			}
			host, _ := os.Hostname()
			lock := canary.NewLock(facts, host, a.now().UTC())
			var buf bytes.Buffer
			if err := canary.WriteLock(&buf, lock); err != nil {
				return fmt.Errorf("write lock: %w", err)
			}
			if err := writeNew(f.lockFile, buf.Bytes(), true); err != nil {
				return err
			}
			warnAll(a.stderr, notes)
			if output == "json" {
				return writeJSON(a.stdout, "lock", lock)
			}
			return lockTable(a, f.lockFile, lock)
		},
	}
	f.register(c, 20*time.Second)
	c.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return c
}

func lockTable(a *app, path string, l *gpuwarden.Lock) error {
	keys := make([]string, 0, len(l.Fields))
	for k := range l.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	t := newTable(a.stdout)
	t.row("FIELD", "VALUE", "MATCH")
	for _, k := range keys {
		t.row(k, truncate(l.Fields[k].Value, 50), string(l.Fields[k].Match))
	}
	if err := t.flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(a.stdout, "wrote %s: %d fields\n", path, len(keys))
	return err
}
