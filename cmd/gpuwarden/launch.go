package main

import (
	"context"
	"fmt"
	nethttp "net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/gpuwarden/gpuwarden"
	gwhttp "github.com/gpuwarden/gpuwarden/http"
	"github.com/gpuwarden/gpuwarden/launch"
	"github.com/gpuwarden/gpuwarden/sqlite"
	"github.com/spf13/cobra"
)

type launchFlags struct {
	dataDir         string
	targets         []string
	deadline        time.Duration
	backoff         time.Duration
	rounds          int
	readyTimeout    time.Duration
	cleanup, list   bool
	includeLaunched bool
	stopTries       int
	stopBackoff     time.Duration
	output          string
	fleet           fleetFlags
}

func (a *app) launchCommand() *cobra.Command {
	var f launchFlags
	c := &cobra.Command{
		Use:   "launch [PLAN]",
		Short: "Launch the box: plan A, then plan B on capacity errors, timing provisioning",
		Long: `launch runs the plan's targets in order, each with the team's own launch
command (aws, gcloud, az, runpodctl, sky, any script; ` + "`gpuwarden plan -o targets`" + `
writes a start). When a command fails, its output is classified by a rule
table (the plan's launch_rules first, then the built-in rules for AWS, GCP,
Azure, Lambda, RunPod and SkyPilot):

  capacity  none of these boxes there now: rule out the zone, try the next
  quota     the account may not have it there: rule out the region (or the
            provider), try the next
  auth      credentials missing or refused: stop and say so (exit 3); AWS's
            AuthFailure (a region the account has not enabled) rules out
            that region only, unless every region answers so
  config    the command is wrong (a CLI usage error such as an unset $AMI,
            a Marketplace image not subscribed to): stop and say so (exit 2)
  unknown   no rule matched: try the next; the attempt may have left a box

Every attempt is recorded in the ledger (DATA_DIR/ledger.db) before its
command runs, with the command that undoes it, so nothing half-launched goes
unrecorded: --cleanup runs those stop commands, tries a failing one again
(--stop-tries, --stop-backoff), and counts a box gone only when its stop
command exits 0; the built-in stops find the box by the name launch gave it
when no instance ID was read, and exit 0 only once a describe shows it gone. Provisioning time runs from
the launch command until the target's ready command succeeds, or, with
--server, until the new box's agent registers with the label
launch_id=$GPUWARDEN_LAUNCH_ID; ` + "`gpuwarden report provisioning`" + ` sums it up.

` + exitCodes("0  a target launched (and was ready, when asked)", "1  no target launched", "2  bad input: the plan file, its targets, a flag",
			"3  the provider refused the credentials", "4  internal error"),
		Example: `  gpuwarden launch gpuwarden.yaml
  gpuwarden launch --target plan-b --deadline 10m
  gpuwarden launch --list
  gpuwarden launch --cleanup`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := outputFormat(f.output, "table", "json"); err != nil {
				return err
			}
			return a.runLaunch(cmd, &f, args)
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.dataDir, "data-dir", defaultDataDir(), "where the ledger of attempts lives")
	fl.StringSliceVar(&f.targets, "target", nil, "only these targets, by `NAME`, in the plan's order")
	fl.DurationVar(&f.deadline, "deadline", 30*time.Minute, "give up after this long")
	fl.DurationVar(&f.backoff, "backoff", 2*time.Second, "wait before the next target after a failure (doubles, up to 1m)")
	fl.IntVar(&f.rounds, "rounds", 1, "passes over the targets while every failure is a capacity one")
	fl.DurationVar(&f.readyTimeout, "ready-timeout", 15*time.Minute, "how long a launched box may take to become ready")
	fl.BoolVar(&f.list, "list", false, "list the recorded attempts instead of launching")
	fl.BoolVar(&f.cleanup, "cleanup", false, "run the stop command of every recorded attempt that may have left a box")
	fl.BoolVar(&f.includeLaunched, "include-launched", false, "with --cleanup, stop the launched boxes too")
	fl.IntVar(&f.stopTries, "stop-tries", 3, "with --cleanup, run a failing stop command up to this many times")
	fl.DurationVar(&f.stopBackoff, "stop-backoff", 10*time.Second, "with --cleanup, wait this long before trying a failed stop again (doubles)")
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	f.fleet.register(c)
	return c
}

