package jsvalue

import (
	"fmt"
	"slices"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is the nesting limit of Parse, Scan and ParseShallow: encoding/json's, so that what
// they accept can be re-encoded anywhere (JSON.parse in Node has no limit).
const MaxDepth = 10000

// SyntaxError is a JSON syntax error at a byte offset of the parsed text.
type SyntaxError struct {
	Offset int
	Why    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at byte %d: %s", e.Offset, e.Why)
}

// Parse parses exactly one JSON value (JSON whitespace around it is allowed) with JSON.parse's
// grammar, nested at most MaxDepth deep; errors are *SyntaxError.
func Parse(b []byte) (*Value, error) { return ParseDepth(b, MaxDepth) }

// ParseDepth is Parse with a nesting limit.
func ParseDepth(b []byte, maxDepth int) (*Value, error) {
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

func (p *parser) fail(why string) error { return &SyntaxError{Offset: p.i, Why: why} }

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

func (p *parser) value(depth int) (*Value, error) {
	if p.i >= len(p.b) {
		return nil, p.fail("unexpected end of JSON input")
	}
	start := p.i
	switch c := p.b[p.i]; {
	case c == '{':
		if depth >= p.maxDepth {
			return nil, p.fail(fmt.Sprintf("nesting deeper than %d levels", p.maxDepth))
		}
		return p.object(depth, false, nil)
	case c == '[':
		if depth >= p.maxDepth {
			return nil, p.fail(fmt.Sprintf("nesting deeper than %d levels", p.maxDepth))
		}
		v := &Value{kind: Array}
		if p.empty(v, start, ']') {
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
			if more, err := p.more(v, start, ']', "expected ',' or ']' in an array"); !more {
				if err != nil {
					return nil, err
				}
				return v, nil
			}
		}
	case c == '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return &Value{kind: String, s: s, raw: p.b[start:p.i]}, nil
	case c == 't':
		return p.literal("true", &Value{kind: Bool, b: true})
	case c == 'f':
		return p.literal("false", &Value{kind: Bool})
	case c == 'n':
		return p.literal("null", &Value{kind: Null})
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		return nil, p.fail(fmt.Sprintf("unexpected character %q", rune(c)))
	}
}

// object parses the object at p.i, nested depth deep (at most maxDepth, checked by the caller).
// With shallow, only the members named in full are built; the others are validated and kept as
// placeholders, as Scan returns them.
func (p *parser) object(depth int, shallow bool, full []string) (*Value, error) {
	start := p.i
	v := &Value{kind: Object}
	if p.empty(v, start, '}') {
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
		var child *Value
		if !shallow || slices.Contains(full, key) {
			if child, err = p.value(depth + 1); err != nil {
				return nil, err
			}
		} else {
			cs := p.i
			lossy, err := p.skip(depth + 1) // fails at the end of the input, as value does
			if err != nil {
				return nil, err
			}
			child = &Value{kind: kindOf(p.b[cs]), raw: p.b[cs:p.i], lossy: lossy}
		}
		v.Set(key, child)
		v.lossy = v.lossy || child.lossy
		if more, err := p.more(v, start, '}', "expected ',' or '}' in an object"); !more {
			if err != nil {
				return nil, err
			}
			return v, nil
		}
	}
}

// empty reads the opening bracket of v (at start) and reports whether close follows at once (then
// read, and v.raw set).
func (p *parser) empty(v *Value, start int, close byte) bool {
	p.i++
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == close {
		p.i++
		v.raw = p.b[start:p.i]
		return true
	}
	return false
}

// more reads what follows a member of the array or object v begun at start: true after a ',',
// false after close (v.raw then set); an error (wrong when it is not) otherwise.
func (p *parser) more(v *Value, start int, close byte, wrong string) (bool, error) {
	p.ws()
	switch {
	case p.i >= len(p.b):
		return false, p.fail("unexpected end of JSON input")
	case p.b[p.i] == ',':
		p.i++
		return true, nil
	case p.b[p.i] == close:
		p.i++
		v.raw = p.b[start:p.i]
		return false, nil
	}
	return false, p.fail(wrong)
}

func (p *parser) literal(word string, v *Value) (*Value, error) {
	if len(p.b)-p.i < len(word) || string(p.b[p.i:p.i+len(word)]) != word {
		return nil, p.fail("invalid literal")
	}
	v.raw = p.b[p.i : p.i+len(word)]
	p.i += len(word)
	return v, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (p *parser) number() (*Value, error) {
	start := p.i
	if _, err := p.numberEnd(); err != nil {
		return nil, err
	}
	raw := p.b[start:p.i]
	f := ParseNumber(raw)
	return &Value{kind: Number, n: f, raw: raw, lossy: !IsLossless(f)}, nil
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

// str parses a JSON string starting at the opening quote and returns its decoded value.
func (p *parser) str() (string, error) {
	p.i++ // opening quote
	start := p.i
	// Fast path: no escapes, ASCII or valid UTF-8.
	for p.i < len(p.b) {
		if p.i = PlainRun(p.b, p.i); p.i >= len(p.b) {
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
