package stopper

import (
	"context"
	"strings"

	"github.com/gpuwarden/gpuwarden"
)

// Mode is how the user asked the box to be stopped (`--stop`).
type Mode string

// The stop modes.
const (
	// ModeAuto picks what stops the bill: an OS shutdown where that does,
	// the provider's API stop where gpuwarden has a client, and refuses
	// where neither would (Lambda needs ModeTerminate, said explicitly).
	ModeAuto Mode = "auto"
	// ModeOS is an OS shutdown, whatever it does to the bill.
	ModeOS Mode = "os"
	// ModeAPI is the provider's API stop (aws-stop, gcp-stop,
	// azure-deallocate, runpod-stop, vast-stop).
	ModeAPI Mode = "api"
	// ModeTerminate terminates the box (Lambda, which has no stop).
	ModeTerminate Mode = "terminate"
	// ModeCommand runs the user's --stop-command.
	ModeCommand Mode = "command"
)

// ParseMode reads a --stop value; empty is ModeAuto.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(strings.TrimSpace(s))); m {
	case "":
		return ModeAuto, nil
	case ModeAuto, ModeOS, ModeAPI, ModeTerminate, ModeCommand:
		return m, nil
	}
	return "", gpuwarden.Errorf(gpuwarden.EInvalid, "unknown stop mode %q", s).
		WithHint("use --stop auto, os, api, terminate or command")
}

// Endpoints are the base URLs the API stoppers call, one per flag; an
// empty field means the provider's documented address.
type Endpoints struct {
	AzureMetadata   string // --azure-metadata
	AzureManagement string // --azure-management
	AWSMetadata     string // --aws-metadata
	AWSEndpoint     string // --aws-endpoint (EC2 API)
	GCPMetadata     string // --gcp-metadata
	GCPCompute      string // --gcp-compute
	RunPodAPI       string // --runpod-api
	VastAPI         string // --vast-api
	LambdaAPI       string // --lambda-api
}

// DefaultEndpoints returns the documented addresses (the EC2 endpoint is
// per region, so it stays empty).
func DefaultEndpoints() Endpoints {
	return Endpoints{
		AzureMetadata: DefaultAzureMetadata, AzureManagement: DefaultAzureManagement,
		AWSMetadata: DefaultAWSMetadata, GCPMetadata: DefaultGCPMetadata, GCPCompute: DefaultGCPCompute,
		RunPodAPI: DefaultRunPodAPI, VastAPI: DefaultVastAPI, LambdaAPI: DefaultLambdaAPI,
	}
}

// Config is what New needs to build a stopper.
type Config struct {
	// Provider is the catalog's provider name (aws, azure, runpod …); empty
	// for a box of no known provider.
	Provider string
	// Mode is the --stop mode (ModeAuto when empty).
	Mode Mode
	// Command is the --stop-command for ModeCommand, and the shutdown
	// command for an OS shutdown (DefaultShutdown when empty).
	Command []string
	// Exec runs commands on the box (OS shutdown, --stop-command).
	Exec Exec
	// Endpoints override the providers' addresses.
	Endpoints Endpoints
	// Options are shared by the API stoppers.
	Options Options
	// MayTerminate guards a terminate (ModeTerminate); required there.
	MayTerminate func(context.Context) error
}

