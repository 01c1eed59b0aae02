package session

// Crash repair: the reference's interruptedTurnClosers, kept as an incremental state so that a
// Session answers Repair() without rescanning its log.

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentlog/agentlog/internal/jsvalue"
)

// Texts and codes of the synthetic tool results (reference repair.ts).
const (
	toolNotStarted          = "TOOL_NOT_STARTED"
	toolOutcomeUnknown      = "TOOL_OUTCOME_UNKNOWN"
	toolNotStartedText      = "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed."
	toolOutcomeUnknownText  = "The tool call was interrupted after it was recorded, but no result was durably recorded. Its outcome is unknown. Decide whether to retry from the tool semantics: retry only if the operation is read-only or idempotent; if it may have side effects, first verify external state or ask the user. Do not retry blindly."
	interruptedToolIDPrefix = "interrupted-tool-result-"
)

// shapeError explains a property read the reference would fail on (a TypeError in JavaScript).
type shapeError struct {
	typ     string
	path    string         // e.g. data.message
	val     *jsvalue.Value // the nullish value read (nil = undefined)
	reading string         // the property the reference then reads
	hint    string
}

func (e *shapeError) Error() string {
	what := "undefined"
	if e.val != nil {
		what = "null"
	}
	msg := fmt.Sprintf("%s cannot be derived or crash-repaired: %s is %s (the reference then reads '%s' and fails)",
		e.typ, e.path, what, e.reading)
	if e.hint != "" {
		msg += "; " + e.hint
	}
	return msg
}

// access reads base.k1.k2... like JavaScript, reporting which part was undefined or null.
func access(typ string, base *jsvalue.Value, baseName string, keys ...string) (*jsvalue.Value, *shapeError) {
	cur, path := base, baseName
	for _, k := range keys {
		if jsvalue.IsNullish(cur) {
			return nil, &shapeError{typ: typ, path: path, val: cur, reading: k}
		}
		cur, _ = jsvalue.Get(cur, k)
		if _, isIdx := jsvalue.ArrayIndex(k); isIdx {
			path += "[" + k + "]"
		} else {
			path += "." + k
		}
	}
	return cur, nil
}

// oldFormatHint recognises the older dsh format of the four refused recorded logs, whose
// assistant/message and tool/result keep content directly in data instead of data.message.
func oldFormatHint(data *jsvalue.Value) string {
	if jsvalue.IsPlainObject(data) && data.Field("message") == nil && data.HasOwn("content") {
		return "data has content but no message: this is the older dsh event format (" + describeKeys(data) + ")"
	}
	return ""
}

func describeKeys(v *jsvalue.Value) string {
	keys := v.Keys()
	if len(keys) > 8 {
		keys = keys[:8]
	}
	return "data keys: " + strings.Join(keys, ", ")
}

// repairRead is what interruptedTurnClosers reads from one event.
type repairRead struct {
	kind   int
	turn   *jsvalue.Value   // turn/start data.turn
	step   *jsvalue.Value   // step/start data.step; assistant/message data.step
	ids    []*jsvalue.Value // assistant/message: ids of tool-call blocks, in order
	callID *jsvalue.Value   // tool/call data.callId; tool/result data.message.source.callId
}

const (
	rOther = iota
	rTurnStart
	rTurnEnd
	rStepStart
	rStepEnd
	rAssistant
	rToolCall
	rToolResult
)

// readForRepair performs the reads interruptedTurnClosers performs on one event, failing where
// the reference would throw.
func readForRepair(typ string, data *jsvalue.Value) (repairRead, error) {
	var rr repairRead
	switch typ {
	case "turn/start":
		rr.kind = rTurnStart
		v, err := access(typ, data, "data", "turn")
		if err != nil {
			return rr, err
		}
		rr.turn = v
	case "turn/end":
		rr.kind = rTurnEnd
	case "step/start":
		rr.kind = rStepStart
		v, err := access(typ, data, "data", "step")
		if err != nil {
			return rr, err
		}
		rr.step = v
	case "step/end":
		rr.kind = rStepEnd
	case "assistant/message":
		rr.kind = rAssistant
		content, err := access(typ, data, "data", "message", "content")
		if err != nil {
			err.hint = oldFormatHint(data)
			return rr, err
		}
		var blocks []*jsvalue.Value
		switch {
		case content != nil && content.Kind() == jsvalue.Array:
			blocks = content.Elems()
		case content != nil && content.Kind() == jsvalue.String:
			// a string iterates by code point; no character has a "type"
		default:
			return rr, &shapeError{typ: typ, path: "data.message.content", val: content, reading: "Symbol.iterator",
				hint: "content must be an array (it is " + kindName(content) + ")"}
		}
		for i, b := range blocks {
			if jsvalue.IsNullish(b) {
				return rr, &shapeError{typ: typ, path: "data.message.content[" + strconv.Itoa(i) + "]", val: b, reading: "type"}
			}
			if t, _ := jsvalue.Get(b, "type"); jsvalue.IsString(t, "tool-call") {
				id, _ := jsvalue.Get(b, "id")
				rr.ids = append(rr.ids, id)
			}
		}
		if len(rr.ids) > 0 {
			rr.step, _ = jsvalue.Get(data, "step")
		}
	case "tool/call":
		rr.kind = rToolCall
		v, err := access(typ, data, "data", "callId")
		if err != nil {
			return rr, err
		}
		rr.callID = v
	case "tool/result":
		rr.kind = rToolResult
		v, err := access(typ, data, "data", "message", "source", "callId")
		if err != nil {
			err.hint = oldFormatHint(data)
			return rr, err
		}
		rr.callID = v
	}
	return rr, nil
}

