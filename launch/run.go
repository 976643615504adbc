package launch

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// Recorder keeps attempts durably; Run calls it before a launch command
// runs (Outcome "", StopCommand resolved, MayExist true, so that a crash
// mid-launch leaves a record that cleanup can act on), again when the
// attempt ends, and when it becomes ready.
type Recorder interface {
	Record(ctx context.Context, a gpuwarden.LaunchAttempt) error
}

// Options configure one launch; the zero value of every field but Targets
// is a working default.
type Options struct {
	// Targets are tried in order: plan A, then plan B.
	Targets []gpuwarden.Target
	// Rules are the plan's own rules; DefaultRules() are tried after them.
	Rules []gpuwarden.LaunchRule
	// Deadline bounds the whole launch (default 30m).
	Deadline time.Duration
	// Backoff is the wait before the next target after a failure (default
	// 2s), doubling per failure up to a minute, with ±20% jitter so that
	// many launches started together do not hit an API in step.
	Backoff time.Duration
	// Rounds is how many passes are made over the targets that failed for
	// capacity, which comes back in minutes where quota does not (default 1).
	Rounds int
	// ReadyEvery and ReadyTimeout pace and bound polling Target.Ready
	// (default 10s and 15m).
	ReadyEvery, ReadyTimeout time.Duration
	// WaitAgent, when set, waits until the new box's agent reports (the CLI
	// polls the fleet server for a node labelled launch_id=LaunchID) and
	// returns when; provisioning ends at the earlier of that and Ready. It
	// must return when its context ends.
	WaitAgent func(ctx context.Context, launchID, name string) (time.Time, error)
	// Env is extra environment for the commands; GPUWARDEN_LAUNCH_ID,
	// GPUWARDEN_TARGET, GPUWARDEN_NAME and the target's fields are added.
	Env []string
	// Out gets one human line per attempt and why launch moved on.
	Out io.Writer
	// Now, Sleep and Rand are seams for tests; Sleep must return when its
	// context ends.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	Rand  func() float64
	Log   *slog.Logger
}

// Result is what a launch did: every attempt's final state, in order, and
// the one that launched, if any.
type Result struct {
	LaunchID string
	Attempts []gpuwarden.LaunchAttempt
	// Launched is the attempt that launched; it is also set when the box
	// launched but never became ready, together with an error.
	Launched *gpuwarden.LaunchAttempt
}

// The defaults, chosen for GPU clouds: a launch command may take minutes,
// and a box minutes more to boot and pull an image.
const (
	defaultDeadline      = 30 * time.Minute
	defaultBackoff       = 2 * time.Second
	maxBackoff           = time.Minute
	defaultReadyEvery    = 10 * time.Second
	defaultReadyTimeout  = 15 * time.Minute
	defaultLaunchTimeout = 600 * time.Second
	// recordTimeout bounds one Record call; records are made on a context
	// that outlives the launch deadline, since the last record of an
	// interrupted attempt matters most.
	recordTimeout = 30 * time.Second
)

// errDeadline is the cause of the launch context ending at Options.Deadline,
// told apart from the caller cancelling.
var errDeadline = errors.New("launch deadline passed")

// step is what one attempt means for the rest of the launch.
type step int

const (
	stepNext     step = iota // failed or skipped: try the next target
	stepCapacity             // failed or skipped for capacity: worth another round
	stepLaunched             // launched: done
)

// ruleOut is a failure's reach: later targets it covers are skipped.
type ruleOut struct {
	class, scope                  string
	provider, region, zone, offer string
	by                            string // the target that failed
}

// covers reports whether the failure rules out t. A capacity failure says
// nothing about other offers in the same place (a zone out of H100s may
// have L40S), so it rules out the same offer only; quota and wider scopes
// are about the account and rule out every offer.
func (o ruleOut) covers(t gpuwarden.Target) bool {
	if !strings.EqualFold(o.provider, t.Provider) {
		return false
	}
	if o.class == gpuwarden.FailCapacity && !strings.EqualFold(o.offer, t.Offer) {
		return false
	}
	switch o.scope {
	case gpuwarden.ScopeProvider:
		return true
	case gpuwarden.ScopeRegion:
		return o.region == t.Region
	default:
		return o.region == t.Region && o.zone == t.Zone
	}
}

