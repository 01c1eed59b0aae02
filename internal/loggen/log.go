package loggen

import (
	"bytes"
)

// Ev is one generated session event in the loggen model: the envelope
// {type, seq, time, data, surfaceOp?, sourceEventSeqs?, ignorable?} with data kept as an ordered
// Obj so that it can be changed and written byte for byte.
type Ev struct {
	Type string
	Seq  int64
	// Time is Unix epoch milliseconds.
	Time int64
	// Data is the payload, usually an Obj.
	Data any
	// SurfaceOp is nil (absent), "append", or Obj{op:"replace", start, end}.
	SurfaceOp any
	// Sources is sourceEventSeqs; written only when HasSources.
	Sources    []int64
	HasSources bool
	Ignorable  bool
	// NoPack keeps the event on its own JSONL line even inside a run of deltas (the corrupter
	// uses it to edit one event's line).
	NoPack bool
}

// Clone deep-copies e.
func (e Ev) Clone() Ev {
	e.Data = Clone(e.Data)
	e.SurfaceOp = Clone(e.SurfaceOp)
	e.Sources = append([]int64(nil), e.Sources...)
	return e
}

// Envelope returns the event's JSONL object: type, seq, time, data, surfaceOp?, sourceEventSeqs?,
// ignorable?.
func (e Ev) Envelope() Obj {
	o := Obj{{"type", e.Type}, {"seq", e.Seq}, {"time", e.Time}, {"data", e.Data}}
	if e.SurfaceOp != nil {
		o = append(o, KV{"surfaceOp", e.SurfaceOp})
	}
	if e.HasSources {
		o = append(o, KV{"sourceEventSeqs", append([]int64{}, e.Sources...)})
	}
	if e.Ignorable {
		o = append(o, KV{"ignorable", true})
	}
	return o
}

// Log is one generated session log.
type Log struct {
	// Seed is the generator seed the log was made from.
	Seed uint64
	// ID is the session id the reference names in its texts: the header's id, or "session" when
	// there is no header line.
	ID string
	// Header is the JSONL header line ({"type":"session",...}), nil for none.
	Header Obj
	// Events are the events, seq 0..n-1.
	Events []Ev
	// Pack writes runs of 3+ streaming deltas as packed chunk rows (most of them; see Render).
	Pack bool
	// Cut is true when the log was cut inside a turn (a crash: the log just ends).
	Cut bool
}

// Line is one JSONL line of a rendered log.
type Line struct {
	// Fields is the line's JSON object; ignored when Bytes is non-nil.
	Fields Obj
	// Bytes, when non-nil, is written verbatim (without the newline).
	Bytes []byte
	// FirstSeq is the seq of the line's first event (-1 for the header line or a line holding no
	// event); Count is how many events the line holds (a packed row holds several).
	FirstSeq int64
	Count    int
	// Index is the position in Log.Events of the line's first event (-1 when it holds none).
	Index int
}

// Text returns the line's bytes (without the newline).
func (ln Line) Text() []byte {
	if ln.Bytes != nil {
		return ln.Bytes
	}
	return JSON(ln.Fields)
}

// Render turns the log into JSONL lines: the header (when present), then one line per event, or
// one packed chunk row per run of 3+ consecutive deltas when l.Pack (every fifth eligible run is
// left unpacked, as a writer that flushed mid-run would leave it).
func (l *Log) Render() []Line {
	var lines []Line
	if l.Header != nil {
		lines = append(lines, Line{Fields: l.Header, FirstSeq: -1, Index: -1})
	}
	evs := l.Events
	for i := 0; i < len(evs); {
		if l.Pack {
			if n := runLength(evs, i); n >= 3 && (evs[i].Seq+int64(l.Seed))%5 != 0 {
				lines = append(lines, Line{Fields: packRow(evs[i : i+n]), FirstSeq: evs[i].Seq, Count: n, Index: i})
				i += n
				continue
			}
		}
		lines = append(lines, Line{Fields: evs[i].Envelope(), FirstSeq: evs[i].Seq, Count: 1, Index: i})
		i++
	}
	return lines
}

