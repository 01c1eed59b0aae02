package session

// This file fixes the exported shapes that the other packages build on. Bodies live in the other
// files of the package.

import (
	"encoding/json"
)

// Event is one session-log record: {type, seq, time, data, surfaceOp?, sourceEventSeqs?, ignorable?}.
//
// Data, SurfaceOp and SourceEventSeqs are kept as raw JSON so that their bytes round-trip unchanged.
// Time is Unix epoch milliseconds, kept as the JSON number literal it was read as.
// MarshalJSON writes the fields in the order above and omits absent optional fields.
type Event struct {
	Type            string          `json:"type"`
	Seq             int64           `json:"seq"`
	Time            json.Number     `json:"time"`
	Data            json.RawMessage `json:"data"`
	SurfaceOp       json.RawMessage `json:"surfaceOp,omitempty"`
	SourceEventSeqs json.RawMessage `json:"sourceEventSeqs,omitempty"`
	Ignorable       bool            `json:"ignorable,omitempty"`
}

// Header is the session metadata line of a dsh JSONL file ({"type":"session","version":0,...}) and
// the value stored in the agentlog_sessions KV bucket (without the "type" field there).
// Raw keeps the line as read, so unknown fields survive a round trip.
type Header struct {
	Version         int             `json:"version"`
	ID              string          `json:"id"`
	CreatedAt       int64           `json:"createdAt"`
	Cwd             string          `json:"cwd,omitempty"`
	ParentSession   string          `json:"parentSession,omitempty"`
	SeedLength      *int64          `json:"seedLength,omitempty"`
	Origin          string          `json:"origin,omitempty"`
	DelegationDepth *int64          `json:"delegationDepth,omitempty"`
	AgentPreset     string          `json:"agentPreset,omitempty"`
	Raw             json.RawMessage `json:"-"`
}

// Error is a refusal of one event, line or record: the session, the seq (-1 when there is none),
// the 1-based JSONL line (0 when not read from a file), the rule broken and the reason (the
// reference's own text where it has one). Match it with errors.As, or by rule with errors.Is.
type Error struct {
	Session string
	Seq     int64
	Line    int
	Rule    Rule
	Reason  string
}

// ForkError is a fork refusal: the reference's code (see Code) and its exact message text.
// errors.Is matches it by code.
type ForkError struct {
	Code Code
	Msg  string
}

// Surface is the persisted, JSON-serializable fold state of one session: what a projector stores
// per session. AsOfSeq is the last applied seq (-1 before any event). Transcript lists the seqs of
// append-origin surface events. OpenTurn is the turn number left open, or nil.
type Surface struct {
	Nodes             []int64 `json:"nodes"`
	ReplaceGeneration int64   `json:"replaceGeneration"`
	AsOfSeq           int64   `json:"asOfSeq"`
	Transcript        []int64 `json:"transcript"`
	OpenTurn          *int64  `json:"openTurn"`
}

// Lookup returns an earlier event of the same session by seq. Surface.Apply calls it only for the
// target of a tool/result replace.
type Lookup func(seq int64) (Event, error)

// InspectResult is the oracle's output object (oracle.mjs), field for field. Its MarshalJSON
// writes exactly the fields the oracle writes, in the oracle's order: ok, then the fields computed
// before a failure (events, nodes, replaceGeneration, messages, transcript, openTurn, repair), then
// error and acceptedEvents on a refusal, or forks; empty lists print as [] and an absent open turn
// as null.
type InspectResult struct {
	OK                bool              `json:"ok"`
	Error             string            `json:"error,omitempty"`
	AcceptedEvents    *int              `json:"acceptedEvents,omitempty"`
	Events            *int              `json:"events,omitempty"`
	Nodes             []int64           `json:"nodes,omitempty"`
	ReplaceGeneration *int64            `json:"replaceGeneration,omitempty"`
	Messages          []json.RawMessage `json:"messages,omitempty"`
	Transcript        []int64           `json:"transcript,omitempty"`
	OpenTurn          *int64            `json:"openTurn,omitempty"`
	Repair            []Event           `json:"repair,omitempty"`
	Forks             []ForkOutcome     `json:"forks,omitempty"`

	// stage counts the oracle's output fields that were assigned (events .. repair) before the
	// log was refused; openTurnJSON is the openTurn to print when it is not an integer (nil and
	// openTurnUndefined false: print OpenTurn, or null).
	stage             int
	openTurnJSON      []byte
	openTurnUndefined bool
}

// ForkOutcome is one entry of InspectResult.Forks. Boundary is nil for the omitted boundary.
type ForkOutcome struct {
	Boundary      *int64  `json:"boundary"`
	OK            bool    `json:"ok"`
	Code          Code    `json:"code,omitempty"`
	Error         string  `json:"error,omitempty"`
	SeedLength    *int    `json:"seedLength,omitempty"`
	ChildEvents   *int    `json:"childEvents,omitempty"`
	ChildLast     *string `json:"childLast,omitempty"`
	ChildMessages *int    `json:"childMessages,omitempty"`
}
