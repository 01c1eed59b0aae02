package loggen

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// FaultKind names one way the corrupter breaks a log.
type FaultKind string

// The fault kinds. The first group is the reference's refusal rules and the input faults the
// issue lists; the second group ("extra") probes other corners of the reference's reader.
const (
	// surface rules (VOCABULARY.md "Surface rules the reference enforces")
	SurfaceOpMissing        FaultKind = "surfaceop-missing"          // a surface type without surfaceOp
	SurfaceOpOnNonSurface   FaultKind = "surfaceop-on-nonsurface"    // surfaceOp on a non-surface type
	SourcesOnNonSurface     FaultKind = "sources-on-nonsurface"      // sourceEventSeqs on a non-surface type
	SurfaceOpInvalid        FaultKind = "surfaceop-invalid"          // not "append" nor exactly {op:"replace",start,end}
	ReplaceStartNotNode     FaultKind = "replace-start-not-node"     // start is not a current node
	ReplaceEndNotNode       FaultKind = "replace-end-not-node"       // end is not a current node
	ReplaceStartAfterEnd    FaultKind = "replace-start-after-end"    // start after end in surface order
	SourcesNotArray         FaultKind = "sources-not-array"          // sourceEventSeqs not an array
	SourcesEmpty            FaultKind = "sources-empty"              // [] outside assistant/message
	SourcesDuplicate        FaultKind = "sources-duplicate"          // a repeated value
	SourcesNotEarlier       FaultKind = "sources-not-earlier"        // a value at/after the event's seq, or not a seq
	ReplaceMissingShadowed  FaultKind = "replace-missing-shadowed"   // sourceEventSeqs miss a shadowed node
	ToolResultReplaceMulti  FaultKind = "toolresult-replace-multi"   // tool/result replace shadowing >1 node
	ToolResultReplaceTarget FaultKind = "toolresult-replace-target"  // tool/result replace of a non-tool/result
	ToolResultReplaceMore   FaultKind = "toolresult-replace-changes" // changes more than the inner content
	// envelope and input faults
	SeqGap            FaultKind = "seq-gap"
	SeqRepeat         FaultKind = "seq-repeat"
	NonJSON           FaultKind = "non-json"         // NaN, Infinity, a bare word, trailing comma, ...
	DuplicateKey      FaultKind = "duplicate-key"    // JSON.parse keeps the last
	NumberTooLarge    FaultKind = "number-too-large" // 1e400 (refused) or 123456789012345678901 (inexact)
	NegativeZero      FaultKind = "negative-zero"    // -0 and spellings of it
	InvalidUTF8       FaultKind = "invalid-utf8"     // invalid bytes (read as U+FFFD) or lone surrogates
	BlankLines        FaultKind = "blank-lines"      // empty and whitespace-only lines, CRLF
	TruncatedLastLine FaultKind = "truncated-last-line"
	LegacyHeader      FaultKind = "legacy-request-header" // request/header-delta, reason "fallback"

	// extra
	MalformedChunkRow FaultKind = "malformed-chunk-row"
	NonObjectLine     FaultKind = "non-object-line"
	MisplacedHeader   FaultKind = "misplaced-header"
	NumberSpelling    FaultKind = "number-spelling" // 3.0, 3e0 for integers
	TimeOdd           FaultKind = "time-odd"        // non-number, fractional, negative time
	MessageShape      FaultKind = "message-shape"   // accepted on append, refused by fork's seed check
	LegacyShape       FaultKind = "legacy-shape"    // message events without data.message
	EnvelopeOdd       FaultKind = "envelope-odd"    // ignorable not true, unknown envelope keys, odd type/data
	BOM               FaultKind = "bom"
	TurnOdd           FaultKind = "turn-odd"             // turn/step numbers and call ids of unexpected types
	DeepNesting       FaultKind = "deep-nesting"         // deeply nested data
	PruneQuirk        FaultKind = "prune-quirk"          // tool/result replaces the reference accepts for its own reasons
	HeaderShape       FaultKind = "request-header-shape" // request/header data only a fork's seed check refuses
	RowQuirk          FaultKind = "row-quirk"            // packed rows the reference decodes though no writer makes them
	CoreDataOdd       FaultKind = "core-data-odd"        // null or odd data on core events
)

// RequiredKinds are the fault kinds the issue asks for; ExtraKinds probe further corners.
var (
	RequiredKinds = []FaultKind{
		SurfaceOpMissing, SurfaceOpOnNonSurface, SourcesOnNonSurface, SurfaceOpInvalid,
		ReplaceStartNotNode, ReplaceEndNotNode, ReplaceStartAfterEnd, SourcesNotArray, SourcesEmpty,
		SourcesDuplicate, SourcesNotEarlier, ReplaceMissingShadowed, ToolResultReplaceMulti,
		ToolResultReplaceTarget, ToolResultReplaceMore, SeqGap, SeqRepeat, NonJSON, DuplicateKey,
		NumberTooLarge, NegativeZero, InvalidUTF8, BlankLines, TruncatedLastLine, LegacyHeader,
	}
	ExtraKinds = []FaultKind{
		MalformedChunkRow, NonObjectLine, MisplacedHeader, NumberSpelling, TimeOdd, MessageShape,
		LegacyShape, EnvelopeOdd, BOM, TurnOdd, DeepNesting, PruneQuirk, HeaderShape, RowQuirk,
		CoreDataOdd,
	}
)

// Outcome is what the reference is expected to do with a corrupted log.
type Outcome int

const (
	// Unknown: the corrupter does not predict the outcome.
	Unknown Outcome = iota
	// Refused: ok:false with acceptedEvents == Fault.Accepted.
	Refused
	// Accepted: ok:true.
	Accepted
)

func (o Outcome) String() string {
	return [...]string{"unknown", "refused", "accepted"}[o]
}

// Fault describes the one fault the corrupter injected.
type Fault struct {
	Kind    FaultKind
	Variant string
	// Seq is the seq (position) of the broken event, -1 when the fault is not at one event.
	Seq int64
	// Line is the 1-based JSONL line of the fault, 0 when not at one line.
	Line int
	// Expect is the reference's expected outcome; Accepted the expected acceptedEvents when
	// refused.
	Expect   Outcome
	Accepted int
	// ClockTime is true when some event has a non-number time: the reference stamps such an
	// event with the current time, so repair times cannot be compared.
	ClockTime bool
}

func (f Fault) String() string {
	s := fmt.Sprintf("%s/%s", f.Kind, f.Variant)
	if f.Seq >= 0 {
		s += fmt.Sprintf(" at seq %d", f.Seq)
	}
	if f.Line > 0 {
		s += fmt.Sprintf(" (line %d)", f.Line)
	}
	switch f.Expect {
	case Refused:
		s += fmt.Sprintf("; reference refuses after %d events", f.Accepted)
	case Accepted:
		s += "; reference accepts"
	}
	return s
}

// Corrupted is a log with one fault.
type Corrupted struct {
	JSONL []byte
	Fault Fault
}

// Corrupt breaks l with one fault of a random kind (deterministic in seed); l is not changed.
// Kinds that do not apply to l (e.g. a tool/result fault in a log without tool results) are
// skipped; when none applies the log gets blank lines.
func Corrupt(l *Log, seed uint64) *Corrupted {
	r := NewRand(seed)
	kinds := RequiredKinds
	if r.IntN(4) == 0 {
		kinds = ExtraKinds
	}
	for try := 0; try < 8; try++ {
		if c, ok := CorruptKind(l, kinds[r.IntN(len(kinds))], r.Uint64()); ok {
			return c
		}
	}
	// Blank lines apply to every log, even an empty one (some of their variants do not).
	for s := seed; ; s++ {
		if c, ok := CorruptKind(l, BlankLines, s); ok {
			return c
		}
	}
}

