package session

// A small model of the JavaScript values that JSON.parse produces, so that the checks the
// reference performs in JavaScript (property access on undefined/null, typeof, ===, object
// spread, isDeepEqualJson, JSON.stringify, String(x)) can be reproduced exactly.
//
// Parsing keeps, for every value, the exact bytes it was read from (raw), so event data can be
// handed back byte for byte. Strings are decoded the way Node reads a UTF-8 file and JSON.parse
// decodes escapes: invalid UTF-8 becomes U+FFFD (WHATWG decoder), and a lone UTF-16 surrogate
// written as an escape is kept as its 3-byte WTF-8 form so that JSON.stringify can write it back.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

type jkind uint8

const (
	jNull jkind = iota
	jBool
	jNum
	jStr
	jArr
	jObj
)

// jval is one JSON value. A nil *jval stands for JavaScript undefined (an absent property).
type jval struct {
	kind jkind
	b    bool
	n    float64
	s    string
	arr  []*jval
	keys []string // object keys in first-insertion order (duplicates collapse, the last value wins)
	vals []*jval
	idx  map[string]int // built for larger objects only
	raw  []byte         // the exact source bytes of this value; nil for synthesized values
	// lossy is true when this value or a descendant is a number that JSON cannot carry losslessly
	// (non-finite after parsing, such as 1e400, or negative zero).
	lossy bool
}

// jsNull is the shared JavaScript null.
var jsNull = &jval{kind: jNull, raw: []byte("null")}

// maxJSONDepth bounds nesting so that no input can exhaust the stack; it equals encoding/json's
// limit, so whatever the public reading path accepts can be re-encoded anywhere. Inspect, which
// never re-encodes event data, allows inspectMaxJSONDepth. JSON.parse in Node has no limit; see
// DEPARTURES.md.
const (
	maxJSONDepth        = 10000
	inspectMaxJSONDepth = 100000
)

// jsonSyntaxError is a JSON syntax error at a byte offset of the parsed text.
type jsonSyntaxError struct {
	Offset int
	Why    string
}

func (e *jsonSyntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at byte %d: %s", e.Offset, e.Why)
}

// parseJSON parses exactly one JSON value (JSON whitespace around it is allowed), with
// JSON.parse's grammar.
func parseJSON(b []byte) (*jval, error) { return parseJSONDepth(b, maxJSONDepth) }

// parseJSONDepth is parseJSON with a nesting limit.
func parseJSONDepth(b []byte, maxDepth int) (*jval, error) {
	p := parser{b: b, maxDepth: maxDepth}
	p.ws()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.ws()
	if p.i != len(p.b) {
		return nil, p.fail("unexpected data after the JSON value")
	}
	return v, nil
}

type parser struct {
	b        []byte
	i        int
	maxDepth int
}

func (p *parser) fail(why string) error { return &jsonSyntaxError{Offset: p.i, Why: why} }

