package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/agent"
	"github.com/gpuwarden/gpuwarden/catalog"
	"github.com/gpuwarden/gpuwarden/objstore"
	"github.com/gpuwarden/gpuwarden/plan"
	"github.com/gpuwarden/gpuwarden/preempt"
	"github.com/gpuwarden/gpuwarden/sqlite"
	"github.com/gpuwarden/gpuwarden/supervise"
	"github.com/spf13/cobra"
)

type runFlags struct {
	checkpointDir   string
	sync            string
	s3              objstore.Options
	keep            int
	maxRestarts     int
	retryOn         string
	signal          string
	grace           time.Duration
	maintenanceLead time.Duration
	syncTimeout     time.Duration
	azureApprove    bool
	planFile        string
	dataDir         string
	socket          string
	cloud           cloudFlags
	drill           bool
	verifyState     bool
	drillTimeout    time.Duration
	output          string
}

// The exit codes of `gpuwarden run` beyond the common ones (see
// gpuwarden.RunExitCode).
const (
	exitNotDurable = gpuwarden.RunExitNotDurable
	exitPreempted  = gpuwarden.RunExitPreempted
)

const runExitCodes = `Exit codes:
  0   the job finished (with --sync: and its newest checkpoint is durable)
  1   --drill FAILed
  2   bad input or usage: a flag, a symlinked incoming/ or committed/, a busy --checkpoint-dir
  3   environment missing
  4   internal error
  74  not durable: the job finished, but its newest checkpoint never reached --sync
  75  preempted or stopped: the box is going away (or run was stopped) and the job
      was checkpointed and not restarted here; requeue it, it resumes
  N   the job's own exit code when it failed and was not restarted`

