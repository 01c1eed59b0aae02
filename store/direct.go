package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// directMux sends batched direct gets (JetStream's DIRECT.GET with "batch" or "multi_last", whose
// answer is several messages and an end-of-batch marker) over one wildcard reply subscription,
// made once: a subscription per request (what orbit.go's GetBatch does) costs a round trip to
// the server each, ten times the get itself (measured: 440 µs against 37 µs for one message).
type directMux struct {
	once   sync.Once
	err    error
	nc     *nats.Conn
	prefix string // _INBOX.<nuid>.
	mu     sync.Mutex
	next   uint64
	wait   map[string]*directReply
}

type directReply struct {
	mu     sync.Mutex
	msgs   []*nats.Msg
	done   bool
	notify chan struct{}
}

func (m *directMux) start(nc *nats.Conn) error {
	m.once.Do(func() {
		m.nc, m.prefix, m.wait = nc, nc.NewInbox()+".", map[string]*directReply{}
		var sub *nats.Subscription
		sub, m.err = nc.Subscribe(m.prefix+"*", func(msg *nats.Msg) {
			tok := msg.Subject[len(m.prefix):]
			m.mu.Lock()
			r := m.wait[tok]
			m.mu.Unlock()
			if r == nil {
				return
			}
			r.mu.Lock()
			r.msgs = append(r.msgs, msg)
			done := len(msg.Data) == 0 && msg.Header.Get("Status") != ""
			if done {
				r.done = true // 204 EOB, or 404 no messages, or an error status
			}
			r.mu.Unlock()
			if done { // the waiter wakes once per batch, not once per message
				select {
				case r.notify <- struct{}{}:
				default:
				}
			}
		})
		if m.err == nil {
			// Batches of up to directBatchBytes each, several in flight: room for them, beyond
			// nats.go's default (64 MiB); a reply dropped anyway is detected (getDirect).
			m.err = sub.SetPendingLimits(-1, 512<<20)
		}
	})
	return m.err
}

// directBatchTimeout bounds one batched direct get.
const directBatchTimeout = 10 * time.Second

// getDirect sends one batched direct get of req (JSON) to stream and returns its messages (none
// when the server has none that match). A reply lost on the way (the subscription fell behind: a
// slow consumer drops messages) is detected by the sequence each reply names as the one before it
// (Nats-Last-Sequence), and the request is sent again, up to directLostRetries times.
func (s *Store) getDirect(ctx context.Context, stream string, req any) ([]*natsjs.RawStreamMsg, error) {
	for try := 0; ; try++ {
		out, err := s.getDirectOnce(ctx, stream, req)
		if !errors.Is(err, errDirectLost) || try >= directLostRetries {
			return out, err
		}
	}
}

// errDirectLost: a batched direct get's replies are not all there (getDirect).
var errDirectLost = errors.New("replies of the batched direct get were lost (the reply subscription fell behind)")

const directLostRetries = 3