func (a *app) runLaunch(cmd *cobra.Command, f *launchFlags, args []string) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if f.list || f.cleanup {
		ledger, rec, err := a.openLaunchLedger(ctx, f.dataDir)
		if err != nil {
			return err
		}
		defer ledger.Close()
		attempts, err := launch.Recorded(ctx, ledger)
		if err != nil {
			return err
		}
		if f.cleanup {
			n, err := launch.Cleanup(ctx, attempts, rec, launch.CleanupOptions{IncludeLaunched: f.includeLaunched,
				Out: a.stdout, Env: os.Environ(), Tries: f.stopTries, Backoff: f.stopBackoff, Now: a.now})
			if n == 1 {
				fmt.Fprintln(a.stderr, "ran 1 stop command")
			} else {
				fmt.Fprintf(a.stderr, "ran %d stop commands\n", n)
			}
			return err
		}
		if f.output == "json" {
			return writeJSON(a.stdout, "launch-attempts", map[string]any{"attempts": nonNilAttempts(attempts)})
		}
		return attemptsTable(a, attempts)
	}

	p, path, err := loadPlanIfAny(args)
	if err != nil {
		return err
	}
	if p == nil {
		return gpuwarden.Errorf(gpuwarden.ENotFound, "no gpuwarden.yaml here and no plan file given").
			WithHint("write one with `gpuwarden init > gpuwarden.yaml`, add its targets with `gpuwarden plan -o targets`, or name a plan: gpuwarden launch PLAN")
	}
	if len(p.Targets) == 0 {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "%s has no targets", path).
			WithHint("add a targets: list; `gpuwarden plan -o targets` writes one from the ranking")
	}
	targets := p.Targets
	if len(f.targets) > 0 {
		targets = nil
		for _, t := range p.Targets {
			if slices.Contains(f.targets, t.Name) {
				targets = append(targets, t)
			}
		}
		if len(targets) != len(f.targets) {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "--target %v: not every name is a target of %s", f.targets, path)
		}
	}
	// With -o json, stdout is the JSON alone: the progress lines go to stderr.
	progress := a.stdout
	if f.output == "json" {
		progress = a.stderr
	}
	opt := launch.Options{Targets: targets, Rules: p.LaunchRules, Deadline: f.deadline, Backoff: f.backoff,
		Rounds: f.rounds, ReadyTimeout: f.readyTimeout, Env: os.Environ(), Out: progress, Now: a.now,
		Log: a.log}
	if f.fleet.remote() {
		cl, err := f.fleet.client()
		if err != nil {
			return err
		}
		opt.WaitAgent = func(ctx context.Context, launchID, _ string) (time.Time, error) {
			return waitForAgent(ctx, cl, launchID)
		}
	}
	// Opened once the plan and flags are known good, so that a bad
	// invocation leaves no ledger behind.
	ledger, rec, err := a.openLaunchLedger(ctx, f.dataDir)
	if err != nil {
		return err
	}
	defer ledger.Close()
	res, err := launch.Run(ctx, opt, rec)
	if f.output == "json" {
		if jerr := writeJSON(a.stdout, "launch", res); jerr != nil {
			return jerr
		}
	}
	return err
}

// openLaunchLedger opens (or creates) the ledger in dataDir that records
// every launch attempt.
func (a *app) openLaunchLedger(ctx context.Context, dataDir string) (*sqlite.Ledger, *ledgerRecorder, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, nil, gpuwarden.Errorf(gpuwarden.EInvalid, "--data-dir %s: %v", dataDir, err)
	}
	ledger, err := sqlite.Open(ctx, filepath.Join(dataDir, "ledger.db"))
	if err != nil {
		return nil, nil, err
	}
	return ledger, &ledgerRecorder{ledger: ledger, now: a.now}, nil
}

// waitForAgent polls the fleet server until a node labelled with the
// launch ID registers, and returns when it did.
func waitForAgent(ctx context.Context, cl *gwhttp.Client, launchID string) (time.Time, error) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		var nodes []gpuwarden.Node
		if err := cl.Do(ctx, nethttp.MethodGet, "/api/v1/nodes", nil, nil, &nodes); err != nil {
			return time.Time{}, err
		}
		for _, n := range nodes {
			if n.Labels.Extra["launch_id"] == launchID {
				return n.Registered, nil
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-t.C:
		}
	}
}

// ledgerRecorder keeps every record of every attempt as a ledger event:
// append-only, so a crash between two records loses neither.
type ledgerRecorder struct {
	ledger gpuwarden.Ledger
	now    func() time.Time
}

// Record stores one record of an attempt.
func (r *ledgerRecorder) Record(ctx context.Context, at gpuwarden.LaunchAttempt) error {
	e, err := launch.Event(at, r.now())
	if err != nil {
		return err
	}
	_, err = r.ledger.RecordEvent(ctx, e)
	return err
}

func nonNilAttempts(as []gpuwarden.LaunchAttempt) []gpuwarden.LaunchAttempt {
	if as == nil {
		return []gpuwarden.LaunchAttempt{}
	}
	return as
}

func attemptsTable(a *app, attempts []gpuwarden.LaunchAttempt) error {
	if len(attempts) == 0 {
		_, err := fmt.Fprintln(a.stdout, "No launch attempts recorded.")
		return err
	}
	t := newTable(a.stdout)
	t.row("ATTEMPT", "TARGET", "PROVIDER", "REGION", "OFFER", "STARTED", "OUTCOME", "CLASS", "TOOK", "MAY EXIST", "CLEANED")
	for _, at := range attempts {
		took := "-"
		if at.ProvisionSeconds > 0 {
			took = fmt.Sprintf("%.0f s", at.ProvisionSeconds)
		}
		mayExist, cleaned := "no", "-"
		if at.MayExist {
			mayExist = "yes"
		}
		if !at.Cleaned.IsZero() {
			cleaned = at.Cleaned.Format(time.DateTime)
		}
		t.row(at.ID, at.Target, at.Provider, orDash(at.Region), orDash(at.Offer), at.Start.Format(time.DateTime),
			orDash(at.Outcome), orDash(at.Class), took, mayExist, cleaned)
	}
	return t.flush()
}