func kindName(v *jsvalue.Value) string {
	if v == nil {
		return "undefined"
	}
	return [...]string{"null", "a boolean", "a number", "a string", "an array", "an object"}[v.Kind()]
}

// pendingCall is one entry of the reference's pendingCalls Map.
type pendingCall struct {
	id      *jsvalue.Value
	step    *jsvalue.Value
	callSeq int64 // -1: no tool/call recorded yet
	deleted bool
}

// repairState is the fold of interruptedTurnClosers over the events so far.
type repairState struct {
	openTurn *jsvalue.Value // jsvalue.NullValue when no turn is open; nil is JavaScript undefined (still "open")
	openStep *jsvalue.Value
	calls    []*pendingCall // Map insertion order; deleted entries are skipped
	index    map[string]int // live keys -> position in calls
	hasLast  bool
	lastSeq  int64
	lastTime json.Number
}

func newRepairState() repairState {
	return repairState{openTurn: jsvalue.NullValue, openStep: jsvalue.NullValue, index: map[string]int{}}
}

// mapKey is SameValueZero identity for Map keys: primitives by value, objects by reference.
func mapKey(v *jsvalue.Value) string {
	if v == nil {
		return "u"
	}
	switch v.Kind() {
	case jsvalue.Null:
		return "z"
	case jsvalue.Bool:
		if v.Bool() {
			return "t"
		}
		return "f"
	case jsvalue.Number:
		return "n" + jsvalue.NumberString(v.Num())
	case jsvalue.String:
		return "s" + v.Str()
	}
	return fmt.Sprintf("p%p", v)
}

func (st *repairState) clearCalls() {
	st.calls = st.calls[:0]
	clear(st.index)
}

func (st *repairState) apply(rr repairRead, seq int64, t json.Number) {
	switch rr.kind {
	case rTurnStart:
		st.openTurn, st.openStep = rr.turn, jsvalue.NullValue
		st.clearCalls()
	case rTurnEnd:
		st.openTurn, st.openStep = jsvalue.NullValue, jsvalue.NullValue
		st.clearCalls()
	case rStepStart:
		st.openStep = rr.step
	case rStepEnd:
		st.clearCalls()
		st.openStep = jsvalue.NullValue
	case rAssistant:
		for _, id := range rr.ids {
			k := mapKey(id)
			if i, ok := st.index[k]; ok { // Map.set on an existing key keeps its position
				st.calls[i] = &pendingCall{id: id, step: rr.step, callSeq: -1}
				continue
			}
			st.index[k] = len(st.calls)
			st.calls = append(st.calls, &pendingCall{id: id, step: rr.step, callSeq: -1})
		}
	case rToolCall:
		if i, ok := st.index[mapKey(rr.callID)]; ok {
			st.calls[i].callSeq = seq
		}
	case rToolResult:
		k := mapKey(rr.callID)
		if i, ok := st.index[k]; ok {
			st.calls[i].deleted = true
			delete(st.index, k)
			st.compact()
		}
	}
	st.hasLast, st.lastSeq, st.lastTime = true, seq, t
}

// compact drops deleted entries once they dominate, keeping the order of the live ones.
func (st *repairState) compact() {
	if len(st.calls) < 32 || len(st.index)*2 > len(st.calls) {
		return
	}
	live := st.calls[:0]
	for _, c := range st.calls {
		if !c.deleted {
			st.index[mapKey(c.id)] = len(live)
			live = append(live, c)
		}
	}
	for i := len(live); i < len(st.calls); i++ {
		st.calls[i] = nil
	}
	st.calls = live
}

// objWriter writes a JSON object, skipping undefined (nil) members as JSON.stringify does.
type objWriter struct {
	b     []byte
	first bool
}

func newObj() *objWriter { return &objWriter{b: []byte{'{'}, first: true} }

