package session

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/agentlog/agentlog/internal/jsvalue"
)

// decodeEventLineFast is DecodeEventLine's fast path: one pass over the line, with no allocation
// per member, for the common shape of a record line. It reports ok false, and the caller then
// decodes the line with decodeEventLineGeneral, whenever the line is not of that shape or would be
// refused; when ok is true the event equals what decodeEventLineGeneral returns for the line.
//
// It follows jsvalue.ParseShallow token by token (the same JSON whitespace, the same Skip for
// every member other than the envelope scalars) and accepts only:
//   - a key with no escape and no control character (raw bytes are then the key, and invalid
//     UTF-8 in them can only decode to a key that is not one of the envelope keys);
//   - a "type" string with no escape, no control character and valid UTF-8, that is not a packed
//     chunk-row tag;
//   - a "seq" that is a plain integer literal of at most 15 digits (a safe integer, exact);
//   - a "time" that is a JSON number (any form: its raw text is kept);
//   - an "ignorable" that is true or false;
//   - and finally a type, a seq and a data, so that decodeEvent would not refuse the line.
//
// Repeated keys overwrite (the last one wins); every other key is validated with skip and dropped.
func decodeEventLineFast(line []byte) (ev Event, ok bool) {
	sc, ok := scanEventLineFast(line, nil)
	return sc.Event, ok
}

// scanEventLineFast is decodeEventLineFast keeping what its scan found (Scanned): with ls, the
// values of data are located (in ls's buffer), and the time string is cut from ls's arena.
func scanEventLineFast(line []byte, ls *LineScanner) (sc Scanned, ok bool) {
	ev := &sc.Event
	var base int
	if ls != nil {
		base = len(ls.nodes)
		defer func() {
			if !ok {
				ls.nodes = ls.nodes[:base]
			}
		}()
	}
	indexed, dataLossy := false, false
	p := jsvalue.Scanner{B: line}
	b := line
	p.Space()
	if p.Pos >= len(b) || b[p.Pos] != '{' {
		return Scanned{}, false
	}
	p.Pos++
	p.Space()
	if p.Pos < len(b) && b[p.Pos] == '}' {
		return Scanned{}, false // {} has no type: refused
	}
	var (
		typ       []byte
		haveType  bool
		seq       int64 = -1
		timeRaw   []byte
		data      []byte
		op        []byte
		srcs      []byte
		ignorable bool
	)
	for {
		p.Space()
		if p.Pos >= len(b) || b[p.Pos] != '"' {
			return Scanned{}, false
		}
		ks := p.Pos + 1
		ke := jsvalue.PlainRun(b, ks)
		if ke >= len(b) || b[ke] != '"' {
			return Scanned{}, false // an escape, a control character or no closing quote
		}
		key := b[ks:ke]
		p.Pos = ke + 1
		p.Space()
		if p.Pos >= len(b) || b[p.Pos] != ':' {
			return Scanned{}, false
		}
		p.Pos++
		p.Space()
		if p.Pos >= len(b) {
			return Scanned{}, false
		}
		switch string(key) {
		case "type":
			if b[p.Pos] != '"' {
				return Scanned{}, false
			}
			s := p.Pos + 1
			e := jsvalue.PlainRun(b, s)
			if e >= len(b) || b[e] != '"' {
				return Scanned{}, false
			}
			typ, haveType = b[s:e], true
			p.Pos = e + 1
		case "seq":
			n, ok := plainSeq(&p)
			if !ok {
				return Scanned{}, false
			}
			seq = n
		case "time":
			if c := b[p.Pos]; c != '-' && !isDigit(c) {
				return Scanned{}, false
			}
			start := p.Pos
			if p.Number() != nil {
				return Scanned{}, false
			}
			timeRaw = b[start:p.Pos]
		case "ignorable":
			switch {
			case len(b)-p.Pos >= 4 && string(b[p.Pos:p.Pos+4]) == "true":
				ignorable = true
				p.Pos += 4
			case len(b)-p.Pos >= 5 && string(b[p.Pos:p.Pos+5]) == "false":
				ignorable = false
				p.Pos += 5
			default:
				return Scanned{}, false
			}
		case "data":
			start := p.Pos
			var err error
			if ls != nil {
				var complete bool
				ls.nodes, complete, dataLossy, err = p.SkipIndexed(1, scanLevels, -1, ls.nodes[:base], base+scanNodes)
				indexed = complete
				if !complete {
					ls.nodes = ls.nodes[:base]
				}
			} else {
				dataLossy, err = p.Skip(1)
			}
			if err != nil {
				return Scanned{}, false
			}
			data = b[start:p.Pos]
		default:
			start := p.Pos
			if _, err := p.Skip(1); err != nil {
				return Scanned{}, false
			}
			switch string(key) {
			case "surfaceOp":
				op = b[start:p.Pos]
			case "sourceEventSeqs":
				srcs = b[start:p.Pos]
			}
		}
		p.Space()
		if p.Pos >= len(b) {
			return Scanned{}, false
		}
		if b[p.Pos] == ',' {
			p.Pos++
			continue
		}
		if b[p.Pos] == '}' {
			p.Pos++
			break
		}
		return Scanned{}, false
	}
	p.Space()
	if p.Pos != len(b) || !haveType || seq < 0 || data == nil {
		return Scanned{}, false
	}
	t, ok := eventTypeString(typ)
	if !ok {
		return Scanned{}, false
	}
	ev.Type = t
	ev.Seq = seq
	if timeRaw != nil {
		if ls != nil {
			ev.Time = json.Number(ls.str(timeRaw))
		} else {
			ev.Time = json.Number(timeRaw)
		}
	}
	ev.Data = json.RawMessage(data)
	if op != nil {
		ev.SurfaceOp = json.RawMessage(op)
	}
	if srcs != nil {
		ev.SourceEventSeqs = json.RawMessage(srcs)
	}
	ev.Ignorable = ignorable
	sc.flags, sc.dataAt, sc.dataN = scanChecked, &data[0], len(data)
	if dataLossy {
		sc.flags |= scanDataLossy
	}
	if indexed {
		sc.flags |= scanIndexed
		sc.index = jsvalue.NewIndex(data, ls.nodes[base:len(ls.nodes):len(ls.nodes)], scanLevels)
	}
	return sc, true
}

