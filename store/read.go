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
	// has only its Seq here (RecordFromLeader reads a record whole).
	LastEvents []session.Event
	LastMsgID  string // Nats-Msg-Id of the last record
}

// Tail reads the session's last record with a direct get (none: the zero Tail). On R>1 a
// follower may answer it stale, which can only cause a guard conflict on the next Append, never a
// bad write; use TailFromLeader or Records for a leader-consistent view. A bad record is a
// *session.Error. The record's blobs are not read (see Tail.LastEvents).
func (ss *Session) Tail(ctx context.Context) (Tail, error) {
	if ss.s.stream == nil {
		return Tail{}, ss.noStore()
	}
	return ss.tail(ctx, "", ss.s.stream.GetLastMsgForSubject)
}

// TailFromLeader is Tail read through the stream leader (the JetStream API's message get, not a
// direct get), so that on R>1 it is never stale. The publisher and Append use it where a stale
// tail would cost something: deciding whether a retried record is our own after a guard conflict
// or a deduplication. It costs a round trip to the leader.
func (ss *Session) TailFromLeader(ctx context.Context) (Tail, error) {
	return ss.tail(ctx, " from the stream leader", ss.s.leaderLastMsg)
}

// noStore is the error of a handle of a Store that is not provisioned (the zero Store).
func (ss *Session) noStore() error {
	return fmt.Errorf("session %s: the store is not open (use Provision or Open to get a Store)", wire.QuoteID(ss.id))
}

// tail reads the session's last record with get (a direct or a leader get) and decodes it, without
// its blobs (what a tail is for, the guard and the next seq, is in the record); where names the kind
// of read in errors.
func (ss *Session) tail(ctx context.Context, where string, get func(context.Context, string) (*natsjs.RawStreamMsg, error)) (Tail, error) {
	if ss.s.js == nil {
		return Tail{}, ss.noStore()
	}
	msg, err := get(ctx, ss.subject)
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return Tail{}, nil
	}
	if err != nil {
		return Tail{}, fmt.Errorf("read the tail of session %q (subject %s)%s: %w", ss.id, ss.subject, where, err)
	}
	evs, err := ss.decodeStored(ctx, msg.Header, msg.Data, msg.Sequence, false)
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

// RecordFromLeader reads the session's record at stream seq streamSeq through the stream leader,
// as a Tail of that record (its blobs read). found is false when the stream holds no message of
// the session at that seq (purged, or lost). A record that does not decode is a *session.Error.
func (ss *Session) RecordFromLeader(ctx context.Context, streamSeq uint64) (rec Tail, found bool, err error) {
	if ss.s.js == nil {
		return Tail{}, false, ss.noStore()
	}
	msg, err := ss.s.leaderGet(ctx, map[string]any{"seq": streamSeq})
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return Tail{}, false, nil
	}
	if err != nil {
		return Tail{}, false, fmt.Errorf("read stream seq %d of session %q from the stream leader: %w", streamSeq, ss.id, err)
	}
	if msg.Subject != ss.subject {
		return Tail{}, false, nil
	}
	evs, err := ss.decodeStored(ctx, msg.Header, msg.Data, msg.Sequence, true)
	if err != nil {
		return Tail{}, false, err
	}
	return Tail{LastStreamSeq: msg.Sequence, NextSeq: evs[len(evs)-1].Seq + 1, LastEvents: evs, LastMsgID: msg.Header.Get(natsjs.MsgIDHeader)}, true, nil
}

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
	reply, err := s.js.Conn().RequestWithContext(ctx, s.api("STREAM.MSG.GET."+stream), req)
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
// Record is one record of a session, as Session.Records reads it.
type Record struct {
	StreamSeq uint64    // the record's stream sequence in AGENTLOG
	Stored    time.Time // when the server stored it (its timestamp)
	// Scanned (with the Scanned option) are Events in the shared form, each scanned once by the
	// decoder (session.Scanned): a reader that validates them reads their data without a second
	// parse.
	Scanned []session.Scanned
	Events  []session.Event // its events, checked; offloaded ones read from their blobs
	// Body is the record's events' lines joined by "\n", one line per event, in a buffer of its
	// own that Events alias (a handler may keep both). A line is the event as stored, which decodes
	// to its event; the line of an offloaded event is empty.
	Body []byte
}

