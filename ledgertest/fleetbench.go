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

// BenchStorageGrowth measures what a day of a 1-GPU node adds to a fleet
// database (budget: ≤ 100 KB per node-day): storageNodes nodes each ship
// storageDays days of minutes as agents do, 10 minutes a batch, with a
// heartbeat per batch. open gives a fresh fleet and how to size its
// storage (size runs once with the fleet open, after registration, and
// once after it is closed); the metric is the growth per node-day.
func BenchStorageGrowth(b *testing.B, open func(b *testing.B) (f gpuwarden.Fleet, size func() int64)) {
	for range b.N {
		f, size := open(b)
		start := time.Now().UTC().Truncate(time.Hour).Add(-storageDays * 24 * time.Hour)
		ids := registerStorageNodes(b, f, start)
		before := size()
		shipStorageDays(b, f, ids, start)
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
		after := size()
		b.ReportMetric(float64(after-before)/float64(storageNodes*storageDays)/1000, "KB/node-day")
	}
}

const (
	storageNodes = 20
	storageDays  = 3
)

func registerStorageNodes(b *testing.B, f gpuwarden.Fleet, at time.Time) []string {
	b.Helper()
	ctx := context.Background()
	ids := make([]string, storageNodes)
	for i := range ids {
		// A node ID as burn-in makes one: host plus a GPU UUID.
		ids[i] = fmt.Sprintf("gpu-box-%03d-GPU-6f2c1e8a-%04x-4e1b-9c3d-1f2e3d4c5b6a", i, i)
		n := gpuwarden.Node{ID: ids[i], Project: "p", Hostname: fmt.Sprintf("gpu-box-%03d", i), TokenID: "t",
			Registered: at, Labels: gpuwarden.NodeLabels{HourlyPrice: 3_500_000, Currency: "USD"},
			GPUs: []gpuwarden.GPU{{Index: 0, Model: "H100"}}}
		if _, err := f.RegisterNode(ctx, n); err != nil {
			b.Fatal(err)
		}
	}
	return ids
}

// shipStorageDays ships every node's minutes from start, in batches of 10.
func shipStorageDays(b *testing.B, f gpuwarden.Fleet, ids []string, start time.Time) {
	b.Helper()
	ctx := context.Background()
	for m := 0; m < storageDays*24*60; m += 10 {
		for i, id := range ids {
			var batch gpuwarden.FleetBatch
			for k := range 10 {
				batch.Minutes = append(batch.Minutes, gpuwarden.NodeMinute{Minute: start.Add(time.Duration(m+k) * time.Minute),
					Samples: 60, CPUPercent: 12.5 + float64(k), GPUUtil: []float64{float64((m + k + i) % 101)},
					GPUMemPercent: []float64{41.25}})
			}
			if _, err := f.Ingest(ctx, id, batch); err != nil {
				b.Fatal(err)
			}
		}
		at := start.Add(time.Duration(m+10) * time.Minute)
		hbs := make([]gpuwarden.Heartbeat, len(ids))
		for i, id := range ids {
			hbs[i] = gpuwarden.Heartbeat{Node: id, Time: at, State: gpuwarden.NodeRunning, GPUUtil: 50}
		}
		if err := f.RecordHeartbeats(ctx, at, hbs); err != nil {
			b.Fatal(err)
		}
	}
}
