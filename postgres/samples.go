package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpuwarden/gpuwarden"
)

// Retention of the two resolutions.
const (
	// FullResolution is how long RecordSample's rows are kept as they are.
	FullResolution = time.Hour
	// RollupRetention is how long the one-minute averages are kept.
	RollupRetention = 30 * 24 * time.Hour
)

const minuteMs = int64(time.Minute / time.Millisecond)

// hostCols and gpuCols are the value columns of the sample and rollup tables,
// in the order of hostRow.dest and gpuRow.dest.
var (
	hostCols = []string{"cpu_percent", "cpu_per_core", "iowait_percent", "load1",
		"mem_used_bytes", "mem_total_bytes", "disk_read_bps", "disk_write_bps",
		"net_rx_bps", "net_tx_bps", "sessions", "processes"}
	gpuCols = []string{"util_percent", "mem_util_percent", "mem_used_bytes", "mem_total_bytes",
		"power_w", "temp_c", "sm_clock_mhz", "mem_clock_mhz", "throttle_reasons", "processes"}
)

// insertHostSQL and insertGPUSQL write one tick's rows.
var (
	insertHostSQL = upsertSQL("host_samples", []string{"time_ms"}, hostCols)
	insertGPUSQL  = upsertSQL("gpu_samples", []string{"time_ms", "gpu"}, gpuCols)
)

// hostRow is a row of host_samples or host_rollups as stored.
type hostRow struct {
	ms, n                      int64
	cpu, iowait, load1         float64
	memUsed, memTotal          int64
	diskR, diskW, netRx, netTx float64
	sessions                   int64
	perCore, procs             sql.NullString
}

func (r *hostRow) dest() []any {
	return []any{&r.cpu, &r.perCore, &r.iowait, &r.load1, &r.memUsed, &r.memTotal,
		&r.diskR, &r.diskW, &r.netRx, &r.netTx, &r.sessions, &r.procs}
}

func (r *hostRow) args() []any {
	return []any{r.cpu, nullable(r.perCore), r.iowait, r.load1, r.memUsed, r.memTotal,
		r.diskR, r.diskW, r.netRx, r.netTx, r.sessions, nullable(r.procs)}
}

// gpuRow is a row of gpu_samples or gpu_rollups as stored.
type gpuRow struct {
	ms, gpu, n        int64
	util, memUtil     float64
	memUsed, memTotal int64
	power, temp       float64
	sm, memClock      int64
	throttle, procs   sql.NullString
}

func (r *gpuRow) dest() []any {
	return []any{&r.util, &r.memUtil, &r.memUsed, &r.memTotal, &r.power, &r.temp,
		&r.sm, &r.memClock, &r.throttle, &r.procs}
}

func (r *gpuRow) args() []any {
	return []any{r.util, r.memUtil, r.memUsed, r.memTotal, r.power, r.temp,
		r.sm, r.memClock, nullable(r.throttle), nullable(r.procs)}
}

