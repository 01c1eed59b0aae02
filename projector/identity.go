package projector

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
)

// sessionMeta returns session id's header and incarnation from its agentlog_sessions entry
// (store.Session.InfoAny, read from the bucket's leader); inc is "" for a session created
// without one. A session without metadata (deleted, or never created) gets a header naming only
// its id, and known false. A fork child whose seed is still being written (wire.IncompleteHeader)
// is known: the fold folds it as its records come, with its header, and the query service does
// not serve it until it is complete (queryService.complete). Errors are transient.
func sessionMeta(ctx context.Context, st *store.Store, id string) (h session.Header, inc string, known bool, err error) {
	h, inc, known, _, err = sessionMetaOf(ctx, st, id, true)
	return h, inc, known, err
}

// sessionMetaState is sessionMeta that also says whether the session is being removed (its
// entry is marked by an agentlog rm that stopped part-way; known is false then).
// A fork child still being written is not known (store.Session.Info).
func sessionMetaState(ctx context.Context, st *store.Store, id string) (h session.Header, inc string, known, removing bool, err error) {
	return sessionMetaOf(ctx, st, id, false)
}

// sessionMetaOf is sessionMetaState; incomplete says whether an incomplete fork child is known.
func sessionMetaOf(ctx context.Context, st *store.Store, id string, incomplete bool) (h session.Header, inc string, known, removing bool, err error) {
	sh, err := st.Session(id)
	if err != nil {
		return session.Header{}, "", false, false, err
	}
	read := sh.Info
	if incomplete {
		read = sh.InfoAny
	}
	info, err := read(ctx)
	if errors.Is(err, store.ErrSessionNotFound) {
		return session.Header{ID: id}, "", false, errors.Is(err, store.ErrSessionDeleted), nil
	}
	if err != nil {
		return session.Header{}, "", false, false, &transientError{fmt.Errorf("session %q: reading its metadata: %w", id, err)}
	}
	return info.Header, info.Incarnation, true, false, nil
}

// sessionGone reports whether session id has neither metadata (none, or marked for removal by
// agentlog rm) nor records: a removed session, of which no projection state may be kept (a state
// stored for it would answer as an existing empty session). Errors are transient.
func sessionGone(ctx context.Context, st *store.Store, id string) (bool, error) {
	_, _, known, err := sessionMeta(ctx, st, id)
	if err != nil || known {
		return false, err
	}
	return logEmpty(ctx, st, id)
}

// logEmpty reports whether session id's subject holds no record (a record that does not decode is
// a record all the same). Errors are transient.
func logEmpty(ctx context.Context, st *store.Store, id string) (bool, error) {
	sh, err := st.Session(id)
	if err != nil {
		return false, err
	}
	tail, err := sh.TailFromLeader(ctx)
	switch {
	case err != nil && isSessionError(err):
		return false, nil // a record that does not decode is a record all the same
	case err != nil:
		return false, &transientError{fmt.Errorf("session %q: %w", id, err)}
	}
	return tail.LastStreamSeq == 0, nil
}

// errSessionGone is checkStored's answer for a session that has neither metadata nor records.
var errSessionGone = errors.New("session not found (removed, or never created)")

// errSessionRemoving is checkStored's answer for a session being removed (an agentlog rm stopped
// part-way), whatever its log still holds: not found, like every read of it.
var errSessionRemoving = errors.New("session is being removed")

// Causes of a refold (logged and counted by Projector.Refolds).
const (
	causeRecreated = "re-created"     // the session's incarnation differs from the state's
	causeTailLost  = "log-shrank"     // the log ends below what the state has folded
	causeIdentity  = "record-differs" // a record the state claims to have applied is not the one folded
	causeLegacy    = "legacy-state"   // a state stored before log positions (an upgrade, not counted)
)

