package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/agentlog/agentlog/internal/jsvalue"
)

// MarshalJSON writes the event as one compact JSON object with the fields in the reference's
// order: type, seq, time, data, then sourceEventSeqs, surfaceOp and ignorable when present (the
// order the reference's Session.append builds, so logs it wrote re-encode byte for byte)
// (SurfaceOp/SourceEventSeqs nil = absent; Ignorable false = absent). Data, SurfaceOp and
// SourceEventSeqs are written byte for byte when they are already compact (insignificant
// whitespace is removed otherwise) and strings are not HTML-escaped.
//
// It fails when Time is not one JSON number literal or when Data is absent or not valid JSON.
// Note: json.Marshal(ev) HTML-escapes '<', '>' and '&' after calling this; use ev.MarshalJSON()
// or a json.Encoder with SetEscapeHTML(false) to keep the bytes.
func (ev Event) MarshalJSON() ([]byte, error) {
	return appendEventJSON(nil, &ev, false)
}

// encodeMode selects how appendEventJSONMode treats the raw fields.
type encodeMode int

const (
	modeStrict  encodeMode = iota // validate and compact every raw field
	modeTrusted                   // raw fields are known valid: copy compact ones as they are
	modeRepair                    // a repair closer built by us: time may be "null", data is ours
)

// appendEventJSON appends ev's JSON; lenientTime lets a repair closer carry "null" as the
// reference's JSON.stringify(Infinity) does.
func appendEventJSON(dst []byte, ev *Event, lenientTime bool) ([]byte, error) {
	if lenientTime {
		return appendEventJSONMode(dst, ev, modeRepair)
	}
	return appendEventJSONMode(dst, ev, modeStrict)
}

func appendEventJSONMode(dst []byte, ev *Event, mode encodeMode) ([]byte, error) {
	lenientTime := mode == modeRepair
	compact := appendCompact
	if mode == modeTrusted {
		compact = appendTrusted
	}
	t := string(ev.Time)
	if !jsvalue.ValidNumber(t) && !(lenientTime && t == "null") {
		return nil, fmt.Errorf("session event seq %d: time %q is not a JSON number", ev.Seq, t)
	}
	if len(ev.Data) == 0 {
		return nil, fmt.Errorf("session event seq %d: data is absent", ev.Seq)
	}
	dst = append(dst, `{"type":`...)
	dst = jsvalue.AppendQuote(dst, ev.Type)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendInt(dst, ev.Seq, 10)
	dst = append(dst, `,"time":`...)
	dst = append(dst, t...)
	dst = append(dst, `,"data":`...)
	var err error
	if lenientTime {
		dst = append(dst, ev.Data...) // a repair closer: built compact by us, possibly deep
	} else if dst, err = compact(dst, ev.Data); err != nil {
		return nil, fmt.Errorf("session event seq %d: data: %w", ev.Seq, err)
	}
	if ev.SourceEventSeqs != nil {
		dst = append(dst, `,"sourceEventSeqs":`...)
		if dst, err = compact(dst, ev.SourceEventSeqs); err != nil {
			return nil, fmt.Errorf("session event seq %d: sourceEventSeqs: %w", ev.Seq, err)
		}
	}
	if ev.SurfaceOp != nil {
		dst = append(dst, `,"surfaceOp":`...)
		if dst, err = compact(dst, ev.SurfaceOp); err != nil {
			return nil, fmt.Errorf("session event seq %d: surfaceOp: %w", ev.Seq, err)
		}
	}
	if ev.Ignorable {
		dst = append(dst, `,"ignorable":true`...)
	}
	return append(dst, '}'), nil
}

