package client

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// UnitStatus is one projection unit's stored state of a session: its asOfSeq (-1: nothing
// applied), Lag = the session's LastSeq - AsOfSeq (events not folded yet), and Error when stopped.
type UnitStatus struct {
	Unit         string           `json:"unit"`
	StateVersion int              `json:"stateVersion"`
	AsOfSeq      int64            `json:"asOfSeq"`
	Lag          int64            `json:"lag"`
	Error        *ProjectionError `json:"error,omitempty"`
}

// StoppedUnit is a unit stopped for a session: the seq of the first event not applied and the
// rule it broke.
type StoppedUnit struct {
	Session string       `json:"session"`
	Seq     int64        `json:"seq"`
	Unit    string       `json:"unit"`
	Rule    session.Rule `json:"rule"`
	Message string       `json:"message"`
}

// Status is a session's state: its header fields (ParentSession nil: not a fork), its log's last seq (-1: no events), the open
// turn as of the messages unit's asOfSeq (nil: none, or no messages state yet), every stored
// unit (sorted by name), the stopped ones, and its fork children (sorted).
type Status struct {
	ID            string        `json:"id"`
	CreatedAt     int64         `json:"createdAt"`
	LastSeq       int64         `json:"lastSeq"`
	Events        int64         `json:"events"`
	OpenTurn      *int64        `json:"openTurn"`
	ParentSession *string       `json:"parentSession"`
	SeedLength    *int64        `json:"seedLength"`
	Children      []string      `json:"children"`
	Units         []UnitStatus  `json:"units"`
	Stopped       []StoppedUnit `json:"stopped"`
	// State is where its log lives: "active" (the hot stream; also a session without events) or
	// "archived" (cold storage; a write restores it). Hold is true under a legal hold, with its
	// reason.
	State      string `json:"state"`
	Hold       bool   `json:"hold"`
	HoldReason string `json:"holdReason,omitempty"`
}

