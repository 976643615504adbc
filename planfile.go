package gpuwarden

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// Plan is the plan file, gpuwarden.yaml: the portable description of a rental
// that a team keeps beside its code. config.Load fills the defaults and
// validates it; every other package reads it as given.
type Plan struct {
	Name     string   `yaml:"name,omitempty" json:"name,omitempty"`
	Workload Workload `yaml:"workload" json:"workload"`
	// HoursPerMonth is the length of a billing month in hours (default 730).
	HoursPerMonth float64 `yaml:"hours_per_month,omitempty" json:"hours_per_month"`
	// WorkHours is the hours of real work per month: the GPU busy on the
	// job, on whatever card. With an amount of work (Workload.HasAmount)
	// plan works out each box's hours instead; for an inference load it is
	// the hours the load is served (default: the whole month).
	WorkHours float64 `yaml:"work_hours,omitempty" json:"work_hours"`
	// Deadline rules out boxes that cannot finish the work in time: a
	// duration such as 72h, 10d or 2w (ParseDeadline).
	Deadline      string        `yaml:"deadline,omitempty" json:"deadline,omitempty"`
	OnHours       OnHours       `yaml:"on_hours,omitempty" json:"on_hours"`
	Data          Data          `yaml:"data,omitempty" json:"data"`
	Interruptions Interruptions `yaml:"interruptions,omitempty" json:"interruptions"`
	Budget        Budget        `yaml:"budget" json:"budget"`
	Residency     Residency     `yaml:"residency,omitempty" json:"residency"`
	Providers     Providers     `yaml:"providers,omitempty" json:"providers"`
	// Catalogs are price files read with the plan, relative to the plan
	// file, so a plan with its own prices is complete on its own.
	Catalogs []string `yaml:"catalogs,omitempty" json:"catalogs,omitempty"`
	// EmbeddedCatalog false leaves out the embedded price snapshot; unset means true.
	EmbeddedCatalog *bool `yaml:"embedded_catalog,omitempty" json:"embedded_catalog,omitempty"`
	// Box is the rented box the agent bills for: a rate, or the catalog offer
	// that has it.
	Box *Box `yaml:"box,omitempty" json:"box,omitempty"`
	// CurrencyRates converts catalog prices into the budget currency: each
	// entry says what one unit of that currency is worth in the budget's.
	CurrencyRates map[Currency]Micros `yaml:"currency_rates,omitempty" json:"currency_rates,omitempty"`
	// Labels describe the box to the fleet: owner and ttl above all, which
	// the orphan review asks for; `up` sends them when it registers.
	Labels map[string]string `yaml:"labels,omitempty" json:"labels,omitempty"`
	// Webhooks receive the agent's alerts (Slack-compatible URLs).
	Webhooks []string `yaml:"webhooks,omitempty" json:"webhooks,omitempty"`
	// Targets are the launch plan: plan A first, then plan B and on.
	Targets []Target `yaml:"targets,omitempty" json:"targets,omitempty"`
	// LaunchRules classify launch failures before the built-in rules do.
	LaunchRules []LaunchRule `yaml:"launch_rules,omitempty" json:"launch_rules,omitempty"`
}

// OnHours says when the box is billed beyond the working hours.
type OnHours struct {
	// AutoShutdownIdleMinutes stops the box after this many idle minutes; 0
	// means nobody turns it off and the box bills every hour of the month.
	AutoShutdownIdleMinutes float64 `yaml:"auto_shutdown_idle_minutes,omitempty" json:"auto_shutdown_idle_minutes"`
	// SessionsPerMonth is how often work stops and the idle timer runs out;
	// each session leaves one idle window on the bill (default: one per 8
	// working hours, a working day).
	SessionsPerMonth float64 `yaml:"sessions_per_month,omitempty" json:"sessions_per_month"`
	// StopWhenJobsEnd stops the box as soon as the last job `gpuwarden run`
	// supervises has ended and nothing else keeps it busy, instead of
	// waiting out the idle window (`up --stop-when-jobs-end`): work stated
	// as an amount then bills no idle window at its end.
	StopWhenJobsEnd bool `yaml:"stop_when_jobs_end,omitempty" json:"stop_when_jobs_end,omitempty"`
	// Stop is how the agent stops the box (idle, off-hours, budget): one
	// of StopModes; auto (the default) is what ends the provider's bill.
	Stop string `yaml:"stop,omitempty" json:"stop,omitempty"`
	// StopCommand is the user's own stop, for stop: command (`up
	// --stop-command`); a command that powers the OS off is an OS shutdown.
	StopCommand string `yaml:"stop_command,omitempty" json:"stop_command,omitempty"`
}