// ReadOpt is an option of Session.Records. An option refuses bad input: Records then fails with
// its error before reading anything.
type ReadOpt func(*readOpts) error

type readOpts struct {
	after   uint64 // AfterStreamSeq
	nextSeq int64
	follow  bool
	upTo    uint64 // UpTo (0: the leader's last record)
	scan    bool   // Scanned
}

// Scanned hands each record's events in the shared form too (Record.Scanned), as the decoder
// scanned them (wire.ScanRecordAt).
func Scanned() ReadOpt {
	return func(o *readOpts) error {
		o.scan = true
		return nil
	}
}

// AfterStreamSeq reads only the records stored after stream seq streamSeq, the last record the
// caller has read; nextSeq is the event seq that record ended before (the next record must start
// there; 0 with streamSeq 0). When nothing was appended since, Records returns streamSeq at the
// cost of one STREAM.MSG.GET of the session's last record, so a caller that keeps what it read
// pays only for the new records. A log whose last record is now below streamSeq (purged by an
// operator) is a wrapped ErrLogChanged; a first new record that does not start at nextSeq is a
// *session.Error (session.RuleRecordContinue).
func AfterStreamSeq(streamSeq uint64, nextSeq int64) ReadOpt {
	return func(o *readOpts) error {
		if nextSeq < 0 || (streamSeq == 0 && nextSeq != 0) {
			return fmt.Errorf("after stream seq %d, next event seq %d: want a next seq ≥ 0, and 0 after stream seq 0", streamSeq, nextSeq)
		}
		o.after, o.nextSeq = streamSeq, nextSeq
		return nil
	}
}

// UpTo reads up to the record at stream seq streamSeq, which the caller knows to be one of the
// session's (the last record a projection folded), instead of up to the last record the stream
// leader has: the read does not ask for the log's tail, and it gets the first records (up to
// directReadRecords) with direct gets, which a replica behind the leader may answer (the leader is
// asked when it has none). A log without a record of the session at streamSeq (records lost) is a
// wrapped ErrLogChanged. Not with Follow.
func UpTo(streamSeq uint64) ReadOpt {
	return func(o *readOpts) error {
		if streamSeq == 0 {
			return errors.New("up to stream seq 0: want a record's stream seq")
		}
		o.upTo = streamSeq
		return nil
	}
}

// Follow goes on after the log's end: Records then hands fn each record appended later, as it is
// stored, until ctx ends (it returns ctx's error) or fn fails.
func Follow() ReadOpt {
	return func(o *readOpts) error {
		o.follow = true
		return nil
	}
}

// Collect returns a Records handler that appends the events of each record to *events.
func Collect(events *[]session.Event) func(Record) error {
	return func(r Record) error {
		*events = append(*events, r.Events...)
		return nil
	}
}

// ErrLogChanged is returned (wrapped) by Records with AfterStreamSeq when the session's log no
// longer reaches that stream seq (its records were purged by an operator): what the caller read
// before is not this log's prefix any more; read it again from the start.
var ErrLogChanged = errors.New("the session's log changed under the reader")

// readBatch is how many records one batched direct get of a read asks for (and readBatchBytes how
// many bytes at most: the server stops a batch at the record that crosses it).
const (
	readBatch      = 256
	readBatchBytes = 8 << 20
)

// followPoll is how often a Follow read looks for new records without a wake-up (one lost, or
// dropped by a slow subscriber): a lost wake-up costs at most this much latency.
const followPoll = time.Second

