package projector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// unitState is one unit's state of one session, as held in memory.
type unitState struct {
	def     *Definition
	state   any // the gate's is *session.Surface
	asOfSeq int64
	rev     uint64 // KV revision of the stored value (0: no value)
	marker  uint64 // with rev 0: the revision of the delete marker the key ends with (0: none), which a create expects
	err     *ProjectionError
	enc     []byte       // the state encoded, as of its last change (nil: to encode)
	written bool         // the stored value is what this unitState holds
	logged  bool         // err was logged
	pos     *LogPosition // as decoded (nil: none stored, or a legacy value)

	hdr *session.Header // the session's header (its sessState's), for InitSession

	// The gate's: the stream seq of the record holding each surface node (0: unknown), stored as
	// State.NodeRecords, so that a query reads only the records of the nodes it lacks.
	nodeAt map[int64]uint64
}

// noteNode records that node seq of the gate's surface is in the record at stream seq at.
func (u *unitState) noteNode(seq int64, at uint64) {
	if u.nodeAt == nil {
		u.nodeAt = map[int64]uint64{}
	}
	u.nodeAt[seq] = at
	if surf, _ := u.state.(*session.Surface); surf != nil && len(u.nodeAt) > 2*len(surf.Nodes)+64 {
		keep := make(map[int64]uint64, len(surf.Nodes))
		for _, n := range surf.Nodes {
			if a, ok := u.nodeAt[n]; ok {
				keep[n] = a
			}
		}
		u.nodeAt = keep // nodes a replace took out
	}
}

// nodeRecords is State.NodeRecords for the gate's surface: every node's record, nil when one is
// unknown.
func (u *unitState) nodeRecords(nodes []int64) []uint64 {
	out := make([]uint64, len(nodes))
	for i, n := range nodes {
		if out[i] = u.nodeAt[n]; out[i] == 0 {
			return nil
		}
	}
	return out
}

// sessState is the fold state of one session: every registered unit, the gate first.
type sessState struct {
	token, id string
	units     []*unitState
	dirty     bool
	hdr       *session.Header // the session's header: read when a unit's InitSession needs it (lineage.go)
	// The log folded: the session's incarnation ("" when unknown or legacy) and the stream seq of
	// the last record folded (0: none). legacy: the stored gate value predates them.
	incarnation string
	streamSeq   uint64
	legacy      bool
	checkedSeq  uint64 // streamSeq when it was last checked against the log (foldedRecordMismatch)
	// lost names the records the session's log lost (a refold found that a state folded before
	// held them); it is stored with every state of the session, until the session is removed.
	lost *client.DataLoss
	// gone: the session has neither metadata nor records (removed, or being removed): its
	// states are purged, not written, and it is not cached.
	gone bool
	// meta is the session's metadata as loadSession read it (for a unit's lineage), which the
	// check right after the load (verify) takes instead of reading it again; nil otherwise.
	meta *sessMeta
}

// sessMeta is sessionMeta's answer.
type sessMeta struct {
	h     session.Header
	inc   string
	known bool
}

func (s *sessState) gate() *unitState { return s.units[0] }

// stopped reports whether the session's log broke a rule (the gate stopped).
func (s *sessState) stopped() bool { return s.gate().err != nil }

// folded is the highest seq any unit of the session has applied.
func (s *sessState) folded() int64 {
	m := int64(-1)
	for _, u := range s.units {
		m = max(m, u.asOfSeq)
	}
	return m
}

// minActive is the lowest asOfSeq among the units still running (ok false: none is).
func (s *sessState) minActive() (int64, bool) {
	m, ok := int64(0), false
	for _, u := range s.units {
		if u.err != nil {
			continue
		}
		if !ok || u.asOfSeq < m {
			m, ok = u.asOfSeq, true
		}
	}
	return m, ok
}

func newUnitState(d *Definition, hdr *session.Header) *unitState {
	u := &unitState{def: d, asOfSeq: -1, hdr: hdr}
	if d.gate {
		u.state = session.NewSurface()
	} else {
		u.state = d.init(*hdr)
	}
	return u
}

