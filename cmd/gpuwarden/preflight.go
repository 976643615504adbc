package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/burnin"
	"github.com/gpuwarden/gpuwarden/config"
	"github.com/gpuwarden/gpuwarden/internal/udiff"
	"github.com/gpuwarden/gpuwarden/notify"
	"github.com/gpuwarden/gpuwarden/plan"
	"github.com/gpuwarden/gpuwarden/preflight"
	"github.com/gpuwarden/gpuwarden/sqlite"
	"github.com/spf13/cobra"
)

type preflightFlags struct {
	output, questions, dataDir, simulate, agentAddr string
	strict, fix, yes, offline, noCanary             bool
	stop                                            stopFlags
	cats                                            catalogFlags
}

func (a *app) preflightCommand() *cobra.Command {
	var f preflightFlags
	c := &cobra.Command{
		Use:   "preflight [PLAN]",
		Short: "The checklist before pressing Run: plan B, budget alerts, idle shutdown, owner, checkpoints, right-sized card",
		Long: `preflight reads the plan file, the lock beside it, this box's ledger and the box
itself, and prints one line per item with ✓ (ok), ⚠ (warn) or ✗ (fail), what
it saw, and the command or plan-file change that fixes it:

  plan-b         a target in another region or provider (launch's plan B)
  budget-alerts  a monthly limit with alerts at 50/80/100 %
  idle-shutdown  the agent stops an idle box
  labels         owner and ttl, which the fleet's orphan review asks for
  pricing        egress and storage in the month's bill
  checkpoint     checkpoints on durable storage, same region, allowed country
  card-size      the card is not oversized for the work (MIG slice or a
                 smaller card, with the monthly saving; last week's memory use)
  webhook        the plan's webhooks answer
  prices         the catalog's prices are under 90 days old
  lock           gpuwarden.lock exists and the canary passes here
  burnin         this box burned in within 30 days and passed
  drill          a resume drill passed within 30 days (training only)
  agent          gpuwarden up runs here

--fix shows the plan-file edits that fix items and the unified diff of the
plan file they make, then, after --yes (the diff still shown) or a yes at the
prompt, writes it. A fix adds or edits only the field it names: comments,
layout and every command you wrote stay as they are. --questions PROVIDER
prints the contract questions for a provider as markdown for a ticket.

` + exitCodes("0  every item passed (warnings allowed unless --strict)", "1  an item failed; with --strict a warning fails too",
			"2  bad input: the plan file, a flag", "4  internal error"),
		Example: `  gpuwarden preflight gpuwarden.yaml
  gpuwarden preflight examples/preflight-h200.yaml --fix --yes
  gpuwarden preflight --questions lambda > questions.md
  gpuwarden preflight -o json --strict`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := outputFormat(f.output, "table", "json"); err != nil {
				return err
			}
			return a.runPreflight(cmd.Context(), &f, args)
		},
	}
	fl := c.Flags()
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	fl.BoolVar(&f.strict, "strict", false, "a warning fails too (exit 1)")
	fl.BoolVar(&f.fix, "fix", false, "show the plan-file edits that fix items, then apply them")
	fl.BoolVar(&f.yes, "yes", false, "with --fix, apply without asking")
	fl.BoolVar(&f.offline, "offline", false, "do not try the webhooks")
	fl.BoolVar(&f.noCanary, "no-canary", false, "do not run the canary")
	fl.StringVar(&f.questions, "questions", "", "print the contract questions for `PROVIDER` as markdown")
	fl.StringVar(&f.dataDir, "data-dir", defaultDataDir(), "this box's ledger directory")
	fl.StringVar(&f.simulate, "simulate", "", "use simulated GPUs: `SPEC` such as 1xH200")
	fl.StringVar(&f.agentAddr, "agent", "127.0.0.1:7070", "`ADDR` where the agent answers")
	f.stop.registerEndpoints(c, true)
	f.cats.registerDownloads(c)
	return c
}

func (a *app) runPreflight(ctx context.Context, f *preflightFlags, args []string) error {
	if f.questions != "" {
		cat, err := f.cats.load(a.now())
		if err != nil {
			return err
		}
		md, err := preflight.Questions(cat, f.questions)
		if err != nil {
			return err
		}
		_, err = io.WriteString(a.stdout, md)
		return err
	}
	path := "gpuwarden.yaml"
	if len(args) == 1 {
		path = args[0]
	}
	facts, err := a.preflightFacts(ctx, f, path)
	if err != nil {
		return err
	}
	items := preflight.Check(facts)
	priceAges(a.stderr, a.now(), facts.Catalog, residencyOf(facts.Plan))
	if f.output == "json" {
		if err := writeJSON(a.stdout, "preflight", map[string]any{"plan": path, "items": items, "failed": preflight.Failed(items, f.strict),
			"price_sources": nonNilSources(facts.Catalog.Sources)}); err != nil {
			return err
		}
	} else if err := preflightTable(a.stdout, items); err != nil {
		return err
	}
	if f.fix {
		if err := a.applyFixes(path, items, f.yes); err != nil {
			return err
		}
	}
	if preflight.Failed(items, f.strict) {
		return gpuwarden.Errorf(gpuwarden.EFinding, "preflight failed")
	}
	return nil
}

