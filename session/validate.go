package session

// Validation of one event at the append boundary: the reference's Session.append
// (snapshotJsonValue, assertSupportedRequestHeader) and planSurfaceEvent (surfaceOpOf,
// assertProvenance, replacementRange, assertToolResultRewrite), with the reference's message
// texts, plus agentlog's event-shape rule (see DEPARTURES.md).

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/agentlog/agentlog/internal/jsvalue"
)

// isEventSeq is the reference's isEventSeq: a non-negative safe integer number.
func isEventSeq(v *jsvalue.Value) bool {
	return v.Kind() == jsvalue.Number && jsvalue.IsSafeInteger(v.Num()) && v.Num() >= 0
}

// refusal is a broken rule with the reference's message text (or ours where it has none).
type refusal struct {
	rule Rule
	msg  string
}

func (r *refusal) toError(session string, seq int64) *Error {
	return newError(session, seq, 0, r.rule, r.msg)
}

// isSurfaceType reports whether type can join the surface (the reference's SURFACE_EVENT_TYPES).
func isSurfaceType(t string) bool {
	return t == "user/message" || t == "assistant/message" || t == "tool/result"
}

// surfPlan is the validated fold transition of one event (the reference's plan).
type surfPlan struct {
	kind     int // planNone, planAppend, planReplace
	startIdx int
	endIdx   int
}

const (
	planNone = iota
	planAppend
	planReplace
)

// lookupFn returns the type and parsed data of an earlier event (for a tool/result replace).
type lookupFn func(seq int64) (typ string, data *jsvalue.Value, err error)

// checkAppend validates ev as the event at seq expected against the current surface nodes, in
// the order the reference's Session.append checks: seq, data serializability, legacy request
// headers, surface-metadata serializability, then the surface plan.
func checkAppend(nodes []int64, ev *Event, p *parsedEvent, expected int64, lookup lookupFn) (surfPlan, *refusal) {
	if ev.Seq != expected {
		return surfPlan{}, &refusal{RuleSeqContiguous,
			fmt.Sprintf("session event seq %d is not contiguous; expected %d", ev.Seq, expected)}
	}
	if p.data == nil {
		return surfPlan{}, &refusal{RuleData, `session event "` + ev.Type + `" carries non-JSON-serializable data (data is absent)`}
	}
	if p.data.Lossy() {
		return surfPlan{}, &refusal{RuleLosslessJSON, `session event "` + ev.Type + `" carries non-JSON-serializable data`}
	}
	if isLegacyType(ev.Type) {
		if r := legacyRequestHeader(ev.Type, p.data, `session event "`+ev.Type+`"`); r != "" {
			return surfPlan{}, &refusal{RuleLegacyRequestHeader, r}
		}
	}
	if (p.op != nil && p.op.Lossy()) || (p.srcs != nil && p.srcs.Lossy()) {
		return surfPlan{}, &refusal{RuleLosslessJSON, `session event "` + ev.Type + `" carries non-JSON-serializable surface metadata`}
	}
	return planSurface(nodes, ev, p, lookup)
}

// isLegacyType reports whether legacyRequestHeader can refuse an event of type typ (its
// location text is built only then).
func isLegacyType(typ string) bool { return typ == "request/header-delta" || typ == "request/header" }

// legacyRequestHeader is the reference's assertSupportedRequestHeader; "" when supported.
func legacyRequestHeader(typ string, data *jsvalue.Value, location string) string {
	if typ == "request/header-delta" {
		return location + " uses unsupported legacy request/header-delta format"
	}
	if typ == "request/header" && jsvalue.IsPlainObject(data) && jsvalue.IsString(data.Field("reason"), "fallback") {
		return location + ` uses unsupported legacy request/header reason "fallback"`
	}
	return ""
}

// planSurface is the reference's planSurfaceEvent after the seq check.
func planSurface(nodes []int64, ev *Event, p *parsedEvent, lookup lookupFn) (surfPlan, *refusal) {
	typ := ev.Type
	if !isSurfaceType(typ) {
		if p.op != nil {
			return surfPlan{}, &refusal{RuleSurfaceOp, `session event "` + typ + `" is not surface-eligible and cannot carry surfaceOp`}
		}
		if p.srcs != nil {
			return surfPlan{}, &refusal{RuleSurfaceOp, `session event "` + typ + `" is not surface-eligible and cannot carry sourceEventSeqs`}
		}
		return surfPlan{kind: planNone}, nil
	}
	q := `session event "` + typ + `"`
	op := p.op
	if op == nil {
		return surfPlan{}, &refusal{RuleSurfaceOp, q + " is surface-eligible and requires a surfaceOp marker"}
	}
	if jsvalue.IsString(op, "append") {
		if r := assertProvenance(ev, p.srcs, nil); r != nil {
			return surfPlan{}, r
		}
		return surfPlan{kind: planAppend}, nil
	}
	if op.Kind() != jsvalue.Object {
		return surfPlan{}, &refusal{RuleSurfaceOp, q + " carries an invalid surfaceOp"}
	}
	if len(op.Keys()) != 3 || !op.HasOwn("op") || !op.HasOwn("start") || !op.HasOwn("end") ||
		!jsvalue.IsString(op.Field("op"), "replace") || !isEventSeq(op.Field("start")) || !isEventSeq(op.Field("end")) {
		return surfPlan{}, &refusal{RuleSurfaceOp, q + " carries an invalid replace surfaceOp"}
	}
	start, end := int64(op.Field("start").Num()), int64(op.Field("end").Num())
	// replacementRange
	startIdx := indexOf(nodes, start)
	if startIdx < 0 {
		return surfPlan{}, &refusal{RuleReplaceStart, fmt.Sprintf("surface replace: start seq %d not found in surface", start)}
	}
	endIdx := indexOf(nodes, end)
	if endIdx < 0 {
		return surfPlan{}, &refusal{RuleReplaceEnd, fmt.Sprintf("surface replace: end seq %d not found in surface", end)}
	}
	if startIdx > endIdx {
		return surfPlan{}, &refusal{RuleReplaceOrder, fmt.Sprintf(
			"surface replace: start seq %d (index %d) is after end seq %d (index %d)", start, startIdx, end, endIdx)}
	}
	shadowed := nodes[startIdx : endIdx+1]
	if r := assertProvenance(ev, p.srcs, shadowed); r != nil {
		return surfPlan{}, r
	}
	if typ == "tool/result" {
		if r := assertToolResultRewrite(p.data, shadowed, lookup); r != nil {
			return surfPlan{}, r
		}
	}
	return surfPlan{kind: planReplace, startIdx: startIdx, endIdx: endIdx}, nil
}

