package sqlite

import (
	"context"
	"database/sql"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/ledgerrow"
)

// Retention of the two resolutions.
const (
	// FullResolution is how long RecordSample's rows are kept as they are.
	FullResolution = time.Hour
	// RollupRetention is how long the one-minute averages are kept.
	RollupRetention = 30 * 24 * time.Hour
)

// RecordSample stores one tick in one transaction: a host row and a row per
// GPU, keyed by the tick's time truncated to the second. A second tick in
// the same second replaces the first; NaN and ±Inf are stored as 0 because
// SQLite stores NaN as NULL and averages cannot carry them.
func (l *Ledger) RecordSample(ctx context.Context, s gpuwarden.NodeSample) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if s.Time.IsZero() {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "record sample: the sample has no time")
	}
	ms := s.Time.Unix() * 1000
	h := s.Host
	procs, err := ledgerrow.JSONText(h.Processes, len(h.Processes) == 0)
	if err != nil {
		return l.wrap("record sample", err)
	}
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return l.wrap("record sample", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.StmtContext(ctx, l.insertHost).ExecContext(ctx, ms,
		ledgerrow.Finite(h.CPUPercent), ledgerrow.FloatsText(h.CPUPerCore), ledgerrow.Finite(h.IOWaitPercent), ledgerrow.Finite(h.Load1),
		int64(h.MemUsedBytes), int64(h.MemTotalBytes),
		ledgerrow.Finite(h.DiskReadBps), ledgerrow.Finite(h.DiskWriteBps), ledgerrow.Finite(h.NetRxBps), ledgerrow.Finite(h.NetTxBps),
		int64(h.Sessions), procs); err != nil {
		return l.wrap("record sample", err)
	}
	if len(s.GPUs) > 0 {
		st := tx.StmtContext(ctx, l.insertGPU)
		for _, g := range s.GPUs {
			throttle, err := ledgerrow.JSONText(g.ThrottleReasons, len(g.ThrottleReasons) == 0)
			if err != nil {
				return l.wrap("record sample", err)
			}
			gprocs, err := ledgerrow.JSONText(g.Processes, len(g.Processes) == 0)
			if err != nil {
				return l.wrap("record sample", err)
			}
			if _, err := st.ExecContext(ctx, ms, int64(g.Index),
				ledgerrow.Finite(g.UtilPercent), ledgerrow.Finite(g.MemUtilPercent), int64(g.MemUsedBytes), int64(g.MemTotalBytes),
				ledgerrow.Finite(g.PowerWatts), ledgerrow.Finite(g.TempC), int64(g.SMClockMHz), int64(g.MemClockMHz),
				throttle, gprocs); err != nil {
				return l.wrap("record sample", err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return l.wrap("record sample", err)
	}
	return nil
}

// Samples returns the ticks at or after since, oldest first: the one-minute
// averages of the minutes before the oldest full-resolution tick, then every
// full-resolution tick. An average carries its minute's start as its time
// (and as its host's and GPUs' time), and is returned when that start is at
// or after since.
func (l *Ledger) Samples(ctx context.Context, since time.Time) ([]gpuwarden.NodeSample, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	sinceMs := since.UnixMilli()
	// One read transaction, so that a Compact between the queries can
	// neither hide a minute nor return it twice.
	tx, err := l.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, l.wrap("read samples", err)
	}
	defer func() { _ = tx.Rollback() }()
	var first sql.NullInt64
	if err := tx.QueryRowContext(ctx, "SELECT MIN(time_ms) FROM host_samples WHERE time_ms >= $1", sinceMs).Scan(&first); err != nil {
		return nil, l.wrap("read samples", err)
	}
	until := int64(math.MaxInt64)
	if first.Valid {
		until = first.Int64
	}
	out, err := readTicks(ctx, tx,
		"SELECT minute_ms, "+strings.Join(ledgerrow.HostCols, ", ")+" FROM host_rollups WHERE minute_ms >= $1 AND minute_ms < $2 ORDER BY minute_ms",
		"SELECT minute_ms, gpu, "+strings.Join(ledgerrow.GPUCols, ", ")+" FROM gpu_rollups WHERE minute_ms >= $1 AND minute_ms < $2 ORDER BY minute_ms, gpu",
		sinceMs, until, nil)
	if err != nil {
		return nil, l.wrap("read samples", err)
	}
	if first.Valid {
		out, err = readTicks(ctx, tx,
			"SELECT time_ms, "+strings.Join(ledgerrow.HostCols, ", ")+" FROM host_samples WHERE time_ms >= $1 AND time_ms < $2 ORDER BY time_ms",
			"SELECT time_ms, gpu, "+strings.Join(ledgerrow.GPUCols, ", ")+" FROM gpu_samples WHERE time_ms >= $1 AND time_ms < $2 ORDER BY time_ms, gpu",
			first.Int64, math.MaxInt64, out)
		if err != nil {
			return nil, l.wrap("read samples", err)
		}
	}
	return out, nil
}

// readTicks appends the ticks of one resolution in [from, until): the host
// rows, and the GPU rows matched to them by time. Both queries are ordered
// by time, so one walk joins them.
func readTicks(ctx context.Context, tx *sql.Tx, hostQuery, gpuQuery string, from, until int64, out []gpuwarden.NodeSample) ([]gpuwarden.NodeSample, error) {
	start := len(out)
	rows, err := tx.QueryContext(ctx, hostQuery, from, until)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var r ledgerrow.HostRow
		if err := rows.Scan(append([]any{&r.MS}, r.Dest()...)...); err != nil {
			rows.Close()
			return nil, err
		}
		h, err := r.Sample()
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, gpuwarden.NodeSample{Time: h.Time, Host: h})
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = tx.QueryContext(ctx, gpuQuery, from, until)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	i := start
	for rows.Next() {
		var r ledgerrow.GPURow
		if err := rows.Scan(append([]any{&r.MS, &r.GPU}, r.Dest()...)...); err != nil {
			return nil, err
		}
		for i < len(out) && out[i].Time.UnixMilli() < r.MS {
			i++
		}
		if i == len(out) || out[i].Time.UnixMilli() != r.MS {
			// A GPU row without its tick cannot be written by this package
			// (both go in one transaction); skip it rather than invent a host.
			continue
		}
		g, err := r.Telemetry()
		if err != nil {
			return nil, err
		}
		out[i].GPUs = append(out[i].GPUs, g)
	}
	return out, rows.Err()
}

// vacuumMinFreePages is the smallest free list worth handing back: below it,
// the pages freed by one Compact are reused by the next hour's samples, and
// shrinking the file only to grow it again is wasted writes.
const vacuumMinFreePages = 256

// Compact, in one transaction, rolls the full-resolution ticks of every
// whole minute that ended an hour or more before now into one-minute
// averages, deletes those ticks, and deletes the averages that started more
// than 30 days before now. Numeric fields are averaged, temperature and
// clocks included (over one minute the mean of a slow reading is close
// enough to its peak); Sessions keeps the minute's maximum so that a login
// never averages away to an idle minute; process, throttle-reason and
// per-core lists become the union, the union, and the per-core mean. A
// minute that already has an average (a late tick) is merged with it,
// weighted by the ticks each holds, so running Compact twice changes
// nothing. Afterwards, when a quarter of the file is free pages (a backlog
// just went), it runs PRAGMA incremental_vacuum so the file shrinks.
func (l *Ledger) Compact(ctx context.Context, now time.Time) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	// Whole minutes only: a minute compacted in two parts would need the
	// merge below every time instead of only for late ticks.
	cutoff := ledgerrow.FloorMinute(now.Add(-FullResolution).UnixMilli())
	prune := now.Add(-RollupRetention).UnixMilli()
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return l.wrap("compact samples", err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := compact(ctx, tx, cutoff, prune); err != nil {
		return l.wrap("compact samples", err)
	}
	if err := tx.Commit(); err != nil {
		return l.wrap("compact samples", err)
	}
	if err := l.vacuum(ctx); err != nil {
		return l.wrap("compact samples", err)
	}
	return nil
}

func compact(ctx context.Context, tx *sql.Tx, cutoff, prune int64) error {
	// Ticks that would only be averaged into minutes pruned below.
	for _, q := range []string{
		"DELETE FROM host_samples WHERE time_ms < $1",
		"DELETE FROM gpu_samples WHERE time_ms < $1",
	} {
		if _, err := tx.ExecContext(ctx, q, ledgerrow.FloorMinute(prune)); err != nil {
			return err
		}
	}
	hosts, err := rollHosts(ctx, tx, cutoff)
	if err != nil {
		return err
	}
	gpus, err := rollGPUs(ctx, tx, cutoff)
	if err != nil {
		return err
	}
	if err := writeHostRollups(ctx, tx, hosts); err != nil {
		return err
	}
	if err := writeGPURollups(ctx, tx, gpus); err != nil {
		return err
	}
	for _, d := range []struct {
		query string
		arg   int64
	}{
		{"DELETE FROM host_samples WHERE time_ms < $1", cutoff},
		{"DELETE FROM gpu_samples WHERE time_ms < $1", cutoff},
		{"DELETE FROM host_rollups WHERE minute_ms < $1", prune},
		{"DELETE FROM gpu_rollups WHERE minute_ms < $1", prune},
	} {
		if _, err := tx.ExecContext(ctx, d.query, d.arg); err != nil {
			return err
		}
	}
	return nil
}

// rollHosts averages the host ticks before cutoff by minute. It streams the
// rows and keeps one minute's sums at a time, so a day of backlog costs a
// day of minutes, not a day of ticks.
func rollHosts(ctx context.Context, tx *sql.Tx, cutoff int64) ([]*ledgerrow.HostAcc, error) {
	rows, err := tx.QueryContext(ctx, "SELECT time_ms, "+strings.Join(ledgerrow.HostCols, ", ")+
		" FROM host_samples WHERE time_ms < $1 ORDER BY time_ms", cutoff)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*ledgerrow.HostAcc
	for rows.Next() {
		r := ledgerrow.HostRow{N: 1}
		if err := rows.Scan(append([]any{&r.MS}, r.Dest()...)...); err != nil {
			return nil, err
		}
		m := ledgerrow.FloorMinute(r.MS)
		if len(out) == 0 || out[len(out)-1].Minute != m {
			out = append(out, ledgerrow.NewHostAcc(m))
		}
		if err := out[len(out)-1].Add(r); err != nil {
			return nil, err
		}
	}
	return out, rows.Err()
}

// rollGPUs averages the GPU ticks before cutoff by minute and GPU.
func rollGPUs(ctx context.Context, tx *sql.Tx, cutoff int64) ([]*ledgerrow.GPUAcc, error) {
	rows, err := tx.QueryContext(ctx, "SELECT time_ms, gpu, "+strings.Join(ledgerrow.GPUCols, ", ")+
		" FROM gpu_samples WHERE time_ms < $1 ORDER BY time_ms, gpu", cutoff)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*ledgerrow.GPUAcc
	minute := map[int64]*ledgerrow.GPUAcc{} // the current minute's GPUs
	flush := func() {
		start := len(out)
		for _, a := range minute {
			out = append(out, a)
		}
		sort.Slice(out[start:], func(i, j int) bool { return out[start+i].GPU < out[start+j].GPU })
		clear(minute)
	}
	cur := int64(math.MinInt64)
	for rows.Next() {
		r := ledgerrow.GPURow{N: 1}
		if err := rows.Scan(append([]any{&r.MS, &r.GPU}, r.Dest()...)...); err != nil {
			return nil, err
		}
		if m := ledgerrow.FloorMinute(r.MS); m != cur {
			flush()
			cur = m
		}
		a := minute[r.GPU]
		if a == nil {
			a = ledgerrow.NewGPUAcc(cur, r.GPU)
			minute[r.GPU] = a
		}
		if err := a.Add(r); err != nil {
			return nil, err
		}
	}
	flush()
	return out, rows.Err()
}

// writeHostRollups merges the new averages with any already stored for
// their minutes, then writes them.
func writeHostRollups(ctx context.Context, tx *sql.Tx, accs []*ledgerrow.HostAcc) error {
	if len(accs) == 0 {
		return nil
	}
	rows, err := tx.QueryContext(ctx, "SELECT minute_ms, samples, "+strings.Join(ledgerrow.HostCols, ", ")+
		" FROM host_rollups WHERE minute_ms >= $1 AND minute_ms <= $2 ORDER BY minute_ms",
		accs[0].Minute, accs[len(accs)-1].Minute)
	if err != nil {
		return err
	}
	i := 0
	for rows.Next() {
		var r ledgerrow.HostRow
		if err := rows.Scan(append([]any{&r.MS, &r.N}, r.Dest()...)...); err != nil {
			rows.Close()
			return err
		}
		for i < len(accs) && accs[i].Minute < r.MS {
			i++
		}
		if i < len(accs) && accs[i].Minute == r.MS {
			if err := accs[i].Add(r); err != nil {
				rows.Close()
				return err
			}
		}
	}
	if err := rows.Close(); err != nil {
		return err
	}
	if err := rows.Err(); err != nil {
		return err
	}
	st, err := tx.PrepareContext(ctx, ledgerrow.UpsertSQL("host_rollups", []string{"minute_ms"}, append([]string{"samples"}, ledgerrow.HostCols...)))
	if err != nil {
		return err
	}
	defer st.Close()
	for _, a := range accs {
		r := a.Row()
		if _, err := st.ExecContext(ctx, append([]any{r.MS, r.N}, r.Args()...)...); err != nil {
			return err
		}
	}
	return nil
}

// writeGPURollups merges the new averages with any already stored for
// their minutes and GPUs, then writes them.
func writeGPURollups(ctx context.Context, tx *sql.Tx, accs []*ledgerrow.GPUAcc) error {
	if len(accs) == 0 {
		return nil
	}
	rows, err := tx.QueryContext(ctx, "SELECT minute_ms, gpu, samples, "+strings.Join(ledgerrow.GPUCols, ", ")+
		" FROM gpu_rollups WHERE minute_ms >= $1 AND minute_ms <= $2 ORDER BY minute_ms, gpu",
		accs[0].Minute, accs[len(accs)-1].Minute)
	if err != nil {
		return err
	}
	i := 0
	less := func(a *ledgerrow.GPUAcc, r *ledgerrow.GPURow) bool {
		return a.Minute < r.MS || (a.Minute == r.MS && a.GPU < r.GPU)
	}
	for rows.Next() {
		var r ledgerrow.GPURow
		if err := rows.Scan(append([]any{&r.MS, &r.GPU, &r.N}, r.Dest()...)...); err != nil {
			rows.Close()
			return err
		}
		for i < len(accs) && less(accs[i], &r) {
			i++
		}
		if i < len(accs) && accs[i].Minute == r.MS && accs[i].GPU == r.GPU {
			if err := accs[i].Add(r); err != nil {
				rows.Close()
				return err
			}
		}
	}
	if err := rows.Close(); err != nil {
		return err
	}
	if err := rows.Err(); err != nil {
		return err
	}
	st, err := tx.PrepareContext(ctx, ledgerrow.UpsertSQL("gpu_rollups", []string{"minute_ms", "gpu"}, append([]string{"samples"}, ledgerrow.GPUCols...)))
	if err != nil {
		return err
	}
	defer st.Close()
	for _, a := range accs {
		r := a.Row()
		if _, err := st.ExecContext(ctx, append([]any{r.MS, r.GPU, r.N}, r.Args()...)...); err != nil {
			return err
		}
	}
	return nil
}

// vacuum hands free pages back to the file system once they are a quarter
// of the file. PRAGMAs are SQLite's own; a PostgreSQL ledger leaves this to
// autovacuum.
func (l *Ledger) vacuum(ctx context.Context) error {
	var free, total int64
	if err := l.db.QueryRowContext(ctx, "PRAGMA freelist_count").Scan(&free); err != nil {
		return err
	}
	if err := l.db.QueryRowContext(ctx, "PRAGMA page_count").Scan(&total); err != nil {
		return err
	}
	if free < vacuumMinFreePages || free*4 < total {
		return nil
	}
	// incremental_vacuum returns a row per page it frees; drain them all,
	// since stopping early would stop the vacuum.
	rows, err := l.db.QueryContext(ctx, "PRAGMA incremental_vacuum")
	if err != nil {
		return err
	}
	for rows.Next() {
	}
	if err := rows.Close(); err != nil {
		return err
	}
	if err := rows.Err(); err != nil {
		return err
	}
	// The vacuum went through the WAL; truncate it too, or the space only
	// moves from one file to the other.
	_, err = l.db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
	return err
}
