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
// stopped without "stopped" is lost: it may still be billing.
const (
	NodeRunning  = "running"
	NodeStopping = "stopping"
	NodeStopped  = "stopped"
	NodeLost     = "lost"
)

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
}

// BatchResult counts what a batch added; duplicates were already stored.
type BatchResult struct {
	Minutes    int `json:"minutes"`
	Events     int `json:"events"`
	Duplicates int `json:"duplicates"`
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
	// Token returns a token by ID (ENotFound), revoked or not.
	Token(ctx context.Context, id string) (Token, error)
	// Tokens lists a project's tokens, or every token for AllProjects.
	Tokens(ctx context.Context, project string) ([]Token, error)
	// RevokeToken marks a token revoked at a time (ENotFound); revoking
	// twice keeps the first time.
	RevokeToken(ctx context.Context, id string, at time.Time) error

	// RegisterNode inserts a node or updates its hostname, labels, GPUs and
	// version, keeping Registered; it returns the stored node. It refuses
	// (EConflict) a node of another project, and a node registered by
	// another token unless that token is revoked, in which case the node
	// passes to the new one.
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