func indexOf(nodes []int64, seq int64) int {
	for i, n := range nodes {
		if n == seq {
			return i
		}
	}
	return -1
}

// assertProvenance is the reference's check of sourceEventSeqs against earlier events and the
// shadowed nodes.
func assertProvenance(ev *Event, raw *jsvalue.Value, shadowed []int64) *refusal {
	sources := map[int64]struct{}{}
	if raw != nil {
		if raw.Kind() != jsvalue.Array {
			return &refusal{RuleSourceEventSeqs, fmt.Sprintf("sourceEventSeqs on event at seq %d must be an array when present", ev.Seq)}
		}
		if len(raw.Elems()) == 0 && ev.Type != "assistant/message" {
			return &refusal{RuleSourceEventSeqs, "sourceEventSeqs must not be empty except on assistant/message"}
		}
		nonEarlier := int64(-1)
		for _, s := range raw.Elems() {
			if !isEventSeq(s) {
				return &refusal{RuleSourceEventSeqs, `session event "` + ev.Type + `" sourceEventSeqs must densely contain non-negative safe integers`}
			}
			v := int64(s.Num())
			sources[v] = struct{}{}
			if nonEarlier < 0 && v >= ev.Seq {
				nonEarlier = v
			}
		}
		if len(sources) != len(raw.Elems()) {
			return &refusal{RuleSourceEventSeqs, "sourceEventSeqs must not contain duplicates"}
		}
		if nonEarlier >= 0 {
			return &refusal{RuleSourceEventSeqs, fmt.Sprintf("sourceEventSeqs must reference earlier events: %d >= current seq %d", nonEarlier, ev.Seq)}
		}
	}
	var missing []string
	for _, s := range shadowed {
		if _, ok := sources[s]; !ok {
			missing = append(missing, strconv.FormatInt(s, 10))
		}
	}
	if len(missing) > 0 {
		return &refusal{RuleReplaceCoverage, "surface replace: sourceEventSeqs must include every shadowed surface node; missing " + strings.Join(missing, ", ")}
	}
	return nil
}

// assertToolResultRewrite is the reference's restriction of a tool/result replace to one current
// tool/result whose inner result content is the only change.
func assertToolResultRewrite(data *jsvalue.Value, shadowed []int64, lookup lookupFn) *refusal {
	if len(shadowed) != 1 {
		return &refusal{RuleToolResultReplace, "tool/result surface replacement must rewrite exactly one current node"}
	}
	origType, origData, err := lookup(shadowed[0])
	if err != nil {
		return &refusal{RuleLookup, fmt.Sprintf("tool/result surface replacement: reading target seq %d: %v", shadowed[0], err)}
	}
	if origType != "tool/result" {
		return &refusal{RuleToolResultReplace, "tool/result surface replacement must target a current tool/result"}
	}
	origRest := jsvalue.Spread(origData)
	replRest := jsvalue.Spread(data)
	origResult, err := jsvalue.GetPath(origData, "message", "content", "0")
	if err != nil {
		return &refusal{RuleToolResultReplace, "tool/result surface replacement: target: " + err.Error()}
	}
	replResult, err := jsvalue.GetPath(data, "message", "content", "0")
	if err != nil {
		return &refusal{RuleToolResultReplace, "tool/result surface replacement: " + err.Error()}
	}
	withoutContent := func(d, result *jsvalue.Value) *jsvalue.Value {
		msg, _ := jsvalue.Get(d, "message") // d.message was read above without error
		inner := jsvalue.Spread(result)
		inner.Set("content", jsvalue.NullValue)
		m := jsvalue.Spread(msg)
		m.Set("content", jsvalue.NewArray(inner))
		return m
	}
	origRest.Set("message", withoutContent(origData, origResult))
	replRest.Set("message", withoutContent(data, replResult))
	if !jsvalue.DeepEqual(origRest, replRest) {
		return &refusal{RuleToolResultReplace, "tool/result surface replacement may change only content"}
	}
	return nil
}

// eventShape is agentlog's event-shape rule: an event is refused when the reference would accept
// it at append and then fail on it in deriveMessages or interruptedTurnClosers (a TypeError such
// as "Cannot read properties of undefined (reading 'content')"), and a turn/start must carry an
// integer turn. Events that pass can always be derived and repaired. It returns what the repair
// reads of the event.
func eventShape(ev *Event, data *jsvalue.Value) (repairRead, *refusal) {
	rr, err := readForRepair(ev.Type, data)
	if err != nil {
		return rr, &refusal{RuleEventShape, err.Error()}
	}
	if ev.Type == "turn/start" && (rr.turn == nil || rr.turn.Kind() != jsvalue.Number || !jsvalue.IsSafeInteger(rr.turn.Num())) {
		return rr, &refusal{RuleEventShape, "turn/start data.turn must be an integer, got " + describe(rr.turn)}
	}
	return rr, nil
}
