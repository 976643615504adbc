package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	nethttp "net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpuwarden/gpuwarden"
	gwhttp "github.com/gpuwarden/gpuwarden/http"
	"github.com/gpuwarden/gpuwarden/internal/hdr"
	"github.com/spf13/cobra"
)

func (a *app) benchCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "bench",
		Short: "Measure gpuwarden's own speed: the fleet server under load",
		Long: `bench measures gpuwarden itself against its performance budgets; bench fleet
drives the fleet server's real API with simulated agents.

` + exitCodes("0  the run met its budget, or no subcommand was given (this help)", "1  it missed the budget",
			"2  bad input or usage: a flag, an unknown subcommand, an unreachable --db", "4  internal error"),
		Example: `  gpuwarden bench fleet --agents 1000 --rate 10 --ceiling
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
	ceiling         bool
	ceilingFor      time.Duration
	cpuProfile      string
	viaClient       bool
}

// latencyMillis is a latency distribution in milliseconds, every figure
// timed from the request's intended send time.
type latencyMillis struct {
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p99_9_ms"`
	Max  float64 `json:"max_ms"`
}

func latencies(h *hdr.Histogram) latencyMillis {
	return latencyMillis{P50: ms(h.Quantile(0.5)), P90: ms(h.Quantile(0.9)), P99: ms(h.Quantile(0.99)),
		P999: ms(h.Quantile(0.999)), Max: ms(h.Max())}
}

// benchCeiling is the database's own speed on the same file or cluster in
// the same run: RecordHeartbeats (the UPDATE every heartbeat runs) in
// transactions of ceilingBatch, back to back, with no HTTP in between.
type benchCeiling struct {
	Batch     int     `json:"batch"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"heartbeats_per_second"`
	CommitP99 float64 `json:"commit_p99_ms"`
}

// benchResult is what `gpuwarden bench fleet` measured.
type benchResult struct {
	DB      string  `json:"db"`
	Agents  int     `json:"agents"`
	Seconds float64 `json:"seconds"`
	// Offered is the schedule's rate; Achieved the heartbeats answered
	// 2xx per second of the measured window (or of the time the last one
	// took to come back, when the server fell behind).
	Offered    float64       `json:"offered_per_second"`
	Achieved   float64       `json:"achieved_per_second"`
	Heartbeats int           `json:"heartbeats"`
	Errors     int           `json:"errors"`
	Latency    latencyMillis `json:"latency"`
	Batches    int           `json:"batches"`
	BatchLat   latencyMillis `json:"batch_latency"`
	// CPUPerBeat is the process's CPU time (server and generator, user and
	// system) over the whole load, warm-up included, per heartbeat sent: on
	// shared cores it holds where the rates and latencies swing.
	CPUPerBeat float64 `json:"cpu_us_per_heartbeat"`
	// Ceiling is set with --ceiling; CeilingRatio is Achieved over it.
	Ceiling      *benchCeiling `json:"ceiling,omitempty"`
	CeilingRatio float64       `json:"ceiling_ratio,omitempty"`
	BudgetRate   float64       `json:"budget_heartbeats_per_second"`
	BudgetP99    float64       `json:"budget_p99_ms"`
	WithinBudget bool          `json:"within_budget"`
}

// batchEvery is how often each simulated agent ships its minutes.
const batchEvery = 10 * time.Second

// ceilingBatch is the transaction size of the ceiling: the batch the
// issue's reference figures used.
const ceilingBatch = 100