func (p *parser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) (*jval, error) {
	if p.i >= len(p.b) {
		return nil, p.fail("unexpected end of JSON input")
	}
	start := p.i
	switch c := p.b[p.i]; {
	case c == '{':
		if depth >= p.maxDepth {
			return nil, p.fail(fmt.Sprintf("nesting deeper than %d levels", p.maxDepth))
		}
		v := &jval{kind: jObj}
		p.i++
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == '}' {
			p.i++
			v.raw = p.b[start:p.i]
			return v, nil
		}
		for {
			p.ws()
			if p.i >= len(p.b) || p.b[p.i] != '"' {
				return nil, p.fail("expected a string key")
			}
			key, err := p.str()
			if err != nil {
				return nil, err
			}
			p.ws()
			if p.i >= len(p.b) || p.b[p.i] != ':' {
				return nil, p.fail("expected ':' after an object key")
			}
			p.i++
			p.ws()
			child, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			v.set(key, child)
			v.lossy = v.lossy || child.lossy
			p.ws()
			if p.i >= len(p.b) {
				return nil, p.fail("unexpected end of JSON input")
			}
			if p.b[p.i] == ',' {
				p.i++
				continue
			}
			if p.b[p.i] == '}' {
				p.i++
				v.raw = p.b[start:p.i]
				return v, nil
			}
			return nil, p.fail("expected ',' or '}' in an object")
		}
	case c == '[':
		if depth >= p.maxDepth {
			return nil, p.fail(fmt.Sprintf("nesting deeper than %d levels", p.maxDepth))
		}
		v := &jval{kind: jArr}
		p.i++
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == ']' {
			p.i++
			v.raw = p.b[start:p.i]
			return v, nil
		}
		for {
			p.ws()
			child, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			v.arr = append(v.arr, child)
			v.lossy = v.lossy || child.lossy
			p.ws()
			if p.i >= len(p.b) {
				return nil, p.fail("unexpected end of JSON input")
			}
			if p.b[p.i] == ',' {
				p.i++
				continue
			}
			if p.b[p.i] == ']' {
				p.i++
				v.raw = p.b[start:p.i]
				return v, nil
			}
			return nil, p.fail("expected ',' or ']' in an array")
		}
	case c == '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return &jval{kind: jStr, s: s, raw: p.b[start:p.i]}, nil
	case c == 't':
		return p.literal("true", &jval{kind: jBool, b: true})
	case c == 'f':
		return p.literal("false", &jval{kind: jBool})
	case c == 'n':
		return p.literal("null", &jval{kind: jNull})
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		return nil, p.fail(fmt.Sprintf("unexpected character %q", rune(c)))
	}
}