// New returns the stopper for the provider and mode, following gpuwarden's
// stop semantics table. Where the mode cannot stop the bill on that
// provider it returns an EFinding error that says so ("idle stop would NOT
// stop billing here: …") with the fix as hint; a mode that does not fit
// the provider (api on Hetzner, terminate on Azure) is EInvalid.
func New(cfg Config) (gpuwarden.BillStopper, error) {
	mode := cfg.Mode
	if mode == "" {
		mode = ModeAuto
	}
	provider := strings.ToLower(strings.TrimSpace(cfg.Provider))
	sem, known := gpuwarden.StopSemanticsOf(provider)
	switch mode {
	case ModeCommand:
		if len(cfg.Command) == 0 {
			return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "--stop command needs a --stop-command").
				WithHint("e.g. --stop command --stop-command 'az vm deallocate --ids <vm>'")
		}
		return NewCommand(provider, cfg.Command, cfg.Exec), nil
	case ModeOS:
		return NewOSShutdown(provider, cfg.Command, cfg.Exec), nil
	case ModeAPI:
		if s := apiStopper(sem.Method, cfg); s != nil && sem.Method != gpuwarden.StopLambdaTerminate {
			return s, nil
		}
		return nil, noClient(provider, sem, known, "api")
	case ModeTerminate:
		if sem.Method != gpuwarden.StopLambdaTerminate {
			return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "--stop terminate is for providers without a stop (lambda), not %s", orNone(provider)).
				WithHint("use --stop auto or --stop api")
		}
		if cfg.MayTerminate == nil {
			return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "lambda terminate needs a guard").
				WithHint("build the stopper with MayTerminate (the agent's checkpoint check)")
		}
		return apiStopper(sem.Method, cfg), nil
	case ModeAuto:
	default:
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "unknown stop mode %q", mode).
			WithHint("use --stop auto, os, api, terminate or command")
	}
	if provider == "" || sem.OSShutdown.StopsBilling() {
		return NewOSShutdown(provider, cfg.Command, cfg.Exec), nil
	}
	if sem.Method != gpuwarden.StopLambdaTerminate {
		if s := apiStopper(sem.Method, cfg); s != nil {
			return s, nil
		}
	}
	_, why := gpuwarden.StopsComputeBilling(provider, gpuwarden.StopOSShutdown)
	reason := why
	if sem.Method == "" && known {
		reason += "; gpuwarden has no API client for " + provider + "'s " + string(sem.Action)
	}
	return nil, gpuwarden.Errorf(gpuwarden.EFinding, "idle stop would NOT stop billing here: %s", reason).
		WithHint("%s", fixFor(provider))
}

// apiStopper builds the API stopper of a method, nil when there is none.
func apiStopper(method string, cfg Config) gpuwarden.BillStopper {
	ep, o := cfg.Endpoints, cfg.Options
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	switch method {
	case gpuwarden.StopAWS:
		s := NewAWS(o)
		set(&s.Metadata, ep.AWSMetadata)
		set(&s.Endpoint, ep.AWSEndpoint)
		return s
	case gpuwarden.StopGCP:
		s := NewGCP(o)
		set(&s.Metadata, ep.GCPMetadata)
		set(&s.Compute, ep.GCPCompute)
		return s
	case gpuwarden.StopAzureDeallocate:
		s := NewAzure(o)
		set(&s.Metadata, ep.AzureMetadata)
		set(&s.Management, ep.AzureManagement)
		return s
	case gpuwarden.StopRunPod:
		s := NewRunPod(o)
		set(&s.API, ep.RunPodAPI)
		return s
	case gpuwarden.StopVast:
		s := NewVast(o)
		set(&s.API, ep.VastAPI)
		return s
	case gpuwarden.StopLambdaTerminate:
		s := NewLambda(o, cfg.MayTerminate)
		set(&s.API, ep.LambdaAPI)
		return s
	}
	return nil
}

// noClient is the error of a mode with no stopper for the provider.
func noClient(provider string, sem gpuwarden.StopSemantics, known bool, mode string) error {
	switch {
	case sem.Method == gpuwarden.StopLambdaTerminate:
		return gpuwarden.Errorf(gpuwarden.EInvalid, "lambda has no stop to call: its bill ends only when the instance is terminated").
			WithHint("%s", fixFor(provider))
	case known:
		return gpuwarden.Errorf(gpuwarden.EInvalid, "gpuwarden has no API client for %s (its bill stops with %s)", provider, sem.Action).
			WithHint("%s", fixFor(provider))
	}
	return gpuwarden.Errorf(gpuwarden.EInvalid, "--stop %s: no API stop is known for %s", mode, orNone(provider)).
		WithHint("name the provider (aws, gcp, azure, runpod, vast, lambda), or use --stop command")
}

// orNone names an empty provider.
func orNone(p string) string {
	if p == "" {
		return "an unknown provider"
	}
	return p
}
