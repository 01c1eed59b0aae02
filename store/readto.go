package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// RecordsToDirect is how many records ReadRecordsTo gets one by one with direct gets before it
// reads the rest with an ordered consumer.
const RecordsToDirect = 8

// ReadRecordsTo is ReadRecordsAfter for a reader that knows where the log it wants ends: it calls
// fn for each record of session id stored after stream seq afterStreamSeq (nextSeq: the event seq
// the first must start at) up to and including stream seq upTo, which must be one of the
// session's records, with the record's stream seq, its server timestamp and its events (blobs
// read). It does not read the tail: a few records are direct gets of the subject's next record
// (a replica that lags behind is passed over for the stream leader), more an ordered consumer;
// what is in flight is one record, or a pull bounded by twice the max message size.
//
// Errors: a wrapped ErrLogChanged when the log holds no record at upTo (it ends below it, or
// record upTo is another subject's: records were lost), ReadRecordsAfter's otherwise.
func (s *Store) ReadRecordsTo(ctx context.Context, id string, afterStreamSeq uint64, nextSeq int64, upTo uint64,
	fn func(streamSeq uint64, at time.Time, events []session.Event) error) (uint64, error) {
	if upTo <= afterStreamSeq {
		return afterStreamSeq, nil
	}
	subject, err := s.Subject(id)
	if err != nil {
		return 0, err
	}
	last := afterStreamSeq
	take := func(m *natsjs.RawStreamMsg) error {
		if m.Sequence > upTo {
			return fmt.Errorf("read session %q: %w: no record at stream seq %d (the next one after stream seq %d is %d)", id, ErrLogChanged, upTo, last, m.Sequence)
		}
		evs, _, err := s.decodeStoredBody(ctx, id, m.Header, m.Data, m.Sequence, true)
		if err != nil {
			return err
		}
		if evs[0].Seq != nextSeq {
			return wire.RecordError(id, evs[0].Seq, m.Sequence, session.RuleRecordContinue,
				"record starts at seq %d but the previous record (stream seq %d) ends before seq %d", evs[0].Seq, last, nextSeq)
		}
		if err := fn(m.Sequence, m.Time, evs); err != nil {
			return err
		}
		nextSeq, last = evs[len(evs)-1].Seq+1, m.Sequence
		return nil
	}
	for range RecordsToDirect {
		m, err := s.Stream.GetMsg(ctx, last+1, natsjs.WithGetMsgSubject(subject))
		if errors.Is(err, natsjs.ErrMsgNotFound) {
			// A replica behind the leader holds a prefix of the stream: ask the leader.
			m, err = s.leaderNextMsg(ctx, subject, last+1)
		}
		if errors.Is(err, natsjs.ErrMsgNotFound) {
			return 0, fmt.Errorf("read session %q: %w: no record at stream seq %d (none after stream seq %d)", id, ErrLogChanged, upTo, last)
		}
		if err != nil {
			return 0, fmt.Errorf("read session %q after stream seq %d (next event seq %d): %w", id, last, nextSeq, err)
		}
		if err := take(m); err != nil {
			return 0, err
		}
		if last == upTo {
			return last, nil
		}
	}
	cons, err := s.Stream.OrderedConsumer(ctx, natsjs.OrderedConsumerConfig{FilterSubjects: []string{subject},
		DeliverPolicy: natsjs.DeliverByStartSequencePolicy, OptStartSeq: last + 1})
	if err != nil {
		return 0, fmt.Errorf("read session %q: create ordered consumer on %s: %w", id, subject, err)
	}
	if info := cons.CachedInfo(); info != nil && info.Name != "" {
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.JS.Options().DefaultTimeout)
			_ = s.Stream.DeleteConsumer(dctx, info.Name)
			cancel()
		}()
	}
	iter, err := cons.Messages(natsjs.PullMaxMessagesWithBytesLimit(readBatch, 2*int(max(s.MaxMsgSize, 1<<20))))
	if err != nil {
		return 0, fmt.Errorf("read session %q: %w", id, err)
	}
	defer iter.Stop()
	for last < upTo {
		msg, err := iter.Next(natsjs.NextContext(ctx))
		if err != nil {
			return 0, fmt.Errorf("read session %q after stream seq %d (next event seq %d): %w", id, last, nextSeq, err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return 0, fmt.Errorf("read session %q after stream seq %d: %w", id, last, err)
		}
		if err := take(&natsjs.RawStreamMsg{Subject: msg.Subject(), Sequence: meta.Sequence.Stream, Header: msg.Headers(), Data: msg.Data(), Time: meta.Timestamp}); err != nil {
			return 0, err
		}
		if last < upTo && meta.NumPending == 0 {
			return 0, fmt.Errorf("read session %q: %w: no record at stream seq %d (the log ends at stream seq %d)", id, ErrLogChanged, upTo, last)
		}
	}
	return last, nil
}
