package main

import (
	"context"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/agent"
	"github.com/gpuwarden/gpuwarden/config"
	gwhttp "github.com/gpuwarden/gpuwarden/http"
	"github.com/gpuwarden/gpuwarden/kubelet"
	"github.com/gpuwarden/gpuwarden/notify"
	"github.com/gpuwarden/gpuwarden/nvml"
	"github.com/gpuwarden/gpuwarden/plan"
	"github.com/gpuwarden/gpuwarden/preempt"
	"github.com/gpuwarden/gpuwarden/procfs"
	"github.com/gpuwarden/gpuwarden/sqlite"
	"github.com/spf13/cobra"
)

// upFlags are `gpuwarden up`'s settings; the plan file supplies the
// defaults the flags do not override.
type upFlags struct {
	dataDir, listen, simulate string
	hostname                  string
	interval                  time.Duration
	idleWindow, warnBefore    time.Duration
	idleThreshold             float64
	noIdleStop                bool
	ignoreSessions            bool
	stopWhenJobsEnd           bool
	busyProcesses             []string
	idleScript, idleURL       string
	stop                      stopFlags
	dryRun                    bool
	onHours                   []string
	onHoursTZ                 string
	rate                      string
	budgetStop                bool
	webhooks                  []string
	webhookFormat             string
	cloud                     cloudFlags
	cats                      catalogFlags
	fleet                     fleetUpFlags
	kubeletSocket             string
}

