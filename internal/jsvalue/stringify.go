package jsvalue

import (
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ToString is String(v): "undefined" for nil, "[object Object]" for an object.
func ToString(v *Value) string {
	if v == nil {
		return "undefined"
	}
	switch v.kind {
	case Null:
		return "null"
	case Bool:
		if v.b {
			return "true"
		}
		return "false"
	case Number:
		return NumberString(v.n)
	case String:
		return v.s
	case Array:
		parts := make([]string, len(v.arr))
		for i, e := range v.arr {
			if !IsNullish(e) {
				parts[i] = ToString(e)
			}
		}
		return strings.Join(parts, ",")
	}
	return "[object Object]"
}

// Stringify is JSON.stringify(v) (compact, keys in JavaScript own-key order); nil for undefined.
func Stringify(v *Value) []byte {
	if v == nil {
		return nil
	}
	return appendStringify(nil, v)
}

func appendStringify(dst []byte, v *Value) []byte {
	switch v.kind {
	case Null:
		return append(dst, "null"...)
	case Bool:
		if v.b {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case Number:
		return append(dst, NumberJSON(v.n)...)
	case String:
		return AppendQuote(dst, v.s)
	case Array:
		dst = append(dst, '[')
		for i, e := range v.arr {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendStringify(dst, e)
		}
		return append(dst, ']')
	}
	dst = append(dst, '{')
	first := true
	for _, i := range jsKeyOrder(v.keys) {
		if v.vals[i] == nil {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = AppendQuote(dst, v.keys[i])
		dst = append(dst, ':')
		dst = appendStringify(dst, v.vals[i])
	}
	return append(dst, '}')
}

// jsKeyOrder returns the member positions in JavaScript own-key order: array-index keys
// ascending, then the other keys in insertion order.
func jsKeyOrder(keys []string) []int {
	order := make([]int, 0, len(keys))
	var idxKeys []int
	for i, k := range keys {
		if _, ok := ArrayIndex(k); ok {
			idxKeys = append(idxKeys, i)
		}
	}
	if len(idxKeys) == 0 {
		for i := range keys {
			order = append(order, i)
		}
		return order
	}
	sort.Slice(idxKeys, func(a, b int) bool {
		x, _ := ArrayIndex(keys[idxKeys[a]])
		y, _ := ArrayIndex(keys[idxKeys[b]])
		return x < y
	})
	order = append(order, idxKeys...)
	for i, k := range keys {
		if _, ok := ArrayIndex(k); !ok {
			order = append(order, i)
		}
	}
	return order
}

const hexDigits = "0123456789abcdef"

// Quote is JSON.stringify(s) for a string: only '"', '\\' and control characters are escaped,
// lone surrogates become \udxxx, invalid bytes U+FFFD; no HTML escaping. AppendQuote appends it.
func Quote(s string) string { return string(AppendQuote(nil, s)) }

// shortEscape is the letter JSON.stringify escapes an ASCII byte with (0: none).
var shortEscape = [0x80]byte{'"': '"', '\\': '\\', '\b': 'b', '\f': 'f', '\n': 'n', '\r': 'r', '\t': 't'}

// AppendQuote appends Quote(s) to dst.
func AppendQuote(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < 0x80 {
			switch e := shortEscape[c]; {
			case e != 0:
				dst = append(dst, '\\', e)
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := decodeWTF8(s, i)
		switch {
		case r >= 0xD800 && r <= 0xDFFF:
			dst = append(dst, '\\', 'u', hexDigits[r>>12&0xF], hexDigits[r>>8&0xF], hexDigits[r>>4&0xF], hexDigits[r&0xF])
		case r == utf8.RuneError && size == 1:
			dst = append(dst, "\uFFFD"...)
		default:
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}

// AppendInts appends JSON.stringify(xs) for an array of integers.
func AppendInts(dst []byte, xs []int64) []byte {
	dst = append(dst, '[')
	for i, x := range xs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, x, 10)
	}
	return append(dst, ']')
}

// IsBlank reports whether String.prototype.trim() would leave line empty.
func IsBlank(line []byte) bool {
	for i := 0; i < len(line); {
		c := line[i]
		if c < 0x80 {
			switch c {
			case '\t', '\n', '\v', '\f', '\r', ' ':
				i++
				continue
			}
			return false
		}
		r, size := utf8.DecodeRune(line[i:])
		if r == utf8.RuneError && size == 1 {
			return false
		}
		switch {
		case r == 0xA0, r == 0x1680, r >= 0x2000 && r <= 0x200A, r == 0x2028, r == 0x2029,
			r == 0x202F, r == 0x205F, r == 0x3000, r == 0xFEFF:
			i += size
		default:
			return false
		}
	}
	return true
}
