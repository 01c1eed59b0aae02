package client

import (
	"context"
	"encoding/json"
	"slices"
	"strings"

	"github.com/agentlog/agentlog/session"
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
}

// Status reads session id's status from agentlog_sessions, the stream and agentlog_projections.
// Children are found by a pass over agentlog_sessions (every header's parentSession): its cost
// grows with the number of sessions (about 0.3 s per 100,000). Errors: ErrNotFound (no metadata;
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
	tail, err := ss.Tail(ctx)
	if err != nil {
		return Status{}, &Error{Code: CodeInternal, Session: id, Description: "read the log's tail", Err: err}
	}
	h := info.Header
	s := Status{ID: id, CreatedAt: h.CreatedAt, LastSeq: tail.NextSeq - 1, Events: tail.NextSeq,
		SeedLength: h.SeedLength, Children: []string{},
		Units: []UnitStatus{}, Stopped: []StoppedUnit{}}
	if h.ParentSession != "" {
		s.ParentSession = &h.ParentSession
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
		unit, ok := strings.CutSuffix(e.Key(), "."+tok)
		if !ok {
			continue
		}
		var v struct {
			StateVersion int              `json:"stateVersion"`
			AsOfSeq      int64            `json:"asOfSeq"`
			State        json.RawMessage  `json:"state"`
			Error        *ProjectionError `json:"error"`
		}
		if err := json.Unmarshal(e.Value(), &v); err != nil {
			return Status{}, &Error{Code: CodeInternal, Session: id, Description: "projection " + e.Key() + " does not decode", Err: err}
		}
		s.Units = append(s.Units, UnitStatus{Unit: unit, StateVersion: v.StateVersion, AsOfSeq: v.AsOfSeq, Lag: s.LastSeq - v.AsOfSeq, Error: v.Error})
		if v.Error != nil {
			s.Stopped = append(s.Stopped, StoppedUnit{Session: id, Seq: v.Error.Seq, Unit: unit, Rule: v.Error.Rule, Message: v.Error.Message})
		}
		if unit == "messages" {
			var ms State
			if json.Unmarshal(v.State, &ms) == nil {
				s.OpenTurn = ms.OpenTurn
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return Status{}, &Error{Code: CodeTimeout, Session: id, Description: "read projections", Err: err}
	}
	slices.SortFunc(s.Units, func(a, b UnitStatus) int { return strings.Compare(a.Unit, b.Unit) })
	slices.SortFunc(s.Stopped, func(a, b StoppedUnit) int { return strings.Compare(a.Unit, b.Unit) })

	all, err := scanMeta(ctx, st, false)
	if err != nil {
		return Status{}, err
	}
	for _, m := range all {
		if m.parent == id {
			s.Children = append(s.Children, m.id)
		}
	}
	return s, nil
}
