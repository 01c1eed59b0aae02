package session

import (
	"fmt"

	"github.com/agentlog/agentlog/internal/jsvalue"
)

// NewSurface returns the empty fold state (AsOfSeq -1, no nodes, replaceGeneration 0).
func NewSurface() *Surface { return &Surface{AsOfSeq: -1, Nodes: []int64{}, Transcript: []int64{}} }

// validated is one event that passed validation, ready to be committed.
type validated struct {
	plan surfPlan
	rr   repairRead
	p    parsedEvent
}

// validateNext checks ev as the event after s (seq s.AsOfSeq+1) with every rule of the
// reference's append path, then (strict) agentlog's event-shape rule. p may be nil (then ev's JSON
// is parsed here).
func (s *Surface) validateNext(sessionID string, ev *Event, p *parsedEvent, strict bool, lookup lookupFn) (validated, *Error) {
	var v validated
	expected := s.AsOfSeq + 1
	if ev.Seq != expected {
		return v, newError(sessionID, ev.Seq, 0, RuleSeqContiguous,
			fmt.Sprintf("session event seq %d is not contiguous; expected %d", ev.Seq, expected))
	}
	if p == nil {
		pe, err := parseEvent(sessionID, ev)
		if err != nil {
			return v, err
		}
		p = &pe
	}
	v.p = *p
	plan, r := checkAppend(s.Nodes, ev, p, expected, lookup)
	if r != nil {
		return v, r.toError(sessionID, ev.Seq)
	}
	v.plan = plan
	if strict {
		rr, r := eventShape(ev, p.data)
		if r != nil {
			return v, r.toError(sessionID, ev.Seq)
		}
		v.rr = rr
	}
	return v, nil
}

// commit folds a validated event into s.
func (s *Surface) commit(ev *Event, v *validated) {
	switch v.plan.kind {
	case planAppend:
		s.Nodes = append(s.Nodes, ev.Seq)
		s.Transcript = append(s.Transcript, ev.Seq)
	case planReplace:
		// splice nodes[startIdx..endIdx] -> [seq], into a fresh slice (callers may hold copies)
		old := s.Nodes
		n := make([]int64, 0, len(old)-(v.plan.endIdx-v.plan.startIdx))
		n = append(n, old[:v.plan.startIdx]...)
		n = append(n, ev.Seq)
		n = append(n, old[v.plan.endIdx+1:]...)
		s.Nodes = n
		s.ReplaceGeneration++
	}
	switch ev.Type {
	case "turn/start":
		if t, _ := jsvalue.Get(v.p.data, "turn"); t != nil && t.Kind() == jsvalue.Number && jsvalue.IsSafeInteger(t.Num()) {
			n := int64(t.Num())
			s.OpenTurn = &n
		} else {
			s.OpenTurn = nil // only reachable in Inspect's lenient mode
		}
	case "turn/end":
		s.OpenTurn = nil
	}
	s.AsOfSeq = ev.Seq
}

// surfaceLookup adapts a Lookup to the validator.
func surfaceLookup(lookup Lookup) lookupFn {
	return func(seq int64) (string, *jsvalue.Value, error) {
		if lookup == nil {
			return "", nil, fmt.Errorf("no Lookup given")
		}
		ev, err := lookup(seq)
		if err != nil {
			return "", nil, err
		}
		if ev.Seq != seq {
			return "", nil, fmt.Errorf("Lookup(%d) returned seq %d", seq, ev.Seq)
		}
		data, err := jsvalue.Parse(ev.Data)
		if err != nil {
			return "", nil, fmt.Errorf("event %d data: %v", seq, err)
		}
		return ev.Type, data, nil
	}
}

// Check validates ev as the next event (seq AsOfSeq+1) without changing s: seq contiguity,
// lossless JSON, legacy request headers, every surface rule, and the event-shape
// rule (DEPARTURES.md). lookup is called only for the target of a tool/result replace. sessionID
// names the session in the error. Errors are *Error.
func (s *Surface) Check(sessionID string, ev Event, lookup Lookup) error {
	if _, err := s.validateNext(sessionID, &ev, nil, true, surfaceLookup(lookup)); err != nil {
		return err
	}
	return nil
}

// Apply validates ev as the next event and folds it in: an append-origin surface event joins
// Nodes and Transcript, a replace splices Nodes and bumps ReplaceGeneration, turn/start opens
// OpenTurn and turn/end closes it, AsOfSeq becomes ev.Seq. On error s is unchanged.
func (s *Surface) Apply(sessionID string, ev Event, lookup Lookup) error {
	v, err := s.validateNext(sessionID, &ev, nil, true, surfaceLookup(lookup))
	if err != nil {
		return err
	}
	s.commit(&ev, &v)
	return nil
}

// clone returns a deep copy of s.
func (s *Surface) clone() Surface {
	c := *s
	c.Nodes = append(make([]int64, 0, len(s.Nodes)), s.Nodes...)
	c.Transcript = append(make([]int64, 0, len(s.Transcript)), s.Transcript...)
	if s.OpenTurn != nil {
		t := *s.OpenTurn
		c.OpenTurn = &t
	}
	return c
}