// reason reads "quota in aws eu-west-1 ruled it out (plan-b)".
func (o ruleOut) reason() string {
	what := o.class
	if o.class == gpuwarden.FailCapacity && o.offer != "" {
		what += " for " + o.offer
	}
	place := o.provider
	switch {
	case o.scope == gpuwarden.ScopeZone && o.zone != "":
		place += " " + o.zone
	case o.scope != gpuwarden.ScopeProvider && o.region != "":
		place += " " + o.region
	}
	return fmt.Sprintf("%s in %s ruled it out (%s)", what, place, o.by)
}

type runner struct {
	opt      Options
	rec      Recorder
	rules    []gpuwarden.LaunchRule
	log      *slog.Logger
	launchID string
	short    string
	width    int

	attempts []gpuwarden.LaunchAttempt
	ruled    []ruleOut
	n        int           // attempts numbered so far
	failures int           // failed launch commands so far, for the backoff
	wait     time.Duration // owed before the next launch command
}

// Run launches the first target that can be had, trying the targets in
// order, classifying each failure and skipping what an earlier failure
// ruled out. It returns an EFinding error when none launched, EEnvironment
// on a credentials failure and EInvalid on a configuration failure.
func Run(ctx context.Context, opt Options, rec Recorder) (Result, error) {
	opt = withDefaults(opt)
	if err := checkOptions(opt); err != nil {
		return Result{}, err
	}
	id, short, err := newLaunchID(opt.Now())
	if err != nil {
		return Result{}, fmt.Errorf("launch: %w", err)
	}
	r := &runner{
		opt:      opt,
		rec:      rec,
		rules:    append(append([]gpuwarden.LaunchRule{}, opt.Rules...), DefaultRules()...),
		log:      opt.Log.With("component", "launch", "launch_id", id),
		launchID: id,
		short:    short,
	}
	for _, t := range opt.Targets {
		r.width = max(r.width, len(t.Name))
	}
	ctx, cancel := context.WithTimeoutCause(ctx, opt.Deadline, errDeadline)
	defer cancel()
	runErr := r.run(ctx)
	res := Result{LaunchID: id, Attempts: append([]gpuwarden.LaunchAttempt{}, r.attempts...)}
	for i := range res.Attempts {
		if res.Attempts[i].Outcome == gpuwarden.AttemptLaunched {
			res.Launched = &res.Attempts[i]
		}
	}
	return res, runErr
}

