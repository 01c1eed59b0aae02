package session

// STUBS: frozen signatures. The session owner replaces each body; signatures must not change
// (additions are fine).

import (
	"encoding/json"
	"errors"
	"io"
)

var errUnimplemented = errors.New("unimplemented")

func (e *Error) Error() string     { return e.Msg }
func (e *ForkError) Error() string { return e.Msg }

// ReadJSONL reads a dsh JSONL stream: an optional header line, then events and packed chunk rows,
// expanded to events. It does not validate session rules (use Session.Append for that), only that
// each line is one JSON value of a recognised shape; errors are *Error naming the line.
// sessionID names the session in errors when the file has no header.
func ReadJSONL(r io.Reader, sessionID string) (*Header, []Event, error) {
	return nil, nil, errUnimplemented
}

// WriteOptions controls WriteJSONL. Pack writes runs of 3+ streaming deltas as packed chunk rows.
type WriteOptions struct{ Pack bool }

// WriteJSONL writes the header (when non-nil) and the events as dsh JSONL, one line each.
func WriteJSONL(w io.Writer, h *Header, events []Event, opts WriteOptions) error {
	return errUnimplemented
}

// NewSurface returns the empty fold state (AsOfSeq -1).
func NewSurface() *Surface { return &Surface{AsOfSeq: -1, Nodes: []int64{}, Transcript: []int64{}} }

// Check validates ev as the next event (seq AsOfSeq+1) without changing s. sessionID names the
// session in the error. Errors are *Error.
func (s *Surface) Check(sessionID string, ev Event, lookup Lookup) error { return errUnimplemented }

// Apply validates ev as the next event and folds it in. On error s is unchanged.
func (s *Surface) Apply(sessionID string, ev Event, lookup Lookup) error { return errUnimplemented }

// Session is an in-memory session: its events, its Surface, and the deriveMessages cache.
type Session struct {
	id string
}

// New returns an empty session named id.
func New(id string) *Session { return &Session{id: id} }

// Load builds a session from events, validating each in order (the reference's append path).
// On a refusal it returns the session holding the accepted prefix and the *Error.
func Load(id string, events []Event) (*Session, error) { return New(id), errUnimplemented }

// ID returns the session id.
func (s *Session) ID() string { return s.id }

// Append validates ev (seq must be NextSeq()) and appends it. Errors are *Error; s is unchanged on error.
func (s *Session) Append(ev Event) error { return errUnimplemented }

// Check validates ev as the next event without appending it.
func (s *Session) Check(ev Event) error { return errUnimplemented }

// NextSeq is the seq the next event must carry (the number of events).
func (s *Session) NextSeq() int64 { return 0 }

// Events returns the events (shared slice; do not modify).
func (s *Session) Events() []Event { return nil }

// Surface returns the current fold state (a copy).
func (s *Session) Surface() Surface { return *NewSurface() }

// DeriveMessages returns the model-visible message history (cached per node; rebuilt after a replace).
func (s *Session) DeriveMessages() []json.RawMessage { return nil }

// Repair returns the crash-repair closers (interruptedTurnClosers) for the current log; empty when
// the last turn is closed.
func (s *Session) Repair() []Event { return nil }

// DeriveMessages derives the messages of the given surface nodes from events indexed by seq.
func DeriveMessages(nodes []int64, event func(seq int64) (Event, error)) ([]json.RawMessage, error) {
	return nil, errUnimplemented
}

// Repair returns the crash-repair closers for events (interruptedTurnClosers).
func Repair(events []Event) []Event { return nil }

// ForkSeed selects the seed for forking events (the session named id) at boundary (nil = last
// event), with the reference's codes and exact texts. The seed excludes the end-seed marker.
func ForkSeed(id string, events []Event, boundary *int64) ([]Event, *ForkError) {
	return nil, &ForkError{Msg: "unimplemented"}
}

// ForkChild returns the child's full event list: seed plus a session/end-seed marker at seq
// len(seed) (none when the seed already ends with one), validating the seed as the reference's
// Session.create does (envelope, message shape, surface rules) with its exact texts.
// nowMs stamps the marker.
func ForkChild(seed []Event, nowMs int64) ([]Event, *ForkError) { return nil, &ForkError{Msg: "unimplemented"} }

// EndSeed returns a session/end-seed event at seq with time nowMs and data {}.
func EndSeed(seq int64, nowMs int64) Event { return Event{} }

// Inspect runs the oracle's judge over a dsh JSONL stream.
func Inspect(r io.Reader, allForks bool) InspectResult { return InspectResult{} }