func (a *app) benchFleetCommand() *cobra.Command {
	var f benchFleetFlags
	c := &cobra.Command{
		Use:   "fleet",
		Short: "Drive the fleet server's real API on loopback with N simulated agents",
		Long: `bench fleet starts the fleet server on 127.0.0.1 over --db (a new SQLite file
in a temporary directory by default), registers --agents nodes, each with its
own agent token and keep-alive connection, and has every agent send --rate
heartbeats a second on a fixed schedule for --duration, after --warm-up; each
agent also ships a batch of --minutes one-minute samples every 10 s, as a real
agent catching up would.

Latency is timed from each request's intended send time on the schedule, not
from when it was actually sent (as wrk2 does): an agent whose previous request
came back late sends at once, and the wait it had counts. So a server that
falls behind shows it in the percentiles, not as a lower offered rate
(coordinated omission). Latencies go into a log-bucketed histogram (within
0.8 %, never below the true value).

--ceiling first measures the database alone on the same store: the UPDATE
every heartbeat runs, in transactions of 100, back to back for --ceiling-for;
the achieved rate is then also given as a fraction of it.

It exits 1 when the budget is missed: an error, an offered rate under
--min-rate, an achieved rate under 99 % of the offered one (the last
answers land after the window by their latency, so achieved is a little
under offered even when the server keeps up), or a p99 over --max-p99.

` + exitCodes("0  the run met its budget (--min-rate, --max-p99)", "1  it missed the budget", "2  bad input or usage: a flag, an unreachable --db", "4  internal error"),
		Example: `  gpuwarden bench fleet --agents 1000 --rate 10 --min-rate 10000 --ceiling
  gpuwarden bench fleet --agents 1000 --rate 5 --db postgres://bench@127.0.0.1/bench --ceiling -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := outputFormat(f.output, "table", "json"); err != nil {
				return err
			}
			if f.agents < 1 || f.rate <= 0 || f.duration <= 0 || f.minutesPerAgent < 0 || f.warm < 0 || f.ceilingFor <= 0 {
				return gpuwarden.Errorf(gpuwarden.EInvalid, "--agents, --rate, --duration and --ceiling-for must be positive")
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
	fl.Float64Var(&f.rate, "rate", 1.2, "heartbeats per second per agent, on a fixed schedule")
	fl.DurationVar(&f.duration, "duration", 20*time.Second, "how long to measure")
	fl.DurationVar(&f.warm, "warm-up", 3*time.Second, "load before measuring")
	fl.IntVar(&f.minutesPerAgent, "minutes", 10, "minutes per batch each agent ships every 10 s (0: none)")
	fl.StringVar(&f.db, "db", "", "fleet `DB` to load (default: a new SQLite file in a temporary directory)")
	fl.Float64Var(&f.minRate, "min-rate", 1000, "budget: heartbeats per second offered at least, and achieved within 1 % of offered")
	fl.DurationVar(&f.maxP99, "max-p99", 50*time.Millisecond, "budget: p99 heartbeat latency at most, from the intended send")
	fl.BoolVar(&f.ceiling, "ceiling", false, "also measure the database alone (batched UPDATEs) and print every rate as a ratio to it")
	fl.DurationVar(&f.ceilingFor, "ceiling-for", 3*time.Second, "how long the --ceiling measurement runs")
	fl.BoolVar(&f.viaClient, "via-client", false, "send heartbeats through the agent's own client (net/http's transport) instead of a lean connection per agent: the generator then costs more CPU")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the measured load (server and generator) to `FILE`, for go tool pprof")
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
	// The load is the point: neither the per-token limit nor the one on
	// failed requests per address (all agents share 127.0.0.1) applies.
	srv.RatePerSec, srv.FailRatePerSec = 0, 0
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
	raws := make([]*rawAgent, f.agents)
	ids := make([]string, f.agents)
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
		ids[i] = fmt.Sprintf("%s-node-%04d", project, i)
		raws[i] = &rawAgent{addr: addr, auth: "Bearer " + secret}
		node := gpuwarden.Node{ID: ids[i], Hostname: fmt.Sprintf("gpu-%04d", i),
			Labels: gpuwarden.NodeLabels{Owner: "bench", Provider: "bench", HourlyPrice: 3_500_000, Currency: "USD"},
			GPUs:   []gpuwarden.GPU{{Index: 0, Model: "H100"}}}
		if _, err := clients[i].Register(ctx, node); err != nil {
			return benchResult{}, err
		}
	}
	a.log.Info("bench: agents registered", "agents", f.agents, "db", kind)

	res := benchResult{DB: kind, Agents: f.agents, Seconds: f.duration.Seconds(), Offered: float64(f.agents) * f.rate,
		BudgetRate: f.minRate, BudgetP99: ms(f.maxP99)}
	if f.ceiling {
		c, err := benchStoreCeiling(ctx, store, ids, f.ceilingFor)
		if err != nil {
			return benchResult{}, err
		}
		res.Ceiling = &c
	}

	var (
		mu             sync.Mutex
		beats, batches hdr.Histogram
		ok, errs       int
		lastDone       time.Time
	)
	var sent atomic.Int64
	cpu0 := processCPU()
	start := time.Now()
	if f.cpuProfile != "" {
		stop, err := startCPUProfile(f.cpuProfile)
		if err != nil {
			return benchResult{}, err
		}
		defer stop()
	}
	measureFrom := start.Add(f.warm)
	stopAt := measureFrom.Add(f.duration)
	period := time.Duration(float64(time.Second) / f.rate)
	var wg sync.WaitGroup
	for i, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Agents start spread over one period, as real ones do; the
			// schedule is fixed from then on, whatever the answers take.
			sch := schedule{start: start.Add(time.Duration(rand.Int64N(int64(period)))), period: period,
				measureFrom: measureFrom, stopAt: stopAt}
			minute := time.Now().UTC().Truncate(time.Minute).Add(-48 * time.Hour)
			// Batches are spread over their 10 s as well: a thousand
			// agents shipping within one heartbeat period of each other
			// is a stampede no real fleet makes.
			nextBatch := sch.start.Add(time.Duration(rand.Int64N(int64(batchEvery))))
			var myBatches hdr.Histogram
			batchErrs := 0
			raw := raws[i]
			defer raw.close()
			beat := func() error {
				sent.Add(1)
				hb := gpuwarden.Heartbeat{Node: ids[i], Time: time.Now(), State: gpuwarden.NodeRunning, GPUUtil: 50}
				if f.viaClient {
					return cl.Heartbeat(ctx, hb)
				}
				return raw.heartbeat(hb)
			}
			after := func(intended time.Time, measured bool) {
				if f.minutesPerAgent == 0 || intended.Before(nextBatch) {
					return
				}
				b := gpuwarden.FleetBatch{}
				for range f.minutesPerAgent {
					b.Minutes = append(b.Minutes, gpuwarden.NodeMinute{Minute: minute, Samples: 60, CPUPercent: 20,
						GPUUtil: []float64{50}, GPUMemPercent: []float64{40}})
					minute = minute.Add(time.Minute)
				}
				// A batch is due at the tick that sends it: the heartbeat
				// before it on the same connection counts.
				_, err := cl.Ship(ctx, ids[i], b)
				if measured {
					myBatches.Record(time.Since(intended))
					if err != nil {
						if batchErrs++; batchErrs <= 3 {
							a.log.Warn("bench batch failed", "err", err)
						}
					}
				}
				nextBatch = nextBatch.Add(batchEvery)
			}
			var myBeats hdr.Histogram
			myOK, myErrs, myLast := sch.drive(beat, after, &myBeats, func(err error) {
				a.log.Warn("bench heartbeat failed", "err", err)
			})
			myErrs += batchErrs
			mu.Lock()
			defer mu.Unlock()
			beats.Merge(&myBeats)
			batches.Merge(&myBatches)
			ok += myOK
			errs += myErrs
			if myLast.After(lastDone) {
				lastDone = myLast
			}
		}()
	}
	wg.Wait()
	if n := sent.Load(); n > 0 {
		res.CPUPerBeat = float64((processCPU() - cpu0).Microseconds()) / float64(n)
	}
	cancel()
	_ = srv.Wait()
	res.Heartbeats, res.Errors, res.Batches = int(beats.Count()), errs, int(batches.Count())
	// When the server fell behind, the last answers come after the window:
	// the rate is over the time they took, not the window alone.
	window := max(f.duration, lastDone.Sub(measureFrom))
	res.Achieved = float64(ok) / window.Seconds()
	res.Latency, res.BatchLat = latencies(&beats), latencies(&batches)
	if res.Ceiling != nil && res.Ceiling.PerSecond > 0 {
		res.CeilingRatio = res.Achieved / res.Ceiling.PerSecond
	}
	res.WithinBudget = errs == 0 && res.Offered >= f.minRate && res.Achieved >= 0.99*res.Offered &&
		res.Latency.P99 <= ms(f.maxP99)
	return res, nil
}

// rawAgent is one simulated agent's heartbeat connection: kept alive, and
// written and read by the agent's goroutine alone, as wrk does, so that the
// generator spends one write and one read per heartbeat instead of
// net/http's transport goroutines, which cost as much CPU as the server
// they share two cores with. What goes over the wire is the real API's
// request, the one gwhttp.Client sends; batches still go through it.
type rawAgent struct {
	addr, auth string
	conn       net.Conn
	br         *bufio.Reader
	buf        []byte
}

// rawTimeout bounds one heartbeat, as gwhttp.Client's 30 s does.
const rawTimeout = 30 * time.Second

func (r *rawAgent) heartbeat(hb gpuwarden.Heartbeat) error {
	body, err := json.Marshal(hb)
	if err != nil {
		return err
	}
	if r.conn == nil {
		if r.conn, err = net.DialTimeout("tcp", r.addr, rawTimeout); err != nil {
			return err
		}
		r.br = bufio.NewReader(r.conn)
	}
	r.buf = fmt.Appendf(r.buf[:0], "POST /api/v1/heartbeat HTTP/1.1\r\nHost: %s\r\nAuthorization: %s\r\n"+
		"Accept: application/json\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", r.addr, r.auth, len(body))
	r.buf = append(r.buf, body...)
	_ = r.conn.SetDeadline(time.Now().Add(rawTimeout))
	if _, err := r.conn.Write(r.buf); err != nil {
		r.close()
		return err
	}
	resp, err := nethttp.ReadResponse(r.br, nil)
	if err != nil {
		r.close()
		return err
	}
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if err != nil || resp.Close {
		r.close()
	}
	if err != nil {
		return err
	}
	if resp.StatusCode != nethttp.StatusNoContent {
		return fmt.Errorf("heartbeat: server answered %d: %.200s", resp.StatusCode, answer)
	}
	return nil
}

func (r *rawAgent) close() {
	if r.conn != nil {
		_ = r.conn.Close()
		r.conn = nil
	}
}

// schedule is one agent's fixed-rate plan: a request is due every period
// from start until stopAt, and those due from measureFrom on are measured.
type schedule struct {
	start, measureFrom, stopAt time.Time
	period                     time.Duration
}

// drive sends one request per due time, one at a time, and records each
// measured one's latency from its due time to its answer: a request sent
// late because the one before came back late is charged the wait (wrk2's
// answer to coordinated omission). after runs after each request, on the
// same connection, with its due time. logErr sees the first three errors.
func (s schedule) drive(send func() error, after func(intended time.Time, measured bool), h *hdr.Histogram,
	logErr func(error)) (ok, errs int, last time.Time) {
	for intended := s.start; intended.Before(s.stopAt); intended = intended.Add(s.period) {
		time.Sleep(time.Until(intended))
		err := send()
		done := time.Now()
		measured := !intended.Before(s.measureFrom)
		if measured {
			h.Record(done.Sub(intended))
			last = done
			if err == nil {
				ok++
			} else if errs++; errs <= 3 && logErr != nil {
				logErr(err)
			}
		}
		if after != nil {
			after(intended, measured)
		}
	}
	return ok, errs, last
}

// benchStoreCeiling runs RecordHeartbeats over the registered nodes in
// transactions of ceilingBatch, back to back for d: what the database
// allows for the heartbeat's own write, with nothing of HTTP, JSON or
// auth around it.
func benchStoreCeiling(ctx context.Context, store gpuwarden.Fleet, ids []string, d time.Duration) (benchCeiling, error) {
	hbs := make([]gpuwarden.Heartbeat, ceilingBatch)
	var commits hdr.Histogram
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		now := time.Now()
		for i := range hbs {
			hbs[i] = gpuwarden.Heartbeat{Node: ids[(n+i)%len(ids)], Time: now, State: gpuwarden.NodeRunning, GPUUtil: 50}
		}
		t0 := time.Now()
		if err := store.RecordHeartbeats(ctx, now.UTC(), hbs); err != nil {
			return benchCeiling{}, fmt.Errorf("ceiling: %w", err)
		}
		commits.Record(time.Since(t0))
		n += len(hbs)
	}
	secs := time.Since(start).Seconds()
	return benchCeiling{Batch: ceilingBatch, Seconds: secs, PerSecond: float64(n) / secs, CommitP99: ms(commits.Quantile(0.99))}, nil
}

// startCPUProfile profiles the process into path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	out, err := os.Create(path)
	if err != nil {
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "--cpuprofile: %v", err)
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		_ = out.Close()
		return nil, fmt.Errorf("start cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); _ = out.Close() }, nil
}

// processCPU is the CPU time, user and system, this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func benchTable(a *app, r benchResult) error {
	verdict := "within budget"
	if !r.WithinBudget {
		verdict = "OUTSIDE budget"
	}
	ceiling := "not measured (--ceiling)"
	if c := r.Ceiling; c != nil {
		ceiling = fmt.Sprintf("%.0f/s (UPDATE ×%d per transaction, commit p99 %.2f ms); achieved = %.1f %% of it",
			c.PerSecond, c.Batch, c.CommitP99, 100*r.CeilingRatio)
	}
	l, b := r.Latency, r.BatchLat
	_, err := fmt.Fprintf(a.stdout, `Fleet server on %s, %d agents, %.0f s measured (latency from the intended send)
  offered        %.0f heartbeats/s
  achieved       %.0f/s, %d sent, %d errors  (budget ≥ %.0f/s)
  latency        p50 %.2f ms  p90 %.2f ms  p99 %.2f ms  p99.9 %.2f ms  max %.2f ms  (budget p99 ≤ %.0f ms)
  batches        %d, p50 %.2f ms  p99 %.2f ms  max %.2f ms
  cpu            %.0f µs per heartbeat (server and generator, warm-up included)
  db ceiling     %s
  verdict        %s
`, r.DB, r.Agents, r.Seconds, r.Offered, r.Achieved, r.Heartbeats, r.Errors, r.BudgetRate,
		l.P50, l.P90, l.P99, l.P999, l.Max, r.BudgetP99, r.Batches, b.P50, b.P99, b.Max, r.CPUPerBeat, ceiling, verdict)
	return err
}
