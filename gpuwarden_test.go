package gpuwarden

import (
	"math"
	"math/big"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestParseMicros(t *testing.T) {
	tests := []struct {
		in      string
		want    Micros
		wantErr bool
	}{
		{"3.50", 3_500_000, false},
		{"0.2158", 215_800, false},
		{"3.790142", 3_790_142, false},
		{"2766.8", 2_766_800_000, false},
		{"-1.5", -1_500_000, false},
		{"+7", 7_000_000, false},
		{".5", 500_000, false},
		{"5.", 5_000_000, false},
		{"1_000", 1_000_000_000, false},
		{"1.2345670", 1_234_567, false},
		{"1.2345678", 0, true},
		{"", 0, true},
		{".", 0, true},
		{"1e3", 0, true},
		{"abc", 0, true},
		{"99999999999999", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseMicros(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseMicros(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestMicrosString(t *testing.T) {
	for m, want := range map[Micros]string{3_500_000: "3.5", 215_800: "0.2158", -1_000_000: "-1", 0: "0", 1: "0.000001"} {
		if got := m.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", m, got, want)
		}
	}
}

func TestMulCents(t *testing.T) {
	tests := []struct {
		rate, qty string
		want      Cents
	}{
		{"3.50", "720", 252_000},
		{"0.349", "7.5", 262},       // 2.6175 rounds half up to 2.62
		{"0.8048", "730", 58_750},   // 587.504
		{"3.790142", "120", 45_482}, // 454.81704
		{"0.005", "1", 1},           // half a cent rounds away from zero
		{"-0.005", "1", -1},
		{"0", "1000", 0},
	}
	for _, tt := range tests {
		r, _ := ParseMicros(tt.rate)
		q, _ := ParseMicros(tt.qty)
		if got := MulCents(r, q); got != tt.want {
			t.Errorf("MulCents(%s, %s) = %d, want %d", tt.rate, tt.qty, got, tt.want)
		}
	}
}

func TestMulDivRoundSaturates(t *testing.T) {
	if got := mulDivRound(math.MaxInt64, math.MaxInt64, 1); got != math.MaxInt64 {
		t.Errorf("got %d, want saturation at MaxInt64", got)
	}
	if got := mulDivRound(math.MaxInt64, -2, 1); got != math.MinInt64 {
		t.Errorf("got %d, want saturation at MinInt64", got)
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		cur  Currency
		c    Cents
		want string
	}{
		{"EUR", 252_000, "€2,520.00"},
		{"USD", 53, "$0.53"},
		{"USD", -123_456_789, "-$1,234,567.89"},
		{"CHF", 1200, "CHF 12.00"},
	}
	for _, tt := range tests {
		if got := tt.cur.Format(tt.c); got != tt.want {
			t.Errorf("%s.Format(%d) = %q, want %q", tt.cur, tt.c, got, tt.want)
		}
	}
	if got := Currency("USD").FormatRate(3_500_000, "h"); got != "$3.50/h" {
		t.Errorf("FormatRate = %q", got)
	}
	if got := Currency("USD").FormatRate(3_790_142, "h"); got != "$3.790142/h" {
		t.Errorf("FormatRate = %q", got)
	}
}

func TestUnmarshalYAMLExact(t *testing.T) {
	var m Micros
	for in, want := range map[string]Micros{"3.50": 3_500_000, `"0.1"`: 100_000, "'2'": 2_000_000} {
		if err := m.UnmarshalYAML([]byte(in)); err != nil || m != want {
			t.Errorf("UnmarshalYAML(%s) = %d, %v; want %d", in, m, err, want)
		}
	}
}

// FuzzParseMicros checks that whatever parses prints back to the same value.
func FuzzParseMicros(f *testing.F) {
	for _, s := range []string{"3.50", "-0.2158", "1_000", ".5", "99999999.999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMicros(s)
		if err != nil {
			return
		}
		back, err := ParseMicros(m.String())
		if err != nil || back != m {
			t.Fatalf("%q → %d → %q → %d, %v", s, m, m.String(), back, err)
		}
	})
}

func TestCompareVersions(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"12.10", "12.9", 1}, {"580.159.04", "580.159.4", 0}, {"13.0", "13.0", 0}, {"2.11.0+cu130", "2.11.0", 1},
		{"9.1", "10.0", -1}, {"1.2.3rc1", "1.2.3rc2", -1}, {"", "1", -1},
	}
	for _, tt := range tests {
		if got := CompareVersions(tt.a, tt.b); got != tt.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestLockDiff(t *testing.T) {
	l := &Lock{Fields: map[string]LockField{
		"gpu.model":      {Value: "H100-SXM", Match: MatchExact},
		"driver.version": {Value: "580.159.04", Match: MatchMajor},
		"cuda.version":   {Value: "12.8", Match: MatchAtLeast},
		"os.kernel":      {Value: "6.8.0", Match: MatchIgnore},
		"cudnn.version":  {Value: "9.1.0", Match: MatchExact},
	}}
	got := l.Diff(Facts{"gpu.model": "H200", "driver.version": "580.65.06", "cuda.version": "12.6", "os.kernel": "5.15"})
	want := []Drift{
		{Field: "cuda.version", Locked: "12.8", Now: "12.6", Match: MatchAtLeast},
		{Field: "cudnn.version", Locked: "9.1.0", Now: "", Match: MatchExact},
		{Field: "gpu.model", Locked: "H100-SXM", Now: "H200", Match: MatchExact},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("drift %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestHealthFaulty(t *testing.T) {
	tests := []struct {
		name string
		h    Health
		want bool
	}{
		{"clean", Health{}, false},
		{"ecc", Health{ECCVolatileUncorrected: 1}, true},
		{"remap pending", Health{RemapPending: true}, true},
		{"xid 79", Health{XIDs: []XIDEvent{{XID: 79}}}, true},
		{"xid 13 is the application's", Health{XIDs: []XIDEvent{{XID: 13}}}, false},
		{"unknown xid", Health{XIDs: []XIDEvent{{XID: 999}}}, true},
	}
	for _, tt := range tests {
		if got := tt.h.Faulty(); got != tt.want {
			t.Errorf("%s: Faulty() = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestCentsJSONRoundTrip(t *testing.T) {
	for _, c := range []Cents{0, 1, 252_000, -310} {
		b, _ := c.MarshalJSON()
		var back Cents
		if err := back.UnmarshalJSON(b); err != nil || back != c {
			t.Errorf("%d → %s → %d, %v", c, b, back, err)
		}
	}
}

func TestMonthForecast(t *testing.T) {
	tests := []struct {
		name  string
		spent Cents
		burn  Micros
		now   time.Time
		want  Cents
	}{
		// From Nov 4 00:00, 27 days = 648 h are left of November.
		{"a box at 100/h from the 4th", 0, 100 * MicrosPerUnit, time.Date(2026, 11, 4, 0, 0, 0, 0, time.UTC), 64_800_00},
		{"spent stays, nothing runs", 30_00, 0, time.Date(2026, 11, 4, 0, 0, 0, 0, time.UTC), 30_00},
		{"the last minute of the month", 5_00, 60 * MicrosPerUnit, time.Date(2026, 11, 30, 23, 59, 0, 0, time.UTC), 6_00},
		{"a zone other than UTC reads the UTC month", 0, MicrosPerUnit,
			time.Date(2026, 12, 1, 0, 30, 0, 0, time.FixedZone("CET", 3600)), 50}, // 23:30 UTC on Nov 30: half an hour left
	}
	for _, tt := range tests {
		if got := MonthForecast(tt.spent, tt.burn, tt.now); got != tt.want {
			t.Errorf("%s: MonthForecast = %s, want %s", tt.name, got.Decimal(), tt.want.Decimal())
		}
	}
}

// plainDecimal is what ParseMicros accepts, once trimmed: a sign, digits
// with underscores, a point and digits.
var plainDecimal = regexp.MustCompile(`^[+-]?([0-9_]*)(?:\.([0-9]*))?$`)

// microsByBigInt is a second reading of ParseMicros' rules, by a regular
// expression and math/big, for FuzzParseMicrosMatchesBigInt: ok and the
// value, not the words of the error.
func microsByBigInt(s string) (Micros, bool) {
	t := strings.TrimSpace(s)
	m := plainDecimal.FindStringSubmatch(t)
	if m == nil {
		return 0, false
	}
	whole, frac := strings.ReplaceAll(m[1], "_", ""), m[2]
	if whole == "" && frac == "" {
		return 0, false
	}
	if len(frac) > 6 && strings.Trim(frac[6:], "0") != "" {
		return 0, false
	}
	v, _ := new(big.Int).SetString("0"+whole+(frac + "000000")[:6], 10)
	if new(big.Int).Div(v, big.NewInt(MicrosPerUnit)).Cmp(big.NewInt(math.MaxInt64/MicrosPerUnit-1)) > 0 {
		return 0, false
	}
	if t[0] == '-' {
		v.Neg(v)
	}
	return Micros(v.Int64()), true
}

func FuzzParseMicrosMatchesBigInt(f *testing.F) {
	for _, s := range []string{"3.50", "-0.2158", "1_000", ".5", "99999999.999999", "9223372036853", "9223372036854.1",
		"99999999999999999999999", "1.1234567", "1.1234560", "1.12x", "x.1", "_", "._", "1é", " 2.5 ", "+.0", "1.", "."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseMicros(s)
		want, ok := microsByBigInt(s)
		if got != want || (err == nil) != ok {
			t.Fatalf("ParseMicros(%q) = %d, %v; want %d, ok %v", s, got, err, want, ok)
		}
	})
}
