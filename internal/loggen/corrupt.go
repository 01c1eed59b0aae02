package loggen

import "fmt"

// FaultKind names one way the corrupter breaks a log.
type FaultKind string

// The fault kinds. The first group is the reference's refusal rules and the input faults the
// issue lists; the second group ("extra") probes other corners of the reference's reader.
const (
	// surface rules (ARCHITECTURE.md, "Surface rules")
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

// kindFuncs maps each fault kind to its corrupter: it edits c and reports whether the kind applies.
var kindFuncs = map[FaultKind]func(*ctx) bool{
	SurfaceOpMissing:        (*ctx).surfaceOpMissing,
	SurfaceOpOnNonSurface:   (*ctx).surfaceOpOnNonSurface,
	SourcesOnNonSurface:     (*ctx).sourcesOnNonSurface,
	SurfaceOpInvalid:        (*ctx).surfaceOpInvalid,
	ReplaceStartNotNode:     (*ctx).replaceStartNotNode,
	ReplaceEndNotNode:       (*ctx).replaceEndNotNode,
	ReplaceStartAfterEnd:    (*ctx).replaceStartAfterEnd,
	SourcesNotArray:         (*ctx).sourcesNotArray,
	SourcesEmpty:            (*ctx).sourcesEmpty,
	SourcesDuplicate:        (*ctx).sourcesDuplicate,
	SourcesNotEarlier:       (*ctx).sourcesNotEarlier,
	ReplaceMissingShadowed:  (*ctx).replaceMissingShadowed,
	ToolResultReplaceMulti:  (*ctx).toolResultReplaceMulti,
	ToolResultReplaceTarget: (*ctx).toolResultReplaceTarget,
	ToolResultReplaceMore:   (*ctx).toolResultReplaceMore,
	SeqGap:                  (*ctx).seqGap,
	SeqRepeat:               (*ctx).seqRepeat,
	NonJSON:                 (*ctx).nonJSON,
	DuplicateKey:            (*ctx).duplicateKey,
	NumberTooLarge:          (*ctx).numberTooLarge,
	NegativeZero:            (*ctx).negativeZero,
	InvalidUTF8:             (*ctx).invalidUTF8,
	BlankLines:              (*ctx).blankLines,
	TruncatedLastLine:       (*ctx).truncatedLastLine,
	LegacyHeader:            (*ctx).legacyHeader,

	MalformedChunkRow: (*ctx).malformedChunkRow,
	NonObjectLine:     (*ctx).nonObjectLine,
	MisplacedHeader:   (*ctx).misplacedHeader,
	NumberSpelling:    (*ctx).numberSpelling,
	TimeOdd:           (*ctx).timeOdd,
	MessageShape:      (*ctx).messageShape,
	LegacyShape:       (*ctx).legacyShape,
	EnvelopeOdd:       (*ctx).envelopeOdd,
	TurnOdd:           (*ctx).turnOdd,
	CoreDataOdd:       (*ctx).coreDataOdd,
	PruneQuirk:        (*ctx).pruneQuirk,
	RowQuirk:          (*ctx).rowQuirk,
	HeaderShape:       (*ctx).headerShape,
	DeepNesting:       (*ctx).deepNesting,
	BOM:               (*ctx).bom,
}
