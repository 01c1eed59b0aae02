package projector

import (
	"context"

	"github.com/agentlog/agentlog/store"
)

// startLineage starts the fresh units of ss (those not decoded from a stored value) that read
// the session header (Def.InitSession) from the real header, which it reads once and keeps in
// ss. It reads nothing when no such unit is fresh.
func (ss *sessState) startLineage(ctx context.Context, st *store.Store, fresh []*unitState) error {
	need := false
	for _, u := range fresh {
		need = need || u.def.lineage
	}
	if !need {
		return nil
	}
	h, inc, known, err := sessionMeta(ctx, st, ss.id)
	if err != nil {
		return err
	}
	ss.meta = &sessMeta{h: h, inc: inc, known: known}
	*ss.hdr = h // shared by every unitState of ss
	for _, u := range fresh {
		if u.def.lineage {
			u.state, u.enc = u.def.init(h), nil
		}
	}
	return nil
}
