package projector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// RebuildResult counts what Rebuild did: sessions rebuilt, sessions whose projection is stopped
// by a rule their log breaks (rebuilt up to it, with the error stored), and sessions with no
// events (nothing to write).
type RebuildResult struct {
	Sessions int
	Stopped  int
	Empty    int
}

// Rebuild recomputes unit's state of each session in ids (list every session with
// client.Client.SessionIDs, which leaves out the sessions being removed) from the session log,
// from seq 0, and stores it over the current value with a revision compare-and-swap; a session
// being removed meanwhile is skipped (counted nowhere). It runs next to live projectors (one that holds the session in memory gets a
// revision conflict at its next write, reloads the rebuilt state and goes on from it). The
// revision is read before the log, so a projector that writes meanwhile makes the swap fail and
// the session is rebuilt again: a rebuild never moves a state back. progress, if not nil, is
// called after each session with the count done and the total. Errors name the session.
func Rebuild(ctx context.Context, st *store.Store, reg *Registry, unit string, ids []string, progress func(done, total int)) (RebuildResult, error) {
	var res RebuildResult
	target := reg.get(unit)
	if target == nil {
		return res, fmt.Errorf("projector: no projection unit %q is registered (units: %v)", unit, reg.Keys())
	}
	defs := []*Definition{reg.list()[0]}
	if !target.gate {
		defs = append(defs, target)
	}
	for i, id := range ids {
		outcome, err := rebuildOne(ctx, st, defs, id)
		if err != nil {
			return res, err
		}
		switch outcome {
		case rebuiltEmpty:
			res.Empty++
		case rebuiltStopped:
			res.Stopped++
			res.Sessions++
		case rebuilt:
			res.Sessions++
		}
		if progress != nil {
			progress(i+1, len(ids))
		}
	}
	return res, nil
}

// What rebuildOne did with a session.
type rebuildOutcome int

const (
	rebuilt        rebuildOutcome = iota
	rebuiltStopped                // rebuilt up to a rule its log breaks
	rebuiltEmpty                  // no events: nothing written
	rebuildSkipped                // being removed: nothing written
)

// rebuildOne folds defs (the gate, then the unit) over one session's log and writes the last one.
func rebuildOne(ctx context.Context, st *store.Store, defs []*Definition, id string) (rebuildOutcome, error) {
	sh, err := st.Session(id)
	if err != nil {
		return rebuilt, err // names the id
	}
	token := sh.Token()
	d := defs[len(defs)-1]
	key := wire.ProjectionKey(d.Key, token)
	h, inc, _, removing, err := sessionMetaOf(ctx, st, id, true) // an incomplete child is folded too
	if err != nil {
		return rebuilt, err
	}
	if removing {
		return rebuildSkipped, nil // no state may be kept for it (the rm purges them)
	}
	for attempt := 0; attempt < casRetries; attempt++ {
		var rev uint64
		e, gerr := sh.ProjectionEntry(ctx, d.Key)
		switch {
		case gerr == nil:
			rev = e.Revision()
		case errors.Is(gerr, jetstream.ErrKeyNotFound):
		default:
			return rebuilt, fmt.Errorf("session %q: reading %s: %w", id, key, gerr)
		}
		ss := newSessState(defs, token, h)
		ss.incarnation = inc
		if err := catchUp(ctx, st, ss); err != nil {
			return rebuilt, fmt.Errorf("folding the log: %w", err) // err names the session
		}
		u := ss.units[len(ss.units)-1]
		if ss.gate().asOfSeq < 0 && ss.gate().err == nil {
			return rebuiltEmpty, nil // no events
		}
		u.rev = rev
		if !d.gate && u.err == nil {
			// The projector stops a session for good when its stored gate state outgrew KV (even
			// if a later compaction shrank the surface): the rebuilt unit stops with it.
			ge, gerr := sh.ProjectionEntry(ctx, defs[0].Key)
			if gerr != nil && !errors.Is(gerr, jetstream.ErrKeyNotFound) {
				return rebuilt, fmt.Errorf("session %q: reading %s: %w", id, wire.ProjectionKey(defs[0].Key, token), gerr)
			}
			var gv storedValue
			if gerr == nil && json.Unmarshal(ge.Value(), &gv) == nil && gv.Error != nil && gv.Error.Rule == session.RuleStateTooLarge {
				stopped := *gv.Error
				u.err = &stopped
				u.resetState()
			}
		}
		if g := ss.gate(); !d.gate && g.err == nil && u.err == nil {
			// The gate is not written here, so writeSessions would not see that its state is too
			// large to store: the projector has stopped the session there; stop the unit too.
			if b, err := g.encode(ss.position()); err == nil {
				if limit := maxStateBytes(st.JetStream()); limit > 0 && int64(len(b)) > limit {
					stopTooLarge(ss, g, len(b), limit)
				}
			}
		}
		for _, o := range ss.units[:len(ss.units)-1] {
			o.written = true // only the rebuilt unit is written
		}
		u.written = false
		conflicts, werr := writeSessions(ctx, st.JetStream(), []*sessState{ss})
		if werr != nil {
			return rebuilt, fmt.Errorf("session %q: writing %s: %w", id, key, werr)
		}
		if len(conflicts) == 0 {
			if u.err != nil {
				return rebuiltStopped, nil
			}
			return rebuilt, nil
		}
	}
	return rebuilt, fmt.Errorf("session %q: %s kept changing during the rebuild (%d revision conflicts)", id, key, casRetries)
}
