package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// ErrConflict is returned (wrapped) when the Nats-Expected-Last-Subject-Sequence guard fails
// (IsWrongLastSequence: JetStream error 10071, or 10164 on replicated streams).
var ErrConflict = errors.New("the session's last record is not the expected one (guard conflict)")

// AppendResult reports a committed record.
type AppendResult struct {
	StreamSeq uint64 // stream sequence of the (last) record written
	Duplicate bool   // the server deduplicated it by Nats-Msg-Id: an earlier try was stored
}

// AppendOpt is an option of Session.Append and Session.BeginAppend.
type AppendOpt func(*appendOpts) error

type appendOpts struct {
	msgID string   // "" when WithMsgID was not given
	extra []string // WithHeaders: key, value, key, value...
	hold  int      // HoldRecords: bytes; 0 for none
	// OnStored: called after each record of a held run but the last
	onStored func(stored int) error
}

// OnStored has a held run's Commit (HoldRecords) call fn after each record it stored but the last,
// with the records stored so far; an error from fn stops the Commit there (returned as is, the
// records stored so far left): for tests that cut a run part-way, and progress reports.
func OnStored(fn func(stored int) error) AppendOpt {
	return func(o *appendOpts) error {
		o.onStored = fn
		return nil
	}
}

// HoldRecords makes a StreamAppend (BeginAppend) keep its records, up to bytes of bodies in all,
// and publish them at Commit one after the other, each guarded by the one before, instead of as
// an atomic batch: the caller makes the run visible as a whole by other means (a fork child's
// wire.IncompleteHeader). A longer run falls back to the atomic batch. Append ignores it.
func HoldRecords(bytes int) AppendOpt {
	return func(o *appendOpts) error {
		if bytes <= 0 {
			return fmt.Errorf("hold %d bytes of records: want > 0", bytes)
		}
		o.hold = bytes
		return nil
	}
}

// WithHeaders adds headers to the record (to every record of a split append), as key/value pairs:
// the trace context (traceparent, tracestate) of the write. A key the record format uses
// (Agentlog-*, Nats-*) is refused.
func WithHeaders(kv ...string) AppendOpt {
	return func(o *appendOpts) error {
		if len(kv)%2 != 0 {
			return errors.New("headers must be key/value pairs")
		}
		for i := 0; i < len(kv); i += 2 {
			if k := kv[i]; k == "" || strings.HasPrefix(k, "Agentlog-") || strings.HasPrefix(k, "Nats-") {
				return fmt.Errorf("header %q is not an extra record header", k)
			}
		}
		o.extra = append(o.extra, kv...)
		return nil
	}
}

// extraBytes is the wire size of the WithHeaders pairs ("key: value\r\n" each).
func (o *appendOpts) extraBytes() int {
	n := 0
	for i := 0; i+1 < len(o.extra); i += 2 {
		n += len(o.extra[i]) + len(o.extra[i+1]) + 4
	}
	return n
}

// setExtra sets the WithHeaders pairs on h.
func (o *appendOpts) setExtra(h nats.Header) {
	for i := 0; i+1 < len(o.extra); i += 2 {
		h.Set(o.extra[i], o.extra[i+1])
	}
}

// WithMsgID sends id as the record's Nats-Msg-Id, so that a retry after a lost ack is deduplicated
// (see Append). id must be unique per append, not empty, without surrounding space or line breaks.
func WithMsgID(id string) AppendOpt {
	return func(o *appendOpts) error {
		if id == "" {
			return errors.New("empty msg id (leave out WithMsgID to send none)")
		}
		if strings.TrimSpace(id) != id || strings.ContainsAny(id, "\r\n") {
			return fmt.Errorf("msg id %q has surrounding space or a line break", id)
		}
		o.msgID = id
		return nil
	}
}

// appendOptions applies opts of an append to the session. Errors name the session.
func (ss *Session) appendOptions(opts []AppendOpt) (o appendOpts, err error) {
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return o, fmt.Errorf("append to session %q: %w", ss.id, err)
		}
	}
	return o, nil
}

// recordLimit is the store's max record size, bytes; an error naming session id for a Store that
// has none (not from Provision or Open).
func (s *Store) recordLimit(id string) (int, error) {
	if s.maxMsgSize <= 0 {
		return 0, fmt.Errorf("append to session %q: the store has no max message size (use Provision or Open to get a Store)", id)
	}
	return int(s.maxMsgSize), nil
}

