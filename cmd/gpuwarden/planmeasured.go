package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/catalog"
	"github.com/gpuwarden/gpuwarden/plan"
	"github.com/gpuwarden/gpuwarden/report"
	"github.com/gpuwarden/gpuwarden/sqlite"
)

// measuredEventsMax bounds the progress events plan reads for
// measurements: a year of them every few minutes.
const measuredEventsMax = 200_000

// minMeasuredSpan is the shortest span of progress a throughput is read
// from: below it, start-up and the first step's compile dominate.
const minMeasuredSpan = 5 * time.Minute

// readMeasurements reads the throughputs that runs on this box recorded
// with `gpuwarden progress UNIT COUNT --gpu MODEL --gpus N`: per card,
// count and unit, the units done after the first event over the time to
// the last. A missing ledger is no measurement, not an error.
func readMeasurements(ctx context.Context, dataDir string) ([]plan.Measurement, error) {
	path := filepath.Join(dataDir, "ledger.db")
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("read measured throughput: %w", err)
	}
	l, err := sqlite.Open(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("read measured throughput: %w", err)
	}
	defer l.Close()
	events, err := l.EventsOfKind(ctx, report.KindProgress, measuredEventsMax)
	if err != nil {
		return nil, fmt.Errorf("read measured throughput: %w", err)
	}
	return measurementsOf(events, path), nil
}

// measurementsOf turns progress events into throughputs; events without a
// GPU, with a bad count or a span under minMeasuredSpan are left out.
func measurementsOf(events []gpuwarden.Event, source string) []plan.Measurement {
	type key struct {
		gpu  string
		gpus float64
		unit string
	}
	type span struct {
		first, last time.Time
		total       float64 // units after the first event
		n           int
	}
	slices.SortStableFunc(events, func(a, b gpuwarden.Event) int { return a.Time.Compare(b.Time) })
	spans := map[key]*span{}
	var order []key
	for _, e := range events {
		if e.Kind != report.KindProgress || e.Data["gpu"] == "" {
			continue
		}
		count, err := strconv.ParseFloat(e.Data["count"], 64)
		gpus, gerr := strconv.ParseFloat(e.Data["gpus"], 64)
		if err != nil || count < 0 || gerr != nil || gpus <= 0 {
			continue
		}
		// progress writes the canonical name; naming it again here keeps a
		// ledger older than this binary's GPU table on today's names.
		k := key{catalog.CanonicalGPU(e.Data["gpu"], 0), gpus, e.Data["unit"]}
		s := spans[k]
		if s == nil {
			spans[k] = &span{first: e.Time, last: e.Time, n: 1}
			order = append(order, k)
			continue
		}
		s.total += count
		s.last = e.Time
		s.n++
	}
	var out []plan.Measurement
	for _, k := range order {
		s := spans[k]
		d := s.last.Sub(s.first)
		if s.n < 2 || d < minMeasuredSpan || s.total <= 0 {
			continue
		}
		out = append(out, plan.Measurement{GPU: k.gpu, GPUs: k.gpus, Unit: k.unit,
			PerHour: s.total / d.Hours(), At: s.last, Source: source})
	}
	return out
}
