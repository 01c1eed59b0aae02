package projector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrNoProjection is returned (wrapped) by ReadSnapshot for a session with no stored projection.
var ErrNoProjection = errors.New("no projection (unknown session, or none of its events projected yet)")

// ReadSnapshot reads the stored states of every unit of reg for session id and returns their
// views at one consistent asOfSeq. The states of one checkpoint are written together but not
// atomically, so a read that sees them at different seqs is repeated; units still behind after
// that (a unit registered since, or one whose stored stateVersion differs) are folded from the
// log here, to the end of the log, and written back with a revision compare-and-swap (the
// rebuild in place of a new stateVersion). Errors: ErrNoProjection (wrapped), a log or KV failure.
//
// A stored state that does not belong to the session's current log (records lost, a purge, a
// re-create: see the package doc) is refolded from the log here and written back.
func ReadSnapshot(ctx context.Context, sto *store.Store, reg *Registry, id string) (client.SnapshotReply, error) {
	return readSnapshot(ctx, sto, reg, id, nil)
}

// readSnapshot is ReadSnapshot; refolded, if not nil, is told of a refold.
func readSnapshot(ctx context.Context, sto *store.Store, reg *Registry, id string, refolded func(cause, desc string, fresh *sessState)) (client.SnapshotReply, error) {
	token, err := wire.Token(id)
	if err != nil {
		return client.SnapshotReply{}, err // names the id
	}
	defs := reg.list()
	var ss *sessState
	for attempt := 0; ; attempt++ {
		var consistent bool
		ss, consistent, err = loadAll(ctx, sto, defs, token, id)
		if err != nil {
			return client.SnapshotReply{}, err
		}
		if ss.gate().rev == 0 {
			return client.SnapshotReply{}, fmt.Errorf("session %q: %w", id, ErrNoProjection)
		}
		if consistent {
			break
		}
		if attempt == 10 {
			if err := catchUp(ctx, sto, ss); err != nil {
				return client.SnapshotReply{}, fmt.Errorf("folding the log: %w", err) // err names the session
			}
			_, _ = writeSessions(ctx, sto.JetStream(), []*sessState{ss}) // best effort; the owner reloads on conflict
			break
		}
		select {
		case <-ctx.Done():
			return client.SnapshotReply{}, ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 5 * time.Millisecond):
		}
	}
	ss.meta = nil // the metadata may have changed while this waited: verify reads it again
	fresh, cause, desc, err := verify(ctx, sto, defs, ss)
	if err != nil {
		return client.SnapshotReply{}, err
	}
	if cause != "" {
		_, _ = writeSessions(ctx, sto.JetStream(), []*sessState{fresh}) // best effort, as above
		if refolded != nil {
			refolded(cause, desc, fresh)
		}
		ss = fresh
	}
	rep, err := ss.views()
	if err != nil {
		return client.SnapshotReply{}, err
	}
	for _, u := range rep.Units {
		if u.Error == nil {
			rep.AsOfSeq = max(rep.AsOfSeq, u.AsOfSeq)
		}
	}
	return rep, nil
}

// views returns every unit's view of ss, at the messages unit's asOfSeq.
func (ss *sessState) views() (client.SnapshotReply, error) {
	rep := client.SnapshotReply{Session: ss.id, AsOfSeq: ss.gate().asOfSeq, Units: map[string]client.UnitView{}}
	for _, u := range ss.units {
		var st any = u.state
		if u.def.gate {
			st = fromSurface(u.state.(*session.Surface)).State
		}
		b, err := json.Marshal(u.def.view(st))
		if err != nil {
			return client.SnapshotReply{}, fmt.Errorf("session %q: unit %q: encoding its view: %w", ss.id, u.def.Key, err)
		}
		rep.Units[u.def.Key] = client.UnitView{StateVersion: u.def.StateVersion, AsOfSeq: u.asOfSeq, View: b, Error: u.err}
	}
	return rep, nil
}

// loadAll reads every unit's stored state; consistent reports whether they all stand at the
// messages unit's asOfSeq (units stopped by an error excepted) with the registered stateVersion.
func loadAll(ctx context.Context, sto *store.Store, defs []*Definition, token, id string) (*sessState, bool, error) {
	sh, err := sto.Session(id)
	if err != nil {
		return nil, false, err
	}
	ss := &sessState{token: token, id: id, hdr: &session.Header{ID: id}}
	consistent := true
	var fresh []*unitState
	for _, d := range defs {
		u := newUnitState(d, ss.hdr)
		ss.units = append(ss.units, u)
		e, err := sh.ProjectionEntry(ctx, d.Key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			consistent = false
			fresh = append(fresh, u)
			continue
		}
		if err != nil {
			return nil, false, &transientError{fmt.Errorf("session %q: loading projection %s: %w", id, wire.ProjectionKey(d.Key, token), err)}
		}
		if !decodeUnit(u, e.Value(), e.Revision()) {
			consistent = false
			fresh = append(fresh, u)
		}
	}
	if ss.gate().rev != 0 {
		if err := ss.startLineage(ctx, sto, fresh); err != nil {
			return nil, false, err
		}
	}
	ss.takePosition()
	g := ss.gate()
	for _, u := range ss.units[1:] {
		if u.err == nil && u.asOfSeq != g.asOfSeq || u.err != nil && g.err == nil && u.asOfSeq > g.asOfSeq {
			consistent = false
		}
	}
	return ss, consistent, nil
}

// answerSnapshot serves client.SnapshotSubject (and client.ProjectionSubject when q.Unit is set).
func (s *queryService) answerSnapshot(ctx context.Context, q query, _ Projection, _ []byte) ([]byte, error) {
	if q.Unit != "" && s.registry.get(q.Unit) == nil {
		return nil, replyErr(client.CodeNotFound, "session %q: no projection unit %q is registered (units: %v)", q.Session, q.Unit, s.registry.Keys())
	}
	var snap client.SnapshotReply
	var err error
	if q.archived != nil {
		snap = q.archived.snap
	} else {
		snap, err = readSnapshot(ctx, s.store, s.registry, q.Session, func(cause, desc string, fresh *sessState) {
			s.refolded("snapshot", q.Session, cause, desc, fresh)
		})
	}
	if errors.Is(err, ErrNoProjection) {
		return nil, err // names the session
	}
	if err != nil {
		return nil, fmt.Errorf("session %q: reading the snapshot: %w", q.Session, err)
	}
	var b []byte
	if q.Unit != "" {
		b, err = json.Marshal(client.ProjectionReply{Session: q.Session, Unit: q.Unit, UnitView: snap.Units[q.Unit]})
	} else {
		b, err = json.Marshal(snap)
	}
	if err != nil {
		return nil, fmt.Errorf("session %q: encoding the reply: %w", q.Session, err)
	}
	return b, nil
}