// CorruptKind breaks l with one fault of the given kind; ok is false when the kind does not apply
// to l. l is not changed.
func CorruptKind(l *Log, kind FaultKind, seed uint64) (*Corrupted, bool) {
	c := &ctx{r: NewRand(seed), log: l.clone(), f: Fault{Kind: kind, Seq: -1}}
	fn := kindFuncs[kind]
	if fn == nil || !fn(c) {
		return nil, false
	}
	if c.lines == nil {
		c.render()
	}
	if c.f.Line == 0 && c.f.Seq >= 0 {
		if i := c.lineOf(c.f.Seq); i >= 0 {
			c.f.Line = i + 1
		}
	}
	out := c.out
	if out == nil {
		out = Join(c.lines)
	}
	return &Corrupted{JSONL: out, Fault: c.f}, true
}

func (l *Log) clone() *Log {
	out := *l
	out.Header = nil
	if l.Header != nil {
		out.Header = Clone(l.Header).(Obj)
	}
	out.Events = make([]Ev, len(l.Events))
	for i, e := range l.Events {
		out.Events[i] = e.Clone()
	}
	return &out
}

type ctx struct {
	r     *rand.Rand
	log   *Log
	lines []Line // set by render
	out   []byte // final bytes, when a kind edits below the line level
	f     Fault
}

func (c *ctx) render() { c.lines = c.log.Render() }

// lineOf returns the index in c.lines of the line holding the event at position pos, -1 when none.
func (c *ctx) lineOf(pos int64) int {
	for i, ln := range c.lines {
		if ln.Count > 0 && pos >= int64(ln.Index) && pos < int64(ln.Index+ln.Count) {
			return i
		}
	}
	return -1
}

// lineFor renders the log with event i on its own line and returns that line's index.
func (c *ctx) lineFor(i int) int {
	c.log.Events[i].NoPack = true
	c.render()
	for k, ln := range c.lines {
		if ln.Count == 1 && ln.Index == i && ln.Bytes == nil {
			return k
		}
	}
	panic("loggen: event line not found")
}

func (c *ctx) p(prob float64) bool { return c.r.Float64() < prob }