func (a *app) upCommand() *cobra.Command {
	var f upFlags
	c := &cobra.Command{
		Use:   "up [PLAN]",
		Short: "Run the agent on this box: idle shutdown, budget alerts, preemption notices, metrics",
		Long: `up is the agent of one box. Every second it samples each GPU (utilisation,
memory, power, temperature, clocks, throttling, processes, ECC and Xid) and the
host (CPU per core, iowait, load, disk, network, sessions) into a local SQLite
ledger, and applies the policies:

  idle      every GPU under --idle-threshold with no GPU process, no job of
            ` + "`gpuwarden run`" + `, no interactive session and no --busy-process for
            --idle-window: warn (webhook, log) --warn-before the end, then stop
            the box the way that ends its bill (--stop, below; never while a
            job checkpoints; --dry-run only logs). Without a GPU reading (no
            driver) idle also needs a quiet host: CPU under 10 %, disk under
            1 MiB/s, network under 256 KiB/s. A plan whose
            on_hours.auto_shutdown_idle_minutes is 0 turns it off.
            --stop-when-jobs-end (plan: on_hours.stop_when_jobs_end) skips
            the window once the last job of ` + "`gpuwarden run`" + ` has ended: the
            box stops at the first idle second after it.
  off-hours outside --on-hours windows: warn, then stop, busy or not
  budget    accrue the box's rate (plan box:, or --rate) plus storage; alert once a
            month per threshold of the plan (default 50/80/100 %), ACTUAL and
            FORECASTED; --budget-stop stops the box at 100 %
  notices   poll the cloud's metadata (AWS, GCP, Azure, detected) every second and
            relay preemption and maintenance notices to supervised jobs on the
            agent's socket (DATA_DIR/agent.sock)
  diagnosis say why the GPUs sleep: idle, oversized, input-bound, io-bound, healthy
  blind     a GPU field the driver does not give (utilization under MIG, a
            process list without privileges, a call that timed out) is unknown,
            never 0, and no policy counts it as idle: a MIG GPU is idle only
            when every instance has no process and no memory in use. Three
            failed samples in a row raise telemetry-lost once, suspend the
            idle and budget stops, and an all-clear follows once samples work;
            an Xid source that cannot be read (kmsg, NVML events) is a warning

The stop (--stop auto, the default) is what ends this provider's bill, by
--cloud, the provider label, the plan's box or detection; it is proven at start
and every 10 minutes without stopping anything (a DryRun, a permission list, an
authenticated read), and what the provider answers to the stop is recorded
and sent to the fleet server. Where nothing here ends the bill, the agent
alerts that the idle box still bills and never claims it stopped.
` + "`--stop-command`" + ` wins over --stop; one that powers the OS off counts as an OS
shutdown. Per provider (gpuwarden's stop table, with its sources):
` + stopTableHelp() + `
It serves a dashboard, /api/v1/status and Prometheus /metrics on --listen.
On Kubernetes each GPU in the status names the pods holding it, read from the
kubelet's pod-resources socket (--kubelet-socket).
With --server it also reports to a fleet server (gpuwarden server): it
registers the box with its --label values, sends a heartbeat every
--heartbeat and ships its events and minutes from the local ledger, which is
the queue: nothing is lost while the server is away, and a replay is ignored.
When its GPUs stay under 15% busy and 30% of their memory over the 10-minute
diagnosis window, it records a diagnosis-oversized event, once per episode. A
smaller box started in its place with --label ` + gpuwarden.LabelReplaces + `=NODE_ID (the oversized
node, same project) gets a right-size saving from the server: the two price
labels' difference over the hours it runs (docs/savings.md). The
PLAN file (default gpuwarden.yaml when present) supplies the budget, the box's
rate and the idle window (on_hours.auto_shutdown_idle_minutes). Without an
NVIDIA driver it runs on the CPU path and says so.

` + exitCodes("0  stopped cleanly (SIGTERM, Ctrl-C)", "2  bad input or usage: the plan file, a flag, a token file, a busy --listen, a --data-dir another agent holds",
			"4  internal error: the ledger could not be opened"),
		Example: `  gpuwarden up --simulate 2xH100 --idle-window 3s --dry-run
  gpuwarden up --simulate 1xH100,load=80,mig=2 --idle-window 3s --dry-run --data-dir ./demo
  gpuwarden up gpuwarden.yaml --webhook https://hooks.slack.com/services/… --dry-run
  gpuwarden up --webhook pagerduty://ROUTING_KEY --webhook https://ntfy.sh/my-gpu-alerts \
      --label owner=ana,provider=aws,region=eu-west-1 --rate 2.50
  sudo gpuwarden up /etc/gpuwarden/gpuwarden.yaml --data-dir /var/lib/gpuwarden
  gpuwarden up --server https://fleet:8080 --token-file /etc/gpuwarden/agent.token \
      --label owner=ana,provider=aws,region=eu-west-1,ttl=72h`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runUp(cmd, &f, args)
		},
	}
	serviceLogLevel(c)
	fl := c.Flags()
	fl.StringVar(&f.dataDir, "data-dir", defaultDataDir(), "where the ledger and the socket live")
	fl.StringVar(&f.hostname, "hostname", "", "the box's `NAME` in logs, alerts, /metrics and the fleet (default: the host name; a pod's is the pod, give the node's)")
	fl.StringVar(&f.listen, "listen", "127.0.0.1:7070", "`ADDR` of the dashboard, /api/v1 and /metrics (empty: none)")
	fl.StringVar(&f.simulate, "simulate", "", "use simulated GPUs: `SPEC` such as 2xH100, 1xH100,load=80,mig=2 or 1xH100,fault=nvml-hang:10s")
	fl.DurationVar(&f.interval, "interval", time.Second, "time between samples")
	fl.DurationVar(&f.idleWindow, "idle-window", 0, "stop after the box is idle this long (default: the plan's auto_shutdown_idle_minutes, else 30m)")
	fl.DurationVar(&f.warnBefore, "warn-before", 5*time.Minute, "warn this long before the stop (at most a third of the window)")
	fl.Float64Var(&f.idleThreshold, "idle-threshold", 5, "GPU utilisation `PERCENT` under which a GPU is idle")
	fl.BoolVar(&f.noIdleStop, "no-idle-stop", false, "never stop the box for idleness")
	fl.BoolVar(&f.stopWhenJobsEnd, "stop-when-jobs-end", false, "stop the idle box at once when the last job of `gpuwarden run` has ended, without the idle window (default: the plan's on_hours.stop_when_jobs_end)")
	fl.BoolVar(&f.ignoreSessions, "ignore-sessions", false, "an open SSH or terminal session does not keep the box busy (default true with --simulate)")
	fl.StringArrayVar(&f.busyProcesses, "busy-process", nil, "a running process whose name contains `NAME` keeps the box busy; repeatable")
	fl.StringVar(&f.idleScript, "idle-script", "", "`COMMAND` that votes: exit 0 busy, 1 idle, else no opinion")
	fl.StringVar(&f.idleURL, "idle-url", "", "`URL` answering {\"idle\": true|false}")
	f.stop.register(c)
	fl.BoolVar(&f.dryRun, "dry-run", false, "log the stop action instead of running it")
	fl.StringArrayVar(&f.onHours, "on-hours", nil, "on-hours `WINDOW` such as \"Mon-Fri 08:00-20:00\"; repeatable; outside them the box stops")
	fl.StringVar(&f.onHoursTZ, "on-hours-tz", "UTC", "time zone of --on-hours")
	fl.StringVar(&f.rate, "rate", "", "the box's hourly `RATE` in the budget currency (default: the plan's box)")
	fl.BoolVar(&f.budgetStop, "budget-stop", false, "stop the box when the month's spend reaches the budget")
	fl.StringArrayVar(&f.webhooks, "webhook", nil, "send alerts to `URL`; repeatable")
	fl.StringVar(&f.webhookFormat, "webhook-format", notify.FormatAuto,
		"webhook body: "+strings.Join(notify.Formats, ", ")+" (auto: from the URL; docs/alerts.md)")
	f.cloud.register(c, "where the box runs, for its notices and the stop that ends its bill (runpod, vast, lambda … name the stop only)")
	f.cats.register(c)
	f.fleet.register(c)
	fl.StringVar(&f.kubeletSocket, "kubelet-socket", kubelet.DefaultSocket,
		"`PATH` of the kubelet's pod-resources socket: label each GPU with the pods holding it (no socket: no labels; empty: do not ask)")
	return c
}

