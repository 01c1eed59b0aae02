package projector

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
)

// archivedView is what the query service answers an archived session from: the projection states
// its archive holds (no fold), or, for units whose archived state is missing or of another
// stateVersion, a fold of the archived events.
type archivedView struct {
	archiveID string
	events    map[int64]session.Event // the surface events, by seq
	messages  Projection
	raw       []byte // the messages value, as stored (or as a fold encodes it)
	snap      client.SnapshotReply
}

// archivedCache keeps the views of the archives read last (by token), each valid for its archive
// id: an archive never changes under an id.
type archivedCache struct {
	mu    sync.Mutex
	views map[string]*archivedView
	order []string
}

const archivedCacheSize = 64

func (c *archivedCache) get(tok, archiveID string) *archivedView {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v := c.views[tok]; v != nil && v.archiveID == archiveID {
		return v
	}
	return nil
}

func (c *archivedCache) put(tok string, v *archivedView) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.views == nil {
		c.views = map[string]*archivedView{}
	}
	if _, ok := c.views[tok]; !ok {
		c.order = append(c.order, tok)
	}
	c.views[tok] = v
	for len(c.order) > archivedCacheSize {
		delete(c.views, c.order[0])
		c.order = c.order[1:]
	}
}

// archived returns the view of session ss when its log lives in cold storage only (ok false
// otherwise: a hot or unknown session).
func (s *queryService) archived(ctx context.Context, sh *store.Session) (*archivedView, bool, error) {
	loc, err := sh.Locate(ctx)
	if err != nil || loc.State != store.StateArchived {
		return nil, false, err
	}
	id, tok := sh.ID(), sh.Token()
	if v := s.archivedViews.get(tok, loc.Archive.ArchiveID); v != nil {
		return v, true, nil
	}
	a, err := sh.ReadArchive(ctx)
	if err != nil {
		return nil, false, err
	}
	h, events, err := a.Events()
	if err != nil {
		return nil, false, err
	}
	defs := s.registry.list()
	ss := newSessState(defs, tok, *h)
	complete := true
	for _, u := range ss.units {
		raw, ok := a.Projections[u.def.Key]
		if !ok || !decodeUnit(u, raw, 1) || (u.err == nil && u.asOfSeq != int64(len(events))-1) {
			complete = false
			break
		}
	}
	if !complete {
		// A unit without an archived state (added since, or behind when archived): fold the
		// archived events for every unit, as a projector would.
		ss = newSessState(defs, tok, *h)
		scanned := scanAll(events)
		lk := &logLookup{ctx: ctx, store: s.store, id: id, batch: scanned}
		if err := ss.apply(scanned, lk); err != nil {
			return nil, false, err
		}
	}
	v := &archivedView{archiveID: a.Head.ArchiveID, events: map[int64]session.Event{}}
	for _, ev := range events {
		if ev.Type == "user/message" || ev.Type == "assistant/message" || ev.Type == "tool/result" {
			v.events[ev.Seq] = ev
		}
	}
	g := ss.gate()
	v.messages = fromSurface(g.state.(*session.Surface))
	v.messages.Error = g.err
	if raw, ok := a.Projections["messages"]; ok && complete {
		v.raw = raw
	} else {
		v.raw, _ = json.Marshal(v.messages)
	}
	if v.snap, err = ss.views(); err != nil {
		return nil, false, err
	}
	s.archivedViews.put(tok, v)
	return v, true, nil
}