// appendCompact appends raw without insignificant whitespace, failing when raw is not valid JSON.
// Raw that is already compact (the usual case: it was read from a compact line) is validated and
// copied as is.
func appendCompact(dst, raw []byte) ([]byte, error) {
	if isCompact(raw) {
		if !json.Valid(raw) {
			return nil, errors.New("invalid JSON")
		}
		return append(dst, raw...), nil
	}
	buf := bytes.NewBuffer(dst)
	if err := json.Compact(buf, raw); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// appendTrusted appends raw, which the caller knows to be valid JSON, without insignificant
// whitespace; compact input is copied without being scanned again.
func appendTrusted(dst, raw []byte) ([]byte, error) {
	if isCompact(raw) {
		return append(dst, raw...), nil
	}
	return appendCompact(dst, raw)
}

// isCompact reports whether raw has no whitespace outside its strings (it does not validate).
func isCompact(raw []byte) bool {
	inString, escaped := false, false
	for _, c := range raw {
		switch {
		case escaped:
			escaped = false
		case inString:
			if c == '\\' {
				escaped = true
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			return false
		}
	}
	return true
}

// AppendJSON appends the event's JSON line (the bytes MarshalJSON gives) to dst, for events already
// validated — accepted by Surface.Apply or Session.Append, or read by ReadJSONL: Data, SurfaceOp and
// SourceEventSeqs are trusted to be valid JSON and are copied without being scanned again when they
// are already compact. It still fails when Time is not a number or Data is absent. This is the
// record encoder's hot path; use MarshalJSON for events from elsewhere.
func (ev *Event) AppendJSON(dst []byte) ([]byte, error) {
	return appendEventJSONMode(dst, ev, modeTrusted)
}

// UnmarshalJSON reads one event object with the same rules as ReadJSONL: the last of repeated
// keys wins, unknown keys are dropped, ignorable is kept only when it is true, a time that is not a
// JSON number is left empty (Session.Append then stamps the current time). It fails when the
// value is not an object, type is not a string, seq is not a non-negative safe integer, or data
// is absent. A packed chunk row is refused (use ReadJSONL to expand rows).
func (ev *Event) UnmarshalJSON(b []byte) error {
	buf := append([]byte(nil), b...)
	v, err := jsvalue.Parse(buf)
	if err != nil {
		return err
	}
	if jsvalue.IsObjectLike(v) {
		if t := v.Field("type"); t != nil && t.Kind() == jsvalue.String && isChunkRowTag(t.Str()) {
			return errors.New("session: a packed " + t.Str() + " row holds several events; read it with ReadJSONL")
		}
	}
	out, _, rerr := decodeEvent(v, "session", false)
	if rerr != nil {
		return rerr
	}
	*ev = out
	return nil
}

// parsedEvent holds an event's parsed JSON parts; nil means absent (undefined).
type parsedEvent struct {
	data *jsvalue.Value
	op   *jsvalue.Value
	srcs *jsvalue.Value
	// typeKind is typeString, or (Inspect only) typeUndefined / typeOther for an event whose
	// type is not a string; Event.Type is then "".
	typeKind int8
}

const (
	typeString int8 = iota
	typeUndefined
	typeOther
)

// decodeEvent turns one parsed JSONL value into an Event, as the oracle reads it: ev.type,
// ev.seq, ev.time (a number, or empty), ev.data, ev.surfaceOp and ev.sourceEventSeqs when not
// undefined, ignorable when true; everything else is dropped. anyType (Inspect) accepts a type
// that is not a string, as the reference's append does: Event.Type is then "" and p.typeKind says
// what it was.
func decodeEvent(v *jsvalue.Value, session string, anyType bool) (Event, parsedEvent, *Error) {
	var ev Event
	var p parsedEvent
	if v == nil || v.Kind() != jsvalue.Object {
		what := "a JSON array"
		switch {
		case v == nil || v.Kind() == jsvalue.Null:
			what = "null"
		case v.Kind() == jsvalue.String:
			what = "a JSON string"
		case v.Kind() == jsvalue.Number:
			what = "a JSON number"
		case v.Kind() == jsvalue.Bool:
			what = "a JSON boolean"
		}
		return ev, p, newError(session, -1, 0, RuleRecord, "line is "+what+", not an event object")
	}
	seq := int64(-1)
	sv := v.Field("seq")
	if sv != nil && sv.Kind() == jsvalue.Number && jsvalue.IsSafeInteger(sv.Num()) && sv.Num() >= 0 {
		seq = int64(sv.Num())
	}
	tv := v.Field("type")
	switch {
	case tv != nil && tv.Kind() == jsvalue.String:
		ev.Type = tv.Str()
	case anyType && tv == nil:
		p.typeKind = typeUndefined
	case anyType:
		p.typeKind = typeOther
	default:
		return ev, p, newError(session, seq, 0, RuleEnvelope, "event type must be a string, got "+describe(tv))
	}
	if seq < 0 {
		return ev, p, newError(session, -1, 0, RuleEnvelope,
			fmt.Sprintf("event of type %s: seq must be a non-negative safe integer, got %s", describe(tv), describe(sv)))
	}
	ev.Seq = seq
	if t := v.Field("time"); t != nil && t.Kind() == jsvalue.Number {
		ev.Time = json.Number(t.Raw())
	}
	p.data = v.Field("data")
	if p.data == nil {
		return ev, p, newError(session, seq, 0, RuleData, fmt.Sprintf("session event %q has no data", ev.Type))
	}
	ev.Data = json.RawMessage(p.data.Raw())
	if p.op = v.Field("surfaceOp"); p.op != nil {
		ev.SurfaceOp = json.RawMessage(p.op.Raw())
	}
	if p.srcs = v.Field("sourceEventSeqs"); p.srcs != nil {
		ev.SourceEventSeqs = json.RawMessage(p.srcs.Raw())
	}
	if ig := v.Field("ignorable"); ig != nil && ig.Kind() == jsvalue.Bool && ig.Bool() {
		ev.Ignorable = true
	}
	return ev, p, nil
}

// describe renders a value briefly for an error message.
func describe(v *jsvalue.Value) string {
	if v == nil {
		return "nothing"
	}
	s := jsvalue.Stringify(v)
	if len(s) > 60 {
		return string(s[:57]) + "..."
	}
	return string(s)
}

// parseEvent parses the JSON parts of a programmatic Event. The returned *Error has no line.
func parseEvent(session string, ev *Event) (parsedEvent, *Error) {
	var p parsedEvent
	if len(ev.Data) == 0 {
		return p, newError(session, ev.Seq, 0, RuleData, fmt.Sprintf("session event %q has no data", ev.Type))
	}
	var err error
	parse := jsvalue.Parse
	if !dataIsRead(ev.Type) {
		parse = jsvalue.Scan // nothing reads this type's fields: validate without building
	}
	if p.data, err = parse(ev.Data); err != nil {
		return p, newError(session, ev.Seq, 0, RuleJSON, fmt.Sprintf("session event %q data: %v", ev.Type, err))
	}
	if ev.SurfaceOp != nil {
		if p.op, err = jsvalue.Parse(ev.SurfaceOp); err != nil {
			return p, newError(session, ev.Seq, 0, RuleJSON, fmt.Sprintf("session event %q surfaceOp: %v", ev.Type, err))
		}
	}
	if ev.SourceEventSeqs != nil {
		if p.srcs, err = jsvalue.Parse(ev.SourceEventSeqs); err != nil {
			return p, newError(session, ev.Seq, 0, RuleJSON, fmt.Sprintf("session event %q sourceEventSeqs: %v", ev.Type, err))
		}
	}
	return p, nil
}

// nowMillis is the current Unix time in milliseconds (the reference's Date.now()).
func nowMillis() int64 { return time.Now().UnixMilli() }

// EndSeed returns a session/end-seed event at seq with time nowMs and data {}: the marker a fork
// or a resume appends where the lifecycle's own writes begin.
func EndSeed(seq int64, nowMs int64) Event {
	return Event{
		Type: "session/end-seed",
		Seq:  seq,
		Time: json.Number(strconv.FormatInt(nowMs, 10)),
		Data: json.RawMessage(`{}`),
	}
}

// timeValue parses Time as the JavaScript number the reference holds: ok false when Time is not
// a JSON number literal.
func timeValue(t json.Number) (float64, bool) {
	s := string(t)
	if !jsvalue.ValidNumber(s) {
		return 0, false
	}
	return jsvalue.ParseNumber([]byte(s)), true
}

// dataIsRead reports whether validation, derivation, repair or the surface fold read fields of
// this event type's data (the others only need a syntax and losslessness check).
func dataIsRead(typ string) bool {
	switch typ {
	case "user/message", "assistant/message", "tool/result", "turn/start", "step/start", "tool/call", "request/header":
		return true
	}
	return false
}

// DecodeEventLine decodes one event line of a stored record as Event.UnmarshalJSON does (same
// result, same refusals), building only the top level: data, surfaceOp and sourceEventSeqs are
// checked as JSON and kept as raw bytes aliasing line. Errors are *Error naming session. Lines of
// the common shape take a one-pass fast path (FuzzDecodeEventLineFastPath checks they agree).
func DecodeEventLine(line []byte, session string) (Event, error) {
	if ev, ok := decodeEventLineFast(line); ok {
		return ev, nil
	}
	return decodeEventLineGeneral(line, session)
}

// decodeEventLineGeneral is DecodeEventLine for any input: it parses the line with
// jsvalue.ParseShallow and reads the envelope with decodeEvent.
func decodeEventLineGeneral(line []byte, session string) (Event, error) {
	ev, _, err := decodeEventLineParsed(line, session)
	return ev, err
}

// decodeEventLineParsed is decodeEventLineGeneral that also returns the parsed parts (data,
// surfaceOp and sourceEventSeqs are placeholders: validated, with their lossiness, not built).
func decodeEventLineParsed(line []byte, session string) (Event, parsedEvent, error) {
	v, err := jsvalue.ParseShallow(line, "type", "seq", "time", "ignorable")
	if err != nil {
		return Event{}, parsedEvent{}, newError(session, -1, 0, RuleJSON, err.Error())
	}
	if v.Kind() == jsvalue.Object {
		if t := v.Field("type"); t != nil && t.Kind() == jsvalue.String && isChunkRowTag(t.Str()) {
			return Event{}, parsedEvent{}, newError(session, -1, 0, RuleRecord, "a packed "+t.Str()+" row holds several events; read it with ReadJSONL")
		}
	}
	ev, p, derr := decodeEvent(v, session, false)
	if derr != nil {
		return Event{}, parsedEvent{}, derr
	}
	return ev, p, nil
}
