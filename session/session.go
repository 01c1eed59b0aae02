package session

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/agentlog/agentlog/internal/jsvalue"
)

// Session is an in-memory session: its events, its Surface, the deriveMessages cache and the
// crash-repair state. It mirrors the reference's Session (append, surface, deriveMessages) and
// interruptedTurnClosers, with agentlog's event-shape rule on top (DEPARTURES.md).
//
// Appending is O(1) amortized plus the size of the event's JSON, except for a replace, which is
// O(nodes). A Session is not safe for concurrent use.
type Session struct {
	id     string
	strict bool // false only inside Inspect, which must reproduce the reference's later failures

	events []Event
	msgs   [][]byte // per event: its derived message (a sub-slice of Data), nil when none
	surf   Surface
	rep    repairState

	// the deriveMessages cache (the reference's derived, derivedNodes, derivedGeneration)
	derived      []json.RawMessage
	derivedNodes int
	derivedGen   int64

	// lenient mode (Inspect) only
	datas      []*jsvalue.Value // parsed data per event
	typeKinds  []int8           // typeString, or what a non-string type was
	msgVals    []*jsvalue.Value // parsed derived message per event
	deriveErrs map[int64]error
	repErr     *Error         // the first event interruptedTurnClosers cannot read
	markTurn   *jsvalue.Value // data.turn of the last turn/start (jsvalue.NullValue after a turn/end)
	markErr    error          // reading that turn failed
	lastPlan   surfPlan
}

// New returns an empty session named id.
func New(id string) *Session {
	return &Session{id: id, strict: true, surf: *NewSurface(), rep: newRepairState(), markTurn: jsvalue.NullValue}
}

func newLenient(id string) *Session {
	s := New(id)
	s.strict = false
	s.deriveErrs = map[int64]error{}
	return s
}

// Load builds a session from events, validating each in order with Append (the reference's
// append path). On a refusal it returns the session holding the accepted prefix and the *Error.
func Load(id string, events []Event) (*Session, error) {
	s := New(id)
	for _, ev := range events {
		if err := s.Append(ev); err != nil {
			return s, err
		}
	}
	return s, nil
}

// ID returns the session id.
func (s *Session) ID() string { return s.id }

// Append validates ev (ev.Seq must be NextSeq()) and appends it. The rules are the reference's
// append path (seq contiguity, lossless JSON, legacy request headers, every surface rule) plus
// agentlog's event-shape rule. An ev.Time that is not a JSON number is replaced by the current
// time in ms, as the reference stamps Date.now(). Ignorable is kept. Errors are *Error naming the
// session, the seq and the rule; s is unchanged on error. The session keeps ev's byte slices:
// do not modify them afterwards.
func (s *Session) Append(ev Event) error {
	if err := s.append(ev, nil); err != nil {
		return err
	}
	return nil
}

// Check validates ev as the next event without appending it.
func (s *Session) Check(ev Event) error {
	if _, err := s.surf.validateNext(s.id, &ev, nil, s.strict, s.lookup); err != nil {
		return err
	}
	return nil
}

func (s *Session) append(ev Event, p *parsedEvent) *Error {
	if _, ok := timeValue(ev.Time); !ok {
		ev.Time = json.Number(strconv.FormatInt(nowMillis(), 10))
	}
	v, err := s.surf.validateNext(s.id, &ev, p, s.strict, s.lookup)
	if err != nil {
		return err
	}
	var msg *jsvalue.Value
	if v.plan.kind != planNone {
		m, derr := deriveEvent(ev.Type, v.p.data)
		if derr != nil && s.deriveErrs != nil {
			s.deriveErrs[ev.Seq] = derr // lenient mode only: strict validation rules this out
		}
		msg = m
	}
	if s.strict {
		s.rep.apply(v.rr, ev.Seq, ev.Time)
	} else {
		if s.repErr == nil {
			rr, rerr := readForRepair(ev.Type, v.p.data)
			if rerr != nil {
				s.repErr = newError(s.id, ev.Seq, 0, RuleEventShape, rerr.Error())
			} else {
				s.rep.apply(rr, ev.Seq, ev.Time)
			}
		}
		switch ev.Type {
		case "turn/start":
			s.markTurn, s.markErr = jsvalue.Get(v.p.data, "turn")
		case "turn/end":
			s.markTurn, s.markErr = jsvalue.NullValue, nil
		}
		s.datas = append(s.datas, v.p.data)
		s.typeKinds = append(s.typeKinds, v.p.typeKind)
		s.msgVals = append(s.msgVals, msg)
	}
	s.surf.commit(&ev, &v)
	s.lastPlan = v.plan
	s.events = append(s.events, ev)
	if msg != nil {
		s.msgs = append(s.msgs, WellFormed(msg.Raw()))
	} else {
		s.msgs = append(s.msgs, nil)
	}
	return nil
}

// lookup returns an earlier event's type and parsed data (for a tool/result replace).
func (s *Session) lookup(seq int64) (string, *jsvalue.Value, error) {
	if seq < 0 || seq >= int64(len(s.events)) {
		return "", nil, fmt.Errorf("seq %d is not in the session", seq)
	}
	ev := &s.events[seq]
	if s.datas != nil {
		return ev.Type, s.datas[seq], nil
	}
	data, err := jsvalue.Parse(ev.Data)
	if err != nil {
		return "", nil, err
	}
	return ev.Type, data, nil
}

// NextSeq is the seq the next event must carry (the number of events).
func (s *Session) NextSeq() int64 { return int64(len(s.events)) }

// Events returns the events (shared slice; do not modify).
func (s *Session) Events() []Event { return s.events }

// Surface returns the current fold state (a copy).
func (s *Session) Surface() Surface { return s.surf.clone() }

// DeriveMessages returns the model-visible message history: one message per surface node that
// derives one, each the exact bytes inside its event's data (ill-formed UTF-8 decoded as
// WellFormed does). Cached like the reference's
// Session.deriveMessages: each node is derived once, and the cache is rebuilt only after
// replaceGeneration changes. A call costs O(new nodes). The returned slice never changes after it
// is returned (its capacity is clipped); the messages share the events' bytes.
func (s *Session) DeriveMessages() []json.RawMessage {
	if s.surf.ReplaceGeneration != s.derivedGen {
		s.derived = nil
		s.derivedNodes = 0
		s.derivedGen = s.surf.ReplaceGeneration
	}
	for _, seq := range s.surf.Nodes[s.derivedNodes:] {
		if m := s.msgs[seq]; m != nil {
			s.derived = append(s.derived, json.RawMessage(m))
		}
	}
	s.derivedNodes = len(s.surf.Nodes)
	if s.derived == nil {
		s.derived = []json.RawMessage{}
	}
	// The cache itself, clipped to its length: O(1) per call however long the session, and a later
	// append never grows (or writes into) a slice a caller already holds — the guarantee the
	// reference buys with a copy ([...derived]). Callers must not modify the messages' bytes.
	return s.derived[:len(s.derived):len(s.derived)]
}

// Repair returns the crash-repair closers (interruptedTurnClosers) for the current log: synthetic
// tool results for unmatched tool calls, a step/end when a step is open, and turn/end
// {kind:"interrupted"}, with seqs continuing the log and the last event's time. Empty when the
// last turn is closed.
func (s *Session) Repair() []Event {
	if s.repErr != nil {
		return nil
	}
	return s.rep.closers()
}
