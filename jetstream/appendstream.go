package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentlog/agentlog/session"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// StreamAppend writes a long run of a session's events (a fork's seed) as records packed up to
// the store's MaxMsgSize, without holding the run: it keeps the record being filled and the one
// before it. One record is published as Append publishes one; several are one atomic batch
// (ADR-50), sent as they fill and committed by Commit, so that nothing is visible before the
// commit and the whole run is visible after it. Get one from Store.BeginAppend; it is not safe for
// concurrent use.
type StreamAppend struct {
	s        *Store
	id, tok  string
	subject  string
	expected uint64
	msgID    string
	opts     appendOpts // WithHeaders: set on every record
	budget   int        // body bytes per record

	next     int64  // seq of the next event
	cur      []byte // body of the record being filled
	curFirst int64
	curCount int
	curBlobs []blobLine // the offloaded events of the record being filled
	curBlobH int        // the header bytes their HeaderBlob values take
	held     *nats.Msg  // the last full record, not sent yet (the commit must be the last one)
	spare    []byte     // the buffer of the record sent last, for the next one
	parts    int        // records sealed so far
	bp       jetstreamext.BatchPublisher
	line     []byte
	closed   bool
}

// streamAppendAckEvery is how many batch records StreamAppend sends between flow-control acks:
// it bounds what is buffered between the writer and the server to a few records.
const streamAppendAckEvery = 4

// BeginAppend starts a StreamAppend of session id's events after the record at stream seq
// expectedLastStreamSeq (0 for a new session, whose first event must be seq 0), with the options
// of Append (WithMsgID: the last record carries the id, the others "<id>~<k>", as a split Append).
// Errors name the session: a bad id or option, or a store without a max message size.
func (s *Store) BeginAppend(id string, expectedLastStreamSeq uint64, opts ...AppendOpt) (*StreamAppend, error) {
	subject, err := s.Subject(id)
	if err != nil {
		return nil, err
	}
	tok, _ := Token(id)
	var o appendOpts
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("append to session %q: %w", id, err)
		}
	}
	limit := int(s.MaxMsgSize)
	if limit <= 0 {
		return nil, fmt.Errorf("append to session %q: the store has no max message size (use Provision or Open to get a Store)", id)
	}
	// Worst-case headers of any record: seqs, counts and part numbers at their largest, plus the
	// batch headers jetstreamext adds.
	worst := recordHeader(tok, 1<<62, limit)
	worst.Set(natsjs.ExpectedLastSubjSeqHeader, strconv.FormatUint(^uint64(0), 10))
	if o.msgID != "" {
		worst.Set(natsjs.MsgIDHeader, partMsgID(o.msgID, MaxBatchRecords))
	}
	worst.Set(jetstreamext.BatchIDHeader, strings.Repeat("x", 22)) // a nuid
	worst.Set(jetstreamext.BatchSeqHeader, strconv.Itoa(MaxBatchRecords))
	worst.Set(jetstreamext.BatchCommitHeader, "1")
	o.setExtra(worst)
	a := &StreamAppend{s: s, id: id, tok: tok, subject: subject, expected: expectedLastStreamSeq, msgID: o.msgID, opts: o,
		budget: limit - headerWireSize(worst), next: -1}
	if expectedLastStreamSeq == 0 {
		a.next = 0
	}
	return a, nil
}

// Add encodes ev (its raw JSON fields already valid, as a decoded record's or a validated event's
// are) into the run. It may send the record before the one being filled. Errors: a
// *session.Error (seqs not consecutive, an event that does not encode), a wrapped ErrEventTooLarge,
// more records than MaxBatchRecords, or the failure to send a batch record; after an error the
// StreamAppend is discarded.
func (a *StreamAppend) Add(ctx context.Context, ev *session.Event) error {
	line, err := ev.AppendJSON(a.line[:0])
	if err != nil {
		a.Discard()
		return recordErr(a.id, ev.Seq, 0, session.RuleRecordEvent, "cannot encode event: %v", err)
	}
	a.line = line
	return a.AddLine(ctx, ev.Seq, line)
}

