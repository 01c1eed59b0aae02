package projector

import (
	"encoding/json"
	"fmt"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/session"
)

// messagesStateVersion is the messages unit's stateVersion: the version of the stored State shape
// and of its fold. A stored projection with another stateVersion is rebuilt from the session log.
const messagesStateVersion = 1

// State is the stored state of the messages unit: session.Surface without AsOfSeq, which the
// Projection envelope carries.
type State = client.State

// ProjectionError records why a session's projection stopped: the seq of the first event not
// applied, the rule it broke (session.Error.Rule, or a projection rule such as
// session.RuleRecordDecode) and the message.
type ProjectionError = client.ProjectionError

// Projection is the value stored under "messages.<token>":
// {"stateVersion":1,"asOfSeq":N,"state":{...},"error"?:{...}}. When Error is set the projection is
// stopped: later records of the session are acknowledged and ignored, and queries answer "409".
type Projection = client.Projection

// newProjection is the projection of a session with no event applied.
func newProjection() Projection {
	return Projection{StateVersion: messagesStateVersion, AsOfSeq: -1, State: State{Nodes: []int64{}, Transcript: []int64{}}}
}

// toSurface returns the session.Surface that p holds (a copy).
func toSurface(p Projection) *session.Surface {
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
	p := Projection{StateVersion: messagesStateVersion, AsOfSeq: s.AsOfSeq, State: State{
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
	if p.StateVersion != messagesStateVersion {
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