// getDirectOnce is one try of getDirect.
func (s *Store) getDirectOnce(ctx context.Context, stream string, req any) ([]*natsjs.RawStreamMsg, error) {
	m := s.mux
	if m == nil {
		return nil, errors.New("store: no direct get multiplexer (a Store not from Provision or Open)")
	}
	if err := m.start(s.js.Conn()); err != nil {
		return nil, fmt.Errorf("subscribe for direct gets: %w", err)
	}
	// Bounded even under a longer ctx: a reply lost with a dropped connection (a server restart)
	// would otherwise keep the caller waiting for its whole ctx.
	ctx, cancel := context.WithTimeout(ctx, directBatchTimeout)
	defer cancel()
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	r := &directReply{notify: make(chan struct{}, 1)}
	m.mu.Lock()
	m.next++
	tok := strconv.FormatUint(m.next, 36)
	m.wait[tok] = r
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.wait, tok)
		m.mu.Unlock()
	}()
	subject := s.api("DIRECT.GET." + stream)
	if err := m.nc.PublishRequest(subject, m.prefix+tok, body); err != nil {
		return nil, err
	}
	for {
		r.mu.Lock()
		done := r.done
		r.mu.Unlock()
		if done {
			break
		}
		select {
		case <-r.notify:
		case <-ctx.Done():
			return nil, fmt.Errorf("batched direct get from stream %s: %w", stream, ctx.Err())
		}
	}
	out := make([]*natsjs.RawStreamMsg, 0, len(r.msgs))
	prev := uint64(0) // the stream seq of the reply before, as the next reply names it
	follows := func(msg *nats.Msg) bool {
		v := msg.Header.Get("Nats-Last-Sequence")
		if v == "" {
			return true
		}
		n, err := strconv.ParseUint(v, 10, 64)
		return err != nil || n == prev
	}
	for _, msg := range r.msgs {
		if len(msg.Data) == 0 && msg.Header.Get("Status") != "" {
			switch st := msg.Header.Get("Status"); st {
			case "204", "404":
				if st == "204" && !follows(msg) {
					return nil, fmt.Errorf("batched direct get from stream %s: %w", stream, errDirectLost)
				}
				return out, nil
			default:
				return nil, fmt.Errorf("batched direct get from stream %s: status %s %s", stream, st, msg.Header.Get("Description"))
			}
		}
		if !follows(msg) {
			return nil, fmt.Errorf("batched direct get from stream %s: %w", stream, errDirectLost)
		}
		rm, err := rawFromDirect(msg)
		if err != nil {
			return nil, err
		}
		prev = rm.Sequence
		out = append(out, rm)
	}
	return out, nil
}

// rawFromDirect converts a direct get's answer to a stored message.
func rawFromDirect(msg *nats.Msg) (*natsjs.RawStreamMsg, error) {
	seq, err := strconv.ParseUint(msg.Header.Get(natsjs.SequenceHeader), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("direct get answer without a sequence: %w", err)
	}
	at, err := time.Parse(time.RFC3339Nano, msg.Header.Get(natsjs.TimeStampHeaer))
	if err != nil {
		return nil, fmt.Errorf("direct get answer without a time stamp: %w", err)
	}
	h := nats.Header{}
	for k, v := range msg.Header {
		switch k {
		case natsjs.StreamHeader, natsjs.SubjectHeader, natsjs.SequenceHeader, natsjs.TimeStampHeaer, "Nats-Num-Pending", "Nats-Last-Sequence", "Nats-UpTo-Sequence":
		default:
			h[k] = v
		}
	}
	return &natsjs.RawStreamMsg{Subject: msg.Header.Get(natsjs.SubjectHeader), Sequence: seq, Header: h, Data: msg.Data, Time: at}, nil
}

// LastMsgs is a batched direct get of the last message of each subject of stream matching
// filters (in batches of 1,000 filters): what a listing reads of a page of sessions at once.
func (s *Store) LastMsgs(ctx context.Context, stream string, filters []string) ([]*natsjs.RawStreamMsg, error) {
	return s.lastMsgs(ctx, stream, filters)
}

// MsgsFrom is one batched direct get of up to batch messages of stream from stream seq seq on
// (matching filter unless ""), in stream order.
func (s *Store) MsgsFrom(ctx context.Context, stream string, seq uint64, batch int, filter string) ([]*natsjs.RawStreamMsg, error) {
	req := map[string]any{"seq": max(seq, 1), "batch": batch, "max_bytes": directBatchBytes}
	if filter != "" {
		req["next_by_subj"] = filter
	}
	return s.getDirect(ctx, stream, req)
}

// MsgsSince is MsgsFrom from the first message stored at or after t.
func (s *Store) MsgsSince(ctx context.Context, stream string, t time.Time, batch int, filter string) ([]*natsjs.RawStreamMsg, error) {
	req := map[string]any{"start_time": t.UTC(), "batch": batch, "max_bytes": directBatchBytes}
	if filter != "" {
		req["next_by_subj"] = filter
	}
	return s.getDirect(ctx, stream, req)
}