// Records calls fn for each record of the session in order (ReadOpt: from where, and whether to
// follow the log after its end) and returns the stream seq of the last record read (0 when there
// is none; with AfterStreamSeq, that stream seq when nothing is new). It reads at least up to the
// last record the stream leader had when Records began (read-your-writes, also on R>1). A record
// that does not decode, names another session or does not continue the previous one is a
// *session.Error naming the session, the seq, the stream seq and the rule; an error from fn stops
// the read and is returned as is. How it reads: ARCHITECTURE.md, "Reading a session".
func (ss *Session) Records(ctx context.Context, fn func(Record) error, opts ...ReadOpt) (uint64, error) {
	var o readOpts
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return 0, fmt.Errorf("read session %q: %w", ss.id, err)
		}
	}
	if ss.s.js == nil || ss.s.stream == nil {
		return 0, ss.noStore()
	}
	if o.upTo > 0 && o.follow {
		return 0, fmt.Errorf("read session %q: UpTo and Follow do not go together", ss.id)
	}
	if o.scan {
		// Records read elsewhere than from AGENTLOG (the archive's) come without the decoder's
		// scan: they are wrapped, to be scanned when first read.
		inner := fn
		fn = func(rec Record) error {
			if len(rec.Scanned) != len(rec.Events) {
				rec.Scanned = make([]session.Scanned, len(rec.Events))
				for i := range rec.Events {
					rec.Scanned[i] = session.Scan(rec.Events[i])
				}
			}
			return inner(rec)
		}
	}
	r := &recordReader{ss: ss, fn: fn, last: o.after, next: o.nextSeq, scan: o.scan}
	var w *wakeups
	if o.follow {
		var err error
		if w, err = r.subscribeWakeups(); err != nil {
			return 0, err
		}
	}
	if o.upTo > 0 {
		if err := r.readTo(ctx, o.upTo); err != nil {
			return 0, err
		}
		return r.last, nil
	}
	if err := r.read(ctx, o.follow); err != nil {
		if w != nil {
			_ = w.sub.Unsubscribe()
		}
		return 0, err
	}
	if o.follow {
		return 0, r.follow(ctx, w)
	}
	return r.last, nil
}

// recordReader is one Records call: where it is (the last record handed to fn and the event seq
// the next one must start at).
type recordReader struct {
	ss   *Session
	fn   func(Record) error
	last uint64 // stream seq of the last record read (or AfterStreamSeq's)
	next int64  // the event seq the next record must start at
	scan bool   // Scanned
}

// take checks one record (it must continue the previous one), hands it to fn and moves on.
func (r *recordReader) take(ctx context.Context, streamSeq uint64, stored time.Time, h nats.Header, body []byte) error {
	var evs []session.Event
	var scanned []session.Scanned
	var copied []byte
	var err error
	if r.scan {
		scanned, copied, err = r.ss.scanStoredBody(ctx, h, body, streamSeq)
		evs = make([]session.Event, len(scanned))
		for i := range scanned {
			evs[i] = scanned[i].Event
		}
	} else {
		evs, copied, err = r.ss.decodeStoredBody(ctx, h, body, streamSeq, true)
	}
	if err != nil {
		return err
	}
	if evs[0].Seq != r.next {
		return wire.RecordError(r.ss.id, evs[0].Seq, streamSeq, session.RuleRecordContinue,
			"record starts at seq %d but the previous record (stream seq %d) ends before seq %d", evs[0].Seq, r.last, r.next)
	}
	if err := r.fn(Record{StreamSeq: streamSeq, Stored: stored, Events: evs, Body: copied, Scanned: scanned}); err != nil {
		return err
	}
	r.next, r.last = evs[len(evs)-1].Seq+1, streamSeq
	return nil
}

// read reads the records stored after r.last, up to the leader's last record of the session.
// Following, a log without new records is no error and nothing is read (follow reads them).
func (r *recordReader) read(ctx context.Context, following bool) error {
	ss, s := r.ss, r.ss.s
	// The leader's last record of the session bounds the read from below: whatever was acked
	// before the read began is read, even when the direct gets below are answered by a replica
	// behind the leader (R>1).
	var target uint64
	switch last, err := s.leaderLastMsg(ctx, ss.subject); {
	case errors.Is(err, natsjs.ErrMsgNotFound):
		target = 0
	case err != nil:
		return fmt.Errorf("read session %q: its last record from the stream leader: %w", ss.id, err)
	default:
		target = last.Sequence
	}
	fresh := r.last == 0 && r.next == 0 // a read of the whole log: it may live in cold storage
	switch {
	case target < r.last:
		return fmt.Errorf("read session %q: %w: its last record is stream seq %d, below stream seq %d already read", ss.id, ErrLogChanged, target, r.last)
	case target == 0 && fresh:
		return r.cold(ctx, 0) // archived (or no events at all)
	case target == r.last:
		return nil // nothing new (or no records at all)
	}
	started := r.last
	for r.last < target {
		got, _, err := r.batch(ctx, 0, fresh && r.last == 0)
		if err != nil {
			return err
		}
		if got > 0 {
			continue
		}
		// Nothing after r.last where the direct get was answered: a replica behind the leader
		// (it holds a prefix of the log), or the records were purged. The leader says which.
		m, err := s.leaderNextMsg(ctx, ss.subject, r.last+1)
		if errors.Is(err, natsjs.ErrMsgNotFound) {
			return r.gone(ctx, fresh, started, fmt.Errorf("read session %q after stream seq %d (next event seq %d): %w: its records were purged", ss.id, r.last, r.next, ErrLogChanged))
		}
		if err != nil {
			return fmt.Errorf("read session %q after stream seq %d (next event seq %d): %w", ss.id, r.last, r.next, err)
		}
		if err := r.first(ctx, fresh && r.last == 0, m); err != nil {
			return err
		}
	}
	return nil
}

