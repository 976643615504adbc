// Command gpuwarden guards GPU rentals: it plans what to rent, checks the box,
// supervises the job and stops paying for idle GPUs. main only wires the
// commands and maps errors to exit codes.
package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/simclock"
	"github.com/spf13/cobra"
)

// Exit codes, documented in the README and in `gpuwarden --help`.
const (
	exitOK          = 0
	exitFinding     = 1
	exitInvalid     = 2
	exitEnvironment = 3
	exitInternal    = 4
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// app carries what every command needs; tests build one with their own
// streams and clock instead of patching globals.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	now            func() time.Time
	// clock is the stepped clock of --clock-file, nil on the machine's.
	clock *simclock.Clock
	log   *slog.Logger
	// started is set once a command's RunE begins, so that errors before it
	// (bad flags, wrong argument count) are reported as usage errors.
	started bool
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, now: time.Now}
	root := a.rootCommand()
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	if !a.started {
		var ae *gpuwarden.Error
		var ee *exitError
		if !errors.As(err, &ae) && !errors.As(err, &ee) {
			err = &gpuwarden.Error{Code: gpuwarden.EInvalid, Message: err.Error(), Hint: "see " + cmd.CommandPath() + " --help"}
		}
	}
	return a.report(err)
}

// exitError is a result that sets its own exit code: canary's codes are its
// own (see its help). A nil err prints nothing.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// report prints the error and its hint once, and picks the exit code.
func (a *app) report(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintf(a.stderr, "error: %s\n", ee.err)
			if h := gpuwarden.ErrorHint(ee.err); h != "" {
				fmt.Fprintf(a.stderr, "hint: %s\n", h)
			}
		}
		return ee.code
	}
	code := gpuwarden.ErrorCodeOf(err)
	if code != gpuwarden.EFinding {
		fmt.Fprintf(a.stderr, "error: %s\n", err)
		if h := gpuwarden.ErrorHint(err); h != "" {
			fmt.Fprintf(a.stderr, "hint: %s\n", h)
		}
	}
	switch code {
	case gpuwarden.EFinding:
		return exitFinding
	case gpuwarden.EInvalid, gpuwarden.ENotFound, gpuwarden.EConflict, gpuwarden.EUnauthorized, gpuwarden.EForbidden:
		return exitInvalid
	case gpuwarden.EEnvironment, gpuwarden.EUnavailable:
		return exitEnvironment
	}
	return exitInternal
}

// exitCodes renders a command's own exit-code block, each line "N  what it
// means for this command"; 0 comes first, and only the codes the command
// can return are listed, so that a script reads what this command says.
func exitCodes(lines ...string) string {
	var b strings.Builder
	b.WriteString("Exit codes:")
	for _, l := range lines {
		b.WriteString("\n  " + l)
	}
	return b.String()
}

const exitCodesHelp = `Exit codes:
  0  ok
  1  finding: nothing fits the budget, a border crossed, drift, FAIL
  2  bad input or usage: a malformed file, row or flag; a missing file
  3  environment missing: no driver, no GPU
  4  internal error`

func (a *app) rootCommand() *cobra.Command {
	var logLevel, now, clockFile string
	root := &cobra.Command{
		Use:   "gpuwarden",
		Short: "Ship the work, not the surprises: plan, check and guard rented GPUs",
		Long: `gpuwarden covers the whole GPU rental: size the card and price the full month
before renting (plan, offers, egress, init); record the stack and check every
new box against it in about a second (lock, canary); prove a new box and keep a
scorecard per node (burnin, nodes); supervise the job through preemptions
(run, checkpoint); and, on every box, the agent that stops paying for idle
GPUs, alerts on the budget and hears preemption first (up, status).

` + exitCodesHelp,
		Example: `  gpuwarden init > gpuwarden.yaml
  gpuwarden plan gpuwarden.yaml
  gpuwarden up gpuwarden.yaml --dry-run
  gpuwarden run --sync s3://bucket/job -- python train.py`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionString(),
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			// up, run and server have a --log-level of their own (see
			// serviceLogLevel); cmd.Flags() holds theirs or this one.
			if f := cmd.Flags().Lookup("log-level"); f != nil {
				logLevel = f.Value.String()
			}
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return gpuwarden.Errorf(gpuwarden.EInvalid, "--log-level: %q is not a level", logLevel).WithHint("one of: debug, info, warn, error")
			}
			a.log = a.logAt(lvl.String())
			if now != "" {
				t, err := time.Parse("2006-01-02", now)
				if err != nil {
					return gpuwarden.Errorf(gpuwarden.EInvalid, "--now: %q is not YYYY-MM-DD", now)
				}
				a.now = func() time.Time { return t }
			}
			if clockFile != "" {
				c, err := simclock.Open(clockFile)
				if err != nil {
					return gpuwarden.Errorf(gpuwarden.EInvalid, "--clock-file: %v", err)
				}
				a.clock, a.now = c, c.Now
			}
			a.started = true
			return nil
		},
	}
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "%s", err).WithHint("see %s --help", c.CommandPath())
	})
	root.PersistentFlags().StringVar(&logLevel, "log-level", "warn", logLevelUsage+"; up, run and server default to info")
	root.PersistentFlags().StringVar(&now, "now", "", "pretend today is `YYYY-MM-DD` (for reproducible price-age warnings)")
	_ = root.PersistentFlags().MarkHidden("now")
	root.PersistentFlags().StringVar(&clockFile, "clock-file", "",
		"run on the time in `FILE` (one RFC 3339 line), which a test or a demo steps (package simclock); up takes it with --simulate only")
	_ = root.PersistentFlags().MarkHidden("clock-file")
	root.AddCommand(a.versionCommand(), a.initCommand(), a.planCommand(), a.offersCommand(), a.egressCommand(),
		a.lockCommand(), a.canaryCommand(), a.probeCommand(), a.upCommand(), a.statusCommand(),
		a.runCommand(), a.checkpointCommand(), a.burninCommand(), a.burnCommand(), a.nodesCommand(),
		a.serverCommand(), a.tokenCommand(), a.projectCommand(), a.nodeCommand(), a.benchCommand(), a.reportCommand(), a.progressCommand(),
		a.launchCommand(), a.preflightCommand(), a.catalogCommand())
	// cobra adds `completion` itself; it gets an example and exit codes too.
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			c.Example = "  gpuwarden completion bash > /etc/bash_completion.d/gpuwarden\n  gpuwarden completion zsh > \"${fpath[1]}/_gpuwarden\""
			c.Long += "\n\n" + exitCodes("0  the script was printed", "2  bad usage: an unknown shell")
		}
	}
	return root
}

// logLevelUsage is --log-level's help.
const logLevelUsage = "log level: debug, info, warn, error (logs go to stderr)"

// serviceLogLevel gives a command that runs on and reports as it works
// (up, run, server) a --log-level of its own, default info, where a command
// that answers once says only warnings. The flag shadows the root's, so
// that the command's --help shows the default it really has.
func serviceLogLevel(c *cobra.Command) {
	c.Flags().String("log-level", "info", logLevelUsage)
}

// logAt returns a logger to stderr at a level name (debug, info, warn, error).
func (a *app) logAt(level string) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(level))
	return slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: lvl}))
}

// outputFormat validates -o against the formats a command supports.
func outputFormat(got string, allowed ...string) error {
	for _, f := range allowed {
		if got == f {
			return nil
		}
	}
	return gpuwarden.Errorf(gpuwarden.EInvalid, "-o: unknown format %q", got).WithHint("one of: %s", strings.Join(allowed, ", "))
}