// Append writes events (consecutive seqs of the session) as one record guarded with
// expectedLastStreamSeq, the stream seq of the session's last record (Tail.LastStreamSeq; 0 for a
// new session, whose first event must be seq 0). A window over MaxMsgSize is split into at most
// wire.MaxBatchRecords records committed as one atomic batch. An event too large for any record is
// offloaded first: its line is stored as a blob in wire.BlobsBucket and the record names it (format 2).
// With WithMsgID, a retry whose ack was lost reports Duplicate and stores nothing (blobs it wrote
// again are orphans, for CollectBlobs). Errors: a wrapped ErrConflict (the guard failed; no record
// written), ErrEventTooLarge (over MaxEventBytes; nothing written), a *session.Error (codec), a
// failure to store a blob (no record written). The events must already be valid;
// ARCHITECTURE.md ("An append", "Large events") has the details.
func (ss *Session) Append(ctx context.Context, expectedLastStreamSeq uint64, events []session.Event, opts ...AppendOpt) (AppendResult, error) {
	s, id, tok, subject := ss.s, ss.id, ss.tok, ss.subject
	o, err := ss.appendOptions(opts)
	if err != nil {
		return AppendResult{}, err
	}
	msgID := o.msgID
	lines, body, err := wire.EncodeLines(id, events, true)
	if err != nil {
		return AppendResult{}, err
	}
	if expectedLastStreamSeq == 0 && events[0].Seq != 0 {
		return AppendResult{}, wire.RecordError(id, events[0].Seq, 0, session.RuleRecordContinue,
			"the first record of a session (expected last stream seq 0) must start at seq 0")
	}
	limit, err := s.recordLimit(id)
	if err != nil {
		return AppendResult{}, err
	}

	// A line no record of this window could hold is offloaded to a blob first (ARCHITECTURE.md,
	// "Large events"); its record then carries an empty line and a wire.HeaderBlob value.
	var blobs []wire.BlobLine
	var written time.Time
	if lines, blobs, written, err = s.offloadLarge(ctx, id, tok, expectedLastStreamSeq, &o, events, lines, limit); err != nil {
		return AppendResult{}, err
	}
	if blobs != nil && time.Since(written) > BlobMaxAgeAtPublish {
		// Stalled between the blobs and the record (a paused process): CollectBlobs may take blobs
		// this old for orphans. Write them again (new objects) before publishing.
		if lines, blobs, _, err = s.offloadLarge(ctx, id, tok, expectedLastStreamSeq, &o, events, encodedAgain(lines, blobs, events), limit); err != nil {
			return AppendResult{}, err
		}
	}

	// One record when it fits.
	h := nats.Header(wire.RecordHeader(tok, events[0].Seq, len(events)))
	h.Set(natsjs.ExpectedLastSubjSeqHeader, strconv.FormatUint(expectedLastStreamSeq, 10))
	if msgID != "" {
		h.Set(natsjs.MsgIDHeader, msgID)
	}
	o.setExtra(h)
	if blobs != nil {
		setBlobHeaders(h, blobs)
		body = bytes.Join(lines, []byte{'\n'}) // the offloaded lines left empty
	}
	if wire.HeaderWireSize(h)+len(body) <= limit {
		ack, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Header: h, Data: body})
		if err != nil {
			return s.appendErr(ctx, id, subject, expectedLastStreamSeq, msgID, err)
		}
		return AppendResult{StreamSeq: ack.Sequence, Duplicate: ack.Duplicate}, nil
	}
	return s.appendSplit(ctx, id, tok, subject, expectedLastStreamSeq, &o, events, lines, blobs, limit)
}

