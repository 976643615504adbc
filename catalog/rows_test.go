package catalog

import (
	"encoding/csv"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

// csvRecords reads data with encoding/csv as readHeader once configured it:
// every record with its fields' positions, up to the first error.
func csvRecords(data string) (recs [][]string, pos [][]fieldPos, err error) {
	r := csv.NewReader(strings.NewReader(data))
	r.FieldsPerRecord = -1
	for {
		rec, err := r.Read()
		if err == io.EOF {
			return recs, pos, nil
		}
		if err != nil {
			return recs, pos, err
		}
		p := make([]fieldPos, len(rec))
		for i := range rec {
			p[i].line, p[i].col = r.FieldPos(i)
		}
		recs, pos = append(recs, rec), append(pos, p)
	}
}

func ownRecords(data string) (recs [][]string, pos [][]fieldPos, err error) {
	r := newCSVRows(data)
	for {
		rec, ok, err := r.read()
		if err != nil {
			return recs, pos, err
		}
		if !ok {
			return recs, pos, nil
		}
		recs, pos = append(recs, append([]string(nil), rec...)), append(pos, append([]fieldPos(nil), r.pos...))
	}
}

func sameAsEncodingCSV(t *testing.T, data string) {
	t.Helper()
	wantRecs, wantPos, wantErr := csvRecords(data)
	gotRecs, gotPos, gotErr := ownRecords(data)
	var wantPE, gotPE *csv.ParseError
	if errors.As(wantErr, &wantPE) != errors.As(gotErr, &gotPE) || (wantPE != nil && *wantPE != *gotPE) {
		t.Fatalf("%q: got error %v, want %v", data, gotErr, wantErr)
	}
	if !reflect.DeepEqual(gotRecs, wantRecs) {
		t.Fatalf("%q: got records %q, want %q", data, gotRecs, wantRecs)
	}
	if !reflect.DeepEqual(gotPos, wantPos) {
		t.Fatalf("%q: got positions %v, want %v", data, gotPos, wantPos)
	}
}

var csvRowsCases = []string{
	"", "\n", "\r\n", "\r", "a", "a\n", "a\r\n", "a\r", "a,b,c\n1,2,3\n", "a,,\n,,\n", ",\n",
	"a\n\n\nb\n", "a\r\n\r\nb", " a , b \n", "a\rb\n", "a\r\r\n",
	`"a","b"` + "\n", `"a""b",c` + "\n", `"",""` + "\n", `"a` + "\n" + `b",c` + "\n",
	`"a` + "\r\n" + `b"` + "\r\n", `"a` + "\n\n" + `b"`, `a"b,c` + "\n", `a,b"` + "\n", `"a"b,c`,
	`"a`, `"a` + "\n", `"a` + "\r", `"a""`, `x,"a` + "\n" + `"` + "\n", `"{'Gpus': [{'Name': 'T4'}]}",1.5` + "\n",
	`a,"b",c` + "\n" + `d,"e""f",g`, `"a",` + "\n", `"a",`, "é,\"ü\"\n", `"a"` + "\r\n" + `"b"` + "\r",
	"a,b\n\"c\n\nd\",e\nf", "\"a\"\"\n\"\"b\"\n", "\"\"\"\"\n", "a,\"\n", "\",\n",
}

func TestCSVRowsMatchEncodingCSV(t *testing.T) {
	for _, data := range csvRowsCases {
		sameAsEncodingCSV(t, data)
	}
}

// FuzzCSVRowsMatchEncodingCSV holds the reader to encoding/csv on any input.
func FuzzCSVRowsMatchEncodingCSV(f *testing.F) {
	for _, data := range csvRowsCases {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data string) { sameAsEncodingCSV(t, data) })
}

// An unquoted field is a substring of the data, not a copy: the price file
// is held once, and no record allocates.
func TestCSVRowsAllocateNothingPerPlainRow(t *testing.T) {
	data := strings.Repeat("aws,us-east-1,US,p5.48xlarge,H100-SXM,8,80,USD,98.32,,,2026-11,bench\n", 100)
	r := newCSVRows(data)
	r.read() // the first sizes the field slices
	allocs := testing.AllocsPerRun(50, func() {
		if _, ok, err := r.read(); !ok || err != nil {
			t.Fatal(ok, err)
		}
	})
	if allocs != 0 {
		t.Errorf("got %v allocations per row, want 0", allocs)
	}
}