// mismatch compares a session's state with the current log (tail, read from the stream leader)
// and incarnation (incKnown false: no metadata, not compared). It returns the cause and a
// description naming the seqs, or "" when the state belongs to this log.
func (ss *sessState) mismatch(tail store.Tail, inc string, incKnown bool) (cause, desc string) {
	g := ss.gate()
	if g.rev == 0 && g.asOfSeq < 0 && g.err == nil {
		return "", "" // nothing folded yet
	}
	a, s := ss.folded(), ss.streamSeq
	switch {
	case ss.legacy:
		return causeLegacy, fmt.Sprintf("the stored state (asOfSeq %d) predates log positions", a)
	case incKnown && inc != ss.incarnation:
		return causeRecreated, fmt.Sprintf("the session's incarnation is %q but the state (asOfSeq %d, stream seq %d) was folded from incarnation %q", inc, a, s, ss.incarnation)
	case tail.LastStreamSeq < s:
		return causeTailLost, fmt.Sprintf("the log's last record is stream seq %d (seqs to %d), below the last record folded, stream seq %d (asOfSeq %d)", tail.LastStreamSeq, tail.NextSeq-1, s, a)
	case tail.NextSeq-1 < a:
		return causeTailLost, fmt.Sprintf("the log ends at seq %d (stream seq %d), below asOfSeq %d", tail.NextSeq-1, tail.LastStreamSeq, a)
	case ss.stopped():
		return "", ""
	case tail.LastStreamSeq > s && len(tail.LastEvents) > 0 && tail.LastEvents[0].Seq <= a:
		return causeIdentity, fmt.Sprintf("the log's last record, stream seq %d, holds seqs %d..%d at or below asOfSeq %d but comes after the last record folded (stream seq %d)",
			tail.LastStreamSeq, tail.LastEvents[0].Seq, tail.NextSeq-1, a, s)
	case tail.LastStreamSeq == s && tail.NextSeq-1 != a:
		return causeIdentity, fmt.Sprintf("the last record folded, stream seq %d, now ends at seq %d, not at asOfSeq %d", s, tail.NextSeq-1, a)
	}
	return "", ""
}

// recordMismatch checks one delivered record (stream seq r, events first..last) against ss; it
// returns a description naming the seqs when the record cannot belong to the log ss was folded
// from, "" otherwise (a new record, or a redelivery of one folded).
func (ss *sessState) recordMismatch(r uint64, first, last int64) string {
	a, s := ss.folded(), ss.streamSeq
	switch {
	case s == 0 || r == 0:
		return "" // no position to compare with
	case r > s && first <= a:
		return fmt.Sprintf("record at stream seq %d holds seqs %d..%d, at or below asOfSeq %d, but comes after the last record folded (stream seq %d)", r, first, last, a, s)
	case r <= s && last > a && !ss.stopped():
		return fmt.Sprintf("record at stream seq %d, at or below the last record folded (stream seq %d), holds seqs %d..%d beyond asOfSeq %d", r, s, first, last, a)
	}
	return ""
}

// foldedRecordMismatch checks that the last record ss folded (stream seq ss.streamSeq) is still in
// the log and ends at asOfSeq (it does in a log the state was folded from, for a running state);
// it returns a description when not, "" otherwise. Errors are transient.
func foldedRecordMismatch(ctx context.Context, st *store.Store, ss *sessState) (string, error) {
	a, s := ss.folded(), ss.streamSeq
	if s == 0 || ss.stopped() || ss.legacy {
		return "", nil
	}
	sh, err := st.Session(ss.id)
	if err != nil {
		return "", err
	}
	rec, found, err := sh.RecordFromLeader(ctx, s)
	switch {
	case err != nil && isSessionError(err):
		return fmt.Sprintf("the last record folded, stream seq %d, is now a record that does not decode", s), nil
	case err != nil:
		return "", &transientError{fmt.Errorf("session %q: %w", ss.id, err)}
	case !found:
		return fmt.Sprintf("the last record folded, stream seq %d (to asOfSeq %d), is no longer in the log", s, a), nil
	case rec.NextSeq-1 != a:
		return fmt.Sprintf("the last record folded, stream seq %d, now holds seqs %d..%d, not a record ending at asOfSeq %d", s, rec.LastEvents[0].Seq, rec.NextSeq-1, a), nil
	}
	return "", nil
}

// logMismatch is mismatch, plus, when the log has records after the last one ss folded, the check
// that this record is still the log's (foldedRecordMismatch, cause causeIdentity). Errors are
// transient.
func (ss *sessState) logMismatch(ctx context.Context, st *store.Store, tail store.Tail, inc string, incKnown bool) (cause, desc string, err error) {
	cause, desc = ss.mismatch(tail, inc, incKnown)
	if cause == "" && tail.LastStreamSeq > ss.streamSeq {
		if desc, err = foldedRecordMismatch(ctx, st, ss); err != nil {
			return "", "", err
		}
		if desc != "" {
			cause = causeIdentity
		}
	}
	return cause, desc, nil
}