// storedValue is the envelope of every stored unit state: {stateVersion, asOfSeq, log, state,
// error?}. Log is absent in values written before it existed (they are refolded once).
type storedValue struct {
	StateVersion int              `json:"stateVersion"`
	AsOfSeq      int64            `json:"asOfSeq"`
	Log          *LogPosition     `json:"log,omitempty"`
	State        json.RawMessage  `json:"state"`
	Error        *ProjectionError `json:"error,omitempty"`
}

// LogPosition names the log a stored state was folded from: the session's incarnation ("" for a
// session created without one), the AGENTLOG stream seq of the last record folded, and the
// records this log is known to have lost (Lost, kept from the refold that found it on).
type LogPosition = client.LogPosition

// decodeUnit fills u from a stored value of its unit. A value of another stateVersion, or one
// that does not decode, leaves u at its initial state (it is rebuilt from the log) and reports
// false.
func decodeUnit(u *unitState, raw []byte, rev uint64) bool {
	u.rev = rev
	var v storedValue
	if err := json.Unmarshal(raw, &v); err != nil || v.StateVersion != u.def.StateVersion || len(v.State) == 0 {
		return false
	}
	st, err := u.def.decode(v.State)
	if err != nil {
		return false
	}
	if u.def.gate {
		p := Projection{AsOfSeq: v.AsOfSeq, State: st.(State)}
		st = toSurface(p)
		u.nodeAt = nil
		if recs := p.State.NodeRecords; len(recs) == len(p.State.Nodes) {
			u.nodeAt = make(map[int64]uint64, len(recs))
			for i, n := range p.State.Nodes {
				u.nodeAt[n] = recs[i]
			}
		}
	}
	u.state, u.asOfSeq, u.err, u.enc, u.written = st, v.AsOfSeq, v.Error, v.State, true
	u.logged = v.Error != nil // logged and counted when it stopped
	u.pos = v.Log
	return true
}

// newSessState is the state of a session with no event applied, h its header.
func newSessState(defs []*Definition, token string, h session.Header) *sessState {
	ss := &sessState{token: token, id: h.ID, hdr: &h}
	for _, d := range defs {
		ss.units = append(ss.units, newUnitState(d, ss.hdr))
	}
	return ss
}

// loadSession reads the stored states of every registered unit of a session. When the messages
// unit has no stored value, the session is taken as new (no other unit is read): a stray value
// of another unit then surfaces as a revision conflict at the first write, which reloads.
func loadSession(ctx context.Context, sto *store.Store, defs []*Definition, token, id string) (*sessState, error) {
	sh, err := sto.Session(id)
	if err != nil {
		return nil, err
	}
	ss := &sessState{token: token, id: id, hdr: &session.Header{ID: id}}
	var fresh []*unitState
	for i, d := range defs {
		u := newUnitState(d, ss.hdr)
		ss.units = append(ss.units, u)
		if i > 0 && ss.gate().rev == 0 {
			fresh = append(fresh, u)
			continue
		}
		e, err := sh.ProjectionEntry(ctx, d.Key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			fresh = append(fresh, u)
			continue
		}
		if err != nil {
			return nil, &transientError{fmt.Errorf("session %q: loading projection %s: %w", id, wire.ProjectionKey(d.Key, token), err)}
		}
		if !decodeUnit(u, e.Value(), e.Revision()) {
			fresh = append(fresh, u)
		}
	}
	ss.takePosition()
	return ss, ss.startLineage(ctx, sto, fresh)
}

// position is the log position stored with the session's values.
func (ss *sessState) position() *LogPosition {
	return &LogPosition{Incarnation: ss.incarnation, StreamSeq: ss.streamSeq, Lost: ss.lost}
}

// takePosition sets the session's log position from its stored gate value (legacy when a stored
// gate value has none).
func (ss *sessState) takePosition() {
	g := ss.gate()
	switch {
	case g.pos != nil:
		ss.incarnation, ss.streamSeq, ss.legacy, ss.lost = g.pos.Incarnation, g.pos.StreamSeq, false, g.pos.Lost
	case g.rev != 0:
		ss.legacy = true
	}
}

