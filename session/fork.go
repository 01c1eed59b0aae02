package session

// Forks: the reference's SessionStore._forkSeed (seed selection and its refusals) and the seed
// validation of Session.create(child, seed, header) (assertSessionEventEnvelope,
// assertCurrentLlmShape, assertMessageEventShape, assertSupportedRequestHeader, contiguity and
// surface rules), with the reference's exact texts.

import (
	"fmt"
	"strconv"

	"github.com/agentlog/agentlog/internal/jsvalue"
)

// ForkSeed selects the seed for forking events (the session named id) at boundary (nil = the
// last event's seq), as the reference's _forkSeed: the events 0..boundary inclusive (a copy of the
// slice; the Event values share their bytes). Refusals, with the reference's exact texts:
//   - INVALID_BOUNDARY `fork boundary for session "<id>" must be a non-negative safe integer, got <b>`
//   - INVALID_BOUNDARY `fork boundary <b> does not exist in session "<id>" (last seq: <last|none>)`
//   - INVALID_BOUNDARY `fork boundary <b> does not match a contiguous event seq in session "<id>"`
//   - OPEN_TURN `fork boundary <b> in session "<id>" ends inside open turn <turn>` when the last
//     turn/start or turn/end at or before the boundary is a turn/start.
//
// A nil boundary on an empty session gives an empty seed. The seed excludes the end-seed marker
// (ForkChild adds it).
func ForkSeed(id string, events []Event, boundary *int64) ([]Event, *ForkError) {
	end, ferr := forkBoundary(id, events, boundary, func(i int64) (*jsvalue.Value, error) {
		return jsvalue.Parse(events[i].Data)
	})
	if ferr != nil {
		return nil, ferr
	}
	return append([]Event{}, events[:end]...), nil
}

// forkBoundary checks a fork boundary as _forkSeed does and returns the seed length. dataOf
// returns the parsed data of events[i] (read only for the turn/start that makes a turn open).
func forkBoundary(id string, events []Event, boundary *int64, dataOf func(i int64) (*jsvalue.Value, error)) (int, *ForkError) {
	last := int64(-1)
	if len(events) > 0 {
		last = events[len(events)-1].Seq
	}
	b, ferr := checkBoundary(id, boundary, last, int64(len(events)))
	if ferr != nil || b < 0 {
		return 0, ferr
	}
	if events[b].Seq != b {
		return 0, &ForkError{Code: CodeInvalidBoundary,
			Msg: fmt.Sprintf("fork boundary %d does not match a contiguous event seq in session %s", b, jsQuote(id))}
	}
	for i := b; i >= 0; i-- {
		switch events[i].Type {
		case "turn/end":
			return int(b + 1), nil
		case "turn/start":
			return 0, openTurn(id, b, events[i].Seq, func() (*jsvalue.Value, error) { return dataOf(i) })
		}
	}
	return int(b + 1), nil
}

// checkBoundary resolves a fork boundary (nil = last, the seq of the log's last event, -1 when it
// has none) against a log of n events and refuses the ones _forkSeed refuses without reading an
// event: not a safe integer, or past the end. It returns -1 for a nil boundary on an empty log.
func checkBoundary(id string, boundary *int64, last, n int64) (int64, *ForkError) {
	if boundary == nil {
		return last, nil
	}
	b := *boundary
	q := jsQuote(id)
	if b < 0 || b > jsvalue.MaxSafeInteger {
		return 0, &ForkError{Code: CodeInvalidBoundary,
			Msg: "fork boundary for session " + q + " must be a non-negative safe integer, got " + jsvalue.NumberString(float64(b))}
	}
	if b >= n {
		lastText := "none"
		if n > 0 {
			lastText = jsvalue.NumberString(float64(last))
		}
		return 0, &ForkError{Code: CodeInvalidBoundary,
			Msg: fmt.Sprintf("fork boundary %d does not exist in session %s (last seq: %s)", b, q, lastText)}
	}
	return b, nil
}

// openTurn is the OPEN_TURN refusal of boundary b, whose last turn event at or before it is the
// turn/start at seq startSeq; data returns that event's parsed data.
func openTurn(id string, b, startSeq int64, data func() (*jsvalue.Value, error)) *ForkError {
	d, err := data()
	if err != nil {
		return &ForkError{Msg: fmt.Sprintf("turn/start at seq %d has data that is not JSON: %v", startSeq, err)}
	}
	turn, terr := jsvalue.Get(d, "turn")
	if terr != nil {
		return &ForkError{Msg: terr.Error()}
	}
	return &ForkError{Code: CodeOpenTurn,
		Msg: fmt.Sprintf("fork boundary %d in session %s ends inside open turn %s", b, jsQuote(id), jsvalue.ToString(turn))}
}