// offloadLarge refuses a line over the store's max event bytes, and stores every line longer than
// the inline limit of this window (what the worst-case record of its split holds) as a blob. It
// returns the lines with those left empty, and the blobs. The usual window has none: then it only
// measures the lines.
func (s *Store) offloadLarge(ctx context.Context, id, tok string, expected uint64, o *appendOpts, events []session.Event, lines [][]byte, limit int) ([][]byte, []wire.BlobLine, time.Time, error) {
	longest := 0
	for _, l := range lines {
		longest = max(longest, len(l))
	}
	inline := limit - splitWorstHeaderBytes(len(tok), events[len(events)-1].Seq, len(events), expected, len(o.msgID), o.extraBytes())
	if longest <= inline && int64(longest) <= s.MaxEventBytes() {
		return lines, nil, time.Time{}, nil
	}
	var idx []int
	for i, l := range lines {
		if maxEvent := s.MaxEventBytes(); int64(len(l)) > maxEvent {
			return nil, nil, time.Time{}, tooLargeErr(id, events[i].Seq, int64(len(l)), maxEvent)
		}
		if len(l) > inline {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return lines, nil, time.Time{}, nil
	}
	blobs, written, err := s.offload(ctx, id, tok, events, lines, idx)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	lines = append([][]byte(nil), lines...)
	for _, b := range blobs {
		lines[b.Index] = nil
	}
	return lines, blobs, written, nil
}

// encodedAgain puts back the lines offloadLarge left empty for blobs (encoding their events again).
func encodedAgain(lines [][]byte, blobs []wire.BlobLine, events []session.Event) [][]byte {
	out := append([][]byte(nil), lines...)
	for _, b := range blobs {
		out[b.Index], _ = events[b.Index].AppendJSON(nil) // encoded once already: cannot fail
	}
	return out
}

// setBlobHeaders marks h as a record of format 2 naming blobs (nothing when there are none).
func setBlobHeaders(h nats.Header, blobs []wire.BlobLine) {
	if len(blobs) == 0 {
		return
	}
	h.Set(wire.HeaderFormat, wire.RecordFormatChunks)
	for _, b := range blobs {
		h.Add(wire.HeaderBlob, b.Ref.HeaderValue())
	}
}

// splitWorstHeaderBytes is the wire size of the largest headers any record of a split append of
// n events ending at seq lastSeq can carry (a msg id of msgIDLen bytes, 0 for none, plus its part
// suffix, the batch headers jetstreamext adds, and extra bytes of WithHeaders), without wire.HeaderBlob
// values. It computes what headerWireSize would count, without building the headers.
func splitWorstHeaderBytes(tokLen int, lastSeq int64, n int, expected uint64, msgIDLen, extra int) int {
	size := len("NATS/1.0\r\n") + len("\r\n") + extra
	add := func(key string, valueLen int) { size += len(key) + valueLen + 4 }
	nLen := decimalLen(uint64(n))
	add(wire.HeaderSession, tokLen)
	add(wire.HeaderFirstSeq, decimalLen(uint64(max(lastSeq, 0))))
	add(wire.HeaderCount, nLen)
	add(wire.HeaderFormat, len(wire.RecordFormat))
	add(natsjs.ExpectedLastSubjSeqHeader, decimalLen(expected))
	if msgIDLen > 0 {
		add(natsjs.MsgIDHeader, msgIDLen+1+nLen) // partMsgID: "<id>~<k>"
	}
	add(jetstreamext.BatchIDHeader, 22) // a nuid
	add(jetstreamext.BatchSeqHeader, nLen)
	add(jetstreamext.BatchCommitHeader, 1)
	return size
}

// decimalLen is the number of decimal digits of v.
func decimalLen(v uint64) int {
	n := 1
	for v >= 10 {
		v /= 10
		n++
	}
	return n
}

// appendSplit cuts lines into records within limit and commits them as one atomic batch. A blob's
// line is empty; its wire.HeaderBlob value goes into the record that holds its seq.
func (s *Store) appendSplit(ctx context.Context, id, tok, subject string, expected uint64, o *appendOpts, events []session.Event, lines [][]byte, blobs []wire.BlobLine, limit int) (AppendResult, error) {
	msgID := o.msgID
	// Worst-case headers of any part: every number takes at most as many digits as its largest
	// possible value, plus the batch headers that jetstreamext adds.
	n := len(events)
	budget := limit - splitWorstHeaderBytes(len(tok), events[n-1].Seq, n, expected, len(msgID), o.extraBytes()) // bytes of body per record
	blobAt := make(map[int]wire.BlobRef, len(blobs))
	for _, b := range blobs {
		blobAt[b.Index] = b.Ref
	}

	type part struct{ from, to int } // events[from:to]
	var parts []part
	from, size := 0, 0
	for i, line := range lines {
		cost := len(line) // a blob's line is empty, and its header value counts instead
		if ref, ok := blobAt[i]; ok {
			cost = ref.HeaderBytes()
		}
		if cost > budget {
			return AppendResult{}, fmt.Errorf("session %q seq %d: %w: the event is %d bytes encoded (plus %d bytes of record headers), the max message size is %d bytes",
				id, events[i].Seq, ErrEventTooLarge, cost, limit-budget, limit)
		}
		add := cost
		if i > from {
			add++ // the "\n" separator
		}
		if i > from && size+add > budget {
			parts = append(parts, part{from, i})
			from, size, add = i, 0, cost
		}
		size += add
	}
	parts = append(parts, part{from, n})
	if len(parts) == 1 {
		// Cannot happen (the whole record did not fit), but never publish an unguarded shape.
		return AppendResult{}, fmt.Errorf("session %q seq %d: record of %d events does not fit in %d bytes but did not split", id, events[0].Seq, n, limit)
	}
	if len(parts) > wire.MaxBatchRecords {
		return AppendResult{}, fmt.Errorf("session %q seq %d..%d: the window needs %d records of at most %d bytes, more than the %d an atomic batch may hold; append fewer events at a time",
			id, events[0].Seq, events[n-1].Seq, len(parts), limit, wire.MaxBatchRecords)
	}

	bp, err := jetstreamext.NewBatchPublisher(s.js)
	if err != nil {
		return AppendResult{}, fmt.Errorf("session %q: start atomic batch: %w", id, err)
	}
	var lastMsg *nats.Msg
	for k, p := range parts {
		h := nats.Header(wire.RecordHeader(tok, events[p.from].Seq, p.to-p.from))
		for i := p.from; i < p.to; i++ {
			if ref, ok := blobAt[i]; ok {
				setBlobHeaders(h, []wire.BlobLine{{Index: i, Ref: ref}})
			}
		}
		if k == 0 {
			h.Set(natsjs.ExpectedLastSubjSeqHeader, strconv.FormatUint(expected, 10))
		}
		last := k == len(parts)-1
		o.setExtra(h)
		if msgID != "" {
			if last {
				h.Set(natsjs.MsgIDHeader, msgID)
			} else {
				h.Set(natsjs.MsgIDHeader, partMsgID(msgID, k+1))
			}
		}
		m := &nats.Msg{Subject: subject, Header: h, Data: bytes.Join(lines[p.from:p.to], []byte{'\n'})}
		if last {
			lastMsg = m
			break
		}
		if err := bp.AddMsg(m); err != nil {
			_ = bp.Discard()
			return s.appendErr(ctx, id, subject, expected, msgID, err)
		}
	}
	ack, err := bp.CommitMsg(ctx, lastMsg)
	if err != nil {
		return s.appendErr(ctx, id, subject, expected, msgID, err)
	}
	return AppendResult{StreamSeq: ack.Sequence}, nil
}

// partMsgID is the Nats-Msg-Id of record k (1-based) of a split append that is not the last.
func partMsgID(msgID string, k int) string { return msgID + "~" + strconv.Itoa(k) }

// appendErr maps a failed publish or atomic batch. When the append carries a msg id and failed
// on the guard (the session moved on) or as an atomic batch holding an already stored msg id, it
// may be the retry of an append that was committed but whose ack was lost: if the session's last
// record carries msgID, that is reported as Duplicate with its stream seq (a retry must either
// dedupe or find its own record at the tail).
func (s *Store) appendErr(ctx context.Context, id, subject string, expected uint64, msgID string, err error) (AppendResult, error) {
	conflict := IsWrongLastSequence(err)
	dupInBatch := isBatchDuplicateMsgID(err)
	if msgID != "" && (conflict || dupInBatch) {
		last, gerr := s.leaderLastMsg(ctx, subject) // not a direct get: a stale tail would misjudge
		if gerr == nil && last.Header.Get(natsjs.MsgIDHeader) == msgID {
			return AppendResult{StreamSeq: last.Sequence, Duplicate: true}, nil
		}
	}
	switch {
	case conflict:
		return AppendResult{}, fmt.Errorf("append to session %q (expected last stream seq %d): %w: %w", id, expected, ErrConflict, err)
	case dupInBatch:
		return AppendResult{}, fmt.Errorf("append to session %q (expected last stream seq %d): %w: split append with msg id %q was stored before, but the session's last record is no longer it: %w",
			id, expected, ErrConflict, msgID, err)
	}
	return AppendResult{}, fmt.Errorf("append to session %q (expected last stream seq %d): %w", id, expected, err)
}

// StreamAppend writes a long run of a session's events (a fork's seed) as records packed up to
// the store's MaxMsgSize, without holding the run: it keeps the record being filled and the one
// before it. One record is published as Append publishes one; several are one atomic batch
// (ADR-50), sent as they fill and committed by Commit, so that nothing is visible before the
// commit and the whole run is visible after it. Get one from Session.BeginAppend; it is not safe for
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
	curBlobs []wire.BlobLine // the offloaded events of the record being filled
	curBlobH int             // the header bytes their HeaderBlob values take
	held     *nats.Msg       // the last full record, not sent yet (the commit must be the last one)
	spare    []byte          // the buffer of the record sent last, for the next one
	parts    int             // records sealed so far
	bp       jetstreamext.BatchPublisher
	line     []byte
	closed   bool

	holding   bool        // HoldRecords and within its bytes: records kept for Commit, no batch
	kept      []*nats.Msg // the sealed records kept
	keptBytes int
	stored    int // records of the run stored (held runs: published one by one at Commit)
}

