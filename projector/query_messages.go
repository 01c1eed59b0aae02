package projector

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
)

// answerMessages serves client.MessagesSubject: the stored projection's nodes, and their messages
// derived (session.DeriveMessages) from the session's events read from the log, one page of them
// (messagesPage). It does not refold the log, except for a session whose state outgrew KV
// (foldLog).
func (s *queryService) answerMessages(ctx context.Context, q query, proj Projection, raw []byte) ([]byte, error) {
	large := tooLarge(proj)
	var folded map[int64]session.Event // the surface events read by foldLog
	var at map[int64]uint64            // the stream seq of each one's record
	if large && q.Nodes == nil {
		// The session's surface is larger than the stored state may be: fold its log here, for
		// this query (slower, but the history is still served).
		var err error
		if proj, folded, at, err = s.foldLog(ctx, q); err != nil {
			return nil, err
		}
	}
	nodes := proj.State.Nodes
	if q.Nodes != nil {
		for _, seq := range q.Nodes {
			if seq < 0 || (seq > proj.AsOfSeq && !large) {
				return nil, replyErr(client.CodeBadRequest, "bad request: session %q: node seq %d is not an event at or below the projection's asOfSeq %d", q.Session, seq, proj.AsOfSeq)
			}
		}
		nodes = q.Nodes
	}
	events := folded
	if q.archived != nil {
		events = q.archived.events
	}
	if events == nil {
		var err error
		var stored struct {
			Log *LogPosition `json:"log"`
		}
		_ = json.Unmarshal(raw, &stored) // only its log position; the value was decoded already
		if stored.Log != nil && stored.Log.Incarnation == "" {
			stored.Log = nil // a session without an incarnation: its log cannot be told from a re-created one
		}
		if events, at, err = s.nodes.events(ctx, s.store, q.Session, nodes, nodeRecords(proj.State, nodes), q.Nodes == nil, stored.Log); err != nil {
			return nil, fmt.Errorf("session %q: %w", q.Session, err)
		}
	}
	byseq := func(seq int64) (session.Event, error) {
		if ev, ok := events[seq]; ok {
			return ev, nil
		}
		return session.Event{}, fmt.Errorf("session %q: surface node seq %d is not a user, assistant or tool-result event of its log", q.Session, seq)
	}
	reply, err := messagesPage(pageSpec{
		reply:      client.MessagesReply{Session: q.Session, AsOfSeq: proj.AsOfSeq, ReplaceGeneration: proj.State.ReplaceGeneration},
		nodes:      nodes,
		first:      q.Nodes == nil,
		external:   q.External,
		maxPayload: s.nc.MaxPayload(),
		derive:     func(seq int64) ([]json.RawMessage, error) { return session.DeriveMessages([]int64{seq}, byseq) },
		streamSeq:  func(seq int64) uint64 { return at[seq] },
	})
	if err != nil {
		return nil, err
	}
	b, err := encodeReply(reply)
	if err != nil {
		return nil, fmt.Errorf("session %q: encoding the reply: %w", q.Session, err)
	}
	return b, nil
}

// foldLog folds the whole log of q's session into a surface, for a session whose stored messages
// state stopped with session.RuleStateTooLarge, and returns it with the log's surface-eligible events (all
// that deriving its messages reads). The log is streamed record by record and only those events
// are kept (copied), and at most cap(s.folds) such folds run at once, since these sessions are
// large by definition. With minSeq, it first waits for the log to reach it. Both waits end at
// q's deadline. Errors: "409" when the log breaks a rule, "408" when it does not reach minSeq (or
// no fold slot frees) in time, "503" when the service stops, a failure to read the log.
func (s *queryService) foldLog(ctx context.Context, q query) (Projection, map[int64]session.Event, map[int64]uint64, error) {
	sh, err := s.store.Session(q.Session)
	if err != nil {
		return Projection{}, nil, nil, replyErr(client.CodeBadRequest, "bad request: %v", err)
	}
	deadline := q.deadline
	if deadline.IsZero() {
		deadline = time.Now().Add(time.Duration(q.timeoutMs()) * time.Millisecond)
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	gone := func() error {
		if ctx.Err() != nil {
			return s.stopping(q)
		}
		what := "no fold of a whole log was free"
		if q.waits() {
			what = fmt.Sprintf("its log did not reach seq %d, or no fold of a whole log was free", *q.MinSeq)
		}
		return replyErr(client.CodeTimeout, "session %q: %s within %d ms (its state is too large to store; messages are folded from the log)", q.Session, what, q.timeoutMs())
	}
	if q.waits() {
		s.waiting.Add(1)
		for {
			tail, err := sh.Tail(dctx)
			if err == nil && tail.NextSeq-1 >= *q.MinSeq {
				break
			}
			select {
			case <-dctx.Done():
				s.waiting.Add(-1)
				return Projection{}, nil, nil, gone()
			case <-time.After(20 * time.Millisecond):
			}
		}
		s.waiting.Add(-1)
	}
	select {
	case s.folds <- struct{}{}:
		defer func() { <-s.folds }()
	case <-dctx.Done():
		return Projection{}, nil, nil, gone()
	}
	kept, at := map[int64]session.Event{}, map[int64]uint64{}
	byseq := func(seq int64) (session.Event, error) {
		if ev, ok := kept[seq]; ok {
			return ev, nil
		}
		return session.Event{}, fmt.Errorf("session %q: event seq %d is not a user, assistant or tool-result event of the log", q.Session, seq)
	}
	surf := session.NewSurface()
	var refused error
	_, err = sh.Records(ctx, func(rec store.Record) error {
		for _, ev := range rec.Events {
			if err := surf.Apply(q.Session, ev, byseq); err != nil {
				refused = err
				return err
			}
			if session.SurfaceEligible(ev.Type) {
				kept[ev.Seq], at[ev.Seq] = owned(ev), rec.StreamSeq
			}
		}
		return nil
	})
	switch {
	case refused != nil:
		return Projection{}, nil, nil, replyErr(client.CodeStopped, "session %q: %v", q.Session, refused)
	case err != nil:
		return Projection{}, nil, nil, fmt.Errorf("session %q: reading the log: %w", q.Session, err)
	}
	return fromSurface(surf), kept, at, nil
}

// nodeRecords is the stream seq of the record of each of nodes, from the state's NodeRecords (nil
// when it has none, or a node is not one of its nodes).
func nodeRecords(st State, nodes []int64) []uint64 {
	if len(st.NodeRecords) != len(st.Nodes) || len(st.Nodes) == 0 {
		return nil
	}
	at := make(map[int64]uint64, len(st.Nodes))
	for i, n := range st.Nodes {
		at[n] = st.NodeRecords[i]
	}
	out := make([]uint64, len(nodes))
	for i, n := range nodes {
		if out[i] = at[n]; out[i] == 0 {
			return nil
		}
	}
	return out
}
