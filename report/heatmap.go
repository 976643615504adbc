package report

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// NoData marks a heatmap cell (or row mean) with no samples; -1 rather than
// NaN because JSON cannot carry NaN.
const NoData = -1.0

// MaxHeatmapHours caps the columns of one heatmap at the fleet ledger's hour
// retention, so that a mistyped range cannot allocate without bound.
const MaxHeatmapHours = 400 * 24

// HeatmapReport is GPU utilisation per GPU per clock hour: where the fleet
// sleeps. (The function Heatmap builds it, hence the name.)
type HeatmapReport struct {
	// From and To bound the columns: From truncated to its hour, To
	// excluded (and moved in when the columns were capped).
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Hours are the columns' starts, one per clock hour, in UTC.
	Hours []time.Time  `json:"hours"`
	Rows  []HeatmapRow `json:"rows"`
}

// HeatmapRow is one GPU of one node across the columns.
type HeatmapRow struct {
	Node     string `json:"node"`
	Hostname string `json:"hostname,omitempty"`
	GPU      int    `json:"gpu"`
	// Cells are the mean utilisation per column, 0–100, or NoData.
	Cells []float64 `json:"cells"`
	// Mean is the mean over the minutes with data, weighted by minutes, or NoData.
	Mean float64 `json:"mean"`
}

// Heatmap lays out GPU utilisation per (node, GPU index) per clock hour in
// [from, to). Rows are the nodes with at least one hour in the range, one per
// GPU index seen in their hours or inventory. A cell is the minute-weighted
// mean of the node hours that fall in it; an hour of zero minutes is no data.
func Heatmap(in Input, from, to time.Time) HeatmapReport {
	start := from.UTC().Truncate(time.Hour)
	end := to.UTC()
	hm := HeatmapReport{From: start, To: end, Hours: []time.Time{}, Rows: []HeatmapRow{}}
	for h := start; h.Before(end) && len(hm.Hours) < MaxHeatmapHours; h = h.Add(time.Hour) {
		hm.Hours = append(hm.Hours, h)
	}
	if len(hm.Hours) == 0 {
		return hm
	}
	last := hm.Hours[len(hm.Hours)-1].Add(time.Hour)
	if last.Before(end) {
		hm.To = last // capped at MaxHeatmapHours: say where it stops
	}
	ix := newIndex(in)

	type cell struct{ sum, minutes float64 }
	type rowKey struct {
		node string
		gpu  int
	}
	cells := map[rowKey][]cell{}
	gpus := map[string]int{} // node → GPU count seen
	for _, h := range in.Hours {
		at := h.Hour.UTC()
		if at.Before(start) || !at.Before(hm.To) {
			continue
		}
		col := int(at.Sub(start) / time.Hour)
		gpus[h.Node] = max(gpus[h.Node], len(h.GPUUtil))
		if h.Minutes <= 0 {
			continue
		}
		for g, u := range h.GPUUtil {
			if math.IsNaN(u) || math.IsInf(u, 0) {
				continue
			}
			k := rowKey{h.Node, g}
			if cells[k] == nil {
				cells[k] = make([]cell, len(hm.Hours))
			}
			m := float64(h.Minutes)
			cells[k][col].sum += min(max(u, 0), 100) * m
			cells[k][col].minutes += m
		}
	}
	for node, count := range gpus {
		if n := ix.nodes[node]; n != nil {
			count = max(count, len(n.GPUs))
		}
		for g := range count {
			row := HeatmapRow{Node: node, GPU: g, Cells: make([]float64, len(hm.Hours)), Mean: NoData}
			if n := ix.nodes[node]; n != nil {
				row.Hostname = n.Hostname
			}
			var sum, minutes float64
			for _, c := range cells[rowKey{node, g}] {
				sum += c.sum
				minutes += c.minutes
			}
			cs := cells[rowKey{node, g}]
			for i := range row.Cells {
				row.Cells[i] = NoData
				if cs != nil && cs[i].minutes > 0 {
					row.Cells[i] = round1(cs[i].sum / cs[i].minutes)
				}
			}
			if minutes > 0 {
				row.Mean = round1(sum / minutes)
			}
			hm.Rows = append(hm.Rows, row)
		}
	}
	slices.SortFunc(hm.Rows, func(a, b HeatmapRow) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.GPU, b.GPU))
	})
	return hm
}

// shade is one character per cell: ░ under 25 %, ▒ under 50 %, ▓ under
// 75 %, █ from 75 %, and · for no data.
func shade(u float64) rune {
	switch {
	case u < 0:
		return '·'
	case u < 25:
		return '░'
	case u < 50:
		return '▒'
	case u < 75:
		return '▓'
	default:
		return '█'
	}
}

// heatmapChunk is the columns per block of the text heatmap: two days fit
// in 100 columns beside the row label and the row mean.
const heatmapChunk = 48

// WriteHeatmap prints the heatmap as blocks of shaded characters, one per
// GPU-hour, two days per block so that lines stay within 100 columns.
func WriteHeatmap(w io.Writer, hm HeatmapReport) error {
	var b strings.Builder
	fmt.Fprintf(&b, "GPU utilisation per hour, %s to %s\n", stamp(hm.From), stamp(hm.To))
	b.WriteString("░ <25 %  ▒ <50 %  ▓ <75 %  █ ≥75 %  · no data\n")
	if len(hm.Rows) == 0 || len(hm.Hours) == 0 {
		b.WriteString("\nNo utilisation recorded.\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	labels := make([]string, len(hm.Rows))
	lw := 0
	for i, r := range hm.Rows {
		labels[i] = fmt.Sprintf("%s gpu%d", truncate(r.Node, 14), r.GPU)
		lw = max(lw, len([]rune(labels[i])))
	}
	pad := func(s string) string { return s + strings.Repeat(" ", lw-len([]rune(s))) }
	for c0 := 0; c0 < len(hm.Hours); c0 += heatmapChunk {
		c1 := min(c0+heatmapChunk, len(hm.Hours))
		b.WriteString("\n")
		// The tick line marks every sixth hour with its hour of day,
		// midnight with the date, and the block's first hour when the next
		// mark leaves room for it.
		tick := []rune(strings.Repeat(" ", c1-c0+8))
		for c := c0; c < c1; c++ {
			h := hm.Hours[c]
			if h.Hour()%6 != 0 && (c != c0 || 6-h.Hour()%6 < 3) {
				continue
			}
			mark := fmt.Sprintf("%02d", h.Hour())
			if h.Hour() == 0 {
				mark = h.Format("01-02")
			}
			if c-c0+len(mark) > len(tick) {
				continue
			}
			copy(tick[c-c0:], []rune(mark))
		}
		b.WriteString(strings.TrimRight(pad("")+"  "+string(tick), " ") + "\n")
		for i, r := range hm.Rows {
			line := []rune{}
			for _, u := range r.Cells[c0:c1] {
				line = append(line, shade(u))
			}
			mean := "mean -"
			if r.Mean >= 0 {
				mean = fmt.Sprintf("mean %.0f %%", r.Mean)
			}
			b.WriteString(strings.TrimRight(pad(labels[i])+"  "+string(line)+"  "+mean, " ") + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
