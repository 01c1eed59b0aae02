package session

import (
	"encoding/json"
	"io"
	"strconv"

	"github.com/agentlog/agentlog/internal/jsvalue"
)

// The oracle's output fields, in the order judge() assigns them.
const (
	stageEvents = iota + 1
	stageNodes
	stageReplaceGeneration
	stageMessages
	stageTranscript
	stageOpenTurn
	stageRepair
)

// Inspect runs the oracle's judge() (conformance/oracle.mjs) over a dsh JSONL stream and returns
// its output object (InspectResult), following the reference step by step, including where it
// fails (ARCHITECTURE.md, "The session package"). With allForks it tries the fork at every seq,
// one past the end and -1 too. Refusal texts are ours; fork texts are the reference's.
func Inspect(r io.Reader, allForks bool) InspectResult {
	res := InspectResult{OK: true}
	fail := func(msg string, accepted int) InspectResult {
		res.OK = false
		res.Error = msg
		res.AcceptedEvents = &accepted
		return res
	}
	doc, fatal := readJSONLDoc(r, "session", true)
	if fatal != nil {
		return fail(fatal.Error(), 0)
	}
	s := newLenient(doc.id)
	var plans []surfPlan
	for i := range doc.items {
		it := &doc.items[i]
		if it.err != nil {
			return fail(it.err.Error(), len(s.events))
		}
		if err := s.append(it.ev, &it.p); err != nil {
			return fail(err.withLine(it.line).Error(), len(s.events))
		}
		plans = append(plans, s.lastPlan)
	}

	n := len(s.events)
	res.Events = &n
	res.Nodes = append([]int64{}, s.surf.Nodes...)
	gen := s.surf.ReplaceGeneration
	res.ReplaceGeneration = &gen
	res.stage = stageReplaceGeneration

	res.Messages = []json.RawMessage{}
	for _, seq := range s.surf.Nodes {
		if derr := s.deriveErrs[seq]; derr != nil {
			e := newError(s.id, seq, 0, RuleEventShape, derr.Error())
			return fail(e.Error(), n)
		}
		if m := s.msgVals[seq]; m != nil {
			res.Messages = append(res.Messages, jsvalue.Stringify(m))
		}
	}
	res.stage = stageMessages
	res.Transcript = append([]int64{}, s.surf.Transcript...)
	res.stage = stageTranscript

	if s.markErr != nil {
		seq := lastTurnMark(s.events)
		e := newError(s.id, seq, 0, RuleEventShape, "turn/start "+s.markErr.Error())
		return fail(e.Error(), n)
	}
	switch t := s.markTurn; {
	case t == nil:
		res.openTurnUndefined = true
	case t.Kind() == jsvalue.Null:
	case t.Kind() == jsvalue.Number && jsvalue.IsSafeInteger(t.Num()):
		v := int64(t.Num())
		res.OpenTurn = &v
	default:
		res.openTurnJSON = jsvalue.Stringify(t)
	}
	res.stage = stageOpenTurn

	if s.repErr != nil {
		return fail(s.repErr.Error(), n)
	}
	res.Repair = s.rep.closers()
	res.stage = stageRepair

	res.Forks = inspectForks(s, plans, allForks)
	return res
}

// lastTurnMark is the seq of the last turn/start or turn/end, -1 when there is none.
func lastTurnMark(events []Event) int64 {
	for i := len(events) - 1; i >= 0; i-- {
		if t := events[i].Type; t == "turn/start" || t == "turn/end" {
			return events[i].Seq
		}
	}
	return -1
}

// inspectForks computes the oracle's fork outcomes. Forking at boundary b is ForkSeed then
// ForkChild then the child's deriveMessages().length; the per-event seed checks and the message
// count of every prefix are computed once, so that trying every boundary costs O(events).
func inspectForks(s *Session, plans []surfPlan, allForks bool) []ForkOutcome {
	events := s.events
	n := len(events)
	// The first seed problem at or before each index.
	firstBad := make([]string, n)
	bad := ""
	for i := range events {
		if bad == "" {
			p := parsedEvent{data: s.datas[i], typeKind: s.typeKinds[i]}
			bad = seedEventProblem(&events[i], &p, i)
		}
		firstBad[i] = bad
	}
	// The child's message count for each prefix: replay the surface with each node's contribution.
	counts := make([]int, n)
	var nodeMsgs []int
	total := 0
	contrib := func(seq int) int {
		if s.msgVals[seq] != nil {
			return 1
		}
		return 0
	}
	for i, pl := range plans {
		switch pl.kind {
		case planAppend:
			c := contrib(i)
			nodeMsgs = append(nodeMsgs, c)
			total += c
		case planReplace:
			for _, c := range nodeMsgs[pl.startIdx : pl.endIdx+1] {
				total -= c
			}
			c := contrib(i)
			rest := append([]int{c}, nodeMsgs[pl.endIdx+1:]...)
			nodeMsgs = append(nodeMsgs[:pl.startIdx], rest...)
			total += c
		}
		counts[i] = total
	}
	dataOf := func(i int64) (*jsvalue.Value, error) { return s.datas[i], nil }

	var boundaries []*int64
	boundaries = append(boundaries, nil)
	if allForks {
		for i := 0; i <= n; i++ {
			b := int64(i)
			boundaries = append(boundaries, &b)
		}
		m := int64(-1)
		boundaries = append(boundaries, &m)
	}
	out := make([]ForkOutcome, 0, len(boundaries))
	for _, b := range boundaries {
		fo := ForkOutcome{Boundary: b}
		end, ferr := forkBoundary(s.id, events, b, dataOf)
		switch {
		case ferr != nil:
			fo.Code, fo.Error = ferr.Code, ferr.Msg
		case end > 0 && firstBad[end-1] != "":
			fo.Error = firstBad[end-1]
		default:
			fo.OK = true
			seedLen, childEvents, msgs := end, end+1, 0
			if end > 0 {
				msgs = counts[end-1]
				if events[end-1].Type == "session/end-seed" {
					childEvents = end
				}
			}
			last := "session/end-seed"
			fo.SeedLength, fo.ChildEvents, fo.ChildLast, fo.ChildMessages = &seedLen, &childEvents, &last, &msgs
		}
		out = append(out, fo)
	}
	return out
}