// batch reads the records of the session after r.last with one batched direct get (any replica
// may answer it) and hands them to fn; upTo > 0 stops at that stream seq (a record after it is
// not taken). coldCheck: the first record may follow an archived prefix. It returns how many
// records it took; more reports that the batch may have stopped at its limits (not at the end).
func (r *recordReader) batch(ctx context.Context, upTo uint64, coldCheck bool) (n int, more bool, err error) {
	ss, s := r.ss, r.ss.s
	msgs, err := s.getDirect(ctx, wire.StreamName, map[string]any{"seq": r.last + 1, "next_by_subj": ss.subject, "batch": readBatch, "max_bytes": readBatchBytes})
	if err != nil {
		return 0, false, fmt.Errorf("read session %q after stream seq %d (next event seq %d): %w", ss.id, r.last, r.next, err)
	}
	size := 0
	for _, m := range msgs {
		if upTo > 0 && m.Sequence > upTo {
			return n, false, nil
		}
		if err := r.first(ctx, coldCheck && n == 0, m); err != nil {
			return n, false, err
		}
		n++
		size += len(m.Data) + len(m.Subject) + 256
	}
	return n, n == readBatch || size >= readBatchBytes-int(s.maxMsgSize)-(1<<16), nil
}

// first takes m, after the session's archived prefix when coldCheck and m's record follows one.
func (r *recordReader) first(ctx context.Context, coldCheck bool, m *natsjs.RawStreamMsg) error {
	if coldCheck {
		if first, err := strconv.ParseInt(m.Header.Get(wire.HeaderFirstSeq), 10, 64); err == nil && first > 0 {
			// The hot records follow a cold prefix (archived while a writer appended).
			if err := r.coldPrefix(ctx, first); err != nil {
				return err
			}
		}
	}
	return r.take(ctx, m.Sequence, m.Time, m.Header, m.Data)
}

// gone is the fallback of a read whose hot records vanish under it (archived meanwhile: the
// archive holds the same events): the rest is read from the archive, from the next seq on. A read
// after a position (AfterStreamSeq) that got nothing yet reports cause instead.
func (r *recordReader) gone(ctx context.Context, fresh bool, started uint64, cause error) error {
	if !fresh && r.last == started {
		return cause
	}
	if err := r.cold(ctx, r.next); err != nil {
		return errors.Join(cause, err)
	}
	return nil
}

// cold hands fn the events of the session's archive from seq from on (as records at stream seq
// 0); a session without an archive has nothing to hand (a session with no events at all).
func (r *recordReader) cold(ctx context.Context, from int64) error {
	ss, s := r.ss, r.ss.s
	head, found, err := s.archiveHead(ctx, ss.tok)
	if err != nil {
		return fmt.Errorf("read session %q: %w", ss.id, err)
	}
	if !found {
		if from == 0 {
			return nil
		}
		return fmt.Errorf("read session %q: %w: its records from seq %d on are neither hot nor archived", ss.id, ErrLogChanged, from)
	}
	if head.Events < from {
		return fmt.Errorf("read session %q: %w: its archive holds seqs 0..%d, the read is at seq %d", ss.id, ErrLogChanged, head.Events-1, from)
	}
	next, err := s.readArchivedRecords(ctx, head, from, -1, r.fn)
	if err == nil {
		r.next = next
	}
	return err
}

