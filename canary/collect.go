package canary

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/yamlerr"
)

// DefaultTimeout bounds each probe when Options.Timeout is zero: long enough
// for a driver query and a bare Python start, short enough that a canary on a
// broken box still answers in seconds.
const DefaultTimeout = 2 * time.Second

// Options are the seams of Collect; the zero value probes this host without
// GPUs and without Python.
type Options struct {
	// GPUs reads the devices and the driver; nil leaves the gpu.*,
	// driver.* and cuda.* facts out.
	GPUs gpuwarden.GPUs
	// Root prefixes every file Collect reads (/etc/os-release, /proc,
	// library and include dirs, /.dockerenv), so that tests and a host
	// probing a mounted image can point it elsewhere; "" is "/".
	Root string
	// Env looks up one variable. When nil it looks in Environ if that is
	// set, otherwise in the process environment.
	Env func(string) (string, bool)
	// Environ lists the variables as KEY=VALUE, for the NCCL_* facts; nil
	// is os.Environ.
	Environ func() []string
	// Run runs a command and returns its standard output; nil runs it as a
	// child process that is killed, with its process group, when ctx ends.
	Run func(ctx context.Context, name string, args ...string) ([]byte, error)
	// Pythons are the interpreters to probe ("python3", "/opt/conda/bin/python");
	// empty probes none, because an `import torch` can take seconds.
	Pythons []string
	// Timeout bounds each probe; zero is DefaultTimeout.
	Timeout time.Duration
	// Uname returns the kernel release; nil reads
	// <Root>/proc/sys/kernel/osrelease.
	Uname func() (release string)
}

// withDefaults fills the seams left nil, so that probes never check for nil.
func (o Options) withDefaults() Options {
	if o.Root == "" {
		o.Root = "/"
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Env == nil {
		if environ := o.Environ; environ != nil {
			// Looking up in the injected list keeps one source of truth when
			// a caller replaces only Environ.
			o.Env = func(key string) (string, bool) { return lookupIn(environ(), key) }
		} else {
			o.Env = os.LookupEnv
		}
	}
	if o.Environ == nil {
		o.Environ = os.Environ
	}
	if o.Run == nil {
		o.Run = execRun
	}
	return o
}

// lookupIn finds key in a KEY=VALUE list; the last entry wins, as in exec.
func lookupIn(environ []string, key string) (string, bool) {
	val, found := "", false
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			val, found = v, true
		}
	}
	return val, found
}

// path joins the root and an absolute path inside it.
func (o Options) path(p string) string { return filepath.Join(o.Root, p) }

// probe is one independent look at the host. It returns the facts it found,
// notes about what it could not tell, and an error when it found nothing.
type probe struct {
	name string
	fn   func(ctx context.Context) (gpuwarden.Facts, []string, error)
}

// result is what one probe contributes to Collect's answer.
type result struct {
	facts gpuwarden.Facts
	notes []string
}

// Collect runs every probe concurrently, each bounded by o.Timeout, and
// returns the facts they found and notes on what they could not tell. A
// probe that fails or times out leaves its facts out and adds a note
// ("python3: timed out after 2s"); it never holds up the others. The error
// is non-nil only when ctx ends first; the facts found until then are still
// returned.
func Collect(ctx context.Context, o Options) (gpuwarden.Facts, []string, error) {
	o = o.withDefaults()
	probes := o.probes()
	results := make([]result, len(probes))
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Go(func() { results[i] = o.runProbe(ctx, p) })
	}
	wg.Wait()

	facts := gpuwarden.Facts{}
	var notes []string
	for _, r := range results {
		maps.Copy(facts, r.facts)
		notes = append(notes, r.notes...)
	}
	if err := ctx.Err(); err != nil {
		return facts, notes, fmt.Errorf("collect stack facts: %w", err)
	}
	return facts, notes, nil
}

// probes lists what Collect runs, in the order its notes appear.
func (o Options) probes() []probe {
	ps := []probe{}
	if o.GPUs != nil {
		ps = append(ps, probe{"driver", o.probeDriver}, probe{"gpu", o.probeGPUs})
	}
	ps = append(ps,
		probe{"os", o.probeOS},
		probe{"kernel", o.probeKernel},
		probe{"cudnn", o.probeCUDNN},
		probe{"nccl", o.probeNCCL},
		probe{"container", o.probeContainer},
		probe{"env", o.probeEnv},
	)
	return append(ps, o.pythonProbes()...)
}

// runProbe runs p in its own goroutine and waits for it no longer than the
// timeout: file reads on a hung mount and driver calls cannot all be
// interrupted, so a late probe is left behind rather than waited for.
func (o Options) runProbe(ctx context.Context, p probe) result {
	pctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	type answer struct {
		facts gpuwarden.Facts
		notes []string
		err   error
	}
	done := make(chan answer, 1)
	go func() {
		var a answer
		defer func() {
			// A panicking GPU backend or runner must not take the canary
			// down with it; the user sees which probe broke.
			if r := recover(); r != nil {
				a = answer{err: fmt.Errorf("panic: %v", r)}
			}
			done <- a
		}()
		a.facts, a.notes, a.err = p.fn(pctx)
	}()

	lost := func() result {
		if err := ctx.Err(); err != nil {
			return result{notes: []string{p.name + ": stopped: " + err.Error()}}
		}
		return result{notes: []string{fmt.Sprintf("%s: timed out after %s", p.name, o.Timeout)}}
	}
	select {
	case a := <-done:
		if a.err != nil {
			if pctx.Err() != nil {
				// The probe returned because its deadline killed it (a
				// killed child exits with "signal: killed"); say why.
				return lost()
			}
			return result{notes: append(prefixed(p.name, a.notes), p.name+": "+yamlerr.OneLine(a.err.Error()))}
		}
		return result{facts: a.facts, notes: prefixed(p.name, a.notes)}
	case <-pctx.Done():
		return lost()
	}
}

// prefixed names the probe in front of each of its notes.
func prefixed(name string, notes []string) []string {
	out := make([]string, len(notes))
	for i, n := range notes {
		out[i] = name + ": " + yamlerr.OneLine(n)
	}
	return out
}