func (a *app) runCommand() *cobra.Command {
	var f runFlags
	c := &cobra.Command{
		Use:   "run [flags] -- COMMAND [ARG...]",
		Short: "Run a job that survives preemption: checkpoints, retries, a proven resume",
		Long: `run supervises COMMAND on this box. The job writes each checkpoint into its
own directory under $GPUWARDEN_CHECKPOINT_DIR and marks it complete (an empty
.complete file, or gpuwarden checkpoint commit DIR); gpuwarden then hashes it
into a manifest, commits it atomically, keeps the last --keep, and syncs it to
--sync (a directory, s3://bucket/prefix, gs://bucket/prefix or
az://account/container/prefix), where --keep applies too, counting
only what it verified there — refusing a target outside the plan's allowed
countries before any upload (--store-region states where a self-hosted store
or an Azure account is). gs:// signs in with GOOGLE_APPLICATION_CREDENTIALS or
the VM's service account; az:// with AZURE_STORAGE_CONNECTION_STRING or the VM's
managed identity. On a restart, or on a fresh box after pulling the
newest checkpoint that verifies from --sync, the job gets
$GPUWARDEN_RESUME_FROM (and {resume} in COMMAND); a torn or corrupt checkpoint
is never resumed. Everything run opens, renames or deletes stays beneath
--checkpoint-dir, which may itself be a symlink; a symlinked incoming/ or
committed/ is refused.

Notices (from the agent's socket, or its own metadata polling when no agent
runs) are acted on by kind and time left:
` + noticePolicyHelp() + `
The checkpoint signal (--checkpoint-signal, SIGUSR1) goes only to the job's
processes that catch it: one that does not is sent SIGTERM with the whole
--grace instead, never killed by the signal's default action. On SIGTERM or
Ctrl-C run checkpoints and stops the job the same way.

Exits are classed — preempted, host-oom, cuda-oom, gpu-fault (NCCL, Xid,
ECC), killed, user-error — each with its own retry budget and backoff; user
errors are not retried unless --retry-on names them. The job runs in its own
cgroup where the box allows it, else its own process group, and never outlives
the supervisor, even under kill -9; the next run ends what a killed one left.
The report (table, -o json, the agent's ledger) says what was done about each
notice and what is durable: checkpoints uploaded and verified, the newest
durable one (step, age, URL), and failures.

--drill proves the resume: it starts the job, waits for its first checkpoint,
kills it as a preemption would, restarts it and checks that it went on from
that checkpoint instead of starting over. --verify-state also runs the job
uninterrupted to the same step and compares the two checkpoints, every file
byte for byte, or only the ` + supervise.StateDigestName + ` file when the job writes one into
each checkpoint (a digest of weights, optimizer, RNG and data position, for
formats that are not byte-reproducible): a job that restores its step but not
its state FAILs.

` + runExitCodes,
		Example: `  gpuwarden run --checkpoint-dir ./ckpt -- python train.py --resume {resume}
  gpuwarden run --sync s3://my-bucket/run-42 --plan gpuwarden.yaml -- ./train.sh
  gpuwarden run --sync gs://my-bucket/run-42 -- ./train.sh
  gpuwarden run --sync az://myaccount/ckpts/run-42 --store-region germanywestcentral -- ./train.sh
  gpuwarden run --drill --verify-state -- python examples/pytorch_resume.py
  # against AWS's metadata simulator (amazon-ec2-metadata-mock):
  gpuwarden run --cloud aws --aws-metadata http://127.0.0.1:1338 -- ./train.sh`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return gpuwarden.Errorf(gpuwarden.EInvalid, "run: no job command").
					WithHint("give the job after --, e.g. gpuwarden run --checkpoint-dir ./ckpt -- python train.py")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.runJob(cmd, &f, argv)
		},
	}
	serviceLogLevel(c)
	fl := c.Flags()
	fl.StringVar(&f.checkpointDir, "checkpoint-dir", "checkpoints", "where the job's checkpoints live (incoming/ and committed/)")
	fl.StringVar(&f.sync, "sync", "", "durable copy of committed checkpoints: a `TARGET` directory, s3://bucket/prefix, gs://bucket/prefix or az://account/container/prefix")
	fl.StringVar(&f.s3.StoreRegion, "store-region", "", "where the --sync store is, a `REGION` name or country code (DE): for a self-hosted store or an Azure account, whose location residency cannot ask")
	fl.BoolVar(&f.s3.UnsignedPayload, "s3-unsigned-payload", false, "send S3 bodies unsigned instead of in aws-chunked framing, for servers that store that framing over plain http")
	fl.StringVar(&f.s3.Endpoint, "s3-endpoint", "", "S3-compatible endpoint host:port (default AWS)")
	fl.StringVar(&f.s3.Region, "s3-region", "", "S3 region")
	fl.BoolVar(&f.s3.Insecure, "s3-insecure", false, "plain http to the S3 endpoint (a local MinIO)")
	fl.BoolVar(&f.s3.PathStyle, "s3-path-style", false, "path-style S3 URLs (MinIO and most non-AWS stores)")
	fl.IntVar(&f.keep, "keep", 3, "committed checkpoints to keep on the box and in --sync")
	fl.DurationVar(&f.syncTimeout, "sync-timeout", supervise.DefaultSyncTimeout, "give one checkpoint's upload up after this long; it counts as not durable")
	fl.IntVar(&f.maxRestarts, "max-restarts", 20, "restarts of all classes together")
	fl.StringVar(&f.retryOn, "retry-on", "", "also retry these exit `CLASSES` (comma-separated, e.g. user-error)")
	fl.StringVar(&f.signal, "checkpoint-signal", "USR1", "signal that asks the job to checkpoint now")
	fl.StringVar(&f.signal, "signal", "USR1", "old name of --checkpoint-signal")
	_ = fl.MarkHidden("signal")
	fl.DurationVar(&f.grace, "grace", 0, "how long the job has to checkpoint after a notice (default: the cloud's notice window less a margin; 90s)")
	fl.DurationVar(&f.maintenanceLead, "maintenance-lead", supervise.DefaultMaintenanceLead, "checkpoint and stop the job this long before a scheduled reboot, stop or redeploy")
	fl.BoolVar(&f.azureApprove, "azure-approve", false, "on Azure, approve a scheduled event (StartRequests) once the checkpoint for it commits, so it starts sooner")
	fl.StringVar(&f.planFile, "plan", "", "plan `FILE` for the rate of lost work and the allowed countries (default ./gpuwarden.yaml when present)")
	fl.StringVar(&f.dataDir, "data-dir", defaultDataDir(), "the agent's data directory: its socket and the ledger the report goes to")
	fl.StringVar(&f.socket, "agent-socket", "", "the agent's socket (default DATA_DIR/agent.sock)")
	f.cloud.register(c, "without an agent, poll this cloud's metadata for notices")
	fl.BoolVar(&f.drill, "drill", false, "prove the resume: start, kill after the first checkpoint, restart, check")
	fl.BoolVar(&f.verifyState, "verify-state", false, "with --drill: also compare the resumed checkpoint with an uninterrupted run's")
	fl.DurationVar(&f.drillTimeout, "drill-timeout", 10*time.Minute, "give each wait of the drill up after this long")
	fl.StringVarP(&f.output, "output", "o", "table", "report format: table or json")
	return c
}

