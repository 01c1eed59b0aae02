package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// The session's entries of agentlog_projections: key wire.ProjectionKey(unit, token), one per
// projection unit, written by the projectors (a revision compare-and-swap on the key's KV
// subject, wire.KVSubject) and read here.

// ProjectionEntry reads the session's stored state of projection unit (the KV entry of key
// <unit>.<token>). Errors are the KV's, as nats.go returns them (jetstream.ErrKeyNotFound when
// there is none), and a bad unit name (wire.CheckUnit).
func (ss *Session) ProjectionEntry(ctx context.Context, unit string) (natsjs.KeyValueEntry, error) {
	if err := ss.checkProjections(unit); err != nil {
		return nil, err
	}
	return ss.s.projections.Get(ctx, wire.ProjectionKey(unit, ss.tok))
}

// ProjectionState is one stored projection state of a session, as ProjectionStates reads it.
type ProjectionState struct {
	Unit     string // the key's first token
	Value    []byte
	Revision uint64 // the entry's stream seq in agentlog_projections
}

// ProjectionStates reads every stored projection state of the session (keys *.<token>), deleted
// keys left out, sorted by unit: one batched direct get (multi_last), which any replica may
// answer. Errors are the store's.
func (ss *Session) ProjectionStates(ctx context.Context) ([]ProjectionState, error) {
	if ss.s.projections == nil {
		return nil, ss.noStore()
	}
	prefix := wire.KVSubject(wire.ProjectionsBucket, "")
	msgs, err := ss.s.lastMsgs(ctx, "KV_"+wire.ProjectionsBucket, []string{prefix + wire.ProjectionKeysFilter(ss.tok)})
	if err != nil {
		return nil, fmt.Errorf("session %q: read its projection states (KV bucket %s): %w", ss.id, wire.ProjectionsBucket, err)
	}
	var out []ProjectionState
	for _, m := range msgs {
		if kvDeleted(m.Header) {
			continue
		}
		unit, _, _ := strings.Cut(strings.TrimPrefix(m.Subject, prefix), ".")
		out = append(out, ProjectionState{Unit: unit, Value: m.Data, Revision: m.Sequence})
	}
	slices.SortFunc(out, func(a, b ProjectionState) int { return strings.Compare(a.Unit, b.Unit) })
	return out, nil
}

// SubscribeProjection calls fn (on the connection's goroutine: keep it short) each time a state of
// projection unit of the session is stored (a core subscription on its republished subject,
// wire.ProjectionWakePrefix.<unit>.<token>, or on a bucket provisioned before that republish on its
// KV subject: a wake-up only, to be followed by a get of the stored value, ProjectionEntry). unit "*" is every unit. Unsubscribe the subscription when done.
func (ss *Session) SubscribeProjection(unit string, fn func(unit string)) (*nats.Subscription, error) {
	if unit != "*" {
		if err := ss.checkProjections(unit); err != nil {
			return nil, err
		}
	}
	return ss.s.subscribeProjections(unit, ss.tok, func(unit, _ string) { fn(unit) })
}

// SubscribeUnit calls fn with the session token each time a state of projection unit of any
// session is published (a core subscription on <unit>.* of agentlog_projections, a wake-up as
// SubscribeProjection's): one subscription for a service that waits on the states of many
// sessions. Errors are the connection's and a bad unit name.
func (s *Store) SubscribeUnit(unit string, fn func(token string)) (*nats.Subscription, error) {
	if err := wire.CheckUnit(unit); err != nil {
		return nil, err
	}
	return s.subscribeProjections(unit, "*", func(_, tok string) { fn(tok) })
}

// subscribeProjections subscribes to the KV subjects of keys <unit>.<token> of agentlog_projections
// (either may be "*"), republished (projectionWakes) or, on a bucket without that, on their own
// subjects, and calls fn with each stored key's unit and token.
func (s *Store) subscribeProjections(unit, tok string, fn func(unit, tok string)) (*nats.Subscription, error) {
	if s.js == nil || s.projections == nil {
		return nil, errors.New("the store has no agentlog_projections bucket (use Provision or Open to get a Store)")
	}
	prefix := wire.KVSubject(wire.ProjectionsBucket, "")
	if s.projectionWakes {
		prefix = wire.ProjectionWakePrefix + "."
	}
	subject := prefix + unit + "." + tok
	sub, err := s.js.Conn().Subscribe(subject, func(m *nats.Msg) {
		u, t, ok := strings.Cut(strings.TrimPrefix(m.Subject, prefix), ".")
		if ok {
			fn(u, t)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe to %s: %w", subject, err)
	}
	return sub, nil
}

// checkProjections refuses a bad unit name and a Store without the bucket.
func (ss *Session) checkProjections(unit string) error {
	if err := wire.CheckUnit(unit); err != nil {
		return fmt.Errorf("session %q: %w", ss.id, err)
	}
	if ss.s.projections == nil {
		return ss.noStore()
	}
	return nil
}

// SessionIDs returns the ids of every session with an entry in agentlog_sessions, sorted: those
// being removed (their entry marked, wire.DeletingHeader) too. A key that is not a canonical
// token is skipped.
func (s *Store) SessionIDs(ctx context.Context) ([]string, error) {
	if s.sessions == nil {
		return nil, errors.New("list sessions: the store is not open (use Provision or Open to get a Store)")
	}
	keys, err := s.sessions.ListKeys(ctx)
	if errors.Is(err, natsjs.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list sessions (KV bucket %s): %w", wire.SessionsBucket, err)
	}
	var ids []string
	for k := range keys.Keys() {
		if id, err := wire.IDFromToken(k); err == nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}
