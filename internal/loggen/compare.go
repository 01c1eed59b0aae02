package loggen

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// This file compares the oracle's output object with ours as JSON values, with JavaScript's
// semantics: numbers are IEEE doubles (1.0, 1e0 and 1 are equal, and so are two literals that
// round to the same double); objects are unordered and a duplicate key keeps its last value;
// strings compare by UTF-16 code units, so a lone surrogate escape (\ud800) differs from U+FFFD
// and raw invalid UTF-8 bytes differ from any escape.

// value kinds of the comparison model
type jsonNum struct {
	lit string
	f   float64
}

type jsonObj struct {
	keys []string // first-occurrence order
	m    map[string]any
	dups []string // keys seen more than once
}

// ParseJSON parses one JSON text into the comparison model: nil, bool, jsonNum, string (WTF-8:
// a lone surrogate escape is kept as its 3-byte encoding; invalid raw bytes are kept as they
// are), []any, *jsonObj.
func ParseJSON(b []byte) (any, error) {
	p := &parser{b: b}
	p.ws()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.ws()
	if p.i != len(p.b) {
		return nil, fmt.Errorf("trailing data at offset %d", p.i)
	}
	return v, nil
}

type parser struct {
	b []byte
	i int
}

func (p *parser) ws() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *parser) errf(format string, a ...any) error {
	return fmt.Errorf("offset %d: %s", p.i, fmt.Sprintf(format, a...))
}

func (p *parser) value(depth int) (any, error) {
	if depth > 10000 {
		return nil, p.errf("nesting too deep")
	}
	if p.i >= len(p.b) {
		return nil, p.errf("unexpected end")
	}
	switch c := p.b[p.i]; {
	case c == '{':
		p.i++
		o := &jsonObj{m: map[string]any{}}
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == '}' {
			p.i++
			return o, nil
		}
		for {
			p.ws()
			if p.i >= len(p.b) || p.b[p.i] != '"' {
				return nil, p.errf("want object key")
			}
			k, err := p.str()
			if err != nil {
				return nil, err
			}
			p.ws()
			if p.i >= len(p.b) || p.b[p.i] != ':' {
				return nil, p.errf("want ':'")
			}
			p.i++
			p.ws()
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			if _, seen := o.m[k]; seen {
				o.dups = append(o.dups, k)
			} else {
				o.keys = append(o.keys, k)
			}
			o.m[k] = v
			p.ws()
			if p.i < len(p.b) && p.b[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(p.b) && p.b[p.i] == '}' {
				p.i++
				return o, nil
			}
			return nil, p.errf("want ',' or '}'")
		}
	case c == '[':
		p.i++
		a := []any{}
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == ']' {
			p.i++
			return a, nil
		}
		for {
			p.ws()
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
			p.ws()
			if p.i < len(p.b) && p.b[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(p.b) && p.b[p.i] == ']' {
				p.i++
				return a, nil
			}
			return nil, p.errf("want ',' or ']'")
		}
	case c == '"':
		return p.str()
	case c == 't' || c == 'f' || c == 'n':
		for _, w := range []string{"true", "false", "null"} {
			if strings.HasPrefix(string(p.b[p.i:min(len(p.b), p.i+5)]), w) {
				p.i += len(w)
				switch w {
				case "true":
					return true, nil
				case "false":
					return false, nil
				}
				return nil, nil
			}
		}
		return nil, p.errf("bad literal")
	default:
		return p.num()
	}
}

func (p *parser) num() (any, error) {
	start := p.i
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	digits := func() int {
		n := 0
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	intStart := p.i
	if digits() == 0 {
		return nil, p.errf("bad number")
	}
	if p.b[intStart] == '0' && p.i-intStart > 1 {
		return nil, p.errf("leading zero")
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return nil, p.errf("bad fraction")
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return nil, p.errf("bad exponent")
		}
	}
	lit := string(p.b[start:p.i])
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return nil, p.errf("number %s: %v", lit, err)
	}
	return jsonNum{lit: lit, f: f}, nil
}

func (p *parser) str() (string, error) {
	p.i++ // opening quote
	var sb strings.Builder
	for {
		if p.i >= len(p.b) {
			return "", p.errf("unterminated string")
		}
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return sb.String(), nil
		case c == '\\':
			if p.i+1 >= len(p.b) {
				return "", p.errf("bad escape")
			}
			e := p.b[p.i+1]
			p.i += 2
			switch e {
			case '"', '\\', '/':
				sb.WriteByte(e)
			case 'b':
				sb.WriteByte('\b')
			case 'f':
				sb.WriteByte('\f')
			case 'n':
				sb.WriteByte('\n')
			case 'r':
				sb.WriteByte('\r')
			case 't':
				sb.WriteByte('\t')
			case 'u':
				u, err := p.hex4()
				if err != nil {
					return "", err
				}
				if utf16.IsSurrogate(rune(u)) && u < 0xdc00 && p.i+6 <= len(p.b) && p.b[p.i] == '\\' && p.b[p.i+1] == 'u' {
					save := p.i
					p.i += 2
					lo, err := p.hex4()
					if err == nil && lo >= 0xdc00 && lo <= 0xdfff {
						sb.WriteRune(utf16.DecodeRune(rune(u), rune(lo)))
						continue
					}
					p.i = save
				}
				if utf16.IsSurrogate(rune(u)) {
					// WTF-8: keep the lone surrogate distinct from U+FFFD
					sb.WriteByte(byte(0xe0 | u>>12))
					sb.WriteByte(byte(0x80 | (u>>6)&0x3f))
					sb.WriteByte(byte(0x80 | u&0x3f))
				} else {
					sb.WriteRune(rune(u))
				}
			default:
				return "", p.errf("bad escape \\%c", e)
			}
		case c < 0x20:
			return "", p.errf("control character in string")
		default:
			sb.WriteByte(c)
			p.i++
		}
	}
}

