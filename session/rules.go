package session

// Rule names the rule an event, a line or a record broke: a short stable identifier, carried by
// *Error and stored in projection errors. Callers may switch on it or match it with errors.Is.
type Rule string

// Rules of the session log (the reference's refusals, and agentlog's event-shape).
const (
	// RuleJSON: a line (or Event.Data, SurfaceOp, SourceEventSeqs) is not one valid JSON value,
	// or is nested deeper than 10000 levels.
	RuleJSON Rule = "json"
	// RuleLineLength: a JSONL line is longer than MaxLineBytes.
	RuleLineLength Rule = "line-length"
	// RuleChunkRow: a packed chunk row is malformed (the reference's "malformed <tag> storage row").
	RuleChunkRow Rule = "chunk-row"
	// RuleRecord: a line is not a JSON object, so it cannot be an event.
	RuleRecord Rule = "record"
	// RuleEnvelope: type is not a string, or seq is not a non-negative safe integer.
	RuleEnvelope Rule = "envelope"
	// RuleSeqContiguous: seq is not the next seq of the session.
	RuleSeqContiguous Rule = "seq-contiguous"
	// RuleData: the event has no data.
	RuleData Rule = "data"
	// RuleLosslessJSON: data, surfaceOp or sourceEventSeqs hold a number JSON cannot carry
	// losslessly (negative zero, or a literal that overflows to Infinity).
	RuleLosslessJSON Rule = "lossless-json"
	// RuleLegacyRequestHeader: request/header-delta, or request/header with reason "fallback".
	RuleLegacyRequestHeader Rule = "legacy-request-header"
	// RuleSurfaceOp: surfaceOp missing on a surface type, present on another type, or malformed;
	// or sourceEventSeqs on a non-surface type.
	RuleSurfaceOp Rule = "surface-op"
	// RuleSourceEventSeqs: sourceEventSeqs not an array, empty (outside assistant/message), not
	// non-negative safe integers, repeated, or not earlier than the event.
	RuleSourceEventSeqs Rule = "source-event-seqs"
	// RuleReplaceStart: a replace's start is not a current node.
	RuleReplaceStart Rule = "replace-start"
	// RuleReplaceEnd: a replace's end is not a current node.
	RuleReplaceEnd Rule = "replace-end"
	// RuleReplaceOrder: a replace's start comes after its end in surface order.
	RuleReplaceOrder Rule = "replace-order"
	// RuleReplaceCoverage: a replace's sourceEventSeqs miss a shadowed node.
	RuleReplaceCoverage Rule = "replace-coverage"
	// RuleToolResultReplace: a tool/result replace shadows more than one node, targets a node that
	// is not a tool/result, or changes more than the inner result content.
	RuleToolResultReplace Rule = "tool-result-replace"
	// RuleEventShape: the event's data cannot be derived or crash-repaired (the reference accepts
	// it at append and fails later), or a turn/start has no integer turn. See DEPARTURES.md.
	RuleEventShape Rule = "event-shape"
	// RuleLookup: the Lookup for a tool/result replace target failed.
	RuleLookup Rule = "lookup"
)

// Rules of the publisher's envelope check (an event that would not encode as a line).
const (
	RuleEnvelopeType            Rule = "envelope-type"            // the type is empty
	RuleEnvelopeTime            Rule = "envelope-time"            // the time is not a JSON number
	RuleEnvelopeData            Rule = "envelope-data"            // the data is absent
	RuleEnvelopeSurfaceOp       Rule = "envelope-surfaceOp"       // surfaceOp is not valid JSON
	RuleEnvelopeSourceEventSeqs Rule = "envelope-sourceEventSeqs" // sourceEventSeqs is not valid JSON
)

// Rules of the record codec (package wire): one JetStream message holds 1..K events.
const (
	RuleRecordEmpty    Rule = "record-empty"    // a record must carry at least one event
	RuleRecordSeq      Rule = "record-seq"      // events of a record have consecutive seqs from Agentlog-First-Seq
	RuleRecordCount    Rule = "record-count"    // the body has exactly Agentlog-Count lines
	RuleRecordEvent    Rule = "record-event"    // each line is one JSON event object with type, seq, time and data
	RuleRecordHeader   Rule = "record-header"   // the Agentlog-* headers are present, single and well-formed
	RuleRecordFormat   Rule = "record-format"   // Agentlog-Format is the record format version
	RuleRecordSession  Rule = "record-session"  // Agentlog-Session is the token of the session the record is stored under
	RuleRecordContinue Rule = "record-continue" // a record's first seq continues the previous record (0 for the first)
	RuleRecordBlob     Rule = "record-blob"     // an offloaded event's blob is present (AGENTLOG_BLOBS, or legacy agentlog_blobs) with the chunk count, size and SHA-256 its record names
	RuleEventTooLarge  Rule = "event-too-large" // an event's encoded line is at most the writer's max event bytes
)

// Rules of a session id (jetstream.Token): what every id given to the store must be.
const (
	RuleIDEmpty   Rule = "id-empty"    // at least one byte
	RuleIDTooLong Rule = "id-too-long" // at most 256 bytes of UTF-8
	RuleIDUTF8    Rule = "id-utf8"     // valid UTF-8 (no lone surrogate escape in a JSON request either)
)

// Rules of an import (agentlog import).
const (
	// RuleEmptyLog: an imported log holds no events. A session with metadata only is created
	// through the API (publisher.Create), as the reference's create is.
	RuleEmptyLog Rule = "empty-log"
)

// Rules of a stopped projection (package projector), besides the rules above.
const (
	RuleStateTooLarge Rule = "state-too-large" // the state grew larger than one KV value can hold
	RuleRecordDecode  Rule = "record-decode"   // a record does not decode (no rule of its own)
	RuleLogRead       Rule = "log-read"        // the log cannot be read back
	RuleApply         Rule = "apply"           // Surface.Apply failed without a rule of its own
	RuleUnitApply     Rule = "unit-apply"      // a unit's Apply failed (or panicked)
	RuleUnitData      Rule = "unit-data"       // a built-in unit cannot read the event's data
	RuleUnitEncode    Rule = "unit-encode"     // a unit's state does not encode as JSON
)

// Code is a fork refusal code, as the reference names it ("" for a seed-validation error, which
// the reference raises without a code).
type Code string

// Fork refusal codes.
const (
	CodeOpenTurn             Code = "OPEN_TURN"
	CodeInvalidBoundary      Code = "INVALID_BOUNDARY"
	CodeSessionNotFound      Code = "SESSION_NOT_FOUND"
	CodeSessionAlreadyExists Code = "SESSION_ALREADY_EXISTS"
)
