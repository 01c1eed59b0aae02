package loggen

import (
	"fmt"
	"strconv"
)

// Faults in the envelope: seq, time, type, data, ignorable, header lines.

// seqGap gives an event a seq other than its position (or none).
func (c *ctx) seqGap() bool {
	i := c.anyEvent()
	if i < 0 {
		return false
	}
	switch c.variant("skip", "far", "negative", "string", "missing", "null") {
	case "skip":
		c.log.Events[i].Seq = int64(i + 1)
	case "far":
		c.log.Events[i].Seq = int64(i + 2 + c.r.IntN(1000))
	case "negative":
		c.log.Events[i].Seq = -1
	default:
		k := c.lineFor(i)
		switch c.f.Variant {
		case "string":
			c.lines[k].Fields.Set("seq", strconv.Itoa(i))
		case "missing":
			c.lines[k].Fields = c.lines[k].Fields.Del("seq")
		default:
			c.lines[k].Fields.Set("seq", nil)
		}
	}
	c.refuse(i)
	return true
}

// seqRepeat repeats a line, or an earlier seq.
func (c *ctx) seqRepeat() bool {
	if len(c.log.Events) < 2 {
		return false
	}
	i := 1 + c.r.IntN(len(c.log.Events)-1)
	switch c.variant("line-twice", "seq-earlier") {
	case "line-twice":
		dup := c.log.Events[i-1].Clone()
		c.log.Events = append(c.log.Events[:i:i], append([]Ev{dup}, c.log.Events[i:]...)...)
	default:
		c.log.Events[i].Seq = int64(c.r.IntN(i))
	}
	c.refuse(i)
	return true
}

// nonObjectLine replaces an event line with a JSON value that is not an object.
func (c *ctx) nonObjectLine() bool {
	i := c.anyEvent()
	if i < 0 {
		return false
	}
	k := c.lineFor(i)
	c.lines[k].Bytes = []byte(c.variant("null", "42", `"event"`, "[]", "true", "[1,2]"))
	c.refuse(i)
	return true
}

// misplacedHeader inserts a second session header line, or an event of type "session".
func (c *ctx) misplacedHeader() bool {
	i := c.anyEvent()
	if i < 0 {
		return false
	}
	if c.variant("second-header", "session-typed-event") == "session-typed-event" {
		// a later line of type "session" with a valid envelope is just an event
		e := &c.log.Events[i]
		if isSurface(*e) || e.HasSources || i == 0 && c.log.Header == nil {
			return false
		}
		e.Type, e.Data = "session", Obj{{"version", 0}, {"id", "again"}}
		c.accept(i)
		return true
	}
	c.lineFor(i)
	k := c.lineOf(int64(i))
	hdr := Line{Fields: Obj{{"type", "session"}, {"version", 0}, {"id", "again"}, {"createdAt", int64(0)}}, FirstSeq: -1, Index: -1}
	c.lines = append(c.lines[:k:k], append([]Line{hdr}, c.lines[k:]...)...)
	c.refuse(i)
	if k == 0 {
		// no header line before it: the inserted line becomes the header
		c.f.Variant, c.f.Expect = "first-line-header", Accepted
	}
	c.f.Line = k + 1
	return true
}

