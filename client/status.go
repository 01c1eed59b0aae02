package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
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
	ID            string  `json:"id"`
	CreatedAt     int64   `json:"createdAt"`
	LastSeq       int64   `json:"lastSeq"`
	Events        int64   `json:"events"`
	OpenTurn      *int64  `json:"openTurn"`
	ParentSession *string `json:"parentSession"`
	SeedLength    *int64  `json:"seedLength"`
	// ParentRemoved: the parent session has no metadata any more (agentlog rm); the fork keeps
	// its own copy of the seed.
	ParentRemoved bool          `json:"parentRemoved,omitempty"`
	Children      []string      `json:"children"`
	Units         []UnitStatus  `json:"units"`
	Stopped       []StoppedUnit `json:"stopped"`
	// DataLoss, when set, names acknowledged records the log no longer holds: its metadata or
	// its projections name them (Status then returns ErrDataLoss too).
	DataLoss *DataLoss `json:"dataLoss,omitempty"`
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
// A session whose log lost acknowledged records (its metadata or its projections name records the
// stream no longer has) comes back whole, with DataLoss set, and an ErrDataLoss naming the seqs.
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
		Units: []UnitStatus{}, Stopped: []StoppedUnit{}, State: StateActive}
	if h.ParentSession != "" {
		s.ParentSession = &h.ParentSession
	}
	if hold, err := ss.GetHold(ctx); err == nil {
		s.Hold, s.HoldReason = true, hold.Reason
	} else if !errors.Is(err, store.ErrNoHold) {
		return Status{}, &Error{Code: CodeInternal, Session: id, Description: "read the hold", Err: err}
	}
	if s.Children, err = c.children(ctx, st, id); err != nil {
		return Status{}, err
	}
	if h.ParentSession != "" {
		// The parent's metadata gone (agentlog rm): the fork keeps its copy, its link is marked.
		if ps, perr := st.Session(h.ParentSession); perr == nil {
			pinfo, found, err := lookup(ctx, ps)
			if err != nil && !errors.Is(err, ErrNotFound) {
				return Status{}, err
			}
			// A parent created after its child (a later metadata revision) is another session
			// of the same id: the child's parent was removed.
			s.ParentRemoved = !found || err != nil || pinfo.Revision > info.Revision
		}
	}
	if tail.LastStreamSeq == 0 { // no hot record: archived, maybe
		loc, err := ss.Locate(ctx)
		if err != nil {
			return Status{}, &Error{Code: CodeInternal, Session: id, Description: "locate the log", Err: err}
		}
		if loc.State == store.StateArchived {
			return archivedStatus(ctx, ss, s, loc.NextSeq())
		}
	}

	var gate *folded // the messages unit's position, when it runs
	states, err := ss.ProjectionStates(ctx)
	if err != nil {
		return Status{}, &Error{Code: CodeInternal, Session: id, Description: "read projections", Err: err}
	}
	for _, e := range states {
		unit := e.Unit
		var v struct {
			StateVersion int              `json:"stateVersion"`
			AsOfSeq      int64            `json:"asOfSeq"`
			Log          *LogPosition     `json:"log"`
			State        json.RawMessage  `json:"state"`
			Error        *ProjectionError `json:"error"`
		}
		if err := json.Unmarshal(e.Value, &v); err != nil {
			return Status{}, &Error{Code: CodeInternal, Session: id, Description: "projection " + wire.ProjectionKey(unit, tok) + " does not decode", Err: err}
		}
		if v.Log != nil && (v.Log.Incarnation == info.Incarnation || info.Incarnation == "") {
			// A state of this session's log (one of an earlier incarnation is refolded anyway).
			s.DataLoss = mergeLoss(s.DataLoss, v.Log.Lost)
			if unit == "messages" && v.Error == nil {
				gate = &folded{asOfSeq: v.AsOfSeq, streamSeq: v.Log.StreamSeq}
			}
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
	lost, err := checkLoss(ctx, ss, h, tail, gate)
	if err != nil {
		return Status{}, err
	}
	s.DataLoss = mergeLoss(s.DataLoss, lost)

	if s.DataLoss != nil {
		return s, dataLossError("", id, *s.DataLoss)
	}
	return s, nil
}

// folded is where a state was folded to: its asOfSeq and the stream seq of its last record.
type folded struct {
	asOfSeq   int64
	streamSeq uint64
}

// checkLoss compares what the log holds (tail, a direct get) with what names its records: the
// header's seedLength (a fork's seed is written whole, so a child holding fewer events lost
// some) and gate, the messages unit's position (the records it folded must still be there, as
// the projector checks). A suspected loss is read again from the stream leader (a direct get may
// be answered by a lagging follower). It returns the loss found, or nil.
func checkLoss(ctx context.Context, ss *store.Session, h session.Header, tail store.Tail, gate *folded) (*DataLoss, error) {
	id := ss.ID()
	suspect := func(t store.Tail) bool {
		return gate != nil && gate.streamSeq > 0 && (t.LastStreamSeq < gate.streamSeq || t.NextSeq-1 < gate.asOfSeq ||
			t.LastStreamSeq == gate.streamSeq && t.NextSeq-1 != gate.asOfSeq) ||
			h.SeedLength != nil && t.NextSeq > 0 && t.NextSeq <= *h.SeedLength
	}
	if !suspect(tail) && (gate == nil || tail.LastStreamSeq <= gate.streamSeq) {
		return nil, nil
	}
	tail, err := ss.TailFromLeader(ctx)
	if err != nil {
		return nil, &Error{Code: CodeInternal, Session: id, Description: "read the log's tail from the stream leader", Err: err}
	}
	var lost *DataLoss
	now := time.Now().UnixMilli()
	if h.SeedLength != nil && tail.NextSeq > 0 && tail.NextSeq <= *h.SeedLength {
		lost = mergeLoss(lost, &DataLoss{FromSeq: tail.NextSeq, ToSeq: *h.SeedLength, DetectedAt: now,
			Detail: fmt.Sprintf("the session is a fork of seedLength %d, written whole, and its log ends at seq %d", *h.SeedLength, tail.NextSeq-1)})
	}
	if gate == nil || gate.streamSeq == 0 {
		return lost, nil
	}
	a, s := gate.asOfSeq, gate.streamSeq
	switch {
	case tail.LastStreamSeq < s || tail.NextSeq-1 < a:
		lost = mergeLoss(lost, &DataLoss{FromSeq: min(tail.NextSeq, a), ToSeq: a, StreamSeq: s, DetectedAt: now,
			Detail: fmt.Sprintf("the projection folded seqs up to %d (last record at stream seq %d); the log ends at seq %d (stream seq %d)", a, s, tail.NextSeq-1, tail.LastStreamSeq)})
	case tail.LastStreamSeq == s && tail.NextSeq-1 != a:
		lost = mergeLoss(lost, &DataLoss{FromSeq: a, ToSeq: a, StreamSeq: s, DetectedAt: now,
			Detail: fmt.Sprintf("the record at stream seq %d, the last one folded (to seq %d), now ends at seq %d", s, a, tail.NextSeq-1)})
	case tail.LastStreamSeq > s:
		rec, found, err := ss.RecordFromLeader(ctx, s)
		var se *session.Error
		if err != nil && !errors.As(err, &se) {
			return nil, &Error{Code: CodeInternal, Session: id, Description: fmt.Sprintf("read stream seq %d from the stream leader", s), Err: err}
		}
		if err == nil && !found && tail.NextSeq-1 >= a {
			// A state folded before the session was archived and restored names a stream seq
			// below the restored records: they were written again (the projector refolds).
			first, restored, rerr := ss.Restored(ctx)
			if rerr != nil {
				return nil, &Error{Code: CodeInternal, Session: id, Description: "read the log's first record from the stream leader", Err: rerr}
			}
			if restored && first > s {
				return lost, nil
			}
		}
		if err != nil || !found || rec.NextSeq-1 != a {
			lost = mergeLoss(lost, &DataLoss{FromSeq: a, ToSeq: a, StreamSeq: s, DetectedAt: now,
				Detail: fmt.Sprintf("the projection folded seqs up to %d, last from the record at stream seq %d, which the log no longer holds", a, s)})
		}
	}
	return lost, nil
}

// mergeLoss returns the loss covering l and m (either may be nil; nil when both are): the widest
// seq range, with m's detail and time.
func mergeLoss(l, m *DataLoss) *DataLoss {
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

// archivedStatus completes s for an archived session of next events: its units from the
// archive's projection states.
func archivedStatus(ctx context.Context, ss *store.Session, s Status, next int64) (Status, error) {
	id := ss.ID()
	s.State, s.LastSeq, s.Events = StateArchived, next-1, next
	a, err := ss.ReadArchive(ctx)
	if err != nil {
		return Status{}, &Error{Code: CodeInternal, Session: id, Description: "read the archive", Err: err}
	}
	for unit, value := range a.Projections {
		var v struct {
			StateVersion int              `json:"stateVersion"`
			AsOfSeq      int64            `json:"asOfSeq"`
			State        json.RawMessage  `json:"state"`
			Error        *ProjectionError `json:"error"`
		}
		if err := json.Unmarshal(value, &v); err != nil {
			return Status{}, &Error{Code: CodeInternal, Session: id, Description: "archived projection " + unit + " does not decode", Err: err}
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

// childrenIndexed maps each of ids to its children (sorted): one batched read of the lineage
// index and one of the children's metadata.
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
	childToks := slices.Clone(toks) // the parents' metadata too, for their revisions
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
			// A link of a child created before the parent's metadata (a parent removed and
			// created again under its id) is a fork of the removed session.
			if !ok || e.Header.ParentSession != parent || e.Revision < metas[ptok].Revision {
				continue
			}
			out[parent] = append(out[parent], e.Header.ID)
		}
		slices.Sort(out[parent])
	}
	return out, nil
}