// foldEvents applies events (of one record, in seq order) to ss. Events at or below a unit's
// asOfSeq are skipped for it (idempotent by seq); when the events start after the lowest running
// asOfSeq + 1 (a gap: a record not folded, a unit added or rebuilt), the session is re-read from
// the log. A rule broken by the log stops every unit (their error is set, the session's states
// stay as of the previous event); an error of a unit's own Apply stops that unit only. A non-nil
// return is transient (the log or the KV bucket could not be read).
//
// streamSeq is the record's AGENTLOG stream seq (0: unknown); the session's position moves to it.
func foldEvents(ctx context.Context, sto *store.Store, ss *sessState, events []session.Scanned, streamSeq uint64) error {
	from, ok := ss.minActive()
	if !ok || len(events) == 0 || events[len(events)-1].Seq <= from {
		return nil
	}
	lk := &logLookup{ctx: ctx, store: sto, id: ss.id, batch: events, batchAt: streamSeq}
	todo := events
	foldedLog := false // the whole log was folded, not only this record (a log read for a lookup
	// reaches past the record, so only a fold of all of it moves the position to its end)
	defer func() {
		if foldedLog && lk.lastStreamSeq > ss.streamSeq && sto != nil {
			ss.streamSeq, ss.dirty = lk.lastStreamSeq, true
		}
		if ss.dirty && streamSeq > ss.streamSeq {
			ss.streamSeq = streamSeq
		}
	}()
	if events[0].Seq > from+1 {
		if err := lk.loadLog(); err != nil {
			var te *transientError
			if errors.As(err, &te) {
				return err
			}
			ss.stopAll(from+1, session.RuleLogRead, err.Error())
			return nil
		}
		todo = lk.log
		lk.batch = nil
		foldedLog = true
	}
	return ss.apply(todo, lk)
}

// catchUp folds the whole log of the session into ss (for units behind its end).
func catchUp(ctx context.Context, sto *store.Store, ss *sessState) error {
	if _, ok := ss.minActive(); !ok {
		return nil
	}
	lk := &logLookup{ctx: ctx, store: sto, id: ss.id}
	if err := lk.loadLog(); err != nil {
		var te *transientError
		if errors.As(err, &te) {
			return err
		}
		from, _ := ss.minActive()
		ss.stopAll(from+1, session.RuleLogRead, err.Error())
		return nil
	}
	if lk.lastStreamSeq > ss.streamSeq {
		ss.streamSeq = lk.lastStreamSeq
		for _, u := range ss.units {
			u.written = false // the position is stored in every unit's value
		}
		ss.dirty = true
	}
	return ss.apply(lk.log, lk)
}

// apply folds events in order: the gate first, then each running unit behind the event.
func (ss *sessState) apply(events []session.Scanned, lk *logLookup) error {
	g := ss.gate()
	recordAt := lk.recordAt(events)
	for i := range events {
		ev := &events[i]
		if ev.Seq > g.asOfSeq {
			if g.err != nil {
				return nil
			}
			surf := g.state.(*session.Surface)
			if err := surf.ApplyScanned(ss.id, ev, lk.lookup); err != nil {
				if lk.transient != nil {
					return lk.transient
				}
				pe := sessionError(ss.id, ev.Seq, err)
				ss.stopAll(pe.Seq, pe.Rule, pe.Message)
				return nil
			}
			g.asOfSeq, g.enc, g.written = ev.Seq, nil, false
			if session.SurfaceEligible(ev.Type) {
				g.noteNode(ev.Seq, recordAt(i)) // accepted: it is a node now (append or replace)
			}
			ss.dirty = true
		}
		for _, u := range ss.units[1:] {
			if u.err != nil || u.asOfSeq >= ev.Seq {
				continue
			}
			if u.def.wants(ev.Type) {
				next, err := safeApply(u.def, u.state, ev)
				if err != nil {
					u.err = unitError(ss.id, u.def.Key, ev.Event, err)
					u.written = false
					ss.dirty = true
					continue
				}
				if !u.def.unchanged(next, u.state) {
					u.state, u.enc = next, nil
				}
			}
			u.asOfSeq, u.written = ev.Seq, false
			ss.dirty = true
		}
	}
	return nil
}