// streamAppendAckEvery is how many batch records StreamAppend sends between flow-control acks:
// it bounds what is buffered between the writer and the server to a few records.
const streamAppendAckEvery = 4

// BeginAppend starts a StreamAppend of the session's events after the record at stream seq
// expectedLastStreamSeq (0 for a new session, whose first event must be seq 0), with the options
// of Append (WithMsgID: the last record carries the id, the others "<id>~<k>", as a split Append).
// Errors name the session: a bad option, or a store without a max message size.
func (ss *Session) BeginAppend(expectedLastStreamSeq uint64, opts ...AppendOpt) (*StreamAppend, error) {
	s, id, tok, subject := ss.s, ss.id, ss.tok, ss.subject
	o, err := ss.appendOptions(opts)
	if err != nil {
		return nil, err
	}
	limit, err := s.recordLimit(id)
	if err != nil {
		return nil, err
	}
	// Worst-case headers of any record: seqs, counts and part numbers at their largest, plus the
	// batch headers jetstreamext adds.
	worst := nats.Header(wire.RecordHeader(tok, 1<<62, limit))
	worst.Set(natsjs.ExpectedLastSubjSeqHeader, strconv.FormatUint(^uint64(0), 10))
	if o.msgID != "" {
		worst.Set(natsjs.MsgIDHeader, partMsgID(o.msgID, wire.MaxBatchRecords))
	}
	worst.Set(jetstreamext.BatchIDHeader, strings.Repeat("x", 22)) // a nuid
	worst.Set(jetstreamext.BatchSeqHeader, strconv.Itoa(wire.MaxBatchRecords))
	worst.Set(jetstreamext.BatchCommitHeader, "1")
	o.setExtra(worst)
	a := &StreamAppend{s: s, id: id, tok: tok, subject: subject, expected: expectedLastStreamSeq, msgID: o.msgID, opts: o,
		budget: limit - wire.HeaderWireSize(worst), next: -1, holding: o.hold > 0}
	if expectedLastStreamSeq == 0 {
		a.next = 0
	}
	return a, nil
}

