package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/burnin"
	"github.com/gpuwarden/gpuwarden/cuda"
	"github.com/gpuwarden/gpuwarden/sqlite"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func (a *app) burninCommand() *cobra.Command {
	var (
		g        gpuFlags
		o        burnin.Options
		quick    bool
		failOn   string
		dataDir  string
		output   string
		duration time.Duration
	)
	c := &cobra.Command{
		Use:   "burnin",
		Short: "Prove a new box before trusting it: memory, bandwidth, compute, PCIe, disk; PASS/WARN/FAIL",
		Long: `burnin tests every GPU in parallel — a memory test over 95 % of free VRAM with
several patterns, device bandwidth (median of N copies), an FP32 FMA soak whose
results are verified, pinned host↔device copies — while sampling temperature,
power, clocks, throttle reasons and ECC/Xid counters, and tests the host: a
disk soak in --data-dir (write with fsync, read back, verify; p99 latency) and
a CPU check. Each figure is held against the GPU model's reference: FAIL
below 75 %, WARN below 85 %, with the reason in words. --quick takes about a
minute, the default about five, --duration D soaks longer. The report goes
to the ledger under this node's ID (host name + GPU UUIDs and serials), where
` + "`gpuwarden nodes`" + ` keeps the scorecard.

The GPU work runs in a child process per GPU, killed at --timeout. Each GPU
NVML lists is burnt in, found in CUDA by its UUID: an inherited
CUDA_VISIBLE_DEVICES is ignored (and said so in the log). On a GPU in MIG mode
CUDA sees only the MIG instances: its memory, bandwidth, soak, PCIe and
throttle checks, which need the whole device, are SKIP ("skipped: MIG
enabled"), not PASS, and the verdict is WARN at best: the GPU was not burnt
in. Its health counters are still read and judged.

` + exitCodes("0  PASS", "1  WARN or FAIL (--fail-on fail lets WARN pass)", "2  bad input or usage", "3  no driver or no GPU",
			"4  internal error, or a GPU check that hung past --timeout"),
		Example: `  gpuwarden burnin --quick
  gpuwarden burnin --duration 30m -o json > burnin.json
  gpuwarden burnin --quick --simulate 1xH100,fault=badmem`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := outputFormat(output, "table", "json"); err != nil {
				return err
			}
			switch {
			case quick && duration > 0:
				return gpuwarden.Errorf(gpuwarden.EInvalid, "--quick and --duration exclude each other")
			case quick:
				o.Mode = "quick"
			case duration > 0:
				o.Mode, o.Duration = "soak", duration
			default:
				o.Mode = "default"
			}
			if failOn != "warn" && failOn != "fail" {
				return gpuwarden.Errorf(gpuwarden.EInvalid, "--fail-on: %q is not warn or fail", failOn)
			}
			o.FailOnWarn = failOn == "warn"
			gpus, err := g.open(a)
			if err != nil {
				return err
			}
			defer gpus.Close()
			dataDir = simulatedDataDir(cmd, dataDir, g.simulate)
			if err := os.MkdirAll(dataDir, 0o700); err != nil {
				return gpuwarden.Errorf(gpuwarden.EInvalid, "--data-dir %s: %v", dataDir, err)
			}
			o.DataDir, o.Log, o.Now = dataDir, a.log, time.Now
			o.Progress = a.burninProgress()
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			burn := a.burnGPU
			if sim, ok := gpus.(gpuwarden.Burner); ok {
				// Simulated GPUs burn in-process: the telemetry the burn-in
				// samples must come from the same simulation.
				burn = sim.Burn
			}
			report, err := burnin.Run(ctx, gpus, burn, o)
			if err != nil {
				return err
			}
			a.recordBurnin(cmd.Context(), dataDir, report)
			if output == "json" {
				err = writeJSON(a.stdout, "burnin", report)
			} else {
				err = burnin.Table(a.stdout, report)
			}
			if err != nil {
				return err
			}
			if report.Verdict == gpuwarden.VerdictFail || (report.Verdict == gpuwarden.VerdictWarn && o.FailOnWarn) {
				return gpuwarden.Errorf(gpuwarden.EFinding, "burn-in %s", report.Verdict)
			}
			return nil
		},
	}
	g.register(c, 2*time.Hour)
	c.Flags().BoolVar(&quick, "quick", false, "about a minute: fewer patterns, a 15 s soak")
	c.Flags().DurationVar(&duration, "duration", 0, "soak this long instead of the default run")
	c.Flags().StringVar(&failOn, "fail-on", "warn", "exit 1 on: warn (WARN or FAIL) or fail (FAIL only)")
	c.Flags().StringVar(&dataDir, "data-dir", defaultDataDir(), "where the disk soak writes and the ledger lives")
	c.Flags().Int64Var(&o.DiskBytes, "disk-bytes", 0, "bytes the disk soak writes (default by mode)")
	c.Flags().BoolVar(&o.InjectFault, "inject-fault", false, "flip one word in GPU memory: the memory test must catch it")
	c.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return c
}