// stopAll records a rule broken by the session's log in every unit still running.
func (ss *sessState) stopAll(seq int64, rule session.Rule, msg string) {
	for _, u := range ss.units {
		if u.err == nil {
			u.err = &ProjectionError{Seq: seq, Rule: rule, Message: msg}
			u.written = false
		}
	}
	ss.dirty = true
}

// safeApply calls a unit's Apply, turning a panic into an error.
func safeApply(d *Definition, state any, ev *session.Scanned) (next any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("apply panicked: %v", r)
		}
	}()
	return d.apply(state, ev)
}

func unitError(id, unit string, ev session.Event, err error) *ProjectionError {
	rule, why := session.RuleUnitApply, err.Error()
	var se *session.Error
	if errors.As(err, &se) && se.Rule != "" {
		rule = se.Rule
		if se.Session == "" {
			why = se.Reason // the message names the session and the event already
		}
	}
	return &ProjectionError{Seq: ev.Seq, Rule: rule,
		Message: fmt.Sprintf("session %q: unit %q refused event seq %d (%s) (rule %s): %s", id, unit, ev.Seq, ev.Type, rule, why)}
}

// encode returns the stored value of u: {"stateVersion":N,"asOfSeq":N,"log"?:{...},"state":...,
// "error"?:...}; pos is the session's log position (nil: none written).
func (u *unitState) encode(pos *LogPosition) ([]byte, error) {
	if u.enc == nil {
		var st any = u.state
		if u.def.gate {
			gs := fromSurface(u.state.(*session.Surface)).State
			gs.NodeRecords = u.nodeRecords(gs.Nodes)
			st = gs
		}
		b, err := json.Marshal(st)
		if err != nil {
			return nil, fmt.Errorf("unit %q: encoding its state: %w", u.def.Key, err)
		}
		u.enc = b
	}
	b := make([]byte, 0, len(u.enc)+64)
	b = append(b, `{"stateVersion":`...)
	b = strconv.AppendInt(b, int64(u.def.StateVersion), 10)
	b = append(b, `,"asOfSeq":`...)
	b = strconv.AppendInt(b, u.asOfSeq, 10)
	if pos != nil {
		b = append(b, `,"log":{"incarnation":`...)
		inc, _ := json.Marshal(pos.Incarnation)
		b = append(b, inc...)
		b = append(b, `,"streamSeq":`...)
		b = strconv.AppendUint(b, pos.StreamSeq, 10)
		if pos.Lost != nil {
			lb, err := json.Marshal(pos.Lost)
			if err != nil {
				return nil, err
			}
			b = append(b, `,"lost":`...)
			b = append(b, lb...)
		}
		b = append(b, '}')
	}
	b = append(b, `,"state":`...)
	b = append(b, u.enc...)
	if u.err != nil {
		eb, err := json.Marshal(u.err)
		if err != nil {
			return nil, err
		}
		b = append(b, `,"error":`...)
		b = append(b, eb...)
	}
	return append(b, '}'), nil
}

// stateHeaderRoom is what a stored value leaves of the max payload for the subject and headers.
const stateHeaderRoom = 512

// maxStateBytes is the largest stored value a checkpoint publishes, in bytes.
// test hook: lowerStateLimit replaces it.
var maxStateBytes = func(js jetstream.JetStream) int64 { return js.Conn().MaxPayload() - stateHeaderRoom }

// stopTooLarge stops unit u of session ss, whose stored value would take size bytes, more than
// limit: its error says so and its state is reset to the initial one, so that what is stored is
// small. The gate's state is every unit's precondition, so it stops every unit of the session;
// the query service then answers messages queries by folding the session's log itself.
func stopTooLarge(ss *sessState, u *unitState, size int, limit int64) {
	pe := &ProjectionError{Seq: u.asOfSeq, Rule: session.RuleStateTooLarge,
		Message: fmt.Sprintf("session %q: the %s projection state as of seq %d takes %d bytes, more than one KV value can hold (%d bytes); the projection stops here, and messages queries fold the log instead (rule %s)",
			ss.id, u.def.Key, u.asOfSeq, size, limit, session.RuleStateTooLarge)}
	if u.def.gate {
		for _, x := range ss.units {
			if x.err == nil {
				x.err, x.written = pe, false
			}
		}
	}
	u.err = pe
	u.resetState()
	ss.dirty = true
}

