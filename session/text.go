package session

import (
	"bytes"
	"unicode/utf8"

	"github.com/agentlog/agentlog/internal/jsvalue"
)

// WellFormed returns b as the reference reads it: Node decodes a log with the WHATWG UTF-8
// decoder, so each maximal ill-formed subsequence (a byte-cut emoji F0 9F 98, a raw surrogate
// ED A0 BD, a stray continuation byte) becomes U+FFFD. It returns b itself, without copying, when
// b is valid UTF-8. Escapes such as \ud83d are text, not bytes, and are kept.
func WellFormed(b []byte) []byte {
	if utf8.Valid(b) {
		return b
	}
	return jsvalue.AppendWellFormed(make([]byte, 0, len(b)+8), b)
}

// SanitizeText returns the JSON text b with every ill-formed UTF-8 sequence replaced by U+FFFD
// as WellFormed does and, unless keepLoneSurrogates, every \uD800–\uDFFF escape that is not half
// of a pair replaced by U+FFFD too; n is the number of JSON strings changed. It returns b itself
// and n = 0 when there is nothing to replace (checked first, without allocating). It does not
// validate b: text that is not JSON is repaired byte by byte and refused later by the log's rules.
func SanitizeText(b []byte, keepLoneSurrogates bool) (out []byte, n int) {
	if utf8.Valid(b) && (keepLoneSurrogates || !hasLoneSurrogateEscape(b)) {
		return b, 0
	}
	return sanitizeSlow(b, keepLoneSurrogates)
}

// hasLoneSurrogateEscape reports whether b may hold a \uD800–\uDFFF escape that is not half of
// a pair (any case), without allocating. Pairs are skipped, and so is "\\ud83d" (an escaped
// backslash: the text \ud83d); what it cannot rule out it reports, for the slow path to decide.
func hasLoneSurrogateEscape(b []byte) bool {
	for i := 0; ; {
		k := bytes.Index(b[i:], []byte(`\u`))
		if k < 0 {
			return false
		}
		i += k
		bs := 1 // backslashes ending at i: odd means b[i] starts an escape
		for j := i - 1; j >= 0 && b[j] == '\\'; j-- {
			bs++
		}
		u, ok := hex4At(b, i+2)
		switch {
		case bs%2 == 0 || !ok || u < 0xD800 || u > 0xDFFF:
			i += 2
		case u <= 0xDBFF && i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u':
			if lo, ok := hex4At(b, i+8); ok && lo >= 0xDC00 && lo <= 0xDFFF {
				i += 12
				continue
			}
			return true
		default:
			return true
		}
	}
}

const replacementChar = "\uFFFD"

func sanitizeSlow(b []byte, keep bool) ([]byte, int) {
	out := make([]byte, 0, len(b)+8)
	n := 0
	inStr, changed := false, false
	mark := func() {
		if inStr {
			changed = true
		} else {
			n++ // outside a string (not JSON): count each repair
		}
	}
	for i := 0; i < len(b); {
		c := b[i]
		if c >= 0x80 {
			j := i + 1
			for j < len(b) && b[j] >= 0x80 {
				j++
			}
			// An ASCII byte always ends an ill-formed sequence, so a run decodes as in the whole.
			if seg := b[i:j]; utf8.Valid(seg) {
				out = append(out, seg...)
			} else {
				out = jsvalue.AppendWellFormed(out, seg)
				mark()
			}
			i = j
			continue
		}
		if !inStr {
			if c == '"' {
				inStr, changed = true, false
			}
			out = append(out, c)
			i++
			continue
		}
		switch {
		case c == '"':
			if changed {
				n++
			}
			inStr = false
			out = append(out, c)
			i++
		case c == '\\' && i+1 < len(b) && b[i+1] == 'u':
			u, ok := hex4At(b, i+2)
			if !ok {
				out = append(out, b[i:i+2]...) // not JSON; what follows is read as text
				i += 2
				continue
			}
			if u < 0xD800 || u > 0xDFFF || keep {
				out = append(out, b[i:i+6]...)
				i += 6
				continue
			}
			if u <= 0xDBFF && i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
				if lo, ok := hex4At(b, i+8); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					out = append(out, b[i:i+12]...)
					i += 12
					continue
				}
			}
			out = append(out, replacementChar...)
			mark()
			i += 6
		case c == '\\' && i+1 < len(b) && b[i+1] < 0x80:
			out = append(out, b[i:i+2]...)
			i += 2
		default:
			out = append(out, c)
			i++
		}
	}
	if inStr && changed {
		n++
	}
	return out, n
}

// hex4At decodes the 4 hex digits at b[i:i+4].
func hex4At(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var u rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			u = u<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			u = u<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			u = u<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return u, true
}
