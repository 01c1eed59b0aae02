package jetstream

import (
	"bytes"
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

// ErrConflict is returned (wrapped) when the Nats-Expected-Last-Subject-Sequence guard fails
// (JetStream error 10071, or 10164 on replicated streams).
var ErrConflict = errors.New("the session's last record is not the expected one (guard conflict)")

// ErrEventTooLarge is returned (wrapped) by Append when one event's encoded line is over the store's
// MaxEventBytes (rule event-too-large), or, on a store without a blob bucket, when it does not fit
// in one record. The message names the session, the event's seq, its encoded size and the limit,
// in bytes.
var ErrEventTooLarge = errors.New("event too large")

// JetStream API error codes that Append maps to ErrConflict.
const (
	ErrCodeWrongLastSequence         = 10071 // Nats-Expected-Last-Subject-Sequence mismatch
	ErrCodeWrongLastSequenceConstant = 10164 // guarded publish while the subject has a message in flight (R>1)
	errCodeBatchDuplicateMsgID       = 10201 // an atomic batch contains an already stored Nats-Msg-Id
)

// MaxBatchRecords is the most records one split Append may need: nats-server's default limit on
// the messages of one atomic batch (ADR-50).
const MaxBatchRecords = 1000

// AppendResult reports a committed record.
type AppendResult struct {
	StreamSeq uint64 // stream sequence of the (last) record written
	Duplicate bool   // the server deduplicated it by Nats-Msg-Id: an earlier try was stored
}

// AppendOpt is an option of Store.Append.
type AppendOpt func(*appendOpts) error

type appendOpts struct {
	msgID string   // "" when WithMsgID was not given
	extra []string // WithHeaders: key, value, key, value...
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

// traceHeaderRoom is the wire size of the largest trace context WithHeaders carries: traceparent
// (55 bytes) and tracestate (at most 512), each "key: value\r\n".
const traceHeaderRoom = len("traceparent: \r\n") + 55 + len("tracestate: \r\n") + 512

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

// Append writes events (consecutive seqs of session id) as one record guarded with
// expectedLastStreamSeq, the stream seq of the session's last record (Tail.LastStreamSeq; 0 for a
// new session, whose first event must be seq 0). A window over MaxMsgSize is split into at most
// MaxBatchRecords records committed as one atomic batch. An event too large for any record is
// offloaded first: its line is stored as a blob in BlobsBucket and the record names it (format 2).
// With WithMsgID, a retry whose ack was lost reports Duplicate and stores nothing (blobs it wrote
// again are orphans, for CollectBlobs). Errors: a wrapped ErrConflict (the guard failed; no record
// written), ErrEventTooLarge (over MaxEventBytes; nothing written), a *session.Error (codec), a
// failure to store a blob (no record written). The events must already be valid;
// ARCHITECTURE.md ("An append", "Large events") has the details.
func (s *Store) Append(ctx context.Context, id string, expectedLastStreamSeq uint64, events []session.Event, opts ...AppendOpt) (AppendResult, error) {
	subject, err := s.Subject(id)
	if err != nil {
		return AppendResult{}, err
	}
	tok, _ := Token(id)
	var o appendOpts
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return AppendResult{}, fmt.Errorf("append to session %q: %w", id, err)
		}
	}
	msgID := o.msgID
	lines, body, err := encodeLines(id, events, true)
	if err != nil {
		return AppendResult{}, err
	}
	if expectedLastStreamSeq == 0 && events[0].Seq != 0 {
		return AppendResult{}, recordErr(id, events[0].Seq, 0, session.RuleRecordContinue,
			"the first record of a session (expected last stream seq 0) must start at seq 0")
	}
	limit := int(s.MaxMsgSize)
	if limit <= 0 {
		return AppendResult{}, fmt.Errorf("append to session %q: the store has no max message size (use Provision or Open to get a Store)", id)
	}

	// A line no record of this window could hold is offloaded to a blob first (ARCHITECTURE.md,
	// "Large events"); its record then carries an empty line and a HeaderBlob value.
	var blobs []blobLine
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
	h := recordHeader(tok, events[0].Seq, len(events))
	h.Set(natsjs.ExpectedLastSubjSeqHeader, strconv.FormatUint(expectedLastStreamSeq, 10))
	if msgID != "" {
		h.Set(natsjs.MsgIDHeader, msgID)
	}
	o.setExtra(h)
	if blobs != nil {
		setBlobHeaders(h, blobs)
		body = bytes.Join(lines, []byte{'\n'}) // the offloaded lines left empty
	}
	if headerWireSize(h)+len(body) <= limit {
		ack, err := s.JS.PublishMsg(ctx, &nats.Msg{Subject: subject, Header: h, Data: body})
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
func (s *Store) offloadLarge(ctx context.Context, id, tok string, expected uint64, o *appendOpts, events []session.Event, lines [][]byte, limit int) ([][]byte, []blobLine, time.Time, error) {
	longest := 0
	for _, l := range lines {
		longest = max(longest, len(l))
	}
	inline := limit - splitWorstHeaderBytes(len(tok), events[len(events)-1].Seq, len(events), expected, len(o.msgID), o.extraBytes())
	if longest <= inline && int64(longest) <= s.maxEventBytes() {
		return lines, nil, time.Time{}, nil
	}
	var idx []int
	for i, l := range lines {
		if maxEvent := s.maxEventBytes(); int64(len(l)) > maxEvent {
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
		lines[b.index] = nil
	}
	return lines, blobs, written, nil
}

// encodedAgain puts back the lines offloadLarge left empty for blobs (encoding their events again).
func encodedAgain(lines [][]byte, blobs []blobLine, events []session.Event) [][]byte {
	out := append([][]byte(nil), lines...)
	for _, b := range blobs {
		out[b.index], _ = events[b.index].AppendJSON(nil) // encoded once already: cannot fail
	}
	return out
}

// setBlobHeaders marks h as a record of format 2 naming blobs (nothing when there are none).
func setBlobHeaders(h nats.Header, blobs []blobLine) {
	if len(blobs) == 0 {
		return
	}
	h.Set(HeaderFormat, RecordFormatBlobs)
	for _, b := range blobs {
		h.Add(HeaderBlob, b.ref.headerValue())
	}
}

// splitWorstHeaderBytes is the wire size of the largest headers any record of a split append of
// n events ending at seq lastSeq can carry (a msg id of msgIDLen bytes, 0 for none, plus its part
// suffix, the batch headers jetstreamext adds, and extra bytes of WithHeaders), without HeaderBlob
// values. It computes what headerWireSize would count, without building the headers.
func splitWorstHeaderBytes(tokLen int, lastSeq int64, n int, expected uint64, msgIDLen, extra int) int {
	size := len("NATS/1.0\r\n") + len("\r\n") + extra
	add := func(key string, valueLen int) { size += len(key) + valueLen + 4 }
	nLen := decimalLen(uint64(n))
	add(HeaderSession, tokLen)
	add(HeaderFirstSeq, decimalLen(uint64(max(lastSeq, 0))))
	add(HeaderCount, nLen)
	add(HeaderFormat, len(RecordFormat))
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
// line is empty; its HeaderBlob value goes into the record that holds its seq.
func (s *Store) appendSplit(ctx context.Context, id, tok, subject string, expected uint64, o *appendOpts, events []session.Event, lines [][]byte, blobs []blobLine, limit int) (AppendResult, error) {
	msgID := o.msgID
	// Worst-case headers of any part: every number takes at most as many digits as its largest
	// possible value, plus the batch headers that jetstreamext adds.
	n := len(events)
	budget := limit - splitWorstHeaderBytes(len(tok), events[n-1].Seq, n, expected, len(msgID), o.extraBytes()) // bytes of body per record
	blobAt := make(map[int]BlobRef, len(blobs))
	for _, b := range blobs {
		blobAt[b.index] = b.ref
	}

	type part struct{ from, to int } // events[from:to]
	var parts []part
	from, size := 0, 0
	for i, line := range lines {
		cost := len(line) // a blob's line is empty, and its header value counts instead
		if ref, ok := blobAt[i]; ok {
			cost = ref.blobHeaderBytes()
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
	if len(parts) > MaxBatchRecords {
		return AppendResult{}, fmt.Errorf("session %q seq %d..%d: the window needs %d records of at most %d bytes, more than the %d an atomic batch may hold; append fewer events at a time",
			id, events[0].Seq, events[n-1].Seq, len(parts), limit, MaxBatchRecords)
	}

	bp, err := jetstreamext.NewBatchPublisher(s.JS)
	if err != nil {
		return AppendResult{}, fmt.Errorf("session %q: start atomic batch: %w", id, err)
	}
	var lastMsg *nats.Msg
	for k, p := range parts {
		h := recordHeader(tok, events[p.from].Seq, p.to-p.from)
		for i := p.from; i < p.to; i++ {
			if ref, ok := blobAt[i]; ok {
				setBlobHeaders(h, []blobLine{{index: i, ref: ref}})
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
	var apiErr *natsjs.APIError
	isAPI := errors.As(err, &apiErr)
	conflict := isAPI && (apiErr.ErrorCode == ErrCodeWrongLastSequence || apiErr.ErrorCode == ErrCodeWrongLastSequenceConstant)
	dupInBatch := isAPI && apiErr.ErrorCode == errCodeBatchDuplicateMsgID
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

// eventWorstHeaderBytes is the wire size of the largest headers a record holding one event (seq
// seq, session token of tokLen bytes) can carry as a part of an atomic batch (see appendSplit),
// with room for any msg id a writer builds (a writer id of up to 64 bytes, the token, an
// incarnation and the seq). It counts what headerWireSize would, without building the headers
// (the publisher checks every event with it).
func eventWorstHeaderBytes(tokLen int, seq int64) int {
	size := len("NATS/1.0\r\n") + len("\r\n")
	add := func(key string, valueLen int) { size += len(key) + valueLen + 4 }
	add(HeaderSession, tokLen)
	add(HeaderFirstSeq, len(strconv.FormatInt(seq, 10)))
	add(HeaderCount, 1)
	add(HeaderFormat, len(RecordFormat))
	add(natsjs.ExpectedLastSubjSeqHeader, len(strconv.FormatUint(^uint64(0), 10)))
	add(natsjs.MsgIDHeader, 64+2*tokLen+20+MaxIncarnationBytes+1)
	add(jetstreamext.BatchIDHeader, 22) // a nuid
	add(jetstreamext.BatchSeqHeader, len(strconv.Itoa(MaxBatchRecords)))
	add(jetstreamext.BatchCommitHeader, 1)
	return size
}

// CheckEventSize returns a wrapped ErrEventTooLarge, naming the session, the seq, the event's
// encoded size and the limit (bytes), when ev alone could not be stored in any record of this
// store: its encoded line plus the worst-case record headers exceed MaxMsgSize. The publisher calls
// it at Append, so that such an event is refused at once instead of blocking the session's writes.
// It is cheap for the usual event: the exact encoding is computed only when a quick upper bound
// of the size passes the limit.
//
// With a blob bucket (Store.Blobs, which Provision and Open set up) an event too large for a record
// is offloaded instead, and CheckEventSize refuses only one over MaxEventBytes (rule
// event-too-large; still a wrapped ErrEventTooLarge).
func (s *Store) CheckEventSize(id string, ev session.Event) error {
	if s.Blobs != nil {
		return s.checkMaxEventBytes(id, ev)
	}
	tok, err := Token(id)
	if err != nil {
		return err
	}
	limit := int(s.MaxMsgSize)
	if limit <= 0 {
		return nil
	}
	budget := limit - eventWorstHeaderBytes(len(tok), ev.Seq) - traceHeaderRoom
	// Upper bound of the encoded line: the envelope keys, the type escaped at worst 6 bytes a
	// byte, and the raw fields (encoding only ever removes whitespace from them).
	upper := 96 + 6*len(ev.Type) + len(ev.Time) + len(ev.Data) + len(ev.SurfaceOp) + len(ev.SourceEventSeqs)
	if upper <= budget {
		return nil
	}
	line, err := ev.AppendJSON(nil)
	if err != nil {
		return recordErr(id, ev.Seq, 0, session.RuleRecordEvent, "cannot encode event: %v", err)
	}
	if len(line) > budget {
		return fmt.Errorf("session %q seq %d: %w: the event is %d bytes encoded (plus up to %d bytes of record headers), the max message size is %d bytes",
			id, ev.Seq, ErrEventTooLarge, len(line), limit-budget, limit)
	}
	return nil
}