func (p *parser) hex4() (uint16, error) {
	if p.i+4 > len(p.b) {
		return 0, p.errf("bad \\u escape")
	}
	v, err := strconv.ParseUint(string(p.b[p.i:p.i+4]), 16, 16)
	if err != nil {
		return 0, p.errf("bad \\u escape")
	}
	p.i += 4
	return uint16(v), nil
}

// Diff is one difference between the expected (oracle) and actual (ours) values.
type Diff struct {
	Path string
	Want string
	Got  string
}

func (d Diff) String() string { return fmt.Sprintf("%s: want %s, got %s", d.Path, d.Want, d.Got) }

// Field is the top-level field a diff is under ("forks", "messages", ...).
func (d Diff) Field() string {
	f := d.Path
	if i := strings.IndexAny(f, ".["); i >= 0 {
		f = f[:i]
	}
	return f
}

// CompareOptions adjusts CompareInspect.
type CompareOptions struct {
	// IgnoreRepairTime skips repair[].time (the log had a non-number time, which the reference
	// replaces with the clock).
	IgnoreRepairTime bool
}

// CompareInspect compares an oracle output object (want) with our Inspect output (got), both
// JSON texts. For a refused log (want.ok false) only ok and acceptedEvents are compared (the
// refusal text may differ); otherwise every field, fork error texts included.
func CompareInspect(want, got []byte, opts CompareOptions) ([]Diff, error) {
	w, err := ParseJSON(want)
	if err != nil {
		return nil, fmt.Errorf("oracle output: %v", err)
	}
	g, err := ParseJSON(got)
	if err != nil {
		return []Diff{{Path: "(output)", Want: "a JSON object", Got: "invalid JSON: " + err.Error()}}, nil
	}
	wo, ok := w.(*jsonObj)
	if !ok {
		return nil, fmt.Errorf("oracle output is not an object")
	}
	gobj, ok := g.(*jsonObj)
	if !ok {
		return []Diff{{Path: "(output)", Want: "an object", Got: show(g)}}, nil
	}
	var diffs []Diff
	wok, _ := wo.m["ok"].(bool)
	if gok, _ := gobj.m["ok"].(bool); wok != gok {
		// One side refused the log: the other fields say nothing more.
		for _, k := range []string{"ok", "error", "acceptedEvents"} {
			diffs = compareAt(diffs, k, wo, gobj)
		}
		return diffs, nil
	}
	if !wok {
		for _, k := range []string{"ok", "acceptedEvents"} {
			diffs = compareAt(diffs, k, wo, gobj)
		}
		return diffs, nil
	}
	keys := map[string]bool{}
	for _, k := range wo.keys {
		keys[k] = true
	}
	for _, k := range gobj.keys {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		if k == "repair" && opts.IgnoreRepairTime {
			stripTimes(wo.m[k])
			stripTimes(gobj.m[k])
		}
		diffs = compareAt(diffs, k, wo, gobj)
	}
	return diffs, nil
}

