// Package ledgerrow holds the database-free half of the SQLite and
// PostgreSQL ledgers: the sample and rollup rows as stored, the one-minute
// rollup accumulators, and the encodings of their columns.
package ledgerrow

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

const minuteMs = int64(time.Minute / time.Millisecond)

// HostCols and GPUCols are the value columns of the sample and rollup tables,
// in the order of HostRow.Dest and GPURow.Dest.
var (
	// HostCols are the value columns of host_samples and host_rollups.
	HostCols = []string{"cpu_percent", "cpu_per_core", "iowait_percent", "load1",
		"mem_used_bytes", "mem_total_bytes", "disk_read_bps", "disk_write_bps",
		"net_rx_bps", "net_tx_bps", "sessions", "processes"}
	// GPUCols are the value columns of gpu_samples and gpu_rollups.
	GPUCols = []string{"util_percent", "mem_util_percent", "mem_used_bytes", "mem_total_bytes",
		"power_w", "temp_c", "sm_clock_mhz", "mem_clock_mhz", "throttle_reasons", "processes"}
)

// UpsertSQL is an INSERT that replaces the row with the same key.
func UpsertSQL(table string, key, cols []string) string {
	all := append(append([]string(nil), key...), cols...)
	var b strings.Builder
	b.WriteString("INSERT INTO " + table + " (" + strings.Join(all, ", ") + ") VALUES (")
	for i := range all {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(i+1))
	}
	b.WriteString(") ON CONFLICT (" + strings.Join(key, ", ") + ") DO UPDATE SET ")
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(c + " = excluded." + c)
	}
	return b.String()
}

// HostRow is a row of host_samples or host_rollups as stored.
type HostRow struct {
	MS, N                      int64
	CPU, IOWait, Load1         float64
	MemUsed, MemTotal          int64
	DiskR, DiskW, NetRx, NetTx float64
	Sessions                   int64
	PerCore, Procs             sql.NullString
}

// Dest is the scan destinations of the row's HostCols.
func (r *HostRow) Dest() []any {
	return []any{&r.CPU, &r.PerCore, &r.IOWait, &r.Load1, &r.MemUsed, &r.MemTotal,
		&r.DiskR, &r.DiskW, &r.NetRx, &r.NetTx, &r.Sessions, &r.Procs}
}

// Args is the query arguments of the row's HostCols, NULL as nil.
func (r *HostRow) Args() []any {
	return []any{r.CPU, Nullable(r.PerCore), r.IOWait, r.Load1, r.MemUsed, r.MemTotal,
		r.DiskR, r.DiskW, r.NetRx, r.NetTx, r.Sessions, Nullable(r.Procs)}
}

// Sample is the row as a HostSample at its time.
func (r *HostRow) Sample() (gpuwarden.HostSample, error) {
	h := gpuwarden.HostSample{
		Time:          time.UnixMilli(r.MS).UTC(),
		CPUPercent:    r.CPU,
		IOWaitPercent: r.IOWait,
		Load1:         r.Load1,
		MemUsedBytes:  uint64(r.MemUsed),
		MemTotalBytes: uint64(r.MemTotal),
		DiskReadBps:   r.DiskR,
		DiskWriteBps:  r.DiskW,
		NetRxBps:      r.NetRx,
		NetTxBps:      r.NetTx,
		Sessions:      int(r.Sessions),
	}
	if err := Decode(r.PerCore, &h.CPUPerCore); err != nil {
		return h, fmt.Errorf("host sample at %d: cpu_per_core: %w", r.MS, err)
	}
	if err := Decode(r.Procs, &h.Processes); err != nil {
		return h, fmt.Errorf("host sample at %d: processes: %w", r.MS, err)
	}
	return h, nil
}

// GPURow is a row of gpu_samples or gpu_rollups as stored.
type GPURow struct {
	MS, GPU, N        int64
	Util, MemUtil     float64
	MemUsed, MemTotal int64
	Power, Temp       float64
	SM, MemClock      int64
	Throttle, Procs   sql.NullString
}

