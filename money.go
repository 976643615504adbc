package gpuwarden

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Micros is a decimal with six fractional digits stored exactly as an integer
// count of millionths. Hourly rates such as 3.790142 USD/h, quantities such as
// 12.5 GB and exchange rates all fit without the drift of binary floats.
type Micros int64

// MicrosPerUnit is the number of micros in one whole unit.
const MicrosPerUnit = 1_000_000

// ParseMicros reads a plain decimal ("3.50", "-0.2158", "2766.8") exactly.
// More than six fractional digits are rejected rather than silently rounded.
func ParseMicros(s string) (Micros, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("empty number")
	}
	neg := false
	switch t[0] {
	case '-':
		neg, t = true, t[1:]
	case '+':
		t = t[1:]
	}
	// One pass over the bytes, without a string built: a price file is
	// millions of these. The errors keep their order: not a number, too
	// many decimals, not plain digits, out of range.
	whole, frac, hasDot := strings.Cut(t, ".")
	const limit = math.MaxInt64/MicrosPerUnit - 1
	var w uint64
	wholeLen, plain, inRange := 0, true, true
	for i := 0; i < len(whole); i++ {
		c := whole[i]
		if c == '_' {
			continue
		}
		wholeLen++
		if c < '0' || c > '9' {
			plain = false
			continue
		}
		if w = w*10 + uint64(c-'0'); w > limit {
			inRange, w = false, limit+1 // stays above the limit, cannot overflow
		}
	}
	if wholeLen == 0 && (!hasDot || frac == "") {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if len(frac) > 6 {
		if strings.Trim(frac[6:], "0") != "" {
			return 0, fmt.Errorf("%q has more than 6 decimal places", s)
		}
		frac = frac[:6]
	}
	var f uint64
	for i := 0; i < 6; i++ {
		f *= 10
		if i < len(frac) {
			c := frac[i]
			if c < '0' || c > '9' {
				plain = false
			}
			f += uint64(c - '0')
		}
	}
	if !plain {
		return 0, fmt.Errorf("%q is not a plain decimal number", s)
	}
	if !inRange {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	v := Micros(w*MicrosPerUnit + f)
	if neg {
		v = -v
	}
	return v, nil
}

// MicrosFromFloat rounds f to the nearest micro; it is for quantities that
// arrive as floats (hours derived from minutes, file sizes), never for prices.
func MicrosFromFloat(f float64) Micros { return Micros(math.Round(f * MicrosPerUnit)) }

// Float returns m as a float for display arithmetic such as ratios.
func (m Micros) Float() float64 { return float64(m) / MicrosPerUnit }

// String prints m with the trailing zeros of its fraction removed: "3.5", "0.2158".
func (m Micros) String() string {
	sign := ""
	u := int64(m)
	if u < 0 {
		sign, u = "-", -u
	}
	s := fmt.Sprintf("%s%d.%06d", sign, u/MicrosPerUnit, u%MicrosPerUnit)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// MarshalJSON writes m as a JSON number with no binary rounding.
func (m Micros) MarshalJSON() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalJSON reads a JSON number or a quoted decimal exactly.
func (m *Micros) UnmarshalJSON(b []byte) error { return m.unmarshalText(b) }

// UnmarshalYAML reads a YAML scalar exactly; the YAML library calls it with
// the scalar's source bytes, so 3.50 never passes through a float.
func (m *Micros) UnmarshalYAML(b []byte) error { return m.unmarshalText(b) }

func (m *Micros) unmarshalText(b []byte) error {
	s := strings.Trim(strings.TrimSpace(string(b)), `"'`)
	v, err := ParseMicros(s)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Mul returns a × b rounded half away from zero to micros; the product is
// computed in 128 bits, so no intermediate overflow occurs for any sane price.
func (a Micros) Mul(b Micros) Micros { return Micros(mulDivRound(int64(a), int64(b), MicrosPerUnit)) }

// Cents is an amount of money in minor units (hundredths) of a currency.
type Cents int64

// MulCents prices a quantity at a rate: rate (currency per unit) × quantity,
// rounded half away from zero to the cent. Every cost line is one such call,
// and totals are sums of the rounded lines, so printed lines add up.
func MulCents(rate, qty Micros) Cents {
	return Cents(mulDivRound(int64(rate), int64(qty), MicrosPerUnit*MicrosPerUnit/100))
}

// CentsOf rounds a micros amount of money to cents.
func CentsOf(m Micros) Cents { return Cents(mulDivRound(int64(m), 1, MicrosPerUnit/100)) }

// Micros converts cents back to micros, exactly.
func (c Cents) Micros() Micros { return Micros(int64(c) * (MicrosPerUnit / 100)) }

// Decimal prints c as a plain decimal with two places: "2520.00", "-3.10".
func (c Cents) Decimal() string {
	sign := ""
	u := int64(c)
	if u < 0 {
		sign, u = "-", -u
	}
	return fmt.Sprintf("%s%d.%02d", sign, u/100, u%100)
}

// MarshalJSON writes c as a decimal number with two places.
func (c Cents) MarshalJSON() ([]byte, error) { return []byte(c.Decimal()), nil }

// UnmarshalJSON reads a decimal amount back exactly, rounding past the cent.
func (c *Cents) UnmarshalJSON(b []byte) error {
	var m Micros
	if err := m.UnmarshalJSON(b); err != nil {
		return err
	}
	*c = CentsOf(m)
	return nil
}

// Currency is an ISO 4217 code such as USD or EUR.
type Currency string

var currencySymbols = map[Currency]string{"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥", "INR": "₹"}

// Format prints an amount for people: "€2,520.00", "$0.53", "CHF 12.00".
func (cur Currency) Format(c Cents) string {
	sign := ""
	if c < 0 {
		sign, c = "-", -c
	}
	whole := GroupDigits(int64(c) / 100)
	body := fmt.Sprintf("%s.%02d", whole, int64(c)%100)
	if sym, ok := currencySymbols[cur]; ok {
		return sign + sym + body
	}
	return sign + string(cur) + " " + body
}

// FormatRate prints a unit price with all its significant digits: "$3.79/h".
func (cur Currency) FormatRate(m Micros, unit string) string {
	s := m.String()
	if !strings.Contains(s, ".") {
		s += ".00"
	} else if len(s)-strings.Index(s, ".") == 2 {
		s += "0"
	}
	if sym, ok := currencySymbols[cur]; ok {
		return sym + s + "/" + unit
	}
	return string(cur) + " " + s + "/" + unit
}

// GroupDigits prints a non-negative integer with thousands separators: "13,312,345".
func GroupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	if len(s) <= 3 {
		return s
	}
	var b strings.Builder
	lead := len(s) % 3
	if lead > 0 {
		b.WriteString(s[:lead])
	}
	for i := lead; i < len(s); i += 3 {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s[i : i+3])
	}
	return b.String()
}

// mulDivRound returns a × b ÷ d rounded half away from zero, using a 128-bit
// product. It saturates instead of wrapping when the result leaves int64.
func mulDivRound(a, b, d int64) int64 {
	neg := (a < 0) != (b < 0)
	ua, ub := abs64(a), abs64(b)
	hi, lo := bits.Mul64(ua, ub)
	ud := uint64(d)
	if hi >= ud {
		if neg {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	q, r := bits.Div64(hi, lo, ud)
	if r >= ud-r { // r ≥ d/2 without overflow
		q++
	}
	if q > math.MaxInt64 {
		if neg {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	if neg {
		return -int64(q)
	}
	return int64(q)
}

func abs64(v int64) uint64 {
	if v < 0 {
		return uint64(-v)
	}
	return uint64(v)
}

// MonthForecast is the one forecast of a month's spend, used by the agent,
// the fleet server, /metrics, reports and both dashboards: what was spent so
// far in the UTC month of now, plus the current burn (the hourly rate of
// what runs now) over the hours left in that month. It assumes what runs
// keeps running and nothing else starts, which is what a budget alert must
// warn about; it never extrapolates past spend, which would read a box
// started yesterday as cheap.
func MonthForecast(spent Cents, burnPerHour Micros, now time.Time) Cents {
	return spent + MulCents(burnPerHour, MicrosFromFloat(MonthHoursLeft(now)))
}

// MonthHoursLeft is the time from now to the end of its UTC month, in hours.
func MonthHoursLeft(now time.Time) float64 {
	u := now.UTC()
	end := time.Date(u.Year(), u.Month(), 1, 0, 0, 0, 0, time.UTC).AddDate(0, 1, 0)
	return end.Sub(u).Hours()
}
