package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// EventsQuery selects events of a session: seq >= FromSeq, and of those only the last Tail
// (0: all). With Follow the read goes on after the log's end, for new records as they are
// appended, until the call's ctx ends.
//
// After resumes a read where an earlier one stopped, without reading the log again: only the
// records stored after After.StreamSeq are read, the first of which must start at After.NextSeq
// (not with Tail). Reached, when set, is called after the events of each record with the
// position after it, which a later read takes as After.
type EventsQuery struct {
	FromSeq int64
	Tail    int64
	Follow  bool
	After   Position
	Reached func(Position)
}

// Position is a place in a session's log: after the record at stream seq StreamSeq (0: the
// start), whose last event is NextSeq-1.
type Position struct {
	StreamSeq uint64
	NextSeq   int64
}

// ErrLogChanged is returned (wrapped) by Events with After when the log no longer holds that
// position (an operator purged its records): read it again from the start.
var ErrLogChanged = store.ErrLogChanged

// Events calls fn for each selected event of session id, in seq order. It reads the stored log
// (records before the first selected one are read and skipped), then with Follow an ordered
// consumer on the session's subject; it then returns ctx's error when ctx ends. An error from fn
// stops it and is returned as is. Other errors: ErrBadRequest, ErrRemoving (an rm stopped
// part-way), a *session.Error for a bad record, a read failure (ErrInternal).
func (c *Client) Events(ctx context.Context, id string, q EventsQuery, fn func(session.Event) error) error {
	if q.FromSeq < 0 || q.Tail < 0 {
		return &Error{Code: CodeBadRequest, Session: id, Description: fmt.Sprintf("events: fromSeq %d, tail %d: want >= 0", q.FromSeq, q.Tail)}
	}
	if q.After.NextSeq < 0 || (q.After.StreamSeq == 0) != (q.After.NextSeq == 0) || (q.After.StreamSeq > 0 && q.Tail > 0) {
		return &Error{Code: CodeBadRequest, Session: id, Description: fmt.Sprintf("events: after stream seq %d, next seq %d (tail %d): want both 0, or both > 0 without a tail",
			q.After.StreamSeq, q.After.NextSeq, q.Tail)}
	}
	ss, err := c.session(ctx, id)
	if err != nil {
		return err
	}
	if _, _, err := lookup(ctx, ss); err != nil { // a log without metadata is read all the same
		return err
	}
	from := q.FromSeq
	if q.Tail > 0 {
		t, err := ss.Tail(ctx)
		if err != nil {
			return &Error{Code: CodeInternal, Session: id, Description: "read the log's tail", Err: err}
		}
		n := t.NextSeq
		if t.LastStreamSeq == 0 { // no hot record: archived, maybe
			loc, err := ss.Locate(ctx)
			if err != nil {
				return &Error{Code: CodeInternal, Session: id, Description: "locate the log", Err: err}
			}
			n = loc.NextSeq()
		}
		from = max(from, n-q.Tail)
	}
	var opts []store.ReadOpt
	if q.Follow {
		opts = append(opts, store.Follow())
	}
	if q.After.StreamSeq > 0 {
		opts = append(opts, store.AfterStreamSeq(q.After.StreamSeq, q.After.NextSeq))
	}
	_, err = ss.Records(ctx, func(r store.Record) error {
		for _, ev := range r.Events {
			if ev.Seq >= from {
				if err := fn(ev); err != nil {
					return &fnError{err}
				}
			}
		}
		if q.Reached != nil {
			q.Reached(Position{StreamSeq: r.StreamSeq, NextSeq: r.Events[len(r.Events)-1].Seq + 1})
		}
		return nil
	}, opts...)
	return unwrapFn(err)
}

// fnError carries the error of a caller's callback through a read.
type fnError struct{ err error }

func (e *fnError) Error() string { return e.err.Error() }

func unwrapFn(err error) error {
	var fe *fnError
	if errors.As(err, &fe) {
		return fe.err
	}
	return err
}

