package launch

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// stopTimeout bounds one stop command; deleting an instance is one API
// call, but some CLIs wait for the instance to be gone.
const stopTimeout = 10 * time.Minute

// Cleanup runs the stop command of every attempt that may have left a box
// and has not been cleaned (launched ones only with includeLaunched),
// records when each was cleaned, and reports failures after trying all.
// It returns how many it stopped.
func Cleanup(ctx context.Context, attempts []gpuwarden.LaunchAttempt, includeLaunched bool, rec Recorder, out io.Writer, env []string) (int, error) {
	if out == nil {
		out = io.Discard
	}
	cleaned := 0
	var failed []string
	for _, a := range attempts {
		if !a.MayExist || !a.Cleaned.IsZero() {
			continue
		}
		if a.Outcome == gpuwarden.AttemptLaunched && !includeLaunched {
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
		v := Vars{
			Name: a.Name, Provider: a.Provider, Region: a.Region, Zone: a.Zone, Offer: a.Offer,
			LaunchID: a.LaunchID, InstanceID: a.InstanceID,
		}
		res := runShell(ctx, a.StopCommand, commandEnv(env, v, a.Target), stopTimeout)
		if !res.ok() {
			why := fmt.Sprintf("exit %d", res.exit)
			switch {
			case res.err != nil:
				why = res.err.Error()
			case res.stopped != nil:
				why = "interrupted: " + res.stopped.Error()
			case res.timedOut:
				why = "timed out after " + stopTimeout.String()
			}
			if l := lastLine(res.output); l != "" {
				why += ": " + l
			}
			fmt.Fprintf(out, "%s  %s: stop failed: %s\n", a.Name, a.Target, why)
			failed = append(failed, a.Name+": "+why)
			continue
		}
		a.Cleaned = time.Now()
		if rec != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
			err := rec.Record(rctx, a)
			cancel()
			if err != nil {
				// The box is gone but the ledger does not know: say so, since
				// the next cleanup would run the stop command again.
				fmt.Fprintf(out, "%s  %s: stopped, but not recorded: %v\n", a.Name, a.Target, err)
				failed = append(failed, a.Name+": stopped, but not recorded: "+err.Error())
				cleaned++
				continue
			}
		}
		cleaned++
		fmt.Fprintf(out, "%s  %s: stopped\n", a.Name, a.Target)
	}
	if len(failed) > 0 {
		return cleaned, gpuwarden.Errorf(gpuwarden.EFinding, "cleanup: %d of %d failed: %s", len(failed), len(failed)+cleaned, strings.Join(failed, "; ")).
			WithHint("the boxes may still be running and billing: check them in the provider's console and stop them by hand")
	}
	return cleaned, nil
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
