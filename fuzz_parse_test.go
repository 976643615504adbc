package gpuwarden

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzParseDeadline checks ParseDeadline beyond not panicking: an accepted
// deadline is a finite, positive number of hours; a whole number of hours,
// days or weeks reads as exactly that many hours; a Go duration reads as
// time.ParseDuration's hours; a refusal is EInvalid and quotes the input.
func FuzzParseDeadline(f *testing.F) {
	// The rows of config's TestParseDeadline, and what the fuzzer found
	// (TestParseDeadlineFuzzFinds).
	for _, s := range []string{
		"72h", "90m", "10d", "2w", "1.5d", "0h", "-3d", "d", "soon", "infd",
		" 72h ", "1h30m", "2562047h", "2562048h", "1e3d", "0x10w",
		"NaNd", "nanw", "1e307d", "1e308w", "1e-320d",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseDeadline(s)
		if err != nil {
			if ErrorCodeOf(err) != EInvalid {
				t.Fatalf("%q: error %v has code %q, want %q", s, err, ErrorCodeOf(err), EInvalid)
			}
			if want := strconv.Quote(strings.TrimSpace(s)); !strings.Contains(err.Error(), want) {
				t.Fatalf("%q: error %q does not quote %s", s, err, want)
			}
			return
		}
		if math.IsNaN(got) || math.IsInf(got, 0) || got <= 0 {
			t.Fatalf("%q: accepted %v hours", s, got)
		}
		text := strings.TrimSpace(s)
		if d, err := time.ParseDuration(text); err == nil && got != d.Hours() {
			t.Fatalf("%q: %v hours, want time.ParseDuration's %v", s, got, d.Hours())
		}
		// A whole number N of a unit is exactly N units' hours.
		if n := len(text); n > 1 {
			if v, err := strconv.ParseUint(text[:n-1], 10, 32); err == nil {
				per := map[byte]float64{'h': 1, 'd': 24, 'w': 7 * 24}[text[n-1]]
				if want := float64(v) * per; per != 0 && got != want {
					t.Fatalf("%q: %v hours, want %v", s, got, want)
				}
			}
		}
	})
}

// TestParseDeadlineFuzzFinds holds what FuzzParseDeadline found: NaN days
// were accepted as a deadline, and days or weeks whose hours overflow to
// infinity passed the check made before multiplying; every refusal is now
// bad input (EInvalid).
func TestParseDeadlineFuzzFinds(t *testing.T) {
	// Variables, not constants: the parser rounds after each product.
	huge, tiny := 1e306, 1e-320
	tests := []struct {
		in   string
		want float64
		ok   bool
	}{
		{in: "NaNd"}, {in: "nanw"}, {in: "+NaNd"}, {in: "1e307d"}, {in: "1e308w"}, {in: "2e307w"},
		{in: "1e306w", want: huge * 7 * 24, ok: true},
		{in: "1e-320d", want: tiny * 24, ok: true},
	}
	for _, tt := range tests {
		got, err := ParseDeadline(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseDeadline(%q) = %v, %v; want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
		if err != nil && ErrorCodeOf(err) != EInvalid {
			t.Errorf("ParseDeadline(%q): code %q, want %q", tt.in, ErrorCodeOf(err), EInvalid)
		}
	}
}
