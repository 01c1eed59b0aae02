package jsvalue

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"unicode/utf8"
)

// Scan validates exactly one JSON value like Parse, without building it. It returns a
// placeholder of the right kind with Raw and Lossy set and no members (for data never read).
func Scan(b []byte) (*Value, error) {
	p := parser{b: b, maxDepth: MaxDepth}
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
	return &Value{kind: kindOf(b[start]), raw: b[start:end], lossy: lossy}, nil
}

// kindOf is the kind of a valid JSON value that starts with c.
func kindOf(c byte) Kind {
	switch c {
	case '{':
		return Object
	case '[':
		return Array
	case '"':
		return String
	case 't', 'f':
		return Bool
	case 'n':
		return Null
	default:
		return Number
	}
}

// ParseShallow is Parse, except that in a top-level object only the members named in full are
// built; every other member is validated and kept as a placeholder, as Scan returns it.
func ParseShallow(b []byte, full ...string) (*Value, error) {
	p := parser{b: b, maxDepth: MaxDepth}
	p.ws()
	if p.i >= len(b) || b[p.i] != '{' {
		return Parse(b)
	}
	v, err := p.object(0, true, full)
	if err != nil {
		return nil, err
	}
	p.ws()
	if p.i != len(b) {
		return nil, p.fail("unexpected data after the JSON value")
	}
	return v, nil
}

// Scanner is a cursor for callers that read JSON tokens themselves: B is the text and Pos the
// offset of the next byte. Each method advances Pos past what it read; after an error Pos is
// unspecified.
type Scanner struct {
	B   []byte
	Pos int
}

// Space skips JSON whitespace.
func (s *Scanner) Space() {
	for s.Pos < len(s.B) {
		switch s.B[s.Pos] {
		case ' ', '\t', '\n', '\r':
			s.Pos++
		default:
			return
		}
	}
}

// Skip validates one value nested depth levels deep (0 at the top, at most MaxDepth) and
// reports whether it holds a lossy number.
func (s *Scanner) Skip(depth int) (lossy bool, err error) {
	p := parser{b: s.B, i: s.Pos, maxDepth: MaxDepth}
	lossy, err = p.skip(depth)
	s.Pos = p.i
	return lossy, err
}

// Number skips one JSON number literal.
func (s *Scanner) Number() error {
	if s.Pos >= len(s.B) {
		return &SyntaxError{Offset: s.Pos, Why: "invalid number"}
	}
	p := parser{b: s.B, i: s.Pos, maxDepth: MaxDepth}
	_, err := p.numberEnd()
	s.Pos = p.i
	return err
}

// Lookup returns the raw value at path in the JSON object data (path[0] a member of data, path[1]
// a member of that, ...), without building anything; the value aliases data. As in JSON.parse the
// last of repeated names wins and names compare unescaped. ok is false for an empty path, a
// missing member, a value on the way that is not an object, or a syntax error in those objects.
func Lookup(data []byte, path ...string) (value []byte, ok bool) {
	if len(path) == 0 {
		return nil, false
	}
	b := data
	for _, name := range path {
		p := parser{b: b, maxDepth: MaxDepth}
		p.ws()
		if p.i >= len(b) || b[p.i] != '{' {
			return nil, false
		}
		p.i++
		var found []byte
		p.ws()
		if p.i < len(b) && b[p.i] == '}' {
			return nil, false
		}
		for {
			p.ws()
			if p.i >= len(b) || b[p.i] != '"' {
				return nil, false
			}
			kstart := p.i
			if p.skipString() != nil {
				return nil, false
			}
			match := keyEquals(b[kstart:p.i], name)
			p.ws()
			if p.i >= len(b) || b[p.i] != ':' {
				return nil, false
			}
			p.i++
			p.ws()
			vstart := p.i
			if _, err := p.skip(1); err != nil {
				return nil, false
			}
			if match {
				found = b[vstart:p.i]
			}
			p.ws()
			if p.i < len(b) && b[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(b) && b[p.i] == '}' {
				break
			}
			return nil, false
		}
		if found == nil {
			return nil, false
		}
		b = found
	}
	return b, true
}

// keyEquals reports whether the JSON string literal quoted (quotes included) names name.
func keyEquals(quoted []byte, name string) bool {
	raw := quoted[1 : len(quoted)-1]
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return string(raw) == name // no escapes, valid UTF-8: the bytes are the name
	}
	p := parser{b: quoted, maxDepth: MaxDepth}
	s, err := p.str()
	return err == nil && s == name
}

// StringIs reports whether the raw JSON value v is a string equal to s (escapes decoded).
func StringIs(v []byte, s string) bool {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return false
	}
	return keyEquals(v, s)
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
		_, err := p.literal("true", &Value{})
		return false, err
	case c == 'f':
		_, err := p.literal("false", &Value{})
		return false, err
	case c == 'n':
		_, err := p.literal("null", &Value{})
		return false, err
	case c == '-' || (c >= '0' && c <= '9'):
		start := p.i
		if _, err := p.numberEnd(); err != nil {
			return false, err
		}
		raw := p.b[start:p.i]
		// Only a negative literal (possibly -0) or a long or exponent form can be lossy.
		if raw[0] == '-' || len(raw) > 300 || bytes.ContainsAny(raw, "eE") {
			return !IsLossless(ParseNumber(raw)), nil
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
		p.i = PlainRun(p.b, p.i)
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

// PlainRun returns the index of the first byte of b at or after i that ends a run of plain string
// bytes: '"', '\\' or a control character (< 0x20); len(b) when there is none. It tests eight bytes
// at a time (SWAR): a word has such a byte iff hasZero(x^'"'), hasZero(x^'\\') or hasLess(x, 0x20)
// is non-zero (exact for the existence test, and for the lowest such byte, which the lowest set
// bit names).
func PlainRun(b []byte, i int) int {
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
		if m := ((q-ones)&^q | (s-ones)&^s | (x-ctl)&^x) & highs; m != 0 {
			// The lowest flagged byte is exact (a borrow only flags bytes above a real one).
			return i + bits.TrailingZeros64(m)>>3
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

// Placeholder is the value Scan returns for raw, a valid JSON value whose lossiness a scan found:
// its kind, Raw and Lossy, and no members.
func Placeholder(raw []byte, lossy bool) *Value {
	return &Value{kind: kindOf(raw[0]), raw: raw, lossy: lossy}
}

// Unread returns a shared value that stands for a valid JSON value nobody reads, only its
// lossiness: kind Null, no Raw. Callers must not change it.
func Unread(lossy bool) *Value {
	if lossy {
		return unreadLossy
	}
	return unreadLossless
}

var (
	unreadLossless = &Value{kind: Null}
	unreadLossy    = &Value{kind: Null, lossy: true}
)