// WatchMessages calls fn with session id's derived messages now, then each time its messages
// projection advances, until ctx ends (it then returns ctx's error) or fn fails. It watches the
// session's messages.<token> key in agentlog_projections and queries Messages with MinSeq at
// each new asOfSeq. Errors: ErrRemoving (an rm stopped part-way), ErrStopped when the projection
// stops, and Messages' errors.
func (c *Client) WatchMessages(ctx context.Context, id string, fn func(MessagesReply) error) error {
	ss, err := c.session(ctx, id)
	if err != nil {
		return err
	}
	tok := ss.Token()
	if _, _, err := lookup(ctx, ss); err != nil { // an unknown one is watched until it appears
		return err
	}
	// A core subscription on the key's subject wakes the watch; the stored value is read (a get)
	// each time, and every watchPoll without a wake-up (one lost costs at most that).
	wake := make(chan struct{}, 1)
	sub, err := ss.SubscribeProjection("messages", func(string) {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return &Error{Code: CodeInternal, Session: id, Description: "watch projection", Err: err}
	}
	defer func() { _ = sub.Unsubscribe() }()
	poll := time.NewTicker(watchPoll)
	defer poll.Stop()
	last := int64(-2)
	var rev uint64
	woken := false
	for {
		e, err := ss.ProjectionEntry(ctx, "messages")
		switch {
		case errors.Is(err, natsjs.ErrKeyNotFound):
		case err != nil:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return &Error{Code: CodeInternal, Session: id, Description: "read projection " + wire.ProjectionKey("messages", tok), Err: err}
		case e.Revision() == rev && woken:
			// A wake-up before the value can be read here (a replica behind answered): again soon.
			for i := 0; i < 4 && e != nil && e.Revision() == rev; i++ {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Duration(10<<i) * time.Millisecond):
				}
				if e, err = ss.ProjectionEntry(ctx, "messages"); err != nil {
					e = nil
				}
			}
		}
		if e != nil && e.Revision() != rev {
			rev = e.Revision()
			var p Projection
			if json.Unmarshal(e.Value(), &p) == nil && p.AsOfSeq >= 0 && p.AsOfSeq > last {
				r, err := c.Messages(ctx, id, MinSeq(max(p.AsOfSeq, 0)))
				if err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					return err
				}
				last = r.AsOfSeq
				if err := fn(r); err != nil {
					return err
				}
			}
		}
		woken = false
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
			woken = true
		case <-poll.C:
		}
	}
}

// watchPoll is how often WatchMessages reads the state without a wake-up.
const watchPoll = time.Second

// Header returns session id's header as stored in agentlog_sessions (Raw keeps its bytes, so a
// JSONL written from it carries every field). Errors: ErrBadRequest, ErrNotFound (ErrRemoving
// too for a session being removed), ErrInternal.
func (c *Client) Header(ctx context.Context, id string) (session.Header, error) {
	ss, err := c.session(ctx, id)
	if err != nil {
		return session.Header{}, err
	}
	info, found, err := lookup(ctx, ss)
	if err != nil {
		return session.Header{}, err
	}
	if !found {
		return session.Header{}, notFoundError(id)
	}
	return info.Header, nil
}

// ErrorReports returns the last n (n > 0) agent/error reports of session id, oldest first, as
// stored in the AGENTLOG_ERRORS stream: JSON objects of publisher.ErrorReport ({type, session,
// firstSeq, lastSeq, error, time, writerId, fenced?, lost?}). A failed write is reported there,
// never written as a session event. Errors: ErrBadRequest, ErrInternal.
func (c *Client) ErrorReports(ctx context.Context, id string, n int) ([]json.RawMessage, error) {
	if n <= 0 {
		return nil, &Error{Code: CodeBadRequest, Session: id, Description: fmt.Sprintf("error reports: n %d, want > 0", n)}
	}
	ss, err := c.session(ctx, id)
	if err != nil {
		return nil, err
	}
	var out []json.RawMessage
	err = ss.ErrorReports(ctx, func(report []byte) error {
		if len(out) == n {
			out = append(out[:0], out[1:]...)
		}
		out = append(out, report)
		return nil
	})
	if err != nil {
		return nil, &Error{Code: CodeInternal, Session: id, Description: "read stream " + wire.ErrorsStream, Err: err}
	}
	return out, nil
}

// LastSeq returns the seq of session id's last event (-1: none), from its last record's headers
// (a direct get, which on a replicated stream may read a lagging follower). Errors:
// ErrBadRequest, ErrInternal.
func (c *Client) LastSeq(ctx context.Context, id string) (int64, error) {
	ss, err := c.session(ctx, id)
	if err != nil {
		return 0, err
	}
	t, err := ss.Tail(ctx)
	if err != nil {
		return 0, &Error{Code: CodeInternal, Session: id, Description: "read the log's tail", Err: err}
	}
	return t.NextSeq - 1, nil
}
