package gpuwarden

import "time"

// Target is one way to get the box: a provider, a place and an offer, and
// the team's own command that asks for it. Targets are tried in order:
// plan A, then plan B.
type Target struct {
	Name     string `yaml:"name" json:"name"`
	Provider string `yaml:"provider" json:"provider"`
	Region   string `yaml:"region,omitempty" json:"region,omitempty"`
	Zone     string `yaml:"zone,omitempty" json:"zone,omitempty"`
	// Offer is the instance type or offer ID the command asks for.
	Offer string `yaml:"offer,omitempty" json:"offer,omitempty"`
	// Launch is a shell command template (text/template) run with sh -c;
	// {{.Name}}, {{.Provider}}, {{.Region}}, {{.Zone}}, {{.Offer}} and
	// {{.LaunchID}} are filled in.
	Launch string `yaml:"launch" json:"launch"`
	// Stop undoes a launch: it may also use {{.InstanceID}}, read from the
	// launch output with InstanceID.
	Stop string `yaml:"stop,omitempty" json:"stop,omitempty"`
	// Ready is a command that succeeds once the box is usable; launch polls
	// it, and provisioning time runs until it first succeeds.
	Ready string `yaml:"ready,omitempty" json:"ready,omitempty"`
	// InstanceID is a regular expression whose first group finds the new
	// instance's ID in the launch command's output.
	InstanceID string `yaml:"instance_id,omitempty" json:"instance_id,omitempty"`
	// TimeoutSeconds bounds the launch command (default 600).
	TimeoutSeconds float64 `yaml:"timeout_seconds,omitempty" json:"timeout_seconds,omitempty"`
}

// Launch failure classes, each with what launch does next.
const (
	// FailCapacity: the place has no such box now; try the next target.
	FailCapacity = "capacity"
	// FailQuota: the account may not have it there; skip the provider's
	// region (or the whole provider, by the rule's scope).
	FailQuota = "quota"
	// FailAuth: credentials are missing or refused; stop and say so.
	FailAuth = "auth"
	// FailConfig: the command or its parameters are wrong; stop and say so.
	FailConfig = "config"
	// FailUnknown: nothing matched; try the next target.
	FailUnknown = "unknown"
)

// Scopes of a failure: what else it rules out for the rest of the launch.
const (
	ScopeZone     = "zone"
	ScopeRegion   = "region"
	ScopeProvider = "provider"
)

// LaunchRule classifies a failed launch from its output (and exit code):
// the first rule whose provider matches (empty: any) and whose pattern is
// found in the output wins.
type LaunchRule struct {
	Provider string `yaml:"provider,omitempty" json:"provider,omitempty"`
	// Pattern is a regular expression searched in stdout and stderr.
	Pattern string `yaml:"pattern" json:"pattern"`
	// ExitCode, when set, must also match.
	ExitCode *int   `yaml:"exit_code,omitempty" json:"exit_code,omitempty"`
	Class    string `yaml:"class" json:"class"`
	// Scope is what a capacity, quota or auth failure rules out: zone,
	// region or provider (default: region for quota, zone for capacity, the
	// whole launch for auth; an auth failure scoped to a region, as AWS's
	// AuthFailure for a region not enabled, rules out that region only).
	Scope string `yaml:"scope,omitempty" json:"scope,omitempty"`
	// Why is said to the user when the rule matches.
	Why string `yaml:"why,omitempty" json:"why,omitempty"`
}

// Launch attempt outcomes.
const (
	AttemptLaunched = "launched"
	AttemptFailed   = "failed"
	AttemptSkipped  = "skipped"
)

// LaunchAttempt is one try of one target, as the ledger keeps it.
type LaunchAttempt struct {
	ID       string `json:"id"`
	LaunchID string `json:"launch_id"`
	Target   string `json:"target"`
	Provider string `json:"provider"`
	Region   string `json:"region,omitempty"`
	Zone     string `json:"zone,omitempty"`
	Offer    string `json:"offer,omitempty"`
	// Name is the unique name the box was asked for under.
	Name     string    `json:"name"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end,omitzero"`
	ExitCode int       `json:"exit_code"`
	Outcome  string    `json:"outcome"`
	Class    string    `json:"class,omitempty"`
	// Reason says in words why launch moved on (or stopped).
	Reason string `json:"reason,omitempty"`
	// Output is the command's last lines, for the record.
	Output     string `json:"output,omitempty"`
	InstanceID string `json:"instance_id,omitempty"`
	// StopCommand is the resolved command that undoes this attempt; it is
	// recorded before the launch command runs.
	StopCommand string `json:"stop_command,omitempty"`
	// MayExist is true when the attempt may have left a box behind: it
	// launched, timed out, or failed in a way no rule explains.
	MayExist bool `json:"may_exist"`
	// Ready is when the box became usable; ProvisionSeconds runs from Start.
	Ready            time.Time `json:"ready,omitzero"`
	ProvisionSeconds float64   `json:"provision_seconds,omitempty"`
	Cleaned          time.Time `json:"cleaned,omitzero"`
}