// preflightFacts gathers what the checks read; a fact that cannot be had
// here (no GPU, no ledger, offline) stays unknown rather than failing.
func (a *app) preflightFacts(ctx context.Context, f *preflightFlags, path string) (preflight.Facts, error) {
	p, err := config.Load(path)
	if err != nil {
		return preflight.Facts{}, err
	}
	cat, err := f.cats.loadWith(a.now(), planCatalogs(path, p), p.EmbeddedCatalog == nil || *p.EmbeddedCatalog)
	if err != nil {
		return preflight.Facts{}, err
	}
	facts := preflight.Facts{Now: a.now(), Plan: p, PlanPath: path, Catalog: cat, WeekGPUMemPercent: -1,
		LockPath: filepath.Join(filepath.Dir(path), "gpuwarden.lock")}
	if r, err := plan.Rank(p, cat); err == nil {
		facts.Report = r
	}
	_, err = os.Stat(facts.LockPath)
	facts.LockFound = err == nil

	gpus, err := (&gpuFlags{simulate: f.simulate}).open(a)
	if err == nil {
		defer gpus.Close()
		facts.OnGPUBox = true
		host, _ := os.Hostname()
		list, _ := gpus.List(ctx)
		facts.NodeID = burnin.NodeID(host, list)
		if facts.LockFound && !f.noCanary {
			facts.Canary = a.canaryAgainstLock(ctx, facts.LockPath, f.simulate)
		}
		up := agentAnswers(ctx, f.agentAddr)
		facts.AgentRunning = &up
	}
	if ledgerPath := filepath.Join(f.dataDir, "ledger.db"); fileExists(ledgerPath) {
		l, err := sqlite.Open(ctx, ledgerPath)
		if err == nil {
			defer l.Close()
			facts.Events, _ = l.Events(ctx, 10000)
			facts.WeekGPUMemPercent = weekMemPercent(ctx, l, a.now())
		}
	}
	if !f.offline {
		facts.Webhooks = reachWebhooks(ctx, p.Webhooks)
	}
	facts.Stop = a.preflightStop(ctx, f, p, facts.Report)
	return facts, nil
}

// preflightStop works out the stop the agent would run for the plan's
// provider and on_hours.stop, and proves it from here unless offline: on
// the box it is proven as `up` proves it; elsewhere it is not proven.
func (a *app) preflightStop(ctx context.Context, f *preflightFlags, p *gpuwarden.Plan, r *plan.Report) *preflight.StopCheck {
	provider := strings.ToLower(preflight.BoxProvider(p, r))
	if provider == "" {
		return nil
	}
	never := func(context.Context, []string) error {
		return errors.New("preflight never stops the box")
	}
	in := stopInput{provider: provider, mode: p.OnHours.Stop, command: p.OnHours.StopCommand, endpoints: f.stop.endpoints,
		exec: never, mayTerminate: func(context.Context) error { return errors.New("preflight never stops the box") },
		currency: p.Budget.Currency, log: a.log}
	sc, err := resolveStop(in)
	if err != nil {
		return &preflight.StopCheck{Provider: provider, Report: gpuwarden.StopReport{Method: "none", Why: err.Error(), Fix: gpuwarden.ErrorHint(err)}}
	}
	check := &preflight.StopCheck{Provider: provider, Report: sc.Report}
	// An OS shutdown is proven on this machine alone; the API stops ask
	// the provider, which --offline forbids.
	if sc.Stopper == nil || f.offline && sc.Stopper.Method() != gpuwarden.StopOSShutdown {
		return check
	}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	proof, err := sc.Stopper.Prove(pctx)
	if err != nil && proof.Reason == "" {
		proof.Reason, proof.Fix = err.Error(), gpuwarden.ErrorHint(err)
	}
	check.Proof = &proof
	// Not on that provider's box (no metadata, no pod ID): not refused.
	check.NotHere = err != nil && gpuwarden.ErrorCodeOf(err) == gpuwarden.EEnvironment
	return check
}

