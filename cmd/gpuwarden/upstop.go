package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/agent"
	"github.com/gpuwarden/gpuwarden/preempt"
	"github.com/gpuwarden/gpuwarden/stopper"
	"github.com/spf13/cobra"
)

// stopFlags say how `up` stops the box: the mode, a command of the user's
// own, and the provider API addresses (flags, for tests and simulators).
type stopFlags struct {
	mode      string
	command   string
	endpoints stopper.Endpoints
}

func (f *stopFlags) register(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVar(&f.mode, "stop", "auto", "how the idle, off-hours and budget stops stop the box: auto (what ends the bill on this provider), os (shutdown -h now), api (the provider's API), terminate (Lambda, which has no stop); default: the plan's on_hours.stop, else auto")
	fl.StringVar(&f.command, "stop-command", "", "stop the box with this `COMMAND` instead (it wins over --stop)")
	f.registerEndpoints(c, false)
}

// registerEndpoints adds the provider API flags; metadata adds the
// metadata services' too, for a command without the notice flags.
func (f *stopFlags) registerEndpoints(c *cobra.Command, metadata bool) {
	f.endpoints = stopper.DefaultEndpoints()
	fl := c.Flags()
	if metadata {
		fl.StringVar(&f.endpoints.AzureMetadata, "azure-metadata", f.endpoints.AzureMetadata, "Azure instance metadata base `URL` (the managed identity)")
		fl.StringVar(&f.endpoints.AWSMetadata, "aws-metadata", f.endpoints.AWSMetadata, "AWS instance metadata base `URL` (IMDSv2)")
		fl.StringVar(&f.endpoints.GCPMetadata, "gcp-metadata", f.endpoints.GCPMetadata, "GCP metadata server base `URL`")
	}
	fl.StringVar(&f.endpoints.AzureManagement, "azure-management", f.endpoints.AzureManagement, "Azure Resource Manager base `URL` (the deallocate call)")
	fl.StringVar(&f.endpoints.AWSEndpoint, "aws-endpoint", "", "EC2 API `URL` (default: the region's; moto's for tests)")
	fl.StringVar(&f.endpoints.GCPCompute, "gcp-compute", f.endpoints.GCPCompute, "Compute Engine API base `URL`")
	fl.StringVar(&f.endpoints.RunPodAPI, "runpod-api", f.endpoints.RunPodAPI, "RunPod REST API base `URL`")
	fl.StringVar(&f.endpoints.VastAPI, "vast-api", f.endpoints.VastAPI, "Vast.ai API base `URL`")
	fl.StringVar(&f.endpoints.LambdaAPI, "lambda-api", f.endpoints.LambdaAPI, "Lambda Cloud API base `URL`")
}

// shutdownCommands are the commands that power the OS off: a --stop-command
// that is one of them is an OS shutdown, with what that does to the bill.
var shutdownCommands = map[string]bool{"shutdown": true, "poweroff": true, "halt": true}

// isOSShutdown reports whether argv powers the OS off.
func isOSShutdown(argv []string) bool {
	if len(argv) == 0 {
		return false
	}
	name := filepath.Base(argv[0])
	if name == "sudo" && len(argv) > 1 {
		return isOSShutdown(argv[1:])
	}
	if name == "systemctl" {
		for _, a := range argv[1:] {
			if a == "poweroff" || a == "halt" {
				return true
			}
		}
		return false
	}
	return shutdownCommands[name]
}

// stopProvider is the provider whose bill the stop must end: --cloud when
// named, else the provider label, else the plan's box, else what the
// container clouds set in the environment, else the metadata service that
// answers (skipped for a simulated box, which is on no cloud unless a test
// points it at fake metadata).
func (a *app) stopProvider(ctx context.Context, f *upFlags, node gpuwarden.Node, p *gpuwarden.Plan) string {
	switch {
	case f.cloud.cloud != "auto" && f.cloud.cloud != "none":
		return f.cloud.cloud
	case node.Labels.Provider != "":
		return strings.ToLower(node.Labels.Provider)
	case p != nil && p.Box != nil && p.Box.Provider != "":
		return strings.ToLower(p.Box.Provider)
	}
	for env, provider := range map[string]string{"RUNPOD_POD_ID": "runpod", "VAST_CONTAINERLABEL": "vast", "LAMBDA_INSTANCE_ID": "lambda"} {
		if stopper.LookupEnv(env) != "" {
			return provider
		}
	}
	if f.cloud.cloud == "none" || f.simulate != "" && !f.cloud.fakeMetadata() {
		return ""
	}
	src, err := preempt.Detect(ctx, preempt.NewClient(), f.cloud.metadata)
	if err != nil {
		return ""
	}
	return src.Provider()
}

// stopInput is what decides the stop: where the box runs, the mode and
// command (flags over the plan's on_hours), and how to reach the APIs.
type stopInput struct {
	provider     string
	mode         string
	command      string
	endpoints    stopper.Endpoints
	exec         stopper.Exec
	mayTerminate func(context.Context) error
	currency     gpuwarden.Currency
	rate         gpuwarden.Micros
	// stoppedRate is what bills on once the compute bill ends (the plan's
	// storage, plan.StoppedHourly); zero when unknown.
	stoppedRate gpuwarden.Micros
	log         *slog.Logger
	// simulated: simulated GPUs, which no provider bills unless the
	// flags or labels name one (a demo, a test against fakes).
	simulated bool
}