// Dest is the scan destinations of the row's GPUCols.
func (r *GPURow) Dest() []any {
	return []any{&r.Util, &r.MemUtil, &r.MemUsed, &r.MemTotal, &r.Power, &r.Temp,
		&r.SM, &r.MemClock, &r.Throttle, &r.Procs}
}

// Args is the query arguments of the row's GPUCols, NULL as nil.
func (r *GPURow) Args() []any {
	return []any{r.Util, r.MemUtil, r.MemUsed, r.MemTotal, r.Power, r.Temp,
		r.SM, r.MemClock, Nullable(r.Throttle), Nullable(r.Procs)}
}

// Telemetry is the row as one GPU's Telemetry at its time.
func (r *GPURow) Telemetry() (gpuwarden.Telemetry, error) {
	g := gpuwarden.Telemetry{
		Index:          int(r.GPU),
		Time:           time.UnixMilli(r.MS).UTC(),
		UtilPercent:    r.Util,
		MemUtilPercent: r.MemUtil,
		MemUsedBytes:   uint64(r.MemUsed),
		MemTotalBytes:  uint64(r.MemTotal),
		PowerWatts:     r.Power,
		TempC:          r.Temp,
		SMClockMHz:     int(r.SM),
		MemClockMHz:    int(r.MemClock),
	}
	if err := Decode(r.Throttle, &g.ThrottleReasons); err != nil {
		return g, fmt.Errorf("gpu %d sample at %d: throttle_reasons: %w", r.GPU, r.MS, err)
	}
	if err := Decode(r.Procs, &g.Processes); err != nil {
		return g, fmt.Errorf("gpu %d sample at %d: processes: %w", r.GPU, r.MS, err)
	}
	return g, nil
}

// HostAcc sums one minute of host rows, each weighted by the ticks it holds.
type HostAcc struct {
	Minute                                                      int64
	n                                                           int64
	cpu, iowait, load1, memUsed, memTotal, diskR, diskW, rx, tx float64
	sessions                                                    int64
	core, coreN                                                 []float64
	procs                                                       map[string]struct{}
}

// NewHostAcc is an empty HostAcc for the minute starting at minute.
func NewHostAcc(minute int64) *HostAcc {
	return &HostAcc{Minute: minute, procs: map[string]struct{}{}}
}

