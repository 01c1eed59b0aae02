package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Tail is the end of a session's log: the stream sequence of its last record (0 when the session
// has none) and the next event seq.
type Tail struct {
	LastStreamSeq uint64
	NextSeq       int64
	// LastEvents are the events of the last record. A tail does not read blobs: an offloaded event
	// has only its Seq here (GetRecordFromLeader reads a record whole).
	LastEvents []session.Event
	LastMsgID  string // Nats-Msg-Id of the last record
}

// GetTail reads the last record of the session with a direct get (none: the zero Tail). On R>1 a
// follower may answer it stale, which can only cause a guard conflict on the next Append, never a
// bad write; use GetTailFromLeader or Read for a leader-consistent view. A bad record is a
// *session.Error. The record's blobs are not read (see Tail.LastEvents).
func (s *Store) GetTail(ctx context.Context, id string) (Tail, error) {
	return s.tail(ctx, id, "", s.Stream.GetLastMsgForSubject)
}

// GetTailFromLeader is GetTail read through the stream leader (the JetStream API's message get,
// not a direct get), so that on R>1 it is never stale. The publisher and Append use it where a
// stale tail would cost something: deciding whether a retried record is our own after a guard
// conflict or a deduplication. It costs a round trip to the leader.
func (s *Store) GetTailFromLeader(ctx context.Context, id string) (Tail, error) {
	return s.tail(ctx, id, " from the stream leader", s.leaderLastMsg)
}

// tail reads the session's last record with get (a direct or a leader get) and decodes it, without
// its blobs (what a tail is for, the guard and the next seq, is in the record); where names the kind
// of read in errors.
func (s *Store) tail(ctx context.Context, id, where string, get func(context.Context, string) (*natsjs.RawStreamMsg, error)) (Tail, error) {
	subject, err := s.Subject(id)
	if err != nil {
		return Tail{}, err
	}
	msg, err := get(ctx, subject)
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return Tail{}, nil
	}
	if err != nil {
		return Tail{}, fmt.Errorf("read the tail of session %q (subject %s)%s: %w", id, subject, where, err)
	}
	evs, err := s.decodeStored(ctx, id, msg.Header, msg.Data, msg.Sequence, false)
	if err != nil {
		return Tail{}, err
	}
	return Tail{
		LastStreamSeq: msg.Sequence,
		NextSeq:       evs[len(evs)-1].Seq + 1,
		LastEvents:    evs,
		LastMsgID:     msg.Header.Get(natsjs.MsgIDHeader),
	}, nil
}

// GetRecordFromLeader reads the record of session id at stream seq streamSeq through the stream
// leader, as a Tail of that record. found is false when the stream holds no message of the session
// at that seq (purged, or lost). A record that does not decode is a *session.Error.
func (s *Store) GetRecordFromLeader(ctx context.Context, id string, streamSeq uint64) (rec Tail, found bool, err error) {
	subject, err := s.Subject(id)
	if err != nil {
		return Tail{}, false, err
	}
	msg, err := s.leaderGet(ctx, map[string]any{"seq": streamSeq})
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return Tail{}, false, nil
	}
	if err != nil {
		return Tail{}, false, fmt.Errorf("read stream seq %d of session %q from the stream leader: %w", streamSeq, id, err)
	}
	if msg.Subject != subject {
		return Tail{}, false, nil
	}
	evs, err := s.decodeStored(ctx, id, msg.Header, msg.Data, msg.Sequence, true)
	if err != nil {
		return Tail{}, false, err
	}
	return Tail{LastStreamSeq: msg.Sequence, NextSeq: evs[len(evs)-1].Seq + 1, LastEvents: evs, LastMsgID: msg.Header.Get(natsjs.MsgIDHeader)}, true, nil
}

// leaderGetTimeout bounds leaderLastMsg when the caller's ctx has no deadline.
const leaderGetTimeout = 5 * time.Second