// noticePolicyHelp is gpuwarden.NoticeEffects in words, for --help.
func noticePolicyHelp() string {
	var b strings.Builder
	for _, e := range gpuwarden.NoticeEffects {
		fmt.Fprint(&b, wrap(fmt.Sprintf("%s (%s): %s", e.Kind, e.Summary, e.Action), "  • ", pageWidth))
	}
	return b.String()
}

func (a *app) runJob(cmd *cobra.Command, f *runFlags, argv []string) error {
	if err := outputFormat(f.output, "table", "json"); err != nil {
		return err
	}
	if err := f.cloud.validate(); err != nil {
		return err
	}
	sig, err := parseSignal(f.signal)
	if err != nil {
		return err
	}
	policy := supervise.Policy{MaxRestarts: f.maxRestarts}
	if f.retryOn != "" {
		if policy.Budgets, err = supervise.ParseRetryOn(f.retryOn); err != nil {
			return err
		}
	}
	if f.keep < 1 {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "--keep must be at least 1, got %d", f.keep)
	}
	if f.verifyState && !f.drill {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "--verify-state works with --drill").WithHint("gpuwarden run --drill --verify-state -- CMD")
	}
	p, planPath, err := loadPlanIfAny(planArgs(f.planFile))
	if err != nil {
		return err
	}
	if err := supervise.BecomeSubreaper(); err != nil {
		a.log.Warn("cannot become a subreaper: grandchildren of a killed job may outlive it", "err", err)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := a.log.With("component", "run")

	store, err := a.openStore(ctx, f, p)
	if err != nil {
		return err
	}
	s := &supervise.Supervisor{Argv: argv, CheckpointDir: f.checkpointDir, Env: os.Environ(), Out: a.stderr,
		Policy: policy, CheckpointSignal: sig, Grace: f.grace, MaintenanceLead: f.maintenanceLead, SyncTimeout: f.syncTimeout,
		Keep: f.keep, Log: a.log}
	if a.clock != nil {
		// A simulated run (--clock-file): attempts, checkpoints and lost
		// work are timed on the stepped clock the agent runs on.
		s.Now = a.clock.Now
	}
	if store != nil {
		s.Store = store
		s.KeepRemote = func(ctx context.Context, protect string) ([]string, error) {
			return objstore.Keep(ctx, store, f.keep, protect)
		}
	}
	src, provider := a.runNotices(ctx, f, s, log)
	if s.Grace == 0 {
		s.Grace = graceFor(provider)
	}
	if f.azureApprove {
		if err := a.approveAzure(f, s, log); err != nil {
			return err
		}
	}

	if f.drill {
		res, err := supervise.Drill(ctx, s, supervise.DrillOptions{Timeout: f.drillTimeout, VerifyState: f.verifyState})
		if err != nil {
			return err
		}
		a.recordDrill(ctx, f.dataDir, s.Argv, res, log)
		return a.printDrill(f.output, res)
	}
	report, err := s.Run(ctx, src)
	if err != nil {
		return err
	}
	a.priceRework(&report, p, planPath)
	a.recordReport(ctx, f.dataDir, report, log)
	if f.output == "json" {
		err = writeJSON(a.stdout, runJSONKind, report)
	} else {
		err = runReportTable(a.stdout, report, a.now())
	}
	if err != nil {
		return err
	}
	return runExit(report)
}

// runJSONKind names run -o json's schema: v2 since the job's exit code and
// class became job_exit_code and job_class, and exit_code gpuwarden's own.
const runJSONKind = "run/v2"

// runExit is the run's documented exit code (gpuwarden.RunReport.RunExitCode),
// the one its -o json reports as exit_code.
func runExit(r gpuwarden.RunReport) error {
	if code := r.RunExitCode(); code != 0 {
		return &exitError{code: code}
	}
	return nil
}