// refold returns a fresh fold of the session's whole log (header h, incarnation inc) in place of
// ss, keeping ss's stored revisions for the compare-and-swap; every unit is to be written. cause
// and desc say why ss did not match the log: when it had folded records the log no longer holds
// (causeTailLost, causeIdentity), the fresh state records that loss (lossOf), and a loss recorded
// before is kept for the same incarnation. Errors are transient.
func refold(ctx context.Context, st *store.Store, defs []*Definition, ss *sessState, h session.Header, inc, cause, desc string) (*sessState, error) {
	fresh := newSessState(defs, ss.token, h)
	fresh.incarnation = inc
	for i, u := range fresh.units {
		u.rev = ss.units[i].rev
	}
	if err := catchUp(ctx, st, fresh); err != nil {
		return nil, err
	}
	for _, u := range fresh.units {
		u.written = false
	}
	fresh.dirty = true
	if inc == ss.incarnation {
		loss := lossOf(ss, fresh, cause, desc)
		if loss != nil && cause == causeIdentity && fresh.folded() >= ss.folded() {
			// A log restored from its archive holds the folded events again, in records written
			// after the last one folded (a restore's Nats-Msg-Id): nothing was lost.
			sh, err := st.Session(ss.id)
			if err != nil {
				return nil, err
			}
			first, restored, err := sh.Restored(ctx)
			if err != nil {
				return nil, &transientError{fmt.Errorf("session %q: %w", ss.id, err)}
			}
			if restored && first > ss.streamSeq {
				loss = nil
			}
		}
		fresh.lost = mergeLoss(ss.lost, loss)
	}
	return fresh, nil
}

// lossOf is the loss a refold for cause found: the seqs ss had folded that fresh, the fold of the
// log as it is, no longer holds (from the log's end to ss's last seq), or at least ss's last seq
// when the log holds other events there now. nil for a refold that lost nothing (a re-created
// session, an upgrade) and for a session without incarnation (a re-created one looks the same).
func lossOf(ss, fresh *sessState, cause, desc string) *client.DataLoss {
	a := ss.folded()
	if cause != causeTailLost && cause != causeIdentity || a < 0 || ss.incarnation == "" {
		return nil
	}
	return &client.DataLoss{FromSeq: min(fresh.folded()+1, a), ToSeq: a, StreamSeq: ss.streamSeq, Detail: desc,
		DetectedAt: time.Now().UnixMilli()}
}

// mergeLoss returns the loss covering l and m (either may be nil; nil when both are): the widest
// seq range, with m's detail and time.
func mergeLoss(l, m *client.DataLoss) *client.DataLoss {
	switch {
	case l == nil:
		return m
	case m == nil:
		return l
	}
	out := *m
	out.FromSeq, out.ToSeq = min(l.FromSeq, m.FromSeq), max(l.ToSeq, m.ToSeq)
	return &out
}

// verify checks ss against the current log and incarnation, and refolds it when they differ.
// It returns the state to use (ss itself when it matches), the cause ("" when it matched) and a
// description. Errors are transient.
func verify(ctx context.Context, st *store.Store, defs []*Definition, ss *sessState) (*sessState, string, string, error) {
	var h session.Header
	var inc string
	var known bool
	if m := ss.meta; m != nil {
		h, inc, known, ss.meta = m.h, m.inc, m.known, nil // read by loadSession just before
	} else {
		var err error
		if h, inc, known, err = sessionMeta(ctx, st, ss.id); err != nil {
			return nil, "", "", err
		}
	}
	if g := ss.gate(); known && g.rev == 0 && g.asOfSeq < 0 && g.err == nil {
		// Nothing folded yet of a session that exists: there is no folded log to compare with
		// the current one (mismatch and foldedRecordMismatch find nothing), so the tail is not
		// read (a leader get of a subject's last record costs the server a block load).
		if ss.incarnation == "" {
			ss.incarnation = inc
		}
		ss.checkedSeq = ss.streamSeq
		return ss, "", "", nil
	}
	sh, err := st.Session(ss.id)
	if err != nil {
		return nil, "", "", err
	}
	tail, err := sh.TailFromLeader(ctx)
	if err != nil {
		var te *transientError
		if !errors.As(err, &te) && isSessionError(err) {
			// The last record does not decode: the fold stops the session there; nothing to compare.
			return ss, "", "", nil
		}
		return nil, "", "", &transientError{fmt.Errorf("session %q: %w", ss.id, err)}
	}
	if !known && tail.LastStreamSeq == 0 {
		ss.gone = true // removed (or being removed): nothing to fold, nothing to keep
		return ss, "", "", nil
	}
	cause, desc, err := ss.logMismatch(ctx, st, tail, inc, known)
	if err != nil {
		return nil, "", "", err
	}
	if cause == "" {
		if ss.incarnation == "" && known && inc != "" && ss.gate().rev == 0 {
			ss.incarnation = inc
		}
		ss.checkedSeq = ss.streamSeq
		return ss, "", "", nil
	}
	if !known {
		inc = ss.incarnation
	}
	fresh, err := refold(ctx, st, defs, ss, h, inc, cause, desc)
	if err != nil {
		return nil, "", "", err
	}
	return fresh, cause, desc, nil
}

