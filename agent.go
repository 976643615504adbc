package gpuwarden

import (
	"context"
	"time"
)

// HostSample is one reading of the host beside its GPUs: what tells an
// input-bound or I/O-bound job from an oversized card.
type HostSample struct {
	Time time.Time `json:"time"`
	// CPUPercent is all cores together, 0–100; CPUPerCore one entry per core.
	CPUPercent    float64   `json:"cpu_percent"`
	CPUPerCore    []float64 `json:"cpu_per_core,omitempty"`
	IOWaitPercent float64   `json:"iowait_percent"`
	Load1         float64   `json:"load1"`
	MemUsedBytes  uint64    `json:"mem_used_bytes"`
	MemTotalBytes uint64    `json:"mem_total_bytes"`
	// Throughputs in bytes per second since the previous sample.
	DiskReadBps  float64 `json:"disk_read_bps"`
	DiskWriteBps float64 `json:"disk_write_bps"`
	NetRxBps     float64 `json:"net_rx_bps"`
	NetTxBps     float64 `json:"net_tx_bps"`
	// Sessions are interactive logins (SSH or a terminal) open now.
	Sessions int `json:"sessions"`
	// Processes are the command names running now, for allow-list checks.
	Processes []string `json:"processes,omitempty"`
	// Counters are the cumulative figures the rates above come from, for
	// /metrics; nil when the sampler keeps none.
	Counters *HostCounters `json:"counters,omitempty"`
}

// HostCounters are the host's cumulative CPU, disk and network figures
// since boot, as node_exporter exports them: Prometheus takes their rates
// over whatever window a query asks for, where a rate the agent computed
// holds only for its own one-second tick.
type HostCounters struct {
	// CPU time over all cores, in seconds: busy (user, nice, system, irq,
	// softirq, steal), idle, and iowait.
	CPUBusySeconds   float64 `json:"cpu_busy_seconds"`
	CPUIdleSeconds   float64 `json:"cpu_idle_seconds"`
	CPUIOWaitSeconds float64 `json:"cpu_iowait_seconds"`
	// Disk bytes over whole disks; HasDisk is false where /proc has no
	// diskstats (gVisor), and the figures are then unknown, not 0.
	HasDisk          bool   `json:"has_disk"`
	DiskReadBytes    uint64 `json:"disk_read_bytes"`
	DiskWrittenBytes uint64 `json:"disk_written_bytes"`
	// Network bytes over every interface but lo; HasNet as HasDisk.
	HasNet           bool   `json:"has_net"`
	NetReceiveBytes  uint64 `json:"net_receive_bytes"`
	NetTransmitBytes uint64 `json:"net_transmit_bytes"`
}

// NodeSample is one tick of the agent: the host and every GPU.
type NodeSample struct {
	Time time.Time   `json:"time"`
	Host HostSample  `json:"host"`
	GPUs []Telemetry `json:"gpus"`
}

// Event severities.
const (
	SeverityInfo     = "info"
	SeverityWarning  = "warning"
	SeverityCritical = "critical"
)

// Event is something the agent saw or did: an alert, a warning before a
// stop, a preemption notice, the stop itself.
type Event struct {
	Time     time.Time `json:"time"`
	Kind     string    `json:"kind"`
	Severity string    `json:"severity"`
	Message  string    `json:"message"`
	// Key makes an event happen once: the ledger keeps the first event with
	// a key and refuses the rest ("budget-actual-80-2026-11"), across
	// restarts. Empty means always new.
	Key  string            `json:"key,omitempty"`
	Data map[string]string `json:"data,omitempty"`
	// Seq is the ledger's number for a recorded event, increasing in the
	// order events were recorded; zero before recording. The agent ships
	// events to the server by it, and the server drops a replayed one.
	Seq int64 `json:"seq,omitempty"`
}

