package projector

import (
	"context"
	"errors"
	"fmt"

	ajs "github.com/agentlog/agentlog/jetstream"
	"github.com/agentlog/agentlog/session"
)

// sessionHeader reads a session's header from agentlog_sessions. A session without one (a log
// written without metadata) gets a header naming only its id; a failed read is transient.
func sessionHeader(ctx context.Context, store *ajs.Store, id string) (session.Header, error) {
	h, err := store.GetSession(ctx, id)
	switch {
	case err == nil:
		return h, nil
	case errors.Is(err, ajs.ErrSessionNotFound):
		return session.Header{ID: id}, nil
	}
	return session.Header{}, &transientError{fmt.Errorf("session %q: reading its header: %w", id, err)}
}

// startLineage starts the fresh units of ss (those not decoded from a stored value) that read
// the session header (Def.InitSession) from the real header, which it reads once and keeps in
// ss. It reads nothing when no such unit is fresh.
func (ss *sessState) startLineage(ctx context.Context, store *ajs.Store, fresh []*unitState) error {
	need := false
	for _, u := range fresh {
		need = need || u.def.lineage
	}
	if !need {
		return nil
	}
	h, err := sessionHeader(ctx, store, ss.id)
	if err != nil {
		return err
	}
	*ss.hdr = h // shared by every unitState of ss
	for _, u := range fresh {
		if u.def.lineage {
			u.state, u.enc = u.def.init(h), nil
		}
	}
	return nil
}
