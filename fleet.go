package gpuwarden

import (
	"context"
	"time"
)

// Token roles: what a token may do inside its project.
const (
	// RoleAgent registers nodes and writes the nodes it registered.
	RoleAgent = "agent"
	// RoleViewer reads everything in its project; in AllProjects, the
	// whole fleet (what Prometheus scrapes /metrics with).
	RoleViewer = "viewer"
	// RoleAdmin reads and writes its project and manages its tokens; in
	// AllProjects it does so for every project.
	RoleAdmin = "admin"
)

// AllProjects is the project of a fleet-wide admin token.
const AllProjects = "*"

// Node states an agent reports in its heartbeat. A node whose heartbeats
// stopped without "stopped" is lost: it may still be billing. "stopped"
// means the provider confirmed a state that does not bill compute; a box
// whose stop was only accepted says NodeStopRequested, and one powered off
// where that keeps billing says NodePoweredOffStillBilling (stop.go).
const (
	NodeRunning  = "running"
	NodeStopping = "stopping"
	NodeStopped  = "stopped"
	NodeLost     = "lost"
	// NodeGone is a node a person marked gone (`gpuwarden node gone`):
	// it no longer accrues spend and is no orphan.
	NodeGone = "gone"
	// NodeAgentStopped is the goodbye of an agent that was stopped while
	// the box was not shutting down: the box may well run on and bill.
	NodeAgentStopped = "agent-stopped"
)

// Billing reports whether a node in state still bills its compute rate:
// running, stopping, lost (nobody knows), a stop only requested, and a
// power-off where that bills all do.
func Billing(state string) bool {
	switch state {
	case NodeStopped, NodeGone:
		return false
	}
	return true
}

// StopReport is the idle stop of a box as its agent knows it: how it
// would stop and whether that was proven, and after the stop, what the
// provider answered and what the box still costs. The heartbeat carries
// it, so that the fleet server shows "azure deallocate, proven 2 min ago"
// or that a stop would not end the bill, and keeps a stopped box's spend
// growing at the rate that still bills.
type StopReport struct {
	// Method is the stop in force (StopAzureDeallocate …; StopCommand for
	// --stop-command).
	Method string `json:"method"`
	// StopsBilling says whether Method ends compute billing on this
	// provider (StopsComputeBilling); Why says why or why not.
	StopsBilling bool   `json:"stops_billing"`
	Why          string `json:"why,omitempty"`
	// Proof is the last check of the stop path, nil before the first.
	Proof *StopProof `json:"proof,omitempty"`
	// Outcome is the stop, once it ran.
	Outcome *StopOutcome `json:"outcome,omitempty"`
	// StillBillsHourly is what the box costs an hour once stopped: its
	// whole rate where the stop leaves compute billing, else what the
	// provider bills on (StillBills), priced where known.
	StillBillsHourly Micros   `json:"still_bills_hourly"`
	Currency         Currency `json:"currency,omitempty"`
	StillBills       []string `json:"still_bills,omitempty"`
	// Fix is what would make the stop end the bill, when it does not.
	Fix string `json:"fix,omitempty"`
}

// Project is a team's share of the fleet, with its monthly budget.
type Project struct {
	Name string `json:"name"`
	// Budget is the monthly limit in Currency; zero means none set.
	Budget   Cents     `json:"budget"`
	Currency Currency  `json:"currency"`
	Created  time.Time `json:"created"`
}

// Token is an API credential's record. The secret is shown once at creation
// and only its SHA-256 is stored: the secret has 256 random bits, so a slow
// password hash would add nothing but latency to every request.
type Token struct {
	// ID is the public part of the token, safe to list and log.
	ID      string    `json:"id"`
	Project string    `json:"project"`
	Role    string    `json:"role"`
	Name    string    `json:"name,omitempty"`
	Created time.Time `json:"created"`
	Revoked time.Time `json:"revoked,omitzero"`
	Hash    []byte    `json:"-"`
}

// Session is a browser's sign-in: the dashboard's cookie holds a random
// session ID that stands for a token, so that the token itself never sits
// in a browser and a signed-in browser can be signed out server-side. The
// ledger keeps only the ID's SHA-256 (the ID has at least 128 random bits,
// so a slow hash would add nothing), so that a copy of the ledger signs no
// one in; keeping it in the ledger lets replicas share sessions.
type Session struct {
	// IDHash is the SHA-256 of the session ID; it is the key.
	IDHash  []byte    `json:"-"`
	TokenID string    `json:"token_id"`
	Created time.Time `json:"created"`
	// Expires is absolute: using a session does not extend it.
	Expires time.Time `json:"expires"`
}