// Join writes lines as JSONL, each followed by "\n".
func Join(lines []Line) []byte {
	var b bytes.Buffer
	for _, ln := range lines {
		b.Write(ln.Text())
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// JSONL renders the log as JSONL bytes.
func (l *Log) JSONL() []byte { return Join(l.Render()) }

// deltaKind classifies e as the reference's packChunkRuns classify() does: the delta kind when the
// whole shape is whitelisted (exact keys, primitive types), "" otherwise.
func deltaKind(e Ev) string {
	if e.Type != "assistant/chunk" || e.SurfaceOp != nil || e.HasSources || e.Ignorable || e.NoPack {
		return ""
	}
	d, ok := e.Data.(Obj)
	if !ok || !exactKeys(d, "turn", "step", "chunk") {
		return ""
	}
	if !isNum(mustGet(d, "turn")) || !isNum(mustGet(d, "step")) {
		return ""
	}
	c, ok := mustGet(d, "chunk").(Obj)
	if !ok || !isNum(mustGet(c, "index")) {
		return ""
	}
	typ, _ := mustGet(c, "type").(string)
	switch typ {
	case "text-delta", "reasoning-delta":
		if _, ok := mustGet(c, "text").(string); ok && exactKeys(c, "type", "index", "text") {
			return typ
		}
	case "tool-call-delta":
		_, idOK := mustGet(c, "id").(string)
		_, argOK := mustGet(c, "argumentsDelta").(string)
		if !idOK || !argOK {
			return ""
		}
		if exactKeys(c, "type", "index", "id", "argumentsDelta") {
			return typ
		}
		if _, ok := mustGet(c, "name").(string); ok && exactKeys(c, "type", "index", "id", "name", "argumentsDelta") {
			return typ
		}
	}
	return ""
}

func isNum(v any) bool {
	switch v.(type) {
	case int, int64, float64:
		return true
	}
	return false
}

func mustGet(o Obj, k string) any { v, _ := o.Get(k); return v }

func exactKeys(o Obj, keys ...string) bool {
	if len(o) != len(keys) {
		return false
	}
	for _, k := range keys {
		if _, ok := o.Get(k); !ok {
			return false
		}
	}
	return true
}

// continues mirrors the reference's continues(): next extends a run ending in prev.
func continues(prev, next Ev, kind string) bool {
	if next.Seq != prev.Seq+1 {
		return false
	}
	pd, nd := prev.Data.(Obj), next.Data.(Obj)
	if !sameScalar(mustGet(pd, "turn"), mustGet(nd, "turn")) || !sameScalar(mustGet(pd, "step"), mustGet(nd, "step")) {
		return false
	}
	pc, nc := mustGet(pd, "chunk").(Obj), mustGet(nd, "chunk").(Obj)
	if !sameScalar(mustGet(pc, "index"), mustGet(nc, "index")) {
		return false
	}
	if kind != "tool-call-delta" {
		return true
	}
	pn, pHas := pc.Get("name")
	nn, nHas := nc.Get("name")
	return mustGet(pc, "id") == mustGet(nc, "id") && pHas == nHas && pn == nn
}

func sameScalar(a, b any) bool {
	return string(JSON(a)) == string(JSON(b))
}

// runLength is the length of the packable run starting at evs[i] (0 when evs[i] is not a delta).
func runLength(evs []Ev, i int) int {
	kind := deltaKind(evs[i])
	if kind == "" {
		return 0
	}
	n := 1
	for i+n < len(evs) && deltaKind(evs[i+n]) == kind && continues(evs[i+n-1], evs[i+n], kind) {
		n++
	}
	return n
}

// packRow builds the packed chunk row for a run, as the reference's buildRow does.
func packRow(run []Ev) Obj {
	first := run[0]
	d := first.Data.(Obj)
	c := mustGet(d, "chunk").(Obj)
	dt := make([]int64, 0, len(run)-1)
	for k := 1; k < len(run); k++ {
		dt = append(dt, run[k].Time-run[k-1].Time)
	}
	data := Obj{{"turn", mustGet(d, "turn")}, {"step", mustGet(d, "step")}, {"index", mustGet(c, "index")}}
	var tag string
	switch mustGet(c, "type") {
	case "tool-call-delta":
		tag = "tool-call-chunks"
		data = append(data, KV{"id", mustGet(c, "id")})
		if name, ok := c.Get("name"); ok {
			data = append(data, KV{"name", name})
		}
		args := make(Arr, len(run))
		for k, e := range run {
			args[k] = mustGet(mustGet(e.Data.(Obj), "chunk").(Obj), "argumentsDelta")
		}
		data = append(data, KV{"dt", dt}, KV{"args", args})
	default:
		tag = "text-chunks"
		if mustGet(c, "type") == "reasoning-delta" {
			tag = "reasoning-chunks"
		}
		texts := make(Arr, len(run))
		for k, e := range run {
			texts[k] = mustGet(mustGet(e.Data.(Obj), "chunk").(Obj), "text")
		}
		data = append(data, KV{"dt", dt}, KV{"texts", texts})
	}
	return Obj{{"type", tag}, {"seq0", first.Seq}, {"time0", first.Time}, {"data", data}}
}