// Data is what the work moves and keeps each month.
type Data struct {
	EgressGB EgressGB `yaml:"egress_gb,omitempty" json:"egress_gb"`
	// StorageGB is kept for the whole month, whether the box runs or not.
	StorageGB float64 `yaml:"storage_gb,omitempty" json:"storage_gb"`
	// StorageKind picks the provider's storage product: block, object or volume.
	StorageKind               string  `yaml:"storage_kind,omitempty" json:"storage_kind"`
	CheckpointGB              float64 `yaml:"checkpoint_gb,omitempty" json:"checkpoint_gb,omitempty"`
	CheckpointIntervalMinutes float64 `yaml:"checkpoint_interval_minutes,omitempty" json:"checkpoint_interval_minutes,omitempty"`
	// CheckpointStore is where `run` pushes checkpoints: s3://bucket/prefix,
	// gs://bucket/prefix, az://account/container/prefix (?region= names the
	// bucket's or account's region) or a directory.
	CheckpointStore string `yaml:"checkpoint_store,omitempty" json:"checkpoint_store,omitempty"`
}

// EgressGB is a month's outbound data by scope, in GB as the provider bills.
type EgressGB struct {
	Internet    float64 `yaml:"internet,omitempty" json:"internet"`
	InterRegion float64 `yaml:"inter_region,omitempty" json:"inter_region"`
	IntraRegion float64 `yaml:"intra_region,omitempty" json:"intra_region"`
}

// For returns the volume for one scope.
func (e EgressGB) For(s EgressScope) float64 {
	switch s {
	case EgressInternet:
		return e.Internet
	case EgressInterRegion:
		return e.InterRegion
	case EgressIntraRegion:
		return e.IntraRegion
	}
	return 0
}

// Tolerance is how a job survives losing its box.
type Tolerance string

// The interruption tolerances.
const (
	// TolerateNone keeps the job off spot: an interruption loses it.
	TolerateNone Tolerance = "none"
	// TolerateCheckpointed resumes from the last checkpoint, losing the work since.
	TolerateCheckpointed Tolerance = "checkpointed"
	// TolerateStateless loses only the restart (inference replicas, render frames).
	TolerateStateless Tolerance = "stateless"
)

// Interruptions prices spot: how often boxes vanish and what each loss costs.
type Interruptions struct {
	Tolerance Tolerance `yaml:"tolerance,omitempty" json:"tolerance"`
	// SpotInterruptionsPerDay is the expected reclaim rate of a spot box.
	SpotInterruptionsPerDay float64 `yaml:"spot_interruptions_per_day,omitempty" json:"spot_interruptions_per_day"`
	// RestartMinutes is the time from reclaim to work resumed on a new box.
	RestartMinutes float64 `yaml:"restart_minutes,omitempty" json:"restart_minutes"`
}

// Budget is the monthly limit and when to warn about it.
type Budget struct {
	MonthlyLimit  Micros   `yaml:"monthly_limit" json:"monthly_limit"`
	Currency      Currency `yaml:"currency,omitempty" json:"currency"`
	AlertsPercent []int    `yaml:"alerts_percent,omitempty" json:"alerts_percent"`
}

// Residency restricts where the work and its data may be; empty means anywhere.
type Residency struct {
	// Countries are ISO 3166 alpha-2 codes (DE, FR, US).
	Countries []string `yaml:"countries,omitempty" json:"countries,omitempty"`
	// Regions are provider regions, written provider:region or just region.
	Regions []string `yaml:"regions,omitempty" json:"regions,omitempty"`
}

// Providers steers the ranking: preferred ones win ties, excluded ones never show.
type Providers struct {
	Prefer  []string `yaml:"prefer,omitempty" json:"prefer,omitempty"`
	Exclude []string `yaml:"exclude,omitempty" json:"exclude,omitempty"`
}

// Box names what the running box costs, for the agent's budget: an hourly
// rate outright, or the catalog offer (provider, region, instance, billing)
// whose rate it is.
type Box struct {
	HourlyRate Micros `yaml:"hourly_rate,omitempty" json:"hourly_rate,omitempty"`
	Provider   string `yaml:"provider,omitempty" json:"provider,omitempty"`
	Region     string `yaml:"region,omitempty" json:"region,omitempty"`
	Instance   string `yaml:"instance,omitempty" json:"instance,omitempty"`
	// Billing is on-demand (default) or spot.
	Billing string `yaml:"billing,omitempty" json:"billing,omitempty"`
}

// ParseDeadline reads a deadline written as Go's durations (72h, 90m) or in
// whole days and weeks (10d, 2w), and returns its hours: finite and
// positive, or an EInvalid error.
func ParseDeadline(s string) (float64, error) {
	s = strings.TrimSpace(s)
	if n := len(s); n > 1 && (s[n-1] == 'd' || s[n-1] == 'w') {
		v, err := strconv.ParseFloat(s[:n-1], 64)
		if s[n-1] == 'w' {
			v *= 7
		}
		v *= 24
		// Checked after the products, which overflow to +Inf for 1e307d;
		// !(v > 0) also refuses NaN ("NaNd"), which every comparison passes.
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return 0, Errorf(EInvalid, "deadline %q: want a positive number of days or weeks such as 10d or 2w", s)
		}
		return v, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, Errorf(EInvalid, "deadline %q: want a duration such as 72h, 10d or 2w", s)
	}
	return d.Hours(), nil
}