func stripTimes(v any) {
	if a, ok := v.([]any); ok {
		for _, e := range a {
			if o, ok := e.(*jsonObj); ok {
				delete(o.m, "time")
				for i, k := range o.keys {
					if k == "time" {
						o.keys = append(o.keys[:i:i], o.keys[i+1:]...)
						break
					}
				}
			}
		}
	}
}

func compareAt(diffs []Diff, k string, w, g *jsonObj) []Diff {
	wv, wok := w.m[k]
	gv, gok := g.m[k]
	switch {
	case !wok && !gok:
		return diffs
	case !wok:
		return append(diffs, Diff{Path: k, Want: "(absent)", Got: show(gv)})
	case !gok:
		return append(diffs, Diff{Path: k, Want: show(wv), Got: "(absent)"})
	}
	return compareValues(diffs, k, wv, gv)
}

const maxDiffs = 20

func compareValues(diffs []Diff, path string, w, g any) []Diff {
	if len(diffs) >= maxDiffs {
		return diffs
	}
	switch wv := w.(type) {
	case *jsonObj:
		gv, ok := g.(*jsonObj)
		if !ok {
			return append(diffs, Diff{path, show(w), show(g)})
		}
		keys := append([]string{}, wv.keys...)
		for _, k := range gv.keys {
			if _, ok := wv.m[k]; !ok {
				keys = append(keys, k)
			}
		}
		for _, k := range keys {
			p := path + "." + k
			a, aok := wv.m[k]
			b, bok := gv.m[k]
			switch {
			case !aok:
				diffs = append(diffs, Diff{p, "(absent)", show(b)})
			case !bok:
				diffs = append(diffs, Diff{p, show(a), "(absent)"})
			default:
				diffs = compareValues(diffs, p, a, b)
			}
		}
		return diffs
	case []any:
		gv, ok := g.([]any)
		if !ok {
			return append(diffs, Diff{path, show(w), show(g)})
		}
		if len(wv) != len(gv) {
			diffs = append(diffs, Diff{path + ".length", strconv.Itoa(len(wv)), strconv.Itoa(len(gv))})
		}
		for i := 0; i < len(wv) && i < len(gv); i++ {
			diffs = compareValues(diffs, fmt.Sprintf("%s[%d]", path, i), wv[i], gv[i])
		}
		return diffs
	case jsonNum:
		gv, ok := g.(jsonNum)
		if !ok || gv.f != wv.f || math.IsInf(gv.f, 0) {
			return append(diffs, Diff{path, show(w), show(g)})
		}
		return diffs
	default:
		if w != g {
			return append(diffs, Diff{path, show(w), show(g)})
		}
		return diffs
	}
}

// show renders a comparison value compactly for a diff message.
func show(v any) string {
	var b strings.Builder
	writeShow(&b, v)
	s := b.String()
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

func writeShow(b *strings.Builder, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case jsonNum:
		b.WriteString(x.lit)
	case string:
		if utf8.ValidString(x) {
			b.WriteString(strconv.Quote(x))
		} else {
			b.WriteString(strconv.QuoteToASCII(x) + "(invalid UTF-8)")
		}
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			if b.Len() > 400 {
				b.WriteString("…")
				break
			}
			writeShow(b, e)
		}
		b.WriteByte(']')
	case *jsonObj:
		b.WriteByte('{')
		for i, k := range x.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			if b.Len() > 400 {
				b.WriteString("…")
				break
			}
			b.WriteString(strconv.Quote(k) + ":")
			writeShow(b, x.m[k])
		}
		b.WriteByte('}')
	}
}
