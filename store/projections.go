package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/agentlog/agentlog/wire"
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

// WatchProjection watches the session's stored state of projection unit (nats.go's KV Watch of
// key <unit>.<token>, with its options). Errors are the KV's and a bad unit name.
func (ss *Session) WatchProjection(ctx context.Context, unit string, opts ...natsjs.WatchOpt) (natsjs.KeyWatcher, error) {
	if err := ss.checkProjections(unit); err != nil {
		return nil, err
	}
	return ss.s.projections.Watch(ctx, wire.ProjectionKey(unit, ss.tok), opts...)
}

// WatchProjections watches every stored projection state of the session (keys *.<token>; the
// unit is the key's first token), with the options of nats.go's KV Watch.
func (ss *Session) WatchProjections(ctx context.Context, opts ...natsjs.WatchOpt) (natsjs.KeyWatcher, error) {
	if ss.s.projections == nil {
		return nil, ss.noStore()
	}
	return ss.s.projections.WatchFiltered(ctx, []string{wire.ProjectionKeysFilter(ss.tok)}, opts...)
}

// WatchUnit watches the stored state of projection unit of every session (keys <unit>.*), with
// the options of nats.go's KV Watch: one watch for a service that waits on the states of many
// sessions. Errors are the KV's and a bad unit name.
func (s *Store) WatchUnit(ctx context.Context, unit string, opts ...natsjs.WatchOpt) (natsjs.KeyWatcher, error) {
	if err := wire.CheckUnit(unit); err != nil {
		return nil, err
	}
	if s.projections == nil {
		return nil, errors.New("the store has no agentlog_projections bucket")
	}
	return s.projections.Watch(ctx, wire.ProjectionKey(unit, "*"), opts...)
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
