package gpuwarden

import (
	"context"
	"time"
)

// Checkpoint is one committed checkpoint: a directory whose manifest lists
// every file with its size and sha256. Only a committed checkpoint whose
// files still match its manifest may be resumed from.
type Checkpoint struct {
	// Name is the directory's name under the committed area ("000003-step-000120").
	Name string `json:"name"`
	// Path is where it is on this box.
	Path string `json:"path"`
	// Step is the job's progress number taken from the name, -1 when it has none.
	Step      int64          `json:"step"`
	Committed time.Time      `json:"committed"`
	Files     []ManifestFile `json:"files"`
	Bytes     int64          `json:"bytes"`
}

// ManifestFile is one file of a checkpoint, by path relative to its directory.
type ManifestFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// CheckpointStore keeps committed checkpoints durable off the box: a local
// directory (another disk, a mount) or an S3-compatible bucket.
type CheckpointStore interface {
	// Push uploads a committed checkpoint, skipping files the store already
	// holds with the same sha256, and writes its manifest last.
	Push(ctx context.Context, cp Checkpoint) error
	// List returns the checkpoints whose manifest the store holds, oldest first.
	List(ctx context.Context) ([]Checkpoint, error)
	// Pull downloads a checkpoint into dir/NAME, verifying every file's
	// sha256, and returns it as found there.
	Pull(ctx context.Context, name, dir string) (Checkpoint, error)
	// Delete removes a checkpoint, for keeping the last N.
	Delete(ctx context.Context, name string) error
	// Where names the store for people and residency checks ("s3://bucket/prefix").
	Where() string
}

// Exit classes of a supervised job, each with its own retry budget.
const (
	ExitOK        = "ok"
	ExitPreempted = "preempted"
	ExitHostOOM   = "host-oom"
	ExitCUDAOOM   = "cuda-oom"
	ExitGPUFault  = "gpu-fault" // NCCL, Xid, ECC
	ExitUser      = "user-error"
	ExitSignal    = "killed" // ended by a signal nobody sent on purpose
)

// Attempt is one run of a supervised job.
type Attempt struct {
	Number   int       `json:"number"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	ExitCode int       `json:"exit_code"`
	Signal   string    `json:"signal,omitempty"`
	Class    string    `json:"class"`
	// ResumedFrom is the checkpoint the attempt started from, "" for a fresh start.
	ResumedFrom string `json:"resumed_from,omitempty"`
	// LostSeconds is the work since the last committed checkpoint when the
	// attempt was interrupted: what the next attempt must redo.
	LostSeconds float64 `json:"lost_seconds"`
	// Tail is the last lines of the job's output.
	Tail    []string `json:"tail,omitempty"`
	UserCPU float64  `json:"user_cpu_s"`
	SysCPU  float64  `json:"sys_cpu_s"`
	MaxRSS  int64    `json:"max_rss_bytes"`
}

// RunReport is what `gpuwarden run` tells at the end: every attempt, the
// restarts by class, the work lost and what redoing it cost.
type RunReport struct {
	Command     []string       `json:"command"`
	Start       time.Time      `json:"start"`
	End         time.Time      `json:"end"`
	Attempts    []Attempt      `json:"attempts"`
	Restarts    map[string]int `json:"restarts"`
	LostSeconds float64        `json:"lost_seconds"`
	// ReworkCost is the lost work priced at the plan's hourly rate.
	ReworkCost  Cents        `json:"rework_cost"`
	Currency    Currency     `json:"currency,omitempty"`
	Checkpoints []Checkpoint `json:"checkpoints"`
	ExitCode    int          `json:"exit_code"`
	Class       string       `json:"class"`
}