// NodeLabels are what a box says about itself when it registers: who owns
// it, where it runs and what it costs.
type NodeLabels struct {
	Owner        string `json:"owner,omitempty"`
	Provider     string `json:"provider,omitempty"`
	Region       string `json:"region,omitempty"`
	InstanceType string `json:"instance_type,omitempty"`
	// HourlyPrice is what the box costs per hour in Currency.
	HourlyPrice Micros   `json:"hourly_price"`
	Currency    Currency `json:"currency,omitempty"`
	Spot        bool     `json:"spot,omitempty"`
	// Simulated marks a box whose GPUs are gpusim's (`up --simulate`): the
	// dashboards badge it, and its figures are not a real box's.
	Simulated bool `json:"simulated,omitempty"`
	// TTLSeconds is how long the box is meant to live after it first
	// registered; zero means no limit.
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
	// LaunchedAt is when the launcher asked for the box; provisioning time
	// runs from it to the first registration.
	LaunchedAt time.Time         `json:"launched_at,omitzero"`
	Extra      map[string]string `json:"extra,omitempty"`
}

// Node is one box as the fleet ledger knows it.
type Node struct {
	// ID is the agent's node ID (burn-in's: host plus GPU UUIDs).
	ID           string     `json:"id"`
	Project      string     `json:"project"`
	Hostname     string     `json:"hostname"`
	Labels       NodeLabels `json:"labels"`
	GPUs         []GPU      `json:"gpus"`
	AgentVersion string     `json:"agent_version,omitempty"`
	// TokenID is the agent token that registered the node; only it writes.
	TokenID    string    `json:"token_id,omitempty"`
	Registered time.Time `json:"registered"`
	// LastSeen is the server's clock at the last heartbeat, so that a
	// skewed agent clock cannot hide a lost box.
	LastSeen time.Time `json:"last_seen,omitzero"`
	// Live is the last heartbeat as sent.
	Live Heartbeat `json:"live"`
	// InstanceID and BootID say which machine, and which boot of it, sent
	// the registration, because a node ID alone cannot: two agents given
	// the same --node-id, or two boxes cloned from one image, would
	// otherwise become one node whose labels the last one wrote. InstanceID
	// is the cloud's instance ID when the agent knows it, else a hash of the
	// host name, /etc/machine-id and the agent's data dir; BootID is the
	// kernel's boot ID, which a reboot changes. Both are optional: an agent
	// that sends no InstanceID (an older one) is not compared.
	InstanceID string `json:"instance_id,omitempty"`
	BootID     string `json:"boot_id,omitempty"`
	// LiveSince is set by the server on a registration, never stored or
	// sent: a stored node heard from (heartbeat, else registration) at or
	// after it, that did not say it stopped and whose token is not revoked,
	// is live, and RegisterNode refuses its ID to another instance. The
	// server sets it to now minus its LostAfter; the zero time makes every
	// such node live.
	LiveSince time.Time `json:"-"`
}

// Heartbeat is an agent's "still here", with what it sees now. Heartbeats
// are not queued: the next one supersedes a lost one.
type Heartbeat struct {
	Node      string    `json:"node"`
	Time      time.Time `json:"time"`
	State     string    `json:"state"`
	GPUUtil   float64   `json:"gpu_util"`
	IdleSince time.Time `json:"idle_since,omitzero"`
	Diagnosis string    `json:"diagnosis,omitempty"`
	// Stop is the box's idle stop: proven or not, and once it ran, the
	// provider's answer (the last heartbeat of a box that stopped itself).
	Stop *StopReport `json:"stop,omitempty"`
}

// NodeMinute is one minute of a node's samples, averaged: what spend,
// utilisation and the heatmap rest on. A minute with samples is a minute
// the box was up and billing.
type NodeMinute struct {
	Minute     time.Time `json:"minute"`
	Samples    int       `json:"samples"`
	CPUPercent float64   `json:"cpu_percent"`
	// GPUUtil and GPUMemPercent have one entry per GPU index.
	GPUUtil       []float64 `json:"gpu_util"`
	GPUMemPercent []float64 `json:"gpu_mem_percent"`
}

// FleetBatch is what an agent ships from its local ledger: minutes and
// events, each identified so that a replay after a lost answer stores
// nothing twice (minutes by Minute, events by Seq).
type FleetBatch struct {
	Minutes []NodeMinute `json:"minutes,omitempty"`
	Events  []Event      `json:"events,omitempty"`
	// Savings are the node's savings events (issue #29), stored by ID: a
	// replayed or re-priced one replaces the stored one.
	Savings []Saving `json:"savings,omitempty"`
}

// BatchResult counts what a batch added; duplicates were already stored.
type BatchResult struct {
	Minutes    int `json:"minutes"`
	Events     int `json:"events"`
	Duplicates int `json:"duplicates"`
	// Savings counts the savings events stored or replaced.
	Savings int `json:"savings,omitempty"`
}

// NodeEvent is an event with the node that sent it.
type NodeEvent struct {
	Node string `json:"node"`
	Event
}

// EventQuery selects fleet events; zero fields select everything.
type EventQuery struct {
	Project string
	Node    string
	Kinds   []string
	Since   time.Time
	// Limit caps the answer, newest first; zero means no cap.
	Limit int
}

