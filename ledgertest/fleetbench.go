package ledgertest

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// Benchmark shapes: the server's budget is 1,000 heartbeats a second at a
// p99 of 50 ms, arriving as group-committed batches of up to ~200 from
// concurrent requests.
const (
	benchNodes     = 1000
	benchBatch     = 100
	benchWriters   = 4
	benchGPUs      = 8
	benchMinutes   = 10 // per Ingest: what an agent ships every ten minutes
	benchEvents    = 2
	benchNodePrice = 98_320_000 // 98.32 USD/h, an 8-GPU box
)

// BenchRecordHeartbeats measures RecordHeartbeats with batches of
// benchBatch heartbeats over benchNodes registered nodes, one writer at a
// time ("serial") and benchWriters at once ("parallel"), and reports
// heartbeats per second and the p50 and p99 latency of a batch.
func BenchRecordHeartbeats(b *testing.B, f gpuwarden.Fleet) {
	ctx := context.Background()
	registerBenchNodes(b, f)
	batch := func(i int) []gpuwarden.Heartbeat {
		hbs := make([]gpuwarden.Heartbeat, benchBatch)
		start := i * benchBatch % benchNodes
		for j := range hbs {
			hbs[j] = gpuwarden.Heartbeat{Node: benchNodeID((start + j) % benchNodes), Time: FleetStart.Add(time.Duration(i) * time.Second),
				State: gpuwarden.NodeRunning, GPUUtil: float64(j % 100)}
		}
		return hbs
	}
	run := func(b *testing.B, writers int) {
		var next atomic.Int64
		lat := newLatencies()
		b.ResetTimer()
		start := time.Now()
		parallel(b, writers, func() error {
			i := int(next.Add(1))
			hbs := batch(i)
			t := time.Now()
			if err := f.RecordHeartbeats(ctx, FleetStart.Add(time.Duration(i)*time.Millisecond), hbs); err != nil {
				return err
			}
			lat.add(time.Since(t))
			return nil
		})
		elapsed := time.Since(start)
		b.StopTimer()
		b.ReportMetric(float64(b.N*benchBatch)/elapsed.Seconds(), "heartbeats/s")
		lat.report(b)
	}
	b.Run("serial", func(b *testing.B) { run(b, 1) })
	b.Run("parallel", func(b *testing.B) { run(b, benchWriters) })
}

// BenchIngest measures Ingest of batches of benchMinutes new minutes of
// benchGPUs GPUs and benchEvents events, each for one of benchNodes nodes,
// one writer at a time and benchWriters at once; it reports minutes per
// second and the p50 and p99 latency of a batch.
func BenchIngest(b *testing.B, f gpuwarden.Fleet) {
	ctx := context.Background()
	registerBenchNodes(b, f)
	var round atomic.Int64 // every Ingest ships minutes no earlier one shipped
	batch := func(i int) (string, gpuwarden.FleetBatch) {
		node, r := i%benchNodes, i/benchNodes
		var fb gpuwarden.FleetBatch
		util := make([]float64, benchGPUs)
		for g := range util {
			util[g] = float64(g * 10)
		}
		for m := range benchMinutes {
			fb.Minutes = append(fb.Minutes, FleetMinute(time.Duration(r*benchMinutes+m)*time.Minute, util...))
		}
		for e := range benchEvents {
			seq := int64(r*benchEvents + e + 1)
			fb.Events = append(fb.Events, gpuwarden.Event{Seq: seq, Time: FleetStart.Add(time.Duration(seq) * time.Second),
				Kind: "idle", Severity: gpuwarden.SeverityInfo, Message: "idle for 10 minutes", Data: map[string]string{"gpu": "0"}})
		}
		return benchNodeID(node), fb
	}
	run := func(b *testing.B, writers int) {
		lat := newLatencies()
		b.ResetTimer()
		start := time.Now()
		parallel(b, writers, func() error {
			node, fb := batch(int(round.Add(1) - 1))
			t := time.Now()
			res, err := f.Ingest(ctx, node, fb)
			if err != nil {
				return err
			}
			if res.Minutes != benchMinutes {
				return fmt.Errorf("Ingest(%s) = %+v, want %d new minutes", node, res, benchMinutes)
			}
			lat.add(time.Since(t))
			return nil
		})
		elapsed := time.Since(start)
		b.StopTimer()
		b.ReportMetric(float64(b.N*benchMinutes)/elapsed.Seconds(), "minutes/s")
		lat.report(b)
	}
	b.Run("serial", func(b *testing.B) { run(b, 1) })
	b.Run("parallel", func(b *testing.B) { run(b, benchWriters) })
}

func benchNodeID(i int) string { return fmt.Sprintf("node-%04d", i) }

func registerBenchNodes(b *testing.B, f gpuwarden.Fleet) {
	b.Helper()
	for i := range benchNodes {
		n := FleetNode(benchNodeID(i), "bench", "agent", benchNodePrice, benchGPUs)
		if _, err := f.RegisterNode(context.Background(), n); err != nil {
			b.Fatal(err)
		}
	}
}

// parallel runs op b.N times over writers goroutines, failing the
// benchmark on the first error.
func parallel(b *testing.B, writers int, op func() error) {
	b.Helper()
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := op(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// latencies collects the time each operation took.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func newLatencies() *latencies { return &latencies{} }

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// report adds the p50 and p99 latencies, in milliseconds, to b's metrics.
func (l *latencies) report(b *testing.B) {
	if len(l.d) == 0 {
		return
	}
	sort.Slice(l.d, func(i, j int) bool { return l.d[i] < l.d[j] })
	at := func(q float64) float64 {
		return float64(l.d[int(q*float64(len(l.d)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}