// canaryAgainstLock runs this binary's canary against the lock, in its own process
// as the canary command does, bounded in time.
func (a *app) canaryAgainstLock(ctx context.Context, lockPath, simulate string) *preflight.CanaryRun {
	self, err := os.Executable()
	if err != nil {
		return &preflight.CanaryRun{ExitCode: exitInternal, Detail: err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	args := []string{"canary", "--lock", lockPath, "--no-frameworks"}
	if simulate != "" {
		args = append(args, "--simulate", simulate)
	}
	out, err := exec.CommandContext(ctx, self, args...).CombinedOutput()
	run := &preflight.CanaryRun{}
	if ee, ok := err.(*exec.ExitError); ok {
		run.ExitCode = ee.ExitCode()
	} else if err != nil {
		run.ExitCode, run.Detail = exitInternal, err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	run.Detail = strings.TrimSpace(lines[len(lines)-1])
	return run
}

// agentAnswers asks the local agent for its status.
func agentAnswers(ctx context.Context, addr string) bool {
	_, _, err := fetchStatus(ctx, addr)
	return err == nil
}

// weekMemPercent is the mean share of VRAM in use over the last week's
// samples; -1 when there are none.
func weekMemPercent(ctx context.Context, l gpuwarden.Ledger, now time.Time) float64 {
	samples, err := l.Samples(ctx, now.Add(-7*24*time.Hour))
	if err != nil {
		return -1
	}
	sum, n := 0.0, 0
	for _, s := range samples {
		for _, g := range s.GPUs {
			if g.MemTotalBytes > 0 {
				sum += 100 * float64(g.MemUsedBytes) / float64(g.MemTotalBytes)
				n++
			}
		}
	}
	if n == 0 {
		return -1
	}
	return sum / float64(n)
}

// reachWebhooks tries each webhook with a HEAD request: any HTTP answer,
// even 405, proves the endpoint is reachable without posting a message.
func reachWebhooks(ctx context.Context, urls []string) map[string]error {
	out := map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 5 * time.Second}
	for _, u := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, target, _ := notify.SplitFormat(u)
			if strings.HasPrefix(target, "pagerduty://") {
				target = notify.PagerDutyEventsURL // the key names no host of its own
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodHead, target, nil)
			if err == nil {
				var resp *http.Response
				if resp, err = client.Do(req); err == nil {
					resp.Body.Close()
				}
			}
			if err != nil {
				err = fmt.Errorf("no answer: %s", strings.TrimPrefix(err.Error(), "Head "))
			}
			mu.Lock()
			out[u] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func preflightTable(w io.Writer, items []preflight.Item) error {
	var b strings.Builder
	counts := map[preflight.Status]int{}
	for _, it := range items {
		counts[it.Status]++
		fmt.Fprintf(&b, "%s %-14s %s\n", it.Status.Mark(), it.ID, it.Evidence)
		if it.Fix != "" && it.Status != preflight.OK {
			fmt.Fprintf(&b, "  %-14s fix: %s\n", "", it.Fix)
		}
	}
	fmt.Fprintf(&b, "\n%d ok, %d warnings, %d failed\n", counts[preflight.OK], counts[preflight.Warn], counts[preflight.Fail])
	_, err := io.WriteString(w, b.String())
	return err
}

// applyFixes shows the plan-file edits of the failing items and writes
// them once confirmed; the file is replaced atomically.
func (a *app) applyFixes(path string, items []preflight.Item, yes bool) error {
	var edits []config.Edit
	for _, it := range items {
		if it.Status != preflight.OK {
			edits = append(edits, it.Edits...)
		}
	}
	if len(edits) == 0 {
		fmt.Fprintln(a.stderr, "no plan-file edits to apply")
		return nil
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "%s: %v", path, err)
	}
	lines, err := config.Describe(src, edits)
	if err != nil {
		return err
	}
	out, err := config.ApplyEdits(src, edits)
	if err != nil {
		return err
	}
	if _, err := config.Parse(path, out); err != nil {
		return fmt.Errorf("the fixed plan does not load, so it was not written: %w", err)
	}
	fmt.Fprintf(a.stderr, "\nEdits to %s:\n", path)
	for _, l := range lines {
		fmt.Fprintf(a.stderr, "  %s\n", l)
	}
	// The file as it will be, line for line, before anything is written:
	// also with --yes, so that a log shows what changed.
	fmt.Fprintf(a.stderr, "\n%s", udiff.Unified(path, path+" (fixed)", src, out))
	if !yes {
		if !isTerminal(a.stdin) {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "not applying the edits without --yes: no terminal to ask")
		}
		fmt.Fprint(a.stderr, "Apply them? [y/N] ")
		var answer string
		_, _ = fmt.Fscanln(a.stdin, &answer)
		if !strings.EqualFold(strings.TrimSpace(answer), "y") && !strings.EqualFold(strings.TrimSpace(answer), "yes") {
			fmt.Fprintln(a.stderr, "left unchanged")
			return nil
		}
	}
	if err := config.WriteFileAtomic(path, out); err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "wrote %s; run gpuwarden preflight again to check\n", path)
	return nil
}