// numberSpelling spells integers another way (3.0, 3e0, 0.3e1) or reorders replace keys.
func (c *ctx) numberSpelling() bool {
	v := c.variant("seq-x.0", "seq-e0", "seq-scaled", "time-x.0", "time-e0", "turn-1.0", "turn-1e0", "turn-1e21", "step-2.00", "sources-x.0", "replace-x.0", "replace-key-order")
	i := c.anyEvent()
	switch v {
	case "replace-x.0", "replace-key-order":
		i = c.pickReplace()
	case "turn-1.0", "turn-1e0", "turn-1e21":
		i = c.pickType("turn/start")
	case "step-2.00":
		i = c.pickType("step/start")
	case "sources-x.0":
		i = c.pick(func(_ int, e Ev) bool { return isSurface(e) && e.HasSources && len(e.Sources) > 0 })
	}
	if i < 0 {
		return false
	}
	e := c.log.Events[i]
	_, f := c.eventLine(i)
	switch v {
	case "seq-x.0":
		f.Set("seq", Raw(fmt.Sprintf("%d.0", i)))
	case "seq-e0":
		f.Set("seq", Raw(fmt.Sprintf("%de0", i)))
	case "seq-scaled":
		if i == 0 {
			f.Set("seq", Raw("0e5"))
		} else {
			d := strconv.Itoa(i)
			f.Set("seq", Raw(fmt.Sprintf("0.%se%d", d, len(d))))
		}
	case "time-x.0":
		f.Set("time", Raw(fmt.Sprintf("%d.0", e.Time)))
	case "time-e0":
		f.Set("time", Raw(fmt.Sprintf("%de0", e.Time)))
	case "turn-1.0", "turn-1e0", "turn-1e21":
		spell := map[string]string{"turn-1.0": ".0", "turn-1e0": "e0", "turn-1e21": "e21"}[v]
		turn := mustGet(e.Data.(Obj), "turn")
		mustGet(f, "data").(Obj).Set("turn", Raw(fmt.Sprintf("%d%s", turn, spell)))
	case "step-2.00":
		step := mustGet(e.Data.(Obj), "step")
		mustGet(f, "data").(Obj).Set("step", Raw(fmt.Sprintf("%d.00", step)))
	case "replace-x.0":
		op := e.SurfaceOp.(Obj)
		f.Set("surfaceOp", replaceOp(Raw(fmt.Sprintf("%d.0", mustGet(op, "start"))), Raw(fmt.Sprintf("%de0", mustGet(op, "end")))))
	case "replace-key-order":
		op := e.SurfaceOp.(Obj)
		f.Set("surfaceOp", Obj{{"end", mustGet(op, "end")}, {"start", mustGet(op, "start")}, {"op", "replace"}})
	default:
		parts := make(Arr, len(e.Sources))
		for j, s := range e.Sources {
			parts[j] = Raw(fmt.Sprintf("%d.0", s))
		}
		f.Set("sourceEventSeqs", parts)
	}
	c.accept(i)
	return true
}

// timeOdd writes a time that is not a number, fractional, negative or unsafe.
func (c *ctx) timeOdd() bool {
	i := c.anyEvent()
	if i < 0 {
		return false
	}
	v := c.variant("string", "null", "missing", "bool", "object", "fraction", "negative", "unsafe-int")
	k, f := c.eventLine(i)
	switch v {
	case "string":
		f.Set("time", "1785000000000")
	case "null":
		f.Set("time", nil)
	case "missing":
		c.lines[k].Fields = f.Del("time")
	case "bool":
		f.Set("time", true)
	case "object":
		f.Set("time", Obj{})
	case "fraction":
		f.Set("time", Raw(fmt.Sprintf("%d.5", c.log.Events[i].Time)))
	case "negative":
		f.Set("time", int64(-5))
	default:
		f.Set("time", Raw("9007199254740993"))
	}
	switch v {
	case "string", "null", "missing", "bool", "object":
		c.f.ClockTime = true
	}
	c.accept(i)
	return true
}

// envelopeOdd writes odd ignorable values, unknown envelope keys, odd types and data.
func (c *ctx) envelopeOdd() bool {
	v := c.variant("ignorable-false", "ignorable-string", "ignorable-null", "unknown-key", "type-number", "type-missing", "data-missing", "data-null", "data-array", "proto-key")
	i := c.anyEvent()
	if i < 0 {
		return false
	}
	switch v {
	case "type-number", "type-missing", "data-null", "data-array":
		// plugin events only: the reference never reads their data
		i = c.pick(func(_ int, e Ev) bool {
			return !isSurfaceType(e.Type) && e.Type != "turn/start" && e.Type != "turn/end" && e.Type != "step/start" && e.Type != "step/end" && e.Type != "tool/call"
		})
		if i < 0 {
			return false
		}
	}
	k, f := c.eventLine(i)
	switch v {
	case "ignorable-false":
		c.lines[k].Fields = f.Set("ignorable", false)
	case "ignorable-string":
		c.lines[k].Fields = f.Set("ignorable", "yes")
	case "ignorable-null":
		c.lines[k].Fields = f.Set("ignorable", nil)
	case "unknown-key":
		c.lines[k].Fields = append(f, KV{"meta", Obj{{"host", "a"}}})
	case "type-number":
		f.Set("type", int64(5))
	case "type-missing":
		c.lines[k].Fields = f.Del("type")
	case "data-missing":
		c.lines[k].Fields = f.Del("data")
		c.refuse(i)
		return true
	case "data-null":
		f.Set("data", nil)
	case "proto-key":
		if !addDataKey(f, "__proto__", Obj{{"polluted", true}}) {
			return false
		}
	default:
		f.Set("data", Arr{int64(1)})
	}
	if v == "proto-key" {
		c.acceptData(i)
	} else {
		c.accept(i)
	}
	return true
}