// approveAzure makes the supervisor acknowledge Azure events once their
// checkpoint commits, through the metadata service --azure-metadata names.
func (a *app) approveAzure(f *runFlags, s *supervise.Supervisor, log *slog.Logger) error {
	if f.cloud.cloud != "auto" && f.cloud.cloud != preempt.ProviderAzure {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "--azure-approve needs --cloud azure or auto, not %s", f.cloud.cloud)
	}
	src, err := preempt.ForProvider(preempt.ProviderAzure, preempt.NewClient(), f.cloud.metadata)
	if err != nil {
		return err
	}
	ap, ok := src.(preempt.Approver)
	if !ok {
		return gpuwarden.Errorf(gpuwarden.EInternal, "the Azure source cannot approve events")
	}
	s.Approve = func(ctx context.Context, n gpuwarden.Notice) error {
		if n.Provider != preempt.ProviderAzure {
			return nil
		}
		return ap.Approve(ctx, n.ID)
	}
	log.Info("azure events will be approved once their checkpoint commits")
	return nil
}

func planArgs(file string) []string {
	if file == "" {
		return nil
	}
	return []string{file}
}

func parseSignal(name string) (syscall.Signal, error) {
	switch strings.TrimPrefix(strings.ToUpper(name), "SIG") {
	case "USR1":
		return syscall.SIGUSR1, nil
	case "USR2":
		return syscall.SIGUSR2, nil
	case "INT":
		return syscall.SIGINT, nil
	case "TERM":
		return syscall.SIGTERM, nil
	case "HUP":
		return syscall.SIGHUP, nil
	}
	return 0, gpuwarden.Errorf(gpuwarden.EInvalid, "--signal: %q is not a signal a job can catch", name).WithHint("one of: USR1, USR2, INT, TERM, HUP")
}

// graceFor leaves the job the provider's notice window less a margin to
// sync and stop: AWS gives 2 minutes, GCP and Azure 30 seconds.
func graceFor(provider string) time.Duration {
	switch provider {
	case preempt.ProviderAWS:
		return 90 * time.Second
	case preempt.ProviderGCP, preempt.ProviderAzure:
		return 20 * time.Second
	}
	return 90 * time.Second
}

// openStore opens --sync and refuses a bucket outside the plan's allowed
// countries before anything is uploaded.
func (a *app) openStore(ctx context.Context, f *runFlags, p *gpuwarden.Plan) (gpuwarden.CheckpointStore, error) {
	if f.sync == "" {
		return nil, nil
	}
	store, err := objstore.Open(ctx, f.sync, f.s3)
	if err != nil {
		return nil, err
	}
	if p == nil || len(p.Residency.Countries) == 0 {
		return store, nil
	}
	region, err := objstore.RegionOf(ctx, store)
	if err != nil {
		return nil, fmt.Errorf("find where %s is: %w", store.Where(), err)
	}
	if region == "" {
		return store, nil // a local directory: on this box
	}
	country := storeCountry(region)
	if !slices.Contains(p.Residency.Countries, country) {
		where := region
		if country != "" {
			where += " (" + country + ")"
		}
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "--sync %s is in %s, outside the plan's allowed countries (%s): nothing was uploaded",
			store.Where(), where, strings.Join(p.Residency.Countries, ", ")).WithHint("use a bucket in an allowed region; a self-hosted store states where it is with --store-region")
	}
	return store, nil
}

// storeCountry maps a store's region to its country: a country code stated
// with --store-region is itself, else the region is looked up as AWS's,
// Google's (bucket locations are regions, lower-cased) or Azure's; "" when
// none knows it, which no residency allows.
func storeCountry(region string) string {
	if cc := strings.ToUpper(strings.TrimSpace(region)); len(cc) == 2 && strings.Trim(cc, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") == "" {
		return cc
	}
	for _, provider := range []string{"aws", "gcp", "azure"} {
		if c := catalog.CountryOf(provider, region); c != "" {
			return c
		}
	}
	return ""
}