// pick returns the index of a random event satisfying pred, -1 when none does.
func (c *ctx) pick(pred func(i int, e Ev) bool) int {
	var idx []int
	for i, e := range c.log.Events {
		if pred(i, e) {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return -1
	}
	return idx[c.r.IntN(len(idx))]
}

func (c *ctx) variant(vs ...string) string {
	v := vs[c.r.IntN(len(vs))]
	c.f.Variant = v
	return v
}

// refuse records a refusal at event i (acceptedEvents i).
func (c *ctx) refuse(i int) {
	c.f.Seq, c.f.Expect, c.f.Accepted = int64(i), Refused, i
}

func (c *ctx) accept(i int) {
	c.f.Seq, c.f.Expect = int64(i), Accepted
}

// acceptData is accept for a fault that changed the data of event i outside its message content:
// when event i is a tool/result replace (a prune), or a later prune rewrites event i, the
// reference now refuses that replace ("may change only content").
func (c *ctx) acceptData(i int) {
	c.accept(i)
	if c.log.Events[i].Type != "tool/result" {
		return
	}
	if _, ok := c.log.Events[i].SurfaceOp.(Obj); ok {
		c.refuse(i) // the event is itself a prune: it now changes more than the content
		return
	}
	for r := i + 1; r < len(c.log.Events); r++ {
		e := c.log.Events[r]
		if op, ok := e.SurfaceOp.(Obj); ok && e.Type == "tool/result" && mustGet(op, "start") == int64(i) {
			c.f.Expect, c.f.Accepted = Refused, r
			return
		}
	}
}

func isSurface(e Ev) bool { return e.SurfaceOp != nil }

func isSurfaceType(t string) bool {
	return t == "user/message" || t == "assistant/message" || t == "tool/result"
}

// nodesBefore returns the current surface nodes before event i.
func (c *ctx) nodesBefore(i int) []int64 { return foldNodes(c.log.Events[:i]) }

func replaceOp(start, end any) Obj { return Obj{{"op", "replace"}, {"start", start}, {"end", end}} }

var kindFuncs = map[FaultKind]func(*ctx) bool{
	SurfaceOpMissing: func(c *ctx) bool {
		i := c.pick(func(_ int, e Ev) bool { return isSurface(e) })
		if i < 0 {
			return false
		}
		c.variant("removed")
		c.log.Events[i].SurfaceOp = nil
		c.refuse(i)
		return true
	},
	SurfaceOpOnNonSurface: func(c *ctx) bool {
		i := c.pick(func(_ int, e Ev) bool { return !isSurfaceType(e.Type) })
		if i < 0 {
			return false
		}
		switch c.variant("append", "replace") {
		case "append":
			c.log.Events[i].SurfaceOp = "append"
		default:
			c.log.Events[i].SurfaceOp = replaceOp(int64(0), int64(0))
		}
		c.refuse(i)
		return true
	},
	SourcesOnNonSurface: func(c *ctx) bool {
		i := c.pick(func(_ int, e Ev) bool { return !isSurfaceType(e.Type) })
		if i < 0 {
			return false
		}
		e := &c.log.Events[i]
		e.HasSources = true
		switch c.variant("empty", "earlier") {
		case "empty":
			e.Sources = []int64{}
		default:
			e.Sources = []int64{int64(c.r.IntN(i + 1))}
		}
		c.refuse(i)
		return true
	},
	SurfaceOpInvalid: func(c *ctx) bool {
		i := c.pick(func(_ int, e Ev) bool { return isSurface(e) })
		if i < 0 {
			return false
		}
		n := int64(c.r.IntN(i + 1))
		ops := map[string]any{
			"prepend":     "prepend",
			"Append":      "Append",
			"number":      int64(1),
			"array":       Arr{"append"},
			"null":        nil,
			"extra-key":   append(replaceOp(n, n), KV{"x", int64(1)}),
			"op-case":     Obj{{"op", "Replace"}, {"start", n}, {"end", n}},
			"start-str":   replaceOp(strconv.FormatInt(n, 10), n),
			"start-neg":   replaceOp(int64(-1), n),
			"start-frac":  replaceOp(Raw("1.5"), n),
			"end-missing": Obj{{"op", "replace"}, {"start", n}},
			"end-unsafe":  replaceOp(n, Raw("9007199254740992")),
		}
		v := c.variant("prepend", "Append", "number", "array", "null", "extra-key", "op-case", "start-str", "start-neg", "start-frac", "end-missing", "end-unsafe")
		k := c.lineFor(i)
		c.lines[k].Fields = c.lines[k].Fields.Set("surfaceOp", ops[v])
		c.refuse(i)
		return true
	},
	ReplaceStartNotNode: func(c *ctx) bool { return c.replaceNotNode(true) },
	ReplaceEndNotNode:   func(c *ctx) bool { return c.replaceNotNode(false) },
	ReplaceStartAfterEnd: func(c *ctx) bool {
		i := c.pick(func(i int, e Ev) bool { return isSurface(e) && len(c.nodesBefore(i)) >= 2 })
		if i < 0 {
			return false
		}
		nodes := c.nodesBefore(i)
		a := c.r.IntN(len(nodes) - 1)
		b := a + 1 + c.r.IntN(len(nodes)-a-1)
		e := &c.log.Events[i]
		c.variant("swapped")
		e.SurfaceOp = replaceOp(nodes[b], nodes[a])
		e.Sources, e.HasSources = append([]int64{}, nodes[a:b+1]...), true
		c.refuse(i)
		return true
	},
	SourcesNotArray: func(c *ctx) bool {
		i := c.pick(func(_ int, e Ev) bool { return isSurface(e) })
		if i < 0 {
			return false
		}
		vals := map[string]any{"number": int64(0), "string": "0", "object": Obj{{"0", int64(0)}}, "null": nil, "bool": true}
		v := c.variant("number", "string", "object", "null", "bool")
		k := c.lineFor(i)
		c.lines[k].Fields = c.lines[k].Fields.Set("sourceEventSeqs", vals[v])
		c.refuse(i)
		return true
	},
	SourcesEmpty: func(c *ctx) bool {
		i := c.pick(func(_ int, e Ev) bool { return isSurface(e) && e.Type != "assistant/message" })
		if i < 0 {
			return false
		}
		c.variant(c.log.Events[i].Type)
		c.log.Events[i].Sources, c.log.Events[i].HasSources = []int64{}, true
		c.refuse(i)
		return true
	},
	SourcesDuplicate: func(c *ctx) bool {
		i := c.pick(func(i int, e Ev) bool { return isSurface(e) && i > 0 })
		if i < 0 {
			return false
		}
		e := &c.log.Events[i]
		if !e.HasSources || len(e.Sources) == 0 {
			e.Sources, e.HasSources = []int64{int64(c.r.IntN(i))}, true
		}
		d := e.Sources[c.r.IntN(len(e.Sources))]
		at := c.r.IntN(len(e.Sources) + 1)
		if c.variant("repeat", "spelled-repeat") == "spelled-repeat" {
			// 3 and 3.0 are the same number to the reference
			elems := make(Arr, 0, len(e.Sources)+1)
			for k, s := range e.Sources {
				if k == at {
					elems = append(elems, Raw(fmt.Sprintf("%d.0", d)))
				}
				elems = append(elems, s)
			}
			if at == len(e.Sources) {
				elems = append(elems, Raw(fmt.Sprintf("%de0", d)))
			}
			k := c.lineFor(i)
			c.lines[k].Fields = c.lines[k].Fields.Set("sourceEventSeqs", elems)
			c.refuse(i)
			return true
		}
		e.Sources = append(e.Sources[:at:at], append([]int64{d}, e.Sources[at:]...)...)
		c.refuse(i)
		return true
	},
	SourcesNotEarlier: func(c *ctx) bool {
		i := c.pick(func(_ int, e Ev) bool { return isSurface(e) })
		if i < 0 {
			return false
		}
		e := c.log.Events[i]
		var elems []any
		for _, s := range e.Sources {
			elems = append(elems, s)
		}
		vals := map[string]any{
			"self": int64(i), "later": int64(i + 1 + c.r.IntN(100)), "negative": int64(-1),
			"fraction": Raw("0.5"), "string": "0", "null": nil, "unsafe": Raw("9007199254740993"),
		}
		v := c.variant("self", "later", "negative", "fraction", "string", "null", "unsafe")
		at := c.r.IntN(len(elems) + 1)
		elems = append(elems[:at:at], append([]any{vals[v]}, elems[at:]...)...)
		k := c.lineFor(i)
		c.lines[k].Fields = c.lines[k].Fields.Set("sourceEventSeqs", Arr(elems))
		c.refuse(i)
		return true
	},
	ReplaceMissingShadowed: func(c *ctx) bool {
		i := c.pick(func(i int, e Ev) bool { return isSurface(e) && len(c.nodesBefore(i)) >= 1 })
		if i < 0 {
			return false
		}
		nodes := c.nodesBefore(i)
		a := c.r.IntN(len(nodes))
		b := a + c.r.IntN(min(5, len(nodes)-a))
		if c.log.Events[i].Type == "tool/result" {
			b = a // keep the tool/result rule out of the way
		}
		e := &c.log.Events[i]
		e.SurfaceOp = replaceOp(nodes[a], nodes[b])
		switch c.variant("one-missing", "absent", "other-seqs") {
		case "one-missing":
			drop := a + c.r.IntN(b-a+1)
			src := append(append([]int64{}, nodes[a:drop]...), nodes[drop+1:b+1]...)
			if len(src) == 0 {
				src = []int64{int64(c.r.IntN(i))}
				if src[0] == nodes[drop] {
					e.HasSources = false
					break
				}
			}
			e.Sources, e.HasSources = src, true
		case "absent":
			e.HasSources = false
		default:
			var src []int64
			for s := int64(0); s < int64(i) && len(src) < 3; s++ {
				if indexOf(nodes[a:b+1], s) < 0 {
					src = append(src, s)
				}
			}
			if len(src) == 0 {
				e.HasSources = false
			} else {
				e.Sources, e.HasSources = src, true
			}
		}
		c.refuse(i)
		return true
	},
	ToolResultReplaceMulti: func(c *ctx) bool {
		i := c.pick(func(i int, e Ev) bool { return e.Type == "tool/result" && isSurface(e) && len(c.nodesBefore(i)) >= 2 })
		if i < 0 {
			return false
		}
		nodes := c.nodesBefore(i)
		a := c.r.IntN(len(nodes) - 1)
		b := a + 1 + c.r.IntN(min(4, len(nodes)-a-1))
		e := &c.log.Events[i]
		c.variant(fmt.Sprintf("%d-nodes", b-a+1))
		e.SurfaceOp = replaceOp(nodes[a], nodes[b])
		e.Sources, e.HasSources = append([]int64{}, nodes[a:b+1]...), true
		c.refuse(i)
		return true
	},
	ToolResultReplaceTarget: func(c *ctx) bool {
		i := c.pick(func(i int, e Ev) bool {
			if e.Type != "tool/result" || !isSurface(e) {
				return false
			}
			for _, n := range c.nodesBefore(i) {
				if c.log.Events[n].Type != "tool/result" {
					return true
				}
			}
			return false
		})
		if i < 0 {
			return false
		}
		var targets []int64
		for _, n := range c.nodesBefore(i) {
			if c.log.Events[n].Type != "tool/result" {
				targets = append(targets, n)
			}
		}
		t := targets[c.r.IntN(len(targets))]
		e := &c.log.Events[i]
		c.variant(c.log.Events[t].Type)
		e.SurfaceOp = replaceOp(t, t)
		e.Sources, e.HasSources = []int64{t}, true
		c.refuse(i)
		return true
	},
	ToolResultReplaceMore: func(c *ctx) bool {
		i := c.pick(func(i int, e Ev) bool {
			if e.Type != "tool/result" || !isSurface(e) {
				return false
			}
			for _, n := range c.nodesBefore(i) {
				if c.log.Events[n].Type == "tool/result" {
					return true
				}
			}
			return false
		})
		if i < 0 {
			return false
		}
		var targets []int64
		for _, n := range c.nodesBefore(i) {
			if c.log.Events[n].Type == "tool/result" {
				targets = append(targets, n)
			}
		}
		t := targets[c.r.IntN(len(targets))]
		data := Clone(c.log.Events[t].Data).(Obj)
		msg := mustGet(data, "message").(Obj)
		block := mustGet(msg, "content").(Arr)[0].(Obj)
		block.Set("content", Arr{Obj{{"type", "text"}, {"text", "[pruned]"}}})
		switch c.variant("message-id", "is-error", "turn", "meta", "tool-call-id", "block-key", "role", "error") {
		case "message-id":
			msg.Set("id", "pruned-"+fmt.Sprint(mustGet(msg, "id")))
		case "is-error":
			if v, ok := block.Get("isError"); ok {
				block.Set("isError", v != true)
			} else {
				msg.Set("content", Arr{append(block, KV{"isError", false})})
			}
		case "turn":
			data.Set("turn", int64(99))
		case "meta":
			data = data.Set("meta", Obj{{"pruned", true}, {"n", int64(c.r.IntN(9))}})
			if v, ok := c.log.Events[t].Data.(Obj).Get("meta"); ok && string(JSON(v)) == string(JSON(mustGet(data, "meta"))) {
				data.Set("meta", Obj{{"pruned", "twice"}})
			}
		case "tool-call-id":
			block.Set("toolCallId", "other-call")
		case "block-key":
			msg.Set("content", Arr{append(block, KV{"pruned", true})})
		case "role":
			msg.Set("role", "tool")
		default:
			data = data.Set("error", Obj{{"name", "Pruned"}, {"code", "PRUNED"}})
			if v, ok := c.log.Events[t].Data.(Obj).Get("error"); ok && string(JSON(v)) == string(JSON(mustGet(data, "error"))) {
				data.Set("error", Obj{{"name", "Pruned2"}})
			}
		}
		e := &c.log.Events[i]
		e.Data = data
		e.SurfaceOp = replaceOp(t, t)
		e.Sources, e.HasSources = []int64{t}, true
		c.refuse(i)
		return true
	},
	SeqGap: func(c *ctx) bool {
		if len(c.log.Events) == 0 {
			return false
		}
		i := c.r.IntN(len(c.log.Events))
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
	},
	SeqRepeat: func(c *ctx) bool {
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
	},
	NonJSON: func(c *ctx) bool {
		c.render()
		if len(c.lines) == 0 {
			return false
		}
		k := c.r.IntN(len(c.lines))
		ln := c.lines[k].Text()
		var bad []byte
		switch v := c.variant("NaN", "Infinity", "-Infinity", "undefined", "bare-word", "whole-line-word", "single-quotes", "trailing-comma", "two-values", "comment", "hex", "leading-plus", "unquoted-key", "leading-nbsp"); v {
		case "NaN", "Infinity", "-Infinity", "undefined", "bare-word":
			word := v
			if v == "bare-word" {
				word = "hello"
			}
			bad = replaceFirstValue(ln, word)
		case "whole-line-word":
			bad = []byte("garbage")
		case "single-quotes":
			bad = bytes.Replace(ln, []byte(`"type"`), []byte(`'type'`), 1)
		case "trailing-comma":
			bad = append(append([]byte{}, ln[:len(ln)-1]...), ",}"...)
		case "two-values":
			bad = append(append(append([]byte{}, ln...), ' '), ln...)
		case "comment":
			bad = append([]byte("// note\t"), ln...)
		case "hex":
			bad = replaceFirstValue(ln, "0x10")
		case "leading-plus":
			bad = replaceFirstValue(ln, "+1")
		case "unquoted-key":
			bad = bytes.Replace(ln, []byte(`"type"`), []byte(`type`), 1)
		default:
			bad = append([]byte("\u00a0"), ln...)
		}
		c.lines[k].Bytes = bad
		c.f.Line, c.f.Expect, c.f.Accepted = k+1, Refused, 0
		return true
	},
	DuplicateKey: func(c *ctx) bool {
		if len(c.log.Events) == 0 {
			return false
		}
		i := c.r.IntN(len(c.log.Events))
		v := c.variant("seq-wrong-first", "seq-wrong-last", "data-key", "surfaceop-first-bad", "type-first-other", "header-id", "replace-start-twice")
		switch v {
		case "surfaceop-first-bad":
			if i = c.pick(func(_ int, e Ev) bool { return isSurface(e) }); i < 0 {
				return false
			}
		case "replace-start-twice":
			if i = c.pick(func(_ int, e Ev) bool { _, ok := e.SurfaceOp.(Obj); return ok }); i < 0 {
				return false
			}
		}
		if v == "header-id" && c.log.Header == nil {
			return false
		}
		k := c.lineFor(i)
		f := c.lines[k].Fields
		switch v {
		case "seq-wrong-first":
			c.lines[k].Fields = append(Obj{{"seq", int64(i + 7)}}, f...)
			c.accept(i)
		case "seq-wrong-last":
			c.lines[k].Fields = append(f, KV{"seq", int64(i + 7)})
			c.refuse(i)
		case "data-key":
			d, ok := mustGet(f, "data").(Obj)
			if !ok || len(d) == 0 {
				return false
			}
			j := c.r.IntN(len(d))
			nd := append(append(Obj{}, d[:j]...), KV{d[j].K, "shadowed-duplicate"})
			nd = append(nd, d[j:]...)
			f.Set("data", nd)
			c.accept(i)
		case "surfaceop-first-bad":
			c.lines[k].Fields = append(Obj{{"surfaceOp", "bogus"}}, f...)
			c.accept(i)
		case "type-first-other":
			c.lines[k].Fields = append(Obj{{"type", "turn/start"}}, f...)
			c.accept(i)
		case "replace-start-twice":
			// {"op","start":bogus,"end","start":real}: JSON.parse keeps 3 keys, the last start
			op := mustGet(f, "surfaceOp").(Obj)
			f.Set("surfaceOp", Obj{{"op", "replace"}, {"start", "bogus"}, {"end", mustGet(op, "end")}, {"start", mustGet(op, "start")}})
			c.accept(i)
		default:
			c.lines[0].Fields = append(Obj{{"id", "shadowed-id"}}, c.lines[0].Fields...)
			c.accept(i)
			c.f.Seq, c.f.Line = -1, 1
		}
		return true
	},
	NumberTooLarge: func(c *ctx) bool {
		if len(c.log.Events) == 0 {
			return false
		}
		i := c.r.IntN(len(c.log.Events))
		v := c.variant("data-1e400", "data-neg-1e400", "data-1e309", "data-inexact-int", "data-2^53+1", "data-max-float-overflow", "time-inexact-int", "seq-1e400", "user-text-1e400")
		if v == "user-text-1e400" {
			if i = c.pick(func(_ int, e Ev) bool { return e.Type == "user/message" }); i < 0 {
				return false
			}
		}
		k := c.lineFor(i)
		f := c.lines[k].Fields
		num := map[string]string{
			"data-1e400": "1e400", "data-neg-1e400": "-1e400", "data-1e309": "1e309",
			"data-inexact-int": "123456789012345678901", "data-2^53+1": "9007199254740993",
			"data-max-float-overflow": "1.7976931348623159e308", "time-inexact-int": "123456789012345678901",
			"seq-1e400": "1e400", "user-text-1e400": "1e400",
		}[v]
		switch v {
		case "time-inexact-int":
			f.Set("time", Raw(num))
			c.accept(i)
			return true
		case "seq-1e400":
			f.Set("seq", Raw(num))
			c.refuse(i)
			return true
		}
		if !addDataKey(f, "n", Raw(num)) {
			return false
		}
		switch v {
		case "data-inexact-int", "data-2^53+1":
			c.acceptData(i)
		default:
			c.refuse(i)
		}
		return true
	},
	NegativeZero: func(c *ctx) bool {
		if len(c.log.Events) == 0 {
			return false
		}
		i := c.r.IntN(len(c.log.Events))
		v := c.variant("data--0", "data--0.0", "data--0e3", "data--1e-400", "time--0", "seq--0", "sources--0", "start--0")
		switch v {
		case "seq--0":
			i = 0
		case "sources--0", "start--0":
			if i = c.pick(func(i int, e Ev) bool { return isSurface(e) && i > 0 }); i < 0 {
				return false
			}
		}
		k := c.lineFor(i)
		f := c.lines[k].Fields
		switch v {
		case "time--0":
			f.Set("time", Raw("-0"))
			c.accept(i)
		case "seq--0":
			f.Set("seq", Raw("-0"))
			c.accept(i)
		case "sources--0":
			f = f.Set("sourceEventSeqs", Raw("[-0]"))
			c.lines[k].Fields = f
			c.refuse(i)
		case "start--0":
			f.Set("surfaceOp", Obj{{"op", "replace"}, {"start", Raw("-0")}, {"end", int64(0)}})
			c.refuse(i)
		default:
			if !addDataKey(f, "z", Raw(v[len("data-"):])) {
				return false
			}
			c.refuse(i)
		}
		return true
	},
	InvalidUTF8: func(c *ctx) bool {
		if len(c.log.Events) == 0 {
			return false
		}
		seqs := map[string]string{
			"ff": "\xff", "overlong": "\xc0\x80", "truncated-3": "\xe2\x82", "surrogate-bytes": "\xed\xa0\x80",
			"above-max": "\xf4\x90\x80\x80", "truncated-4": "\xf0\x9f\x98", "continuation": "\x80",
			"lone-surrogate-escape": `\ud800`, "low-surrogate-escape": `\udc00x`, "reversed-pair-escape": `\udc00\ud800`,
		}
		v := c.variant("ff", "overlong", "truncated-3", "surrogate-bytes", "above-max", "truncated-4", "continuation", "lone-surrogate-escape", "low-surrogate-escape", "reversed-pair-escape", "header-id", "in-key")
		if v == "in-key" {
			i := c.pick(func(_ int, e Ev) bool { return e.Type == "user/message" })
			if i < 0 {
				return false
			}
			d := c.log.Events[i].Data.(Obj)
			// one key with invalid bytes, one with a lone surrogate escape
			raw := JSON(d)
			c.log.Events[i].Data = Raw(append(raw[:len(raw)-1:len(raw)-1], ",\"k\xff\xfe\":1,\"s\\ud800\":2}"...))
			c.accept(i)
			return true
		}
		if v == "header-id" {
			if c.log.Header == nil {
				return false
			}
			c.render()
			c.lines[0].Fields.Set("id", Raw(`"bad`+"\xff\xfe"+`id"`))
			c.f.Line, c.f.Expect = 1, Accepted
			return true
		}
		s := Raw(`"a` + seqs[v] + `b"`)
		i := c.pick(func(_ int, e Ev) bool { return e.Type == "user/message" })
		if i < 0 || c.p(0.3) {
			i = c.r.IntN(len(c.log.Events))
		}
		k := c.lineFor(i)
		f := c.lines[k].Fields
		if d, ok := mustGet(f, "data").(Obj); ok && c.log.Events[i].Type == "user/message" {
			if content, ok := mustGet(d, "content").(Arr); ok && len(content) > 0 {
				if b, ok := content[0].(Obj); ok {
					b.Set("text", s)
					c.accept(i)
					return true
				}
			}
		}
		if !addDataKey(f, "note", s) {
			return false
		}
		c.acceptData(i)
		return true
	},
	BlankLines: func(c *ctx) bool {
		c.render()
		v := c.variant("empty", "spaces-tabs", "cr-only-line", "crlf", "no-final-newline", "nbsp", "bom-line", "line-separator", "ideographic-space", "vt-ff", "cr-separators", "nel", "nul")
		var buf bytes.Buffer
		blank := map[string]string{
			"empty": "", "spaces-tabs": " \t  ", "cr-only-line": "\r", "nbsp": "\u00a0",
			"bom-line": "\ufeff", "line-separator": "\u2028", "ideographic-space": "\u3000", "vt-ff": "\v\f",
			// U+0085 is not whitespace to JavaScript's trim() (Go's unicode.IsSpace says it is),
			// and NUL is whitespace to neither: the reference parses these lines and fails.
			"nel": "\u0085", "nul": "\x00",
		}[v]
		switch v {
		case "crlf":
			for _, ln := range c.lines {
				buf.Write(ln.Text())
				buf.WriteString("\r\n")
			}
		case "no-final-newline":
			buf.Write(Join(c.lines))
			if buf.Len() == 0 {
				return false
			}
			buf.Truncate(buf.Len() - 1)
		case "cr-separators":
			if len(c.lines) < 2 {
				return false
			}
			for _, ln := range c.lines {
				buf.Write(ln.Text())
				buf.WriteString("\r")
			}
			c.f.Expect, c.f.Accepted = Refused, 0
			c.out = buf.Bytes()
			return true
		default:
			at := c.r.IntN(len(c.lines) + 1)
			for k, ln := range c.lines {
				if k == at {
					buf.WriteString(blank + "\n")
				}
				buf.Write(ln.Text())
				buf.WriteByte('\n')
			}
			if at == len(c.lines) {
				buf.WriteString(blank + "\n")
			}
			c.f.Line = at + 1
			if v == "nel" || v == "nul" {
				c.f.Expect, c.f.Accepted = Refused, 0
				c.out = buf.Bytes()
				return true
			}
		}
		c.f.Expect = Accepted
		c.out = buf.Bytes()
		return true
	},
	TruncatedLastLine: func(c *ctx) bool {
		c.render()
		if len(c.lines) == 0 {
			return false
		}
		k := len(c.lines) - 1
		ln := c.lines[k].Text()
		c.lines[k].Bytes = ln[:1+c.r.IntN(len(ln)-1)]
		c.variant("cut")
		out := Join(c.lines)
		if c.p(0.5) {
			out = out[:len(out)-1] // the crash also lost the newline
		}
		c.out = out
		c.f.Line, c.f.Expect, c.f.Accepted = k+1, Refused, 0
		return true
	},
	LegacyHeader: func(c *ctx) bool {
		if len(c.log.Events) == 0 {
			return false
		}
		v := c.variant("header-delta-type", "header-delta-event", "fallback-reason")
		var i int
		switch v {
		case "header-delta-type", "fallback-reason":
			i = c.pick(func(_ int, e Ev) bool { return e.Type == "request/header" })
			if i < 0 {
				return false
			}
			if v == "fallback-reason" {
				c.log.Events[i].Data.(Obj).Set("reason", "fallback")
			} else {
				c.log.Events[i].Type = "request/header-delta"
			}
		default:
			i = c.pick(func(_ int, e Ev) bool { return !isSurface(e) })
			if i < 0 {
				return false
			}
			c.log.Events[i].Type = "request/header-delta"
			c.log.Events[i].Data = Obj{{"delta", Obj{{"system", "x"}}}, {"reason", "change"}}
		}
		c.refuse(i)
		return true
	},

	// extra kinds

	MalformedChunkRow: func(c *ctx) bool {
		c.render()
		var rows []int
		for k, ln := range c.lines {
			if ln.Count > 1 {
				rows = append(rows, k)
			}
		}
		if len(rows) == 0 {
			return false
		}
		k := rows[c.r.IntN(len(rows))]
		f := c.lines[k].Fields
		d := mustGet(f, "data").(Obj)
		payload := "texts"
		if _, ok := d.Get("args"); ok {
			payload = "args"
		}
		switch c.variant("dt-short", "payload-empty", "payload-number", "extra-envelope-key", "seq0-negative", "time0-fraction", "turn-string", "extra-data-key", "dt-fraction", "data-array") {
		case "dt-short":
			dt := mustGet(d, "dt").([]int64)
			d.Set("dt", dt[:len(dt)-1])
		case "payload-empty":
			d.Set(payload, Arr{})
			d.Set("dt", Arr{})
		case "payload-number":
			p := mustGet(d, payload).(Arr)
			p[0] = int64(5)
		case "extra-envelope-key":
			c.lines[k].Fields = append(f, KV{"seq", mustGet(f, "seq0")})
		case "seq0-negative":
			f.Set("seq0", int64(-1))
		case "time0-fraction":
			f.Set("time0", Raw("1.5"))
		case "turn-string":
			d.Set("turn", "1")
		case "extra-data-key":
			f.Set("data", append(d, KV{"x", int64(1)}))
		case "dt-fraction":
			dt := mustGet(d, "dt").([]int64)
			parts := make(Arr, len(dt))
			for j, x := range dt {
				parts[j] = x
			}
			parts[0] = Raw("0.5")
			d.Set("dt", parts)
		default:
			f.Set("data", Arr{})
		}
		c.f.Line, c.f.Expect, c.f.Accepted = k+1, Refused, 0
		c.f.Seq = c.lines[k].FirstSeq
		return true
	},
	NonObjectLine: func(c *ctx) bool {
		if len(c.log.Events) == 0 {
			return false
		}
		i := c.r.IntN(len(c.log.Events))
		k := c.lineFor(i)
		c.lines[k].Bytes = []byte(c.variant("null", "42", `"event"`, "[]", "true", "[1,2]"))
		c.refuse(i)
		return true
	},
	MisplacedHeader: func(c *ctx) bool {
		if len(c.log.Events) == 0 {
			return false
		}
		i := c.r.IntN(len(c.log.Events))
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
	},
	NumberSpelling: func(c *ctx) bool {
		if len(c.log.Events) == 0 {
			return false
		}
		v := c.variant("seq-x.0", "seq-e0", "seq-scaled", "time-x.0", "time-e0", "turn-1.0", "turn-1e0", "turn-1e21", "step-2.00", "sources-x.0", "replace-x.0", "replace-key-order")
		i := c.r.IntN(len(c.log.Events))
		switch v {
		case "replace-x.0", "replace-key-order":
			i = c.pick(func(_ int, e Ev) bool { _, ok := e.SurfaceOp.(Obj); return ok })
		case "turn-1.0", "turn-1e0", "turn-1e21":
			i = c.pick(func(_ int, e Ev) bool { return e.Type == "turn/start" })
		case "step-2.00":
			i = c.pick(func(_ int, e Ev) bool { return e.Type == "step/start" })
		case "sources-x.0":
			i = c.pick(func(_ int, e Ev) bool { return isSurface(e) && e.HasSources && len(e.Sources) > 0 })
		}
		if i < 0 {
			return false
		}
		e := c.log.Events[i]
		k := c.lineFor(i)
		f := c.lines[k].Fields
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
	},
	TimeOdd: func(c *ctx) bool {
		if len(c.log.Events) == 0 {
			return false
		}
		i := c.r.IntN(len(c.log.Events))
		v := c.variant("string", "null", "missing", "bool", "object", "fraction", "negative", "unsafe-int")
		k := c.lineFor(i)
		f := c.lines[k].Fields
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
	},
	MessageShape: func(c *ctx) bool {
		i := c.pick(func(_ int, e Ev) bool { return isSurface(e) })
		if i < 0 {
			return false
		}
		e := &c.log.Events[i]
		data := e.Data.(Obj)
		msg := data
		if e.Type != "user/message" {
			msg = mustGet(data, "message").(Obj)
		}
		switch c.variant("content-empty-string", "content-object", "content-null-block", "tool-call-without-id", "no-id", "empty-id", "id-number", "wrong-role", "no-source", "source-kind-empty", "content-string", "model-source-kind", "provider-empty", "tool-call-id-mismatch", "tool-two-blocks", "tool-block-content-string", "tool-callid-empty") {
		case "content-empty-string", "content-object", "content-null-block", "tool-call-without-id":
			if e.Type != "assistant/message" {
				return false
			}
			switch c.f.Variant {
			case "content-empty-string":
				msg.Set("content", "") // "".length === 0: derives no message
				c.accept(i)
			case "content-object":
				msg.Set("content", Obj{}) // derives; the crash-repair scan cannot iterate it
				c.f.Seq, c.f.Expect = int64(i), Unknown
			case "content-null-block":
				// the crash-repair scan reads block.type of every assistant/message block
				msg.Set("content", append(Arr{nil}, mustGet(msg, "content").(Arr)...))
				c.f.Seq, c.f.Expect, c.f.Accepted = int64(i), Refused, len(c.log.Events)
			default:
				found := false
				content := mustGet(msg, "content").(Arr)
				for k, b := range content {
					if bo := b.(Obj); mustGet(bo, "type") == "tool-call" {
						content[k] = bo.Del("id")
						found = true
						break
					}
				}
				if !found {
					return false
				}
				c.accept(i)
			}
			e.Data = data.Set("message", msg)
			return true
		case "id-number":
			msg.Set("id", int64(1))
		case "provider-empty":
			if e.Type != "assistant/message" {
				return false
			}
			msg.Set("source", Obj{{"kind", "model"}, {"provider", ""}, {"model", "m"}})
		case "tool-two-blocks":
			if e.Type != "tool/result" {
				return false
			}
			msg.Set("content", append(mustGet(msg, "content").(Arr), Obj{{"type", "text"}, {"text", "x"}}))
		case "tool-block-content-string":
			if e.Type != "tool/result" {
				return false
			}
			mustGet(msg, "content").(Arr)[0].(Obj).Set("content", "plain")
		case "tool-callid-empty":
			if e.Type != "tool/result" {
				return false
			}
			msg.Set("source", Obj{{"kind", "tool"}, {"callId", ""}})
		case "no-id":
			msg = msg.Del("id")
		case "empty-id":
			msg.Set("id", "")
		case "wrong-role":
			msg.Set("role", "system")
		case "no-source":
			msg = msg.Del("source")
		case "source-kind-empty":
			msg.Set("source", Obj{{"kind", ""}})
		case "content-string":
			msg.Set("content", "text")
		case "model-source-kind":
			if e.Type != "assistant/message" {
				return false
			}
			msg.Set("source", Obj{{"kind", "user"}})
		default:
			if e.Type != "tool/result" {
				return false
			}
			mustGet(msg, "content").(Arr)[0].(Obj).Set("toolCallId", "other")
		}
		if e.Type == "user/message" {
			e.Data = msg
		} else {
			e.Data = data.Set("message", msg)
		}
		if e.Type == "tool/result" || (e.Type == "assistant/message" && c.f.Variant == "content-string") {
			// a later prune of this tool/result, or the crash-repair scan, may trip over it
			c.f.Expect = Unknown
			c.f.Seq = int64(i)
			return true
		}
		c.accept(i)
		return true
	},
	LegacyShape: func(c *ctx) bool {
		i := c.pick(func(_ int, e Ev) bool { return e.Type == "assistant/message" || e.Type == "tool/result" })
		if i < 0 {
			return false
		}
		e := &c.log.Events[i]
		switch c.variant("no-message", "message-null", "content-missing") {
		case "no-message":
			e.Data = e.Data.(Obj).Del("message")
		case "message-null":
			e.Data = e.Data.(Obj).Set("message", nil)
		default:
			msg := mustGet(e.Data.(Obj), "message").(Obj)
			e.Data = e.Data.(Obj).Set("message", msg.Del("content"))
		}
		c.f.Seq = int64(i)
		c.f.Expect = Unknown
		return true
	},
	EnvelopeOdd: func(c *ctx) bool {
		if len(c.log.Events) == 0 {
			return false
		}
		v := c.variant("ignorable-false", "ignorable-string", "ignorable-null", "unknown-key", "type-number", "type-missing", "data-missing", "data-null", "data-array", "proto-key")
		i := c.r.IntN(len(c.log.Events))
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
		k := c.lineFor(i)
		f := c.lines[k].Fields
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
	},
	TurnOdd: func(c *ctx) bool {
		// Turn, step and call-id values of other JSON types: they show in openTurn, in the fork
		// texts ("open turn <String(turn)>") and in the crash-repair closers (message id
		// "interrupted-tool-result-<String(callId)>-<seq>"; pending calls are a Map keyed by
		// SameValueZero, objects by identity).
		v := c.variant("turn-missing", "turn-string", "turn-null", "turn-fraction", "turn-negative",
			"turn-object", "turn-array", "turn-nested-array", "turn-bool", "turn-tiny", "turn-exp", "turn-neg-fraction",
			"step-missing", "step-string", "step-null", "step-object",
			"call-id-number", "call-id-number-started", "call-id-string-vs-number", "call-id-object", "call-id-null", "call-id-float", "call-id-array", "call-id-big")
		// Prefer the last turn: its values show in openTurn, the fork texts and the repair.
		lastStart := 0
		for i, e := range c.log.Events {
			if e.Type == "turn/start" {
				lastStart = i
			}
		}
		pred := map[string]func(int, Ev) bool{
			"turn": func(_ int, e Ev) bool { return e.Type == "turn/start" },
			"step": func(_ int, e Ev) bool { return e.Type == "step/start" },
			"call": func(_ int, e Ev) bool {
				return e.Type == "assistant/message" && strings.Contains(string(JSON(e.Data)), `"tool-call"`)
			},
		}[strings.SplitN(v, "-", 2)[0]]
		i := c.pick(func(i int, e Ev) bool { return i >= lastStart && pred(i, e) })
		if i < 0 {
			if i = c.pick(pred); i < 0 {
				return false
			}
		}
		d := c.log.Events[i].Data.(Obj)
		turnVals := map[string]any{
			"turn-null": nil, "turn-fraction": Raw("1.5"), "turn-negative": int64(-1), "turn-object": Obj{{"n", int64(1)}},
			"turn-array": Arr{int64(1), int64(2)}, "turn-nested-array": Arr{Arr{int64(1), Arr{"a", nil}}, Arr{}}, "turn-bool": true,
			"turn-tiny": Raw("1e-7"), "turn-exp": Raw("123e-20"), "turn-neg-fraction": Raw("-0.5"),
		}
		switch v {
		case "turn-missing":
			c.log.Events[i].Data = d.Del("turn")
		case "turn-string":
			d.Set("turn", fmt.Sprint(mustGet(d, "turn")))
		case "step-missing":
			c.log.Events[i].Data = d.Del("step")
		case "step-string":
			d.Set("step", fmt.Sprint(mustGet(d, "step")))
		case "step-null":
			d.Set("step", nil)
		case "step-object":
			d.Set("step", Obj{})
		default:
			if tv, ok := turnVals[v]; ok {
				d.Set("turn", tv)
				break
			}
			ids := map[string]any{
				"call-id-number": int64(7), "call-id-number-started": int64(7), "call-id-string-vs-number": int64(7),
				"call-id-object": Obj{}, "call-id-null": nil, "call-id-float": Raw("1.5"),
				"call-id-array": Arr{"a", int64(1)}, "call-id-big": Raw("1e21"),
			}
			var old string
			for _, b := range mustGet(mustGet(d, "message").(Obj), "content").(Arr) {
				if bo := b.(Obj); mustGet(bo, "type") == "tool-call" {
					old, _ = mustGet(bo, "id").(string)
					bo.Set("id", ids[v])
					break
				}
			}
			// make the matching tool/call carry the number 7 (matches) or "7" (does not)
			if v == "call-id-number-started" || v == "call-id-string-vs-number" {
				j := c.pick(func(j int, e Ev) bool {
					return j > i && e.Type == "tool/call" && mustGet(e.Data.(Obj), "callId") == old
				})
				if j < 0 {
					return false
				}
				if v == "call-id-number-started" {
					c.log.Events[j].Data.(Obj).Set("callId", int64(7))
				} else {
					c.log.Events[j].Data.(Obj).Set("callId", "7")
				}
			}
		}
		c.accept(i)
		return true
	},
	CoreDataOdd: func(c *ctx) bool {
		// data of a core event that the reference reads only when deriving, folding the open
		// turn or scanning for crash repair.
		v := c.variant("turn-start-null", "step-start-null", "tool-call-null", "turn-end-null", "step-end-null", "chunk-null", "tool-call-empty",
			"user-data-null", "user-data-zero", "user-data-empty-string", "user-data-false", "user-data-string", "user-data-array")
		typ := map[string]string{
			"turn-start-null": "turn/start", "step-start-null": "step/start", "tool-call-null": "tool/call", "turn-end-null": "turn/end",
			"step-end-null": "step/end", "chunk-null": "assistant/chunk", "tool-call-empty": "tool/call",
		}[v]
		if typ == "" {
			typ = "user/message"
		}
		i := c.pick(func(_ int, e Ev) bool { return e.Type == typ })
		if i < 0 {
			return false
		}
		vals := map[string]any{
			"user-data-null": nil, "user-data-zero": int64(0), "user-data-empty-string": "", "user-data-false": false,
			"user-data-string": "hello", "user-data-array": Arr{"a"}, "tool-call-empty": Obj{},
		}
		c.log.Events[i].Data = vals[v] // nil for the *-null variants
		switch v {
		case "turn-start-null", "step-start-null", "tool-call-null":
			// the crash-repair scan reads data.turn / data.step / data.callId of every such event
			c.f.Seq, c.f.Expect, c.f.Accepted = int64(i), Refused, len(c.log.Events)
		default:
			c.accept(i)
		}
		return true
	},
	PruneQuirk: func(c *ctx) bool {
		// A tool/result replace that the reference's rewrite check (assertToolResultRewrite)
		// accepts: it compares the data as JavaScript values, and only the first block of
		// the message content.
		i := c.pick(func(i int, e Ev) bool {
			if e.Type != "tool/result" || !isSurface(e) {
				return false
			}
			for _, n := range c.nodesBefore(i) {
				if c.log.Events[n].Type == "tool/result" {
					return true
				}
			}
			return false
		})
		if i < 0 {
			return false
		}
		var targets []int64
		for _, n := range c.nodesBefore(i) {
			if c.log.Events[n].Type == "tool/result" {
				targets = append(targets, n)
			}
		}
		t := targets[c.r.IntN(len(targets))]
		orig := c.log.Events[t].Data.(Obj)
		data := Clone(orig).(Obj)
		msg := mustGet(data, "message").(Obj)
		block := mustGet(msg, "content").(Arr)[0].(Obj)
		block.Set("content", Arr{Obj{{"type", "text"}, {"text", "[pruned]"}}})
		switch c.variant("original-two-blocks", "replacement-two-blocks", "block-content-missing", "key-order", "number-spelling", "duplicate-key", "unicode-escape") {
		case "original-two-blocks":
			om := mustGet(orig, "message").(Obj)
			ob := mustGet(om, "content").(Arr)
			om.Set("content", append(Clone(ob).(Arr), Obj{{"type", "text"}, {"text", "second block"}}))
		case "replacement-two-blocks":
			msg.Set("content", Arr{block, Obj{{"type", "text"}, {"text", "extra"}}})
		case "block-content-missing":
			msg.Set("content", Arr{block.Del("content")})
		case "key-order":
			rev := make(Obj, len(data))
			for k := range data {
				rev[len(data)-1-k] = data[k]
			}
			data = rev
		case "number-spelling":
			data.Set("turn", Raw(fmt.Sprintf("%d.0", mustGet(data, "turn"))))
			data.Set("step", Raw(fmt.Sprintf("%de0", mustGet(data, "step"))))
		case "duplicate-key":
			data = append(Obj{{"turn", int64(999)}}, data...)
		default:
			id, _ := mustGet(msg, "id").(string)
			if id == "" {
				return false
			}
			msg.Set("id", Raw(fmt.Sprintf(`"\u%04x%s"`, id[0], escapeRest(id[1:]))))
		}
		e := &c.log.Events[i]
		e.Data = data
		e.SurfaceOp = replaceOp(t, t)
		e.Sources, e.HasSources = []int64{t}, true
		// Later events may build on the surface this event no longer makes: the log ends here.
		c.log.Events = c.log.Events[:i+1]
		c.accept(i)
		return true
	},
	RowQuirk: func(c *ctx) bool {
		c.render()
		var rows []int
		for k, ln := range c.lines {
			if ln.Count > 1 {
				rows = append(rows, k)
			}
		}
		if len(rows) == 0 {
			return false
		}
		k := rows[c.r.IntN(len(rows))]
		f := c.lines[k].Fields
		d := mustGet(f, "data").(Obj)
		payload := "texts"
		if _, ok := d.Get("args"); ok {
			payload = "args"
		}
		switch c.variant("index-fraction", "turn-negative", "turn-huge", "dt-negative", "time0-negative", "seq0-spelled", "empty-members", "name-empty", "single-member", "key-order", "dt-spelled") {
		case "index-fraction":
			d.Set("index", Raw("0.5"))
		case "turn-negative":
			d.Set("turn", int64(-3))
		case "turn-huge":
			d.Set("turn", Raw("1e21"))
		case "dt-negative":
			dt := mustGet(d, "dt").([]int64)
			dt[0] = -dt[0] - 17
		case "time0-negative":
			f.Set("time0", int64(-1000))
		case "seq0-spelled":
			f.Set("seq0", Raw(fmt.Sprintf("%d.0", mustGet(f, "seq0"))))
		case "empty-members":
			p := mustGet(d, payload).(Arr)
			for j := range p {
				if j%2 == 0 {
					p[j] = ""
				}
			}
		case "name-empty":
			if payload != "args" {
				return false
			}
			if _, ok := d.Get("name"); ok {
				d.Set("name", "")
			} else {
				return false
			}
		case "single-member":
			// split the row: a one-member row followed by the rest as plain events
			first := c.lines[k]
			p := mustGet(d, payload).(Arr)
			one := Clone(first.Fields).(Obj)
			od := mustGet(one, "data").(Obj)
			od.Set(payload, Arr{p[0]})
			od.Set("dt", []int64{})
			rest := make([]Line, 0, first.Count-1)
			for m := 1; m < first.Count; m++ {
				rest = append(rest, Line{Fields: c.log.Events[first.Index+m].Envelope(), FirstSeq: first.FirstSeq + int64(m), Count: 1, Index: first.Index + m})
			}
			c.lines[k] = Line{Fields: one, FirstSeq: first.FirstSeq, Count: 1, Index: first.Index}
			c.lines = append(c.lines[:k+1:k+1], append(rest, c.lines[k+1:]...)...)
		case "key-order":
			rev := make(Obj, len(d))
			for j := range d {
				rev[len(d)-1-j] = d[j]
			}
			f.Set("data", rev)
			c.lines[k].Fields = Obj{f[3], f[2], f[1], f[0]}
		default:
			dt := mustGet(d, "dt").([]int64)
			parts := make(Arr, len(dt))
			for j, x := range dt {
				parts[j] = Raw(fmt.Sprintf("%d.0", x))
			}
			d.Set("dt", parts)
		}
		c.f.Line, c.f.Seq, c.f.Expect = k+1, c.lines[k].FirstSeq, Accepted
		return true
	},
	HeaderShape: func(c *ctx) bool {
		i := c.pick(func(_ int, e Ev) bool { return e.Type == "request/header" })
		if i < 0 {
			return false
		}
		d := c.log.Events[i].Data.(Obj)
		h := mustGet(d, "header").(Obj)
		config := mustGet(h, "config").(Obj)
		switch c.variant("no-config", "config-array", "provider-empty", "model-number", "effort-empty", "effort-number", "adapter-array", "adapter-unknown-key", "adapter-false", "adapter-without-config", "header-string", "data-array") {
		case "no-config":
			d.Set("header", h.Del("config"))
		case "config-array":
			h.Set("config", Arr{})
		case "provider-empty":
			config.Set("provider", "")
		case "model-number":
			config.Set("model", int64(4))
		case "effort-empty":
			h.Set("config", append(config.Del("reasoningEffort"), KV{"reasoningEffort", ""}))
		case "effort-number":
			h.Set("config", append(config.Del("reasoningEffort"), KV{"reasoningEffort", int64(2)}))
		case "adapter-array":
			d.Set("header", h.Del("adapterDefaults").Set("adapterDefaults", Arr{}))
		case "adapter-unknown-key":
			d.Set("header", h.Del("adapterDefaults").Set("adapterDefaults", Obj{{"temperature", true}}))
		case "adapter-false":
			d.Set("header", h.Del("adapterDefaults").Set("adapterDefaults", Obj{{"maxTokens", false}}))
		case "adapter-without-config":
			h.Set("config", config.Del("maxTokens"))
			d.Set("header", h.Del("adapterDefaults").Set("adapterDefaults", Obj{{"maxTokens", true}}))
		case "header-string":
			d.Set("header", "h")
		default:
			c.log.Events[i].Data = Arr{}
		}
		c.accept(i)
		return true
	},
	DeepNesting: func(c *ctx) bool {
		v := c.variant("plugin-1000", "plugin-5000", "plugin-20000", "message-800")
		depth := map[string]int{"plugin-1000": 1000, "plugin-5000": 5000, "plugin-20000": 20000, "message-800": 800}[v]
		deep := Raw(strings.Repeat("[", depth) + strings.Repeat("]", depth))
		var i int
		if v == "message-800" {
			// deeper than ~2000 levels inside a message crashes the oracle's own JSON.stringify
			i = c.pick(func(_ int, e Ev) bool { return e.Type == "user/message" })
		} else {
			i = c.pick(func(_ int, e Ev) bool { return !isSurfaceType(e.Type) && e.Type != "assistant/chunk" })
		}
		if i < 0 {
			return false
		}
		c.log.Events[i].Data = append(c.log.Events[i].Data.(Obj), KV{"deep", deep})
		c.accept(i)
		return true
	},
	BOM: func(c *ctx) bool {
		c.render()
		if len(c.lines) == 0 {
			return false
		}
		c.variant("utf8-bom")
		c.out = append([]byte("\ufeff"), Join(c.lines)...)
		c.f.Line, c.f.Expect, c.f.Accepted = 1, Refused, 0
		return true
	},
}

// replaceNotNode writes a replace whose start (or end) is not a current surface node.
func (c *ctx) replaceNotNode(start bool) bool {
	i := c.pick(func(i int, e Ev) bool { return isSurface(e) && len(c.nodesBefore(i)) >= 1 })
	if i < 0 {
		return false
	}
	nodes := c.nodesBefore(i)
	good := nodes[c.r.IntN(len(nodes))]
	var bad int64
	var notNodes []int64
	for s := int64(0); s < int64(i); s++ {
		if indexOf(nodes, s) < 0 {
			notNodes = append(notNodes, s)
		}
	}
	switch c.variant("earlier-non-node", "self", "later", "huge") {
	case "earlier-non-node":
		if len(notNodes) == 0 {
			return false
		}
		bad = notNodes[c.r.IntN(len(notNodes))]
	case "self":
		bad = int64(i)
	case "later":
		bad = int64(i + 1 + c.r.IntN(50))
	default:
		bad = 9007199254740991
	}
	e := &c.log.Events[i]
	if start {
		e.SurfaceOp = replaceOp(bad, good)
	} else {
		e.SurfaceOp = replaceOp(good, bad)
	}
	e.Sources, e.HasSources = []int64{good}, true
	c.refuse(i)
	return true
}

// escapeRest returns s as the inside of a JSON string literal.
func escapeRest(s string) string {
	q := JSON(s)
	return string(q[1 : len(q)-1])
}

// addDataKey adds a key to the line's data object (false when data is not an object).
func addDataKey(f Obj, k string, v any) bool {
	d, ok := mustGet(f, "data").(Obj)
	if !ok {
		return false
	}
	f.Set("data", append(d, KV{k, v}))
	return true
}

// replaceFirstValue replaces the value of the line's "seq" or "seq0" (or its first number) with a
// bare token.
func replaceFirstValue(ln []byte, token string) []byte {
	for _, key := range []string{`"seq":`, `"seq0":`, `"version":`} {
		if at := bytes.Index(ln, []byte(key)); at >= 0 {
			start := at + len(key)
			end := start
			for end < len(ln) && (ln[end] == '-' || ln[end] >= '0' && ln[end] <= '9') {
				end++
			}
			out := append([]byte{}, ln[:start]...)
			out = append(out, token...)
			return append(out, ln[end:]...)
		}
	}
	return append([]byte(token+" "), ln...)
}