// Add folds r, weighted by its N, into the minute.
func (a *HostAcc) Add(r HostRow) error {
	w := float64(r.N)
	a.n += r.N
	a.cpu += w * r.CPU
	a.iowait += w * r.IOWait
	a.load1 += w * r.Load1
	a.memUsed += w * float64(r.MemUsed)
	a.memTotal += w * float64(r.MemTotal)
	a.diskR += w * r.DiskR
	a.diskW += w * r.DiskW
	a.rx += w * r.NetRx
	a.tx += w * r.NetTx
	a.sessions = max(a.sessions, r.Sessions)
	var cores []float64
	if err := Decode(r.PerCore, &cores); err != nil {
		return fmt.Errorf("host sample at %d: cpu_per_core: %w", r.MS, err)
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
	if err := Decode(r.Procs, &procs); err != nil {
		return fmt.Errorf("host sample at %d: processes: %w", r.MS, err)
	}
	for _, p := range procs {
		a.procs[p] = struct{}{}
	}
	return nil
}

// Row is the minute's average as a host_rollups row.
func (a *HostAcc) Row() HostRow {
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
	text, _ := JSONText(procs, len(procs) == 0) // []string always encodes
	return HostRow{
		MS: a.Minute, N: a.n,
		CPU: a.cpu / n, IOWait: a.iowait / n, Load1: a.load1 / n,
		MemUsed: int64(math.Round(a.memUsed / n)), MemTotal: int64(math.Round(a.memTotal / n)),
		DiskR: a.diskR / n, DiskW: a.diskW / n, NetRx: a.rx / n, NetTx: a.tx / n,
		Sessions: a.sessions,
		PerCore:  NullString(FloatsText(cores)),
		Procs:    NullString(text),
	}
}

// GPUAcc sums one minute of one GPU's rows, each weighted by the ticks it holds.
type GPUAcc struct {
	Minute, GPU                                           int64
	n                                                     int64
	util, memUtil, memUsed, memTotal, power, temp, sm, mc float64
	throttle                                              map[string]struct{}
	procs                                                 map[int]gpuwarden.GPUProcess
}

// NewGPUAcc is an empty GPUAcc for GPU gpu in the minute starting at minute.
func NewGPUAcc(minute, gpu int64) *GPUAcc {
	return &GPUAcc{Minute: minute, GPU: gpu, throttle: map[string]struct{}{}, procs: map[int]gpuwarden.GPUProcess{}}
}

// Add folds r, weighted by its N, into the minute.
func (a *GPUAcc) Add(r GPURow) error {
	w := float64(r.N)
	a.n += r.N
	a.util += w * r.Util
	a.memUtil += w * r.MemUtil
	a.memUsed += w * float64(r.MemUsed)
	a.memTotal += w * float64(r.MemTotal)
	a.power += w * r.Power
	a.temp += w * r.Temp
	a.sm += w * float64(r.SM)
	a.mc += w * float64(r.MemClock)
	var reasons []string
	if err := Decode(r.Throttle, &reasons); err != nil {
		return fmt.Errorf("gpu %d sample at %d: throttle_reasons: %w", r.GPU, r.MS, err)
	}
	for _, t := range reasons {
		a.throttle[t] = struct{}{}
	}
	var procs []gpuwarden.GPUProcess
	if err := Decode(r.Procs, &procs); err != nil {
		return fmt.Errorf("gpu %d sample at %d: processes: %w", r.GPU, r.MS, err)
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

// Row is the minute's average as a gpu_rollups row.
func (a *GPUAcc) Row() GPURow {
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
	throttle, _ := JSONText(reasons, len(reasons) == 0)
	ptext, _ := JSONText(procs, len(procs) == 0)
	return GPURow{
		MS: a.Minute, GPU: a.GPU, N: a.n,
		Util: a.util / n, MemUtil: a.memUtil / n,
		MemUsed: int64(math.Round(a.memUsed / n)), MemTotal: int64(math.Round(a.memTotal / n)),
		Power: a.power / n, Temp: a.temp / n,
		SM: int64(math.Round(a.sm / n)), MemClock: int64(math.Round(a.mc / n)),
		Throttle: NullString(throttle), Procs: NullString(ptext),
	}
}

// FloorMinute is the start of the minute holding ms.
func FloorMinute(ms int64) int64 {
	m := ms / minuteMs * minuteMs
	if m > ms {
		m -= minuteMs
	}
	return m
}

// Finite maps NaN and ±Inf to 0: SQLite would store NaN as NULL, and one
// infinite reading would poison a minute's average.
func Finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

// FloatsText is a JSON array of numbers without encoding/json's reflection,
// since per-core CPU is written every tick; nil (SQL NULL) when empty.
func FloatsText(v []float64) any {
	if len(v) == 0 {
		return nil
	}
	b := make([]byte, 0, 6*len(v)+2)
	b = append(b, '[')
	for i, f := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendFloat(b, Finite(f), 'g', -1, 64)
	}
	return string(append(b, ']'))
}

// JSONText is v as JSON text, or nil (SQL NULL) when empty: an empty list
// costs no bytes in a row written every second.
func JSONText(v any, empty bool) (any, error) {
	if empty {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// Decode reads a JSON column; NULL leaves v as it is.
func Decode(s sql.NullString, v any) error {
	if !s.Valid {
		return nil
	}
	return json.Unmarshal([]byte(s.String), v)
}

// Nullable turns a NullString back into an argument: nil for NULL.
func Nullable(s sql.NullString) any {
	if !s.Valid {
		return nil
	}
	return s.String
}

// NullString is the NullString of FloatsText's or JSONText's result.
func NullString(v any) sql.NullString {
	s, ok := v.(string)
	return sql.NullString{String: s, Valid: ok}
}