// stopInputOf reads the stop from the flags, else the plan's on_hours.
func (f *upFlags) stopInput(cmd *cobra.Command, p *gpuwarden.Plan) stopInput {
	in := stopInput{mode: f.stop.mode, command: f.stop.command, endpoints: f.stop.endpoints}
	in.endpoints.AzureMetadata, in.endpoints.GCPMetadata, in.endpoints.AWSMetadata = f.cloud.metadata.Azure, f.cloud.metadata.GCP, f.cloud.metadata.AWS
	if p != nil && !cmd.Flags().Changed("stop") && !cmd.Flags().Changed("stop-command") {
		if p.OnHours.Stop != "" {
			in.mode = p.OnHours.Stop
		}
		in.command = p.OnHours.StopCommand
	}
	return in
}

// resolveStop builds the stop: the stopper for the provider and mode, and
// what it does to the bill (gpuwarden.StopsComputeBilling). A provider
// where nothing can end the bill gets no stopper: the agent then alerts
// that the box is idle and still billing, and never claims a stop.
func resolveStop(in stopInput) (agent.StopConfig, error) {
	mode, err := stopper.ParseMode(in.mode)
	if err != nil {
		return agent.StopConfig{}, &gpuwarden.Error{Code: gpuwarden.EInvalid, Message: "--stop", Err: err}
	}
	var command []string
	if strings.TrimSpace(in.command) != "" && (mode == stopper.ModeAuto || mode == stopper.ModeCommand) {
		command = strings.Fields(in.command)
		mode = stopper.ModeCommand
		if isOSShutdown(command) {
			mode = stopper.ModeOS
		}
	}
	if in.log == nil {
		in.log = slog.New(slog.DiscardHandler)
	}
	sem, known := gpuwarden.StopSemanticsOf(in.provider)
	cfg := stopper.Config{Provider: in.provider, Mode: mode, Command: command, Exec: in.exec, Endpoints: in.endpoints,
		Options: stopper.Options{Log: in.log.With("component", "stop")}, MayTerminate: in.mayTerminate}
	report := gpuwarden.StopReport{Currency: in.currency}
	if known {
		report.StillBills = sem.StillBills
	}
	s, err := stopper.New(cfg)
	switch {
	case gpuwarden.ErrorCodeOf(err) == gpuwarden.EFinding:
		// Nothing here ends the bill: said at start, and at every stop.
		report.Method, report.Why, report.Fix = "none", findingWhy(err), gpuwarden.ErrorHint(err)
		report.StillBillsHourly = in.rate
		return agent.StopConfig{Report: report}, nil
	case err != nil:
		return agent.StopConfig{}, &gpuwarden.Error{Code: gpuwarden.EInvalid, Message: "stop " + string(mode), Err: err}
	}
	report.Method = s.Method()
	report.StopsBilling, report.Why = gpuwarden.StopsComputeBilling(in.provider, s.Method())
	report.StillBillsHourly = in.stoppedRate
	if !report.StopsBilling {
		report.StillBillsHourly = in.rate
		report.Fix = stopFix(in.provider, sem, known)
	}
	if in.simulated && in.provider == "" {
		report.StopsBilling, report.Why, report.Fix, report.StillBillsHourly = true, simulatedNoBill, "", 0
		s = simulatedStopper{s}
	}
	if s.Method() == gpuwarden.StopCommand {
		report.Why = "a stop command of your own: gpuwarden cannot tell whether it ends the bill on " + orUnknownProvider(in.provider)
	}
	return agent.StopConfig{Stopper: s, Report: report}, nil
}

// stopFix is what to do when the stop in force would not end the bill.
func stopFix(provider string, sem gpuwarden.StopSemantics, known bool) string {
	switch {
	case !known:
		return "name the provider (--cloud or --label provider=…) so gpuwarden knows what ends its bill"
	case sem.Method == gpuwarden.StopLambdaTerminate:
		return "gpuwarden up --stop terminate (Lambda has no stop; keep checkpoints in a store)"
	case sem.Method != "":
		return "gpuwarden up --stop auto (" + sem.Method + ")"
	}
	return "a --stop-command that " + string(sem.Action) + "s the box through " + provider + "'s API"
}

func orUnknownProvider(p string) string {
	if p == "" {
		return "this box"
	}
	return p
}

// runStop runs a stop command on the box.
func runStop(ctx context.Context, argv []string) error {
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
		}
		return fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	return nil
}

// findingWhy is the reason of stopper.New's "would NOT stop billing" error.
func findingWhy(err error) string {
	var e *gpuwarden.Error
	if errors.As(err, &e) && e.Message != "" {
		return strings.TrimPrefix(e.Message, "idle stop would NOT stop billing here: ")
	}
	return err.Error()
}

// stopTableHelp is gpuwarden's stop table in words, for up --help.
func stopTableHelp() string {
	var b strings.Builder
	for _, s := range gpuwarden.StopSemanticsAll() {
		shutdown, ends, still := s.Words()
		fmt.Fprint(&b, wrapHanging(fmt.Sprintf("%s: OS shutdown → %s; ends the bill: %s; bills on: %s",
			s.Provider, shutdown, strings.ReplaceAll(ends, "`", ""), still), "  • ", "    ", pageWidth))
	}
	fmt.Fprint(&b, wrapHanging("any other provider: unknown, so the agent alerts rather than claim a stop (name a --stop-command)", "  • ", "    ", pageWidth))
	return b.String()
}

const simulatedNoBill = "simulated GPUs on no provider: nothing bills"

// simulatedStopper is the stop of simulated GPUs that no flag or label
// puts on a provider: nothing bills, so there is nothing to prove, and a
// demo is not told that its stop is unproven.
type simulatedStopper struct{ gpuwarden.BillStopper }

func (s simulatedStopper) Prove(context.Context) (gpuwarden.StopProof, error) {
	return gpuwarden.StopProof{Method: s.Method(), Proven: true, At: time.Now(), Checked: []string{simulatedNoBill}}, nil
}