func (o *objWriter) raw(key string, val []byte) *objWriter {
	if val == nil {
		return o
	}
	if !o.first {
		o.b = append(o.b, ',')
	}
	o.first = false
	o.b = jsvalue.AppendQuote(o.b, key)
	o.b = append(o.b, ':')
	o.b = append(o.b, val...)
	return o
}

func (o *objWriter) str(key, val string) *objWriter { return o.raw(key, jsvalue.AppendQuote(nil, val)) }

func (o *objWriter) done() []byte { return append(o.b, '}') }

// closers returns the synthetic events that close the open tail turn (the reference's
// interruptedTurnClosers): error results for unmatched tool calls (TOOL_OUTCOME_UNKNOWN when a
// tool/call was recorded, TOOL_NOT_STARTED otherwise), a step/end when a step is open, then
// turn/end {kind:"interrupted"}. Seqs continue the log; every closer reuses the last event's
// time. Empty when no turn is open.
func (st *repairState) closers() []Event {
	if !st.hasLast || (st.openTurn != nil && st.openTurn.Kind() == jsvalue.Null) {
		return []Event{}
	}
	seq := st.lastSeq + 1
	t := st.lastTime
	if f, ok := timeValue(t); ok {
		t = json.Number(jsvalue.NumberJSON(f))
	}
	turn := jsvalue.Stringify(st.openTurn)
	var out []Event
	for _, c := range st.calls {
		if c.deleted {
			continue
		}
		started := c.callSeq >= 0
		callID := jsvalue.Stringify(c.id)
		text, errName, errCode := toolNotStartedText, "ToolNotStartedError", toolNotStarted
		if started {
			text, errName, errCode = toolOutcomeUnknownText, "ToolOutcomeUnknownError", toolOutcomeUnknown
		}
		inner := newObj().str("type", "text").str("text", text).done()
		result := newObj().str("type", "tool-result").raw("toolCallId", callID).raw("isError", []byte("true")).
			raw("content", append(append([]byte{'['}, inner...), ']')).done()
		msg := newObj().
			str("id", interruptedToolIDPrefix+jsvalue.ToString(c.id)+"-"+strconv.FormatInt(seq, 10)).
			str("role", "user").
			raw("source", newObj().str("kind", "tool").raw("callId", callID).done()).
			raw("content", append(append([]byte{'['}, result...), ']')).
			done()
		data := newObj().raw("turn", turn).raw("step", jsvalue.Stringify(c.step)).raw("message", msg).
			raw("error", newObj().str("name", errName).str("code", errCode).done()).done()
		ev := Event{Type: "tool/result", Seq: seq, Time: t, Data: data, SurfaceOp: json.RawMessage(`"append"`)}
		if started {
			ev.SourceEventSeqs = json.RawMessage("[" + strconv.FormatInt(c.callSeq, 10) + "]")
		}
		out = append(out, ev)
		seq++
	}
	if st.openStep == nil || st.openStep.Kind() != jsvalue.Null {
		out = append(out, Event{Type: "step/end", Seq: seq, Time: t,
			Data: newObj().raw("turn", turn).raw("step", jsvalue.Stringify(st.openStep)).done()})
		seq++
	}
	out = append(out, Event{Type: "turn/end", Seq: seq, Time: t,
		Data: newObj().raw("turn", turn).raw("reason", []byte(`{"kind":"interrupted"}`)).done()})
	return out
}

// RepairChecked returns the crash-repair closers for events (the reference's
// interruptedTurnClosers), or an *Error (rule event-shape, or json) naming the first event whose
// data the reference could not read. Events that a Session accepted never fail.
func RepairChecked(events []Event) ([]Event, error) {
	st := newRepairState()
	for i := range events {
		ev := &events[i]
		var data *jsvalue.Value
		if needsRepairRead(ev.Type) {
			var err error
			if data, err = jsvalue.Parse(ev.Data); err != nil {
				return nil, newError("", ev.Seq, 0, RuleJSON, fmt.Sprintf("session event %q data: %v", ev.Type, err))
			}
		}
		rr, err := readForRepair(ev.Type, data)
		if err != nil {
			return nil, newError("", ev.Seq, 0, RuleEventShape, err.Error())
		}
		st.apply(rr, ev.Seq, ev.Time)
	}
	return st.closers(), nil
}

// Repair returns the crash-repair closers for events (interruptedTurnClosers): empty when the last
// turn is closed, nil when an event cannot be read (see RepairChecked).
func Repair(events []Event) []Event {
	out, err := RepairChecked(events)
	if err != nil {
		return nil
	}
	return out
}

func needsRepairRead(typ string) bool {
	switch typ {
	case "turn/start", "step/start", "assistant/message", "tool/call", "tool/result":
		return true
	}
	return false
}