func (p *parser) literal(word string, v *jval) (*jval, error) {
	if len(p.b)-p.i < len(word) || string(p.b[p.i:p.i+len(word)]) != word {
		return nil, p.fail("invalid literal")
	}
	v.raw = p.b[p.i : p.i+len(word)]
	p.i += len(word)
	return v, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (p *parser) number() (*jval, error) {
	start := p.i
	if _, err := p.numberEnd(); err != nil {
		return nil, err
	}
	raw := p.b[start:p.i]
	f := parseNumberLiteral(raw)
	return &jval{kind: jNum, n: f, raw: raw, lossy: !losslessNumber(f)}, nil
}

// numberEnd advances over one JSON number literal.
func (p *parser) numberEnd() (struct{}, error) {
	if p.b[p.i] == '-' {
		p.i++
	}
	if p.i >= len(p.b) || !isDigit(p.b[p.i]) {
		return struct{}{}, p.fail("invalid number")
	}
	if p.b[p.i] == '0' {
		p.i++
	} else {
		for p.i < len(p.b) && isDigit(p.b[p.i]) {
			p.i++
		}
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if p.i >= len(p.b) || !isDigit(p.b[p.i]) {
			return struct{}{}, p.fail("invalid number")
		}
		for p.i < len(p.b) && isDigit(p.b[p.i]) {
			p.i++
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if p.i >= len(p.b) || !isDigit(p.b[p.i]) {
			return struct{}{}, p.fail("invalid number")
		}
		for p.i < len(p.b) && isDigit(p.b[p.i]) {
			p.i++
		}
	}
	return struct{}{}, nil
}

// parseNumberLiteral converts a JSON number literal exactly as JavaScript does (correct rounding;
// overflow gives ±Infinity, underflow ±0).
func parseNumberLiteral(raw []byte) float64 {
	f, _ := strconv.ParseFloat(string(raw), 64) // ErrRange still returns ±Inf or ±0, as JS does
	return f
}

// losslessNumber reports whether JSON can carry f unchanged (finite and not negative zero), the
// reference's snapshotJsonValue rule for numbers.
func losslessNumber(f float64) bool {
	return !math.IsInf(f, 0) && !math.IsNaN(f) && !(f == 0 && math.Signbit(f))
}

// validNumberLiteral reports whether s is exactly one JSON number literal.
func validNumberLiteral(s string) bool {
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

// str parses a JSON string starting at the opening quote and returns its decoded value.
func (p *parser) str() (string, error) {
	p.i++ // opening quote
	start := p.i
	// Fast path: no escapes, ASCII or valid UTF-8.
	for p.i < len(p.b) {
		if p.i = plainRun(p.b, p.i); p.i >= len(p.b) {
			break
		}
		c := p.b[p.i]
		if c == '"' {
			seg := p.b[start:p.i]
			p.i++
			if utf8.Valid(seg) {
				return string(seg), nil
			}
			return decodeUTF8Lossy(nil, seg), nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", p.fail("control character in string")
		}
		p.i++
	}
	if p.i >= len(p.b) {
		return "", p.fail("unterminated string")
	}
	// Slow path with escapes.
	out := make([]byte, 0, p.i-start+16)
	out = appendLossy(out, p.b[start:p.i])
	for {
		if p.i >= len(p.b) {
			return "", p.fail("unterminated string")
		}
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return string(out), nil
		case c < 0x20:
			return "", p.fail("control character in string")
		case c == '\\':
			p.i++
			if p.i >= len(p.b) {
				return "", p.fail("unterminated string")
			}
			e := p.b[p.i]
			p.i++
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				u, ok := p.hex4()
				if !ok {
					return "", p.fail("invalid \\u escape")
				}
				if u >= 0xD800 && u <= 0xDBFF && p.i+6 <= len(p.b) && p.b[p.i] == '\\' && p.b[p.i+1] == 'u' {
					save := p.i
					p.i += 2
					lo, ok2 := p.hex4()
					if ok2 && lo >= 0xDC00 && lo <= 0xDFFF {
						out = utf8.AppendRune(out, utf16.DecodeRune(rune(u), rune(lo)))
						continue
					}
					p.i = save
				}
				out = appendWTF8(out, rune(u))
			default:
				return "", p.fail("invalid escape")
			}
		default:
			// copy a run of plain bytes
			j := p.i
			for j < len(p.b) && p.b[j] != '"' && p.b[j] != '\\' && p.b[j] >= 0x20 {
				j++
			}
			out = appendLossy(out, p.b[p.i:j])
			p.i = j
		}
	}
}

func (p *parser) hex4() (uint16, bool) {
	if p.i+4 > len(p.b) {
		return 0, false
	}
	var u uint16
	for k := 0; k < 4; k++ {
		c := p.b[p.i+k]
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		u = u<<4 | uint16(d)
	}
	p.i += 4
	return u, true
}

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

// set adds or replaces an object member (JSON.parse semantics: a repeated key keeps its first
// position and takes the last value).
func (v *jval) set(key string, child *jval) {
	if i, ok := v.lookup(key); ok {
		v.vals[i] = child
		return
	}
	v.keys = append(v.keys, key)
	v.vals = append(v.vals, child)
	if v.idx != nil {
		v.idx[key] = len(v.keys) - 1
	} else if len(v.keys) > 12 {
		v.idx = make(map[string]int, len(v.keys)*2)
		for i, k := range v.keys {
			v.idx[k] = i
		}
	}
}

func (v *jval) lookup(key string) (int, bool) {
	if v.idx != nil {
		i, ok := v.idx[key]
		return i, ok
	}
	for i, k := range v.keys {
		if k == key {
			return i, true
		}
	}
	return 0, false
}

// field returns an own member of an object (nil when absent or when v is not an object).
func (v *jval) field(key string) *jval {
	if v == nil || v.kind != jObj {
		return nil
	}
	if i, ok := v.lookup(key); ok {
		return v.vals[i]
	}
	return nil
}

// hasOwn is Object.hasOwn for objects and arrays.
func (v *jval) hasOwn(key string) bool {
	if v == nil {
		return false
	}
	switch v.kind {
	case jObj:
		_, ok := v.lookup(key)
		return ok
	case jArr:
		i, ok := arrayIndex(key)
		return ok && i < uint64(len(v.arr))
	}
	return false
}

// ownKeyCount is Object.keys(v).length for objects and arrays.
func (v *jval) ownKeyCount() int {
	switch v.kind {
	case jObj:
		return len(v.keys)
	case jArr:
		return len(v.arr)
	case jStr:
		return len(utf16Units(v.s))
	}
	return 0
}

// hasExactKeys is the reference's chunk-rows hasExactKeys.
func hasExactKeys(v *jval, keys ...string) bool {
	if v.ownKeyCount() != len(keys) {
		return false
	}
	for _, k := range keys {
		if !v.hasOwn(k) {
			return false
		}
	}
	return true
}

// arrayIndex reports whether key is a canonical array index ("0", "17"; not "01" or "-1").
func arrayIndex(key string) (uint64, bool) {
	if key == "" || len(key) > 10 || (len(key) > 1 && key[0] == '0') {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(key); i++ {
		if !isDigit(key[i]) {
			return 0, false
		}
		n = n*10 + uint64(key[i]-'0')
	}
	return n, n <= 4294967294
}

// errJS is a JavaScript TypeError raised by the reference on malformed data.
type errJS struct{ msg string }

func (e *errJS) Error() string { return e.msg }

// get is JavaScript property access v[key]: a TypeError on undefined or null, undefined (nil)
// for a missing property.
func get(v *jval, key string) (*jval, error) {
	if v == nil {
		return nil, &errJS{"Cannot read properties of undefined (reading '" + key + "')"}
	}
	switch v.kind {
	case jNull:
		return nil, &errJS{"Cannot read properties of null (reading '" + key + "')"}
	case jObj:
		return v.field(key), nil
	case jArr:
		if key == "length" {
			return numVal(float64(len(v.arr))), nil
		}
		if i, ok := arrayIndex(key); ok && i < uint64(len(v.arr)) {
			return v.arr[i], nil
		}
	case jStr:
		units := utf16Units(v.s)
		if key == "length" {
			return numVal(float64(len(units))), nil
		}
		if i, ok := arrayIndex(key); ok && i < uint64(len(units)) {
			return strVal(unitsString(units[i : i+1])), nil
		}
	}
	return nil, nil
}

// getPath applies get along a path, returning the first TypeError.
func getPath(v *jval, keys ...string) (*jval, error) {
	var err error
	for _, k := range keys {
		if v, err = get(v, k); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func numVal(f float64) *jval { return &jval{kind: jNum, n: f} }
func strVal(s string) *jval  { return &jval{kind: jStr, s: s} }

// isObjectLike is typeof v === "object" && v !== null (objects and arrays).
func isObjectLike(v *jval) bool { return v != nil && (v.kind == jObj || v.kind == jArr) }

// isPlainObject is a non-null, non-array object.
func isPlainObject(v *jval) bool { return v != nil && v.kind == jObj }

func isNullish(v *jval) bool { return v == nil || v.kind == jNull }

func isString(v *jval, s string) bool { return v != nil && v.kind == jStr && v.s == s }

func isNonEmptyString(v *jval) bool { return v != nil && v.kind == jStr && v.s != "" }

// truthy is JavaScript truthiness.
func truthy(v *jval) bool {
	if v == nil {
		return false
	}
	switch v.kind {
	case jNull:
		return false
	case jBool:
		return v.b
	case jNum:
		return v.n != 0 && !math.IsNaN(v.n)
	case jStr:
		return v.s != ""
	}
	return true
}

const maxSafeInteger = 1<<53 - 1

// isSafeInteger is Number.isSafeInteger for a float64.
func isSafeInteger(f float64) bool {
	return !math.IsInf(f, 0) && !math.IsNaN(f) && f == math.Trunc(f) && math.Abs(f) <= maxSafeInteger
}

// isEventSeq is the reference's isEventSeq: a non-negative safe integer number.
func isEventSeq(v *jval) bool { return v != nil && v.kind == jNum && isSafeInteger(v.n) && v.n >= 0 }

// strictEqual is JavaScript === for two values (objects compare by identity).
func strictEqual(a, b *jval) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	if a == b {
		return true
	}
	if a.kind != b.kind {
		return false
	}
	switch a.kind {
	case jNull:
		return true
	case jBool:
		return a.b == b.b
	case jNum:
		return a.n == b.n
	case jStr:
		return a.s == b.s
	}
	return false
}

// deepEqualJSON is the reference's isDeepEqualJson.
func deepEqualJSON(a, b *jval) bool {
	if strictEqual(a, b) {
		return true
	}
	aArr, bArr := a != nil && a.kind == jArr, b != nil && b.kind == jArr
	if aArr || bArr {
		if !aArr || !bArr || len(a.arr) != len(b.arr) {
			return false
		}
		for i := range a.arr {
			if !deepEqualJSON(a.arr[i], b.arr[i]) {
				return false
			}
		}
		return true
	}
	if !isObjectLike(a) || !isObjectLike(b) {
		return false
	}
	if len(a.keys) != len(b.keys) {
		return false
	}
	for i, k := range a.keys {
		j, ok := b.lookup(k)
		if !ok || !deepEqualJSON(a.vals[i], b.vals[j]) {
			return false
		}
	}
	return true
}

// spread is the object spread {...v}: a fresh object with v's own enumerable properties.
func spread(v *jval) *jval {
	out := &jval{kind: jObj}
	if v == nil {
		return out
	}
	switch v.kind {
	case jObj:
		for i, k := range v.keys {
			out.set(k, v.vals[i])
		}
	case jArr:
		for i, e := range v.arr {
			out.set(strconv.Itoa(i), e)
		}
	case jStr:
		units := utf16Units(v.s)
		for i := range units {
			out.set(strconv.Itoa(i), strVal(unitsString(units[i:i+1])))
		}
	}
	return out
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

// jsNumberString is Number.prototype.toString() (ECMAScript Number::toString, radix 10).
// Non-finite values return "null", which is what JSON.stringify writes for them.
func jsNumberString(f float64) string {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return "null"
	}
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

// jsToString is String(v) for JSON values.
func jsToString(v *jval) string {
	if v == nil {
		return "undefined"
	}
	switch v.kind {
	case jNull:
		return "null"
	case jBool:
		if v.b {
			return "true"
		}
		return "false"
	case jNum:
		return jsNumberString(v.n)
	case jStr:
		return v.s
	case jArr:
		parts := make([]string, len(v.arr))
		for i, e := range v.arr {
			if !isNullish(e) {
				parts[i] = jsToString(e)
			}
		}
		return strings.Join(parts, ",")
	}
	return "[object Object]"
}

// stringify is JSON.stringify(v); undefined gives nil.
func stringify(v *jval) []byte {
	if v == nil {
		return nil
	}
	return appendStringify(nil, v)
}

func appendStringify(dst []byte, v *jval) []byte {
	switch v.kind {
	case jNull:
		return append(dst, "null"...)
	case jBool:
		if v.b {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case jNum:
		return append(dst, jsNumberString(v.n)...)
	case jStr:
		return appendJSString(dst, v.s)
	case jArr:
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
		dst = appendJSString(dst, v.keys[i])
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
		if _, ok := arrayIndex(k); ok {
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
		x, _ := arrayIndex(keys[idxKeys[a]])
		y, _ := arrayIndex(keys[idxKeys[b]])
		return x < y
	})
	order = append(order, idxKeys...)
	for i, k := range keys {
		if _, ok := arrayIndex(k); !ok {
			order = append(order, i)
		}
	}
	return order
}

const hexDigits = "0123456789abcdef"

// appendJSString appends s as JSON.stringify writes a string: only '"', '\\' and control
// characters are escaped, lone surrogates become \udxxx, invalid bytes U+FFFD; no HTML escaping.
func appendJSString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < 0x80 {
			switch {
			case c == '"':
				dst = append(dst, '\\', '"')
			case c == '\\':
				dst = append(dst, '\\', '\\')
			case c == '\b':
				dst = append(dst, '\\', 'b')
			case c == '\f':
				dst = append(dst, '\\', 'f')
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
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

// jsQuote is the text `"${s}"` of a JavaScript template literal (no escaping at all).
func jsQuote(s string) string { return `"` + s + `"` }

// isJSWhitespaceOnly reports whether String.prototype.trim() would leave line empty.
func isJSWhitespaceOnly(line []byte) bool {
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

// scanJSON validates exactly one JSON value like parseJSON, without building it, and reports
// whether it holds a number JSON cannot carry losslessly. It returns a placeholder *jval of the
// right kind, with raw and lossy set and no members: for data whose fields are never read.
func scanJSON(b []byte) (*jval, error) {
	p := parser{b: b, maxDepth: maxJSONDepth}
	p.ws()
	start := p.i
	lossy, err := p.skip(0)
	if err != nil {
		return nil, err
	}
	end := p.i
	p.ws()
	if p.i != len(p.b) {
		return nil, p.fail("unexpected data after the JSON value")
	}
	v := &jval{raw: b[start:end], lossy: lossy}
	switch b[start] {
	case '{':
		v.kind = jObj
	case '[':
		v.kind = jArr
	case '"':
		v.kind = jStr
	case 't', 'f':
		v.kind = jBool
	case 'n':
		v.kind = jNull
	default:
		v.kind = jNum
	}
	return v, nil
}

// skip is value() without building anything.
func (p *parser) skip(depth int) (bool, error) {
	if p.i >= len(p.b) {
		return false, p.fail("unexpected end of JSON input")
	}
	switch c := p.b[p.i]; {
	case c == '{' || c == '[':
		if depth >= p.maxDepth {
			return false, p.fail(fmt.Sprintf("nesting deeper than %d levels", p.maxDepth))
		}
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		p.i++
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == closer {
			p.i++
			return false, nil
		}
		lossy := false
		for {
			p.ws()
			if c == '{' {
				if p.i >= len(p.b) || p.b[p.i] != '"' {
					return false, p.fail("expected a string key")
				}
				if err := p.skipString(); err != nil {
					return false, err
				}
				p.ws()
				if p.i >= len(p.b) || p.b[p.i] != ':' {
					return false, p.fail("expected ':' after an object key")
				}
				p.i++
				p.ws()
			}
			l, err := p.skip(depth + 1)
			if err != nil {
				return false, err
			}
			lossy = lossy || l
			p.ws()
			if p.i >= len(p.b) {
				return false, p.fail("unexpected end of JSON input")
			}
			if p.b[p.i] == ',' {
				p.i++
				continue
			}
			if p.b[p.i] == closer {
				p.i++
				return lossy, nil
			}
			return false, p.fail("expected ',' or a closing bracket")
		}
	case c == '"':
		return false, p.skipString()
	case c == 't':
		_, err := p.literal("true", &jval{})
		return false, err
	case c == 'f':
		_, err := p.literal("false", &jval{})
		return false, err
	case c == 'n':
		_, err := p.literal("null", &jval{})
		return false, err
	case c == '-' || (c >= '0' && c <= '9'):
		start := p.i
		if _, err := p.numberEnd(); err != nil {
			return false, err
		}
		raw := p.b[start:p.i]
		// Only a negative literal (possibly -0) or a long or exponent form can be lossy.
		if raw[0] == '-' || len(raw) > 300 || bytes.IndexAny(raw, "eE") >= 0 {
			return !losslessNumber(parseNumberLiteral(raw)), nil
		}
		return false, nil
	default:
		return false, p.fail(fmt.Sprintf("unexpected character %q", rune(c)))
	}
}

// skipString validates a string starting at its opening quote, without decoding it.
func (p *parser) skipString() error {
	p.i++
	for {
		p.i = plainRun(p.b, p.i)
		if p.i >= len(p.b) {
			return p.fail("unterminated string")
		}
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return nil
		case c < 0x20:
			return p.fail("control character in string")
		default: // '\\'
			p.i++
			if p.i >= len(p.b) {
				return p.fail("unterminated string")
			}
			switch p.b[p.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.i++
			case 'u':
				p.i++
				if _, ok := p.hex4(); !ok {
					return p.fail("invalid \\u escape")
				}
			default:
				return p.fail("invalid escape")
			}
		}
	}
}

// plainRun returns the index of the first byte of b at or after i that ends a run of plain string
// bytes: '"', '\\' or a control character (< 0x20); len(b) when there is none. It tests eight bytes
// at a time (SWAR): a word has such a byte iff hasZero(x^'"'), hasZero(x^'\\') or hasLess(x, 0x20)
// is non-zero (exact for the existence test; the byte is then found one at a time).
func plainRun(b []byte, i int) int {
	const (
		ones   = 0x0101010101010101
		highs  = 0x8080808080808080
		quote  = '"' * ones
		bslash = '\\' * ones
		ctl    = 0x20 * ones
	)
	for i+8 <= len(b) {
		x := binary.LittleEndian.Uint64(b[i:])
		q, s := x^quote, x^bslash
		if ((q-ones)&^q|(s-ones)&^s|(x-ctl)&^x)&highs != 0 {
			break
		}
		i += 8
	}
	for i < len(b) {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
			return i
		}
		i++
	}
	return i
}