func withDefaults(o Options) Options {
	if o.Deadline <= 0 {
		o.Deadline = defaultDeadline
	}
	if o.Backoff <= 0 {
		o.Backoff = defaultBackoff
	}
	if o.Rounds <= 0 {
		o.Rounds = 1
	}
	if o.ReadyEvery <= 0 {
		o.ReadyEvery = defaultReadyEvery
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = defaultReadyTimeout
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	if o.Rand == nil {
		o.Rand = mrand.Float64
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

func checkOptions(o Options) error {
	if len(o.Targets) == 0 {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "no targets to launch").
			WithHint("add targets to the plan file: plan A first, then plan B")
	}
	seen := map[string]bool{}
	for i, t := range o.Targets {
		if err := ValidateTarget(t); err != nil {
			return &gpuwarden.Error{Code: gpuwarden.EInvalid, Message: fmt.Sprintf("targets[%d] %s", i, t.Name), Err: err}
		}
		if seen[t.Name] {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "targets[%d]: name: %q is used twice; each target needs its own name", i, t.Name)
		}
		seen[t.Name] = true
	}
	for i, r := range o.Rules {
		if err := ValidateRule(r); err != nil {
			return &gpuwarden.Error{Code: gpuwarden.EInvalid, Message: fmt.Sprintf("launch_rules[%d]", i), Err: err}
		}
	}
	return nil
}

// newLaunchID is time-ordered for people and ledgers, with random hex so
// that two launches in the same second differ; the hex alone names boxes.
func newLaunchID(now time.Time) (id, short string, err error) {
	var b [4]byte
	if _, err := crand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("launch id: %w", err)
	}
	short = hex.EncodeToString(b[:])
	return now.UTC().Format("20060102-150405") + "-" + short, short, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

func (r *runner) run(ctx context.Context) error {
	queue := make([]int, len(r.opt.Targets))
	for i := range queue {
		queue[i] = i
	}
	for round := 1; round <= r.opt.Rounds && len(queue) > 0; round++ {
		if round > 1 {
			r.clearCapacity()
			names := make([]string, len(queue))
			for i, ti := range queue {
				names[i] = r.opt.Targets[ti].Name
			}
			fmt.Fprintf(r.opt.Out, "round %d of %d: trying %s again (capacity comes back)\n", round, r.opt.Rounds, strings.Join(names, ", "))
		}
		var again []int
		for i, ti := range queue {
			s, err := r.try(ctx, r.opt.Targets[ti])
			if err != nil {
				return err
			}
			switch s {
			case stepLaunched:
				return nil
			case stepCapacity:
				again = append(again, ti)
			}
			a := r.attempts[len(r.attempts)-1]
			action := "next target"
			if i == len(queue)-1 {
				action = "no targets left"
				if round < r.opt.Rounds && len(again) > 0 {
					action = fmt.Sprintf("round %d", round+1)
				}
			}
			what := a.Reason
			if a.Outcome == gpuwarden.AttemptSkipped {
				what = "skipped: " + what
			}
			fmt.Fprintln(r.opt.Out, r.line(a, what+" → "+action))
		}
		queue = again
	}
	return r.noneLaunched()
}

// try makes one attempt at t: skip it, or run its launch command and act
// on how it ended.
func (r *runner) try(ctx context.Context, t gpuwarden.Target) (step, error) {
	if ctx.Err() != nil {
		return stepNext, r.stopped(ctx, nil)
	}
	r.n++
	v := Vars{
		Name:     fmt.Sprintf("gw-%s-%d", r.short, r.n),
		Provider: t.Provider, Region: t.Region, Zone: t.Zone, Offer: t.Offer,
		LaunchID: r.launchID,
	}
	a := gpuwarden.LaunchAttempt{
		ID: fmt.Sprintf("%s-%d", r.launchID, r.n), LaunchID: r.launchID,
		Target: t.Name, Provider: t.Provider, Region: t.Region, Zone: t.Zone, Offer: t.Offer,
		Name: v.Name,
	}
	if o, ok := r.ruledOut(t); ok {
		a.Start = r.opt.Now()
		a.End = a.Start
		a.Outcome = gpuwarden.AttemptSkipped
		a.Reason = o.reason()
		i := r.add(a)
		if err := r.record(ctx, r.attempts[i]); err != nil {
			return stepNext, err
		}
		if o.class == gpuwarden.FailCapacity {
			return stepCapacity, nil
		}
		return stepNext, nil
	}
	if r.wait > 0 {
		r.log.Debug("waiting before the next target", "wait", r.wait)
		if err := r.opt.Sleep(ctx, r.wait); err != nil {
			r.n-- // nothing was attempted under this number
			return stepNext, r.stopped(ctx, err)
		}
		r.wait = 0
	}
	line, err := Render(t.Launch, v)
	if err != nil {
		return stepNext, gpuwarden.Errorf(gpuwarden.EInvalid, "target %s: launch: %v", t.Name, err)
	}
	a.StopCommand, err = renderStop(t, v)
	if err != nil {
		return stepNext, gpuwarden.Errorf(gpuwarden.EInvalid, "target %s: stop: %v", t.Name, err)
	}
	a.Start = r.opt.Now()
	a.MayExist = true
	i := r.add(a)
	// The pending record comes first: if this process dies while the
	// command runs, the ledger still knows a box may exist and how to stop it.
	if err := r.record(ctx, a); err != nil {
		r.attempts = r.attempts[:i]
		return stepNext, err
	}
	r.log.Info("launching", "target", t.Name, "name", v.Name)
	res := runShell(ctx, line, commandEnv(r.opt.Env, v, t.Name), launchTimeout(t))
	a.End = r.opt.Now()
	a.ExitCode = res.exit
	a.Output = lastLines(res.output, outputLines)
	a.Outcome = gpuwarden.AttemptFailed
	if id := r.instanceID(t, res.output); id != "" {
		// A failed or timed-out command may still have created the box and
		// printed its ID: the stop command should use it.
		a.InstanceID = id
		v.InstanceID = id
		a.StopCommand, _ = renderStop(t, v)
	}
	switch {
	case res.err != nil:
		a.MayExist = false
		a.Class = gpuwarden.FailUnknown
		a.Reason = "could not run the launch command: " + res.err.Error()
		r.attempts[i] = a
		if err := r.record(ctx, a); err != nil {
			return stepNext, err
		}
		fmt.Fprintln(r.opt.Out, r.line(a, a.Reason+" → stop"))
		return stepNext, gpuwarden.Errorf(gpuwarden.EEnvironment, "target %s: could not run its launch command: %v", t.Name, res.err).
			WithHint("launch runs commands with sh -c; check that sh is on PATH")
	case res.stopped != nil:
		a.Class = gpuwarden.FailUnknown
		a.Reason = "unknown: " + stopWords(res.stopped) + " while the launch command ran; its process group was killed and it may have created a box"
		r.attempts[i] = a
		if err := r.record(ctx, a); err != nil {
			return stepNext, err
		}
		fmt.Fprintln(r.opt.Out, r.line(a, a.Reason+" → stop"))
		return stepNext, r.stopped(ctx, res.stopped)
	case res.timedOut:
		a.Class = gpuwarden.FailUnknown
		a.Reason = fmt.Sprintf("unknown: timed out after %s; its process group was killed and it may have created a box", launchTimeout(t))
		r.failed()
		r.attempts[i] = a
		return stepNext, r.record(ctx, a)
	case res.exit == 0:
		return r.launched(ctx, i, a, t, v)
	}
	rule, matched, ok := classify(r.rules, t.Provider, res.exit, res.output)
	if !ok || rule.Class == gpuwarden.FailUnknown {
		a.Class = gpuwarden.FailUnknown
		what := fmt.Sprintf("exit %d", res.exit)
		if l := lastLine(res.output); l != "" {
			what += ": " + l
		}
		if ok {
			what = matched + why(rule, v)
		}
		a.Reason = "unknown: " + what + "; it may have created a box"
		r.failed()
		r.attempts[i] = a
		return stepNext, r.record(ctx, a)
	}
	a.Class = rule.Class
	a.MayExist = false // the provider refused: nothing was created
	a.Reason = rule.Class + ": " + matched + why(rule, v)
	r.attempts[i] = a
	if err := r.record(ctx, a); err != nil {
		return stepNext, err
	}
	switch {
	case rule.Class == gpuwarden.FailAuth && rule.Scope == "":
		fmt.Fprintln(r.opt.Out, r.line(a, a.Reason+" → stop"))
		return stepNext, gpuwarden.Errorf(gpuwarden.EEnvironment, "target %s: %s", t.Name, strings.TrimPrefix(a.Reason, "auth: ")).
			WithHint("fix the %s credentials the launch command uses on this machine, then launch again", t.Provider)
	case rule.Class == gpuwarden.FailConfig:
		fmt.Fprintln(r.opt.Out, r.line(a, a.Reason+" → stop"))
		return stepNext, gpuwarden.Errorf(gpuwarden.EInvalid, "target %s: %s", t.Name, strings.TrimPrefix(a.Reason, "config: ")).
			WithHint("fix target %s's launch command or its parameters in the plan file; its output is in the ledger", t.Name)
	}
	o := ruleOut{
		class: rule.Class, scope: scopeOf(rule, t),
		provider: t.Provider, region: t.Region, zone: t.Zone, offer: t.Offer, by: t.Name,
	}
	r.ruled = append(r.ruled, o)
	r.failed()
	if rule.Class == gpuwarden.FailCapacity {
		return stepCapacity, nil
	}
	return stepNext, nil
}

// launched finishes an attempt whose command exited 0: it records the
// launch, waits until the box is ready and records that too.
func (r *runner) launched(ctx context.Context, i int, a gpuwarden.LaunchAttempt, t gpuwarden.Target, v Vars) (step, error) {
	a.Outcome = gpuwarden.AttemptLaunched
	a.MayExist = true
	a.Class = ""
	r.attempts[i] = a
	if err := r.record(ctx, a); err != nil {
		return stepLaunched, err
	}
	what := "launched as " + a.Name
	if a.InstanceID != "" {
		what += ", instance " + a.InstanceID
	} else if t.InstanceID != "" {
		// Only a launch that worked must name its box; a refused one
		// prints an error instead.
		r.log.Warn("no instance id in the launch output", "target", t.Name, "pattern", t.InstanceID)
	}
	waiting := t.Ready != "" || r.opt.WaitAgent != nil
	if waiting {
		fmt.Fprintln(r.opt.Out, r.line(a, what+" → waiting until ready"))
	}
	ready, err := r.waitReady(ctx, a, t, v)
	if err != nil {
		a.Reason = "launched, but " + err.Error()
		r.attempts[i] = a
		if rerr := r.record(ctx, a); rerr != nil {
			return stepLaunched, rerr
		}
		fmt.Fprintln(r.opt.Out, r.line(a, a.Reason+" → stop"))
		e := gpuwarden.Errorf(gpuwarden.EFinding, "target %s launched as %s but %v", t.Name, a.Name, err)
		hint := "the box may be running and billing: check it, then keep it or stop it"
		if a.StopCommand != "" {
			hint += " (gpuwarden launch --cleanup with launched attempts included runs: " + a.StopCommand + ")"
		}
		e.Hint = hint
		if ctx.Err() != nil && !errors.Is(context.Cause(ctx), errDeadline) {
			e.Err = context.Cause(ctx)
		}
		return stepLaunched, e
	}
	a.Ready = ready
	a.ProvisionSeconds = max(0, ready.Sub(a.Start).Seconds())
	r.attempts[i] = a
	if err := r.record(ctx, a); err != nil {
		return stepLaunched, err
	}
	took := time.Duration(a.ProvisionSeconds * float64(time.Second)).Round(time.Second)
	if !waiting {
		fmt.Fprintln(r.opt.Out, r.line(a, what))
		fmt.Fprintf(r.opt.Out, "launched %s as %s: the launch command took %s (no ready check configured)\n", t.Name, a.Name, took)
	} else {
		fmt.Fprintf(r.opt.Out, "launched %s as %s: ready %s after the launch command started\n", t.Name, a.Name, took)
	}
	r.log.Info("launched", "target", t.Name, "name", a.Name, "instance_id", a.InstanceID, "provision_seconds", a.ProvisionSeconds)
	return stepLaunched, nil
}

// waitReady returns when the box became usable: the earlier of the ready
// command first succeeding and WaitAgent returning, or the command's exit
// when neither is configured.
func (r *runner) waitReady(ctx context.Context, a gpuwarden.LaunchAttempt, t gpuwarden.Target, v Vars) (time.Time, error) {
	if t.Ready == "" && r.opt.WaitAgent == nil {
		return a.End, nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.opt.ReadyTimeout)
	type got struct {
		at  time.Time
		err error
	}
	ch := make(chan got, 2)
	var wg sync.WaitGroup
	n := 0
	if t.Ready != "" {
		n++
		wg.Add(1)
		go func() {
			defer wg.Done()
			at, err := r.pollReady(ctx, t, v)
			ch <- got{at, err}
		}()
	}
	if r.opt.WaitAgent != nil {
		n++
		go func() {
			at, err := r.opt.WaitAgent(ctx, r.launchID, a.Name)
			if err != nil {
				err = fmt.Errorf("its agent did not report: %w", err)
			}
			ch <- got{at, err}
		}()
	}
	// Whichever way this returns, the other waiter is told to stop, and our
	// own poller is waited for so that no ready command outlives Run;
	// WaitAgent is the caller's and is only asked to stop.
	defer func() {
		cancel()
		wg.Wait()
	}()
	var errs []string
	for range n {
		g := <-ch
		if g.err == nil {
			return g.at, nil
		}
		errs = append(errs, g.err.Error())
	}
	return time.Time{}, errors.New(strings.Join(errs, "; "))
}

// pollReady runs the ready command until it succeeds. The timeout is
// measured with Options.Now as well as the context, so a test's clock
// decides it without waiting.
func (r *runner) pollReady(ctx context.Context, t gpuwarden.Target, v Vars) (time.Time, error) {
	line, err := Render(t.Ready, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("its ready command does not render: %w", err)
	}
	env := commandEnv(r.opt.Env, v, t.Name)
	deadline := r.opt.Now().Add(r.opt.ReadyTimeout)
	limit := max(r.opt.ReadyEvery, time.Minute)
	last := ""
	for calls := 1; ; calls++ {
		res := runShell(ctx, line, env, limit)
		if res.ok() {
			return r.opt.Now(), nil
		}
		if l := lastLine(res.output); l != "" {
			last = "; last output: " + l
		}
		if ctx.Err() != nil || !r.opt.Now().Before(deadline) {
			break
		}
		r.log.Debug("not ready yet", "target", t.Name, "calls", calls, "exit", res.exit)
		if err := r.opt.Sleep(ctx, r.opt.ReadyEvery); err != nil {
			break
		}
		if !r.opt.Now().Before(deadline) {
			break
		}
	}
	if ctx.Err() != nil && context.Cause(ctx) != context.DeadlineExceeded {
		return time.Time{}, fmt.Errorf("was not ready when %s%s", stopWords(context.Cause(ctx)), last)
	}
	return time.Time{}, fmt.Errorf("was not ready after %s%s", r.opt.ReadyTimeout, last)
}

// noneLaunched is the finding when every target failed or was skipped:
// the last word on each target, in plan order.
func (r *runner) noneLaunched() error {
	lastByTarget := map[string]gpuwarden.LaunchAttempt{}
	mayExist := 0
	for _, a := range r.attempts {
		lastByTarget[a.Target] = a
		if a.MayExist {
			mayExist++
		}
	}
	var parts []string
	for _, t := range r.opt.Targets {
		if a, ok := lastByTarget[t.Name]; ok {
			short, _, _ := strings.Cut(a.Reason, " — ")
			if a.Outcome == gpuwarden.AttemptSkipped {
				short = "skipped: " + short
			}
			parts = append(parts, t.Name+": "+short)
		}
	}
	if e := r.allAuth(); e != nil {
		return e
	}
	msg := fmt.Sprintf("no target launched after %d attempts", len(r.attempts))
	if mayExist > 0 {
		msg += fmt.Sprintf("; %d may have left a box: gpuwarden launch --cleanup stops them", mayExist)
	}
	fmt.Fprintln(r.opt.Out, msg)
	e := gpuwarden.Errorf(gpuwarden.EFinding, "no target launched: %s", strings.Join(parts, "; "))
	e.Hint = "add targets in other zones, regions or providers, ask for the quotas named above, or try again later with more rounds"
	if mayExist > 0 {
		e.Hint += fmt.Sprintf("; %d attempts may have left a box: run gpuwarden launch --cleanup", mayExist)
	}
	return e
}

// allAuth is the credentials error when every launch command that ran was
// refused by a scoped auth rule (AWS's AuthFailure in a region the account
// has not enabled): one such region is ruled out and the launch moves on,
// but when every region answers so the credentials themselves are the
// likelier cause, and that is an environment problem (exit 3), not a
// finding.
func (r *runner) allAuth() error {
	var ran []gpuwarden.LaunchAttempt
	for _, a := range r.attempts {
		if a.Outcome == gpuwarden.AttemptSkipped {
			continue
		}
		if a.Class != gpuwarden.FailAuth {
			return nil
		}
		ran = append(ran, a)
	}
	if len(ran) == 0 {
		return nil
	}
	places := make([]string, len(ran))
	for i, a := range ran {
		places[i] = a.Target + " (" + cmp.Or(a.Region, a.Provider) + ")"
	}
	last := ran[len(ran)-1]
	fmt.Fprintf(r.opt.Out, "every target was refused the credentials: %s\n", strings.Join(places, ", "))
	return gpuwarden.Errorf(gpuwarden.EEnvironment, "every target was refused the credentials: %s", strings.TrimPrefix(last.Reason, "auth: ")).
		WithHint("check the %s credentials the launch commands use on this machine; if they work elsewhere, is the region enabled for your account?", last.Provider)
}

// stopped is the error for a launch that ended early: a finding when its
// deadline passed, else the caller's cancellation or the Sleep seam's error.
func (r *runner) stopped(ctx context.Context, err error) error {
	cause := err
	if ctx.Err() != nil {
		cause = context.Cause(ctx)
	}
	if errors.Is(cause, errDeadline) {
		var parts []string
		for _, a := range r.attempts {
			short, _, _ := strings.Cut(a.Reason, " — ")
			parts = append(parts, a.Target+": "+short)
		}
		msg := fmt.Sprintf("no target launched within the %s deadline", r.opt.Deadline)
		if len(parts) > 0 {
			msg += ": " + strings.Join(parts, "; ")
		}
		fmt.Fprintln(r.opt.Out, msg)
		return gpuwarden.Errorf(gpuwarden.EFinding, "%s", msg).
			WithHint("give the launch more time, or add targets that launch faster; gpuwarden launch --cleanup stops what interrupted attempts may have left")
	}
	return fmt.Errorf("launch: %w", cause)
}

func stopWords(cause error) string {
	if errors.Is(cause, errDeadline) {
		return "the launch deadline passed"
	}
	return "the launch was interrupted (" + cause.Error() + ")"
}

// ruledOut finds an earlier failure that rules t out, preferring one that
// is not about capacity, since only capacity failures earn another round.
func (r *runner) ruledOut(t gpuwarden.Target) (ruleOut, bool) {
	var found *ruleOut
	for i := range r.ruled {
		o := &r.ruled[i]
		if !o.covers(t) {
			continue
		}
		if o.class != gpuwarden.FailCapacity {
			return *o, true
		}
		if found == nil {
			found = o
		}
	}
	if found == nil {
		return ruleOut{}, false
	}
	return *found, true
}

// clearCapacity forgets capacity failures before another round: capacity
// is what changes between rounds, quota is not.
func (r *runner) clearCapacity() {
	kept := r.ruled[:0]
	for _, o := range r.ruled {
		if o.class != gpuwarden.FailCapacity {
			kept = append(kept, o)
		}
	}
	r.ruled = kept
}

// failed counts a failed launch command and owes the backoff before the
// next one: doubling from Options.Backoff to at most a minute, ±20%.
func (r *runner) failed() {
	r.failures++
	d := r.opt.Backoff
	limit := max(maxBackoff, r.opt.Backoff)
	for k := 1; k < r.failures && d < limit; k++ {
		d *= 2
	}
	d = min(d, limit)
	r.wait = time.Duration(float64(d) * (0.8 + 0.4*r.opt.Rand()))
}

func (r *runner) add(a gpuwarden.LaunchAttempt) int {
	r.attempts = append(r.attempts, a)
	return len(r.attempts) - 1
}

// record saves a on a context that survives the launch deadline, so the
// final word on an interrupted attempt still reaches the ledger.
func (r *runner) record(ctx context.Context, a gpuwarden.LaunchAttempt) error {
	if r.rec == nil {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if err := r.rec.Record(rctx, a); err != nil {
		return fmt.Errorf("launch: record attempt %s: %w", a.ID, err)
	}
	return nil
}

// line is one attempt as a person reads it:
// "plan-a  aws eu-west-1a p5.48xlarge  capacity: … → next target".
func (r *runner) line(a gpuwarden.LaunchAttempt, what string) string {
	where := []string{a.Provider}
	if p := cmp.Or(a.Zone, a.Region); p != "" {
		where = append(where, p)
	}
	if a.Offer != "" {
		where = append(where, a.Offer)
	}
	return fmt.Sprintf("%-*s  %s  %s", r.width, a.Target, strings.Join(where, " "), what)
}

// instanceID reads the new instance's ID with the target's expression,
// refusing one that could be shell syntax in the stop and ready commands.
func (r *runner) instanceID(t gpuwarden.Target, output string) string {
	if t.InstanceID == "" {
		return ""
	}
	re, err := compile(t.InstanceID)
	if err != nil {
		return ""
	}
	m := re.FindStringSubmatch(output)
	if len(m) < 2 || m[1] == "" {
		return ""
	}
	if !safeID().MatchString(m[1]) {
		r.log.Warn("ignored an instance id that is not a plain word", "target", t.Name, "id", clip(m[1], 80))
		return ""
	}
	return m[1]
}

func renderStop(t gpuwarden.Target, v Vars) (string, error) {
	if t.Stop == "" {
		return "", nil
	}
	return Render(t.Stop, v)
}

func launchTimeout(t gpuwarden.Target) time.Duration {
	if t.TimeoutSeconds > 0 {
		return time.Duration(t.TimeoutSeconds * float64(time.Second))
	}
	return defaultLaunchTimeout
}

// why renders a rule's reason for this attempt, as " — reason".
func why(rule gpuwarden.LaunchRule, v Vars) string {
	if rule.Why == "" {
		return ""
	}
	s, err := RenderText(rule.Why, v)
	if err != nil {
		s = rule.Why
	}
	if s = clip(s, 240); s == "" {
		return ""
	}
	return " — " + s
}
