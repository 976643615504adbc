package stopper

import (
	"context"
	"os/exec"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// Exec runs a command on the box: the agent passes its runner, tests a
// recorder. A stopper never runs a command any other way.
type Exec func(ctx context.Context, argv []string) error

// DefaultShutdown is the OS shutdown command.
var DefaultShutdown = []string{"shutdown", "-h", "now"}

// OSShutdown stops the box with an OS shutdown. That ends the compute bill
// only where the provider says so (EC2 EBS-backed, Compute Engine); Prove
// and the outcome follow gpuwarden's stop semantics table.
type OSShutdown struct {
	// Provider names the row of the table that says what the shutdown does.
	Provider string
	// Command is the shutdown command (DefaultShutdown).
	Command []string
	// Exec runs it; nil refuses.
	Exec Exec
	// LookPath finds the command (exec.LookPath).
	LookPath func(string) (string, error)
	// Now is the clock.
	Now func() time.Time
}

// NewOSShutdown returns the OS shutdown stopper for a provider; an empty
// command means DefaultShutdown.
func NewOSShutdown(provider string, command []string, run Exec) *OSShutdown {
	if len(command) == 0 {
		command = DefaultShutdown
	}
	return &OSShutdown{Provider: provider, Command: command, Exec: run, LookPath: exec.LookPath, Now: time.Now}
}

// Method returns gpuwarden.StopOSShutdown.
func (s *OSShutdown) Method() string { return gpuwarden.StopOSShutdown }

// Prove checks that the command can run and what the table says an OS
// shutdown does to this provider's bill; it cannot see whether this
// instance is the documented kind (an EBS-backed EC2 instance stops, an
// instance-store one terminates).
func (s *OSShutdown) Prove(context.Context) (gpuwarden.StopProof, error) {
	p := newProof(s.Method(), s.Now())
	if err := canRun(s.Command, s.Exec, s.LookPath); err != nil {
		return p.refuse(err)
	}
	p.check("%s can run", strings.Join(s.Command, " "))
	ok, why := gpuwarden.StopsComputeBilling(s.Provider, gpuwarden.StopOSShutdown)
	if !ok {
		return p.refuse(fail(gpuwarden.EFinding, fixFor(s.Provider), nil, "an OS shutdown would not stop billing: %s", why))
	}
	p.check("%s", why)
	return p.ok()
}

// Stop runs the shutdown. Its outcome is stopped where the table says an
// OS shutdown stops the bill (the box cannot read its own end: the
// provider's documentation is the word), powered-off-still-billing
// everywhere else, unknown included.
func (s *OSShutdown) Stop(ctx context.Context) (gpuwarden.StopOutcome, error) {
	out := gpuwarden.StopOutcome{Method: s.Method(), At: s.Now(), Billing: gpuwarden.NodeRunning}
	if err := canRun(s.Command, s.Exec, nil); err != nil {
		return out, err
	}
	if err := s.Exec(ctx, s.Command); err != nil {
		return out, fail(gpuwarden.EEnvironment, "check that gpuwarden may run "+s.Command[0]+" (root, or a --stop-command that works)",
			err, "%s failed", strings.Join(s.Command, " "))
	}
	ok, why := gpuwarden.StopsComputeBilling(s.Provider, gpuwarden.StopOSShutdown)
	out.State = "shutting-down"
	if ok {
		// The provider documents that the instance stops (or, on AWS
		// instance-store boxes, terminates) with its OS, and with it the
		// compute bill: stopped, by the provider's word rather than a
		// state read back, which the detail says. --stop api reads it.
		out.Billing = gpuwarden.NodeStopped
		why += " (by the provider's documentation; --stop api reads the state back)"
	} else {
		out.Billing = gpuwarden.NodePoweredOffStillBilling
	}
	out.Detail = why
	return out, nil
}

// Command stops the box with the user's own command (--stop-command).
// gpuwarden cannot know what it does to the bill: Prove says so, and its
// outcome is stop-requested, never stopped.
type Command struct {
	// Provider names the provider, for the fix Prove suggests.
	Provider string
	// Argv is the command.
	Argv []string
	// Exec runs it; nil refuses.
	Exec Exec
	// LookPath finds the command (exec.LookPath).
	LookPath func(string) (string, error)
	// Now is the clock.
	Now func() time.Time
}

// NewCommand returns the custom command stopper.
func NewCommand(provider string, argv []string, run Exec) *Command {
	return &Command{Provider: provider, Argv: argv, Exec: run, LookPath: exec.LookPath, Now: time.Now}
}

// Method returns gpuwarden.StopCommand.
func (c *Command) Method() string { return gpuwarden.StopCommand }

// Prove checks that the command can run, and says that what it does to
// the bill cannot be proven.
func (c *Command) Prove(context.Context) (gpuwarden.StopProof, error) {
	p := newProof(c.Method(), c.Now())
	if err := canRun(c.Argv, c.Exec, c.LookPath); err != nil {
		return p.refuse(err)
	}
	p.check("%s can run", strings.Join(c.Argv, " "))
	_, why := gpuwarden.StopsComputeBilling(c.Provider, gpuwarden.StopCommand)
	fix := "make sure the command calls the provider's own stop (deallocate, stop, terminate)"
	if s, ok := gpuwarden.StopSemanticsOf(c.Provider); ok && s.Method != "" {
		fix = "use --stop api (" + s.Method + "), which gpuwarden can prove and confirm, or " + fix
	}
	return p.refuse(fail(gpuwarden.EFinding, fix, nil, "%s", why))
}

// Stop runs the command; the outcome is stop-requested.
func (c *Command) Stop(ctx context.Context) (gpuwarden.StopOutcome, error) {
	out := gpuwarden.StopOutcome{Method: c.Method(), At: c.Now(), Billing: gpuwarden.NodeRunning}
	if err := canRun(c.Argv, c.Exec, nil); err != nil {
		return out, err
	}
	if err := c.Exec(ctx, c.Argv); err != nil {
		return out, fail(gpuwarden.EEnvironment, "run the --stop-command by hand to see why it fails", err,
			"stop command %s failed", strings.Join(c.Argv, " "))
	}
	out.Billing = gpuwarden.NodeStopRequested
	out.Detail = "the stop command ran; gpuwarden cannot read back what it did to the bill"
	return out, nil
}

// canRun checks a command is set, a runner is given and, with lookPath,
// that the program exists.
func canRun(argv []string, run Exec, lookPath func(string) (string, error)) error {
	if len(argv) == 0 || argv[0] == "" {
		return fail(gpuwarden.EInvalid, "give the command, e.g. --stop-command 'shutdown -h now'", nil, "empty stop command")
	}
	if run == nil {
		return fail(gpuwarden.EInternal, "report this: the stopper was built without a command runner", nil, "no command runner")
	}
	if lookPath != nil {
		if _, err := lookPath(argv[0]); err != nil {
			return fail(gpuwarden.EEnvironment, "install "+argv[0]+" or give a --stop-command that exists", err,
				"stop command %s not found", argv[0])
		}
	}
	return nil
}

// fixFor says what would stop the bill on a provider, from the table.
func fixFor(provider string) string {
	s, ok := gpuwarden.StopSemanticsOf(provider)
	switch {
	case !ok:
		return "check the provider's documentation for what stops its bill, and give --stop-command that action (gpuwarden assumes the box bills on)"
	case s.Method == gpuwarden.StopLambdaTerminate:
		return "use --stop terminate: Lambda has no stop, terminating loses the instance's disk (persistent filesystems survive); needs " + s.Identity
	case s.Method != "":
		return "use --stop api (" + s.Method + "): needs " + s.Identity
	case s.Call.URL != "":
		return "give --stop-command the provider's " + string(s.Action) + " (" + s.Call.Method + " " + s.Call.URL + "; " + s.Identity + ")"
	case s.Action != gpuwarden.ActionNoneKnown:
		return "give --stop-command the provider's " + string(s.Action) + " (" + s.Identity + "; see " + s.Sources[0] + ")"
	}
	return "check " + s.Sources[0] + " for what stops the bill"
}
