package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	nethttp "net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpuwarden/gpuwarden"
	gwhttp "github.com/gpuwarden/gpuwarden/http"
	"github.com/spf13/cobra"
)

func (a *app) benchCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "bench",
		Short: "Measure gpuwarden's own speed: the fleet server under load",
		Example: `  gpuwarden bench fleet --agents 1000
  gpuwarden bench fleet --agents 1000 --db postgres://bench@127.0.0.1/bench -o json`,
	}
	c.AddCommand(a.benchFleetCommand())
	return c
}

type benchFleetFlags struct {
	agents          int
	rate            float64
	duration, warm  time.Duration
	db, output      string
	minRate         float64
	maxP99          time.Duration
	minutesPerAgent int
}

// BenchResult is what `gpuwarden bench fleet` measured.
type benchResult struct {
	DB           string  `json:"db"`
	Agents       int     `json:"agents"`
	Seconds      float64 `json:"seconds"`
	Heartbeats   int     `json:"heartbeats"`
	Errors       int     `json:"errors"`
	PerSecond    float64 `json:"heartbeats_per_second"`
	P50Millis    float64 `json:"p50_ms"`
	P95Millis    float64 `json:"p95_ms"`
	P99Millis    float64 `json:"p99_ms"`
	MaxMillis    float64 `json:"max_ms"`
	Batches      int     `json:"batches"`
	BatchP99     float64 `json:"batch_p99_ms"`
	BudgetRate   float64 `json:"budget_heartbeats_per_second"`
	BudgetP99    float64 `json:"budget_p99_ms"`
	WithinBudget bool    `json:"within_budget"`
}