// RecordSample stores one tick in one transaction: a host row and a row per
// GPU, keyed by the tick's time truncated to the second. A second tick in
// the same second replaces the first; NaN and ±Inf are stored as 0, as the
// SQLite ledger stores them, because averages cannot carry them.
func (l *Ledger) RecordSample(ctx context.Context, s gpuwarden.NodeSample) error {
	if s.Time.IsZero() {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "record sample: the sample has no time")
	}
	ms := s.Time.Unix() * 1000
	h := s.Host
	procs, err := jsonText(h.Processes, len(h.Processes) == 0)
	if err != nil {
		return l.wrap("record sample", err)
	}
	// One batch: a tick is one round trip however many GPUs it has.
	var b pgx.Batch
	b.Queue(insertHostSQL, ms,
		finite(h.CPUPercent), floatsText(h.CPUPerCore), finite(h.IOWaitPercent), finite(h.Load1),
		int64(h.MemUsedBytes), int64(h.MemTotalBytes),
		finite(h.DiskReadBps), finite(h.DiskWriteBps), finite(h.NetRxBps), finite(h.NetTxBps),
		int64(h.Sessions), procs)
	for _, g := range s.GPUs {
		throttle, err := jsonText(g.ThrottleReasons, len(g.ThrottleReasons) == 0)
		if err != nil {
			return l.wrap("record sample", err)
		}
		gprocs, err := jsonText(g.Processes, len(g.Processes) == 0)
		if err != nil {
			return l.wrap("record sample", err)
		}
		b.Queue(insertGPUSQL, ms, int64(g.Index),
			finite(g.UtilPercent), finite(g.MemUtilPercent), int64(g.MemUsedBytes), int64(g.MemTotalBytes),
			finite(g.PowerWatts), finite(g.TempC), int64(g.SMClockMHz), int64(g.MemClockMHz),
			throttle, gprocs)
	}
	if err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		return tx.SendBatch(ctx, &b).Close()
	}); err != nil {
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
	sinceMs := since.UnixMilli()
	// One REPEATABLE READ transaction, so that every query sees one
	// snapshot and a Compact between them can neither hide a minute nor
	// return it twice (READ COMMITTED takes a snapshot per statement).
	tx, err := l.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, l.wrap("read samples", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var first sql.NullInt64
	if err := tx.QueryRow(ctx, "SELECT MIN(time_ms) FROM host_samples WHERE time_ms >= $1", sinceMs).Scan(&first); err != nil {
		return nil, l.wrap("read samples", err)
	}
	until := int64(math.MaxInt64)
	if first.Valid {
		until = first.Int64
	}
	out, err := readTicks(ctx, tx,
		"SELECT minute_ms, "+strings.Join(hostCols, ", ")+" FROM host_rollups WHERE minute_ms >= $1 AND minute_ms < $2 ORDER BY minute_ms",
		"SELECT minute_ms, gpu, "+strings.Join(gpuCols, ", ")+" FROM gpu_rollups WHERE minute_ms >= $1 AND minute_ms < $2 ORDER BY minute_ms, gpu",
		sinceMs, until, nil)
	if err != nil {
		return nil, l.wrap("read samples", err)
	}
	if first.Valid {
		out, err = readTicks(ctx, tx,
			"SELECT time_ms, "+strings.Join(hostCols, ", ")+" FROM host_samples WHERE time_ms >= $1 AND time_ms < $2 ORDER BY time_ms",
			"SELECT time_ms, gpu, "+strings.Join(gpuCols, ", ")+" FROM gpu_samples WHERE time_ms >= $1 AND time_ms < $2 ORDER BY time_ms, gpu",
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
func readTicks(ctx context.Context, tx pgx.Tx, hostQuery, gpuQuery string, from, until int64, out []gpuwarden.NodeSample) ([]gpuwarden.NodeSample, error) {
	start := len(out)
	rows, err := tx.Query(ctx, hostQuery, from, until)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var r hostRow
		if err := rows.Scan(append([]any{&r.ms}, r.dest()...)...); err != nil {
			rows.Close()
			return nil, err
		}
		h, err := r.sample()
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, gpuwarden.NodeSample{Time: h.Time, Host: h})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = tx.Query(ctx, gpuQuery, from, until)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	i := start
	for rows.Next() {
		var r gpuRow
		if err := rows.Scan(append([]any{&r.ms, &r.gpu}, r.dest()...)...); err != nil {
			return nil, err
		}
		for i < len(out) && out[i].Time.UnixMilli() < r.ms {
			i++
		}
		if i == len(out) || out[i].Time.UnixMilli() != r.ms {
			// A GPU row without its tick cannot be written by this package
			// (both go in one transaction); skip it rather than invent a host.
			continue
		}
		g, err := r.telemetry()
		if err != nil {
			return nil, err
		}
		out[i].GPUs = append(out[i].GPUs, g)
	}
	return out, rows.Err()
}

func (r *hostRow) sample() (gpuwarden.HostSample, error) {
	h := gpuwarden.HostSample{
		Time:          time.UnixMilli(r.ms).UTC(),
		CPUPercent:    r.cpu,
		IOWaitPercent: r.iowait,
		Load1:         r.load1,
		MemUsedBytes:  uint64(r.memUsed),
		MemTotalBytes: uint64(r.memTotal),
		DiskReadBps:   r.diskR,
		DiskWriteBps:  r.diskW,
		NetRxBps:      r.netRx,
		NetTxBps:      r.netTx,
		Sessions:      int(r.sessions),
	}
	if err := decode(r.perCore, &h.CPUPerCore); err != nil {
		return h, fmt.Errorf("host sample at %d: cpu_per_core: %w", r.ms, err)
	}
	if err := decode(r.procs, &h.Processes); err != nil {
		return h, fmt.Errorf("host sample at %d: processes: %w", r.ms, err)
	}
	return h, nil
}

func (r *gpuRow) telemetry() (gpuwarden.Telemetry, error) {
	g := gpuwarden.Telemetry{
		Index:          int(r.gpu),
		Time:           time.UnixMilli(r.ms).UTC(),
		UtilPercent:    r.util,
		MemUtilPercent: r.memUtil,
		MemUsedBytes:   uint64(r.memUsed),
		MemTotalBytes:  uint64(r.memTotal),
		PowerWatts:     r.power,
		TempC:          r.temp,
		SMClockMHz:     int(r.sm),
		MemClockMHz:    int(r.memClock),
	}
	if err := decode(r.throttle, &g.ThrottleReasons); err != nil {
		return g, fmt.Errorf("gpu %d sample at %d: throttle_reasons: %w", r.gpu, r.ms, err)
	}
	if err := decode(r.procs, &g.Processes); err != nil {
		return g, fmt.Errorf("gpu %d sample at %d: processes: %w", r.gpu, r.ms, err)
	}
	return g, nil
}

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
// nothing. Freed space is left to autovacuum.
func (l *Ledger) Compact(ctx context.Context, now time.Time) error {
	// Whole minutes only: a minute compacted in two parts would need the
	// merge below every time instead of only for late ticks.
	cutoff := floorMinute(now.Add(-FullResolution).UnixMilli())
	prune := now.Add(-RollupRetention).UnixMilli()
	if err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		// SQLite has one writer; the lock makes it so here for the length
		// of a Compact. Without it a tick written between the read and the
		// delete below would be deleted unaveraged, and two Compacts would
		// both fold the same ticks into a minute. EXCLUSIVE still lets
		// Samples read.
		if _, err := tx.Exec(ctx, "LOCK TABLE host_samples, gpu_samples, host_rollups, gpu_rollups IN EXCLUSIVE MODE"); err != nil {
			return err
		}
		return compact(ctx, tx, cutoff, prune)
	}); err != nil {
		return l.wrap("compact samples", err)
	}
	return nil
}

func compact(ctx context.Context, tx pgx.Tx, cutoff, prune int64) error {
	// Ticks that would only be averaged into minutes pruned below.
	for _, q := range []string{
		"DELETE FROM host_samples WHERE time_ms < $1",
		"DELETE FROM gpu_samples WHERE time_ms < $1",
	} {
		if _, err := tx.Exec(ctx, q, floorMinute(prune)); err != nil {
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
		if _, err := tx.Exec(ctx, d.query, d.arg); err != nil {
			return err
		}
	}
	return nil
}

// rollHosts averages the host ticks before cutoff by minute. It streams the
// rows and keeps one minute's sums at a time, so a day of backlog costs a
// day of minutes, not a day of ticks.
func rollHosts(ctx context.Context, tx pgx.Tx, cutoff int64) ([]*hostAcc, error) {
	rows, err := tx.Query(ctx, "SELECT time_ms, "+strings.Join(hostCols, ", ")+
		" FROM host_samples WHERE time_ms < $1 ORDER BY time_ms", cutoff)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*hostAcc
	for rows.Next() {
		r := hostRow{n: 1}
		if err := rows.Scan(append([]any{&r.ms}, r.dest()...)...); err != nil {
			return nil, err
		}
		m := floorMinute(r.ms)
		if len(out) == 0 || out[len(out)-1].minute != m {
			out = append(out, &hostAcc{minute: m, procs: map[string]struct{}{}})
		}
		if err := out[len(out)-1].add(r); err != nil {
			return nil, err
		}
	}
	return out, rows.Err()
}

// rollGPUs averages the GPU ticks before cutoff by minute and GPU.
func rollGPUs(ctx context.Context, tx pgx.Tx, cutoff int64) ([]*gpuAcc, error) {
	rows, err := tx.Query(ctx, "SELECT time_ms, gpu, "+strings.Join(gpuCols, ", ")+
		" FROM gpu_samples WHERE time_ms < $1 ORDER BY time_ms, gpu", cutoff)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*gpuAcc
	minute := map[int64]*gpuAcc{} // the current minute's GPUs
	flush := func() {
		start := len(out)
		for _, a := range minute {
			out = append(out, a)
		}
		sort.Slice(out[start:], func(i, j int) bool { return out[start+i].gpu < out[start+j].gpu })
		clear(minute)
	}
	cur := int64(math.MinInt64)
	for rows.Next() {
		r := gpuRow{n: 1}
		if err := rows.Scan(append([]any{&r.ms, &r.gpu}, r.dest()...)...); err != nil {
			return nil, err
		}
		if m := floorMinute(r.ms); m != cur {
			flush()
			cur = m
		}
		a := minute[r.gpu]
		if a == nil {
			a = &gpuAcc{minute: cur, gpu: r.gpu, throttle: map[string]struct{}{}, procs: map[int]gpuwarden.GPUProcess{}}
			minute[r.gpu] = a
		}
		if err := a.add(r); err != nil {
			return nil, err
		}
	}
	flush()
	return out, rows.Err()
}

// writeHostRollups merges the new averages with any already stored for
// their minutes, then writes them.
func writeHostRollups(ctx context.Context, tx pgx.Tx, accs []*hostAcc) error {
	if len(accs) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, "SELECT minute_ms, samples, "+strings.Join(hostCols, ", ")+
		" FROM host_rollups WHERE minute_ms >= $1 AND minute_ms <= $2 ORDER BY minute_ms",
		accs[0].minute, accs[len(accs)-1].minute)
	if err != nil {
		return err
	}
	i := 0
	for rows.Next() {
		var r hostRow
		if err := rows.Scan(append([]any{&r.ms, &r.n}, r.dest()...)...); err != nil {
			rows.Close()
			return err
		}
		for i < len(accs) && accs[i].minute < r.ms {
			i++
		}
		if i < len(accs) && accs[i].minute == r.ms {
			if err := accs[i].add(r); err != nil {
				rows.Close()
				return err
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	query := upsertSQL("host_rollups", []string{"minute_ms"}, append([]string{"samples"}, hostCols...))
	for _, a := range accs {
		r := a.row()
		if _, err := tx.Exec(ctx, query, append([]any{r.ms, r.n}, r.args()...)...); err != nil {
			return err
		}
	}
	return nil
}

// writeGPURollups merges the new averages with any already stored for
// their minutes and GPUs, then writes them.
func writeGPURollups(ctx context.Context, tx pgx.Tx, accs []*gpuAcc) error {
	if len(accs) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, "SELECT minute_ms, gpu, samples, "+strings.Join(gpuCols, ", ")+
		" FROM gpu_rollups WHERE minute_ms >= $1 AND minute_ms <= $2 ORDER BY minute_ms, gpu",
		accs[0].minute, accs[len(accs)-1].minute)
	if err != nil {
		return err
	}
	i := 0
	less := func(a *gpuAcc, r *gpuRow) bool {
		return a.minute < r.ms || (a.minute == r.ms && a.gpu < r.gpu)
	}
	for rows.Next() {
		var r gpuRow
		if err := rows.Scan(append([]any{&r.ms, &r.gpu, &r.n}, r.dest()...)...); err != nil {
			rows.Close()
			return err
		}
		for i < len(accs) && less(accs[i], &r) {
			i++
		}
		if i < len(accs) && accs[i].minute == r.ms && accs[i].gpu == r.gpu {
			if err := accs[i].add(r); err != nil {
				rows.Close()
				return err
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	query := upsertSQL("gpu_rollups", []string{"minute_ms", "gpu"}, append([]string{"samples"}, gpuCols...))
	for _, a := range accs {
		r := a.row()
		if _, err := tx.Exec(ctx, query, append([]any{r.ms, r.gpu, r.n}, r.args()...)...); err != nil {
			return err
		}
	}
	return nil
}

// hostAcc sums one minute of host rows, each weighted by the ticks it holds.
type hostAcc struct {
	minute                                                      int64
	n                                                           int64
	cpu, iowait, load1, memUsed, memTotal, diskR, diskW, rx, tx float64
	sessions                                                    int64
	core, coreN                                                 []float64
	procs                                                       map[string]struct{}
}

func (a *hostAcc) add(r hostRow) error {
	w := float64(r.n)
	a.n += r.n
	a.cpu += w * r.cpu
	a.iowait += w * r.iowait
	a.load1 += w * r.load1
	a.memUsed += w * float64(r.memUsed)
	a.memTotal += w * float64(r.memTotal)
	a.diskR += w * r.diskR
	a.diskW += w * r.diskW
	a.rx += w * r.netRx
	a.tx += w * r.netTx
	a.sessions = max(a.sessions, r.sessions)
	var cores []float64
	if err := decode(r.perCore, &cores); err != nil {
		return fmt.Errorf("host sample at %d: cpu_per_core: %w", r.ms, err)
	}
	for len(a.core) < len(cores) {
		a.core = append(a.core, 0)
		a.coreN = append(a.coreN, 0)
	}
	for i, c := range cores {
		a.core[i] += w * c
		a.coreN[i] += w
	}
	var procs []string
	if err := decode(r.procs, &procs); err != nil {
		return fmt.Errorf("host sample at %d: processes: %w", r.ms, err)
	}
	for _, p := range procs {
		a.procs[p] = struct{}{}
	}
	return nil
}

func (a *hostAcc) row() hostRow {
	n := float64(a.n)
	cores := make([]float64, len(a.core))
	for i := range cores {
		cores[i] = a.core[i] / a.coreN[i]
	}
	procs := make([]string, 0, len(a.procs))
	for p := range a.procs {
		procs = append(procs, p)
	}
	sort.Strings(procs)
	text, _ := jsonText(procs, len(procs) == 0) // []string always encodes
	return hostRow{
		ms: a.minute, n: a.n,
		cpu: a.cpu / n, iowait: a.iowait / n, load1: a.load1 / n,
		memUsed: int64(math.Round(a.memUsed / n)), memTotal: int64(math.Round(a.memTotal / n)),
		diskR: a.diskR / n, diskW: a.diskW / n, netRx: a.rx / n, netTx: a.tx / n,
		sessions: a.sessions,
		perCore:  nullString(floatsText(cores)),
		procs:    nullString(text),
	}
}

// gpuAcc sums one minute of one GPU's rows, each weighted by the ticks it holds.
type gpuAcc struct {
	minute, gpu, n                                        int64
	util, memUtil, memUsed, memTotal, power, temp, sm, mc float64
	throttle                                              map[string]struct{}
	procs                                                 map[int]gpuwarden.GPUProcess
}

func (a *gpuAcc) add(r gpuRow) error {
	w := float64(r.n)
	a.n += r.n
	a.util += w * r.util
	a.memUtil += w * r.memUtil
	a.memUsed += w * float64(r.memUsed)
	a.memTotal += w * float64(r.memTotal)
	a.power += w * r.power
	a.temp += w * r.temp
	a.sm += w * float64(r.sm)
	a.mc += w * float64(r.memClock)
	var reasons []string
	if err := decode(r.throttle, &reasons); err != nil {
		return fmt.Errorf("gpu %d sample at %d: throttle_reasons: %w", r.gpu, r.ms, err)
	}
	for _, t := range reasons {
		a.throttle[t] = struct{}{}
	}
	var procs []gpuwarden.GPUProcess
	if err := decode(r.procs, &procs); err != nil {
		return fmt.Errorf("gpu %d sample at %d: processes: %w", r.gpu, r.ms, err)
	}
	// A process keeps its peak memory over the minute: that is what decides
	// whether a job fits a smaller card.
	for _, p := range procs {
		if old, ok := a.procs[p.PID]; !ok || p.UsedBytes > old.UsedBytes {
			if p.Name == "" {
				p.Name = old.Name
			}
			a.procs[p.PID] = p
		}
	}
	return nil
}

func (a *gpuAcc) row() gpuRow {
	n := float64(a.n)
	reasons := make([]string, 0, len(a.throttle))
	for t := range a.throttle {
		reasons = append(reasons, t)
	}
	sort.Strings(reasons)
	procs := make([]gpuwarden.GPUProcess, 0, len(a.procs))
	for _, p := range a.procs {
		procs = append(procs, p)
	}
	sort.Slice(procs, func(i, j int) bool { return procs[i].PID < procs[j].PID })
	// Slices of strings and of plain structs always encode.
	throttle, _ := jsonText(reasons, len(reasons) == 0)
	ptext, _ := jsonText(procs, len(procs) == 0)
	return gpuRow{
		ms: a.minute, gpu: a.gpu, n: a.n,
		util: a.util / n, memUtil: a.memUtil / n,
		memUsed: int64(math.Round(a.memUsed / n)), memTotal: int64(math.Round(a.memTotal / n)),
		power: a.power / n, temp: a.temp / n,
		sm: int64(math.Round(a.sm / n)), memClock: int64(math.Round(a.mc / n)),
		throttle: nullString(throttle), procs: nullString(ptext),
	}
}

// floorMinute is the start of the minute holding ms.
func floorMinute(ms int64) int64 {
	m := ms / minuteMs * minuteMs
	if m > ms {
		m -= minuteMs
	}
	return m
}

// finite maps NaN and ±Inf to 0, as the SQLite ledger does: one infinite
// reading would poison a minute's average.
func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

// floatsText is a JSON array of numbers without encoding/json's reflection,
// since per-core CPU is written every tick; nil (SQL NULL) when empty.
func floatsText(v []float64) any {
	if len(v) == 0 {
		return nil
	}
	b := make([]byte, 0, 6*len(v)+2)
	b = append(b, '[')
	for i, f := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendFloat(b, finite(f), 'g', -1, 64)
	}
	return string(append(b, ']'))
}

// jsonText is v as JSON text, or nil (SQL NULL) when empty: an empty list
// costs no bytes in a row written every second.
func jsonText(v any, empty bool) (any, error) {
	if empty {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// decode reads a JSON column; NULL leaves v as it is.
func decode(s sql.NullString, v any) error {
	if !s.Valid {
		return nil
	}
	return json.Unmarshal([]byte(s.String), v)
}

// nullable turns a NullString back into an argument: nil for NULL.
func nullable(s sql.NullString) any {
	if !s.Valid {
		return nil
	}
	return s.String
}

// nullString is the NullString of floatsText's or jsonText's result.
func nullString(v any) sql.NullString {
	s, ok := v.(string)
	return sql.NullString{String: s, Valid: ok}
}
