package main

import (
	"encoding/json"
	"fmt"
	"io"
	"testing"
)

// benchRow is shaped like a ranked plan row: a few strings and numbers.
type benchRow struct {
	Provider string  `json:"provider"`
	Region   string  `json:"region"`
	Instance string  `json:"instance"`
	GPU      string  `json:"gpu"`
	Count    int     `json:"gpu_count"`
	Rate     float64 `json:"rate"`
	Total    float64 `json:"total"`
	Billing  string  `json:"billing"`
}

// BenchmarkWriteJSON compares writeJSON (schema first, then indented) with
// the plain indenting encoder it replaced, on about 2 MB of output: the
// size plan -o json may reach for 100k offers.
func BenchmarkWriteJSON(b *testing.B) {
	rows := make([]benchRow, 12000)
	for i := range rows {
		rows[i] = benchRow{"aws", "us-east-1", fmt.Sprintf("p5.%dxlarge", i), "H100", 8, 98.32 + float64(i), 12345.67, "on-demand"}
	}
	v := map[string]any{"ranked": rows}
	b.Run("writeJSON", func(b *testing.B) {
		n := countingWriter(0)
		for b.Loop() {
			if err := writeJSON(&n, "plan", v); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(n) / int64(b.N))
	})
	b.Run("encoder-only", func(b *testing.B) {
		n := countingWriter(0)
		for b.Loop() {
			enc := json.NewEncoder(&n)
			enc.SetIndent("", "  ")
			enc.SetEscapeHTML(false)
			if err := enc.Encode(v); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(n) / int64(b.N))
	})
}

type countingWriter int

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}

var _ io.Writer = (*countingWriter)(nil)