// burninProgress shows how far the phases are: on a terminal one bar for
// the whole burn-in (the phases run at once) naming each phase's share, a
// plain line per quarter of a phase otherwise.
func (a *app) burninProgress() func(phase string, done, total float64) {
	f, tty := a.stderr.(*os.File)
	tty = tty && term.IsTerminal(int(f.Fd()))
	var bar *progressbar.ProgressBar
	fracs := map[string]float64{}
	order := []string{}
	said := map[string]int{}
	return func(phase string, done, total float64) {
		frac := done / max(total, 1)
		if _, ok := fracs[phase]; !ok {
			order = append(order, phase)
		}
		fracs[phase] = frac
		if !tty {
			if q := int(frac * 4); q > said[phase] {
				said[phase] = q
				fmt.Fprintf(a.stderr, "burn-in %s: %.0f%%\n", phase, 100*frac)
			}
			return
		}
		if bar == nil {
			bar = progressbar.NewOptions(1000, progressbar.OptionSetWriter(a.stderr), progressbar.OptionSetWidth(30),
				progressbar.OptionClearOnFinish())
		}
		var sum float64
		parts := make([]string, 0, len(order))
		for _, p := range order {
			sum += fracs[p]
			parts = append(parts, fmt.Sprintf("%s %.0f%%", p, 100*fracs[p]))
		}
		bar.Describe("burn-in " + strings.Join(parts, " · "))
		_ = bar.Set(int(sum / float64(len(order)) * 1000))
	}
}

// burnGPU runs the burn-in of one GPU in a child process (`gpuwarden __burn`)
// that is killed when ctx ends.
func (a *app) burnGPU(ctx context.Context, req gpuwarden.BurnRequest) (gpuwarden.BurnResult, error) {
	reqJSON, _ := json.Marshal(req)
	var r gpuwarden.BurnResult
	err := a.runGPUChild(ctx, req.Index, "the burn-in", "", []string{"__burn", "--request", string(reqJSON)}, &r)
	return r, err
}

// burnCommand is the hidden child that runs one GPU's burn-in.
func (a *app) burnCommand() *cobra.Command {
	var reqJSON string
	c := &cobra.Command{
		Use:    "__burn",
		Short:  "Run the burn-in of one GPU (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var req gpuwarden.BurnRequest
			if err := json.Unmarshal([]byte(reqJSON), &req); err != nil {
				return gpuwarden.Errorf(gpuwarden.EInvalid, "--request: %v", err)
			}
			d, err := cuda.Open()
			if err != nil {
				return err
			}
			r, err := d.Burn(context.Background(), req)
			if err != nil {
				return err
			}
			// The bf16 GEMM soak runs when libcublasLt is on the box, for
			// half the FP32 soak's time; its absence is not a fault.
			if req.SoakSeconds > 0 {
				g, err := d.GEMMSoak(context.Background(), req.Index, req.UUID, req.SoakSeconds/2)
				if err != nil {
					return err
				}
				r.GEMM = &g
			}
			return writeJSON(a.stdout, "", r)
		},
	}
	c.Flags().StringVar(&reqJSON, "request", "{}", "the BurnRequest as JSON")
	return c
}

// recordBurnin keeps the report in the ledger for the node scorecard.
func (a *app) recordBurnin(ctx context.Context, dataDir string, r gpuwarden.BurnReport) {
	l, err := sqlite.Open(ctx, filepath.Join(dataDir, "ledger.db"))
	if err != nil {
		a.log.Warn("open the ledger", "err", err)
		return
	}
	defer l.Close()
	b, _ := json.Marshal(r)
	models := make([]string, 0, len(r.GPUs))
	for _, g := range r.GPUs {
		models = append(models, g.Model)
	}
	_, err = l.RecordEvent(ctx, gpuwarden.Event{Time: r.End, Kind: "burnin", Severity: severityOf(r.Verdict),
		Message: fmt.Sprintf("burn-in %s of %s (%s): %s", r.Mode, r.Host, strings.Join(models, ", "), r.Verdict),
		Data:    map[string]string{"node": r.Node, "host": r.Host, "verdict": r.Verdict, "report": string(b)}})
	if err != nil {
		a.log.Warn("record the burn-in", "err", err)
	}
}

func severityOf(verdict string) string {
	switch verdict {
	case gpuwarden.VerdictFail:
		return gpuwarden.SeverityCritical
	case gpuwarden.VerdictWarn:
		return gpuwarden.SeverityWarning
	}
	return gpuwarden.SeverityInfo
}

