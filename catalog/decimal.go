package catalog

import (
	"errors"
	"math"
	"strconv"

	"github.com/gpuwarden/gpuwarden"
)

// The ways a number cell can be wrong; cellError turns them into the
// user-facing "column X: …" messages.
var (
	errNotNumber = errors.New("is not a number")
	errTooFine   = errors.New("has more than 6 decimal places")
	errRange     = errors.New("is out of range")
	errNegative  = errors.New("is negative")
)

// parseDecimal reads a decimal such as "3.79", "-0.2158", "1e-05" or
// "0.36979999999999996" into micros without passing through a float.
//
// With round set, digits past the sixth decimal are rounded half away from
// zero and an exponent is allowed: SkyPilot and gpuhunt write prices with
// pandas, which prints long binary-float tails and, for tiny numbers,
// scientific notation. With round unset only plain decimals with at most six
// significant decimals pass, the contract of gpuwarden.ParseMicros; it then
// only serves to say why ParseMicros refused a cell.
//
// It allocates nothing, which keeps a 50,000-row import cheap.
func parseDecimal(s string, round bool) (gpuwarden.Micros, error) {
	i, n := 0, len(s)
	neg := false
	if i < n && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	intStart := i
	for i < n && isDigit(s[i]) {
		i++
	}
	intEnd := i
	fracStart, fracEnd := i, i
	if i < n && s[i] == '.' {
		i++
		fracStart = i
		for i < n && isDigit(s[i]) {
			i++
		}
		fracEnd = i
	}
	if intEnd == intStart && fracEnd == fracStart {
		return 0, errNotNumber
	}
	exp := 0
	if i < n && (s[i] == 'e' || s[i] == 'E') {
		if !round {
			return 0, errNotNumber
		}
		i++
		expNeg := false
		if i < n && (s[i] == '+' || s[i] == '-') {
			expNeg = s[i] == '-'
			i++
		}
		expStart := i
		for i < n && isDigit(s[i]) {
			if exp < 10_000 { // beyond this every value over- or underflows anyway
				exp = exp*10 + int(s[i]-'0')
			}
			i++
		}
		if i == expStart {
			return 0, errNotNumber
		}
		if expNeg {
			exp = -exp
		}
	}
	if i != n {
		return 0, errNotNumber
	}

	nInt := intEnd - intStart
	total := nInt + fracEnd - fracStart
	digit := func(k int) uint64 {
		if k < nInt {
			return uint64(s[intStart+k] - '0')
		}
		return uint64(s[fracStart+k-nInt] - '0')
	}
	// Digit k has the place value 10^(point-1-k); those down to 10^-6 are
	// kept, the next one decides the rounding.
	point := nInt + exp
	keep := point + 6
	var v uint64
	for k := 0; k < keep; k++ {
		d := uint64(0)
		if k < total {
			d = digit(k)
		}
		if v > (math.MaxInt64-9)/10 {
			return 0, errRange
		}
		v = v*10 + d
	}
	first := max(keep, 0)
	if round {
		if keep >= 0 && keep < total && digit(keep) >= 5 {
			v++
		}
	} else {
		for k := first; k < total; k++ {
			if digit(k) != 0 {
				return 0, errTooFine
			}
		}
	}
	m := gpuwarden.Micros(v)
	if neg {
		m = -m
	}
	return m, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// parseExactMicros reads a price of our own format with gpuwarden.ParseMicros,
// which refuses to round, and names the fault in the words cells use.
func parseExactMicros(s string) (gpuwarden.Micros, error) {
	v, err := gpuwarden.ParseMicros(s)
	if err == nil {
		return v, nil
	}
	if _, why := parseDecimal(s, false); why != nil {
		return 0, why
	}
	return 0, errRange
}

// parseNumber reads a non-price quantity (GPU count, GB, vCPUs) as a float.
func parseNumber(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && ne.Err == strconv.ErrRange {
			return 0, errRange
		}
		return 0, errNotNumber
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, errNotNumber
	}
	return f, nil
}

// roundTo rounds f to the given number of decimals; VRAM and RAM figures come
// from divisions whose binary tails nobody wants to read.
func roundTo(f float64, decimals int) float64 {
	p := math.Pow(10, float64(decimals))
	return math.Round(f*p) / p
}
