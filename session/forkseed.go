package session

import (
	"fmt"
	"strconv"

	"github.com/agentlog/agentlog/internal/jsvalue"
)

// SeedValidator validates a fork seed one event at a time, as ForkChild validates a whole one
// (same checks, same order, same texts), keeping only the surface (its node seqs), not the
// events: a fork of a long session streams its seed through it.
type SeedValidator struct {
	surf   *Surface
	n      int
	last   string // type of the last event added
	lookup Lookup
}

// NewSeedValidator returns a validator of an empty seed. lookup returns the seed event at a seq
// already added; it is called only for the target of a tool/result replace.
func NewSeedValidator(lookup Lookup) *SeedValidator {
	return &SeedValidator{surf: NewSurface(), lookup: lookup}
}

// Add validates ev as the next seed event (index Len()) and folds it in. A refusal is a code-less
// *ForkError with ForkChild's text; the validator is then unchanged.
func (v *SeedValidator) Add(ev *Event) *ForkError {
	p, ok := parseSeedEvent(ev)
	return v.add(ev, p, ok)
}

// AddScanned is Add for an event in the shared form: its data is not parsed again where no check
// reads its fields.
func (v *SeedValidator) AddScanned(ev *Scanned) *ForkError {
	if dataIsRead(ev.Type) || !(ev.current() && ev.flags&scanChecked != 0 || ev.scanData()) {
		return v.Add(&ev.Event)
	}
	p := parsedEvent{data: jsvalue.Unread(ev.flags&scanDataLossy != 0)} // no check reads this type's data
	var err error
	ok := true
	if ev.SurfaceOp != nil {
		p.op, err = jsvalue.Parse(ev.SurfaceOp)
		ok = err == nil
	}
	if ok && ev.SourceEventSeqs != nil {
		p.srcs, err = jsvalue.Parse(ev.SourceEventSeqs)
		ok = err == nil
	}
	return v.add(&ev.Event, p, ok)
}

func (v *SeedValidator) add(ev *Event, p parsedEvent, ok bool) *ForkError {
	i := v.n
	if !ok {
		return &ForkError{Msg: "seed event at index " + strconv.Itoa(i) + " is not losslessly JSON-serializable"}
	}
	if msg := seedEventProblem(ev, &p, i); msg != "" {
		return &ForkError{Msg: msg}
	}
	lookup := func(seq int64) (string, *jsvalue.Value, error) {
		if seq < 0 || seq >= int64(i) || v.lookup == nil {
			return "", nil, fmt.Errorf("seq %d is not in the seed", seq)
		}
		return surfaceLookup(v.lookup)(seq)
	}
	plan, r := planSurface(v.surf.Nodes, ev, &p, lookup)
	if r != nil {
		return &ForkError{Msg: "invalid seed event at index " + strconv.Itoa(i) + ": " + r.msg}
	}
	v.surf.commit(ev, &validated{plan: plan, p: p})
	v.n++
	v.last = ev.Type
	return nil
}

// Len is the number of seed events added.
func (v *SeedValidator) Len() int { return v.n }

// EndSeed returns the session/end-seed marker ForkChild appends after the seed (seq Len(), data
// {}, time nowMs); ok is false when the seed already ends with one.
func (v *SeedValidator) EndSeed(nowMs int64) (ev Event, ok bool) {
	if v.n > 0 && v.last == "session/end-seed" {
		return Event{}, false
	}
	return EndSeed(int64(v.n), nowMs), true
}

// SeedStream selects and validates a fork seed from a log read in order, without holding it: the
// streaming form of ForkSeed followed by ForkChild, with the same refusals in the reference's
// order (the boundary's before the seed's).
//
// NewSeedStream checks the boundary against the log's last seq; the caller then passes the log's
// events 0..Boundary() in order to Add, and calls Finish, which reports OPEN_TURN before the first
// seed refusal, as the reference does.
type SeedStream struct {
	id        string
	boundary  int64
	v         *SeedValidator
	next      int64
	turnSeq   int64  // seq of the last turn/start or turn/end added (-1: none)
	turnStart bool   // ... and it is a turn/start
	turnData  []byte // its data (a copy), for the OPEN_TURN text
	seedErr   *ForkError
}

// NewSeedStream starts the seed of session id at boundary (nil = the last event) of a log whose
// last event has seq last (-1 when it has none, and seqs are contiguous from 0). A boundary that
// is not a safe integer or is past the end is refused here with ForkSeed's INVALID_BOUNDARY text.
// lookup is SeedValidator's.
func NewSeedStream(id string, boundary *int64, last int64, lookup Lookup) (*SeedStream, *ForkError) {
	b, ferr := checkBoundary(id, boundary, last, last+1)
	if ferr != nil {
		return nil, ferr
	}
	return &SeedStream{id: id, boundary: b, v: NewSeedValidator(lookup), turnSeq: -1}, nil
}

// Boundary is the seq of the seed's last event (-1: the seed is empty).
func (s *SeedStream) Boundary() int64 { return s.boundary }

// Add takes the log's next event, which must have seq 0, 1, ... up to Boundary(). keep reports
// whether it joins the seed: false after a seed refusal (the caller stops writing the seed but
// keeps passing events up to the boundary, which decides the refusal).
func (s *SeedStream) Add(ev *Event) (keep bool, err error) {
	return s.add(ev, nil)
}

// AddScanned is Add for an event in the shared form (SeedValidator.AddScanned).
func (s *SeedStream) AddScanned(ev *Scanned) (keep bool, err error) {
	return s.add(&ev.Event, ev)
}

func (s *SeedStream) add(ev *Event, sc *Scanned) (keep bool, err error) {
	if ev.Seq != s.next || ev.Seq > s.boundary {
		return false, fmt.Errorf("session %s: fork seed: got seq %d, want %d (boundary %d)", jsQuote(s.id), ev.Seq, s.next, s.boundary)
	}
	s.next++
	switch ev.Type {
	case "turn/start":
		s.turnSeq, s.turnStart, s.turnData = ev.Seq, true, append(s.turnData[:0], ev.Data...)
	case "turn/end":
		s.turnSeq, s.turnStart = ev.Seq, false
	}
	if s.seedErr != nil {
		return false, nil
	}
	var ferr *ForkError
	if sc != nil {
		ferr = s.v.AddScanned(sc)
	} else {
		ferr = s.v.Add(ev)
	}
	if ferr != nil {
		s.seedErr = ferr
		return false, nil
	}
	return true, nil
}

// Finish returns the refusal of the seed, if any, once every event up to Boundary() was added:
// OPEN_TURN when the boundary lies in an open turn, else the first seed refusal.
func (s *SeedStream) Finish() *ForkError {
	if s.next != s.boundary+1 {
		return &ForkError{Code: CodeInvalidBoundary,
			Msg: fmt.Sprintf("fork boundary %d does not match a contiguous event seq in session %s", s.boundary, jsQuote(s.id))}
	}
	if s.turnSeq >= 0 && s.turnStart {
		return openTurn(s.id, s.boundary, s.turnSeq, func() (*jsvalue.Value, error) { return jsvalue.Parse(s.turnData) })
	}
	return s.seedErr
}

// Len is the seed's length (valid after Finish returned nil).
func (s *SeedStream) Len() int { return s.v.Len() }

// EndSeed is SeedValidator.EndSeed of the seed.
func (s *SeedStream) EndSeed(nowMs int64) (Event, bool) { return s.v.EndSeed(nowMs) }