// nodesCommand lists the burn-in scorecard of the nodes in the ledger.
func (a *app) nodesCommand() *cobra.Command {
	var dataDir, output string
	c := &cobra.Command{
		Use:   "nodes",
		Short: "List nodes with their burn-in runs, failures, ECC/Xid counts and error rate",
		Long: `nodes reads the burn-in reports in the ledger and shows, per node (host name +
GPU UUIDs and serials), how many runs it had, how many warned or failed, the
memory, ECC and Xid errors seen, and its error rate — so a bad host shows up.

` + exitCodes("0  listed", "2  bad usage", "4  internal error: the ledger could not be read"),
		Example: `  gpuwarden nodes
  gpuwarden nodes -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := outputFormat(output, "table", "json"); err != nil {
				return err
			}
			path := filepath.Join(dataDir, "ledger.db")
			if _, err := os.Stat(path); err != nil {
				return noLedger(path, cmd.Flags().Changed("data-dir"))
			}
			l, err := sqlite.Open(cmd.Context(), path)
			if err != nil {
				return err
			}
			defer l.Close()
			events, err := l.Events(cmd.Context(), 1_000_000)
			if err != nil {
				return err
			}
			nodes := scorecards(events)
			if output == "json" {
				return writeJSON(a.stdout, "nodes", map[string]any{"nodes": nodes})
			}
			t := newTable(a.stdout)
			t.row("NODE", "HOST", "GPUS", "RUNS", "WARN", "FAIL", "MEM ERRORS", "ECC/XID", "ERROR RATE", "LAST")
			for _, n := range nodes {
				t.row(n.Node, n.Host, n.GPUs, strconv.Itoa(n.Runs), strconv.Itoa(n.Warn), strconv.Itoa(n.Fail),
					strconv.FormatUint(n.MemErrors, 10), strconv.Itoa(n.HealthFailures), fmt.Sprintf("%.0f%%", 100*n.ErrorRate),
					n.Last.Local().Format("2006-01-02 15:04")+" "+n.LastVerdict)
			}
			return t.flush()
		},
	}
	c.Flags().StringVar(&dataDir, "data-dir", defaultDataDir(), "where the ledger lives")
	c.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return c
}

// noLedger explains a data dir without a ledger. A simulated burn-in
// without --data-dir keeps its runs in DATA_DIR/simulated (see
// simulatedDataDir), so that nodes, reading DATA_DIR, would otherwise send
// the user to run the burn-in they just ran.
func noLedger(path string, dataDirGiven bool) error {
	err := gpuwarden.Errorf(gpuwarden.ENotFound, "no ledger at %s", path)
	sim := filepath.Join(defaultDataDir(), "simulated")
	switch _, serr := os.Stat(filepath.Join(sim, "ledger.db")); {
	case !dataDirGiven && serr == nil:
		return err.WithHint("simulated burn-ins (--simulate without --data-dir) are kept apart, in %s: gpuwarden nodes --data-dir %s",
			sim, shellWord(sim))
	case !dataDirGiven:
		return err.WithHint("run gpuwarden burnin first (with --simulate and no --data-dir, its runs go to %s), or pass --data-dir", sim)
	}
	return err.WithHint("run gpuwarden burnin --data-dir %s first, or pass the --data-dir a burn-in used", shellWord(filepath.Dir(path)))
}

// scorecard is one node's burn-in history.
type scorecard struct {
	Node           string    `json:"node"`
	Host           string    `json:"host"`
	GPUs           string    `json:"gpus"`
	Runs           int       `json:"runs"`
	Warn           int       `json:"warn"`
	Fail           int       `json:"fail"`
	MemErrors      uint64    `json:"mem_errors"`
	HealthFailures int       `json:"ecc_xid_failures"`
	ErrorRate      float64   `json:"error_rate"`
	First          time.Time `json:"first"`
	Last           time.Time `json:"last"`
	LastVerdict    string    `json:"last_verdict"`
}

// scorecards folds the burn-in events (newest first) into one row per node.
func scorecards(events []gpuwarden.Event) []scorecard {
	byNode := map[string]*scorecard{}
	var order []string
	for i := len(events) - 1; i >= 0; i-- {
		e := events[i]
		if e.Kind != "burnin" {
			continue
		}
		var r gpuwarden.BurnReport
		if err := json.Unmarshal([]byte(e.Data["report"]), &r); err != nil {
			continue
		}
		s, ok := byNode[r.Node]
		if !ok {
			models := map[string]int{}
			for _, g := range r.GPUs {
				models[g.Model]++
			}
			var parts []string
			for m, n := range models {
				parts = append(parts, fmt.Sprintf("%d× %s", n, m))
			}
			s = &scorecard{Node: r.Node, Host: r.Host, GPUs: strings.Join(parts, ", "), First: r.End}
			byNode[r.Node] = s
			order = append(order, r.Node)
		}
		s.Runs++
		switch r.Verdict {
		case gpuwarden.VerdictWarn:
			s.Warn++
		case gpuwarden.VerdictFail:
			s.Fail++
		}
		for _, res := range r.Results {
			s.MemErrors += res.Mem.Errors
		}
		for _, c := range r.Checks {
			if (c.Name == "ecc" || c.Name == "xid" || c.Name == "health") && c.Verdict == gpuwarden.VerdictFail {
				s.HealthFailures++
			}
		}
		s.Last, s.LastVerdict = r.End, r.Verdict
		s.ErrorRate = float64(s.Fail) / float64(s.Runs)
	}
	out := make([]scorecard, 0, len(order))
	for _, n := range order {
		out = append(out, *byNode[n])
	}
	return out
}