// DataResolves is the Data key of an event that ends earlier alerts (an
// idle episode over, a notice canceled): the space-separated Keys it
// resolves, so that a pager closes the incident those keys opened.
const DataResolves = "resolves"

// The most one event may carry to the fleet server: the server refuses an
// event over either, and the agent cuts what it ships to fit.
const (
	MaxEventMessage = 4096     // bytes of Message
	MaxEventData    = 64 << 10 // bytes of Data, as DataSize counts them
)

// DataSize is the bytes of the event's data keys and values.
func (e Event) DataSize() int {
	n := 0
	for k, v := range e.Data {
		n += len(k) + len(v)
	}
	return n
}

// Ledger stores what an agent measured and did, so that a restart keeps its
// clocks and never repeats an alert.
type Ledger interface {
	// RecordSample stores one tick at full resolution.
	RecordSample(ctx context.Context, s NodeSample) error
	// Samples returns the ticks since a time, oldest first, at full
	// resolution where kept and as one-minute averages before that.
	Samples(ctx context.Context, since time.Time) ([]NodeSample, error)
	// Compact rolls full-resolution samples older than an hour into
	// one-minute averages and drops averages older than 30 days.
	Compact(ctx context.Context, now time.Time) error
	// RecordEvent stores an event unless one with the same non-empty Key
	// exists; it reports whether the event was new.
	RecordEvent(ctx context.Context, e Event) (bool, error)
	// Events returns the newest events first, at most limit.
	Events(ctx context.Context, limit int) ([]Event, error)
	// EventsAfter returns the events recorded after sequence number seq,
	// oldest first, at most limit: what the agent has yet to ship.
	EventsAfter(ctx context.Context, seq int64, limit int) ([]Event, error)
	// State and SetState keep small named values: the idle clock, the month's spend.
	State(ctx context.Context, key string) (string, bool, error)
	SetState(ctx context.Context, key, value string) error
	Close() error
}

// Notifier sends an event somewhere people see it.
type Notifier interface {
	Notify(ctx context.Context, e Event) error
}

// Notice is a cloud's warning that the box will go away or be disturbed.
type Notice struct {
	Provider string `json:"provider"`
	// Kind is one of the NoticeEffects kinds: preemption, rebalance,
	// maintenance, reboot, redeploy or migration.
	Kind string `json:"kind"`
	// At is when the provider says it happens (AWS's spot time, a scheduled
	// event's NotBefore); zero when it does not say.
	At     time.Time `json:"at,omitempty"`
	Detail string    `json:"detail,omitempty"`
	// ID tells two notices apart and stays the same for one event, even
	// when the provider re-sends it with a moved time.
	ID string `json:"id"`
	// Canceled says that the event this ID named was canceled, completed or
	// withdrawn: a pending stop for it is called off.
	Canceled bool `json:"canceled,omitempty"`
}

// SupervisedJob is a job `gpuwarden run` supervises, as it reports itself
// to the agent: its state and, with a store, what of its checkpoints is durable.
type SupervisedJob struct {
	ID    string    `json:"id"`
	State string    `json:"state"`
	Seen  time.Time `json:"seen"`
	// Sync is the last durability report, nil for a run without a store.
	Sync *SyncReport `json:"sync,omitempty"`
}

// The notice kinds.
const (
	// NoticePreemption: the box goes away for good (AWS spot
	// instance-action, GCP preempted, Azure Preempt or Terminate).
	NoticePreemption = "preemption"
	// NoticeRebalance: AWS advises that the spot box is at elevated risk;
	// nothing happens to it yet.
	NoticeRebalance = "rebalance"
	// NoticeMaintenance: the box stops or loses its host at At (AWS
	// instance-stop, instance-retirement, system-maintenance; GCP
	// TERMINATE_ON_HOST_MAINTENANCE) and may come back.
	NoticeMaintenance = "maintenance"
	// NoticeReboot: the box reboots at At.
	NoticeReboot = "reboot"
	// NoticeRedeploy: Azure moves the VM to another host at At; local disks are lost.
	NoticeRedeploy = "redeploy"
	// NoticeMigration: the box is live-migrated or frozen for seconds
	// (GCP MIGRATE_ON_HOST_MAINTENANCE, Azure Freeze); processes survive.
	NoticeMigration = "migration"
)