// resetState puts u back to its initial state (stored small, with its error).
func (u *unitState) resetState() {
	if u.def.gate {
		u.state, u.nodeAt = session.NewSurface(), nil
	} else {
		u.state = u.def.init(*u.hdr)
	}
	u.enc, u.written = nil, false
}

// pendingWrite is one asynchronous compare-and-swap write.
type pendingWrite struct {
	ss  *sessState
	u   *unitState
	msg *nats.Msg
	fut jetstream.PubAckFuture
}

// writeSessions stores every unit state of the given sessions that differs from its stored value,
// each with a revision compare-and-swap (Nats-Expected-Last-Subject-Sequence = the revision
// read; 0 for a new key), published asynchronously and awaited together. It returns the sessions
// whose write hit a conflict; any other failure is returned as a transient error (the sessions
// stay dirty).
func writeSessions(ctx context.Context, js jetstream.JetStream, sessions []*sessState) (conflicts []*sessState, err error) {
	var todo []pendingWrite // pendingWrite.msg set, fut not yet
	limit := maxStateBytes(js)
	for _, ss := range sessions {
		pos := ss.position()
		for _, u := range ss.units {
			if u.written {
				continue
			}
			b, eerr := u.encode(pos)
			if eerr != nil {
				// A state that cannot be encoded stops its unit; the error is stored instead.
				u.err = &ProjectionError{Seq: u.asOfSeq, Rule: session.RuleUnitEncode, Message: fmt.Sprintf("session %q: %v", ss.id, eerr)}
				u.resetState()
				if b, eerr = u.encode(pos); eerr != nil {
					return nil, eerr
				}
			}
			if limit > 0 && int64(len(b)) > limit {
				// A value the bucket cannot hold would fail this checkpoint forever: the unit
				// stops here instead, with an error saying so (the gate: every unit).
				stopTooLarge(ss, u, len(b), limit)
				if b, eerr = u.encode(pos); eerr != nil {
					return nil, eerr
				}
			}
			m := &nats.Msg{Subject: store.KVPutSubject(js, wire.ProjectionsBucket, wire.ProjectionKey(u.def.Key, ss.token)), Data: b, Header: nats.Header{}}
			expect := u.rev
			if expect == 0 {
				expect = u.marker // a key a removal left a marker on (store.Session.DeleteProjections)
			}
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect, 10))
			todo = append(todo, pendingWrite{ss: ss, u: u, msg: m})
		}
	}
	conflicted := map[*sessState]bool{}
	var firstErr error
	// An ack that never comes (lost without a disconnect, e.g. in a leader change) must not block
	// the partition forever: the checkpoint fails after checkpointAckTimeout and is retried.
	ackTimeout := time.NewTimer(checkpointAckTimeout)
	defer ackTimeout.Stop()
	// In windows of checkpointWindow writes: a checkpoint of a partition catching up can hold
	// thousands of sessions, more than the connection's async publish window (the partitions
	// share it).
	for start := 0; start < len(todo) && firstErr == nil; start += checkpointWindow {
		pending := todo[start:min(start+checkpointWindow, len(todo))]
		for i := range pending {
			fut, perr := js.PublishMsgAsync(pending[i].msg)
			if perr != nil {
				firstErr = perr
				pending = pending[:i]
				break
			}
			pending[i].fut = fut
		}
		for _, pw := range pending {
			select {
			case <-ackTimeout.C:
				if firstErr == nil {
					firstErr = fmt.Errorf("projector: no ack for a checkpoint write within %s", checkpointAckTimeout)
				}
				// Later futures are left to nats.go; the retry re-reads the revisions.
				ctx = closedCtx
			case ack := <-pw.fut.Ok():
				pw.u.rev, pw.u.written = ack.Sequence, true
			case perr := <-pw.fut.Err():
				if store.IsWrongLastSequence(perr) {
					if !conflicted[pw.ss] {
						conflicted[pw.ss] = true
						conflicts = append(conflicts, pw.ss)
					}
					continue
				}
				if firstErr == nil {
					firstErr = perr
				}
			case <-ctx.Done():
				if firstErr == nil {
					firstErr = ctx.Err()
				}
			}
		}
	}
	for _, ss := range sessions {
		if conflicted[ss] {
			continue
		}
		clean := true
		for _, u := range ss.units {
			clean = clean && u.written
		}
		ss.dirty = !clean
	}
	if firstErr != nil {
		return conflicts, &transientError{fmt.Errorf("writing projections: %w", firstErr)}
	}
	return conflicts, nil
}