// leaderLastMsg gets the last message of subject with the JetStream API's STREAM.MSG.GET, which
// the stream leader answers (a direct get may be answered by any replica).
func (s *Store) leaderLastMsg(ctx context.Context, subject string) (*natsjs.RawStreamMsg, error) {
	return s.leaderGet(ctx, map[string]any{"last_by_subj": subject})
}

// leaderNextMsg gets the first message of subject at or after stream seq seq, like leaderLastMsg.
func (s *Store) leaderNextMsg(ctx context.Context, subject string, seq uint64) (*natsjs.RawStreamMsg, error) {
	return s.leaderGet(ctx, map[string]any{"seq": seq, "next_by_subj": subject})
}

// leaderGet sends one STREAM.MSG.GET request to AGENTLOG (natsjs.ErrMsgNotFound when no message
// matches).
func (s *Store) leaderGet(ctx context.Context, request map[string]any) (*natsjs.RawStreamMsg, error) {
	return s.leaderGetFrom(ctx, wire.StreamName, request)
}

// leaderGetFrom is leaderGet on the stream named stream.
func (s *Store) leaderGetFrom(ctx context.Context, stream string, request map[string]any) (*natsjs.RawStreamMsg, error) {
	if _, ok := ctx.Deadline(); !ok {
		// Like nats.go's jetstream calls: a reply lost on a dropped connection must not block
		// the caller forever.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, leaderGetTimeout)
		defer cancel()
	}
	req, _ := json.Marshal(request)
	reply, err := s.JS.Conn().RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Message *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Header  []byte    `json:"hdrs"`
			Data    []byte    `json:"data"`
			Time    time.Time `json:"time"`
		} `json:"message"`
		Error *natsjs.APIError `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return nil, fmt.Errorf("decode the stream message get reply: %w", err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == natsjs.JSErrCodeMessageNotFound {
			return nil, natsjs.ErrMsgNotFound
		}
		return nil, resp.Error
	}
	if resp.Message == nil {
		return nil, errors.New("the stream message get reply holds no message")
	}
	m := &natsjs.RawStreamMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Seq, Data: resp.Message.Data, Time: resp.Message.Time}
	if len(resp.Message.Header) > 0 {
		if m.Header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, fmt.Errorf("decode the headers of stream seq %d: %w", resp.Message.Seq, err)
		}
	}
	return m, nil
}

// Read returns all events of session id in order and the stream seq of its last record (none:
// no events, 0). It reads at least up to the last record the stream leader had when Read began
// (read-your-writes, also on R>1). A record that does not decode, names another session or does
// not continue the previous one is a *session.Error naming the session, the seq, the stream seq
// and the rule. How it reads: ARCHITECTURE.md, "Reading a session".
func (s *Store) Read(ctx context.Context, id string) ([]session.Event, uint64, error) {
	var events []session.Event
	last, err := s.ReadRecords(ctx, id, func(streamSeq uint64, evs []session.Event) error {
		events = append(events, evs...)
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return events, last, nil
}

// hotReadCheck is how long a read's consumer may deliver nothing before the read checks that the
// records it waits for are still there (archived under it: ARCHITECTURE.md, "Lifecycle").
const hotReadCheck = 2 * time.Second

// readCold hands fn the events of session id's archive from seq from on (as records at stream seq
// 0); a session without an archive has nothing to hand (a session with no events at all).
func (s *Store) readCold(ctx context.Context, id string, from int64, fn func(streamSeq uint64, events []session.Event, body []byte) error) error {
	tok, err := wire.Token(id)
	if err != nil {
		return err
	}
	head, found, err := s.archiveHead(ctx, tok)
	if err != nil {
		return fmt.Errorf("read session %q: %w", id, err)
	}
	if !found {
		if from == 0 {
			return nil
		}
		return fmt.Errorf("read session %q: %w: its records from seq %d on are neither hot nor archived", id, ErrLogChanged, from)
	}
	if head.Events < from {
		return fmt.Errorf("read session %q: %w: its archive holds seqs 0..%d, the read is at seq %d", id, ErrLogChanged, head.Events-1, from)
	}
	_, err = s.readArchivedRecords(ctx, head, from, fn)
	return err
}

// readColdPrefix hands fn the events 0..first-1 of session id, which its archive holds (the hot
// records start at seq first).
func (s *Store) readColdPrefix(ctx context.Context, id string, first int64, fn func(streamSeq uint64, events []session.Event, body []byte) error) error {
	tok, err := wire.Token(id)
	if err != nil {
		return err
	}
	head, found, err := s.archiveHead(ctx, tok)
	if err != nil {
		return fmt.Errorf("read session %q: %w", id, err)
	}
	if !found || head.Events != first {
		return wire.RecordError(id, first, 0, session.RuleRecordContinue, "the hot records start at seq %d but no archive holds seqs 0..%d", first, first-1)
	}
	_, err = s.readArchivedRecords(ctx, head, 0, fn)
	return err
}

// readBatch bounds the records a Read buffers client-side.
const readBatch = 256

// directReadRecords is how many new records ReadRecordsAfter gets one by one (STREAM.MSG.GET)
// before it sets up an ordered consumer for the rest.
const directReadRecords = 4

// ReadRecords is Read without collecting: it calls fn for each record of session id in order with
// its stream seq and its (checked) events, and returns the stream seq of the last record (0 when
// there is none). An error from fn stops the read and is returned as is.
func (s *Store) ReadRecords(ctx context.Context, id string, fn func(streamSeq uint64, events []session.Event) error) (uint64, error) {
	return s.ReadRecordsAfter(ctx, id, 0, 0, fn)
}

// ErrLogChanged is returned (wrapped) by ReadRecordsAfter when the session's log no longer
// reaches afterStreamSeq (its records were purged by an operator): what the caller read before is
// not this log's prefix any more; read it again from the start.
var ErrLogChanged = errors.New("the session's log changed under the reader")

// ReadRecordsAfter is ReadRecords for the records stored after stream seq afterStreamSeq, the last
// record the caller has read; nextSeq is the event seq that record ended before (the next record
// must start there; 0 with afterStreamSeq 0). It returns the stream seq of the last record read,
// afterStreamSeq when nothing was appended since. That check is one STREAM.MSG.GET of the
// session's last record, so a caller that keeps what it read pays only for the new records.
// Errors are ReadRecords', a wrapped ErrLogChanged when the log's last record is below
// afterStreamSeq, and a *session.Error (session.RuleRecordContinue) when the first new record does not
// start at nextSeq.
func (s *Store) ReadRecordsAfter(ctx context.Context, id string, afterStreamSeq uint64, nextSeq int64, fn func(streamSeq uint64, events []session.Event) error) (uint64, error) {
	return s.readRecordsAfter(ctx, id, afterStreamSeq, nextSeq, func(streamSeq uint64, events []session.Event, _ []byte) error {
		return fn(streamSeq, events)
	})
}

// ReadRecordBodies is ReadRecords that also hands fn each record's body: its events' lines
// joined by "\n", one line per event, in a buffer of its own that the events alias (fn may keep
// both). A line is the event as stored, which decodes to the event fn gets.
func (s *Store) ReadRecordBodies(ctx context.Context, id string, fn func(streamSeq uint64, events []session.Event, body []byte) error) (uint64, error) {
	return s.readRecordsAfter(ctx, id, 0, 0, fn)
}

// readRecordsAfter is ReadRecordsAfter handing fn the record bodies too.
func (s *Store) readRecordsAfter(ctx context.Context, id string, afterStreamSeq uint64, nextSeq int64, fn func(streamSeq uint64, events []session.Event, body []byte) error) (uint64, error) {
	subject, err := s.Subject(id)
	if err != nil {
		return 0, err
	}
	// The leader's last record of the session bounds the read from below: whatever was acked
	// before Read began is read, even when the consumer's first view is behind (a consumer
	// created during a leader change on R>1 can report nothing pending).
	var target uint64
	switch last, err := s.leaderLastMsg(ctx, subject); {
	case errors.Is(err, natsjs.ErrMsgNotFound):
		target = 0
	case err != nil:
		return 0, fmt.Errorf("read session %q: its last record from the stream leader: %w", id, err)
	default:
		target = last.Sequence
	}
	fresh := afterStreamSeq == 0 && nextSeq == 0 // a read of the whole log: it may live in cold storage
	switch {
	case target < afterStreamSeq:
		return 0, fmt.Errorf("read session %q: %w: its last record is stream seq %d, below stream seq %d already read", id, ErrLogChanged, target, afterStreamSeq)
	case target == 0 && fresh:
		return 0, s.readCold(ctx, id, 0, fn) // archived (or no events at all)
	case target == afterStreamSeq:
		return afterStreamSeq, nil // nothing new (or no records at all)
	}
	lastStreamSeq := afterStreamSeq
	// gone is the fallback when the hot records vanish under the read (archived meanwhile: the
	// archive holds the same events) or start after a cold prefix: the rest is read from the
	// archive, from the next seq on.
	gone := func(cause error) (uint64, error) {
		if !fresh && lastStreamSeq == afterStreamSeq {
			return 0, cause
		}
		if err := s.readCold(ctx, id, nextSeq, fn); err != nil {
			return 0, errors.Join(cause, err)
		}
		return 0, nil
	}
	// take checks one record (it must continue the previous one), hands it to fn and moves on.
	take := func(streamSeq uint64, h nats.Header, body []byte) error {
		evs, copied, err := s.decodeStoredBody(ctx, id, h, body, streamSeq, true)
		if err != nil {
			return err
		}
		if evs[0].Seq != nextSeq {
			return wire.RecordError(id, evs[0].Seq, streamSeq, session.RuleRecordContinue,
				"record starts at seq %d but the previous record (stream seq %d) ends before seq %d", evs[0].Seq, lastStreamSeq, nextSeq)
		}
		if err := fn(streamSeq, evs, copied); err != nil {
			return err
		}
		nextSeq, lastStreamSeq = evs[len(evs)-1].Seq+1, streamSeq
		return nil
	}
	// A few new records (an agent's read-your-writes loop, a short session): get them one by one
	// from the stream leader, the next record of the subject after the last one read, instead of
	// setting up a consumer. Each get returns the first record at or after its position, so none
	// in between is skipped.
	for range directReadRecords {
		m, err := s.leaderNextMsg(ctx, subject, lastStreamSeq+1)
		if errors.Is(err, natsjs.ErrMsgNotFound) {
			return gone(fmt.Errorf("read session %q after stream seq %d (next event seq %d): %w: its records were purged", id, lastStreamSeq, nextSeq, ErrLogChanged))
		}
		if err != nil {
			return 0, fmt.Errorf("read session %q after stream seq %d (next event seq %d): %w", id, lastStreamSeq, nextSeq, err)
		}
		if fresh && lastStreamSeq == 0 {
			if first, err := strconv.ParseInt(m.Header.Get(wire.HeaderFirstSeq), 10, 64); err == nil && first > 0 {
				// The hot records follow a cold prefix (archived while a writer appended).
				if err := s.readColdPrefix(ctx, id, first, fn); err != nil {
					return 0, err
				}
				nextSeq = first
			}
		}
		if err := take(m.Sequence, m.Header, m.Data); err != nil {
			return 0, err
		}
		if lastStreamSeq >= target {
			return lastStreamSeq, nil
		}
	}
	cfg := natsjs.OrderedConsumerConfig{FilterSubjects: []string{subject}, DeliverPolicy: natsjs.DeliverAllPolicy}
	if lastStreamSeq > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = natsjs.DeliverByStartSequencePolicy, lastStreamSeq+1
	}
	cons, err := s.Stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return 0, fmt.Errorf("read session %q: create ordered consumer on %s: %w", id, subject, err)
	}
	info := cons.CachedInfo()
	defer func() {
		// Best effort: an ordered consumer is ephemeral and goes away by itself when inactive.
		if info != nil && info.Name != "" {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.JS.Options().DefaultTimeout)
			_ = s.Stream.DeleteConsumer(dctx, info.Name)
			cancel()
		}
	}()
	// Bound the client-side buffer by bytes (records are up to MaxMsgSize each) and by count:
	// PullMaxBytes alone makes nats.go size the message channel for a million messages (an 8 MB
	// allocation per Read, which dominated the CPU of a messages query).
	iter, err := cons.Messages(natsjs.PullMaxMessagesWithBytesLimit(readBatch, 4*int(s.MaxMsgSize)))
	if err != nil {
		return 0, fmt.Errorf("read session %q: %w", id, err)
	}
	defer iter.Stop()

	// A watchdog checks every hotReadCheck whether the records still to read are there (archived
	// under the read: the consumer would then wait for ever), and stops the read if not.
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	var seen atomic.Uint64
	var vanished atomic.Bool
	seen.Store(lastStreamSeq)
	var watch *time.Timer
	watch = time.AfterFunc(hotReadCheck, func() {
		if at := seen.Load(); at < target {
			m, err := s.leaderNextMsg(lctx, subject, at+1)
			if errors.Is(err, natsjs.ErrMsgNotFound) || err == nil && m.Sequence > target {
				vanished.Store(true)
				lcancel()
				return
			}
		}
		if lctx.Err() == nil {
			watch.Reset(hotReadCheck)
		}
	})
	defer watch.Stop()
	for {
		msg, err := iter.Next(natsjs.NextContext(lctx))
		if err != nil && vanished.Load() {
			return gone(fmt.Errorf("read session %q after stream seq %d: %w: its records were purged", id, lastStreamSeq, ErrLogChanged))
		}
		if err != nil {
			return 0, fmt.Errorf("read session %q after stream seq %d (next event seq %d): %w", id, lastStreamSeq, nextSeq, err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return 0, fmt.Errorf("read session %q after stream seq %d: %w", id, lastStreamSeq, err)
		}
		if err := take(meta.Sequence.Stream, msg.Headers(), msg.Data()); err != nil {
			return 0, err
		}
		seen.Store(lastStreamSeq)
		if lastStreamSeq >= target && meta.NumPending == 0 {
			return lastStreamSeq, nil
		}
	}
}

// decodeStored decodes a stored record of session id, checks that it belongs to it, and, with
// withBlobs, reads its offloaded events from their blobs (Store.DecodeRecord); without, they hold
// only their seq.
func (s *Store) decodeStored(ctx context.Context, id string, h nats.Header, body []byte, streamSeq uint64, withBlobs bool) ([]session.Event, error) {
	evs, _, err := s.decodeStoredBody(ctx, id, h, body, streamSeq, withBlobs)
	return evs, err
}

// decodeStoredBody is decodeStored that also returns the copy of body the events alias (the
// lines of offloaded events in it are empty).
func (s *Store) decodeStoredBody(ctx context.Context, id string, h nats.Header, body []byte, streamSeq uint64, withBlobs bool) ([]session.Event, []byte, error) {
	rec, err := wire.DecodeRecordAt(h, body, streamSeq)
	if err != nil {
		return nil, nil, err
	}
	if rec.ID != id {
		return nil, nil, wire.RecordError(id, rec.Events[0].Seq, streamSeq, session.RuleRecordSession, "record names session %q", rec.ID)
	}
	if withBlobs && len(rec.Blobs) > 0 {
		if err := s.resolve(ctx, id, h, rec.Events, rec.Blobs, streamSeq); err != nil {
			return nil, nil, err
		}
	}
	return rec.Events, rec.Body, nil
}

// Subject returns agentlog.session.<partition>.<token> for id.
func (s *Store) Subject(id string) (string, error) {
	return wire.SessionSubject(id, s.Partitions)
}