// ForkChild returns the child's full event list: seed plus a session/end-seed marker (data {},
// time nowMs) at seq len(seed), or no marker when the seed already ends with one. It validates the
// seed as the reference's Session.create does, refusing with its exact, code-less texts (Code ""):
//   - `seed event at index <i> is not losslessly JSON-serializable`
//   - `seed event at index <i> uses unsupported legacy request/header-delta format`
//   - `seed event at index <i> has an invalid event envelope` (time not a safe integer, ...)
//   - `seed request/header at index <i> lacks provider/model` (and the other request/header checks)
//   - `seed <type> at index <i> lacks an identified message` (and the other message-shape checks)
//   - `seed event at index <i> uses unsupported legacy request/header reason "fallback"`
//   - `seed event at index <i> has seq <s> (expected <i>); seed must be contiguous from 0`
//   - `invalid seed event at index <i>: <surface rule text>`
func ForkChild(seed []Event, nowMs int64) ([]Event, *ForkError) {
	v := NewSeedValidator(func(seq int64) (Event, error) { return seed[seq], nil })
	for i := range seed {
		if ferr := v.Add(&seed[i]); ferr != nil {
			return nil, ferr
		}
	}
	child := make([]Event, len(seed), len(seed)+1)
	copy(child, seed)
	if end, ok := v.EndSeed(nowMs); ok {
		child = append(child, end)
	}
	return child, nil
}

// parseSeedEvent parses an event's JSON parts; ok is false when one is not valid JSON (the
// reference's snapshot of such an event fails).
func parseSeedEvent(ev *Event) (parsedEvent, bool) {
	var p parsedEvent
	var err error
	if len(ev.Data) > 0 {
		parse := jsvalue.Parse
		if !dataIsRead(ev.Type) {
			parse = jsvalue.Scan // no check reads this type's fields: syntax and losslessness only
		}
		if p.data, err = parse(ev.Data); err != nil {
			return p, false
		}
	}
	if ev.SurfaceOp != nil {
		if p.op, err = jsvalue.Parse(ev.SurfaceOp); err != nil {
			return p, false
		}
	}
	if ev.SourceEventSeqs != nil {
		if p.srcs, err = jsvalue.Parse(ev.SourceEventSeqs); err != nil {
			return p, false
		}
	}
	return p, true
}

// seedEventProblem runs, for one seed event at index, the reference constructor's checks before
// the surface: snapshotJsonValue, assertSessionEventEnvelope (with assertCurrentLlmShape),
// assertSupportedRequestHeader and the contiguity check. "" when the event passes.
func seedEventProblem(ev *Event, p *parsedEvent, index int) string {
	at := "seed event at index " + strconv.Itoa(index)
	tf, tok := timeValue(ev.Time)
	if (p.data != nil && p.data.Lossy()) || (p.op != nil && p.op.Lossy()) || (p.srcs != nil && p.srcs.Lossy()) ||
		(tok && !jsvalue.IsLossless(tf)) || p.typeKind == typeUndefined {
		return at + " is not losslessly JSON-serializable"
	}
	if ev.Type == "request/header-delta" {
		return at + " uses unsupported legacy request/header-delta format"
	}
	if p.typeKind != typeString || ev.Seq < 0 || ev.Seq > jsvalue.MaxSafeInteger || !tok || !jsvalue.IsSafeInteger(tf) || p.data == nil {
		return at + " has an invalid event envelope"
	}
	switch ev.Type {
	case "request/header", "user/message", "assistant/message", "tool/result":
		if msg := currentLLMShape(ev.Type, p.data, index); msg != "" {
			return msg
		}
	}
	if msg := legacyRequestHeader(ev.Type, p.data, at); msg != "" {
		return msg
	}
	if ev.Seq != int64(index) {
		return fmt.Sprintf("%s has seq %s (expected %d); seed must be contiguous from 0", at, jsvalue.NumberString(float64(ev.Seq)), index)
	}
	return ""
}