// NoticeEffect is what one kind of notice means for the box and for a
// supervised job: the one policy table the supervisor acts on, the agent's
// alerts word and the README prints.
type NoticeEffect struct {
	Kind string `json:"kind"`
	// Ends: the box goes away for good; the job is stopped before At and
	// never restarted on this box.
	Ends bool `json:"ends"`
	// Interrupts: the box stops, reboots or moves at At and may come back;
	// the job is stopped a lead time before At, not at once.
	Interrupts bool `json:"interrupts"`
	// Summary says it in words, for alerts and the README.
	Summary string `json:"summary"`
	// Action is what `gpuwarden run` does, in words.
	Action string `json:"action"`
}

// NoticeEffects is the policy, one row per kind, in the order the README lists them.
var NoticeEffects = []NoticeEffect{
	{Kind: NoticePreemption, Ends: true, Summary: "the box goes away for good",
		Action: "checkpoint now, stop the job before the deadline, do not restart on this box; wait for the end, then exit 75 (preempted) so a launcher can requeue"},
	{Kind: NoticeRebalance, Summary: "advice: this spot box is at elevated risk of interruption",
		Action: "checkpoint now as insurance, keep the job running, alert"},
	{Kind: NoticeMaintenance, Interrupts: true, Summary: "the box stops or loses its host",
		Action: "alert now; checkpoint and stop at the event time less --maintenance-lead (at once, with the whole --grace, when that time is here); restart here once the provider reports the event over"},
	{Kind: NoticeReboot, Interrupts: true, Summary: "the box reboots",
		Action: "alert now; checkpoint and stop at the event time less --maintenance-lead (at once, with the whole --grace, when that time is here); restart here once the provider reports the event over"},
	{Kind: NoticeRedeploy, Interrupts: true, Summary: "the VM moves to another host and loses its local disks",
		Action: "alert now; checkpoint and stop at the event time less --maintenance-lead (at once, with the whole --grace, when that time is here); restart here once the provider reports the event over"},
	{Kind: NoticeMigration, Summary: "the box is live-migrated or frozen for seconds; processes survive",
		Action: "checkpoint now as insurance, keep the job running"},
}

// EffectOf returns the policy row for a notice's kind; an unknown kind is
// treated as maintenance, the cautious reading that still does not stop a
// job at once.
func EffectOf(kind string) NoticeEffect {
	for _, e := range NoticeEffects {
		if e.Kind == kind {
			return e
		}
	}
	e := NoticeEffects[2]
	e.Kind = kind
	return e
}

// Diagnosis says why the GPUs sleep, from a window of samples.
type Diagnosis struct {
	// Verdict is healthy, oversized, input-bound, io-bound, idle or unknown.
	Verdict string `json:"verdict"`
	Detail  string `json:"detail"`
	// Window is the span of samples the verdict rests on.
	WindowSeconds float64 `json:"window_seconds"`
	GPUUtilAvg    float64 `json:"gpu_util_avg"`
	GPUMemAvg     float64 `json:"gpu_mem_avg"`
	CPUAvg        float64 `json:"cpu_avg"`
	IOWaitAvg     float64 `json:"iowait_avg"`
}