// Status reads session id's status from agentlog_sessions, the stream (or the archive) and
// agentlog_projections (or the archive's projection states). Children come from the lineage
// index (AGENTLOG_CHILDREN), each checked against its metadata. Errors: ErrNotFound (no metadata;
// ErrRemoving too for a session being removed),
// ErrBadRequest (invalid id), ErrInternal.
func (c *Client) Status(ctx context.Context, id string) (Status, error) {
	ss, err := c.session(ctx, id)
	if err != nil {
		return Status{}, err
	}
	st, tok := ss.Store(), ss.Token()
	info, found, err := lookup(ctx, ss)
	if err != nil {
		return Status{}, err
	}
	if !found {
		return Status{}, notFoundError(id)
	}
	loc, err := ss.Locate(ctx)
	if err != nil {
		return Status{}, &Error{Code: CodeInternal, Session: id, Description: "locate the log", Err: err}
	}
	h := info.Header
	next := loc.NextSeq()
	s := Status{ID: id, CreatedAt: h.CreatedAt, LastSeq: next - 1, Events: next,
		SeedLength: h.SeedLength, Children: []string{},
		Units: []UnitStatus{}, Stopped: []StoppedUnit{}, State: string(store.StateActive)}
	if h.ParentSession != "" {
		s.ParentSession = &h.ParentSession
	}
	if hold, err := ss.GetHold(ctx); err == nil {
		s.Hold, s.HoldReason = true, hold.Reason
	} else if !errors.Is(err, store.ErrNoHold) {
		return Status{}, &Error{Code: CodeInternal, Session: id, Description: "read the hold", Err: err}
	}
	if children, err := c.children(ctx, st, id); err != nil {
		return Status{}, err
	} else {
		s.Children = children
	}
	unit := func(name string, value []byte) error {
		var v struct {
			StateVersion int              `json:"stateVersion"`
			AsOfSeq      int64            `json:"asOfSeq"`
			State        json.RawMessage  `json:"state"`
			Error        *ProjectionError `json:"error"`
		}
		if err := json.Unmarshal(value, &v); err != nil {
			return &Error{Code: CodeInternal, Session: id, Description: "projection " + name + " does not decode", Err: err}
		}
		s.Units = append(s.Units, UnitStatus{Unit: name, StateVersion: v.StateVersion, AsOfSeq: v.AsOfSeq, Lag: s.LastSeq - v.AsOfSeq, Error: v.Error})
		if v.Error != nil {
			s.Stopped = append(s.Stopped, StoppedUnit{Session: id, Seq: v.Error.Seq, Unit: name, Rule: v.Error.Rule, Message: v.Error.Message})
		}
		if name == "messages" {
			var ms State
			if json.Unmarshal(v.State, &ms) == nil {
				s.OpenTurn = ms.OpenTurn
			}
		}
		return nil
	}
	if loc.State == store.StateArchived {
		s.State = string(store.StateArchived)
		a, err := ss.ReadArchive(ctx)
		if err != nil {
			return Status{}, &Error{Code: CodeInternal, Session: id, Description: "read the archive", Err: err}
		}
		for name, value := range a.Projections {
			if err := unit(name, value); err != nil {
				return Status{}, err
			}
		}
		slices.SortFunc(s.Units, func(a, b UnitStatus) int { return strings.Compare(a.Unit, b.Unit) })
		slices.SortFunc(s.Stopped, func(a, b StoppedUnit) int { return strings.Compare(a.Unit, b.Unit) })
		return s, nil
	}

	w, err := ss.WatchProjections(ctx, natsjs.IgnoreDeletes())
	if err != nil {
		return Status{}, &Error{Code: CodeInternal, Session: id, Description: "read projections", Err: err}
	}
	defer func() { _ = w.Stop() }()
	for e := range w.Updates() {
		if e == nil {
			break // the stored values are all delivered
		}
		name, ok := strings.CutSuffix(e.Key(), "."+tok)
		if !ok {
			continue
		}
		if err := unit(name, e.Value()); err != nil {
			return Status{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return Status{}, &Error{Code: CodeTimeout, Session: id, Description: "read projections", Err: err}
	}
	slices.SortFunc(s.Units, func(a, b UnitStatus) int { return strings.Compare(a.Unit, b.Unit) })
	slices.SortFunc(s.Stopped, func(a, b StoppedUnit) int { return strings.Compare(a.Unit, b.Unit) })
	return s, nil
}

// children returns the sessions whose parentSession is id, sorted: the lineage index's links,
// each checked against the child's metadata (a link left by a create that failed, or by a child
// removed, is skipped).
func (c *Client) children(ctx context.Context, st *store.Store, id string) ([]string, error) {
	m, err := childrenIndexed(ctx, st, []string{id})
	if err != nil {
		return nil, err
	}
	out := m[id]
	if out == nil {
		out = []string{}
	}
	return out, nil
}

// childrenIndexed maps each of ids to its children (sorted): one batched read of the lineage index and
// one of the children's metadata.
func childrenIndexed(ctx context.Context, st *store.Store, ids []string) (map[string][]string, error) {
	toks := make([]string, 0, len(ids))
	byTok := map[string]string{}
	for _, id := range ids {
		if t, err := wire.Token(id); err == nil {
			toks = append(toks, t)
			byTok[t] = id
		}
	}
	links, err := st.ChildTokens(ctx, toks)
	if err != nil {
		return nil, &Error{Code: CodeInternal, Description: "read the lineage index", Err: err}
	}
	var childToks []string
	for _, cs := range links {
		childToks = append(childToks, cs...)
	}
	metas, err := st.SessionEntries(ctx, childToks)
	if err != nil {
		return nil, &Error{Code: CodeInternal, Description: "read the children's metadata", Err: err}
	}
	out := map[string][]string{}
	for ptok, cs := range links {
		parent := byTok[ptok]
		for _, ct := range cs {
			e, ok := metas[ct]
			if !ok || e.Header.ParentSession != parent {
				continue
			}
			out[parent] = append(out[parent], e.Header.ID)
		}
		slices.Sort(out[parent])
	}
	return out, nil
}