// currentLLMShape is the reference's assertCurrentLlmShape.
func currentLLMShape(typ string, data *jsvalue.Value, index int) string {
	idx := strconv.Itoa(index)
	if typ == "request/header" {
		var header *jsvalue.Value
		if jsvalue.IsObjectLike(data) {
			header, _ = jsvalue.Get(data, "header")
		}
		var headerRecord, config *jsvalue.Value
		if jsvalue.IsPlainObject(header) {
			headerRecord = header
			config = header.Field("config")
		}
		if !hasProviderModel(config) {
			return "seed request/header at index " + idx + " lacks provider/model"
		}
		if re, _ := jsvalue.Get(config, "reasoningEffort"); re != nil && !jsvalue.IsNonEmptyString(re) {
			return "seed request/header at index " + idx + " has an invalid reasoningEffort"
		}
		if !adapterDefaultsValid(headerRecord.Field("adapterDefaults"), config) {
			return "seed request/header at index " + idx + " has invalid adapterDefaults"
		}
	}
	if typ != "user/message" && typ != "assistant/message" && typ != "tool/result" {
		return ""
	}
	return messageEventShape(typ, data, "seed "+typ+" at index "+idx)
}

// hasProviderModel: an object with non-empty string provider and model.
func hasProviderModel(v *jsvalue.Value) bool {
	if !jsvalue.IsObjectLike(v) {
		return false
	}
	p, _ := jsvalue.Get(v, "provider")
	m, _ := jsvalue.Get(v, "model")
	return jsvalue.IsNonEmptyString(p) && jsvalue.IsNonEmptyString(m)
}

// adapterDefaultsValid is the reference's assertAdapterDefaults.
func adapterDefaultsValid(v, config *jsvalue.Value) bool {
	if v == nil {
		return true
	}
	if !jsvalue.IsPlainObject(v) {
		return false
	}
	for i, k := range v.Keys() {
		if k != "reasoningEffort" && k != "maxTokens" {
			return false
		}
		if x := v.Values()[i]; x.Kind() != jsvalue.Bool || !x.Bool() {
			return false
		}
	}
	re, _ := jsvalue.Get(config, "reasoningEffort")
	mt, _ := jsvalue.Get(config, "maxTokens")
	if v.Field("reasoningEffort") != nil && re == nil {
		return false
	}
	if v.Field("maxTokens") != nil && mt == nil {
		return false
	}
	return true
}

// messageEventShape is the reference's assertMessageEventShape; subject prefixes the text.
func messageEventShape(typ string, data *jsvalue.Value, subject string) string {
	var record *jsvalue.Value
	if jsvalue.IsObjectLike(data) {
		record = data
	}
	message := record
	if typ != "user/message" {
		message = nil
		if record != nil {
			message, _ = jsvalue.Get(record, "message")
		}
	}
	if !jsvalue.IsObjectLike(message) {
		return subject + " lacks an identified message"
	}
	if id, _ := jsvalue.Get(message, "id"); !jsvalue.IsNonEmptyString(id) {
		return subject + " lacks an identified message"
	}
	expectedRole := "user"
	if typ == "assistant/message" {
		expectedRole = "assistant"
	}
	if role, _ := jsvalue.Get(message, "role"); !jsvalue.IsString(role, expectedRole) {
		return subject + ` message must have role "` + expectedRole + `"`
	}
	source, _ := jsvalue.Get(message, "source")
	kind, _ := jsvalue.Get(source, "kind")
	if !jsvalue.IsObjectLike(source) || !jsvalue.IsNonEmptyString(kind) {
		return subject + " message has invalid source"
	}
	content, _ := jsvalue.Get(message, "content")
	if content == nil || content.Kind() != jsvalue.Array {
		return subject + " message has invalid content"
	}
	if typ == "assistant/message" {
		if !jsvalue.IsString(kind, "model") || !hasProviderModel(source) {
			return subject + " message must have model source"
		}
		return ""
	}
	if typ != "tool/result" {
		return ""
	}
	callID, _ := jsvalue.Get(source, "callId")
	if !jsvalue.IsString(kind, "tool") || !jsvalue.IsNonEmptyString(callID) {
		return subject + " message must have tool source"
	}
	if len(content.Elems()) != 1 {
		return subject + " message must contain one tool-result block"
	}
	block := content.Elems()[0]
	if !jsvalue.IsObjectLike(block) {
		return subject + " message must contain one tool-result block"
	}
	bt, _ := jsvalue.Get(block, "type")
	bc, _ := jsvalue.Get(block, "content")
	if !jsvalue.IsString(bt, "tool-result") || bc == nil || bc.Kind() != jsvalue.Array {
		return subject + " message must contain one tool-result block"
	}
	if tc, _ := jsvalue.Get(block, "toolCallId"); !jsvalue.StrictEqual(tc, callID) {
		return subject + " message has mismatched tool call ids"
	}
	return ""
}
