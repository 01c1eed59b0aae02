package jsvalue

import (
	"unicode/utf16"
	"unicode/utf8"
)

// appendWTF8 appends r; surrogate code points get their generalized 3-byte UTF-8 form.
func appendWTF8(dst []byte, r rune) []byte {
	if r >= 0xD800 && r <= 0xDFFF {
		return append(dst, byte(0xE0|(r>>12)), byte(0x80|((r>>6)&0x3F)), byte(0x80|(r&0x3F)))
	}
	return utf8.AppendRune(dst, r)
}

func appendLossy(dst, seg []byte) []byte {
	if utf8.Valid(seg) {
		return append(dst, seg...)
	}
	return []byte(decodeUTF8Lossy(dst, seg))
}

// decodeUTF8Lossy decodes b with the WHATWG UTF-8 decoder (what Node's Buffer.toString('utf8')
// does): each maximal ill-formed subsequence becomes one U+FFFD.
func decodeUTF8Lossy(dst []byte, b []byte) string {
	out := dst
	const repl = "\uFFFD"
	need, seen := 0, 0
	var cp rune
	lower, upper := byte(0x80), byte(0xBF)
	for i := 0; i < len(b); i++ {
		c := b[i]
		if need == 0 {
			switch {
			case c <= 0x7F:
				out = append(out, c)
			default:
				if need, lower, upper = leadByte(c); need == 0 {
					out = append(out, repl...)
				}
				cp = rune(c & (0x3F >> need))
			}
			continue
		}
		if c < lower || c > upper {
			need, seen, cp = 0, 0, 0
			lower, upper = 0x80, 0xBF
			out = append(out, repl...)
			i-- // reprocess this byte
			continue
		}
		lower, upper = 0x80, 0xBF
		cp = cp<<6 | rune(c&0x3F)
		seen++
		if seen == need {
			out = utf8.AppendRune(out, cp)
			need, seen, cp = 0, 0, 0
		}
	}
	if need != 0 {
		out = append(out, repl...)
	}
	return string(out)
}

// leadByte returns how many continuation bytes the UTF-8 lead byte c needs (0: c is no lead byte)
// and the range the first of them must be in (the WHATWG decoder's lower and upper boundary).
func leadByte(c byte) (need int, lower, upper byte) {
	for _, l := range leadBytes {
		if c >= l.first && c <= l.last {
			return l.need, l.lower, l.upper
		}
	}
	return 0, 0x80, 0xBF
}

// leadBytes is the WHATWG UTF-8 decoder's table: lead bytes first..last need need continuation
// bytes, the first of them in lower..upper.
var leadBytes = [...]struct {
	first, last, lower, upper byte
	need                      int
}{
	{0xC2, 0xDF, 0x80, 0xBF, 1},
	{0xE0, 0xE0, 0xA0, 0xBF, 2}, {0xE1, 0xEC, 0x80, 0xBF, 2}, {0xED, 0xED, 0x80, 0x9F, 2}, {0xEE, 0xEF, 0x80, 0xBF, 2},
	{0xF0, 0xF0, 0x90, 0xBF, 3}, {0xF1, 0xF3, 0x80, 0xBF, 3}, {0xF4, 0xF4, 0x80, 0x8F, 3},
}

// utf16Units returns the UTF-16 code units of a (WTF-8) string, as JavaScript sees it.
func utf16Units(s string) []uint16 {
	out := make([]uint16, 0, len(s))
	for i := 0; i < len(s); {
		r, size := decodeWTF8(s, i)
		i += size
		if r >= 0x10000 {
			r1, r2 := utf16.EncodeRune(r)
			out = append(out, uint16(r1), uint16(r2))
		} else {
			out = append(out, uint16(r))
		}
	}
	return out
}

// unitsString turns UTF-16 code units back into a WTF-8 string.
func unitsString(units []uint16) string {
	var out []byte
	for i := 0; i < len(units); i++ {
		u := rune(units[i])
		if u >= 0xD800 && u <= 0xDBFF && i+1 < len(units) && units[i+1] >= 0xDC00 && units[i+1] <= 0xDFFF {
			out = utf8.AppendRune(out, utf16.DecodeRune(u, rune(units[i+1])))
			i++
			continue
		}
		out = appendWTF8(out, u)
	}
	return string(out)
}

// decodeWTF8 decodes one code point at s[i]; a generalized-UTF-8 surrogate decodes to itself,
// any other invalid byte to U+FFFD (size 1).
func decodeWTF8(s string, i int) (rune, int) {
	c := s[i]
	if c < 0x80 {
		return rune(c), 1
	}
	r, size := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && size == 1 {
		if c == 0xED && i+2 < len(s) && s[i+1] >= 0xA0 && s[i+1] <= 0xBF && s[i+2] >= 0x80 && s[i+2] <= 0xBF {
			return rune(0xD000 | rune(s[i+1]&0x3F)<<6 | rune(s[i+2]&0x3F)), 3
		}
		return utf8.RuneError, 1
	}
	return r, size
}
