package savings

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// FuzzParseMonth checks ParseMonth beyond not panicking: an accepted month
// is [from, to) with from the first instant of a month in UTC and to the
// first of the next, it is what Month gives for any instant inside it, and
// it is written back as the text read; a refusal is EInvalid and quotes
// the input.
func FuzzParseMonth(f *testing.F) {
	for _, s := range []string{"2026-11", " 2026-12 ", "2026-13", "2026-1", "26-11", "0000-01", "9999-12", "2026-11-01", "", "2026/11"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		from, to, err := ParseMonth(s)
		if err != nil {
			if want := fmt.Sprintf("month %q", s); !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not say %q", err, want)
			}
			if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInvalid {
				t.Fatalf("error %v has code %q, want %q", err, gpuwarden.ErrorCodeOf(err), gpuwarden.EInvalid)
			}
			return
		}
		if from.Location() != time.UTC || to.Location() != time.UTC {
			t.Fatalf("%q: [%v, %v) is not in UTC", s, from, to)
		}
		if from.Day() != 1 || from.Hour() != 0 || from.Minute() != 0 || from.Second() != 0 || from.Nanosecond() != 0 {
			t.Fatalf("%q: from %v is not the first instant of a month", s, from)
		}
		if want := from.AddDate(0, 1, 0); !to.Equal(want) || to.Day() != 1 || to.Month() == from.Month() {
			t.Fatalf("%q: to %v, want the next month's first instant %v", s, to, want)
		}
		for _, at := range []time.Time{from, from.Add(time.Nanosecond), to.Add(-time.Nanosecond), to.Add(-time.Nanosecond).In(time.FixedZone("", 14*3600))} {
			if f2, t2 := Month(at); !f2.Equal(from) || !t2.Equal(to) {
				t.Fatalf("%q: Month(%v) = [%v, %v), want [%v, %v)", s, at, f2, t2, from, to)
			}
		}
		if got, want := from.Format("2006-01"), strings.TrimSpace(s); got != want {
			t.Fatalf("%q read as %s", s, got)
		}
	})
}
