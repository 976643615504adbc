package catalog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

// streamFile writes an own-format file of a little over a megabyte (the
// least that is read in chunks) with warnings to give, CRLF and blank
// lines, a row longer than a chunk, and edit applied to row 9,000.
func streamFile(t *testing.T, edit func(row string) string) (string, string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("provider,region,country,instance,gpu,gpu_count,vram_gb_per_gpu,currency,on_demand_hourly,spot_hourly,monthly,as_of,source\r\n")
	for i := 0; b.Len() <= minSplit+1000; i++ {
		row := fmt.Sprintf("aws,us-east-1,US,box-%d,H100-SXM,%d,80,USD,%d.25,,,2026-11,bench\n", i, 1<<(i%4), 1+i%90)
		switch {
		case i%1000 == 7:
			row = fmt.Sprintf("lambda,us-west-1,,gpu_%d,A10,1,,USD,0.75,,,,\n", i) // undated, no country
		case i%777 == 5:
			row += "\n" // a blank line
		case i == 4000:
			row = "aws,us-east-1,US,box-long,L4,1,24,USD,0.8,,,2026-11," + strings.Repeat("x", 150_000) + "\n"
		case i == 9000:
			row = edit(row)
		}
		b.WriteString(row)
	}
	b.WriteString("gcp,europe-west4,NL,g2-standard-4,L4,1,24,USD,0.71,,,2026-10,last row without a line break")
	p := filepath.Join(t.TempDir(), "prices.csv")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p, b.String()
}

// TestStreamMatchesWholeRead: a file read in chunks (small ones here, so
// that there are many) gives what reading it whole gives: the offers after
// those before, the warnings, the first error, and the file's hash.
func TestStreamMatchesWholeRead(t *testing.T) {
	defer func(n int) { streamChunk = n }(streamChunk)
	streamChunk = 64 << 10
	before := []gpuwarden.Offer{{Provider: "aws", Instance: "earlier"}}
	tests := []struct {
		name string
		edit func(string) string
	}{
		{"good", func(row string) string { return row }},
		{"bad cell in a later chunk", func(string) string { return "aws,us-east-1,US,bad,H100-SXM,1,80,EURO,1.25,,,2026-11,bench\n" }},
		{"short row in a later chunk", func(string) string { return "aws,us-east-1\n" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name, data := streamFile(t, tt.edit)
			want, wantWarns, wantErr := parseSlice(name, "", data, before)
			dst := builderOf(before)
			warns, content, size, err := streamOwnFile(name, dst)
			if (wantErr != nil) != (tt.name != "good") {
				t.Fatalf("read whole: %v", wantErr)
			}
			if fmt.Sprint(err) != fmt.Sprint(wantErr) {
				t.Fatalf("error %v, read whole %v", err, wantErr)
			}
			got := dst.Offers()
			if err != nil {
				if got.Len() != len(before) {
					t.Errorf("%d offers left after the error, want the %d before", got.Len(), len(before))
				}
				return
			}
			if !reflect.DeepEqual(got.Slice(), want) || !reflect.DeepEqual(warns, wantWarns) {
				t.Errorf("%d offers, warnings %q; read whole %d, %q", got.Len(), warns, len(want), wantWarns)
			}
			if content != hashContentOf(data) || size != len(data) {
				t.Errorf("hash or size (%d) not the file's (%d)", size, len(data))
			}
		})
	}
}

// TestStreamLeavesQuotedFilesWhole: a quote in a later chunk, after which
// a line break may sit inside a field, sends the file back to be read
// whole, with nothing added.
func TestStreamLeavesQuotedFilesWhole(t *testing.T) {
	defer func(n int) { streamChunk = n }(streamChunk)
	streamChunk = 64 << 10
	name, _ := streamFile(t, func(string) string {
		return "aws,us-east-1,US,box-quoted,H100-SXM,1,80,USD,1.25,,,2026-11,\"two\nlines\"\n"
	})
	var dst gpuwarden.OffersBuilder
	if _, _, _, err := streamOwnFile(name, &dst); !errors.Is(err, errNotStreamed) || dst.Len() != 0 {
		t.Fatalf("err %v with %d offers, want errNotStreamed and none", err, dst.Len())
	}
	// Through the cache's reader, the whole read gives the same as ReadOffers.
	got, _, err := parseCache{}.readFileSlice(name, nil)
	f, ferr := os.Open(name)
	if ferr != nil {
		t.Fatal(ferr)
	}
	defer f.Close()
	want, _, werr := ReadOffers(name, f)
	if err != nil || werr != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("readFile %d offers (%v), ReadOffers %d (%v)", len(got), err, len(want), werr)
	}
}