// IdleState is the idle policy's clock.
type IdleState struct {
	// Idle is true when every idle condition holds now.
	Idle bool `json:"idle"`
	// Since is when the box last became idle; zero when busy.
	Since time.Time `json:"since,omitempty"`
	// Busy names what keeps the box busy, when it is.
	Busy          []string  `json:"busy,omitempty"`
	WindowSeconds float64   `json:"window_seconds"`
	StopAt        time.Time `json:"stop_at,omitempty"`
	DryRun        bool      `json:"dry_run"`
	// Rule says what idle means on this box: IdleRuleGPUs where the GPUs
	// can be read, IdleRuleHost where they cannot (no driver, or GPUs that
	// do not answer) and the host must be quiet too; IdleRuleOff when the
	// idle stop is off, with OffWhy.
	Rule   string `json:"rule"`
	OffWhy string `json:"off_why,omitempty"`
}

// The idle rules.
const (
	IdleRuleGPUs = "gpus"
	IdleRuleHost = "host-quiet"
	IdleRuleOff  = "off"
)

// BudgetState is the month's spend against the plan's limit.
type BudgetState struct {
	Month    string   `json:"month"`
	Currency Currency `json:"currency"`
	Limit    Cents    `json:"limit"`
	Spent    Cents    `json:"spent"`
	Forecast Cents    `json:"forecast"`
	// Rate is what the box costs per hour, storage included.
	HourlyRate Micros `json:"hourly_rate"`
}

// AgentStatus is everything `gpuwarden status`, the dashboard and /metrics
// show about one box.
type AgentStatus struct {
	Node      string      `json:"node"`
	Started   time.Time   `json:"started"`
	Now       time.Time   `json:"now"`
	Simulated bool        `json:"simulated"`
	CPUOnly   bool        `json:"cpu_only"`
	Driver    *Driver     `json:"driver,omitempty"`
	GPUs      []GPU       `json:"gpus"`
	Last      NodeSample  `json:"last"`
	Idle      IdleState   `json:"idle"`
	Budget    BudgetState `json:"budget"`
	Diagnosis Diagnosis   `json:"diagnosis"`
	Events    []Event     `json:"events"`
	Notices   []Notice    `json:"notices"`
	// Jobs are the jobs `gpuwarden run` supervises on the box, with what of
	// their checkpoints is durable.
	Jobs []SupervisedJob `json:"jobs"`
	// IdleSecondsTotal counts every second the box was idle since the agent started.
	IdleSecondsTotal float64 `json:"idle_seconds_total"`
	// Health is each GPU's last error-counter reading, for /metrics; a GPU
	// whose reading failed is absent rather than clean.
	Health []Health `json:"health,omitempty"`
	// Telemetry says whether the agent can read its GPUs at all.
	Telemetry TelemetryState `json:"telemetry"`
	// XIDSources are where the agent looks for Xids, as the last health
	// read found them.
	XIDSources []XIDSource `json:"xid_sources,omitempty"`
	// Warnings are what the agent cannot see and says so: no Xid source,
	// telemetry lost.
	Warnings []string `json:"warnings,omitempty"`
	// Stop is the idle stop: its method, whether it ends the bill here and
	// was proven, and once it ran, what the provider answered.
	Stop *StopReport `json:"stop,omitempty"`
	// NoticeSource is the cloud metadata service the agent polls for
	// notices and whether its last poll answered; nil when none is polled.
	NoticeSource *NoticeSourceState `json:"notice_source,omitempty"`
}

// NoticeSourceState says whether the cloud's notices are heard: a source
// that does not answer leaves the box unprotected, so /metrics shows it as
// gpuwarden_notice_source_up.
type NoticeSourceState struct {
	Cloud string `json:"cloud"`
	// Up is true when the last poll read everything.
	Up bool `json:"up"`
	// Since is when Up last changed.
	Since time.Time `json:"since"`
}

// TelemetryState is whether the GPUs answer: after a few failed samples in
// a row telemetry is lost, and the idle and budget stops wait for it.
type TelemetryState struct {
	Lost bool `json:"lost"`
	// Since is the first failed sample of the current run of failures.
	Since time.Time `json:"since,omitempty"`
	// Failures counts the failed samples in a row; zero when the last one worked.
	Failures  int    `json:"failures"`
	LastError string `json:"last_error,omitempty"`
}