// runNotices feeds notices to the supervisor: from the agent when one runs
// (and the agent hears the job's state and durability), else from the
// cloud's metadata directly. Without an agent the supervisor's notice
// records are the alerts, logged at warning level.
func (a *app) runNotices(ctx context.Context, f *runFlags, s *supervise.Supervisor, log *slog.Logger) (<-chan gpuwarden.Notice, string) {
	ch := make(chan gpuwarden.Notice, 16)
	path := f.socket
	if path == "" {
		path = filepath.Join(f.dataDir, "agent.sock")
	}
	// The first record of a notice is its alert; later ones (the signal
	// sent, the checkpoint that answered) are in the report.
	alerted := map[string]bool{}
	s.OnNotice = func(r gpuwarden.NoticeRecord) {
		if key := r.Notice.Provider + "/" + r.Notice.ID + "/" + r.Action; !alerted[key] {
			alerted[key] = true
			log.Warn("notice", "action", r.Action, "detail", r.Detail)
			return
		}
		log.Debug("notice", "action", r.Action, "detail", r.Detail, "signal", r.Signal, "checkpoint", r.Checkpoint)
	}
	if c, err := agent.Dial(ctx, path); err == nil && !f.cloud.fakeMetadata() {
		log.Info("listening to the agent for notices", "socket", path)
		job := fmt.Sprintf("run-%d", os.Getpid())
		s.OnState = func(state string) {
			if err := c.Report(job, state); err != nil {
				log.Warn("tell the agent", "err", err)
			}
		}
		s.OnSync = func(st gpuwarden.SyncReport) {
			if err := c.ReportSync(job, st); err != nil {
				log.Warn("tell the agent", "err", err)
			}
		}
		go c.Notices(ctx, func(n gpuwarden.Notice) { ch <- n })
		return ch, ""
	}
	src := f.cloud.source(ctx, log)
	if src == nil {
		return ch, ""
	}
	go preempt.Watch(ctx, src, time.Second, func(n gpuwarden.Notice) {
		select {
		case ch <- n:
		case <-ctx.Done():
		}
	}, preempt.NewHealth(src, log).Observe)
	return ch, src.Provider()
}

// priceRework prices the lost work at the plan's box rate, when it has one.
func (a *app) priceRework(r *gpuwarden.RunReport, p *gpuwarden.Plan, planPath string) {
	if p == nil || p.Box == nil {
		return
	}
	cat, err := catalog.Load(planCatalogs(planPath, p), p.EmbeddedCatalog == nil || *p.EmbeddedCatalog)
	if err != nil {
		return
	}
	rate, _, err := plan.BoxRate(p, cat)
	if err != nil {
		return
	}
	r.Currency = p.Budget.Currency
	r.ReworkCost = gpuwarden.MulCents(rate, gpuwarden.MicrosFromFloat(r.LostSeconds/3600))
}

// recordReport keeps the report in the agent's ledger, on every ending:
// a run stopped by SIGTERM (a preemption) has a cancelled ctx, and its
// report matters most, so the write outlives ctx, bounded.
func (a *app) recordReport(ctx context.Context, dataDir string, r gpuwarden.RunReport, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		log.Warn("open the ledger", "err", err)
		return
	}
	l, err := sqlite.Open(ctx, filepath.Join(dataDir, "ledger.db"))
	if err != nil {
		log.Warn("open the ledger", "err", err)
		return
	}
	defer l.Close()
	b, _ := json.Marshal(r)
	sev := gpuwarden.SeverityInfo
	if r.Result != gpuwarden.ResultOK {
		sev = gpuwarden.SeverityWarning
	}
	_, err = l.RecordEvent(ctx, gpuwarden.Event{Time: r.End, Kind: "run-report", Severity: sev,
		Message: fmt.Sprintf("job %s ended %s after %d attempts: %s", strings.Join(r.Command, " "), r.Result, len(r.Attempts), r.Why),
		Data:    map[string]string{"report": string(b)}})
	if err != nil {
		log.Warn("record the run report", "err", err)
	}
}

