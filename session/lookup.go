package session

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// LookupJSON returns the raw JSON value at path in the JSON object data: path[0] is a member of
// data, path[1] a member of that value, and so on. As in the reference's JSON.parse, the last of
// repeated member names wins, and names are compared after unescaping. ok is false when path is
// empty, when a member is missing, or when a value on the way is not an object. data is meant to be
// the data of an accepted event, which is valid JSON: the objects on the path are checked as they
// are read (ok false on a syntax error there), the rest of data is not.
//
// It reads without building anything: a projection unit that needs one or two fields of an event's
// data (say the chunk type of an assistant/chunk) finds them in one pass, allocation-free, instead
// of decoding the whole data with encoding/json. The value returned aliases data.
func LookupJSON(data []byte, path ...string) (value json.RawMessage, ok bool) {
	if len(path) == 0 {
		return nil, false
	}
	b := data
	for _, name := range path {
		p := parser{b: b, maxDepth: maxJSONDepth}
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
	p := parser{b: quoted, maxDepth: maxJSONDepth}
	s, err := p.str()
	return err == nil && s == name
}

// StringIs reports whether the raw JSON value v is a string equal to s (escapes decoded).
func StringIs(v json.RawMessage, s string) bool {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return false
	}
	return keyEquals(v, s)
}

// SurfaceEligible reports whether events of type typ can be surface nodes (the reference's
// surface-eligible types: user/message, assistant/message, tool/result). DeriveMessages reads only
// surface nodes, so a reader that keeps these events of a log has all that deriving its messages
// needs.
func SurfaceEligible(typ string) bool { return isSurfaceType(typ) }