// plainSeq reads a plain integer literal of at most 15 digits at p.Pos (without a sign, fraction or
// exponent, and without a leading zero unless it is 0): a non-negative safe integer whose value is
// exact. ok is false for any other form (which the general path reads with the full number rules).
func plainSeq(p *jsvalue.Scanner) (int64, bool) {
	b := p.B
	i := p.Pos
	var n int64
	for i < len(b) && isDigit(b[i]) {
		n = n*10 + int64(b[i]-'0')
		i++
		if i-p.Pos > 15 {
			return 0, false
		}
	}
	switch {
	case i == p.Pos:
		return 0, false
	case b[p.Pos] == '0' && i-p.Pos > 1:
		return 0, false // "0" followed by digits: the general path refuses it
	case i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E'):
		return 0, false
	}
	p.Pos = i
	return n, true
}

// eventTypeString returns the type string for its raw bytes (no escape, no control character):
// a constant for the common event types, so that no allocation is needed. ok is false for a packed
// chunk-row tag and for invalid UTF-8 (both left to the general path).
func eventTypeString(raw []byte) (string, bool) {
	switch string(raw) {
	case "assistant/chunk":
		return "assistant/chunk", true
	case "assistant/message":
		return "assistant/message", true
	case "user/message":
		return "user/message", true
	case "tool/call":
		return "tool/call", true
	case "tool/result":
		return "tool/result", true
	case "turn/start":
		return "turn/start", true
	case "turn/end":
		return "turn/end", true
	case "step/start":
		return "step/start", true
	case "step/end":
		return "step/end", true
	case "request/header":
		return "request/header", true
	case "request/context":
		return "request/context", true
	case "session/title":
		return "session/title", true
	case "session/end-seed":
		return "session/end-seed", true
	case "todo/write":
		return "todo/write", true
	case "agent/inbox/spliced":
		return "agent/inbox/spliced", true
	case "approval/policy":
		return "approval/policy", true
	case "approval/asked":
		return "approval/asked", true
	case "approval/decided":
		return "approval/decided", true
	case "hook/invoked":
		return "hook/invoked", true
	case "hook/result":
		return "hook/result", true
	case "subagent/descriptor":
		return "subagent/descriptor", true
	case "compaction/start":
		return "compaction/start", true
	case "compaction/end":
		return "compaction/end", true
	case "compaction/summary":
		return "compaction/summary", true
	case "llm/retry":
		return "llm/retry", true
	}
	if !utf8.Valid(raw) {
		return "", false // the general path decodes it with U+FFFD replacements
	}
	s := string(raw)
	if isChunkRowTag(s) {
		return "", false // a packed chunk row: refused by the general path
	}
	return s, true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
