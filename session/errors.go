package session

import (
	"fmt"
	"strconv"
)

// Rule identifiers carried by *Error.Rule. They are stable: callers may switch on them.
const (
	// RuleJSON: a line (or Event.Data, SurfaceOp, SourceEventSeqs) is not one valid JSON value,
	// or is nested deeper than 10000 levels.
	RuleJSON = "json"
	// RuleLineLength: a JSONL line is longer than MaxLineBytes.
	RuleLineLength = "line-length"
	// RuleChunkRow: a packed chunk row is malformed (the reference's "malformed <tag> storage row").
	RuleChunkRow = "chunk-row"
	// RuleRecord: a line is not a JSON object, so it cannot be an event.
	RuleRecord = "record"
	// RuleEnvelope: the event envelope is unusable: type is not a string, or seq is not a
	// non-negative safe integer.
	RuleEnvelope = "envelope"
	// RuleSeqContiguous: seq is not the next seq of the session.
	RuleSeqContiguous = "seq-contiguous"
	// RuleData: the event has no data.
	RuleData = "data"
	// RuleLosslessJSON: data, surfaceOp or sourceEventSeqs hold a number JSON cannot carry
	// losslessly (negative zero, or a literal that overflows to Infinity).
	RuleLosslessJSON = "lossless-json"
	// RuleLegacyRequestHeader: request/header-delta, or request/header with reason "fallback".
	RuleLegacyRequestHeader = "legacy-request-header"
	// RuleSurfaceOp: surfaceOp missing on a surface type, present on another type, or malformed;
	// or sourceEventSeqs on a non-surface type.
	RuleSurfaceOp = "surface-op"
	// RuleSourceEventSeqs: sourceEventSeqs not an array, empty (outside assistant/message), not
	// non-negative safe integers, repeated, or not earlier than the event.
	RuleSourceEventSeqs = "source-event-seqs"
	// RuleReplaceStart: a replace's start is not a current node.
	RuleReplaceStart = "replace-start"
	// RuleReplaceEnd: a replace's end is not a current node.
	RuleReplaceEnd = "replace-end"
	// RuleReplaceOrder: a replace's start comes after its end in surface order.
	RuleReplaceOrder = "replace-order"
	// RuleReplaceCoverage: a replace's sourceEventSeqs miss a shadowed node.
	RuleReplaceCoverage = "replace-coverage"
	// RuleToolResultReplace: a tool/result replace shadows more than one node, targets a node that
	// is not a tool/result, or changes more than the inner result content.
	RuleToolResultReplace = "tool-result-replace"
	// RuleEventShape: the event's data cannot be derived or crash-repaired (the reference accepts
	// such an event at append and then fails in deriveMessages or interruptedTurnClosers), or a
	// turn/start has no integer turn. See DEPARTURES.md.
	RuleEventShape = "event-shape"
	// RuleLookup: the Lookup for a tool/result replace target failed.
	RuleLookup = "lookup"
)

func (e *Error) Error() string     { return e.Msg }
func (e *ForkError) Error() string { return e.Msg }

// newError builds an *Error whose Msg names the session, the line (when known), the seq (when
// known) and the rule, followed by the reason (the reference's own text where it has one).
func newError(session string, seq int64, line int, rule, why string) *Error {
	where := "session " + strconv.Quote(session)
	if line > 0 {
		where += fmt.Sprintf(" line %d", line)
	}
	if seq >= 0 {
		where += fmt.Sprintf(" seq %d", seq)
	}
	return &Error{
		Session: session,
		Seq:     seq,
		Line:    line,
		Rule:    rule,
		Msg:     fmt.Sprintf("%s: %s [rule %s]", where, why, rule),
	}
}

// NewError builds an *Error whose Msg reads `session "<id>" [line L] [seq S]: <why> [rule <rule>]`
// (line and seq are left out when 0 and -1). Other packages use it so that every refusal a user
// sees names the session, the seq and the rule in one format.
func NewError(session string, seq int64, line int, rule, why string) *Error {
	return newError(session, seq, line, rule, why)
}

// ForSession returns a copy of e naming session instead (for a file imported under another id than
// its header's).
func (e *Error) ForSession(session string) *Error {
	if e == nil || e.Session == session {
		return e
	}
	return newError(session, e.Seq, e.Line, e.Rule, e.reason())
}

// withLine returns a copy of e naming the JSONL line.
func (e *Error) withLine(line int) *Error {
	if e == nil || line <= 0 {
		return e
	}
	return newError(e.Session, e.Seq, line, e.Rule, e.reason())
}

// reason recovers the reason part of Msg.
func (e *Error) reason() string {
	msg := e.Msg
	// Msg is "<where>: <why> [rule <rule>]"; strip both ends.
	suffix := " [rule " + e.Rule + "]"
	if len(msg) >= len(suffix) && msg[len(msg)-len(suffix):] == suffix {
		msg = msg[:len(msg)-len(suffix)]
	}
	where := "session " + strconv.Quote(e.Session)
	if e.Line > 0 {
		where += fmt.Sprintf(" line %d", e.Line)
	}
	if e.Seq >= 0 {
		where += fmt.Sprintf(" seq %d", e.Seq)
	}
	where += ": "
	if len(msg) >= len(where) && msg[:len(where)] == where {
		return msg[len(where):]
	}
	return msg
}

// jsQuote is the text `"${s}"` of a JavaScript template literal (no escaping at all).
func jsQuote(s string) string { return `"` + s + `"` }

// SessionNotFound is the reference's SESSION_NOT_FOUND fork refusal: `session "<id>" not found`.
func SessionNotFound(id string) *ForkError {
	return &ForkError{Code: CodeSessionNotFound, Msg: "session " + jsQuote(id) + " not found"}
}

// SessionAlreadyExists is the reference's SESSION_ALREADY_EXISTS fork refusal (checked before the
// source and the boundary): `session "<child>" already exists`.
func SessionAlreadyExists(child string) *ForkError {
	return &ForkError{Code: CodeSessionAlreadyExists, Msg: "session " + jsQuote(child) + " already exists"}
}
