package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// Passes over every session, for listings (client.Sessions, Lineage, Status): one ordered consumer
// each, delivering in stream order on one goroutine, which is what a pass over 100,000 sessions
// spends its time on.

// SessionEntry is the last entry of one key of agentlog_sessions, as ScanSessions reads it.
type SessionEntry struct {
	Token  string      // the key: the session's subject token (not checked)
	Header nats.Header // the entry's headers (wire.IncarnationHeader, wire.DeletingHeader, ...)
	Value  []byte      // the session's header line; nil when scanned keys only
	// Revision is the entry's revision (its stream seq in the bucket): a session created later
	// has a higher one.
	Revision uint64
}

// ScanSessions calls fn, in stream order, with the last entry of every key of agentlog_sessions
// as the scan starts; the keys' delete and purge markers are left out, entries being removed
// (wire.DeletingHeader) are not. keysOnly reads the entries' headers only (Value nil). sized, when
// not nil, gets the number of entries first (markers included). An error from fn stops the scan
// and is returned as is.
func (s *Store) ScanSessions(ctx context.Context, keysOnly bool, sized func(n uint64), fn func(SessionEntry) error) error {
	if s.js == nil {
		return errors.New("scan sessions: the store is not open (use Provision or Open to get a Store)")
	}
	prefix := wire.KVSubject(wire.SessionsBucket, "")
	return scanStream(ctx, s.js, "KV_"+wire.SessionsBucket, prefix+">", natsjs.DeliverLastPerSubjectPolicy, keysOnly, sized, func(m natsjs.Msg) error {
		if kvDeleted(m.Headers()) {
			return nil
		}
		e := SessionEntry{Token: strings.TrimPrefix(m.Subject(), prefix), Header: m.Headers()}
		if !keysOnly {
			e.Value = m.Data()
		}
		if md, err := m.Metadata(); err == nil {
			e.Revision = md.Sequence.Stream
		}
		return fn(e)
	})
}

// ScanTails calls fn with the headers of every session's last record as the scan starts and the
// time the stream stored it (headers only: no body, no blob is read). sized, when not nil, gets
// their number first. (One consumer over agentlog.session.>: several over shares of the partitions
// were two to three times slower, the server scanning the stream once per filter.)
func (s *Store) ScanTails(ctx context.Context, sized func(n uint64), fn func(h nats.Header, stored time.Time) error) error {
	if s.js == nil {
		return errors.New("scan the sessions' last records: the store is not open (use Provision or Open to get a Store)")
	}
	return scanStream(ctx, s.js, wire.StreamName, wire.SubjectPrefix+".>", natsjs.DeliverLastPerSubjectPolicy, true, sized, func(m natsjs.Msg) error {
		var stored time.Time
		if md, err := m.Metadata(); err == nil {
			stored = md.Timestamp
		}
		return fn(m.Headers(), stored)
	})
}

// TailsOf calls fn with the headers and stored time of the last record of each session of
// tokens that has one, read with batched direct gets (a lagging follower may answer one).
func (s *Store) TailsOf(ctx context.Context, tokens []string, fn func(h nats.Header, stored time.Time) error) error {
	if s.js == nil {
		return errors.New("read the sessions' last records: the store is not open (use Provision or Open to get a Store)")
	}
	if len(tokens) == 0 {
		return nil
	}
	subjects := make([]string, len(tokens))
	for i, tok := range tokens {
		subjects[i] = wire.TokenSubject(tok, s.partitions)
	}
	js, err := orbitJS(s.js)
	if err != nil {
		return err
	}
	msgs, err := jetstreamext.GetLastMsgsFor(ctx, js, wire.StreamName, subjects, jetstreamext.GetLastMsgsBatchSize(len(subjects)))
	if err != nil {
		if errors.Is(err, jetstreamext.ErrNoMessages) {
			return nil
		}
		return err
	}
	for m, merr := range msgs {
		if merr != nil {
			if errors.Is(merr, jetstreamext.ErrNoMessages) {
				return nil
			}
			return merr
		}
		if err := fn(m.Header, m.Time); err != nil {
			return err
		}
	}
	return nil
}

// ErrorReports calls fn with each agent/error report of the session (its messages on
// agentlog.errors.<token> in AGENTLOG_ERRORS, oldest first) stored when the read starts. The data
// is the handler's to keep.
func (ss *Session) ErrorReports(ctx context.Context, fn func(report []byte) error) error {
	if ss.s.js == nil {
		return ss.noStore()
	}
	subject := wire.ErrorsPrefix + "." + ss.tok
	err := scanStream(ctx, ss.s.js, wire.ErrorsStream, subject, natsjs.DeliverAllPolicy, false, nil, func(m natsjs.Msg) error {
		return fn(append([]byte(nil), m.Data()...))
	})
	if err != nil {
		return fmt.Errorf("session %q: read its error reports (stream %s): %w", ss.id, wire.ErrorsStream, err)
	}
	return nil
}

// scanStream calls fn for the messages of stream matching filter that policy delivers (all, or
// the last of each subject) when it starts, through an ordered consumer (headers only with
// headersOnly), in stream order. sized, when not nil, gets their number first.
func scanStream(ctx context.Context, js natsjs.JetStream, stream, filter string, policy natsjs.DeliverPolicy, headersOnly bool,
	sized func(n uint64), fn func(natsjs.Msg) error) error {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	if s.CachedInfo().State.Msgs == 0 {
		if sized != nil {
			sized(0)
		}
		return nil
	}
	cons, err := js.OrderedConsumer(ctx, stream, natsjs.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  policy,
		HeadersOnly:    headersOnly,
	})
	if err != nil {
		return err
	}
	info := cons.CachedInfo()
	// The consumer's pending count at creation bounds the read: what is appended later is not
	// wanted. (An ordered consumer that resets resumes after the last message delivered.)
	total := info.NumPending + info.Delivered.Consumer
	if sized != nil {
		sized(total)
	}
	if total == 0 {
		return nil
	}
	// Consume with a callback: messages are handed over in order, on one goroutine, with no
	// per-message channel hop, which is what a pass over 100,000 sessions spends its time on.
	var (
		mu    sync.Mutex // n and fnErr: the callback may still run when ctx ends
		n     uint64
		fnErr error
		done  = make(chan struct{})
		once  sync.Once
	)
	finish := func() { once.Do(func() { close(done) }) }
	cc, err := cons.Consume(func(m natsjs.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if fnErr != nil || n >= total {
			return
		}
		if fnErr = fn(m); fnErr != nil {
			finish()
			return
		}
		if n++; n == total {
			finish()
		}
	}, natsjs.PullMaxMessages(8192), natsjs.ConsumeErrHandler(func(_ natsjs.ConsumeContext, err error) {
		_ = err // an ordered consumer resets itself; a fatal error ends with the ctx
	}))
	if err != nil {
		return err
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
	cc.Stop()
	<-cc.Closed()
	mu.Lock()
	defer mu.Unlock()
	if fnErr != nil {
		return fnErr
	}
	if n < total {
		return ctx.Err()
	}
	return nil
}