// recordDrill keeps the drill's verdict in the ledger, where preflight
// looks for a proven resume.
func (a *app) recordDrill(ctx context.Context, dataDir string, command []string, res supervise.DrillResult, log *slog.Logger) {
	l, err := sqlite.Open(ctx, filepath.Join(dataDir, "ledger.db"))
	if err != nil {
		log.Warn("open the ledger", "err", err)
		return
	}
	defer l.Close()
	verdict, sev := "FAIL", gpuwarden.SeverityWarning
	if res.Pass {
		verdict, sev = "PASS", gpuwarden.SeverityInfo
	}
	_, err = l.RecordEvent(ctx, gpuwarden.Event{Time: a.now().UTC(), Kind: "drill", Severity: sev,
		Message: fmt.Sprintf("resume drill of %s: %s: %s", strings.Join(command, " "), verdict, res.Reason),
		Data:    map[string]string{"verdict": verdict, "command": strings.Join(command, " ")}})
	if err != nil {
		log.Warn("record the drill", "err", err)
	}
}

func runReportTable(w io.Writer, r gpuwarden.RunReport, now time.Time) error {
	var b strings.Builder
	fmt.Fprintf(&b, "\nJob       %s\n", strings.Join(r.Command, " "))
	attempts := "attempts"
	if len(r.Attempts) == 1 {
		attempts = "attempt"
	}
	fmt.Fprintf(&b, "Result    %s after %d %s in %s\n", r.Result, len(r.Attempts), attempts, r.End.Sub(r.Start).Round(100*time.Millisecond))
	if r.Why != "" {
		fmt.Fprint(&b, wrap(r.Why, "          ", pageWidth))
	}
	rows := [][]string{{"#", "CLASS", "EXIT", "TOOK", "LOST", "RESUMED FROM"}}
	for _, at := range r.Attempts {
		exit := fmt.Sprint(at.ExitCode)
		if at.Signal != "" {
			exit = at.Signal
		}
		from := at.ResumedFrom
		if from == "" {
			from = "(fresh start)"
		}
		rows = append(rows, []string{fmt.Sprint(at.Number), at.Class, exit, at.End.Sub(at.Start).Round(100 * time.Millisecond).String(),
			(time.Duration(at.LostSeconds * float64(time.Second))).Round(100 * time.Millisecond).String(), filepath.Base(from)})
	}
	t := newTable(&b)
	for _, row := range rows {
		t.row(row...)
	}
	if err := t.flush(); err != nil {
		return err
	}
	classes := make([]string, 0, len(r.Restarts))
	for c, n := range r.Restarts {
		classes = append(classes, fmt.Sprintf("%d %s", n, c))
	}
	sort.Strings(classes)
	restarts := "none"
	if len(classes) > 0 {
		restarts = strings.Join(classes, ", ")
	}
	fmt.Fprintf(&b, "Restarts  %s\n", restarts)
	for _, n := range r.Notices {
		line := n.Action + ": " + n.Detail
		if n.Signal != "" {
			line += "; signal: " + n.Signal
		}
		if n.Checkpoint != "" {
			line += "; checkpoint " + n.Checkpoint
		}
		fmt.Fprint(&b, wrap(line, "Notice    ", pageWidth))
	}
	lost := (time.Duration(r.LostSeconds * float64(time.Second))).Round(100 * time.Millisecond)
	if r.Currency != "" {
		fmt.Fprintf(&b, "Lost work %s, %s to redo at the plan's rate\n", lost, r.Currency.Format(r.ReworkCost))
	} else {
		fmt.Fprintf(&b, "Lost work %s\n", lost)
	}
	fmt.Fprintf(&b, "Checkpoints committed: %d\n", len(r.Checkpoints))
	fmt.Fprint(&b, wrap(gpuwarden.DescribeSync(r.Sync, now), "Durable   ", pageWidth))
	_, err := io.WriteString(w, b.String())
	return err
}

func (a *app) printDrill(output string, res supervise.DrillResult) error {
	if output == "json" {
		if err := writeJSON(a.stdout, "drill", res); err != nil {
			return err
		}
	} else {
		verdict := "FAIL"
		if res.Pass {
			verdict = "PASS"
		}
		if res.Pass {
			verdict += " (" + res.Proof + ")"
		}
		fmt.Fprintf(a.stdout, "Resume drill: %s\n", verdict)
		for _, e := range res.Evidence {
			fmt.Fprint(a.stdout, wrap(e, "  • ", pageWidth))
		}
	}
	if !res.Pass {
		return gpuwarden.Errorf(gpuwarden.EFinding, "drill failed")
	}
	return nil
}