// Refolds returns how many times this instance found a stored state that did not belong to its
// session's current log (lost records, a purge, a re-create) and refolded it from the log.
func (p *Projector) Refolds() int64 { return p.refolds.Load() }

// noteRefold logs and counts a refold (legacy upgrades are logged at debug level, not counted).
func (p *Projector) noteRefold(where, id, cause, desc string, fresh *sessState) {
	if cause == causeLegacy {
		p.logger.Debug("projector: stored state upgraded: refolded from the log", "session", id, "where", where, "asOfSeq", fresh.folded(), "streamSeq", fresh.streamSeq)
		return
	}
	p.refolds.Add(1)
	p.logger.Warn("projector: stored state does not match the session's log; refolded from the log",
		"session", id, "cause", cause, "detail", desc, "where", where, "asOfSeq", fresh.folded(), "streamSeq", fresh.streamSeq, "incarnation", fresh.incarnation)
	if l := fresh.lost; l != nil && (cause == causeTailLost || cause == causeIdentity) {
		p.logger.Error("projector: the session's log lost acknowledged records; readers are told (client.ErrDataLoss)",
			"session", id, "fromSeq", l.FromSeq, "toSeq", l.ToSeq, "streamSeq", l.StreamSeq, "detail", l.Detail)
	}
}

// isSessionError reports whether err is (or wraps) a *session.Error: a bad log, not a failure.
func isSessionError(err error) bool {
	var se *session.Error
	return errors.As(err, &se)
}

// checkStored is verify for the stored messages value raw (KV revision rev) of session id: it
// returns the projection to answer from and its stored value, refolded from the log (and written
// back, best effort) when the stored one does not belong to the current log. A session being
// removed is errSessionRemoving, one with neither metadata nor records errSessionGone; other
// errors are transient.
func (s *queryService) checkStored(ctx context.Context, id, token string, raw []byte, rev uint64) (Projection, []byte, error) {
	g := newUnitState(s.defs[0], &session.Header{ID: id})
	decodeUnit(g, raw, rev)
	ss := &sessState{token: token, id: id, units: []*unitState{g}, hdr: g.hdr}
	ss.takePosition()
	h, inc, known, removing, err := sessionMetaState(ctx, s.store, id)
	s.metrics.storeRequest(reqMetadata, 1)
	if err != nil {
		return Projection{}, nil, err
	}
	if removing {
		return Projection{}, nil, errSessionRemoving
	}
	if known && inc != "" && inc == ss.incarnation && !ss.legacy && ss.streamSeq != 0 && !ss.stopped() {
		// The node cache's read of the log up to the state's last record (which a messages
		// answer reads anyway) shows that the record is there and ends at asOfSeq: no tail read.
		ok, err := s.nodes.verify(ctx, s.store, id, LogPosition{Incarnation: inc, StreamSeq: ss.streamSeq}, ss.folded())
		if err != nil {
			return Projection{}, nil, err
		}
		if ok {
			proj, _, err := decodeProjection(raw)
			return proj, raw, err
		}
	}
	sh, err := s.store.Session(id)
	if err != nil {
		return Projection{}, nil, err
	}
	tail, err := sh.TailFromLeader(ctx)
	s.metrics.storeRequest(reqTail, 1)
	if err == nil && tail.LastStreamSeq > ss.streamSeq && ss.streamSeq != 0 {
		s.metrics.storeRequest(reqRecord, 1) // logMismatch reads the last record folded
	}
	if err != nil && !isSessionError(err) {
		return Projection{}, nil, err
	}
	var cause, desc string
	if err == nil && !known && tail.LastStreamSeq == 0 {
		// Removed (or being removed): a state stored for it is not an empty session.
		return Projection{}, nil, errSessionGone
	}
	if err == nil {
		if cause, desc, err = ss.logMismatch(ctx, s.store, tail, inc, known); err != nil {
			return Projection{}, nil, err
		}
	}
	if cause == "" {
		proj, _, err := decodeProjection(raw)
		return proj, raw, err
	}
	full, err := loadSession(ctx, s.store, s.defs, token, id)
	if err != nil {
		return Projection{}, nil, err
	}
	if !known {
		inc = full.incarnation
	}
	fresh, err := refold(ctx, s.store, s.defs, full, h, inc, cause, desc)
	if err != nil {
		return Projection{}, nil, err
	}
	// Best effort: a conflict means the owner wrote meanwhile; the answer is this fold all the same.
	_, _ = writeSessions(ctx, s.store.JetStream(), []*sessState{fresh})
	s.nodes.drop(id)
	s.refolded("query", id, cause, desc, fresh)
	b, err := fresh.gate().encode(fresh.position())
	if err != nil {
		return Projection{}, nil, err
	}
	proj, _, err := decodeProjection(b)
	return proj, b, err
}