// defaultDataDir follows XDG for users and /var/lib for root.
func defaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/gpuwarden"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "gpuwarden")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "gpuwarden")
	}
	return ".gpuwarden"
}

// simulatedDataDir keeps simulated GPUs' samples and runs apart from a real
// box's: with --simulate and no --data-dir the ledger goes to a folder of
// its own, so that a demo never feeds preflight, nodes or the budget of the
// box it ran on.
func simulatedDataDir(cmd *cobra.Command, dataDir, simulate string) string {
	if simulate == "" || cmd.Flags().Changed("data-dir") {
		return dataDir
	}
	return filepath.Join(defaultDataDir(), "simulated")
}

func (a *app) runUp(cmd *cobra.Command, f *upFlags, args []string) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := a.log.With("component", "agent")
	f.dataDir = simulatedDataDir(cmd, f.dataDir, f.simulate)
	if f.simulate != "" && !cmd.Flags().Changed("ignore-sessions") {
		// Simulated GPUs are a demo of the GPU policy on the machine one
		// sits at, whose own terminal would keep the box busy forever.
		f.ignoreSessions = true
	}
	if a.clock != nil && f.simulate == "" {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "--clock-file steps a simulated box only").WithHint("add --simulate SPEC")
	}
	go trimMemory(ctx, trimPeriod)

	p, planPath, err := loadPlanIfAny(args)
	if err != nil {
		return err
	}
	cfg, err := a.agentConfig(f, p, planPath)
	if err != nil {
		return err
	}
	if p != nil {
		// The plan's webhooks and labels come first; the flags add to them
		// and, for a label given twice, win.
		f.webhooks = append(slices.Clone(p.Webhooks), f.webhooks...)
		var planLabels []string
		for _, k := range slices.Sorted(maps.Keys(p.Labels)) {
			planLabels = append(planLabels, k+"="+p.Labels[k])
		}
		f.fleet.labels = append(planLabels, f.fleet.labels...)
	}
	gpus, err := (&gpuFlags{simulate: f.simulate}).open(a)
	switch {
	case err == nil:
		defer gpus.Close()
		// The agent runs for months: it follows NVML's Xid events beside
		// the kernel log, so that Xids are seen where /dev/kmsg is not.
		if n, ok := gpus.(*nvml.GPUs); ok {
			wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			n.WatchXIDEvents(wctx)
			cancel()
		}
	case gpuwarden.ErrorCodeOf(err) == gpuwarden.EEnvironment:
		log.Warn("no NVIDIA driver: running on the CPU path (host sampling, budget, notices)", "err", err)
		gpus = nil
	default:
		return err
	}
	if err := os.MkdirAll(f.dataDir, 0o700); err != nil {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "--data-dir %s: %v", f.dataDir, err)
	}
	// One agent per data dir, decided before its socket or ledger is touched.
	lock, err := agent.LockDataDir(f.dataDir)
	if err != nil {
		return err
	}
	defer lock.Close()
	// A damaged ledger is put aside and a fresh one started, announced once
	// the agent exists: an agent that would not start stops nothing.
	ledger, replaced, err := sqlite.OpenOrReplace(ctx, filepath.Join(f.dataDir, "ledger.db"), time.Now())
	if err != nil {
		return err
	}
	defer ledger.Close()

	// The alerts read the agent's live state (rate, spend, stop time); no
	// alert is sent before the agent exists.
	var ag *agent.Agent
	status := func() gpuwarden.AgentStatus {
		if ag == nil {
			return gpuwarden.AgentStatus{}
		}
		return ag.Status()
	}
	node, err := a.upNode(ctx, f, cfg, gpus)
	if err != nil {
		return err
	}
	notifier, err := a.notifier(f, cfg, node, status, log)
	if err != nil {
		return err
	}
	// Process names and sessions every 5 s keep a busy host (thousands of
	// processes) inside the agent's CPU budget; the idle window is minutes.
	host := &procfs.Sampler{ProcessEvery: 5 * time.Second}
	defer host.Close()
	ag = agent.New(cfg, gpus, host, ledger, notifier, log)
	ag.SetSimulated(f.simulate != "")
	if a.clock != nil {
		// A stepped clock: one tick per step, each acknowledged once done
		// (stop, savings and all), so that the stepper never races it.
		ag.Now, ag.Ticks = a.clock.Now, a.clock.Ticks(ctx, time.Millisecond)
		ag.Ticked = func(t time.Time) {
			if err := a.clock.Ack(node.ID, t); err != nil {
				log.Warn("acknowledge the clock", "err", err)
			}
		}
	}
	// What the savings are priced with: the node's price, provider and
	// spot labels (issue #29).
	savingsCfg, err := agent.SavingsFromNode(node)
	if err != nil {
		return err
	}
	ag.SetSavings(savingsCfg)
	// The stop that ends this provider's bill, proven in the background
	// so that a slow provider API never delays the start.
	in := f.stopInput(cmd, p)
	in.provider, in.exec, in.mayTerminate, in.log = a.stopProvider(ctx, f, node, p), runStop, ag.MayTerminate, log
	in.currency, in.rate, in.simulated = cfg.Budget.Currency, cfg.Budget.HourlyRate, f.simulate != ""
	in.stoppedRate = cfg.Stop.Report.StillBillsHourly
	stopCfg, err := resolveStop(in)
	if err != nil {
		return err
	}
	ag.SetStop(stopCfg)
	if replaced != nil {
		ag.LedgerReplaced(ctx, *replaced)
	}
	go ag.WatchLedger(ctx, ledger, ledgerCheckPeriod)
	sock, err := agent.ListenSocket(filepath.Join(f.dataDir, "agent.sock"), ag.Jobs, log)
	if err != nil {
		return err
	}
	sock.OnSync = ag.OnSync
	sock.OnGone = func() { ag.SupervisorGone(ctx) }
	if a.clock != nil {
		sock.Now = a.clock.Now
	}
	ag.Socket = sock
	go sock.Serve(ctx)
	go a.watchNotices(ctx, f, ag, log)
	if f.kubeletSocket != "" {
		go ag.WatchPods(ctx, func(ctx context.Context) (map[string][]gpuwarden.PodRef, error) {
			return kubelet.Attribution(ctx, f.kubeletSocket)
		}, kubelet.ErrNoSocket, 10*time.Second)
	}

	if f.listen != "" {
		srv := gwhttp.NewServer(ag.Status, ledger.Samples, a.log)
		srv.Node = node
		// The savings ledger feeds the page, /metrics and /api/v1/savings.
		if sl, ok := any(ledger).(gpuwarden.SavingsLedger); ok {
			srv.Savings = sl
		}
		addr, err := srv.Serve(ctx, f.listen)
		if err != nil {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "--listen %s: %v", f.listen, err)
		}
		// Let the server finish its graceful shutdown before the ledger closes.
		defer func() { _ = srv.Wait() }()
		log.Info("serving the dashboard and /metrics", "url", "http://"+addr+"/")
	}
	if f.fleet.server != "" {
		shipper, err := a.shipper(f, node, ledger, ag)
		if err != nil {
			return err
		}
		shipped := make(chan struct{})
		go func() { shipper.Run(ctx); close(shipped) }()
		// The last heartbeat says "stopped" before the ledger closes.
		defer func() { <-shipped }()
	}
	inForce := ag.Config()
	log.Info("agent up", "node", inForce.Node, "gpus", gpus != nil, "simulated", f.simulate != "",
		"idle_window", inForce.Idle.Window, "dry_run", inForce.DryRun, "data_dir", f.dataDir)
	// The stop is proven beside Run, so that a slow provider API never
	// delays the start; started after "agent up", its verdict always
	// follows that line in the log.
	go ag.WatchStop(ctx)
	if err := ag.Run(ctx); err != nil {
		return err
	}
	log.Info("agent stopped")
	return nil
}