// NodeHour is one node's usage in one clock hour: the minutes it was up,
// what they cost at the node's price then, and each GPU's mean utilisation.
type NodeHour struct {
	Node     string    `json:"node"`
	Hour     time.Time `json:"hour"`
	Minutes  int       `json:"minutes"`
	Cost     Micros    `json:"cost"`
	Currency Currency  `json:"currency"`
	GPUUtil  []float64 `json:"gpu_util"`
}

// Fleet is the server's ledger: projects, tokens, nodes and what their
// agents shipped. Every write is committed before the call returns, so an
// acknowledged write survives the server being killed.
type Fleet interface {
	// PutProject creates a project or updates its budget.
	PutProject(ctx context.Context, p Project) error
	Projects(ctx context.Context) ([]Project, error)

	// CreateToken stores a token record; the ID must be new (EConflict).
	CreateToken(ctx context.Context, t Token) error
	// CreateFirstToken stores t only if the ledger holds no token at all,
	// revoked or not, and reports whether it did; the check and the insert
	// are one atomic step, so that servers starting together on one
	// database create exactly one bootstrap admin token between them.
	CreateFirstToken(ctx context.Context, t Token) (bool, error)
	// Token returns a token by ID (ENotFound), revoked or not.
	Token(ctx context.Context, id string) (Token, error)
	// Tokens lists a project's tokens, or every token for AllProjects.
	Tokens(ctx context.Context, project string) ([]Token, error)
	// RevokeToken marks a token revoked at a time (ENotFound); revoking
	// twice keeps the first time.
	RevokeToken(ctx context.Context, id string, at time.Time) error

	// CreateSession stores a new session; its IDHash must be new
	// (EConflict), and it needs a token ID and both times (EInvalid).
	CreateSession(ctx context.Context, s Session) error
	// Session returns a session by the SHA-256 of its ID (ENotFound),
	// expired or not, and whether or not its token is still valid: the
	// caller checks both, with its own clock and token cache.
	Session(ctx context.Context, idHash []byte) (Session, error)
	// DeleteSession removes a session, at sign-out; an unknown one is no
	// error, so that signing out twice does no harm. Retain also deletes
	// the sessions that expired and those of revoked tokens.
	DeleteSession(ctx context.Context, idHash []byte) error

	// RegisterNode inserts a node or updates its hostname, labels, GPUs,
	// version and identity, keeping Registered; it returns the stored node.
	// It refuses (EConflict) a node of another project; a node registered
	// by another token unless that token is revoked, in which case the node
	// passes to the new one; and a node that is live (see Node.LiveSince)
	// under another InstanceID, whose hint names `gpuwarden up --node-id`.
	// The same instance with a new BootID is a reboot and re-registers.
	RegisterNode(ctx context.Context, n Node) (Node, error)
	// RecordHeartbeats stores heartbeats of registered nodes in one
	// transaction, setting LastSeen to at; unknown nodes are skipped.
	RecordHeartbeats(ctx context.Context, at time.Time, hbs []Heartbeat) error
	// Ingest stores a batch for one node in one transaction, pricing each
	// new minute at the node's current price; ENotFound for an unknown node.
	Ingest(ctx context.Context, node string, b FleetBatch) (BatchResult, error)
	// Node returns one node (ENotFound).
	Node(ctx context.Context, id string) (Node, error)
	// Nodes lists a project's nodes, or every node for AllProjects.
	Nodes(ctx context.Context, project string) ([]Node, error)
	// Hours returns the node hours of a project (or AllProjects) in
	// [from, to), ordered by node then hour.
	Hours(ctx context.Context, project string, from, to time.Time) ([]NodeHour, error)
	// Events returns fleet events, newest first.
	Events(ctx context.Context, q EventQuery) ([]NodeEvent, error)
	// Retain drops what is older than the retention windows: minutes after
	// 35 days (longer than an agent keeps them, so a replay cannot count
	// twice), hours and events after 400 days.
	Retain(ctx context.Context, now time.Time) error
	// Ready writes to the ledger and commits, so that readiness fails while
	// writes fail (a full disk, a read-only or lost database: EUnavailable)
	// even when reads still answer.
	Ready(ctx context.Context) error
	Close() error
}

// Retention windows of the fleet ledger.
const (
	FleetMinuteRetention = 35 * 24 * time.Hour
	FleetHourRetention   = 400 * 24 * time.Hour
)

// Uplink is how an agent reaches the fleet server; http.Client is one.
type Uplink interface {
	// Register announces the node and returns it as the server stored it.
	Register(ctx context.Context, n Node) (Node, error)
	// Heartbeat says the node is alive; the server stores the newest only.
	Heartbeat(ctx context.Context, hb Heartbeat) error
	// Ship sends a batch; it returns only after the server committed it.
	Ship(ctx context.Context, node string, b FleetBatch) (BatchResult, error)
}
