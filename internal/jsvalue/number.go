package jsvalue

import (
	"math"
	"strconv"
	"strings"
)

// ParseNumber converts a JSON number literal exactly as JavaScript does (correct rounding;
// overflow gives ±Infinity, underflow ±0).
func ParseNumber(raw []byte) float64 {
	f, _ := strconv.ParseFloat(string(raw), 64) // ErrRange still returns ±Inf or ±0, as JS does
	return f
}

// IsLossless reports whether JSON can carry f unchanged: finite and not negative zero.
func IsLossless(f float64) bool {
	return !math.IsInf(f, 0) && !math.IsNaN(f) && !(f == 0 && math.Signbit(f))
}

// ValidNumber reports whether s is exactly one JSON number literal.
func ValidNumber(s string) bool {
	if s == "" {
		return false
	}
	i := 0
	if s[i] == '-' {
		i++
	}
	if i >= len(s) || !isDigit(s[i]) {
		return false
	}
	if s[i] == '0' {
		i++
	} else {
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || !isDigit(s[i]) {
			return false
		}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || !isDigit(s[i]) {
			return false
		}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	return i == len(s)
}

// MaxSafeInteger is Number.MAX_SAFE_INTEGER.
const MaxSafeInteger = 1<<53 - 1

// IsSafeInteger is Number.isSafeInteger for a float64.
func IsSafeInteger(f float64) bool {
	return !math.IsInf(f, 0) && !math.IsNaN(f) && f == math.Trunc(f) && math.Abs(f) <= MaxSafeInteger
}

// NumberString is String(f), Number::toString in radix 10: 1e+21, 0.000001, 1e-7, 123.456,
// Infinity, -Infinity, NaN.
func NumberString(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return finiteString(f)
}

// NumberJSON is JSON.stringify(f): NumberString, or "null" for a non-finite f.
func NumberJSON(f float64) string {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return "null"
	}
	return finiteString(f)
}

func finiteString(f float64) string {
	if f == 0 {
		return "0"
	}
	neg := f < 0
	if neg {
		f = -f
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddddde±XX, shortest round-trip digits
	mant, expPart, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	exp, _ := strconv.Atoi(expPart)
	k := len(digits)
	n := exp + 1
	var out string
	switch {
	case k <= n && n <= 21:
		out = digits + strings.Repeat("0", n-k)
	case 0 < n && n <= 21:
		out = digits[:n] + "." + digits[n:]
	case -6 < n && n <= 0:
		out = "0." + strings.Repeat("0", -n) + digits
	default:
		sign := "+"
		if n-1 < 0 {
			sign = "-"
		}
		ex := n - 1
		if ex < 0 {
			ex = -ex
		}
		if k == 1 {
			out = digits + "e" + sign + strconv.Itoa(ex)
		} else {
			out = digits[:1] + "." + digits[1:] + "e" + sign + strconv.Itoa(ex)
		}
	}
	if neg {
		return "-" + out
	}
	return out
}