// checkHostname holds --hostname to what a host name, a label value and a
// log field can all carry.
func checkHostname(name string) error {
	if len(name) > 253 || strings.TrimSpace(name) != name || strings.IndexFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "--hostname %q: use at most 253 printable characters, no leading or trailing space", name)
	}
	return nil
}

// loadPlanIfAny reads the plan named, or gpuwarden.yaml when it exists.
func loadPlanIfAny(args []string) (*gpuwarden.Plan, string, error) {
	path := "gpuwarden.yaml"
	if len(args) == 1 {
		path = args[0]
	} else if _, err := os.Stat(path); err != nil {
		return nil, "", nil
	}
	p, err := config.Load(path)
	return p, path, err
}

func (a *app) agentConfig(f *upFlags, p *gpuwarden.Plan, planPath string) (agent.Config, error) {
	host, _ := os.Hostname()
	if f.hostname != "" {
		if err := checkHostname(f.hostname); err != nil {
			return agent.Config{}, err
		}
		host = f.hostname
	}
	cfg := agent.Config{Node: host, Interval: f.interval, DryRun: f.dryRun,
		Idle: agent.IdleConfig{Window: f.idleWindow, ThresholdPercent: f.idleThreshold, WarnBefore: f.warnBefore,
			Off: f.noIdleStop, IgnoreSessions: f.ignoreSessions, BusyProcesses: f.busyProcesses, URL: f.idleURL,
			StopWhenJobsEnd: f.stopWhenJobsEnd}}
	if f.noIdleStop {
		cfg.Idle.OffWhy = "--no-idle-stop"
	}
	if f.interval <= 0 {
		return cfg, gpuwarden.Errorf(gpuwarden.EInvalid, "--interval must be positive, got %s", f.interval)
	}
	if f.idleScript != "" {
		cfg.Idle.Script = strings.Fields(f.idleScript)
	}
	if len(f.onHours) > 0 {
		s, err := agent.ParseSchedule(f.onHours, f.onHoursTZ)
		if err != nil {
			return cfg, err
		}
		cfg.OffHours = s
	}
	if p != nil {
		cfg.Idle.StopWhenJobsEnd = cfg.Idle.StopWhenJobsEnd || p.OnHours.StopWhenJobsEnd
		switch {
		case cfg.Idle.Window != 0:
		case p.OnHours.AutoShutdownIdleMinutes > 0:
			cfg.Idle.Window = time.Duration(p.OnHours.AutoShutdownIdleMinutes * float64(time.Minute))
		default:
			// 0 is "nobody turns it off" to plan, which prices every
			// hour of the month; the agent keeps the same word.
			cfg.Idle.Off = true
			cfg.Idle.OffWhy = "the plan's on_hours.auto_shutdown_idle_minutes is 0 (set it, or --idle-window, to stop an idle box)"
		}
		cfg.Budget = agent.BudgetConfig{Currency: p.Budget.Currency, Limit: gpuwarden.CentsOf(p.Budget.MonthlyLimit),
			AlertsPercent: p.Budget.AlertsPercent, StopAtLimit: f.budgetStop}
		if f.rate == "" && p.Box != nil {
			cat, err := f.cats.loadWith(a.now(), planCatalogs(planPath, p), p.EmbeddedCatalog == nil || *p.EmbeddedCatalog)
			if err != nil {
				return cfg, err
			}
			rate, why, err := plan.BoxRate(p, cat)
			if err != nil {
				return cfg, err
			}
			cfg.Budget.HourlyRate = rate
			a.log.Info("budget rate", "rate", p.Budget.Currency.FormatRate(rate, "h"), "from", why)
			// What bills on once a stop ends the compute bill: the fleet
			// server accrues it for a stopped box.
			if stopped, _, ok := plan.StoppedHourly(p, cat); ok {
				cfg.Stop.Report.StillBillsHourly = stopped
			}
		}
	} else {
		cfg.Budget.Currency = "USD"
	}
	if f.rate != "" {
		m, err := gpuwarden.ParseMicros(f.rate)
		if err != nil || m < 0 {
			return cfg, gpuwarden.Errorf(gpuwarden.EInvalid, "--rate: %q is not an hourly price", f.rate)
		}
		cfg.Budget.HourlyRate = m
	}
	if !slices.Contains(notify.Formats, f.webhookFormat) {
		return cfg, gpuwarden.Errorf(gpuwarden.EInvalid, "--webhook-format: %q is not one of %s", f.webhookFormat, strings.Join(notify.Formats, ", "))
	}
	if err := f.cloud.validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// notifier sends alerts to the webhooks and, for people at a terminal,
// with wall; a burst of the same alert goes out once an hour at most.
func (a *app) notifier(f *upFlags, cfg agent.Config, node gpuwarden.Node, status func() gpuwarden.AgentStatus, log *slog.Logger) (gpuwarden.Notifier, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	ns := notify.Multi{&notify.Wall{Log: log}}
	box := notify.Box{Host: cfg.Node, NodeID: f.fleet.nodeID, InstanceID: f.fleet.instanceID, DryRun: cfg.DryRun,
		Status: status,
		Owner:  node.Labels.Owner, Provider: node.Labels.Provider, Region: node.Labels.Region}
	switch {
	case f.fleet.server != "":
		// The node's page on the fleet dashboard, under the ID the shipper registers.
		box.NodeID = node.ID
		box.Link = strings.TrimSuffix(f.fleet.server, "/") + "/nodes/" + url.PathEscape(node.ID)
	case f.listen != "":
		host, port, err := net.SplitHostPort(f.listen)
		if err == nil && (host == "" || host == "0.0.0.0" || host == "::") {
			// Listening on every address: the host name is what a reader can open.
			host = cfg.Node
		}
		if err == nil {
			box.Link = "http://" + net.JoinHostPort(host, port) + "/"
		}
	}
	for _, u := range f.webhooks {
		w, err := notify.NewWebhook(u, f.webhookFormat, client, notify.WithBox(box), notify.WithLogger(log))
		if err != nil {
			// The error names only the scheme and host: a webhook's path is its secret.
			return nil, &gpuwarden.Error{Code: gpuwarden.EInvalid, Message: "--webhook", Err: err}
		}
		ns = append(ns, w)
	}
	return &notify.Dedup{Next: ns, Window: time.Hour}, nil
}

// watchNotices relays the cloud's notices to the agent.
func (a *app) watchNotices(ctx context.Context, f *upFlags, ag *agent.Agent, log *slog.Logger) {
	// A simulated box is on no cloud, unless a test points it at fake metadata.
	if f.simulate != "" && f.cloud.cloud == "auto" && !f.cloud.fakeMetadata() {
		return
	}
	src := f.cloud.source(ctx, log)
	if src == nil {
		return
	}
	// Health logs failures at warning level after the cloud's documented
	// warm-up and feeds gpuwarden_notice_source_up.
	health := preempt.NewHealth(src, log)
	health.OnChange = func(up bool) { ag.SetNoticeSource(src.Provider(), up) }
	preempt.Watch(ctx, src, time.Second, func(n gpuwarden.Notice) { ag.OnNotice(ctx, n) }, health.Observe)
}

// ledgerCheckPeriod is how often the agent checks that its ledger's file is
// still there: one stat each time, and at most this long of samples
// written to a deleted file.
const ledgerCheckPeriod = 5 * time.Second

// trimPeriod is how often the agent hands its free memory back.
const trimPeriod = 30 * time.Second

// trimMemory collects and hands free memory back to the kernel every
// period while ctx lasts. The agent's live heap is about 1 MB, but Go
// collects first at 4 MB and returns freed pages slowly, so its resident
// memory crept up for minutes: after 228 s, 1 GPU 27.7 MB without and 26.8
// MB with, 8 GPUs 30.5 and 28.3 MB, at CPU the tick counts cannot tell
// apart (17–18 and 25–27 ticks of 10 ms in 228 s). It keeps the memory the
// agent owns within its budget, node_exporter's RssAnon in the same run:
// without it 8 GPUs reached 9.2 MB against 7.7 at 240 s, with it 7.5
// (docs/benchmarks.md).
func trimMemory(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			debug.FreeOSMemory()
		}
	}
}