// checkpointWindow is how many state writes of one checkpoint are in flight at once.
const checkpointWindow = 128

// resolveConflict reloads a session whose write conflicted and folds the log into it again, so
// that it is at least where ss was; the caller writes it again.
func resolveConflict(ctx context.Context, sto *store.Store, defs []*Definition, ss *sessState) (*sessState, error) {
	fresh, err := loadSession(ctx, sto, defs, ss.token, ss.id)
	if err != nil {
		return nil, err
	}
	sh, err := sto.Session(ss.id)
	if err != nil {
		return nil, err
	}
	for _, u := range fresh.units[1:] {
		if fresh.gate().rev == 0 && u.rev == 0 {
			// The gate is new: the other units' keys were not read; read them now.
			e, gerr := sh.ProjectionEntry(ctx, u.def.Key)
			if gerr == nil {
				u.rev = e.Revision()
				decodeUnit(u, e.Value(), e.Revision())
			} else if !errors.Is(gerr, jetstream.ErrKeyNotFound) {
				return nil, &transientError{gerr}
			}
		}
	}
	if err := catchUp(ctx, sto, fresh); err != nil {
		return nil, err
	}
	// A conflict is how a checkpoint meets agentlog rm's purge of the keys: a session without
	// metadata and records is not written again.
	gone, err := sessionGone(ctx, sto, ss.id)
	if err != nil {
		return nil, err
	}
	if gone {
		fresh.gone = true
		return fresh, nil
	}
	for _, u := range fresh.units {
		u.written = false // write every unit again, over the revisions just read
		if u.rev == 0 {
			// A new key may end with the delete marker of an earlier removal: the create expects it.
			if u.marker, err = sh.ProjectionMarker(ctx, u.def.Key); err != nil {
				return nil, &transientError{err}
			}
		}
	}
	fresh.dirty = true
	return fresh, nil
}

// Fold folds a whole session log through every unit of reg in memory (no NATS) and returns their
// views as the snapshot endpoint would: what each unit's definition gives for these events. A
// rule broken by the log stops every unit at that seq (with its error), as in a projector. The
// units' InitSession gets a header holding only id (see FoldSession).
func Fold(reg *Registry, id string, events []session.Event) (client.SnapshotReply, error) {
	return FoldSession(reg, session.Header{ID: id}, events)
}

// FoldSession is Fold for the session with header h (as stored in agentlog_sessions).
func FoldSession(reg *Registry, h session.Header, events []session.Event) (client.SnapshotReply, error) {
	id := h.ID
	ss := newSessState(reg.list(), "", h)
	if len(ss.units) == 0 || !ss.units[0].def.gate {
		return client.SnapshotReply{}, errors.New("projector: the registry must hold the messages unit first (use NewRegistry)")
	}
	scanned := scanAll(events)
	lk := &logLookup{id: id, batch: scanned}
	if err := ss.apply(scanned, lk); err != nil {
		return client.SnapshotReply{}, err
	}
	return ss.views()
}

// checkpointAckTimeout bounds the wait for the KV acks of one checkpoint.
const checkpointAckTimeout = 30 * time.Second

// closedCtx is an already cancelled context: after a checkpoint times out, the remaining futures
// are not waited for.
var closedCtx = func() context.Context {
	c, cancel := context.WithCancel(context.Background())
	cancel()
	return c
}()