// AddLine is Add of the event at seq given as its record line: its compact JSON, one line of a
// stored record's body (Store.ReadRecordBodies), copied as is. line is not retained. A line no
// record holds is offloaded to BlobsBucket first; one over the store's MaxEventBytes is refused
// (ErrEventTooLarge, rule event-too-large).
func (a *StreamAppend) AddLine(ctx context.Context, seq int64, line []byte) error {
	if a.closed {
		return fmt.Errorf("append to session %q: the stream append is closed", a.id)
	}
	if (a.next >= 0 && seq != a.next) || seq < 0 {
		a.Discard()
		if a.next == 0 {
			return recordErr(a.id, seq, 0, session.RuleRecordContinue,
				"the first record of a session (expected last stream seq 0) must start at seq 0")
		}
		return recordErr(a.id, seq, 0, session.RuleRecordSeq, "follows seq %d in the same append; seqs must be consecutive", a.next-1)
	}
	if maxEvent := a.s.maxEventBytes(); int64(len(line)) > maxEvent {
		a.Discard()
		return tooLargeErr(a.id, seq, int64(len(line)), maxEvent)
	}
	var blob *blobLine
	need := len(line) // what the line takes of the record's budget
	if len(line) > a.budget {
		// No record holds it: offload it (as Append does), and the record carries an empty line
		// and its HeaderBlob value. The blob is stored before any record naming it is sent.
		bl, _, err := a.s.offload(ctx, a.id, a.tok, []session.Event{{Seq: seq}}, [][]byte{line}, []int{0})
		if err != nil {
			a.Discard()
			return err
		}
		blob = &bl[0]
		need = blob.ref.blobHeaderBytes()
	}
	if a.curCount > 0 && len(a.cur)+a.curBlobH+1+need > a.budget {
		if err := a.seal(ctx); err != nil {
			return err
		}
	}
	if a.curCount == 0 {
		a.curFirst = seq
	} else {
		a.cur = append(a.cur, '\n')
	}
	if blob != nil {
		blob.index = a.curCount
		a.curBlobs, a.curBlobH = append(a.curBlobs, *blob), a.curBlobH+need
	} else {
		a.cur = append(a.cur, line...)
	}
	a.curCount++
	a.next = seq + 1
	return nil
}

// seal closes the record being filled: the record held before it is sent as a batch record, and
// this one is held in its place.
func (a *StreamAppend) seal(ctx context.Context) error {
	if a.held != nil {
		if err := a.send(ctx, a.held); err != nil {
			return err
		}
	}
	a.parts++
	if a.parts > MaxBatchRecords {
		a.Discard()
		return fmt.Errorf("session %q seq %d: the append needs more than %d records of at most %d bytes, more than an atomic batch may hold",
			a.id, a.curFirst, MaxBatchRecords, a.s.MaxMsgSize)
	}
	h := recordHeader(a.tok, a.curFirst, a.curCount)
	a.opts.setExtra(h)
	setBlobHeaders(h, a.curBlobs)
	a.curBlobs, a.curBlobH = nil, 0
	if a.parts == 1 {
		h.Set(natsjs.ExpectedLastSubjSeqHeader, strconv.FormatUint(a.expected, 10))
	}
	// The filled buffer becomes the held record's; the next record fills the buffer of the
	// record sent last (nats.go copies a message's data before Publish returns).
	a.held = &nats.Msg{Subject: a.subject, Header: h, Data: a.cur}
	a.cur, a.spare, a.curCount = a.spare[:0], nil, 0
	return nil
}

// send adds m to the atomic batch (started by the first record sent), with its part msg id.
func (a *StreamAppend) send(ctx context.Context, m *nats.Msg) error {
	if a.bp == nil {
		bp, err := jetstreamext.NewBatchPublisher(a.s.JS, jetstreamext.BatchFlowControl{
			AckFirst: true, AckEvery: streamAppendAckEvery, AckTimeout: a.s.JS.Options().DefaultTimeout})
		if err != nil {
			a.Discard()
			return fmt.Errorf("session %q: start atomic batch: %w", a.id, err)
		}
		a.bp = bp
	}
	if a.msgID != "" {
		m.Header.Set(natsjs.MsgIDHeader, partMsgID(a.msgID, a.bp.Size()+1))
	}
	if err := a.bp.AddMsg(m); err != nil {
		a.Discard()
		_, err = a.s.appendErr(ctx, a.id, a.subject, a.expected, a.msgID, err)
		return err
	}
	a.held, a.spare = nil, m.Data
	return nil
}