// coldPrefix hands fn the events 0..first-1 of the session, which its archive holds (the hot
// records start at seq first). The archive may be newer than the hot records' cold prefix (an
// archive made since, which holds the hot records too, before it purges them): it is read up to
// seq first, and the read goes on with the hot records (or, once they are purged, with the rest of
// that archive).
func (r *recordReader) coldPrefix(ctx context.Context, first int64) error {
	ss, s := r.ss, r.ss.s
	head, found, err := s.archiveHead(ctx, ss.tok)
	if err != nil {
		return fmt.Errorf("read session %q: %w", ss.id, err)
	}
	if !found || head.Events < first {
		return wire.RecordError(ss.id, first, 0, session.RuleRecordContinue, "the hot records start at seq %d but no archive holds seqs 0..%d", first, first-1)
	}
	next, err := s.readArchivedRecords(ctx, head, 0, first, r.fn)
	if err == nil {
		r.next = next
	}
	return err
}

// readTo reads the records stored after r.last up to the one at stream seq upTo (UpTo).
func (r *recordReader) readTo(ctx context.Context, upTo uint64) error {
	ss, s := r.ss, r.ss.s
	missing := func() error {
		return fmt.Errorf("read session %q: %w: no record of it at stream seq %d (read to stream seq %d)", ss.id, ErrLogChanged, upTo, r.last)
	}
	for r.last < upTo {
		got, _, err := r.batch(ctx, upTo, false)
		if err != nil {
			return err
		}
		if got > 0 {
			continue
		}
		// A replica behind holds a prefix, or the record after r.last is past upTo: ask the leader.
		m, err := s.leaderNextMsg(ctx, ss.subject, r.last+1)
		if errors.Is(err, natsjs.ErrMsgNotFound) {
			return missing()
		}
		if err != nil {
			return fmt.Errorf("read session %q after stream seq %d (next event seq %d): %w", ss.id, r.last, r.next, err)
		}
		if m.Sequence > upTo {
			return missing()
		}
		if err := r.take(ctx, m.Sequence, m.Time, m.Header, m.Data); err != nil {
			return err
		}
	}
	if r.last != upTo {
		return missing()
	}
	return nil
}

// wakeups is a core subscription on the session's subject that a Follow read uses only to learn
// that a record was published (it reads the record itself with a direct get): want is the
// highest last event seq a wake-up announced, c holds at most one notice.
type wakeups struct {
	sub  *nats.Subscription
	c    chan struct{}
	want atomic.Int64
}

// subscribeWakeups subscribes to the session's subject (before the read starts, so that no record
// stored after the read's bound goes without a wake-up).
func (r *recordReader) subscribeWakeups() (*wakeups, error) {
	w := &wakeups{c: make(chan struct{}, 1)}
	w.want.Store(-1)
	sub, err := r.ss.s.js.Conn().Subscribe(r.ss.subject, func(m *nats.Msg) {
		if last, ok := wire.RecordLastSeq(m.Header); ok {
			for {
				cur := w.want.Load()
				if last <= cur || w.want.CompareAndSwap(cur, last) {
					break
				}
			}
		}
		select {
		case w.c <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, fmt.Errorf("follow session %q: subscribe to %s: %w", r.ss.id, r.ss.subject, err)
	}
	w.sub = sub
	return w, nil
}

// follow hands fn every record stored after r.last, as it is stored, until ctx ends. It reads by
// batched direct gets from r.last on, each time a wake-up says a record was published and every
// followPoll without one; a record announced but not yet readable (not stored yet, or a replica
// behind answered) is read again after a short backoff.
func (r *recordReader) follow(ctx context.Context, w *wakeups) error {
	defer func() { _ = w.sub.Unsubscribe() }()
	poll := time.NewTicker(followPoll)
	defer poll.Stop()
	backoff := time.Duration(0)
	var waited time.Duration
	for {
		for {
			got, more, err := r.batch(ctx, 0, false)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return err
			}
			if got == 0 || !more {
				break
			}
		}
		if want := w.want.Load(); want >= r.next && waited < followPoll {
			// Announced but not read yet: look again soon (a publish the stream refused, say a
			// guard conflict, is announced too: after followPoll it is no longer waited for).
			backoff = min(max(2*backoff, 2*time.Millisecond), 100*time.Millisecond)
			waited += backoff
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
			continue
		}
		backoff, waited = 0, 0
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.c:
		case <-poll.C:
		}
	}
}

