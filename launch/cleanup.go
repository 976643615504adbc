package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// stopTimeout bounds one stop command; deleting an instance is one API
// call, but the built-in stops then wait until a describe shows the
// instance gone (aws ec2 wait polls for up to 10 minutes).
const stopTimeout = 10 * time.Minute

// The defaults of CleanupOptions: a stop fails mostly for reasons that pass
// (throttling, an instance still pending, a flaky network), so it is tried
// again after a pause before cleanup gives up on it.
const (
	defaultStopTries   = 3
	defaultStopBackoff = 10 * time.Second
)

// CleanupOptions configure Cleanup; the zero value is a working default.
type CleanupOptions struct {
	// IncludeLaunched stops the boxes that launched too, not only the
	// ones that a failed or interrupted attempt may have left.
	IncludeLaunched bool
	// Out gets one line per attempt: stopped, kept, or why not.
	Out io.Writer
	// Env is extra environment for the stop commands.
	Env []string
	// Tries is how many times a failing stop command runs (default 3).
	Tries int
	// Backoff is the pause before the second try (default 10s), doubled
	// before each later one.
	Backoff time.Duration
	// Sleep and Now are seams for tests; Sleep must return when its
	// context ends.
	Sleep func(ctx context.Context, d time.Duration) error
	Now   func() time.Time
}

// Cleanup runs the stop command of every attempt that may have left a box
// and has not been cleaned (launched ones only with IncludeLaunched),
// trying a failing one again up to Tries times, records when each was
// cleaned, and reports failures after trying all. A stop command's exit 0
// is what says the box is gone, so the built-in stops exit 0 only when a
// describe shows it gone (see templates.go); an attempt whose stop failed
// stays uncleaned, and the next cleanup tries it again. It returns how
// many it stopped.
func Cleanup(ctx context.Context, attempts []gpuwarden.LaunchAttempt, rec Recorder, opt CleanupOptions) (int, error) {
	out := opt.Out
	if out == nil {
		out = io.Discard
	}
	if opt.Tries <= 0 {
		opt.Tries = defaultStopTries
	}
	if opt.Backoff <= 0 {
		opt.Backoff = defaultStopBackoff
	}
	if opt.Sleep == nil {
		opt.Sleep = sleep
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	cleaned := 0
	var failed []string
	for _, a := range attempts {
		if !a.MayExist || !a.Cleaned.IsZero() {
			continue
		}
		if a.Outcome == gpuwarden.AttemptLaunched && !opt.IncludeLaunched {
			fmt.Fprintf(out, "%s  %s: launched, kept (--include-launched stops it too)\n", a.Name, a.Target)
			continue
		}
		if a.StopCommand == "" {
			fmt.Fprintf(out, "%s  %s: no stop command; check %s by hand\n", a.Name, a.Target, a.Provider)
			continue
		}
		if err := ctx.Err(); err != nil {
			failed = append(failed, a.Name+": not tried: "+context.Cause(ctx).Error())
			continue
		}
		said, err := stopWithRetries(ctx, a, opt, out)
		if err != nil {
			fmt.Fprintf(out, "%s  %s: stop failed: %v\n", a.Name, a.Target, err)
			failed = append(failed, a.Name+": "+err.Error())
			continue
		}
		a.Cleaned = opt.Now()
		cleaned++
		if rec != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
			err := rec.Record(rctx, a)
			cancel()
			if err != nil {
				// The box is gone but the ledger does not know: say so, since
				// the next cleanup would run the stop command again.
				fmt.Fprintf(out, "%s  %s: stopped, but not recorded: %v\n", a.Name, a.Target, err)
				failed = append(failed, a.Name+": stopped, but not recorded: "+err.Error())
				continue
			}
		}
		line := fmt.Sprintf("%s  %s: stopped", a.Name, a.Target)
		if said != "" {
			line += " (" + said + ")"
		}
		fmt.Fprintln(out, line)
	}
	if len(failed) > 0 {
		return cleaned, gpuwarden.Errorf(gpuwarden.EFinding, "cleanup: %d of %d failed: %s", len(failed), len(failed)+cleaned, strings.Join(failed, "; ")).
			WithHint("the boxes may still be running and billing: gpuwarden launch --cleanup tries them again; else check them in the provider's console and stop them by hand")
	}
	return cleaned, nil
}

// stopWithRetries runs a's stop command until it exits 0, at most
// opt.Tries times, and returns its last line of output (what its describe
// said) or why the last try failed.
func stopWithRetries(ctx context.Context, a gpuwarden.LaunchAttempt, opt CleanupOptions, out io.Writer) (string, error) {
	v := Vars{
		Name: a.Name, Provider: a.Provider, Region: a.Region, Zone: a.Zone, Offer: a.Offer,
		LaunchID: a.LaunchID, InstanceID: a.InstanceID,
	}
	env := commandEnv(opt.Env, v, a.Target)
	wait := opt.Backoff
	var why string
	for try := 1; ; try++ {
		res := runShell(ctx, a.StopCommand, env, stopTimeout)
		if res.ok() {
			return lastLine(res.output), nil
		}
		why = fmt.Sprintf("exit %d", res.exit)
		switch {
		case res.err != nil:
			// sh itself could not run: another try cannot help.
			return "", fmt.Errorf("could not run the stop command: %w", res.err)
		case res.stopped != nil:
			return "", fmt.Errorf("interrupted: %w", res.stopped)
		case res.timedOut:
			why = "timed out after " + stopTimeout.String()
		}
		if l := lastLine(res.output); l != "" {
			why += ": " + l
		}
		if try >= opt.Tries {
			if try == 1 {
				return "", errors.New(why)
			}
			return "", fmt.Errorf("%s (tried %d times)", why, try)
		}
		fmt.Fprintf(out, "%s  %s: stop failed (%s); trying again in %s\n", a.Name, a.Target, why, wait)
		if err := opt.Sleep(ctx, wait); err != nil {
			return "", fmt.Errorf("interrupted after %d tries (%s): %w", try, why, err)
		}
		wait *= 2
	}
}

// Fold reduces the ledger's records (every Record call is kept) to the
// latest record per attempt ID, in start order.
func Fold(records []gpuwarden.LaunchAttempt) []gpuwarden.LaunchAttempt {
	latest := map[string]int{} // ID → index in out
	var out []gpuwarden.LaunchAttempt
	for _, r := range records {
		if i, ok := latest[r.ID]; ok {
			out[i] = r
			continue
		}
		latest[r.ID] = len(out)
		out = append(out, r)
	}
	// Stable: attempts that started together keep the order they were
	// first recorded in, which is the order they were made.
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}
