package projector

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/session"
)

// answerMessages serves client.MessagesSubject: the stored projection's nodes, and their messages
// derived (session.DeriveMessages) from the session's events read from the log. It does not
// refold the log.
func (p *Projector) answerMessages(ctx context.Context, r responder, q query, proj Projection, raw []byte) {
	tooLarge := proj.Error != nil && proj.Error.Rule == session.RuleStateTooLarge
	var folded map[int64]session.Event // the surface events read by foldLog
	var at map[int64]uint64            // the stream seq of each one's record
	if tooLarge && q.Nodes == nil {
		// The session's surface is larger than the stored state may be: fold its log here, for
		// this query (slower, but the history is still served).
		var ok bool
		if proj, folded, at, ok = p.foldLog(ctx, r, q); !ok {
			return
		}
	}
	nodes := proj.State.Nodes
	if q.Nodes != nil {
		for _, seq := range q.Nodes {
			if seq < 0 || (seq > proj.AsOfSeq && !tooLarge) {
				r.fail(client.CodeBadRequest, fmt.Sprintf("bad request: session %q: node seq %d is not an event at or below the projection's asOfSeq %d", q.Session, seq, proj.AsOfSeq))
				return
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
		if folded == nil && stored.Log != nil && stored.Log.Incarnation == "" {
			stored.Log = nil // a session without an incarnation: its log cannot be told from a re-created one
		}
		if events, at, err = p.nodes.events(ctx, p.store, q.Session, nodes, q.Nodes == nil, stored.Log); err != nil {
			r.fail(client.CodeInternal, fmt.Sprintf("session %q: %v", q.Session, err))
			return
		}
	}
	byseq := func(seq int64) (session.Event, error) {
		if ev, ok := events[seq]; ok {
			return ev, nil
		}
		return session.Event{}, fmt.Errorf("session %q: surface node seq %d is not a user, assistant or tool-result event of its log", q.Session, seq)
	}
	reply := client.MessagesReply{
		Session:           q.Session,
		AsOfSeq:           proj.AsOfSeq,
		ReplaceGeneration: proj.State.ReplaceGeneration,
		Nodes:             nodes,
		Messages:          []json.RawMessage{},
	}
	// A first page carries every node; a continuation only the nodes it covers, added below.
	first := q.Nodes == nil
	if !first {
		reply.Nodes = []int64{}
	}
	envelope, err := encodeReply(reply)
	if err != nil {
		r.fail(client.CodeInternal, fmt.Sprintf("session %q: encoding the reply: %v", q.Session, err))
		return
	}
	// A reply without headers (success) may take the whole max payload; keep a little room.
	limit := int64(1 << 62)
	if max := p.nc.MaxPayload(); max > 0 {
		limit = max - 64
	}
	if int64(len(envelope)) > limit {
		r.fail(client.CodeTooLarge, fmt.Sprintf("session %q: its %d surface nodes alone take %d bytes, more than one reply can carry (the server's max payload is %d bytes)",
			q.Session, len(nodes), len(envelope), p.nc.MaxPayload()))
		return
	}
	// Room for `,"partial":k` too, in case the reply cannot cover every node.
	size := int64(len(envelope) + len(`,"partial":`) + len(strconv.Itoa(len(nodes))))
	// A message larger than this fits on no page, not even alone on the smallest one: with
	// q.External it is listed for the client to derive from the log, else the query fails 413.
	alone := limit - int64(len(`,"partial":0,"external":[]`)) - smallestPage(reply)
	covered := len(nodes)
	for i, seq := range nodes {
		msgs, err := session.DeriveMessages([]int64{seq}, byseq)
		if err != nil {
			code := client.CodeInternal
			if q.Nodes != nil {
				code = client.CodeBadRequest
			}
			// DeriveMessages does not know the session (its *session.Error has none): this reply names it.
			r.fail(code, fmt.Sprintf("session %q: deriving the message of surface node seq %d at asOfSeq %d: %v", q.Session, seq, proj.AsOfSeq, err))
			return
		}
		var add int64
		for _, m := range msgs {
			add += int64(len(m)) + 1 // the message and its comma
		}
		if !first {
			add += int64(len(strconv.FormatInt(seq, 10))) + 1 // the node and its comma
		}
		if q.External && add > alone {
			x := client.ExternalMessage{Index: len(reply.Messages) + len(reply.External), Node: seq, StreamSeq: at[seq]}
			xb, _ := json.Marshal(x)
			if add = int64(len(xb)) + 1; !first {
				add += int64(len(strconv.FormatInt(seq, 10))) + 1
			}
			if len(reply.External) == 0 {
				add += int64(len(`,"external":[]`))
			}
			if size+add <= limit {
				size += add
				reply.External = append(reply.External, x)
				continue
			}
		}
		if size+add > limit {
			if i == 0 && !first {
				// Alone on a page with the smallest envelope, it still does not fit.
				r.fail(client.CodeTooLarge, fmt.Sprintf("session %q: the message of surface node seq %d takes %d bytes; with the reply's other %d bytes that is more than one reply can carry (the server's max payload is %d bytes)",
					q.Session, seq, add, size, p.nc.MaxPayload()))
				return
			}
			covered = i
			reply.Partial = &covered
			break
		}
		size += add
		reply.Messages = append(reply.Messages, msgs...)
	}
	if !first {
		reply.Nodes = nodes[:covered]
	}
	b, err := encodeReply(reply)
	if err != nil {
		r.fail(client.CodeInternal, fmt.Sprintf("session %q: encoding the reply: %v", q.Session, err))
		return
	}
	r.respond(b)
}

// smallestPage is the size of the smallest page of reply's session: a continuation page with one
// node of the largest seq and no messages.
func smallestPage(reply client.MessagesReply) int64 {
	reply.Nodes, reply.Messages, reply.External = []int64{math.MaxInt64}, []json.RawMessage{}, nil
	b, _ := encodeReply(reply)
	return int64(len(b))
}

// foldLog folds the whole log of q's session into a surface, for a session whose stored messages
// state stopped with session.RuleStateTooLarge, and returns it with the log's surface-eligible events (all
// that deriving its messages reads). The log is streamed record by record and only those events
// are kept (copied), and at most cap(p.folds) such folds run at once, since these sessions are
// large by definition. With minSeq, it first waits for the log to reach it. Both waits end at
// q's deadline. It has answered (false) when the log breaks a rule, cannot be read, or does not
// reach minSeq in time.
func (p *Projector) foldLog(ctx context.Context, r responder, q query) (Projection, map[int64]session.Event, map[int64]uint64, bool) {
	deadline := q.deadline
	if deadline.IsZero() {
		deadline = time.Now().Add(time.Duration(q.timeoutMs()) * time.Millisecond)
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	gone := func() {
		if ctx.Err() != nil {
			r.fail(client.CodeUnavailable, fmt.Sprintf("session %q: projector %s is stopping", q.Session, p.name))
		} else {
			what := "no fold of a whole log was free"
			if q.waits() {
				what = fmt.Sprintf("its log did not reach seq %d, or no fold of a whole log was free", *q.MinSeq)
			}
			r.fail(client.CodeTimeout, fmt.Sprintf("session %q: %s within %d ms (its state is too large to store; messages are folded from the log)", q.Session, what, q.timeoutMs()))
		}
	}
	if q.waits() {
		for {
			tail, err := p.store.GetTail(dctx, q.Session)
			if err == nil && tail.NextSeq-1 >= *q.MinSeq {
				break
			}
			select {
			case <-dctx.Done():
				gone()
				return Projection{}, nil, nil, false
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	select {
	case p.folds <- struct{}{}:
		defer func() { <-p.folds }()
	case <-dctx.Done():
		gone()
		return Projection{}, nil, nil, false
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
	_, err := p.store.ReadRecords(ctx, q.Session, func(streamSeq uint64, evs []session.Event) error {
		for _, ev := range evs {
			if err := surf.Apply(q.Session, ev, byseq); err != nil {
				refused = err
				return err
			}
			if session.SurfaceEligible(ev.Type) {
				kept[ev.Seq], at[ev.Seq] = owned(ev), streamSeq
			}
		}
		return nil
	})
	switch {
	case refused != nil:
		r.fail(client.CodeStopped, fmt.Sprintf("session %q: %v", q.Session, refused))
		return Projection{}, nil, nil, false
	case err != nil:
		r.fail(client.CodeInternal, fmt.Sprintf("session %q: reading the log: %v", q.Session, err))
		return Projection{}, nil, nil, false
	}
	return fromSurface(surf), kept, at, true
}