// decodeStored decodes a stored record of the session, checks that it belongs to it, and, with
// withBlobs, reads its offloaded events from their blobs (Store.DecodeRecord); without, they hold
// only their seq.
func (ss *Session) decodeStored(ctx context.Context, h nats.Header, body []byte, streamSeq uint64, withBlobs bool) ([]session.Event, error) {
	evs, _, err := ss.decodeStoredBody(ctx, h, body, streamSeq, withBlobs)
	return evs, err
}

// scanStoredBody is decodeStoredBody (blobs read) giving the events in the shared form; they
// alias a copy of body, which it returns.
func (ss *Session) scanStoredBody(ctx context.Context, h nats.Header, body []byte, streamSeq uint64) ([]session.Scanned, []byte, error) {
	copied := append([]byte(nil), body...)
	rec, err := ss.s.scanRecord(ctx, h, copied, streamSeq)
	if err != nil {
		return nil, nil, err
	}
	if rec.ID != ss.id {
		return nil, nil, wire.RecordError(ss.id, rec.Events[0].Seq, streamSeq, session.RuleRecordSession, "record names session %q", rec.ID)
	}
	return rec.Events, copied, nil
}

// decodeStoredBody is decodeStored that also returns the copy of body the events alias (the
// lines of offloaded events in it are empty).
func (ss *Session) decodeStoredBody(ctx context.Context, h nats.Header, body []byte, streamSeq uint64, withBlobs bool) ([]session.Event, []byte, error) {
	rec, err := wire.DecodeRecordAt(h, body, streamSeq)
	if err != nil {
		return nil, nil, err
	}
	if rec.ID != ss.id {
		return nil, nil, wire.RecordError(ss.id, rec.Events[0].Seq, streamSeq, session.RuleRecordSession, "record names session %q", rec.ID)
	}
	if withBlobs && len(rec.Blobs) > 0 {
		if err := ss.s.resolve(ctx, ss.id, h, rec.Events, rec.Blobs, streamSeq); err != nil {
			return nil, nil, err
		}
	}
	return rec.Events, rec.Body, nil
}

// FollowAll calls fn with each record stored in AGENTLOG after the stream's last message when it
// starts (any session's, undecoded), in stream order, until ctx ends (it returns ctx's error) or
// fn fails. Like Follow, it reads by batched direct gets, woken by a core subscription on
// agentlog.session.> (a lost wake-up costs at most followPoll); it creates no consumer.
func (s *Store) FollowAll(ctx context.Context, fn func(*natsjs.RawStreamMsg) error) error {
	if s.js == nil || s.stream == nil {
		return errors.New("follow every session: the store is not open (use Provision or Open to get a Store)")
	}
	var woken atomic.Int64 // records announced and not read yet
	c := make(chan struct{}, 1)
	sub, err := s.js.Conn().Subscribe(wire.SubjectPrefix+".>", func(*nats.Msg) {
		woken.Add(1)
		select {
		case c <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return fmt.Errorf("follow every session: subscribe to %s.>: %w", wire.SubjectPrefix, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	info, err := s.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("follow every session: %w", err)
	}
	last := info.State.LastSeq
	poll := time.NewTicker(followPoll)
	defer poll.Stop()
	var backoff, waited time.Duration
	for {
		for {
			msgs, err := s.getDirect(ctx, wire.StreamName, map[string]any{"seq": last + 1, "next_by_subj": wire.SubjectPrefix + ".>", "batch": readBatch, "max_bytes": readBatchBytes})
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("follow every session after stream seq %d: %w", last, err)
			}
			for _, m := range msgs {
				if err := fn(m); err != nil {
					return err
				}
				last = m.Sequence
			}
			if n := int64(len(msgs)); n > 0 {
				if woken.Add(-n) < 0 {
					woken.Store(0)
				}
			}
			if len(msgs) < readBatch {
				break
			}
		}
		if woken.Load() > 0 && waited < followPoll {
			backoff = min(max(2*backoff, 2*time.Millisecond), 100*time.Millisecond)
			waited += backoff
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
			continue
		}
		woken.Store(0)
		backoff, waited = 0, 0
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c:
		case <-poll.C:
		}
	}
}
