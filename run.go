package gpuwarden

import (
	"context"
	"fmt"
	"strings"
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

// The results of a supervised run: ok, one of these, or the exit class of
// the attempt that failed.
const (
	// ResultOK: the job finished, and with a store its newest checkpoint is durable.
	ResultOK = "ok"
	// ResultPreempted: the box is going away; the job was stopped with a
	// checkpoint and not restarted here. A launcher should requeue it elsewhere.
	ResultPreempted = "preempted"
	// ResultStopped: the supervisor itself was stopped (SIGTERM, Ctrl-C);
	// the job was stopped with a checkpoint.
	ResultStopped = "stopped"
	// ResultNotDurable: the job finished, but its newest committed
	// checkpoint never reached the store.
	ResultNotDurable = "not-durable"
)

// RunReport is what `gpuwarden run` tells at the end: every attempt, the
// restarts by class, the notices and what was done about them, the work
// lost and what redoing it cost, and how much of it is durable off the box.
type RunReport struct {
	Command []string  `json:"command"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	// Result is the run's verdict (ResultOK, ResultPreempted, ResultStopped,
	// ResultNotDurable, or the failed attempt's class) and Why says it in words.
	Result      string         `json:"result"`
	Why         string         `json:"why"`
	Attempts    []Attempt      `json:"attempts"`
	Restarts    map[string]int `json:"restarts"`
	LostSeconds float64        `json:"lost_seconds"`
	// ReworkCost is the lost work priced at the plan's hourly rate.
	ReworkCost  Cents          `json:"rework_cost"`
	Currency    Currency       `json:"currency,omitempty"`
	Checkpoints []Checkpoint   `json:"checkpoints"`
	Notices     []NoticeRecord `json:"notices"`
	// Sync is the state of the off-box copies, nil when the run has no store.
	Sync *SyncReport `json:"sync,omitempty"`
	// JobExitCode and JobClass are how the job's last attempt ended: the
	// job's, not gpuwarden's (a job that exits 0 can still end a run
	// not-durable).
	JobExitCode int    `json:"job_exit_code"`
	JobClass    string `json:"job_class"`
	// ExitCode is gpuwarden run's own exit status for this report, what a
	// script sees in $? (see RunExitCode).
	ExitCode int `json:"exit_code"`
}

// The exit statuses of `gpuwarden run` beside 0 and the job's own: 74 and
// 75 are sysexits' EX_IOERR and EX_TEMPFAIL, which launchers and
// schedulers know.
const (
	RunExitNotDurable = 74
	RunExitPreempted  = 75
)

// RunExitCode is gpuwarden run's exit status for a report: 0 when the job
// finished (and, with a store, durably), RunExitNotDurable, RunExitPreempted
// for a box going away or a supervisor stopped, else the failed job's own
// code, 1 when it has none from 1 to 255 (a signal).
func (r RunReport) RunExitCode() int {
	switch r.Result {
	case ResultOK:
		return 0
	case ResultNotDurable:
		return RunExitNotDurable
	case ResultPreempted, ResultStopped:
		return RunExitPreempted
	}
	if r.JobExitCode < 1 || r.JobExitCode > 255 {
		return 1
	}
	return r.JobExitCode
}

// NoticeRecord is one notice a supervised run heard and what it did about it.
type NoticeRecord struct {
	Notice   Notice    `json:"notice"`
	Received time.Time `json:"received"`
	// Action is stop (the job was stopped for it), scheduled (a stop is set
	// for StopAt), insurance (a checkpoint was asked for, the job kept
	// running), called-off (the event was canceled before its stop) or
	// answered (it came while a stop was already under way).
	Action string    `json:"action"`
	StopAt time.Time `json:"stop_at,omitempty"`
	// Signal says what the job was sent, or why it was not sent the
	// checkpoint signal (it does not catch it).
	Signal string `json:"signal,omitempty"`
	// GraceSeconds is how long the job was given to checkpoint.
	GraceSeconds float64 `json:"grace_s,omitempty"`
	// Checkpoint is the one committed in answer, "" when none came.
	Checkpoint string `json:"checkpoint,omitempty"`
	Detail     string `json:"detail"`
}

// The NoticeRecord actions.
const (
	NoticeActionStop      = "stop"
	NoticeActionScheduled = "scheduled"
	NoticeActionInsurance = "insurance"
	NoticeActionCalledOff = "called-off"
	NoticeActionAnswered  = "answered"
)

// SyncReport is what reached the checkpoint store: counted, not assumed.
type SyncReport struct {
	// Target is the store, as Where names it.
	Target string `json:"target"`
	// Uploaded counts checkpoints this run uploaded and verified.
	Uploaded int `json:"uploaded"`
	// Failed counts uploads that did not verify; Failures keeps the last few.
	Failed   int           `json:"failed"`
	Failures []SyncFailure `json:"failures,omitempty"`
	// NewestDurable is the newest checkpoint the store holds verified,
	// nil when it holds none.
	NewestDurable *DurableCheckpoint `json:"newest_durable,omitempty"`
	// NewestCommitted names the newest checkpoint committed on the box.
	NewestCommitted string `json:"newest_committed,omitempty"`
	// Durable says the newest committed checkpoint is in the store.
	Durable bool `json:"durable"`
	// Restored names the checkpoint pulled from the store at the start and
	// resumed, "" when none was.
	Restored string `json:"restored,omitempty"`
	// RestoreSkipped lists the stored checkpoints the restore at the start
	// passed over, and why: the names gpuwarden does not write, then the
	// candidates it tried, newest first (a manifest that lists no file, a
	// pull that failed or did not verify). It keeps the first 32; the log
	// names them all.
	RestoreSkipped []RestoreSkip `json:"restore_skipped,omitempty"`
	// RemotePruned lists the checkpoints removed from the store to keep the last N.
	RemotePruned []string `json:"remote_pruned,omitempty"`
}

// RestoreSkip is one stored checkpoint the restore did not resume, and why.
type RestoreSkip struct {
	Checkpoint string `json:"checkpoint"`
	Reason     string `json:"reason"`
}

// SyncFailure is one upload that did not make a checkpoint durable.
type SyncFailure struct {
	Checkpoint string    `json:"checkpoint"`
	Time       time.Time `json:"time"`
	Error      string    `json:"error"`
}

// DurableCheckpoint is a checkpoint the store holds and verified.
type DurableCheckpoint struct {
	Name      string    `json:"name"`
	Step      int64     `json:"step"`
	Committed time.Time `json:"committed"`
	Synced    time.Time `json:"synced"`
	// URL is where it is: the store's Where and the checkpoint's name.
	URL string `json:"url"`
}

// DescribeSync says what of a run's checkpoints is durable off the box, in
// one line for the run report, `gpuwarden status` and the dashboard; a nil
// report is a run without a store.
func DescribeSync(st *SyncReport, now time.Time) string {
	if st == nil {
		return "nothing: no --sync, so the checkpoints exist only on this box"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d uploaded and verified to %s", st.Uploaded, st.Target)
	if st.Failed > 0 {
		fmt.Fprintf(&b, ", %d failed", st.Failed)
	}
	if d := st.NewestDurable; d != nil {
		fmt.Fprintf(&b, "; last durable checkpoint: step %d, %s old, %s", d.Step, now.Sub(d.Committed).Round(time.Second), d.URL)
	} else {
		b.WriteString("; no checkpoint is durable")
	}
	if !st.Durable && st.NewestCommitted != "" {
		fmt.Fprintf(&b, "; NOT DURABLE: the newest committed, %s, is only on this box", st.NewestCommitted)
		if n := len(st.Failures); n > 0 {
			fmt.Fprintf(&b, " (%s)", st.Failures[n-1].Error)
		}
	}
	switch n := len(st.RestoreSkipped); {
	case st.Restored != "" && n > 0:
		fmt.Fprintf(&b, "; restored %s from the store at the start, %d stored skipped (%s: %s)", st.Restored, n, st.RestoreSkipped[0].Checkpoint, st.RestoreSkipped[0].Reason)
	case st.Restored != "":
		fmt.Fprintf(&b, "; restored %s from the store at the start", st.Restored)
	case n > 0:
		fmt.Fprintf(&b, "; restored nothing from the store: %d stored checkpoints skipped (%s: %s)", n, st.RestoreSkipped[0].Checkpoint, st.RestoreSkipped[0].Reason)
	}
	return b.String()
}
