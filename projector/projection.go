package projector

import (
	"encoding/json"
	"fmt"

	"github.com/agentlog/agentlog/session"
)

// Unit is the key of the projection unit this package maintains: its states live in the
// agentlog_projections KV bucket under the key "messages.<token>".
const Unit = "messages"

// StateVersion is the version of the stored State shape and of its fold. A stored projection with
// another stateVersion is discarded and rebuilt from the session log (design.md §1, projection unit).
const StateVersion = 1

// State is the fold state of one session as stored: the surface nodes (seqs, in model-visible
// order), replaceGeneration (count of committed replaces), the transcript (seqs of append-origin
// surface events) and the open turn (turn number, or null). It is session.Surface without AsOfSeq,
// which the Projection envelope carries.
type State struct {
	Nodes             []int64 `json:"nodes"`
	ReplaceGeneration int64   `json:"replaceGeneration"`
	Transcript        []int64 `json:"transcript"`
	OpenTurn          *int64  `json:"openTurn"`
}

// ProjectionError records why a session's projection stopped: the seq of the first event that
// could not be applied, the rule it broke (session.Error.Rule, or "record-decode" for a record that
// does not decode, "log-read" for a log that cannot be read back) and the message.
type ProjectionError struct {
	Seq     int64  `json:"seq"`
	Rule    string `json:"rule"`
	Message string `json:"message"`
}

// Projection is the value stored in the agentlog_projections KV bucket under "messages.<token>":
// {"stateVersion":1,"asOfSeq":N,"state":{...},"error"?:{...}}. AsOfSeq is the last applied event
// seq (-1 before any). When Error is set the projection is stopped: later records of the session
// are acknowledged and ignored, and the query service answers "409".
type Projection struct {
	StateVersion int              `json:"stateVersion"`
	AsOfSeq      int64            `json:"asOfSeq"`
	State        State            `json:"state"`
	Error        *ProjectionError `json:"error,omitempty"`
}

// Key returns the agentlog_projections key of a session token: "messages.<token>".
func Key(token string) string { return Unit + "." + token }

// newProjection is the projection of a session with no event applied.
func newProjection() Projection {
	return Projection{StateVersion: StateVersion, AsOfSeq: -1, State: State{Nodes: []int64{}, Transcript: []int64{}}}
}

// surface returns the session.Surface the projection holds (a copy).
func (p Projection) surface() *session.Surface {
	s := &session.Surface{
		Nodes:             append([]int64{}, p.State.Nodes...),
		ReplaceGeneration: p.State.ReplaceGeneration,
		AsOfSeq:           p.AsOfSeq,
		Transcript:        append([]int64{}, p.State.Transcript...),
	}
	if p.State.OpenTurn != nil {
		t := *p.State.OpenTurn
		s.OpenTurn = &t
	}
	return s
}

// fromSurface builds a running projection from a surface.
func fromSurface(s *session.Surface) Projection {
	p := Projection{StateVersion: StateVersion, AsOfSeq: s.AsOfSeq, State: State{
		Nodes:             append([]int64{}, s.Nodes...),
		ReplaceGeneration: s.ReplaceGeneration,
		Transcript:        append([]int64{}, s.Transcript...),
	}}
	if s.OpenTurn != nil {
		t := *s.OpenTurn
		p.State.OpenTurn = &t
	}
	return p
}

// decodeProjection parses a stored value. A value with another stateVersion decodes to
// (newProjection(), false): it is to be rebuilt.
func decodeProjection(b []byte) (Projection, bool, error) {
	var p Projection
	if err := json.Unmarshal(b, &p); err != nil {
		return Projection{}, false, fmt.Errorf("stored projection is not valid JSON: %w", err)
	}
	if p.StateVersion != StateVersion {
		return newProjection(), false, nil
	}
	if p.State.Nodes == nil {
		p.State.Nodes = []int64{}
	}
	if p.State.Transcript == nil {
		p.State.Transcript = []int64{}
	}
	return p, true, nil
}