// Commit writes what was added: one guarded record when it all fits in one, else the batch's
// last record with the commit. Errors are Append's (a wrapped ErrConflict when the guard fails:
// nothing is stored), or, with a msg id, a wrapped ErrOutcomeUnknown when no answer came (see
// there). Without a msg id an unanswered write is reported as it failed. After Commit, the
// StreamAppend is closed.
func (a *StreamAppend) Commit(ctx context.Context) (AppendResult, error) {
	if a.closed {
		return AppendResult{}, fmt.Errorf("append to session %q: the stream append is closed", a.id)
	}
	if a.curCount == 0 && a.held == nil {
		a.Discard()
		return AppendResult{}, recordErr(a.id, -1, 0, session.RuleRecordEmpty, "no events to encode")
	}
	if a.curCount > 0 {
		if err := a.seal(ctx); err != nil {
			return AppendResult{}, err
		}
	}
	last := a.held
	a.held = nil
	if a.msgID != "" {
		last.Header.Set(natsjs.MsgIDHeader, a.msgID)
	}
	a.closed = true
	if a.bp == nil {
		return a.s.publishRetrying(ctx, a.id, a.subject, a.expected, a.msgID, last)
	}
	sent := time.Now()
	ack, err := a.bp.CommitMsg(ctx, last)
	if err == nil {
		return AppendResult{StreamSeq: ack.Sequence}, nil
	}
	res, err := a.s.appendErr(ctx, a.id, a.subject, a.expected, a.msgID, err)
	if err == nil || !commitOutcomeUnknown(err) || a.msgID == "" {
		return res, err
	}
	return a.s.awaitCommit(ctx, a.id, a.subject, a.msgID, sent, err)
}

// publishRetrying publishes one guarded record; with a msg id, a publish without an answer is
// retried with the same id (deduplicated, or found at the tail, when an earlier try was stored)
// for up to 30 s, then reported as a wrapped ErrOutcomeUnknown.
func (s *Store) publishRetrying(ctx context.Context, id, subject string, expected uint64, msgID string, m *nats.Msg) (AppendResult, error) {
	ack, err := s.JS.PublishMsg(ctx, m)
	if err == nil {
		return AppendResult{StreamSeq: ack.Sequence, Duplicate: ack.Duplicate}, nil
	}
	res, err := s.appendErr(ctx, id, subject, expected, msgID, err)
	if err == nil || !commitOutcomeUnknown(err) || msgID == "" {
		return res, err
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for attempt := 0; attempt < 5 && wctx.Err() == nil; attempt++ {
		time.Sleep(time.Duration(100<<attempt) * time.Millisecond)
		ack, perr := s.JS.PublishMsg(wctx, m)
		if perr == nil {
			return AppendResult{StreamSeq: ack.Sequence, Duplicate: ack.Duplicate}, nil
		}
		if res, err = s.appendErr(wctx, id, subject, expected, msgID, perr); err == nil || !commitOutcomeUnknown(err) {
			return res, err
		}
	}
	return AppendResult{}, fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
}

// ErrOutcomeUnknown is returned (wrapped) by StreamAppend.Commit when its write got no answer:
// a single record retried with its msg id for 30 s, or a batch whose last record was not found at
// the session's tail within the server's batch timeout. It may still, rarely, have been stored;
// the caller checks the session's log.
var ErrOutcomeUnknown = errors.New("the outcome of the write is unknown")

// commitOutcomeUnknown reports whether a failed commit may still have been stored: anything but a
// JetStream API refusal or a guard conflict.
func commitOutcomeUnknown(err error) bool {
	var api *natsjs.APIError
	return !errors.Is(err, ErrConflict) && !errors.As(err, &api)
}

// batchCommitWait is how long after a commit without an answer awaitCommit looks for it: past the
// server's batch timeout (10 s), a batch whose commit had not arrived is abandoned.
const batchCommitWait = 12 * time.Second

// awaitCommit looks, through the stream leader, for the record with msgID at the tail of the
// session until batchCommitWait after sent: found means the batch was committed (a lost ack).
func (s *Store) awaitCommit(ctx context.Context, id, subject, msgID string, sent time.Time, cause error) (AppendResult, error) {
	wctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), sent.Add(batchCommitWait))
	defer cancel()
	for {
		last, err := s.leaderLastMsg(wctx, subject)
		if err == nil && last.Header.Get(natsjs.MsgIDHeader) == msgID {
			return AppendResult{StreamSeq: last.Sequence, Duplicate: true}, nil
		}
		select {
		case <-wctx.Done():
			return AppendResult{}, fmt.Errorf("append to session %q: %w: no answer to the batch commit and its last record (msg id %q) is not at the tail: %w",
				id, ErrOutcomeUnknown, msgID, cause)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Discard drops what was added; a batch started is abandoned (the server drops it after its batch
// timeout; nothing of it is ever visible). Discard is idempotent.
func (a *StreamAppend) Discard() {
	if a.bp != nil && !a.bp.IsClosed() {
		_ = a.bp.Discard()
	}
	a.closed, a.held, a.cur = true, nil, nil
}