func (a *app) benchFleetCommand() *cobra.Command {
	var f benchFleetFlags
	c := &cobra.Command{
		Use:   "fleet",
		Short: "Drive the fleet server's real API on loopback with N simulated agents",
		Long: `bench fleet starts the fleet server on 127.0.0.1 over --db (a new SQLite file
in a temporary directory by default), registers --agents nodes, each with its
own agent token, and has every agent send --rate heartbeats a second over its
own connection for --duration, after --warm-up (1,000 agents at the default
1.2/s offer 1,200 heartbeats a second); each agent also ships a batch
of --minutes one-minute samples every 10 s, as a real agent catching up would.
It reports heartbeats per second and the latency percentiles, and exits 1 when
the budget (--min-rate, --max-p99) is missed.

` + exitCodes("0  the run met its budget (--min-rate, --max-p99)", "1  it missed the budget", "2  bad input or usage: a flag, an unreachable --db", "4  internal error"),
		Example: `  gpuwarden bench fleet --agents 1000
  gpuwarden bench fleet --agents 1000 --db postgres://bench@127.0.0.1/bench -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := outputFormat(f.output, "table", "json"); err != nil {
				return err
			}
			if f.agents < 1 || f.rate <= 0 || f.duration <= 0 || f.minutesPerAgent < 0 {
				return gpuwarden.Errorf(gpuwarden.EInvalid, "--agents, --rate and --duration must be positive")
			}
			res, err := a.benchFleet(cmd.Context(), f)
			if err != nil {
				return err
			}
			if f.output == "json" {
				err = writeJSON(a.stdout, "bench", res)
			} else {
				err = benchTable(a, res)
			}
			if err != nil {
				return err
			}
			if !res.WithinBudget {
				return gpuwarden.Errorf(gpuwarden.EFinding, "outside the budget")
			}
			return nil
		},
	}
	fl := c.Flags()
	fl.IntVar(&f.agents, "agents", 1000, "simulated agents, each with its own token and connection")
	fl.Float64Var(&f.rate, "rate", 1.2, "heartbeats per second per agent (the default offers 20 % over --min-rate for 1,000 agents)")
	fl.DurationVar(&f.duration, "duration", 20*time.Second, "how long to measure")
	fl.DurationVar(&f.warm, "warm-up", 3*time.Second, "load before measuring")
	fl.IntVar(&f.minutesPerAgent, "minutes", 10, "minutes per batch each agent ships every 10 s (0: none)")
	fl.StringVar(&f.db, "db", "", "fleet `DB` to load (default: a new SQLite file in a temporary directory)")
	fl.Float64Var(&f.minRate, "min-rate", 1000, "budget: heartbeats per second at least")
	fl.DurationVar(&f.maxP99, "max-p99", 50*time.Millisecond, "budget: p99 heartbeat latency at most")
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	return c
}

func (a *app) benchFleet(ctx context.Context, f benchFleetFlags) (benchResult, error) {
	db := f.db
	if db == "" {
		dir, err := os.MkdirTemp("", "gpuwarden-bench-")
		if err != nil {
			return benchResult{}, err
		}
		defer os.RemoveAll(dir)
		db = "sqlite:" + filepath.Join(dir, "server.db")
	}
	store, kind, err := openFleet(ctx, db, true)
	if strings.HasPrefix(kind, "sqlite:") {
		kind = "sqlite"
	}
	if err != nil {
		return benchResult{}, err
	}
	defer store.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := gwhttp.NewFleetServer(store, nil)
	srv.RatePerSec = 0 // the load is the point
	addr, err := srv.Serve(ctx, "127.0.0.1:0", "", "")
	if err != nil {
		return benchResult{}, err
	}
	base := "http://" + addr
	project := fmt.Sprintf("bench-%d", time.Now().UnixNano()%1e9)
	transport := &nethttp.Transport{MaxIdleConns: f.agents, MaxIdleConnsPerHost: f.agents, IdleConnTimeout: time.Minute}
	defer transport.CloseIdleConnections()
	hc := &nethttp.Client{Transport: transport, Timeout: 30 * time.Second}

	clients := make([]*gwhttp.Client, f.agents)
	for i := range clients {
		t, secret, err := gwhttp.NewToken(project, gpuwarden.RoleAgent, "bench", time.Now())
		if err != nil {
			return benchResult{}, err
		}
		if err := store.CreateToken(ctx, t); err != nil {
			return benchResult{}, err
		}
		if clients[i], err = gwhttp.NewClient(base, secret, hc); err != nil {
			return benchResult{}, err
		}
		node := gpuwarden.Node{ID: fmt.Sprintf("%s-node-%04d", project, i), Hostname: fmt.Sprintf("gpu-%04d", i),
			Labels: gpuwarden.NodeLabels{Owner: "bench", Provider: "bench", HourlyPrice: 3_500_000, Currency: "USD"},
			GPUs:   []gpuwarden.GPU{{Index: 0, Model: "H100"}}}
		if _, err := clients[i].Register(ctx, node); err != nil {
			return benchResult{}, err
		}
	}
	a.log.Info("bench: agents registered", "agents", f.agents, "db", kind)

	var (
		mu                  sync.Mutex
		beats, batches      []time.Duration
		errs                int
		measuring           = make(chan struct{})
		measureFrom, stopAt time.Time
	)
	start := time.Now()
	measureFrom = start.Add(f.warm)
	stopAt = measureFrom.Add(f.duration)
	go func() { time.Sleep(time.Until(measureFrom)); close(measuring) }()
	period := time.Duration(float64(time.Second) / f.rate)
	var wg sync.WaitGroup
	for i, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("%s-node-%04d", project, i)
			// Agents start spread over one period, as real ones do.
			next := start.Add(time.Duration(rand.Int64N(int64(period))))
			minute := time.Now().UTC().Truncate(time.Minute).Add(-48 * time.Hour)
			nextBatch := next
			for {
				time.Sleep(time.Until(next))
				now := time.Now()
				if now.After(stopAt) {
					return
				}
				t0 := time.Now()
				err := cl.Heartbeat(ctx, gpuwarden.Heartbeat{Node: id, Time: t0, State: gpuwarden.NodeRunning, GPUUtil: 50})
				d := time.Since(t0)
				var bd time.Duration
				if f.minutesPerAgent > 0 && !now.Before(nextBatch) {
					b := gpuwarden.FleetBatch{}
					for range f.minutesPerAgent {
						b.Minutes = append(b.Minutes, gpuwarden.NodeMinute{Minute: minute, Samples: 60, CPUPercent: 20,
							GPUUtil: []float64{50}, GPUMemPercent: []float64{40}})
						minute = minute.Add(time.Minute)
					}
					t1 := time.Now()
					if _, err2 := cl.Ship(ctx, id, b); err2 != nil && err == nil {
						err = err2
					}
					bd = time.Since(t1)
					nextBatch = now.Add(10 * time.Second)
				}
				if t0.After(measureFrom) {
					mu.Lock()
					beats = append(beats, d)
					if bd > 0 {
						batches = append(batches, bd)
					}
					if err != nil {
						errs++
						if errs <= 3 {
							a.log.Warn("bench request failed", "err", err)
						}
					}
					mu.Unlock()
				}
				next = next.Add(period)
			}
		}()
	}
	wg.Wait()
	cancel()
	_ = srv.Wait()
	res := benchResult{DB: kind, Agents: f.agents, Seconds: f.duration.Seconds(), Heartbeats: len(beats), Errors: errs,
		Batches: len(batches), BudgetRate: f.minRate, BudgetP99: ms(f.maxP99)}
	res.PerSecond = float64(len(beats)-errs) / f.duration.Seconds()
	slices.Sort(beats)
	slices.Sort(batches)
	res.P50Millis, res.P95Millis, res.P99Millis = ms(pct(beats, 50)), ms(pct(beats, 95)), ms(pct(beats, 99))
	if len(beats) > 0 {
		res.MaxMillis = ms(beats[len(beats)-1])
	}
	res.BatchP99 = ms(pct(batches, 99))
	res.WithinBudget = errs == 0 && res.PerSecond >= f.minRate && res.P99Millis <= ms(f.maxP99)
	return res, nil
}

// pct is the nearest-rank percentile of sorted durations.
func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (p*len(sorted)+99)/100 - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func benchTable(a *app, r benchResult) error {
	verdict := "within budget"
	if !r.WithinBudget {
		verdict = "OUTSIDE budget"
	}
	_, err := fmt.Fprintf(a.stdout, `Fleet server on %s, %d agents, %.0f s measured
  heartbeats     %d (%d errors), %.0f/s  (budget ≥ %.0f/s)
  latency        p50 %.2f ms  p95 %.2f ms  p99 %.2f ms  max %.2f ms  (budget p99 ≤ %.0f ms)
  batches        %d, p99 %.2f ms
  verdict        %s
`, r.DB, r.Agents, r.Seconds, r.Heartbeats, r.Errors, r.PerSecond, r.BudgetRate,
		r.P50Millis, r.P95Millis, r.P99Millis, r.MaxMillis, r.BudgetP99, r.Batches, r.BatchP99, verdict)
	return err
}