// Add encodes ev (its raw JSON fields already valid, as a decoded record's or a validated event's
// are) into the run. It may send the record before the one being filled. Errors: a
// *session.Error (seqs not consecutive, an event that does not encode), a wrapped ErrEventTooLarge,
// more records than wire.MaxBatchRecords, or the failure to send a batch record; after an error the
// StreamAppend is discarded.
func (a *StreamAppend) Add(ctx context.Context, ev *session.Event) error {
	line, err := ev.AppendJSON(a.line[:0])
	if err != nil {
		a.Discard()
		return wire.RecordError(a.id, ev.Seq, 0, session.RuleRecordEvent, "cannot encode event: %v", err)
	}
	a.line = line
	return a.AddLine(ctx, ev.Seq, line)
}

// AddLine is Add of the event at seq given as its record line: its compact JSON, one line of a
// stored record's body (Record.Body), copied as is. line is not retained. A line no
// record holds is offloaded to wire.BlobsBucket first; one over the store's MaxEventBytes is refused
// (ErrEventTooLarge, rule event-too-large).
func (a *StreamAppend) AddLine(ctx context.Context, seq int64, line []byte) error {
	if a.closed {
		return fmt.Errorf("append to session %q: the stream append is closed", a.id)
	}
	if (a.next >= 0 && seq != a.next) || seq < 0 {
		a.Discard()
		if a.next == 0 {
			return wire.RecordError(a.id, seq, 0, session.RuleRecordContinue,
				"the first record of a session (expected last stream seq 0) must start at seq 0")
		}
		return wire.RecordError(a.id, seq, 0, session.RuleRecordSeq, "follows seq %d in the same append; seqs must be consecutive", a.next-1)
	}
	if maxEvent := a.s.MaxEventBytes(); int64(len(line)) > maxEvent {
		a.Discard()
		return tooLargeErr(a.id, seq, int64(len(line)), maxEvent)
	}
	var blob *wire.BlobLine
	need := len(line) // what the line takes of the record's budget
	if len(line) > a.budget {
		// No record holds it: offload it (as Append does), and the record carries an empty line
		// and its wire.HeaderBlob value. The blob is stored before any record naming it is sent.
		bl, _, err := a.s.offload(ctx, a.id, a.tok, []session.Event{{Seq: seq}}, [][]byte{line}, []int{0})
		if err != nil {
			a.Discard()
			return err
		}
		blob = &bl[0]
		need = blob.Ref.HeaderBytes()
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
		blob.Index = a.curCount
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
	if a.parts > wire.MaxBatchRecords {
		a.Discard()
		return fmt.Errorf("session %q seq %d: the append needs more than %d records of at most %d bytes, more than an atomic batch may hold",
			a.id, a.curFirst, wire.MaxBatchRecords, a.s.maxMsgSize)
	}
	h := nats.Header(wire.RecordHeader(a.tok, a.curFirst, a.curCount))
	a.opts.setExtra(h)
	setBlobHeaders(h, a.curBlobs)
	a.curBlobs, a.curBlobH = nil, 0
	if a.parts == 1 {
		h.Set(natsjs.ExpectedLastSubjSeqHeader, strconv.FormatUint(a.expected, 10))
	}
	m := &nats.Msg{Subject: a.subject, Header: h, Data: a.cur}
	if a.holding {
		if a.keptBytes+len(m.Data) <= a.opts.hold {
			a.kept, a.keptBytes = append(a.kept, m), a.keptBytes+len(m.Data)
			// The next record is about as long: its buffer at the budget, not grown by appends.
			a.cur, a.curCount = make([]byte, 0, min(a.budget, a.opts.hold-a.keptBytes+a.budget)), 0
			return nil
		}
		// Longer than the hold: the kept records go into the atomic batch, the last one held.
		a.holding = false
		kept := a.kept
		a.kept, a.keptBytes = nil, 0
		for _, r := range kept {
			if a.held != nil {
				if err := a.send(ctx, a.held); err != nil {
					return err
				}
			}
			a.held = r
		}
		if a.held != nil {
			if err := a.send(ctx, a.held); err != nil {
				return err
			}
		}
	}
	// The filled buffer becomes the held record's; the next record fills the buffer of the
	// record sent last (nats.go copies a message's data before Publish returns).
	a.held = m
	a.cur, a.spare, a.curCount = a.spare[:0], nil, 0
	return nil
}

// Pending reports, before Commit, how many records the run has sealed or is filling (records)
// and whether they go as an atomic batch (batched); a run of HoldRecords within its bytes is not
// batched, and one record is atomic by itself.
func (a *StreamAppend) Pending() (records int, batched bool) {
	records = a.parts
	if a.curCount > 0 {
		records++
	}
	return records, !a.holding
}

// Stored is the number of records of the run stored so far: after a failed Commit of a held run
// (HoldRecords), the records stored before the failure (they stay).
func (a *StreamAppend) Stored() int { return a.stored }

// send adds m to the atomic batch (started by the first record sent), with its part msg id.
func (a *StreamAppend) send(ctx context.Context, m *nats.Msg) error {
	if a.bp == nil {
		bp, err := jetstreamext.NewBatchPublisher(a.s.js, jetstreamext.BatchFlowControl{
			AckFirst: true, AckEvery: streamAppendAckEvery, AckTimeout: a.s.js.Options().DefaultTimeout})
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
	if a.curCount == 0 && a.held == nil && len(a.kept) == 0 {
		a.Discard()
		return AppendResult{}, wire.RecordError(a.id, -1, 0, session.RuleRecordEmpty, "no events to encode")
	}
	if a.curCount > 0 {
		if err := a.seal(ctx); err != nil {
			return AppendResult{}, err
		}
	}
	if a.holding {
		return a.commitKept(ctx)
	}
	last := a.held
	a.held = nil
	if a.msgID != "" {
		last.Header.Set(natsjs.MsgIDHeader, a.msgID)
	}
	a.closed = true
	if a.bp == nil {
		res, err := a.s.publishRetrying(ctx, a.id, a.subject, a.expected, a.msgID, last)
		if err == nil {
			a.stored = 1
		}
		return res, err
	}
	sent := time.Now()
	ack, err := a.bp.CommitMsg(ctx, last)
	if err == nil {
		a.stored = a.parts
		return AppendResult{StreamSeq: ack.Sequence}, nil
	}
	res, err := a.s.appendErr(ctx, a.id, a.subject, a.expected, a.msgID, err)
	if err == nil || !commitOutcomeUnknown(err) || a.msgID == "" {
		return res, err
	}
	return a.s.awaitCommit(ctx, a.id, a.subject, a.msgID, sent, err)
}

// commitKept publishes the kept records of a held run (HoldRecords) in order, each guarded by the
// stream seq of the one before (the first by the run's expected seq), with part msg ids as a batch
// has them (the last carries the run's msg id). A failure leaves the records stored before it
// (Stored).
func (a *StreamAppend) commitKept(ctx context.Context) (AppendResult, error) {
	a.closed = true
	kept := a.kept
	a.kept = nil
	expected := a.expected
	var res AppendResult
	for k, m := range kept {
		m.Header.Set(natsjs.ExpectedLastSubjSeqHeader, strconv.FormatUint(expected, 10))
		msgID := a.msgID
		if msgID != "" && k < len(kept)-1 {
			msgID = partMsgID(a.msgID, k+1)
		}
		if msgID != "" {
			m.Header.Set(natsjs.MsgIDHeader, msgID)
		}
		r, err := a.s.publishRetrying(ctx, a.id, a.subject, expected, msgID, m)
		if err != nil {
			return AppendResult{}, err
		}
		a.stored++
		res.StreamSeq, res.Duplicate = r.StreamSeq, res.Duplicate || r.Duplicate
		expected = r.StreamSeq
		if fn := a.opts.onStored; fn != nil && k < len(kept)-1 {
			if err := fn(a.stored); err != nil {
				return AppendResult{}, err
			}
		}
	}
	return res, nil
}

// publishRetrying publishes one guarded record; with a msg id, a publish without an answer is
// retried with the same id (deduplicated, or found at the tail, when an earlier try was stored)
// for up to 30 s, then reported as a wrapped ErrOutcomeUnknown.
func (s *Store) publishRetrying(ctx context.Context, id, subject string, expected uint64, msgID string, m *nats.Msg) (AppendResult, error) {
	ack, err := s.js.PublishMsg(ctx, m)
	if err == nil {
		return AppendResult{StreamSeq: ack.Sequence, Duplicate: ack.Duplicate}, nil
	}
	res, err := s.appendErr(ctx, id, subject, expected, msgID, err)
	if err == nil || !commitOutcomeUnknown(err) || msgID == "" {
		return res, err
	}
	if c := context.Cause(ctx); c != nil && errors.Is(c, nats.ErrPermissionViolation) {
		// The server refused the publish (the caller's context was cancelled with the
		// violation): nothing was stored, and a retry would be refused the same way.
		return AppendResult{}, fmt.Errorf("session %q: the write was refused, nothing was stored: %w", id, c)
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for attempt := 0; attempt < 5 && wctx.Err() == nil; attempt++ {
		time.Sleep(time.Duration(100<<attempt) * time.Millisecond)
		ack, perr := s.js.PublishMsg(wctx, m)
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
	if c := context.Cause(ctx); c != nil && errors.Is(c, nats.ErrPermissionViolation) {
		return AppendResult{}, fmt.Errorf("append to session %q: the batch was refused, nothing was stored: %w", id, c) // as publishRetrying
	}
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
	a.closed, a.held, a.cur, a.kept = true, nil, nil, nil
}