// MarshalJSON writes the oracle's output object; see InspectResult. Strings are written as
// JSON.stringify writes them (no HTML escaping), so the bytes equal the oracle's when printed
// with ev.MarshalJSON semantics (json.Marshal would HTML-escape '<', '>' and '&'; use a
// json.Encoder with SetEscapeHTML(false) or call this method directly).
func (r InspectResult) MarshalJSON() ([]byte, error) {
	stage := r.stage
	if stage == 0 && r.OK {
		stage = stageRepair // built by hand: print every field
	}
	b := []byte(`{"ok":`)
	b = strconv.AppendBool(b, r.OK)
	if stage >= stageEvents {
		b = append(b, `,"events":`...)
		b = strconv.AppendInt(b, int64(deref(r.Events)), 10)
	}
	if stage >= stageNodes {
		b = append(b, `,"nodes":`...)
		b = jsvalue.AppendInts(b, r.Nodes)
	}
	if stage >= stageReplaceGeneration {
		b = append(b, `,"replaceGeneration":`...)
		var g int64
		if r.ReplaceGeneration != nil {
			g = *r.ReplaceGeneration
		}
		b = strconv.AppendInt(b, g, 10)
	}
	if stage >= stageMessages {
		b = append(b, `,"messages":[`...)
		for i, m := range r.Messages {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, m...) // JSON.stringify output: compact already
		}
		b = append(b, ']')
	}
	if stage >= stageTranscript {
		b = append(b, `,"transcript":`...)
		b = jsvalue.AppendInts(b, r.Transcript)
	}
	if stage >= stageOpenTurn && !r.openTurnUndefined {
		b = append(b, `,"openTurn":`...)
		switch {
		case r.OpenTurn != nil:
			b = strconv.AppendInt(b, *r.OpenTurn, 10)
		case r.openTurnJSON != nil:
			b = append(b, r.openTurnJSON...)
		default:
			b = append(b, "null"...)
		}
	}
	if stage >= stageRepair {
		b = append(b, `,"repair":[`...)
		for i := range r.Repair {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendEventJSON(b, &r.Repair[i], true); err != nil {
				return nil, err
			}
		}
		b = append(b, ']')
	}
	if !r.OK {
		b = append(b, `,"error":`...)
		b = jsvalue.AppendQuote(b, r.Error)
		b = append(b, `,"acceptedEvents":`...)
		b = strconv.AppendInt(b, int64(deref(r.AcceptedEvents)), 10)
	} else {
		b = append(b, `,"forks":[`...)
		for i, f := range r.Forks {
			if i > 0 {
				b = append(b, ',')
			}
			fb, err := f.MarshalJSON()
			if err != nil {
				return nil, err
			}
			b = append(b, fb...)
		}
		b = append(b, ']')
	}
	return append(b, '}'), nil
}

// MarshalJSON writes one fork outcome as the oracle does: boundary (null when omitted), ok, then
// code (when the refusal has one) and error, or seedLength, childEvents, childLast, childMessages.
func (f ForkOutcome) MarshalJSON() ([]byte, error) {
	b := []byte(`{"boundary":`)
	if f.Boundary == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, *f.Boundary, 10)
	}
	b = append(b, `,"ok":`...)
	b = strconv.AppendBool(b, f.OK)
	if f.Code != "" {
		b = append(b, `,"code":`...)
		b = jsvalue.AppendQuote(b, string(f.Code))
	}
	if !f.OK || f.Error != "" {
		b = append(b, `,"error":`...)
		b = jsvalue.AppendQuote(b, f.Error)
	}
	num := func(key string, v *int) {
		if v != nil {
			b = append(b, `,"`+key+`":`...)
			b = strconv.AppendInt(b, int64(*v), 10)
		}
	}
	num("seedLength", f.SeedLength)
	num("childEvents", f.ChildEvents)
	if f.ChildLast != nil {
		b = append(b, `,"childLast":`...)
		b = jsvalue.AppendQuote(b, *f.ChildLast)
	}
	num("childMessages", f.ChildMessages)
	return append(b, '}'), nil
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}
