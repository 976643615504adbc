package catalog

import (
	"errors"
	"testing"

	"github.com/gpuwarden/gpuwarden"
)

func TestParseDecimal(t *testing.T) {
	tests := []struct {
		in      string
		round   bool
		want    gpuwarden.Micros
		wantErr error
	}{
		{"3.79", false, 3_790_000, nil},
		{"0.2158", false, 215_800, nil},
		{"-0.2158", false, -215_800, nil},
		{"+2766.80", false, 2_766_800_000, nil},
		{".5", false, 500_000, nil},
		{"5.", false, 5_000_000, nil},
		{"0.1234560", false, 123_456, nil},
		{"0.1234567", false, 0, errTooFine},
		{"0.1234567", true, 123_457, nil},
		// pandas' float tails round to the price that was meant.
		{"0.36979999999999996", true, 369_800, nil},
		{"55.069999999999993", true, 55_070_000, nil},
		{"104.00000000000001", true, 104_000_000, nil},
		{"0.0000005", true, 1, nil}, // half away from zero
		{"-0.0000005", true, -1, nil},
		{"0.00000049", true, 0, nil},
		{"1e-05", true, 10, nil},
		{"2.5E+2", true, 250_000_000, nil},
		{"1e-05", false, 0, errNotNumber},
		{"1e400", true, 0, errRange},
		{"0e400", true, 0, nil},
		{"99999999999999", true, 0, errRange},
		{"", true, 0, errNotNumber},
		{".", true, 0, errNotNumber},
		{"-", true, 0, errNotNumber},
		{"1.2.3", true, 0, errNotNumber},
		{"1e", true, 0, errNotNumber},
		{"NaN", true, 0, errNotNumber},
		{"inf", true, 0, errNotNumber},
		{"0x10", true, 0, errNotNumber},
		{"1,5", true, 0, errNotNumber},
	}
	for _, tt := range tests {
		got, err := parseDecimal(tt.in, tt.round)
		if got != tt.want || !errors.Is(err, tt.wantErr) {
			t.Errorf("parseDecimal(%q, %v) = %v, %v; want %v, %v", tt.in, tt.round, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseExactMicros(t *testing.T) {
	tests := []struct {
		in      string
		want    gpuwarden.Micros
		wantErr error
	}{
		{"27.44705", 27_447_050, nil},
		{"0.1234567", 0, errTooFine},
		{"abc", 0, errNotNumber},
		{"1e3", 0, errNotNumber},
		{"99999999999999", 0, errRange},
	}
	for _, tt := range tests {
		got, err := parseExactMicros(tt.in)
		if got != tt.want || !errors.Is(err, tt.wantErr) {
			t.Errorf("parseExactMicros(%q) = %v, %v; want %v, %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}
