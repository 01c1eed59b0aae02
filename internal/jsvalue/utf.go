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
			case c >= 0xC2 && c <= 0xDF:
				need, cp = 1, rune(c&0x1F)
			case c >= 0xE0 && c <= 0xEF:
				if c == 0xE0 {
					lower = 0xA0
				}
				if c == 0xED {
					upper = 0x9F
				}
				need, cp = 2, rune(c&0x0F)
			case c >= 0xF0 && c <= 0xF4:
				if c == 0xF0 {
					lower = 0x90
				}
				if c == 0xF4 {
					upper = 0x8F
				}
				need, cp = 3, rune(c&0x07)
			default:
				out = append(out, repl...)
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
