package store

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// DefaultMaxEventBytes is the default cap on one event's encoded line, bytes (64 MiB): a larger
// event is refused (ErrEventTooLarge, rule event-too-large) whether or not it could be offloaded.
const DefaultMaxEventBytes = 64 << 20

// ErrEventTooLarge is returned (wrapped) by Append when one event's encoded line is over the store's
// MaxEventBytes (rule event-too-large), or, on a store without a blob bucket, when it does not fit
// in one record. The message names the session, the event's seq, its encoded size and the limit,
// in bytes.
var ErrEventTooLarge = errors.New("event too large")

// eventTooLarge is ErrEventTooLarge as a *session.Error (rule event-too-large): errors.Is matches
// both, errors.As finds the *session.Error.
type eventTooLarge struct{ err *session.Error }

func (e *eventTooLarge) Error() string   { return e.err.Error() }
func (e *eventTooLarge) Unwrap() []error { return []error{e.err, ErrEventTooLarge} }

func tooLargeErr(id string, seq int64, size, limit int64) error {
	return &eventTooLarge{session.NewError(id, seq, 0, session.RuleEventTooLarge,
		fmt.Sprintf("%s: the event is %d bytes encoded, the max event size is %d bytes", ErrEventTooLarge, size, limit))}
}

// CheckEventSize returns a wrapped ErrEventTooLarge, naming the session, the seq, the event's
// encoded size and the limit (bytes), when ev alone could not be stored in any record of this
// store: its encoded line plus the worst-case record headers exceed MaxMsgSize. The publisher calls
// it at Append, so that such an event is refused at once instead of blocking the session's writes.
// It is cheap for the usual event: the exact encoding is computed only when a quick upper bound
// of the size passes the limit.
//
// With a blob stream (AGENTLOG_BLOBS, which Provision and Open set up) an event too large for a
// record is offloaded instead, and CheckEventSize refuses only one over MaxEventBytes (rule
// event-too-large; still a wrapped ErrEventTooLarge).
func (ss *Session) CheckEventSize(ev session.Event) error {
	s, id, tok := ss.s, ss.id, ss.tok
	if s.blobStream != nil {
		return s.checkMaxEventBytes(id, ev)
	}
	limit := int(s.maxMsgSize)
	if limit <= 0 {
		return nil
	}
	budget := limit - eventWorstHeaderBytes(len(tok), ev.Seq) - traceHeaderRoom
	size, err := encodedSizeOver(id, ev, int64(budget))
	if err != nil {
		return err
	}
	if size > int64(budget) {
		return fmt.Errorf("session %q seq %d: %w: the event is %d bytes encoded (plus up to %d bytes of record headers), the max message size is %d bytes",
			id, ev.Seq, ErrEventTooLarge, size, limit-budget, limit)
	}
	return nil
}

// checkMaxEventBytes refuses ev when its encoded line is over the cap.
func (s *Store) checkMaxEventBytes(id string, ev session.Event) error {
	limit := s.MaxEventBytes()
	size, err := encodedSizeOver(id, ev, limit)
	if err != nil {
		return err
	}
	if size > limit {
		return tooLargeErr(id, ev.Seq, size, limit)
	}
	return nil
}

// encodedSizeOver returns the size in bytes of ev's encoded line when it may exceed limit, and 0
// when a quick upper bound of it does not (the usual event, which is then not encoded). Errors: a
// *session.Error (rule record-event) for an event that does not encode.
func encodedSizeOver(id string, ev session.Event, limit int64) (int64, error) {
	// Upper bound of the encoded line: the envelope keys, the type escaped at worst 6 bytes a
	// byte, and the raw fields (encoding only ever removes whitespace from them).
	upper := 96 + 6*len(ev.Type) + len(ev.Time) + len(ev.Data) + len(ev.SurfaceOp) + len(ev.SourceEventSeqs)
	if int64(upper) <= limit {
		return 0, nil
	}
	line, err := ev.AppendJSON(nil)
	if err != nil {
		return 0, wire.RecordError(id, ev.Seq, 0, session.RuleRecordEvent, "cannot encode event: %v", err)
	}
	return int64(len(line)), nil
}

// traceHeaderRoom is the wire size of the largest trace context WithHeaders carries: traceparent
// (55 bytes) and tracestate (at most 512), each "key: value\r\n".
const traceHeaderRoom = len("traceparent: \r\n") + 55 + len("tracestate: \r\n") + 512

// eventWorstHeaderBytes is the wire size of the largest headers a record holding one event (seq
// seq, session token of tokLen bytes) can carry as a part of an atomic batch (see appendSplit),
// with room for any msg id a writer builds (a writer id of up to 64 bytes, the token, an
// incarnation and the seq). It counts what headerWireSize would, without building the headers
// (the publisher checks every event with it).
func eventWorstHeaderBytes(tokLen int, seq int64) int {
	size := len("NATS/1.0\r\n") + len("\r\n")
	add := func(key string, valueLen int) { size += len(key) + valueLen + 4 }
	add(wire.HeaderSession, tokLen)
	add(wire.HeaderFirstSeq, len(strconv.FormatInt(seq, 10)))
	add(wire.HeaderCount, 1)
	add(wire.HeaderFormat, len(wire.RecordFormat))
	add(natsjs.ExpectedLastSubjSeqHeader, len(strconv.FormatUint(^uint64(0), 10)))
	add(natsjs.MsgIDHeader, 64+2*tokLen+20+wire.MaxIncarnationBytes+1)
	add(jetstreamext.BatchIDHeader, 22) // a nuid
	add(jetstreamext.BatchSeqHeader, len(strconv.Itoa(wire.MaxBatchRecords)))
	add(jetstreamext.BatchCommitHeader, 1)
	return size
}
